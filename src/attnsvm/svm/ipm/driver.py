"""The interior-point method's driver: the measure of an iterate, the stopping test, the path-following loop,
:func:`nuclear_ipm` and its result."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from attnsvm._validate import check_number
from attnsvm.errors import ValidationError
from attnsvm.svm.ipm.linalg import add_reduce, nuclear_norm
from attnsvm.svm.ipm.newton import next_step
from attnsvm.svm.ipm.steps import GAMMA_START
from attnsvm.svm.ipm.problem import (NUMPY_NEWTON, Dual, Iterate, Problem, Reduction, clean_primal, reduce_problem, start_point,
                                     violation)
from attnsvm.svm.ipm.trace import trace_iterate, tracing


@dataclass
class IPMResult:
    """Result of :func:`nuclear_ipm`.

    Attributes
    ----------
    status : "optimal" (relative gap <= gap_tol, violation <= feas_tol) or "inaccurate"
        (stopped at a limit, a stall or the rounding limit; the best iterate is returned)
    W : (d1, d2) primal solution
    lam : (N,) dual multipliers (strictly dual feasible: ``||sum lam_k u_k w_k^T||_2 < 1``)
    info : dict: iterations, rel_gap, violation (relative to ``1 + max |rhs|`` of the scaled
        rows), reduced_shape ``[r1, r2]``, seconds, and ``stopped`` when a limit ended the run
    """

    status: str
    W: np.ndarray
    lam: np.ndarray
    info: dict = field(default_factory=dict)


def measure(pb: Problem, x: Iterate, du: Dual, best, tol: float, feas_tol: float):
    """Gap, violation and barrier parameter of the iterate; keeps the best iterate so far.

    Returns ``(best, merit, mu, (nuc, dobj, gap, viol))`` with ``best = (merit, gap, violation,
    X12, lam)`` (the violation after the least-norm clean-up near the end).
    """
    G = du.G
    marg = pb.amap(x.X12)
    viol = violation(pb, marg)
    nuc = nuclear_norm(x.X12)
    dobj = float(pb.rhs @ x.lam)
    gap = (nuc - dobj) / max(1.0, abs(nuc))
    Xc = x.X12
    if abs(gap) <= 10 * tol and viol > feas_tol:
        # near the end rounding leaves violations of ~1e-10: try the least-norm correction. Only there: a gap below
        # -10 tol means (weak duality) a violation far above rounding, whose least-norm correction over many nearly
        # singular rows (an all-rows start: hundreds of rows, r1 r2 unknowns) is a regularized solve whose answer
        # moves with the last bits, which would make the merit, and the stall test on it, depend on rounding
        Xc, viol_c, gap_c = clean_primal(pb, x.X12, x.lam, feas_tol)
        if viol_c < viol:
            gap, viol = gap_c, viol_c
        else:
            Xc = x.X12
    merit = max(gap, viol)
    if best is None or merit < best[0]:
        best = (merit, gap, viol, Xc.copy(), x.lam.copy())
    pobj = 0.5 * float(add_reduce(x.X.diagonal()))        # X.trace(): the same reduction, without its wrapper
    mu = (pobj - float(np.vdot(x.X12, G)) + float(x.s @ x.lam[pb.I])) / pb.n_tot
    return best, merit, mu, (nuc, dobj, gap, viol)


def stopping_test(best, since_best: int, tol: float, feas_tol: float, t0: float, time_limit) -> tuple[bool, bool, str]:
    """``(optimal, stop, reason)``: whether the best iterate meets the tolerances, whether to stop,
    and the ``info["stopped"]`` reason ("" when the optimum needs no further iteration)."""
    optimal = is_optimal(best[1], best[2], tol, feas_tol)
    if optimal and stops_at_optimum(best[1], since_best, tol):
        return optimal, True, ""
    if time_limit is not None and time.perf_counter() - t0 > time_limit:
        return optimal, True, "time limit"
    if since_best >= stall_limit(best[0]):
        return optimal, True, "stalled"
    return optimal, False, ""


def is_optimal(gap, viol, tol: float, feas_tol: float):
    """Whether a best iterate (its relative gap ``gap`` and violation ``viol``; floats or arrays) meets the
    tolerances."""
    return (gap <= tol) & (viol <= feas_tol)


def stops_at_optimum(gap, since_best, tol):
    """Whether an optimal run (its best gap ``gap``; floats or arrays) stops: it goes on while it pays, up to a gap
    10x below ``tol``, and stops at the first iteration without progress."""
    return (gap <= 0.1 * tol) | (since_best >= 1)


def stall_limit(merit):
    """Iterations without a better iterate after which a run stops as stalled, at the best merit ``merit`` (a float
    or an array): 4 near the optimum (merit below 1e-7, where rounding ends the progress), else 10."""
    return np.where(merit < 1e-7, 4, 10) if isinstance(merit, np.ndarray) else (4 if merit < 1e-7 else 10)


#: :func:`nuclear_ipm` takes equal primal and dual step lengths up to this many (live) rows, separate ones beyond:
#: equal steps save iterations on sets of up to about a thousand rows and not on larger ones. The growing set of
#: :mod:`attnsvm.svm.barrier_grow`, whose new rows leave the primal infeasible, always takes separate ones: equal
#: steps can stall it where separate ones converge (the iteration counts: docs/guide/performance.md, "Solver design
#: decisions and their measurements")
EQUAL_STEPS_MAX_ROWS = 1024

#: the iteration limit of :func:`nuclear_ipm` and of the batched runs (:mod:`attnsvm.svm.barrier_batch`)
MAX_ITER = 80


class PathState:
    """What the path-following loop carries from one iteration to the next, and the two halves of an iteration:
    :meth:`evaluate` (the dual quantities, :func:`measure`, :func:`stopping_test`) and :meth:`advance` (the status,
    then one step, :func:`~attnsvm.svm.ipm.newton.next_step`). The loop of :func:`path_following` and the growing
    row set's (:mod:`attnsvm.svm.barrier_grow`, which changes the rows between the halves) share them.

    Constructed with the run's settings (``tol``, ``feas_tol``, ``time_limit`` from the start ``t0``, ``verbose``),
    its ``info`` dict, which gets ``stopped`` when a limit, a stall or rounding ends the run, and the Newton
    systems' ``backend`` (None: numpy / scipy, :class:`~attnsvm.svm.ipm.problem.NumpyNewton`). Attributes:
    ``best = (merit, gap, violation, X12, lam)`` (None before the first measure), ``status``, ``gamma`` (the
    fraction of the largest feasible step taken), ``since_best`` (iterations since ``best`` improved) and ``L_next``,
    the step guard's Cholesky factor of S at the next dual iterate (None: computed afresh).
    """

    def __init__(self, tol: float, feas_tol: float, t0: float, time_limit, verbose: bool, info: dict, backend=None):
        self.tol, self.feas_tol, self.t0, self.time_limit, self.verbose, self.info = (tol, feas_tol, t0, time_limit,
                                                                                     verbose, info)
        self.backend = NUMPY_NEWTON if backend is None else backend
        self.best = None
        self.status = "inaccurate"
        self.gamma = GAMMA_START
        self.since_best = 0
        self.L_next = None

    def restart(self) -> None:
        """Forget the best iterate and the step guard's factor (the rows changed)."""
        self.best, self.since_best, self.L_next = None, 0, None

    def evaluate(self, pb: Problem, x: Iterate, it: int, rows: int | None = None):
        """``(du, mu, (nuc, dobj, gap, viol), (optimal, stop, reason))`` of the iterate ``x`` of iteration ``it``
        (:func:`measure`, :func:`stopping_test`; keeps the best iterate; ``verbose``: one line, with the subset's
        size ``rows`` when given), or None when rounding pushed the dual onto the boundary (the caller keeps the
        best)."""
        try:
            du = Dual(pb.A, pb.Bm, x.lam, self.L_next, x.G)
        except np.linalg.LinAlgError:
            self.info["stopped"] = "numerical limit"
            return None
        self.best, merit, mu, values = measure(pb, x, du, self.best, self.tol, self.feas_tol)
        nuc, dobj, gap, viol = values
        if self.verbose:
            size = "" if rows is None else f" |S| {rows:6d}"
            print(f"it {it:3d}{size} |M|_* {nuc:.12g} dual {dobj:.12g} gap {gap:.2e} viol {viol:.2e} mu {mu:.2e}",
                  flush=True)
        if tracing():
            trace_iterate(pb, x, mu, gap, viol)
        self.since_best = 0 if self.best[0] == merit else self.since_best + 1
        return du, mu, values, stopping_test(self.best, self.since_best, self.tol, self.feas_tol, self.t0,
                                             self.time_limit)

    def advance(self, pb: Problem, x: Iterate, du: Dual, mu: float, test, equal_steps: bool = False) -> Iterate | None:
        """The next iterate after :meth:`evaluate`'s stopping test ``test = (optimal, stop, reason)``, or None when
        the path ends here."""
        optimal, stop, reason = test
        if optimal:
            self.status = "optimal"
        if stop:
            if reason:
                self.info["stopped"] = reason
            return None
        step = next_step(pb, x, du, mu, self.gamma, self.verbose, self.info, equal_steps, self.backend)
        if step is None:
            return None
        x, self.L_next, self.gamma = step
        return x

    def final_best(self, pb: Problem, x: Iterate):
        """``best``, or when no iterate was measured (the start left the domain by rounding) the iterate ``x``
        with an infinite merit and zero multipliers."""
        if self.best is None:
            return (np.inf, np.inf, violation(pb, pb.amap(x.X12)), x.X12, np.zeros(pb.N))
        return self.best


