"""Working-set (cutting-plane) solvers: exact SVMs with N up to millions of rows in O(N d) memory.

A hard-margin SVM ``min ||W|| s.t. u_k^T W w_k >= rhs_k`` rests on few support rows
(a dual solution with at most ``d1 d2`` nonzeros exists), and checking every margin of
a candidate W costs ``O(q d1 d2 + N d1)`` for q distinct queries
(:mod:`attnsvm.svm.row_values`). So the outer loop here

1. solves the problem *exactly* on a working subset S of rows (Frobenius: the min-norm-point
   form of its dual on the s x s Gram matrix of S, kept up to date incrementally, by a
   primal-dual active-set method that reuses one Cholesky factor across iterations and
   rounds (:class:`~attnsvm.svm.pdas.BasePDAS`), falling back to the dense solvers of :mod:`attnsvm.svm.qp`;
   nuclear: :func:`~attnsvm.svm.nuclear.solve_nuclear`, the reduced interior-point method,
   on the subset),
2. computes all N margins of its solution in one streaming pass,
3. stops if no row is violated (beyond ``feas_tol``): the subset optimum is feasible for
   all rows and optimal for a relaxation, hence optimal;
4. otherwise drops the inequality rows of S whose multiplier is zero (the subset optimum
   does not change) and adds the most violated rows (largest violation relative to
   ``||u_k w_k^T||``, at most ``per_group`` rows of one query per round), and repeats.

Every Frobenius round strictly increases the subset optimum (the old solution violates a
new row and the optimum of a strictly convex problem is unique), so no working set
repeats and the loop ends. A subset that is infeasible proves the whole problem
infeasible: its Farkas multipliers, zero outside S, are a certificate for all N rows
(verified before it is returned: relative residual <= :data:`FARKAS_RESIDUAL`).

The certificate of the result is computed over all N rows with the package's relative
measures (:class:`~attnsvm.svm.solution.Certificate`): the max violation from the final
streaming pass, the duality gap from the subset's multipliers (zero outside S, dual
feasible for the full problem, so their dual value is a lower bound by weak duality).
Rows are used scaled by powers of two (:class:`_Setup`; no copy of U or V), so mixed data
scales work; row sizes beyond ``2^+-400`` are refused (:class:`ScaleError`). Memory: the
constraint set (``O(N (d1 + d2))``), a few N-vectors, chunked temporaries and ``O(s^2)``
for the working set (refused beyond ``max_memory``); time per round ``O(q d1 d2 + N d1)``
for the margins plus the subset solve.

:func:`attnsvm.svm.dispatch.solve_dispatch` chooses between the dense solvers and these
(``method="auto"``: the working set above :data:`~attnsvm.svm.dispatch.AUTO_DENSE_MAX_N` rows,
or when the dense N x N matrices would not fit in memory). The subset QP's factorization is
:mod:`attnsvm.svm.pdas`.
"""

from __future__ import annotations

import contextlib

import time

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.memory import require_memory
from attnsvm.svm.constraints import ConstraintSet, row_gram
from attnsvm.svm.options import FrobeniusWSOptions, NuclearOptions, NuclearWSOptions
from attnsvm.svm.settings import SolverSettings
from attnsvm.svm.pdas import BasePDAS, principal_submatrix, factor_threads
from attnsvm.svm.qp import QPResult, solve_gram_qp
from attnsvm.svm.row_values import QueryGroups, constraint_values, query_groups, row_norms
from attnsvm.svm.reductions import RowScaling, RowSubset
from attnsvm.svm.result import (build_solution, farkas_residual, fro_certificate, infeasible_solution, no_solution,
                                 nuclear_certificate)
from attnsvm.svm.solution import SVMSolution, relative_gap, relative_violation, stationarity_residual, status_from

__all__ = ["solve_frobenius_ws", "solve_nuclear_ws", "WorkingSetSettings", "ScaleError"]


