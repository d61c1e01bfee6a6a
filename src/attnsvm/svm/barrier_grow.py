"""The nuclear interior-point method with constraint generation inside one run (one path for the working set).

The working-set method (:func:`attnsvm.svm.working_set.solve_nuclear_ws`) solves the nuclear SVM of a row
subset, checks all N rows and solves again on the enlarged subset: every round a full run of the
interior-point method of :mod:`attnsvm.svm.ipm` (~25 iterations from the Frobenius start). Here the
rows outside the subset are checked *during* one run instead, against the primal iterate ``X12`` at
every iteration once the relative duality gap is below 0.1 (and when the subset is solved): the
violated rows join the running problem with the slack ``max(m_k - rhs_k, 0) + sqrt(mu)`` and the
multiplier ``mu / s_k`` (on the central path), together with up to twice as many rows that the iterate nearly
violates (:func:`join_with_band`: each join makes the path retreat, so rows about to be violated join early), the
multipliers are then scaled into the spectral-norm ball (:func:`_into_ball`), and the path-following goes on.
Between gaps 1e-3 and ``100 tol`` clearly slack rows leave (:func:`_drop`). Rows that are still violated by
more than 1e-3 when the gap is below 1e-4 join once (``late_joins``: the path retreats, ~10 iterations, where
a further round of the caller costs ~25); after that they do not join, the run ends on its subset and leaves
them to the caller's next round.

Everything the method computes about the subset is :mod:`attnsvm.svm.ipm`'s (same Newton system,
step rule, stopping test and clean-up). The bases are those of *all* rows (the u side: the rows
themselves when ``d1 <= N``; the w side: the span of all distinct w's), so a joining row never changes
the coordinates of the iterate. The result is the subset's :class:`~attnsvm.svm.ipm.IPMResult`
mapped to all N rows (multipliers zero outside the final subset); the caller checks every row and
certifies, as after any working-set round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from attnsvm.svm.ipm import (IPMResult, Iterate, PathState, Problem, RowSet, chol_S, ipm_arrays, ipm_result,
                             start_point, trace, tracing)
from attnsvm.svm.settings import SolverSettings

__all__ = ["GrowthLimits", "nuclear_ipm_grow"]


def _violated(allr: RowSet, X12: np.ndarray, in_set: np.ndarray, thr: float) -> np.ndarray:
    """Indices of the live rows outside the subset whose (scaled) violation exceeds ``thr``, and the largest
    violation among them (0 when none)."""
    new, v = rows_outside(allr, X12, in_set, thr)
    return new, float(v[new].max()) if new.size else 0.0


def rows_outside(allr: RowSet, X12: np.ndarray, in_set: np.ndarray, thr: float) -> tuple[np.ndarray, np.ndarray]:
    """``(idx, v)``: the indices of the live rows outside the subset whose (scaled) violation ``v`` (N,) exceeds
    ``thr`` (``|rhs_k - m_k|`` on equality rows, ``rhs_k - m_k`` else; a negative ``thr`` takes in satisfied rows)."""
    v = allr.rhs - allr.margins(X12)
    v = np.where(allr.eq, np.abs(v), v)
    return np.flatnonzero((v > thr) & allr.live & ~in_set), v


#: rows whose margin is within this band above their right-hand side (relative to ``1 + max |rhs|``) join with the
#: violated rows, at most :data:`JOIN_BAND_SHARE` times as many as those (see :func:`join_with_band`)
JOIN_BAND = 0.05
JOIN_BAND_SHARE = 2.0


def join_with_band(allr: RowSet, X12: np.ndarray, in_set: np.ndarray, new: np.ndarray, vscale: float,
               room: int) -> np.ndarray:
    """The joining rows ``new`` (violated; indices, ascending) with the rows outside the subset that ``X12`` nearly
    violates: margin below ``rhs_k +`` :data:`JOIN_BAND` ``* vscale``, the least slack first, at most
    :data:`JOIN_BAND_SHARE` ``* new.size`` and ``room`` of them. A violated row joins with the slack and multiplier
    of :func:`_join` and leaves the iterate primal infeasible by its violation plus ``sqrt(mu)``, whose repair costs
    the path a few iterations at every join (the multipliers are scaled back into the ball, mu and the gap move up); a
    nearly active row joins before it is violated, with the violated rows' join, and saves a later join of its own
    (measured in docs/guide/performance.md, "Nuclear iterations"). Rows that stay inactive may leave (:func:`_drop`)."""
    k = min(int(JOIN_BAND_SHARE * new.size), room)
    if k <= 0:
        return new
    near, v = rows_outside(allr, X12, in_set, -JOIN_BAND * vscale)
    near = near[~np.isin(near, new)]
    near = near[np.argsort(-v[near], kind="stable")[:k]]
    return np.union1d(new, near)


def _join(allr: RowSet, rows: np.ndarray, x: Iterate, new: np.ndarray, mu: float):
    """The subset ``rows`` with the rows ``new`` added (ascending) and the iterate extended to it: each new
    inequality row gets the slack ``max(m_k - rhs_k, 0) + sqrt(mu)`` and the multiplier ``mu / s_k``
    (equality rows: multiplier 0); the multipliers are then shrunk until ``||G|| < 1`` holds with room."""
    rows2 = np.union1d(rows, new)
    pos_old = np.searchsorted(rows2, rows)
    pos_new = np.searchsorted(rows2, new)
    lam = np.zeros(rows2.size)
    lam[pos_old] = x.lam
    eq2 = allr.eq[rows2]
    s_full = np.zeros(rows2.size)
    s_full[pos_old[~allr.eq[rows]]] = x.s
    marg = np.einsum("kj,kj->k", allr.A[new], (allr.Bq[allr.qinv[new]] @ x.X12.T))
    s_new = np.maximum(marg - allr.rhs[new], 0.0) + np.sqrt(mu)
    ineq_new = ~allr.eq[new]
    s_full[pos_new[ineq_new]] = s_new[ineq_new]
    lam[pos_new[ineq_new]] = mu / s_new[ineq_new]
    pb = allr.problem(rows2)
    lam = _into_ball(pb, lam)
    x2 = Iterate(lam, x.X11, x.X12, x.X22, s_full[~eq2])
    return rows2, pb, x2


#: factors tried in turn by :func:`_into_ball`
_SHRINK = (1.0, 1 - 1e-6, 1 - 1e-5, 1 - 1e-4, 1 - 1e-3, 0.997, 0.99, 0.97, 0.9, 0.8, 0.6, 0.4, 0.2, 0.1, 0.01, 1e-3, 1e-4,
           1e-6)


def _into_ball(pb: Problem, lam: np.ndarray) -> np.ndarray:
    """``theta^2 lam`` for the first ``theta`` of :data:`_SHRINK` that keeps the dual strictly inside the
    spectral-norm ball ``||G(lam)|| < 1`` (the square leaves room for the first step)."""
    for th in _SHRINK:
        if chol_S(pb.Gmap(th * lam)) is not None:
            return th * th * lam
    raise np.linalg.LinAlgError("no strictly dual feasible multipliers for the changed subset")


def _drop(allr: RowSet, rows: np.ndarray, x: Iterate, slack: float, small: float, least: float):
    """The subset without its clearly inactive inequality rows (slack above ``slack`` and multiplier below
    ``small`` times the largest), or None when fewer than ``least`` times the subset's rows are."""
    eq = allr.eq[rows]
    s_full = np.zeros(rows.size)
    s_full[~eq] = x.s
    idle = ~eq & (s_full > slack) & (x.lam < small * float(np.max(np.abs(x.lam))))
    if idle.sum() < max(1.0, least * rows.size) or idle.all():
        return None
    keep = ~idle
    rows2 = rows[keep]
    pb = allr.problem(rows2)
    lam = _into_ball(pb, x.lam[keep])
    return rows2, pb, Iterate(lam, x.X11, x.X12, x.X22, s_full[keep][~eq[keep]])


