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
    if cs.N == 0:  # nothing to separate: W = 0 is optimal with objective 0
        d1, d2 = cs.U.shape[1], cs.V.shape[1]
        empty = np.zeros(0)
        cert = Certificate(max_violation=0.0, duality_gap=0.0, stationarity_residual=0.0, dual_infeasibility=0.0,
                           complementarity=0.0)
        return SVMSolution("optimal", "soft", norm, np.zeros((d1, d2)), 0.0, 0.0, empty, empty, np.zeros(0, bool), cs,
                           cert, slack=empty, support_tol=support_tol, info={"solver": "none", "C": float(C)})
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
                       duality_gap=_duality_gap(cs, lam, C, norm, squared,
                                                (nrm ** 2 if squared else nrm) + C * float(np.maximum(slack, cs.rhs - margins).sum())),
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


def _duality_gap(cs: ConstraintSet, lam: np.ndarray, C: float, norm: str, squared: bool, primal: float) -> float:
    """Primal objective minus the value of a dual-feasible point built from ``lam``.

    Dual of ``min ||W|| + C sum xi``: ``max rhs^T lam`` s.t. ``||S||_dual <= 1``, ``0 <= lam <= C``;
    of ``min ||W||^2 + C sum xi``: ``max rhs^T lam - ||S||_dual^2 / 4``, ``0 <= lam <= C``;
    with ``S = sum lam_k u_k w_k^T`` and the dual norm Frobenius (fro) or spectral (nuclear).
    ``lam`` is clipped to [0, C] and, for the norm objective, scaled into the dual ball.
    """
    lam = np.clip(lam, 0.0, C)
    S = cs.combine(lam)
    dual_norm = float(np.linalg.norm(S)) if norm == "fro" else float(np.linalg.norm(S, 2)) if S.size else 0.0
    if squared:
        dual = float(cs.rhs @ lam) - 0.25 * dual_norm ** 2
    else:
        scale = 1.0 / dual_norm if dual_norm > 1.0 else 1.0
        dual = scale * float(cs.rhs @ lam)
    return primal - dual
