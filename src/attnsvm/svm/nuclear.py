"""Nuclear-norm SVMs through subspace reduction and a structured interior-point method.

The optimal W lies in ``span(U) x span(V)``: with orthonormal bases ``P (d1, r1)`` of
the rows of U and ``B (d2, r2)`` of the rows of V, ``W = P M B^T`` and
``||W||_* = ||M||_*``. The reduced problem ``min ||M||_* s.t. a_k^T M b_k >= rhs_k``
is solved by

* ``solver="auto"`` / ``"ipm"`` (default): the primal-dual interior-point method of
  :mod:`attnsvm.svm.ipm`, numpy / scipy by default (``device=``: its dense algebra on a
  torch device, :mod:`attnsvm.svm.torch_backend`). Its only large matrix is the N x N Schur
  complement, built from Gram-type products, so reduced sizes ``r1 + r2`` in the hundreds
  (d = 768) are routine where the reduced SDP through cvxpy does not fit in memory. Relative
  duality gap <= 1e-9 (typically 1e-10), violations ~1e-15. Memory grows as N^2
  (a few N x N arrays), time as N^3 + N^2 (r1 + r2) per iteration (measured figures:
  docs/guide/performance.md). It starts from the Frobenius solution and multipliers.
* ``solver="cvxpy"`` (Clarabel up to a reduced size of 150, SCS beyond), ``"CLARABEL"``
  or ``"SCS"``: the reduced SDP through cvxpy (slow and memory-hungry beyond a reduced
  size of a few hundred; kept as a fallback and for cross-checks).

The result is certified through the dual: ``S = sum_k lam_k u_k w_k^T`` must have
spectral norm <= 1 and ``rhs^T lam = ||W||_*`` (zero gap).

Feasibility does not depend on the norm: it is decided first by the exact
Frobenius solver, which also provides the Farkas certificate when infeasible.
"""

from __future__ import annotations

import time

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.memory import require_memory
from attnsvm.svm.ipm import MAX_ITER, nuclear_ipm_unchecked, row_space_basis
from attnsvm.svm.constraints import ConstraintSet, row_gram
from attnsvm.svm.frobenius import (dense_start, farkas_residual_of, frobenius_qp, not_representable_error, require_dense_memory,
                                   row_sizes)
from attnsvm.svm.options import NuclearOptions
from attnsvm.svm.settings import SolverSettings
from attnsvm.svm.result import build_solution, infeasible_solution
from attnsvm.svm.reductions import RowScaling, SubspaceBasis, representable
from attnsvm.svm.result import nuclear_certificate as result_nuclear_certificate
from attnsvm.svm.solution import Certificate, SVMSolution, relative_violation, status_from

__all__ = ["row_basis", "solve_nuclear", "solve_nuclear_batch", "solve_nuclear_grown", "nuclear_certificate",
           "nuclear_bytes"]