def path_following(pb: Problem, x: Iterate, path: PathState, max_iter: int):
    """The path-following loop (equal primal and dual step lengths up to :data:`EQUAL_STEPS_MAX_ROWS` rows) from
    ``x`` with the run's state ``path``. Returns ``(best, status, iterations, last iterate)`` (``best`` as
    :meth:`PathState.final_best`); sets ``info["stopped"]`` when a limit, a stall or rounding ended the run."""
    it = 0
    for it in range(1, max_iter + 1):
        ev = path.evaluate(pb, x, it)
        if ev is None:
            break
        du, mu, _, test = ev
        x_next = path.advance(pb, x, du, mu, test, pb.N <= EQUAL_STEPS_MAX_ROWS)
        if x_next is None:
            break
        x = x_next
    else:
        path.info["stopped"] = "iteration limit"
    return path.final_best(pb, x), path.status, it, x


def default_tolerances(gap_tol: float | None, feas_tol: float | None) -> tuple[float, float]:
    """``(gap_tol, feas_tol)`` with None replaced by the settings' defaults for a dense nuclear solve: the one
    place those defaults are written is :class:`~attnsvm.svm.settings.SolverSettings` and the norm's
    :attr:`~attnsvm.svm.norms.Norm.gap_tol` (imported here, not at module level: the settings module imports
    the norms, which import this package)."""
    from attnsvm.svm.settings import SolverSettings

    st = SolverSettings().resolved("nuclear", "dense")
    return (st.gap_tol if gap_tol is None else gap_tol), (st.feas_tol if feas_tol is None else feas_tol)