#: the subset is checked against all rows at every iteration once the relative gap is below this (and when it is solved)
_CHECK_GAP = 0.1


class _Growth:
    """The growing subset of one run of :func:`nuclear_ipm_grow`: its rows (indices, ascending), the rules for rows
    that join and leave, and the run's record of them (``joined``, ``dropped``, ``checks``, ``max_size``;
    ``info["late_joins"]``).

    Rows leave between the gaps ``100 tol`` and 1e-3 when their slack exceeds 0.5% of ``1 + max |rhs|`` and their
    multiplier is below 1e-3 of the largest (at least 5% of the subset at once). The slack bar sits below the band's
    width (:data:`JOIN_BAND`), so the band's rows that stay inactive can leave; at 5% they stayed, at 0.05% dropped
    rows came back (docs/guide/performance.md, "Nuclear iterations"). Rows still violated by more than 1e-3 below
    the gap 1e-4 join ``late_joins`` times, then are left to the caller.
    """

    def __init__(self, allr: RowSet, rows: np.ndarray, tol: float, feas_tol: float, max_rows, late_joins: int,
                 info: dict):
        self.allr, self.rows, self.feas_tol, self.max_rows, self.info = allr, rows, feas_tol, max_rows, info
        # the threshold of a violated row: the subset's own violation measure (relative to 1 + max |rhs|)
        self.vscale = 1.0 + float(np.max(np.abs(allr.rhs[allr.live])))
        self.drop_low, self.drop_gap, self.drop_slack, self.drop_small, self.drop_least = (100.0 * tol, 1e-3, 0.005,
                                                                                           1e-3, 0.05)
        self.late_gap, self.late_viol, self.late_left = 1e-4, 1e-3, int(late_joins)
        info["late_joins"] = 0
        self.joined: list = []
        self.dropped: list = []
        self.checks = 0
        self.max_size = rows.size

    def check(self, pb: Problem, x: Iterate, path: PathState, gap: float, viol: float, mu: float, optimal: bool):
        """Check all rows against the iterate ``x`` of the subset's problem ``pb`` (the best iterate when
        ``optimal``): ``"stop"`` when the run ends optimal and leaves violated rows to the caller, ``(pb, x)`` the
        changed subset's problem and iterate when rows joined or left (``path`` restarted), else None."""
        allr, N, vscale, rows, info = self.allr, self.allr.N, self.vscale, self.rows, self.info
        self.checks += 1
        X12 = path.best[3] if optimal else x.X12
        thr = max(2.0 * viol, 10.0 * self.feas_tol) * vscale
        in_set = np.isin(np.arange(N), rows)
        new, vmax = _violated(allr, X12, in_set, thr)
        late = gap < self.late_gap and vmax > self.late_viol * vscale
        too_many = self.max_rows is not None and rows.size + new.size > self.max_rows
        if late and self.late_left > 0 and not too_many:     # join now: cheaper than a further round
            late, self.late_left = False, self.late_left - 1
            info["late_joins"] += 1
        if too_many or late:
            if optimal and new.size:        # leave these rows to the caller's next round
                path.status = "optimal"
                info["stopped"] = "rows left to join"
                self.joined.append(-int(new.size))
                return "stop"
            new = new[:0]
        if new.size:
            new = join_with_band(allr, X12, in_set, new, vscale, (N if self.max_rows is None else self.max_rows)
                             - rows.size - new.size)
        self.joined.append(int(new.size))
        changed = None
        if self.drop_low < gap <= self.drop_gap and not optimal:
            out = _drop(allr, rows, x, self.drop_slack * vscale, self.drop_small, self.drop_least)
            if out is not None:
                self.dropped.append(int(rows.size - out[0].size))
                if tracing():
                    trace("drop", rows=self.dropped[-1], N=int(out[0].size))
                self.rows, pb, x = out
                path.restart()
                changed = (pb, x)
        if new.size:
            self.rows, pb, x = _join(allr, self.rows, x, new, mu)
            if tracing():
                trace("join", rows=int(new.size), N=int(self.rows.size))
            self.max_size = max(self.max_size, self.rows.size)
            path.restart()
            path.status = "inaccurate"
            changed = (pb, x)
        return changed