def row_basis(A: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Orthonormal basis of the row space of ``A (N, d)``: shape (d, r)."""
    return row_space_basis(A, rtol)


def nuclear_certificate(cs: ConstraintSet, W: np.ndarray, lam: np.ndarray,
                        normalized: tuple[ConstraintSet, RowScaling] | None = None) -> tuple[Certificate, np.ndarray]:
    """Certificate (all relative, see :class:`Certificate`) of a nuclear-norm solution
    ``W (d1, d2)`` with multipliers ``lam (N,)`` (dual ball ``||sum lam_k u_k w_k^T||_2 <= 1``),
    and the margins (N,).

    Computed from the given arrays after the exact map to the row-normalized set
    (``normalized``: the pair of ``cs.normalized()``, recomputed if None).
    """
    cert, margins, _ = _certify(cs, W, lam, normalized)
    return cert, margins


def _certify(cs: ConstraintSet, W: np.ndarray, lam: np.ndarray,
             normalized: tuple[ConstraintSet, RowScaling] | None = None) -> tuple[Certificate, np.ndarray, float]:
    """:func:`nuclear_certificate` and ``||W||_*`` in the row-normalized units (the solvers reuse its SVD)."""
    cs_n, sc = normalized if normalized is not None else cs.normalized()
    W_n = sc.W_to_n(np.asarray(W, dtype=np.float64))
    lam_n = sc.lam_to_n(np.asarray(lam, dtype=np.float64), "norm")
    m_n = cs_n.evaluate(W_n)
    b, eq = cs_n.rhs, cs_n.is_equality
    viol = relative_violation(m_n, b, eq, row_sizes(cs_n) * float(np.linalg.norm(W_n)))
    cert, nuc_n = result_nuclear_certificate(violation=viol, U=cs_n.U, V=cs_n.V, b=b, eq=eq, lam=lam_n,
                                             slack=m_n - b, W=W_n)
    return cert, sc.margins(m_n), nuc_n


def nuclear_bytes(N: int, d1: int, d2: int) -> float:
    """Peak bytes of the nuclear interior-point solve of N rows: the Frobenius start (4 N x N
    arrays) and then the Schur complement with its factor and products (6 N x N float64 arrays
    budgeted, above the tracemalloc peak in docs/guide/performance.md) plus the SDP blocks."""
    r = min(d1, N) + min(d2, N)
    return 8.0 * (6.0 * float(N) ** 2 + 6.0 * float(r) ** 2 + 4.0 * float(N) * (d1 + d2))


def _solve_reduced_cvxpy(Ua, Vb, rhs, eq, solver, eps=1e-9, time_limit=None):
    """Solve ``min ||M||_* s.t. a_k^T M b_k >= rhs_k`` with cvxpy.

    The rows share few distinct queries ``b``: with ``Q (q, r2)`` the distinct rows of
    Vb, the constraint matrix is built from ``Y = M Q^T (r1, q)`` and each row touches
    only one column of Y (``r1`` coefficients instead of ``r1 r2``).
    """
    import cvxpy as cp

    r1, r2 = Ua.shape[1], Vb.shape[1]
    Q, qidx = np.unique(Vb, axis=0, return_inverse=True)
    qidx = np.asarray(qidx).ravel()
    M = cp.Variable((r1, r2))
    Y = M @ Q.T
    expr = cp.sum(cp.multiply(Ua.T, Y[:, qidx]), axis=0)
    cons = []
    ineq_idx, eq_idx = np.flatnonzero(~eq), np.flatnonzero(eq)
    if ineq_idx.size:
        cons.append(expr[ineq_idx] >= rhs[ineq_idx])
    if eq_idx.size:
        cons.append(expr[eq_idx] == rhs[eq_idx])
    prob = cp.Problem(cp.Minimize(cp.normNuc(M)), cons)
    kwargs = {}
    if solver == "SCS":
        kwargs = dict(eps_abs=eps, eps_rel=eps, max_iters=500000)
        if time_limit:
            kwargs["time_limit_secs"] = float(time_limit)
    elif solver == "CLARABEL":
        kwargs = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    prob.solve(solver=solver, **kwargs)
    if M.value is None:
        raise RuntimeError(f"reduced nuclear-norm problem: solver {solver} returned status {prob.status}")
    lam = np.zeros(rhs.size)
    k = 0
    if ineq_idx.size:
        lam[ineq_idx] = np.asarray(cons[k].dual_value).ravel()
        k += 1
    if eq_idx.size:
        # cvxpy's equality multipliers enter its Lagrangian as + nu (expr - rhs), ours as
        # - lam (expr - rhs) like the inequality rows (S = sum lam_k A_k): flip the sign
        lam[eq_idx] = -np.asarray(cons[k].dual_value).ravel()
    return np.asarray(M.value), lam, prob.status


def _solve_cvxpy(cs: ConstraintSet, solver: str, time_limit):
    """The conic route: explicit bases, reduced SDP through cvxpy. Returns W, lam, info."""
    basis = SubspaceBasis.of(cs.U, cs.V)
    Ua, Vb = basis.rows(cs.U, cs.V)
    size = Ua.shape[1] + Vb.shape[1]
    if solver == "cvxpy":
        solver = "CLARABEL" if size <= 150 else "SCS"
    info = {"method": f"reduced SDP via cvxpy/{solver}", "solver": solver,
            "reduced_shape": [int(Ua.shape[1]), int(Vb.shape[1])]}
    if Ua.shape[1] == 0 or Vb.shape[1] == 0:
        return np.zeros((cs.d1, cs.d2)), np.zeros(cs.N), dict(info, solver_status="optimal")
    eps = 1e-9 if size <= 300 else 1e-7
    M, lam, status = _solve_reduced_cvxpy(Ua, Vb, cs.rhs, cs.is_equality, solver, eps=eps, time_limit=time_limit)
    info["solver_status"] = status
    return basis.lift(M), lam, info


def solve_nuclear(cs: ConstraintSet, *, formulation: str | None = None, options: NuclearOptions | None = None,
                  **kw) -> SVMSolution:
    """Solve ``min ||W||_* s.t.`` the rows of ``cs`` via subspace reduction.

    Parameters
    ----------
    cs, formulation : as :func:`~attnsvm.svm.frobenius.solve_frobenius`
    options : :class:`~attnsvm.svm.options.NuclearOptions`, or its settings and knobs as keywords:
        the settings (:class:`~attnsvm.svm.settings.SolverSettings`) ``feas_tol`` (the Frobenius start's
        KKT tolerance and the interior-point method's feasibility target), ``gap_tol`` (the relative
        duality gap the interior-point method aims at, 1e-9; the status below still comes from the
        certificate), ``support_tol``, ``time_limit`` (seconds: the certificate then reports the accuracy
        reached), ``max_memory`` (refuse, ResourceLimitError, before allocating the N x N matrices when
        they need more); and the knobs
    solver : "auto" (default) or "ipm": the structured interior-point method ("auto" falls back to
        cvxpy on small problems if it does not converge); "cvxpy", "CLARABEL" or "SCS": the reduced
        SDP through cvxpy (at its own fixed accuracy)
    device : None (default: numpy / scipy) or a torch device ("cuda", "cuda:1", "cpu" or a
        ``torch.device``): the interior-point method's Schur complement, its Cholesky factorization and
        the Newton solves run there in float64 (:mod:`attnsvm.svm.torch_backend`, imported only then);
        same stopping test and certificate. Needs torch; solver "auto" or "ipm" only

    Returns
    -------
    SVMSolution with ``W (d1, d2)`` and ``norm = "nuclear"``: status "optimal" only when the
    certificate passes (relative violation <= 1e-8, relative duality gap <= 1e-6), else
    "optimal_inaccurate"; or status "infeasible" (Farkas certificate from the exact
    Frobenius solver). The problem is solved on the row-normalized set (any data scale).
    ``info["solver_status"]`` is the inner method's own verdict ("optimal" or "inaccurate"
    for the IPM; cvxpy's status otherwise).
    """
    o, formulation = dense_start(cs, formulation, NuclearOptions.resolve(options, kw, "solve_nuclear"))
    st, solver, device = o.settings, o.solver, o.device
    max_memory = st.max_memory
    backend = _device_backend(device, solver)
    t0 = time.perf_counter()
    # feasibility (and the Farkas certificate) from the exact Frobenius dual QP of the
    # row-normalized set, whose solution is also the warm start; nothing is mapped back, so
    # only the nuclear solution itself has to fit in float64
    if max_memory is not None or nuclear_bytes(cs.N, cs.d1, cs.d2) >= 2**24:   # below 16 MiB: not checked
        require_memory(nuclear_bytes(cs.N, cs.d1, cs.d2), f"nuclear-norm solve of {cs.N} constraints "
                       "(N x N Schur complement)", max_memory,
                       hint="fewer samples or tokens per solve (the interior-point method's memory grows as N^2)")
    start = _frobenius_start(cs, st, formulation, t0)
    if isinstance(start, SVMSolution):
        return start
    normalized, lam0, W0 = start
    cs_n = normalized[0]
    if solver in ("auto", "ipm"):
        try:
            res, err = nuclear_ipm_unchecked(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality, lam_init=lam0, W_init=W0,
                                             gap_tol=st.gap_tol, feas_tol=st.feas_tol, max_iter=MAX_ITER,
                                             time_limit=st.time_limit, backend=backend), ""
        except Exception as exc:  # numerical breakdown the method could not absorb
            if solver == "ipm":
                raise
            res, err = None, f"{type(exc).__name__}: {exc}"
        return _ipm_outcome(cs, normalized, res, err, solver, st, formulation, t0)
    W_n, lam_n, info = _solve_cvxpy(cs_n, solver, st.time_limit)
    return _nuclear_solution(cs, normalized, W_n, lam_n, formulation, st.support_tol, info, t0)


def solve_nuclear_grown(cs: ConstraintSet, start: np.ndarray, lam_start: np.ndarray, *, formulation: str | None,
                        settings: SolverSettings, device) -> tuple[SVMSolution, np.ndarray] | None:
    """The first round of the nuclear working set in one interior-point run whose subset grows and shrinks
    (:func:`attnsvm.svm.barrier_grow.nuclear_ipm_grow`): rows of ``cs`` outside the subset join when the
    iterate violates them, clearly inactive rows leave.

    Parameters
    ----------
    cs : ConstraintSet (N rows), feasible (decided by the caller)
    start : (N,) bool, the first subset (e.g. the Frobenius support and the equality rows)
    lam_start : (N,) multipliers of ``cs`` to start from (e.g. the Frobenius dual, zero outside ``start``)
    formulation, device : as :func:`solve_nuclear`
    settings : the :class:`~attnsvm.svm.settings.SolverSettings` of the working set (``gap_tol`` that of its subsets)

    Returns
    -------
    ``(sol, subset)``: the certified :class:`SVMSolution` of the final subset ``cs.select_rows(subset)``
    (as :func:`solve_nuclear` returns it for that subset) and ``subset (N,) bool``; or None when the run
    ended neither optimal nor at the rounding floor (:func:`_ipm_accepted`), as an ordinary round would have
    been rejected (the caller then solves round by round). Rows outside the subset
    may be violated: the caller checks all rows.
    """
    from attnsvm.svm.barrier_grow import GrowthLimits, nuclear_ipm_grow

    start = np.asarray(start, bool)
    if not start.any():
        return None
    backend = _device_backend(device, "auto")
    n0 = int(start.sum())
    require_memory(nuclear_bytes(2 * n0, cs.d1, cs.d2), f"nuclear-norm solve of up to {2 * n0} constraints "
                   "(N x N Schur complement)", settings.max_memory,
                   hint="fewer samples or tokens per solve (the interior-point method's memory grows as N^2)")
    t0 = time.perf_counter()
    cs_n, sc = cs.normalized()
    lam0 = sc.lam_to_n(np.asarray(lam_start, dtype=np.float64), "squared")
    try:
        res, subset = nuclear_ipm_grow(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality, start, lam_init=lam0,
                                       W_init=cs_n.combine(lam0), settings=settings,
                                       limits=GrowthLimits(max_rows=2 * n0), backend=backend)
    except (np.linalg.LinAlgError, ValueError, FloatingPointError):
        return None
    if not _ipm_accepted(res):         # as the ordinary round accepts its run (:func:`_ipm_outcome`)
        return None
    sub = cs.select_rows(subset)
    normalized = sub.normalized()
    sub_sc = normalized[1]
    W = sc.W(res.W)
    lam = sc.lam(res.lam, "norm")[subset]
    info = dict(res.info, solver="ipm", solver_status=res.status)
    sol = _nuclear_solution(sub, normalized, sub_sc.W_to_n(W), sub_sc.lam_to_n(lam, "norm"), formulation or cs.kind,
                            settings.support_tol, info, t0)
    return sol, subset


def _device_backend(device, solver: str):
    """The IPM backend of ``device`` (None: numpy / scipy; the options checked that ``solver`` runs the IPM)."""
    if device is None:
        return None
    from attnsvm.svm.torch_backend import TorchNewton

    return TorchNewton(device)


def _frobenius_start(cs: ConstraintSet, settings: SolverSettings, formulation: str, t0: float):
    """Feasibility and the start of the IPM from the exact Frobenius dual QP of the row-normalized set (at
    ``settings.feas_tol``): the infeasible SVMSolution (Farkas certificate), or ``(normalized, lam0, W0)``."""
    normalized = cs.normalized()
    cs_n, sc = normalized
    res0, G = frobenius_qp(cs_n, settings)
    del G
    if res0.status == "infeasible":
        info = {"method": res0.method, "iterations": res0.iterations, "seconds": time.perf_counter() - t0}
        f = sc.farkas(res0.farkas)
        return infeasible_solution(cs, f, formulation=formulation, norm="nuclear", info=info,
                                   residual=farkas_residual_of(cs, f), offending=res0.info.get("offending"))
    return normalized, res0.lam, cs_n.combine(res0.lam)


def _frobenius_starts(sets, settings: SolverSettings, formulation, t0) -> list:
    """:func:`_frobenius_start` of every set; the Frobenius dual QPs of sets of equal size run batched
    (:func:`~attnsvm.svm.qp.pdas_batch`), a set it does not verify (infeasible or hard) alone."""
    from attnsvm.svm.qp import pdas_batch

    out: list = [None] * len(sets)
    normalized = [cs.normalized() for cs in sets]
    groups: dict = {}
    for k, (cs_n, _) in enumerate(normalized):
        groups.setdefault((cs_n.N, cs_n.d1, cs_n.d2), []).append(k)
    for ks in groups.values():
        if len(ks) > 1:
            Un = np.stack([normalized[k][0].U for k in ks])
            Vn = np.stack([normalized[k][0].V for k in ks])
            lam, ok = pdas_batch.unchecked(row_gram(Un, Vn), np.stack([normalized[k][0].rhs for k in ks]),
                                 np.stack([normalized[k][0].is_equality for k in ks]), tol=settings.feas_tol)
            for j, k in enumerate(ks):
                if ok[j]:
                    out[k] = (normalized[k], lam[j], normalized[k][0].combine(lam[j]))
        for k in ks:
            if out[k] is None:
                out[k] = _frobenius_start(sets[k], settings, formulation or sets[k].kind, t0)
    return out


#: an interior-point run that did not reach its own targets is still kept (no cvxpy fallback, the grown round
#: not redone) when it stopped at the rounding floor with at most this relative gap and violation (its
#: certificate then decides the status)
FLOOR_GAP, FLOOR_VIOLATION = 1e-7, 1e-8


def _ipm_accepted(res) -> bool:
    """Whether the interior-point result ``res`` is kept: "optimal", or stopped at the rounding floor
    (:data:`FLOOR_GAP`, :data:`FLOOR_VIOLATION`)."""
    return res.status == "optimal" or (res.info["rel_gap"] <= FLOOR_GAP and res.info["violation"] <= FLOOR_VIOLATION)


def _ipm_outcome(cs, normalized, res, err: str, solver: str, settings: SolverSettings, formulation, t0) -> SVMSolution:
    """The solution from the IPM's result ``res`` (None: it raised ``err``), after the cvxpy fallback
    of ``solver="auto"`` on small problems it did not solve accurately."""
    cs_n = normalized[0]
    time_limit = settings.time_limit
    if res is not None:
        W_n, lam_n = res.W, res.lam
        info = dict(res.info, solver="ipm", solver_status=res.status)
        good = _ipm_accepted(res)
    else:
        info, good = {"solver": "ipm", "ipm_error": err}, False
    small = min(cs.d1, cs.N) + min(cs.d2, cs.N) <= 300
    if solver == "auto" and not good and (res is None or (small and time_limit is None)):
        try:
            W_n, lam_n, info2 = _solve_cvxpy(cs_n, "cvxpy", time_limit)
        except Exception as exc:
            if res is None:
                raise
            info["fallback_error"] = f"{type(exc).__name__}: {exc}"
        else:
            info = dict(info2, ipm=info)
    return _nuclear_solution(cs, normalized, W_n, lam_n, formulation, settings.support_tol, info, t0)


def solve_nuclear_batch(sets, *, formulation: str | None = None, options: NuclearOptions | None = None, **kw) -> list:
    """:func:`solve_nuclear` (solver "auto") of many small constraint sets at once: the interior-point
    iterations of sets with equal reduced shape run stacked (:func:`attnsvm.svm.barrier_batch.nuclear_ipm_batch`),
    which removes most of the per-call cost of small solves; feasibility, start and certificate are
    those of :func:`solve_nuclear`, per set.

    Parameters
    ----------
    sets : list of ConstraintSet
    formulation, options (or its settings as keywords) : as :func:`solve_nuclear`, solver "auto" on the
        default device only (``time_limit`` is refused: the stacked iterations run to their end)

    Returns
    -------
    list of SVMSolution, one per set (status from each certificate, as :func:`solve_nuclear`)
    """
    from attnsvm.svm.barrier_batch import nuclear_ipm_batch

    o = NuclearOptions.resolve(options, kw, "solve_nuclear_batch")
    st = o.settings
    if o.solver != "auto" or o.device is not None or st.time_limit is not None:
        raise ValidationError("solve_nuclear_batch runs the interior-point method of solver 'auto' on the default "
                              "device to its end: give no solver, device or time_limit")
    max_memory = st.max_memory
    t0 = time.perf_counter()
    out: list = [None] * len(sets)
    todo = []
    if sets:  # the stacked IPM holds every set's N x N matrices at once
        n_max = max(cs.N for cs in sets)
        require_dense_memory(n_max, max_memory)
        require_memory(sum(nuclear_bytes(cs.N, cs.d1, cs.d2) for cs in sets),
                       f"batched nuclear-norm solve of {len(sets)} sets of up to {n_max} constraints", max_memory,
                       hint="fewer sets per batch or fewer constraints per set")
    for k, start in enumerate(_frobenius_starts(sets, st, formulation, t0)):
        if isinstance(start, SVMSolution):
            out[k] = start
        else:
            todo.append((k, start))
    problems = [(st[0][0].U, st[0][0].V, st[0][0].rhs, st[0][0].is_equality, st[1], st[2]) for _, st in todo]
    try:
        results, err = nuclear_ipm_batch(problems, gap_tol=st.gap_tol, feas_tol=st.feas_tol), ""
    except Exception:  # a numerical breakdown of the stack: every set alone
        return [done if done is not None else solve_nuclear(cs, formulation=formulation, options=o)
                for done, cs in zip(out, sets)]
    for (k, start), res in zip(todo, results):
        out[k] = _ipm_outcome(sets[k], start[0], res, err, "auto", st, formulation or sets[k].kind, t0)
    return out


def _nuclear_solution(cs, normalized, W_n, lam_n, formulation, support_tol, info, t0) -> SVMSolution:
    """Map the row-normalized solution back, certify it and set the status from the certificate."""
    cs_n, sc = normalized
    W_n = np.asarray(W_n, dtype=np.float64)
    lam_n = np.asarray(lam_n, dtype=np.float64)
    W = sc.W(W_n)
    if not representable(W, W_n):
        raise not_representable_error("solution W", sc, float(np.abs(W_n).max()), sc.E)
    lam = sc.lam(lam_n, "norm")
    if not representable(lam, lam_n):
        raise not_representable_error("multipliers", sc, float(np.abs(lam_n).max()), -sc.a - sc.b)
    cert, margins, nuc_n = _certify(cs, W, lam, normalized)
    nuc = float(np.ldexp(nuc_n, sc.E))
    info["seconds"] = time.perf_counter() - t0
    return build_solution(cs, status=status_from(cert, "nuclear"), formulation=formulation, norm="nuclear", W=W,
                          norm_value=nuc, margins=margins, duals=lam, certificate=cert, support_tol=support_tol,
                          info=info)
