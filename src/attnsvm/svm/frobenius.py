"""Frobenius-norm SVMs: the dual QP in N variables with Gram ``(U U^T) * (V V^T)``.

``min ||W||_F s.t. u_k^T W w_k >= rhs_k`` has the same solution as
``min 1/2 ||W||_F^2``; its dual is a QP in the N multipliers whose Hessian is the
Gram matrix of the rank-one constraint matrices. ``W = sum_k lam_k u_k w_k^T`` is
formed once at the end. See :mod:`attnsvm.svm.qp` for the exact active-set solvers.
"""

from __future__ import annotations

import time

import numpy as np

from .constraints import ConstraintSet
from .qp import QPResult, goldfarb_idnani, pdas_batch, solve_gram_qp
from .solution import Certificate, SVMSolution

__all__ = ["solve_frobenius", "solve_frobenius_batch", "infeasible_solution", "frobenius_solution"]


def infeasible_solution(cs: ConstraintSet, farkas: np.ndarray, formulation: str, norm: str, info: dict,
                        offending=None) -> SVMSolution:
    """An "infeasible" :class:`SVMSolution` carrying the Farkas multipliers (W is None)."""
    farkas = np.asarray(farkas, dtype=np.float64)
    S = cs.combine(farkas)
    if offending is None:
        offending = [int(k) for k in np.flatnonzero(np.abs(farkas) > 1e-9 * max(np.abs(farkas).max(), 1e-300))]
    cert = Certificate(stationarity_residual=float(np.linalg.norm(S)), farkas=farkas, offending=list(offending),
                       offending_labels=[cs.label(k) for k in offending[:20]])
    N = cs.N
    return SVMSolution("infeasible", formulation, norm, None, float("inf"), float("inf"), np.full(N, np.nan),
                       np.zeros(N), np.zeros(N, bool), cs, cert, info=info)


def frobenius_solution(cs: ConstraintSet, lam: np.ndarray, formulation: str, info: dict,
                       support_tol: float = 1e-6) -> SVMSolution:
    """Assemble and certify the Frobenius solution ``W = sum lam_k u_k w_k^T``."""
    W = cs.combine(lam)
    margins = cs.evaluate(W)
    b, eq = cs.rhs, cs.is_equality
    viol = np.where(eq, np.abs(margins - b), np.maximum(b - margins, 0.0))
    nrm = float(np.linalg.norm(W))
    primal = 0.5 * nrm**2
    dual = float(b @ lam) - primal
    cert = Certificate(
        max_violation=float(viol.max()) if viol.size else 0.0,
        stationarity_residual=float(np.linalg.norm(W - cs.combine(lam))) / max(1.0, nrm),
        duality_gap=abs(primal - dual) / max(1.0, primal),
        dual_infeasibility=float(np.maximum(-lam[~eq], 0).max()) if (~eq).any() else 0.0,
        complementarity=float(np.abs(lam * np.where(eq, 0.0, margins - b)).max()) if b.size else 0.0,
    )
    support = (np.abs(margins - b) <= support_tol * np.maximum(1.0, np.abs(b))) & ~eq
    return SVMSolution("optimal", formulation, "fro", W, nrm, nrm, margins, lam, support, cs, cert,
                       support_tol=support_tol, info=info)


def solve_frobenius(cs: ConstraintSet, *, formulation: str | None = None, tol: float = 1e-10,
                    method: str = "auto", support_tol: float = 1e-6) -> SVMSolution:
    """Solve ``min ||W||_F s.t.`` the rows of ``cs`` exactly.

    Parameters
    ----------
    cs : ConstraintSet with ``U (N, d1)``, ``V (N, d2)``
    formulation : label stored in the solution (defaults to ``cs.kind``)
    tol : feasibility tolerance of the active-set method (relative to ``max |rhs|``)
    method : "auto", "pdas" or "goldfarb-idnani"
    support_tol : margins within ``support_tol`` of their rhs count as support

    Returns
    -------
    SVMSolution with ``W (d1, d2)`` (status "optimal") or a Farkas certificate
    (status "infeasible", ``W is None``).
    """
    formulation = formulation or cs.kind
    t0 = time.perf_counter()
    G = cs.gram()
    res: QPResult = solve_gram_qp(G, cs.rhs, cs.is_equality, tol=tol, method=method)
    info = {"method": res.method, "iterations": res.iterations, "seconds": time.perf_counter() - t0}
    if res.status == "infeasible":
        return infeasible_solution(cs, res.farkas, formulation, "fro", info, res.info.get("offending"))
    sol = frobenius_solution(cs, res.lam, formulation, info, support_tol)
    sol.info["seconds"] = time.perf_counter() - t0
    return sol


def solve_frobenius_batch(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, is_equality: np.ndarray, *,
                          tol: float = 1e-10):
    """Solve R independent Frobenius SVMs of equal size at once (vectorized numpy).

    Parameters
    ----------
    U : (R, N, d1), V : (R, N, d2), rhs : (R, N), is_equality : (R, N) bool

    Returns
    -------
    W : (R, d1, d2), NaN for infeasible instances
    lam : (R, N) multipliers (Farkas multipliers for infeasible instances)
    status : (R,) array of str ("optimal" / "infeasible")
    """
    R, N, _ = U.shape
    G = np.einsum("rkd,rld->rkl", U, U) * np.einsum("rkd,rld->rkl", V, V)
    lam, ok = pdas_batch(G, rhs, is_equality, tol=tol)
    status = np.array(["optimal"] * R, dtype=object)
    for r in np.flatnonzero(~ok):
        res = goldfarb_idnani(G[r], rhs[r], is_equality[r], tol=tol)
        if res.status == "optimal":
            lam[r] = res.lam
        else:
            lam[r] = res.farkas
            status[r] = "infeasible"
    W = np.einsum("rk,rka,rkb->rab", lam, U, V)
    W[status == "infeasible"] = np.nan
    return W, lam, status.astype(str)