def ipm_arrays(U, V, rhs, is_equality):
    """The IPM's inputs as arrays: ``(U (N, d1), V (N, d2), rhs (N,), eq (N,) bool, N, d1, d2)``."""
    U = np.asarray(U, float)
    V = np.asarray(V, float)
    N, d1 = U.shape
    return U, V, np.asarray(rhs, float), np.asarray(is_equality, bool), N, d1, V.shape[1]


def nuclear_ipm(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, is_equality: np.ndarray, *,
                lam_init: np.ndarray | None = None, W_init: np.ndarray | None = None, gap_tol: float | None = None,
                feas_tol: float | None = None, max_iter: int = MAX_ITER, time_limit: float | None = None,
                verbose: bool = False, backend=None, **deprecated) -> IPMResult:
    """Solve ``min ||W||_* s.t. u_k^T W w_k >= rhs_k`` (``==`` on equality rows), for direct callers: the limits
    are checked here, then :func:`nuclear_ipm_unchecked` runs (the solvers behind :func:`attnsvm.svm.solve`
    call that one with the settings ``solve`` checked once).

    Steps: :func:`~attnsvm.svm.ipm.problem.reduce_problem` (bases, live rows, scaling),
    :func:`~attnsvm.svm.ipm.problem.start_point` (interior point), :func:`path_following` (per iteration
    :func:`measure` and :func:`stopping_test`, then the Newton direction
    :func:`~attnsvm.svm.ipm.newton.mehrotra_direction` on the factorized :class:`~attnsvm.svm.ipm.newton.NewtonSystem`
    and :func:`~attnsvm.svm.ipm.steps.step_lengths`), and the final clean-up and map back to W.

    Parameters
    ----------
    U : (N, d1), V : (N, d2), rhs : (N,), is_equality : (N,) bool
        A feasible constraint set (feasibility is decided by the caller).
    lam_init : (N,) optional multipliers to start from (e.g. the Frobenius dual)
    W_init : (d1, d2) optional primal point to start from (e.g. the Frobenius solution)
    gap_tol : in (0, 1): relative duality gap ``(||W||_* - rhs^T lam) / max(1, ||W||_*)`` at which the result
        counts as optimal (the iteration goes on towards ``gap_tol / 10`` while every step still gains); None:
        the ``gap_tol`` of a dense nuclear solve (:meth:`attnsvm.svm.settings.SolverSettings.resolved`)
    feas_tol : in (0, 1): target constraint violation of W relative to ``1 + max |rhs|``; None: the
        ``feas_tol`` of :class:`~attnsvm.svm.settings.SolverSettings`
    max_iter : iterations (>= 1, default :data:`MAX_ITER`), time_limit : seconds (> 0) or None: limits; the best
        iterate is then returned with status "inaccurate"
    verbose : print one line per iteration
    backend : None (default: numpy / scipy) or a Newton backend (the interface:
        :class:`~attnsvm.svm.ipm.problem.NumpyNewton`), e.g. :class:`attnsvm.svm.torch_backend.TorchNewton` (the
        Schur complement, its factorization and the Newton solves on a torch device); everything else, the
        stopping test and the result are the same
    tol : deprecated name of ``gap_tol`` (DeprecationWarning; removed in 0.4)

    Returns
    -------
    IPMResult with ``W (d1, d2)`` (``W = P M B^T``) and ``lam (N,)`` (strictly dual feasible).
    """
    gap_tol = _deprecated_tol(gap_tol, deprecated)
    if gap_tol is None or feas_tol is None:
        gap_tol, feas_tol = default_tolerances(gap_tol, feas_tol)
    check_number(gap_tol, "gap_tol", low=0.0, high=1.0, low_open=True, high_open=True)
    check_number(feas_tol, "feas_tol", low=0.0, high=1.0, low_open=True, high_open=True)
    check_number(max_iter, "max_iter", low=1, integer=True)
    check_number(time_limit, "time_limit", low=0.0, low_open=True, allow_none=True)
    return nuclear_ipm_unchecked(U, V, rhs, is_equality, lam_init=lam_init, W_init=W_init, gap_tol=gap_tol,
                                 feas_tol=feas_tol, max_iter=max_iter, time_limit=time_limit, verbose=verbose,
                                 backend=backend)