class WorkingSetSettings:
    """Defaults of the outer loop (overridable per call).

    batch : rows added per round at most (default ``max(64, min(1000, d1 d2 // 16))``: large batches
        make the subset QPs churn; measured figures in docs/guide/performance.md)
    per_group : rows of one query added per round at most (default 1; 0 = no limit)
    nuclear_per_group : the same for :func:`solve_nuclear_ws` (default 0, no limit: each of its
        rounds is a whole interior-point solve, so fewer rounds pay)
    max_rounds : 1000
    enter : rows entering the active set per active-set iteration once the working set holds
        more than half the rank (64)
    """

    per_group = 1
    nuclear_per_group = 0
    max_rounds = 1000
    enter = 64
    min_add = 16

    @staticmethod
    def batch(d1: int, d2: int) -> int:
        return int(max(64, min(1000, (d1 * d2) // 16)))


def _violations(cs: ConstraintSet, margins: np.ndarray) -> np.ndarray:
    """``(rhs - m)`` on inequality rows, ``|m - rhs|`` on equality rows: shape (N,)."""
    v = cs.rhs - margins
    if cs.is_equality.any():
        v = np.where(cs.is_equality, np.abs(v), v)
    return v


def _pick(score: np.ndarray, cand: np.ndarray, gid: np.ndarray | None, k: int, per_group: int) -> np.ndarray:
    """Up to ``k`` candidate rows of largest ``score``, at most ``per_group`` per group ``gid``."""
    if cand.size <= k and gid is None:
        return cand
    sc = score[cand]
    if gid is not None and per_group > 0:
        order = np.lexsort((-sc, gid[cand]))            # by group, best first within a group
        g = gid[cand][order]
        first = np.r_[True, g[1:] != g[:-1]]
        start = np.maximum.accumulate(np.where(first, np.arange(g.size), 0))
        keep = order[(np.arange(g.size) - start) < per_group]
        cand, sc = cand[keep], sc[keep]
    if cand.size > k:
        top = np.argpartition(-sc, k - 1)[:k]
        cand = cand[top]
    return cand


class _GramSet:
    """The working set S: row indices, their scaled factors (:class:`_Setup`) and their Gram matrix
    ``(U_S U_S^T) * (V_S V_S^T)``."""

    def __init__(self, setup: "_Setup", max_memory):
        cs = setup.cs
        self.setup = setup
        self.cs = cs
        self.max_memory = max_memory
        self.rows = np.zeros(0, np.int64)
        self.U = np.zeros((0, cs.d1))
        self.V = np.zeros((0, cs.d2))
        self._G = np.zeros((0, 0))
        self._kept = None          # rows of _G still in S after keep() (None: all); applied when G is read

    @property
    def size(self) -> int:
        return int(self.rows.size)

    @property
    def G(self) -> np.ndarray:
        """The Gram matrix of S: ``(s, s)``."""
        if self._kept is not None:
            self._G = principal_submatrix(self._G, self._kept)
            self._kept = None
        return self._G

    def keep(self, mask: np.ndarray) -> None:
        """S := its rows where ``mask (s,)``; the Gram matrix is cut when next read (or grown by :meth:`add`
        in one copy)."""
        if mask.all():
            return
        self.rows, self.U, self.V = self.rows[mask], self.U[mask], self.V[mask]
        kept = np.flatnonzero(mask)
        self._kept = kept if self._kept is None else self._kept[kept]

    def add(self, new: np.ndarray) -> None:
        if new.size == 0:
            return
        s, a = self.size, int(new.size)
        # the Gram matrix (old and new copy while growing), the factor of the active-set method and
        # one block copy for its rebuilds: ~5 s^2 float64 budgeted (measured: docs/guide/performance.md)
        require_memory(5 * 8.0 * (s + a) ** 2, f"working set of {s + a} constraints (Gram matrix and factor)",
                       self.max_memory,
                       hint="the problem has too many support constraints for the working-set method")
        Un, Vn = self.setup.rows(new)
        G = np.empty((s + a, s + a))
        if self._kept is None:
            G[:s, :s] = self._G
        else:
            principal_submatrix(self._G, self._kept, out=G[:s, :s])
            self._kept = None
        cross = (self.U @ Un.T) * (self.V @ Vn.T)
        G[:s, s:] = cross
        G[s:, :s] = cross.T
        G[s:, s:] = row_gram(Un, Vn)
        self._G = G
        self.rows = np.concatenate([self.rows, new])
        self.U = np.concatenate([self.U, Un])
        self.V = np.concatenate([self.V, Vn])

    def combine(self, lam: np.ndarray) -> np.ndarray:
        """``sum_{k in S} lam_k u_k w_k^T``: (d1, d2)."""
        return (self.U * lam[:, None]).T @ self.V


def _rank_bound(cs: ConstraintSet, groups: QueryGroups | None) -> int:
    """An upper bound on the rank of the rows ``u_k w_k^T``: ``rank(U) rank(V)`` (at most ``d1 d2``).

    rank(V) from the distinct queries; rank(U) from ``U^T U`` accumulated in chunks (skipped,
    i.e. ``d1``, when the bound cannot matter: above 50000).
    """
    from attnsvm.svm.row_values import chunk_rows

    N, d1, d2 = cs.N, cs.d1, cs.d2
    if N == 0:
        return 0
    Q = groups.Q if groups is not None else None
    r2 = d2
    if Q is not None:
        s = np.linalg.svd(Q, compute_uv=False)
        r2 = int(np.sum(s > 1e-12 * s[0])) if s.size and s[0] > 0 else 0
    if d1 * r2 > 50000:
        return int(d1 * r2)
    C = np.zeros((d1, d1))
    step = chunk_rows(N, d1)
    for lo in range(0, N, step):
        Uc = cs.U[lo:lo + step]
        C += Uc.T @ Uc
    ev = np.linalg.eigvalsh(C)
    r1 = int(np.sum(ev > 1e-12 * ev[-1])) if ev.size and ev[-1] > 0 else 0
    return int(max(1, r1 * r2))


def _group_ids(cs: ConstraintSet, groups: QueryGroups | None) -> np.ndarray | None:
    if groups is not None:
        return groups.group
    if cs.N and np.all(cs.sample >= 0):
        return cs.sample
    return None


def _defaults(cs: ConstraintSet, batch, per_group, max_rounds) -> tuple[int, int, int]:
    """``(batch, per_group, max_rounds)`` of checked options with the defaults of :class:`WorkingSetSettings`
    filled in where None."""
    st = WorkingSetSettings
    return (batch or st.batch(cs.d1, cs.d2), st.per_group if per_group is None else per_group,
            max_rounds or st.max_rounds)


def _farkas_residual(ws: "_GramSet", f: np.ndarray) -> float:
    """:func:`~attnsvm.svm.result.farkas_residual` over the working set's scaled rows (0: an exact proof)."""
    return farkas_residual(ws.U, ws.V, f)


def _infeasible(cs: ConstraintSet, setup: "_Setup", ws: "_GramSet", farkas_ws: np.ndarray, offending_ws,
                formulation: str, norm: str, info: dict) -> SVMSolution:
    """The "infeasible" result: Farkas multipliers of the subset (scaled rows, mapped back:
    ``f_k = f'_k 2^-e_k`` keeps ``rhs^T f = 1`` and ``sum f_k A_k``), zero on every other row.

    Multipliers whose relative residual exceeds ``100 FARKAS_RESIDUAL`` (a subset solver's approximate
    stop) are passed on like any others: :func:`~attnsvm.svm.result.infeasible_solution` returns
    "infeasible" only with a proof and "undecided" (with its norm bound) otherwise, never a claim
    without one."""
    res = _farkas_residual(ws, farkas_ws)
    farkas = RowSubset(ws.rows, cs.N).lift(setup.scaling.subset(ws.rows).farkas(farkas_ws))
    if offending_ws is None:
        big = np.abs(farkas_ws) > 1e-9 * max(float(np.abs(farkas_ws).max()), 1e-300)
        offending_ws = np.flatnonzero(big)
    return infeasible_solution(cs, farkas, formulation=formulation, norm=norm, info=info, residual=res,
                               offending=ws.rows[np.asarray(offending_ws, dtype=np.int64)])


#: row sizes ``||u_k|| ||w_k||`` the working set accepts (``2^±400``): its Gram entries (sizes
#: squared) and multipliers (inverse squares) then stay normal float64 numbers
SCALE_RANGE = 2.0 ** 400


class ScaleError(ValidationError):
    """Data whose rows are too large or too small for the working-set solver (it does not normalize)."""


class _Setup:
    """What every round needs about all N rows: query groups, row sizes and the row scaling.

    The rows are used scaled by powers of two (:meth:`RowScaling.row_norms`), ``u_k 2^-a_k``,
    ``w_k 2^-b_k``, ``rhs_k 2^-e_k`` (``e_k = a_k + b_k``, ``2^a_k`` just above ``||u_k||``): a positive factor on a constraint
    row and its right-hand side leaves the constraint, hence W, unchanged, and the subset
    QPs see rows of size ~1 whatever the data scale (the multipliers map back exactly as
    ``lam_k = lam'_k 2^-e_k``). Violations are compared in these units (relative to the row).
    """

    def __init__(self, cs: ConstraintSet, settings: SolverSettings):
        N = cs.N
        self.cs = cs
        self.groups = query_groups(cs)
        self.gid = _group_ids(cs, self.groups)
        un, wn = row_norms(cs, self.groups)
        self.scale = un * wn                                         # ||u_k|| ||w_k||
        with np.errstate(divide="ignore"):
            self.inv_scale = np.where(self.scale > 0, 1.0 / np.where(self.scale > 0, self.scale, 1.0), np.inf)
        nz = self.scale[self.scale > 0]
        if nz.size and (float(nz.max()) > SCALE_RANGE or float(nz.min()) < 1.0 / SCALE_RANGE):
            raise ScaleError(
                f"the working-set solver needs row sizes |u_k| |w_k| within 2^-400 .. 2^400 (its margins "
                f"and multipliers must fit in float64), got {float(nz.min()):.1e} .. {float(nz.max()):.1e}: "
                "rescale the tokens and queries towards unit size (the solution direction does not depend on "
                "the scale, W(cX) = W(X) / c^2) or use method='dense'")
        self.scaling = RowScaling.row_norms(un, wn)                  # E = 0: W is that of the scaled rows
        self.e = self.scaling.s                                      # a_k + b_k
        self.rhs = self.scaling.rhs(cs.rhs)                          # scaled right-hand sides
        self.btol = settings.feas_tol * max(1.0, float(np.max(np.abs(self.rhs))) if N else 1.0)

    def rows(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scaled factors ``(U_r 2^-a, V_r 2^-b)`` of rows r."""
        return self.scaling.subset(r).rows(self.cs.U[r], self.cs.V[r])

    def violations(self, margins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(scaled, score)``: violations ``(rhs_k - m_k) 2^-e_k`` (``|.|`` on equality rows) of the
        scaled rows, and ``(rhs_k - m_k) / (||u_k|| ||w_k||)``, the exact relative violation that
        ranks rows (the powers of two differ from the norms by up to 4x): shape (N,) each."""
        raw = _violations(self.cs, margins)
        return self.scaling.rhs(raw), raw * self.inv_scale


@contextlib.contextmanager
def _one_blas_thread():
    """One BLAS thread for the subset QP, the caller's setting restored afterwards (a context manager).

    Its factor has a few thousand rows and most of its work is triangular solves with few
    right-hand sides, too small to share between threads (two threads are slower than one; the
    timings: docs/guide/performance.md, "Frobenius at N = 10^6"). The margins of all N rows keep the
    caller's threads, and so do the QP's whole-block Cholesky factorizations
    (:func:`attnsvm.svm.pdas.caller_threads` runs them with the number recorded here).
    """
    from threadpoolctl import threadpool_info, threadpool_limits

    counts = [int(lib.get("num_threads") or 1) for lib in threadpool_info() if lib.get("user_api") == "blas"]
    with factor_threads(max(counts, default=1)), threadpool_limits(limits=1, user_api="blas"):
        yield


def _subset_qp(cs, ws: "_GramSet", base: "BasePDAS", new: np.ndarray, cap: int, info, tol: float) -> QPResult:
    """Solve the QP of the working set; ``new`` are the rows just appended (most violated first).

    Near the rank, freeing many rows at once gives nearly square free sets whose multipliers
    swing wildly, so once S holds more than half the rank at most ``enter`` rows enter per
    active-set iteration. If that fails (cycling, dependent rows), a second start from the
    previous support alone with slower entry; then the dense solvers of :mod:`.qp`.
    """
    st = WorkingSetSettings
    b_ws, eq_ws = ws.setup.rhs[ws.rows], cs.is_equality[ws.rows]
    first_new = ws.size - new.size
    blocked = ws.size > cap // 2
    starts = []
    start = np.ones(ws.size, bool)
    if blocked:
        start[first_new + st.enter:] = False
    starts.append((start, st.enter if blocked else None))
    if first_new > 0:
        start = np.zeros(ws.size, bool)
        start[:first_new] = True
        starts.append((start, max(1, st.enter // 4)))
    out = None
    for start, enter in starts:
        if start.sum() > cap:
            start[np.flatnonzero(start)[cap:]] = False
        out = base.run(ws.rows, ws.G, b_ws, eq_ws, tol, start=start, max_enter=enter, limit=cap)
        if out is not None:
            res = _from_mnp(ws, out, b_ws, eq_ws, tol)
            if res is not None:
                return res
            base.why = "SVM KKT not verified"
        info.setdefault("pdas_failures", []).append(base.why)
    if ws.size > DENSE_FALLBACK_MAX and base.last is not None:
        # the dense dual active-set method needs minutes at this size: continue from the last
        # iterate instead (a Farkas certificate if it is one; else approximate multipliers that
        # only choose the next rows: the final answer is certified over all N rows regardless)
        f, _, it = base.last
        f = np.where(eq_ws, f, np.maximum(f, 0.0))
        bf = float(b_ws @ f)
        if bf > 0:
            f = f / bf
            w = ws.combine(f)
            t = float(np.sum(w * w))
            if _farkas_residual(ws, f) <= FARKAS_RESIDUAL:
                return QPResult("infeasible", np.zeros(f.size), farkas=f, iterations=it,
                                method="working-set pdas (min-norm point)",
                                info={"offending": np.flatnonzero(np.abs(f) > 1e-9 * np.abs(f).max())})
            if t > 0:
                info["approximate_rounds"] = info.get("approximate_rounds", 0) + 1
                return QPResult("optimal", f / t, iterations=it, method="approximate")
    info["dense_fallbacks"] = info.get("dense_fallbacks", 0) + 1
    return solve_gram_qp.unchecked(ws.G, b_ws, eq_ws, tol=tol)


#: working sets above this many rows do not fall back to the dense dual active-set method
#: (Goldfarb-Idnani, one row per step: minutes at a few thousand rows) when the active-set method
#: fails; the round continues from the last iterate (see :func:`_subset_qp`)
DENSE_FALLBACK_MAX = 1500


#: a min-norm point whose combination ``sum f_k A_k`` is this small relative to
#: ``sum |f_k| ||A_k||`` is a Farkas certificate: every W satisfying the rows then has
#: ``||W|| >= 1 / ||sum f_k A_k||``, beyond 1e10 / (sum |f_k| ||A_k||): infeasible at float64 precision
FARKAS_RESIDUAL = 1e-10


def _from_mnp(ws: "_GramSet", out, b, eq, tol) -> QPResult | None:
    """SVM multipliers ``f / t`` or a Farkas certificate from a min-norm point (None: not verified)."""
    from attnsvm.svm.qp import kkt_ok

    f, _, it = out
    w = ws.combine(f)
    t = float(np.sum(w * w))                         # ||sum f_k A_k||^2, directly (exact near 0)
    size = float(np.abs(f) @ np.sqrt(np.diag(ws.G)))
    if np.sqrt(t) <= 10 * FARKAS_RESIDUAL * size:
        # a Farkas candidate: exactly >= 0 on inequality rows, rhs^T f = 1, then verified
        fc = np.where(eq, f, np.maximum(f, 0.0))
        bf = float(b @ fc)
        if bf > 0:
            fc = fc / bf
            if _farkas_residual(ws, fc) <= FARKAS_RESIDUAL:
                offending = np.flatnonzero(np.abs(fc) > 1e-9 * np.abs(fc).max())
                return QPResult("infeasible", np.zeros(f.size), farkas=fc, iterations=it,
                                method="working-set pdas (min-norm point)", info={"offending": offending})
    if not t > 0:
        return None
    lam = f / t
    if not (kkt_ok(ws.G, b, eq, lam, tol) or _kkt_relative_ok(ws, lam, b, eq, tol)):
        return None
    return QPResult("optimal", lam, iterations=it, method="working-set pdas (min-norm point)")


def _kkt_relative_ok(ws: "_GramSet", lam, b, eq, tol) -> bool:
    """Optimality of the subset SVM in the package's relative measures (:class:`Certificate`):
    violation relative to ``|b_k| + ||A_k|| ||W||``, negative multipliers relative to the largest
    and the relative duality gap, each at most ``10 tol``. Near infeasibility
    (``||W||`` large) rounding makes the absolute test of :func:`attnsvm.svm.qp.kkt_ok` unreachable."""
    W = ws.combine(lam)
    nw = float(np.linalg.norm(W))
    m = np.einsum("kd,kd->k", ws.U @ W, ws.V)
    size = np.sqrt(np.diag(ws.G)) * nw
    if relative_violation(m, b, eq, size) > 10 * tol:
        return False
    ineq = ~eq
    top = float(np.max(np.abs(lam))) if lam.size else 0.0
    if np.any(lam[ineq] < -10 * tol * top):
        return False
    lam_f = np.where(ineq, np.maximum(lam, 0.0), lam)
    S_f = ws.combine(lam_f)
    return relative_gap(0.5 * nw * nw, float(b @ lam_f) - 0.5 * float(np.sum(S_f * S_f))) <= 10 * tol


def solve_frobenius_ws(cs: ConstraintSet, *, formulation: str | None = None,
                       options: FrobeniusWSOptions | None = None, **kw) -> SVMSolution:
    """``min ||W||_F s.t.`` the rows of ``cs``, by the working-set method (module docstring).

    Parameters
    ----------
    cs : ConstraintSet with ``U (N, d1)``, ``V (N, d2)``
    formulation : label stored in the solution (defaults to ``cs.kind``)
    options : :class:`~attnsvm.svm.options.FrobeniusWSOptions`, or its settings and knobs as keywords:
    feas_tol : a row (scaled to unit size) counts as violated when ``rhs - margin > feas_tol * max(1, max |rhs|)``
        (also the tolerance of the subset QP); :class:`~attnsvm.svm.settings.SolverSettings`
    support_tol : margins within ``support_tol`` (relative) of their rhs count as support
    time_limit : seconds; when reached (or when ``max_rounds`` is) the current subset solution is
        returned with status "optimal_inaccurate" if it satisfies every row, else "undecided" (``feasible``
        False: neither a W for all rows nor a Farkas certificate was found; its certificate shows the
        violation left)
    max_memory : refuse (ResourceLimitError) a working set whose Gram matrix needs more
    batch, per_group, max_rounds : see :class:`WorkingSetSettings`
    verbose : print one line per round

    Returns
    -------
    SVMSolution with ``W (d1, d2)``, margins and duals over all N rows (duals zero outside
    the final working set), or status "infeasible" with Farkas multipliers (N,).
    ``info``: method "working-set", rounds, working_set (final size), max_working_set,
    qp_iterations, factorizations (Cholesky factorizations of a whole free set by the active-set
    method), seconds, cpu_seconds.
    """
    o = FrobeniusWSOptions.resolve(options, kw, "solve_frobenius_ws")
    cfg, verbose = o.settings, o.verbose
    tol, support_tol, time_limit, max_memory = cfg.feas_tol, cfg.support_tol, cfg.time_limit, cfg.max_memory
    batch, per_group, max_rounds = _defaults(cs, o.batch, o.per_group, o.max_rounds)
    formulation = formulation or cs.kind
    t0, c0 = time.perf_counter(), time.process_time()
    N, d1, d2 = cs.N, cs.d1, cs.d2
    st = WorkingSetSettings
    setup = _Setup(cs, cfg)
    rank = _rank_bound(cs, setup.groups)
    cap = rank + 1              # free rows at most: a minimal infeasible set has rank + 1 rows
    ws = _GramSet(setup, max_memory)
    base = BasePDAS(setup)
    base.max_rows = cap
    in_ws = np.zeros(N, bool)
    lam = np.zeros(0)
    W = np.zeros((d1, d2))
    margins = np.zeros(N)
    info = {"method": "working-set", "rounds": 0, "max_working_set": 0, "qp_iterations": 0}
    stopped = None
    rnd = 0
    for rnd in range(1, max_rounds + 1):
        viol, score = setup.violations(margins)     # relative to the row size (scaled rows)
        cand = np.flatnonzero((viol > setup.btol) & ~in_ws)
        if verbose:
            print(f"round {rnd:3d} |S| {ws.size:6d} ||W|| {np.linalg.norm(W):.12g} violated {cand.size:8d} "
                  f"max {float(viol.max()) if N else 0.0:.2e} t {time.perf_counter() - t0:.2f}s", flush=True)
        if cand.size == 0:
            break
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            stopped = "time limit"
            break
        # drop inequality rows with a zero multiplier: the subset optimum stays the same
        if ws.size:
            keep = (lam != 0) | cs.is_equality[ws.rows]
            in_ws[ws.rows[~keep]] = False
            ws.keep(keep)
        # the subset holds at most `cap` rows (more would leave free rows dependent beyond a
        # Farkas combination); when the kept rows fill it, `min_add` rows come in anyway and the
        # active-set method swaps rows (limit = cap)
        room = max(1, min(batch, cap - ws.size)) if cap > ws.size else st.min_add
        new = _pick(score, cand, setup.gid, room, per_group)
        new = new[np.argsort(-score[new], kind="stable")]
        with _one_blas_thread():
            ws.add(new)
            in_ws[new] = True
            info["max_working_set"] = max(info["max_working_set"], ws.size)
            res = _subset_qp(cs, ws, base, new, cap, info, tol)
        info["qp_iterations"] += int(res.iterations)
        if res.status == "infeasible":
            info.update(rounds=rnd, working_set=ws.size, seconds=time.perf_counter() - t0,
                        cpu_seconds=time.process_time() - c0)
            return _infeasible(cs, setup, ws, res.farkas, res.info.get("offending"), formulation, "fro", info)
        lam = res.lam
        W = ws.combine(lam)
        margins = constraint_values(cs, W, setup.groups)
    else:
        stopped = "round limit"
    info.update(rounds=rnd, working_set=ws.size, seconds=time.perf_counter() - t0,
                cpu_seconds=time.process_time() - c0, factorizations=base.refactors)
    if stopped:
        info["stopped"] = stopped
    return _frobenius_result(cs, setup, ws, lam, W, margins, formulation, support_tol, info)


def _frobenius_result(cs, setup: _Setup, ws: "_GramSet", lam_ws, W, margins, formulation, support_tol,
                      info) -> SVMSolution:
    """Assemble the solution and its relative certificate over all N rows (duals zero outside S).

    ``lam_ws`` are multipliers of the scaled rows (:class:`_Setup`); the returned duals are those
    of the rows of ``cs`` (``lam_k = lam'_k 2^-e_k``). The certificate's dual quantities are
    computed in the scaled units, like the dense solvers' row-normalized ones.
    """
    sub = setup.scaling.subset(ws.rows)
    lam = RowSubset(ws.rows, cs.N).lift(sub.lam(lam_ws, "squared"))
    nrm = float(np.linalg.norm(W))
    slack_ws = sub.rhs(margins[ws.rows] - cs.rhs[ws.rows])
    cert = fro_certificate(violation=relative_violation(margins, cs.rhs, cs.is_equality, setup.scale * nrm),
                           U=ws.U, V=ws.V, b=setup.rhs[ws.rows], eq=cs.is_equality[ws.rows], lam=lam_ws,
                           slack=slack_ws, W=W, residual=_returned_residual(setup, lam, W))
    status = status_from(cert, "fro") if "stopped" not in info else _stopped_status(setup, margins)
    return build_solution(cs, status=status, formulation=formulation, norm="fro", W=W, norm_value=nrm,
                          margins=margins, duals=lam, certificate=cert, support_tol=support_tol, info=info)


def _subset_unsolved(cs: ConstraintSet, rows: np.ndarray, sol: SVMSolution, formulation: str, info: dict) -> SVMSolution:
    """The whole set's result when the subset ``rows`` (indices into ``cs``) has no W: "infeasible" when the
    subset's Farkas multipliers (zero on every other row) prove it for ``cs``, else "undecided" with the
    subset's norm bound (every W satisfying all rows satisfies the subset)."""
    info.update(sol.info)
    N = cs.N
    if sol.certificate.farkas is not None:
        farkas = np.zeros(N)
        farkas[rows] = sol.certificate.farkas
        return infeasible_solution(cs, farkas, formulation=formulation, norm=sol.norm, info=info,
                                   residual=sol.certificate.stationarity_residual)
    return no_solution(cs, "undecided", formulation, sol.norm, float("nan"), sol.certificate, info)


def _stopped_status(setup: _Setup, margins: np.ndarray) -> str:
    """Status of a working set stopped by ``max_rounds`` or ``time_limit``: "optimal_inaccurate" when its W
    satisfies every row (feasibility proven by the margins), else "undecided" (``feasible`` False: neither a W
    for all rows nor a Farkas certificate was found; W is the last subset's solution)."""
    return "undecided" if np.any(setup.violations(margins)[0] > setup.btol) else "optimal_inaccurate"


def _returned_residual(setup: _Setup, lam: np.ndarray, W: np.ndarray) -> float:
    """Frobenius stationarity residual of the returned pair: ``W (d1, d2)`` and the multipliers
    ``lam (N,)`` of the rows of ``cs``, mapped exactly to the scaled rows (``lam'_k = lam_k 2^e_k``;
    W is the same for scaled and unscaled rows). Only the rows with a nonzero multiplier are read."""
    rows = np.flatnonzero(lam)
    Un, Vn = setup.rows(rows)
    return stationarity_residual(Un, Vn, setup.scaling.subset(rows).lam_to_n(lam[rows], "squared"), W)


#: a row outside the nuclear working set joins when its relative violation (the certificate's measure) exceeds
#: ``JOIN_FACTOR * feas_tol``: the subsets' interior-point solves leave violations up to ``feas_tol`` in their own
#: units, and the certificate asks for 1e-8 (1e-9 at the default feas_tol)
JOIN_FACTOR = 10.0


def solve_nuclear_ws(cs: ConstraintSet, *, formulation: str | None = None, options: NuclearWSOptions | None = None,
                     **kw) -> SVMSolution:
    """``min ||W||_* s.t.`` the rows of ``cs``, by the working-set method around the reduced IPM.

    Feasibility is decided (with a Farkas certificate) by :func:`solve_frobenius_ws`, whose
    support rows are the first working set. The first round (solver "auto" or "ipm") is one
    interior-point run in which rows outside the set join as soon as the iterate violates them and
    clearly slack rows leave (:func:`~attnsvm.svm.nuclear.solve_nuclear_grown`); when that run does
    not end optimal, the first round is an ordinary one. Each further round solves the nuclear SVM
    of the working set with :func:`~attnsvm.svm.nuclear.solve_nuclear` (interior point, relative
    gap ~1e-9). After every round all N margins are checked, rows that are clearly inactive
    (multiplier below ``1e-9`` of the largest and margin above ``rhs + 1e-6``) leave and the most
    violated rows join.

    Parameters
    ----------
    cs : ConstraintSet
    options : :class:`~attnsvm.svm.options.NuclearWSOptions`, or its settings and knobs as keywords:
    feas_tol : a row outside the subset joins when its relative violation (see
        :func:`~attnsvm.svm.solution.relative_violation`) exceeds :data:`JOIN_FACTOR` ``feas_tol``; also the
        Frobenius working set's (feasibility) and the subsets' interior-point method's
        (:class:`~attnsvm.svm.settings.SolverSettings`)
    support_tol, batch, max_rounds, max_memory, verbose : as :func:`solve_frobenius_ws`
        (timings: ``python benchmarks/solvers.py --scale --only nuc-planted-1e5``, docs/guide/performance.md)
    per_group : as :func:`solve_frobenius_ws`, default ``WorkingSetSettings.nuclear_per_group`` (0: no limit)
    gap_tol : relative duality gap each subset's interior-point solve aims at (``gap_tol`` of
        :func:`~attnsvm.svm.nuclear.solve_nuclear`; 1e-8 by default, 100x below the 1e-6 the
        certificate requires)
    time_limit : seconds for the whole solve; the last subset solution is then returned
        ("optimal_inaccurate" unless its certificate over all rows passes; "undecided" when the
        time ran out before the Frobenius working set decided feasibility)
    solver, device : passed to :func:`~attnsvm.svm.nuclear.solve_nuclear` for the subsets (device: the
        interior-point method's dense algebra on a torch device, e.g. "cuda")

    Returns
    -------
    SVMSolution with ``norm = "nuclear"``: W, margins and duals over all N rows; the
    certificate's duality gap compares ``||W||_*`` with the dual value of the subset's
    multipliers scaled into the spectral-norm ball. ``info["grown_first_round"]``: whether the
    first round was the single growing interior-point run; ``info["first_set"]``: rows of the first
    working set (the Frobenius support and the equality rows); ``info["round_sizes"]`` and
    ``info["round_iterations"]``: per round the subset solved (for the grown round its final subset;
    its largest is in ``max_working_set``) and its interior-point iterations; ``info["support"]``: rows
    of the final subset with a multiplier above ``1e-9`` of the largest, ``info["support_in_first_set"]``
    how many of them the first working set already held; ``info["late_joins"]`` (grown round): how often
    rows joined it late (:func:`~attnsvm.svm.barrier_grow.nuclear_ipm_grow`).
    """
    from attnsvm.svm.nuclear import solve_nuclear, solve_nuclear_grown

    o = NuclearWSOptions.resolve(options, kw, "solve_nuclear_ws")
    cfg, verbose, solver, device = o.settings, o.verbose, o.solver, o.device
    support_tol, time_limit = cfg.support_tol, cfg.time_limit
    batch, per_group, max_rounds = _defaults(cs, o.batch, WorkingSetSettings.nuclear_per_group
                                             if o.per_group is None else o.per_group, o.max_rounds)
    _refuse_bad_device(device)
    formulation = formulation or cs.kind
    t0, c0 = time.perf_counter(), time.process_time()
    fro = solve_frobenius_ws(cs, formulation=formulation, options=FrobeniusWSOptions(settings=cfg))
    if fro.status in ("infeasible", "undecided"):    # a Farkas certificate, or stopped before feasibility was decided
        return _frobenius_as_nuclear(fro)
    setup = _Setup(cs, cfg)
    in_ws = (fro.duals != 0) | cs.is_equality
    first = in_ws.copy()
    info = _first_round_info(fro, first)
    stopped = None
    W = lam_sub = rows = margins = sub = None
    # round 1: one interior-point run whose subset grows and shrinks (None: it did not end optimal)
    grown = None if solver not in ("auto", "ipm") else solve_nuclear_grown(
        cs, in_ws, np.where(in_ws, fro.duals, 0.0), formulation=formulation, settings=cfg, device=device)
    info["grown_first_round"] = grown is not None
    for rnd in range(1, max_rounds + 1):
        if rnd == 1 and grown is not None:
            sol, in_ws = _grown_round(grown, info)
        rows = np.flatnonzero(in_ws)
        sub = cs.select_rows(in_ws)
        if rnd > 1 or grown is None:
            left = None if time_limit is None else max(time_limit - (time.perf_counter() - t0), 1e-3)
            sol = solve_nuclear(sub, formulation=formulation, options=NuclearOptions(
                settings=cfg.derive(time_limit=left), solver=solver, device=device))
        if not sol.feasible:                # the subset admits no W (so neither does cs) or was not decided
            return _subset_unsolved(cs, rows, sol, formulation, _record_round(info, rnd, rows, None))
        W, lam_sub = sol.W, sol.duals
        _record_round(info, rnd, rows, sol)
        margins = constraint_values(cs, W, setup.groups)
        score, rel, cand = _joining_rows(cs, setup, margins, W, in_ws, cfg.feas_tol)
        if verbose:
            _log_round(rnd, rows, sol, cand, rel, time.perf_counter() - t0)
        if cand.size == 0:
            break
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            stopped = "time limit"
            break
        in_ws[_idle_rows(cs, rows, lam_sub, margins)] = False
        in_ws[_pick(score, cand, setup.gid, batch, per_group)] = True
    else:
        stopped = "round limit"
    info.update(working_set=int(rows.size), seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                subset_solver=sol.info.get("solver"), **_support_counts(rows, lam_sub, first), **_stop_reason(stopped))
    return _nuclear_result(cs, setup, sub, rows, W, lam_sub, margins, formulation, support_tol, info)


def _refuse_bad_device(device: str | None) -> None:
    """Refuse a bad torch device before any work (None: the CPU, nothing to check)."""
    if device is not None:
        from attnsvm.svm.torch_backend import check_device

        check_device(device)


def _first_round_info(fro: SVMSolution, first: np.ndarray) -> dict:
    """The nuclear working set's ``info`` before its first round: ``first (N,) bool`` is the first working set."""
    return {"method": "working-set (nuclear IPM on subsets)", "rounds": 0, "max_working_set": 0,
            "frobenius_seconds": fro.info["seconds"], "ipm_iterations": 0, "first_set": int(first.sum()),
            "round_sizes": [], "round_iterations": []}


def _grown_round(grown: tuple[SVMSolution, np.ndarray], info: dict) -> tuple[SVMSolution, np.ndarray]:
    """The growing interior-point run as round 1: its solution and final working set, its largest subset and
    late joins noted in ``info``."""
    sol, in_ws = grown
    info["max_working_set"] = int(sol.info.get("max_rows", 0))
    info["late_joins"] = int(sol.info.get("late_joins", 0))
    return sol, in_ws


def _log_round(rnd: int, rows: np.ndarray, sol: SVMSolution, cand: np.ndarray, rel: np.ndarray, seconds: float) -> None:
    """One verbose line per nuclear round: subset size, objective, rows to join, largest relative violation."""
    print(f"nuclear round {rnd:3d} |S| {rows.size:6d} ||W||_* {sol.norm_value:.12g} violated {cand.size:8d} "
          f"max rel {float(rel.max()) if rel.size else 0.0:.2e} subset gap {sol.certificate.duality_gap:.1e} "
          f"t {seconds:.1f}s", flush=True)


def _frobenius_as_nuclear(fro: SVMSolution) -> SVMSolution:
    """The Frobenius working set's infeasible or undecided result, relabelled for the nuclear norm (``||W||_*``
    of its W, when it has one)."""
    fro.norm = "nuclear"
    if fro.W is not None:
        fro.norm_value = fro.objective = float(np.linalg.svd(fro.W, compute_uv=False).sum()) if fro.W.size else 0.0
    return fro


def _record_round(info: dict, rnd: int, rows: np.ndarray, sol: SVMSolution | None) -> dict:
    """Bookkeeping of nuclear round ``rnd`` on subset ``rows (s,)`` in ``info``; ``sol`` None: only the
    subset's size (the round's solve failed)."""
    info["max_working_set"] = max(info["max_working_set"], int(rows.size))
    if sol is not None:
        its = int(sol.info.get("iterations") or 0)
        info["ipm_iterations"] += its
        info["round_iterations"].append(its)
        info["round_sizes"].append(int(rows.size))
        info["rounds"] = rnd
    return info


def _joining_rows(cs: ConstraintSet, setup: _Setup, margins: np.ndarray, W: np.ndarray, in_ws: np.ndarray,
                  feas_tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(score (N,), rel (N,), cand)``: the violation score of every row, its relative violation (the
    certificate's measure), and the rows outside the working set ``in_ws (N,) bool`` whose relative
    violation exceeds ``JOIN_FACTOR * feas_tol``."""
    _, score = setup.violations(margins)
    nw = float(np.linalg.norm(W))
    raw = _violations(cs, margins)
    rel = np.where(raw > 0, raw / (np.abs(cs.rhs) + setup.scale * nw + 1e-300), 0.0)
    return score, rel, np.flatnonzero((rel > JOIN_FACTOR * feas_tol) & ~in_ws)


def _idle_rows(cs: ConstraintSet, rows: np.ndarray, lam_sub: np.ndarray, margins: np.ndarray) -> np.ndarray:
    """Inequality rows of the subset ``rows (s,)`` that are clearly inactive: multiplier ``lam_sub (s,)`` at most
    1e-9 of the largest and slack above ``1e-6 max(1, |rhs|)``."""
    top = float(np.max(np.abs(lam_sub))) if lam_sub.size else 0.0
    slack = margins[rows] - cs.rhs[rows]
    idle = (np.abs(lam_sub) <= 1e-9 * top) & (slack > 1e-6 * np.maximum(1.0, np.abs(cs.rhs[rows])))
    return rows[idle & ~cs.is_equality[rows]]


def _stop_reason(stopped: str | None) -> dict:
    """``{"stopped": reason}`` when the rounds ended early (time or round limit), else nothing."""
    return {"stopped": stopped} if stopped else {}


def _support_counts(rows: np.ndarray, lam_sub: np.ndarray, first: np.ndarray) -> dict:
    """``support``: rows of the final subset ``rows (s,)`` whose multiplier ``lam_sub (s,)`` exceeds ``1e-9`` of the
    largest; ``support_in_first_set``: how many of them the first working set ``first (N,) bool`` held."""
    lam_sub = np.abs(np.asarray(lam_sub, dtype=np.float64))
    top = float(lam_sub.max()) if lam_sub.size else 0.0
    sup = rows[lam_sub > 1e-9 * top] if top > 0 else rows[:0]
    return {"support": int(sup.size), "support_in_first_set": int(np.count_nonzero(first[sup]))}


def _nuclear_result(cs, setup: _Setup, sub: ConstraintSet, rows, W, lam_sub, margins, formulation, support_tol,
                    info) -> SVMSolution:
    """Nuclear solution with its relative certificate over all N rows (duals zero outside S)."""
    lam = RowSubset(rows, cs.N).lift(lam_sub)
    viol = relative_violation(margins, cs.rhs, cs.is_equality, setup.scale * float(np.linalg.norm(W)))
    cert, nuc = nuclear_certificate(violation=viol, U=sub.U, V=sub.V, b=sub.rhs, eq=sub.is_equality, lam=lam_sub,
                                    slack=margins[rows] - sub.rhs, W=W)
    status = status_from(cert, "nuclear") if "stopped" not in info else "optimal_inaccurate"
    return build_solution(cs, status=status, formulation=formulation, norm="nuclear", W=W, norm_value=nuc,
                          margins=margins, duals=lam, certificate=cert, support_tol=support_tol, info=info)
