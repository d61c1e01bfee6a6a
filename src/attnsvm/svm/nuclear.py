"""Nuclear-norm SVMs through subspace reduction and a small conic solve.

The optimal W lies in ``span(U) x span(V)``: with orthonormal bases ``P (d1, r1)`` of
the rows of U and ``B (d2, r2)`` of the rows of V, ``W = P M B^T`` and
``||W||_* = ||M||_*``, so the SDP in ``(d1 + d2)`` shrinks to ``(r1 + r2)``. The
reduced problem ``min ||M||_* s.t. a_k^T M b_k >= rhs_k`` is solved with cvxpy and
Clarabel (interior point) or with SCS at tight tolerances (default); the
result is certified through the dual: ``S = sum_k lam_k u_k w_k^T`` must have
spectral norm <= 1 and ``rhs^T lam = ||W||_*`` (zero gap).

Feasibility does not depend on the norm: it is decided first by the exact
Frobenius solver, which also provides the Farkas certificate when infeasible.
"""

from __future__ import annotations

import time

import numpy as np

from .constraints import ConstraintSet
from .frobenius import solve_frobenius
from .solution import Certificate, SVMSolution

__all__ = ["row_basis", "solve_nuclear", "nuclear_certificate"]

def row_basis(A: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Orthonormal basis of the row space of ``A (N, d)``: shape (d, r)."""
    if A.size == 0:
        return np.zeros((A.shape[1], 0))
    # the Gram route is cheaper when N is large; use SVD of the smaller side
    _, s, vt = np.linalg.svd(A, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return np.zeros((A.shape[1], 0))
    r = int(np.sum(s > rtol * s[0]))
    return vt[:r].T.copy()


def nuclear_certificate(cs: ConstraintSet, W: np.ndarray, lam: np.ndarray) -> tuple[Certificate, np.ndarray]:
    """Certificate of a nuclear-norm solution ``W (d1, d2)`` with multipliers ``lam (N,)``."""
    margins = cs.evaluate(W)
    b, eq = cs.rhs, cs.is_equality
    viol = np.where(eq, np.abs(margins - b), np.maximum(b - margins, 0.0))
    S = cs.combine(lam)
    spec = float(np.linalg.norm(S, 2)) if S.size else 0.0
    nuc = float(np.linalg.svd(W, compute_uv=False).sum())
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


def solve_nuclear(cs: ConstraintSet, *, formulation: str | None = None, solver: str = "auto",
                  support_tol: float = 1e-5, time_limit: float | None = None) -> SVMSolution:
    """Solve ``min ||W||_* s.t.`` the rows of ``cs`` via subspace reduction.

    Parameters
    ----------
    cs : ConstraintSet with ``U (N, d1)``, ``V (N, d2)``
    formulation : label stored in the solution (defaults to ``cs.kind``)
    solver : "auto" (SCS with tight tolerances on the reduced problem), "SCS" or "CLARABEL"
        (interior point; accurate but memory-hungry beyond a reduced size of ~100)
    time_limit : seconds, optional cap for SCS (the certificate then reports the accuracy reached)
    support_tol : margins within this (relative) distance of rhs count as support

    Returns
    -------
    SVMSolution with ``W (d1, d2)`` and ``norm = "nuclear"`` or status "infeasible"
    (Farkas certificate from the exact Frobenius solver).
    """
    formulation = formulation or cs.kind
    t0 = time.perf_counter()
    fro = solve_frobenius(cs, formulation=formulation)
    if fro.status == "infeasible":
        fro.norm = "nuclear"
        return fro
    P = row_basis(cs.U)
    B = row_basis(cs.V)
    Ua, Vb = cs.U @ P, cs.V @ B
    size = P.shape[1] + B.shape[1]
    if solver == "auto":
        solver = "SCS"
    info = {"reduced_shape": [int(P.shape[1]), int(B.shape[1])], "solver": solver}
    if P.shape[1] == 0 or B.shape[1] == 0:
        M, lam, status = np.zeros((P.shape[1], B.shape[1])), np.zeros(cs.N), "optimal"
    else:
        eps = 1e-9 if size <= 300 else 1e-7
        M, lam, status = _solve_reduced_cvxpy(Ua, Vb, cs.rhs, cs.is_equality, solver, eps=eps, time_limit=time_limit)
        info["solver_status"] = status
    W = P @ M @ B.T
    cert, margins = nuclear_certificate(cs, W, lam)
    nuc = float(np.linalg.svd(W, compute_uv=False).sum())
    b = cs.rhs
    support = (np.abs(margins - b) <= support_tol * np.maximum(1.0, np.abs(b))) & ~cs.is_equality
    info["seconds"] = time.perf_counter() - t0
    return SVMSolution("optimal", formulation, "nuclear", W, nuc, nuc, margins, lam, support, cs, cert,
                       support_tol=support_tol, info=info)