@dataclass(frozen=True)
class GrowthLimits:
    """The limits of one growing run of :func:`nuclear_ipm_grow` (see its ``limits``): ``max_iter`` iterations,
    ``max_rows`` rows in the subset (None: no limit) and ``late_joins`` late joins."""

    max_iter: int = 200
    max_rows: int | None = None
    late_joins: int = 1


def nuclear_ipm_grow(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, is_equality: np.ndarray, start_rows: np.ndarray,
                     *, lam_init: np.ndarray | None = None, W_init: np.ndarray | None = None,
                     settings: SolverSettings | None = None, limits: GrowthLimits | None = None,
                     verbose: bool = False, backend=None):
    """``min ||W||_* s.t. u_k^T W w_k >= rhs_k`` on a growing subset of the N rows (see the module docstring).

    Parameters
    ----------
    U : (N, d1), V : (N, d2), rhs : (N,), is_equality : (N,) bool
        All rows (a feasible set; feasibility is decided by the caller).
    start_rows : (N,) bool, the first subset (e.g. the Frobenius support and the equality rows)
    lam_init : (N,) optional multipliers to start from; W_init : (d1, d2) optional primal start
    settings : :class:`~attnsvm.svm.settings.SolverSettings` (default ``SolverSettings()``): ``gap_tol`` (the
        relative duality gap on the final subset; None: that of the working set's subsets,
        :meth:`~attnsvm.svm.settings.SolverSettings.resolved`), ``feas_tol`` and ``time_limit`` as the ``gap_tol``,
        ``feas_tol`` and ``time_limit`` of :func:`attnsvm.svm.ipm.nuclear_ipm` (checked when the object was built:
        not checked again)
    verbose, backend : as :func:`attnsvm.svm.ipm.nuclear_ipm`
    limits : :class:`GrowthLimits` (default ``GrowthLimits()``): ``max_iter`` iterations of the whole run;
        ``max_rows`` largest subset (None: no limit), rows stop joining when it would be exceeded;
        ``late_joins`` how many times rows still join "late" (gap below 1e-4, violation above 1e-3): each such
        join makes the path retreat (about 10 iterations on the probe's instances) where leaving the rows
        to the caller costs a whole further round (about 25 from the Frobenius start); later ones are left to
        the caller (``info["late_joins"]``: how many joined late)

    Returns
    -------
    ``(res, rows)``: :class:`~attnsvm.svm.ipm.IPMResult` over all N rows (multipliers zero outside
    the final subset; ``info["joined"]`` the rows added per check, ``info["checks"]``) and the final
    subset as a bool mask (N,). Rows outside it may still be violated at the end (the caller checks).
    """
    t0 = time.perf_counter()
    settings = (SolverSettings() if settings is None else settings).resolved("nuclear", "working_set")
    limits = GrowthLimits() if limits is None else limits
    max_iter, max_rows, late_joins = limits.max_iter, limits.max_rows, limits.late_joins
    tol = settings.gap_tol
    feas_tol, time_limit = settings.feas_tol, settings.time_limit
    U, V, rhs, eq, N, d1, d2 = ipm_arrays(U, V, rhs, is_equality)
    info: dict = {"method": "primal-dual interior point (HKM, Mehrotra) with rows joining during the run"}
    allr = RowSet(U, V, rhs, eq)
    in_set = np.asarray(start_rows, bool).copy()
    if allr.empty:
        info.update(iterations=0, rel_gap=0.0, violation=0.0, seconds=time.perf_counter() - t0, joined=[])
        return IPMResult("optimal", np.zeros((d1, d2)), np.zeros(N), info), in_set
    info["reduced_shape"] = allr.reduced_shape
    rows = np.flatnonzero(in_set & allr.live)
    pb = allr.problem(rows)
    if backend is not None:
        info["device"] = backend.name
    red = allr.reduction(pb, rows)
    x = Iterate(*start_point(pb, None if lam_init is None else np.asarray(lam_init, float)[rows], red.M_init(W_init)))
    path = PathState(tol, feas_tol, t0, time_limit, verbose, info, backend)
    grow = _Growth(allr, rows, tol, feas_tol, max_rows, late_joins, info)
    it = 0
    for it in range(1, max_iter + 1):
        ev = path.evaluate(pb, x, it, grow.rows.size)
        if ev is None:
            break
        du, mu, (_, _, gap, viol), test = ev
        optimal, _, reason = test
        if (gap <= _CHECK_GAP or optimal) and reason != "time limit":
            changed = grow.check(pb, x, path, gap, viol, mu, optimal)
            if changed == "stop":
                break
            if changed is not None:
                pb, x = changed
                continue
        x_next = path.advance(pb, x, du, mu, test)
        if x_next is None:
            break
        x = x_next
    else:
        info["stopped"] = "iteration limit"
    rows = grow.rows
    info.update(joined=grow.joined, dropped=grow.dropped, checks=grow.checks, max_rows=int(grow.max_size))
    red = allr.reduction(pb, rows)
    res = ipm_result(red, path.final_best(pb, x), path.status, it, info, N, tol, feas_tol, time.perf_counter() - t0)
    mask = np.zeros(N, bool)
    mask[rows] = True
    return res, mask
