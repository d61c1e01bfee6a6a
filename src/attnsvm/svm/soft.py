"""Soft-margin Att-SVM: ``min ||W|| + C sum xi`` (or ``||W||^2``) s.t. margins >= 1 - xi.

Solved in the reduced coordinates ``W = P M B^T`` (see :mod:`attnsvm.svm.nuclear`)
with cvxpy: Clarabel for the Frobenius objectives (second-order cone / QP), SCS for
the nuclear norm. Always feasible.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ValidationError
from .constraints import ConstraintSet
from .nuclear import row_basis
from .solution import Certificate, SVMSolution

__all__ = ["solve_soft"]


def solve_soft(cs: ConstraintSet, C: float, *, norm: str = "fro", squared: bool = False,
               support_tol: float = 1e-6) -> SVMSolution:
    """Solve the soft-margin SVM over the rows of ``cs`` (inequality rows only).

    Parameters
    ----------
    cs : ConstraintSet, ``U (N, d1)``, ``V (N, d2)``
    C : float > 0, slack penalty
    norm : "fro" or "nuclear"
    squared : use ``||W||^2`` instead of ``||W||`` in the objective

    Returns
    -------
    SVMSolution with ``W (d1, d2)``, ``slack (N,)``, ``objective`` the optimal value.
    """
    import cvxpy as cp

    if not (isinstance(C, (int, float, np.floating)) and np.isfinite(C) and C > 0):
        raise ValidationError(f"C must be a finite number > 0, got {C!r}")
    if np.any(cs.is_equality):
        raise ValidationError("soft margin applies to inequality constraints only")
    t0 = time.perf_counter()
    P, B = row_basis(cs.U), row_basis(cs.V)
    Ua, Vb = cs.U @ P, cs.V @ B
    r1, r2 = P.shape[1], B.shape[1]
    Q, qidx = np.unique(Vb, axis=0, return_inverse=True)
    qidx = np.asarray(qidx).ravel()
    M = cp.Variable((r1, r2))
    xi = cp.Variable(cs.N, nonneg=True)
    expr = cp.sum(cp.multiply(Ua.T, (M @ Q.T)[:, qidx]), axis=0)
    con = expr >= cs.rhs - xi
    if norm == "fro":
        reg = cp.sum_squares(M) if squared else cp.norm(cp.vec(M, order="F"), 2)
        solver, kw = "CLARABEL", dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    else:
        reg = cp.square(cp.normNuc(M)) if squared else cp.normNuc(M)
        solver, kw = "SCS", dict(eps_abs=1e-9, eps_rel=1e-9, max_iters=200000)
    prob = cp.Problem(cp.Minimize(reg + C * cp.sum(xi)), [con])
    prob.solve(solver=solver, **kw)
    if M.value is None:
        raise RuntimeError(f"soft-margin solve failed: {prob.status}")
    W = P @ np.asarray(M.value) @ B.T
    lam = np.asarray(con.dual_value).ravel()
    slack = np.maximum(np.asarray(xi.value).ravel(), 0.0)
    margins = cs.evaluate(W)
    viol = np.maximum(cs.rhs - slack - margins, 0.0)
    nrm = float(np.linalg.norm(W)) if norm == "fro" else float(np.linalg.svd(W, compute_uv=False).sum())
    cert = Certificate(max_violation=float(viol.max()) if viol.size else 0.0,
                       duality_gap=float("nan"),
                       stationarity_residual=float("nan"),
                       dual_infeasibility=float(max(np.max(-lam, initial=0.0), np.max(lam - C, initial=0.0))),
                       complementarity=float(np.abs(lam * (margins - cs.rhs + slack)).max()) if cs.N else 0.0)
    if norm == "fro" and W.size:
        # stationarity: W / ||W|| = S (norm objective) or 2 W = S (squared)
        S = cs.combine(lam)
        target = 2 * W if squared else (W / nrm if nrm > 0 else W)
        cert.stationarity_residual = float(np.linalg.norm(S - target)) / max(1.0, float(np.linalg.norm(target)))
    support = (np.abs(margins - cs.rhs) <= support_tol * np.maximum(1.0, np.abs(cs.rhs))) | (slack > support_tol)
    info = {"solver": solver, "solver_status": prob.status, "C": float(C), "squared": bool(squared),
            "seconds": time.perf_counter() - t0}
    return SVMSolution("optimal", "soft", norm, W, nrm, float(prob.value), margins, lam, support, cs, cert,
                       slack=slack, support_tol=support_tol, info=info)
