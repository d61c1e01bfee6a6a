"""Nuclear-norm SVMs through subspace reduction and a structured interior-point method.

The optimal W lies in ``span(U) x span(V)``: with orthonormal bases ``P (d1, r1)`` of
the rows of U and ``B (d2, r2)`` of the rows of V, ``W = P M B^T`` and
``||W||_* = ||M||_*``. The reduced problem ``min ||M||_* s.t. a_k^T M b_k >= rhs_k``
is solved by

* ``solver="auto"`` / ``"ipm"`` (default): the primal-dual interior-point method of
  :mod:`attnsvm.svm.barrier`, numpy / scipy only. Its only large matrix is the
  N x N Schur complement, built from Gram-type products: (n, T, d) = (64, 32, 768),
  N = 1984 rows and a reduced size ``r1 + r2 = 832``, takes ~25 iterations and 10-20 s
  on one core (the 832 x 832 SDP through cvxpy does not fit in memory). Relative
  duality gap <= 1e-9 (typically 1e-10), violations ~1e-15. Memory grows as N^2
  (a few N x N arrays), time as N^3 + N^2 (r1 + r2) per iteration.
  It starts from the Frobenius solution and multipliers.
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

from ..errors import ValidationError
from .barrier import nuclear_ipm, row_space_basis
from .constraints import ConstraintSet
from .frobenius import solve_frobenius
from .solution import Certificate, SVMSolution

__all__ = ["row_basis", "solve_nuclear", "nuclear_certificate"]

_SOLVERS = ("auto", "ipm", "cvxpy", "SCS", "CLARABEL")


def row_basis(A: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Orthonormal basis of the row space of ``A (N, d)``: shape (d, r)."""
    return row_space_basis(A, rtol)


def nuclear_certificate(cs: ConstraintSet, W: np.ndarray, lam: np.ndarray) -> tuple[Certificate, np.ndarray]:
    """Certificate of a nuclear-norm solution ``W (d1, d2)`` with multipliers ``lam (N,)``."""
    margins = cs.evaluate(W)
    b, eq = cs.rhs, cs.is_equality
    viol = np.where(eq, np.abs(margins - b), np.maximum(b - margins, 0.0))
    S = cs.combine(lam)
    spec = float(np.linalg.norm(S, 2)) if S.size else 0.0
    nuc = float(np.linalg.svd(W, compute_uv=False).sum()) if W.size else 0.0
    align = abs(float(np.sum(W * S)) - nuc) / max(1.0, nuc)
    dual = float(b @ lam)
    cert = Certificate(
        max_violation=float(viol.max()) if viol.size else 0.0,
        stationarity_residual=max(spec - 1.0, 0.0) + align,
        duality_gap=abs(nuc - dual) / max(1.0, nuc),
        dual_infeasibility=float(np.maximum(-lam[~eq], 0).max()) if (~eq).any() else 0.0,
        complementarity=float(np.abs(lam * np.where(eq, 0.0, margins - b)).max()) if b.size else 0.0,
    )
    return cert, margins


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
        lam[eq_idx] = np.asarray(cons[k].dual_value).ravel()
    return np.asarray(M.value), lam, prob.status


def _solve_cvxpy(cs: ConstraintSet, solver: str, time_limit):
    """The conic route: explicit bases, reduced SDP through cvxpy. Returns W, lam, info."""
    P = row_basis(cs.U)
    B = row_basis(cs.V)
    size = P.shape[1] + B.shape[1]
    if solver == "cvxpy":
        solver = "CLARABEL" if size <= 150 else "SCS"
    info = {"method": f"reduced SDP via cvxpy/{solver}", "solver": solver,
            "reduced_shape": [int(P.shape[1]), int(B.shape[1])]}
    if P.shape[1] == 0 or B.shape[1] == 0:
        return np.zeros((cs.d1, cs.d2)), np.zeros(cs.N), dict(info, solver_status="optimal")
    eps = 1e-9 if size <= 300 else 1e-7
    M, lam, status = _solve_reduced_cvxpy(cs.U @ P, cs.V @ B, cs.rhs, cs.is_equality, solver, eps=eps,
                                          time_limit=time_limit)
    info["solver_status"] = status
    return P @ M @ B.T, lam, info


def solve_nuclear(cs: ConstraintSet, *, formulation: str | None = None, solver: str = "auto",
                  support_tol: float = 1e-5, time_limit: float | None = None) -> SVMSolution:
    """Solve ``min ||W||_* s.t.`` the rows of ``cs`` via subspace reduction.

    Parameters
    ----------
    cs : ConstraintSet with ``U (N, d1)``, ``V (N, d2)``
    formulation : label stored in the solution (defaults to ``cs.kind``)
    solver : "auto" (default) or "ipm": the structured interior-point method (relative
        duality gap <= 1e-9; "auto" falls back to cvxpy on small problems if it does not
        converge); "cvxpy", "CLARABEL" or "SCS": the reduced SDP through cvxpy
    time_limit : seconds, optional cap (the certificate then reports the accuracy reached)
    support_tol : margins within this (relative) distance of rhs count as support

    Returns
    -------
    SVMSolution with ``W (d1, d2)`` and ``norm = "nuclear"`` or status "infeasible"
    (Farkas certificate from the exact Frobenius solver). ``info["solver_status"]`` is
    "optimal" or "inaccurate" (stopped at a limit; see the certificate).
    """
    if solver not in _SOLVERS:
        raise ValidationError(f"solver must be one of {', '.join(map(repr, _SOLVERS))}, got {solver!r}")
    formulation = formulation or cs.kind
    t0 = time.perf_counter()
    fro = solve_frobenius(cs, formulation=formulation)
    if fro.status == "infeasible":
        fro.norm = "nuclear"
        return fro
    if solver in ("auto", "ipm"):
        try:
            res = nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, lam_init=fro.duals, W_init=fro.W,
                              time_limit=time_limit)
        except Exception as exc:  # numerical breakdown the method could not absorb
            if solver == "ipm":
                raise
            res, err = None, f"{type(exc).__name__}: {exc}"
        if res is not None:
            W, lam = res.W, res.lam
            info = dict(res.info, solver="ipm", solver_status=res.status)
            good = res.status == "optimal" or (res.info["rel_gap"] <= 1e-7 and res.info["violation"] <= 1e-8)
        else:
            info, good = {"solver": "ipm", "ipm_error": err}, False
        small = min(cs.d1, cs.N) + min(cs.d2, cs.N) <= 300
        if solver == "auto" and not good and (res is None or (small and time_limit is None)):
            try:
                W, lam, info2 = _solve_cvxpy(cs, "cvxpy", time_limit)
            except Exception as exc:
                if res is None:
                    raise
                info["fallback_error"] = f"{type(exc).__name__}: {exc}"
            else:
                info = dict(info2, ipm=info)
    else:
        W, lam, info = _solve_cvxpy(cs, solver, time_limit)
    cert, margins = nuclear_certificate(cs, W, lam)
    nuc = float(np.linalg.svd(W, compute_uv=False).sum()) if W.size else 0.0
    b = cs.rhs
    support = (np.abs(margins - b) <= support_tol * np.maximum(1.0, np.abs(b))) & ~cs.is_equality
    info["seconds"] = time.perf_counter() - t0
    return SVMSolution("optimal", formulation, "nuclear", W, nuc, nuc, margins, lam, support, cs, cert,
                       support_tol=support_tol, info=info)