def _deprecated_tol(gap_tol, deprecated: dict):
    """``gap_tol``, or the value of the deprecated keyword ``tol`` (its old name, with a DeprecationWarning); any
    other keyword in ``deprecated`` is a TypeError, as for an ordinary signature."""
    unknown = sorted(set(deprecated) - {"tol"})
    if unknown:
        raise TypeError(f"nuclear_ipm() got an unexpected keyword argument {unknown[0]!r}")
    if "tol" not in deprecated:
        return gap_tol
    if gap_tol is not None:
        raise ValidationError("give gap_tol only: tol is its deprecated name")
    warnings.warn(f"nuclear_ipm's 'tol' is deprecated and will be removed in 0.4: it maps to 'gap_tol' "
                  f"(tol={deprecated['tol']!r} -> gap_tol={deprecated['tol']!r})", DeprecationWarning, stacklevel=3)
    return deprecated["tol"]


def nuclear_ipm_unchecked(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, is_equality: np.ndarray, *,
                          lam_init: np.ndarray | None, W_init: np.ndarray | None, gap_tol: float, feas_tol: float,
                          max_iter: int, time_limit: float | None, verbose: bool = False,
                          backend=None) -> IPMResult:
    """:func:`nuclear_ipm` without its checks and defaults: the caller passes every limit, already checked (the
    solvers behind :func:`attnsvm.svm.solve`, whose :class:`~attnsvm.svm.settings.SolverSettings` checked
    ``gap_tol``, ``feas_tol`` and ``time_limit`` once; ``max_iter`` is :data:`MAX_ITER` there). Same parameters
    and result as :func:`nuclear_ipm`."""
    t0 = time.perf_counter()
    U, V, rhs, eq, N, d1, d2 = ipm_arrays(U, V, rhs, is_equality)
    info: dict = {"method": "primal-dual interior point (HKM, Mehrotra)"}
    red = reduce_problem(U, V, rhs, eq, info)
    lam = np.zeros(N)
    if red is None:
        info.update(iterations=0, rel_gap=0.0, violation=0.0, seconds=time.perf_counter() - t0)
        return IPMResult("optimal", np.zeros((d1, d2)), lam, info)
    pb = red.pb
    if backend is not None:
        info["device"] = backend.name
    x = Iterate(*start_point(pb, None if lam_init is None else np.asarray(lam_init, float)[red.live],
                             red.M_init(W_init)))
    path = PathState(gap_tol, feas_tol, t0, time_limit, verbose, info, backend)
    best, status, it, x = path_following(pb, x, path, max_iter)
    return ipm_result(red, best, status, it, info, N, gap_tol, feas_tol, time.perf_counter() - t0)


def ipm_result(red: Reduction, best, status: str, iterations: int, info: dict, N: int, tol: float, feas_tol: float,
               seconds: float) -> IPMResult:
    """The :class:`IPMResult` of the best iterate ``best = (merit, gap, violation, X12, lam)``: the
    least-norm clean-up of its last violations, then W and the multipliers of the caller's N rows."""
    merit, gap, viol, X12, lam_l = best
    X12, viol2, gap2 = clean_primal(red.pb, X12, lam_l, feas_tol)
    if viol2 < viol:
        info["cleaned"] = {"violation": [float(viol), float(viol2)], "rel_gap": [float(gap), float(gap2)]}
        viol, gap = viol2, gap2
        if status != "optimal" and gap <= tol and viol <= feas_tol:
            status = "optimal"
    info.update(iterations=iterations, rel_gap=float(gap), violation=float(viol), seconds=seconds)
    return IPMResult(status, red.W(X12), red.lam(lam_l, N), info)
