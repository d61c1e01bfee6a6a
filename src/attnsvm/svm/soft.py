"""Soft-margin Att-SVM: ``min ||W|| + C sum xi`` (or ``||W||^2``) s.t. margins >= 1 - xi.

Solved in the reduced coordinates ``W = P M B^T`` (see :mod:`attnsvm.svm.nuclear`)
with cvxpy: Clarabel for the Frobenius objectives (second-order cone / QP) and for
small nuclear problems, SCS for larger nuclear ones. Always feasible.

Large C behaves like the hard margin, exactly: when the hard-margin SVM is feasible
and its multipliers, in the units of the soft objective, are at most C (``lam_k /
||W||_F`` for ``||W||_F``, ``2 lam_k`` for ``||W||_F^2``, ``lam_k`` for ``||W||_*``,
``2 ||W||_* lam_k`` for ``||W||_*^2``), the hard solution with zero slack satisfies the
KKT conditions of the soft problem and is returned (``info["solver"] = "hard margin"``);
the conic solvers, which lose accuracy as C grows, are not asked.

Scale: the rows are scaled by powers of two (exact) to entries below 1 before the conic
solve, with C rescaled accordingly (W(cX) with penalty C / c^2 is W(X) / c^2 for the norm
objective, C / c^4 for the squared one), and the solution mapped back.

Status: "optimal" only when the certificate passes (relative violation <= 1e-8,
relative duality gap <= 1e-8 Frobenius / 1e-6 nuclear), else "optimal_inaccurate".
"""

from __future__ import annotations

import time

import numpy as np

from attnsvm._validate import check_number
from attnsvm.errors import ValidationError
from attnsvm.svm.constraints import ConstraintSet, row_gram
from attnsvm.svm.reductions import RowScaling, SubspaceBasis, representable
from attnsvm.svm.norms import Norm, get_norm
from attnsvm.svm.options import FrobeniusOptions, SoftOptions
from attnsvm.svm.settings import SolverSettings
from attnsvm.svm.result import SolutionParts, build_solution, soft_certificate
from attnsvm.svm.solution import Certificate, SVMSolution, relative_violation, status_from

__all__ = ["solve_soft"]


def _certify(cs: ConstraintSet, W: np.ndarray, lam: np.ndarray, slack: np.ndarray, C: float, norm: Norm,
             squared: bool) -> Certificate:
    """:func:`~attnsvm.svm.result.soft_certificate` of ``W (d1, d2)``, multipliers ``lam (N,)`` and
    ``slack (N,)`` on the (power-of-two-scaled) rows ``cs``: the violation of (W, slack) relative to
    ``|rhs_k| + ||u_k|| ||w_k|| ||W||_F``."""
    margins = cs.evaluate(W)
    size = np.linalg.norm(cs.U, axis=1) * np.linalg.norm(cs.V, axis=1) * float(np.linalg.norm(W))
    return soft_certificate(violation=relative_violation(margins, cs.rhs, cs.is_equality, size, slack), cs=cs, W=W,
                            lam=lam, margins=margins, slack=slack, C=C, norm=norm, squared=squared, nrm=norm.value(W))


def _hard_margin(cs_s: ConstraintSet, C: float, norm: Norm, squared: bool, settings: SolverSettings):
    """The hard-margin solution (at the soft margin's ``settings``, the rest at their defaults) if it is also the
    soft one (multipliers <= C), else None.

    The dense Frobenius solve decides feasibility; a norm whose dense solver is another solves again with
    it (:data:`~attnsvm.svm.dispatch.SOLVERS`). Its multipliers (of the objective
    :attr:`~attnsvm.svm.norms.Norm.multipliers`) map to the soft objective's. Returns ``(W, mu, info)`` for the
    scaled set ``cs_s``.
    """
    from attnsvm.svm.dispatch import SOLVERS
    from attnsvm.svm.frobenius import solve_frobenius

    hard = solve_frobenius(cs_s, formulation="soft", options=FrobeniusOptions(settings=settings))
    if hard.status != "optimal":
        return None
    dense = SOLVERS[(norm.name, "dense")]
    if dense.run is not solve_frobenius:
        hard = dense(cs_s, "soft", dense.options(settings=settings))
        if hard.status != "optimal":
            return None
    if norm.multipliers == "squared":             # of 1/2 ||W||^2
        nrm = hard.norm_value
        if nrm <= 0:
            return None
        mu = 2.0 * hard.duals if squared else hard.duals / nrm
    else:                                         # of ||W||
        mu = 2.0 * hard.norm_value * hard.duals if squared else hard.duals
    if float(np.max(mu, initial=0.0)) > C:
        return None
    return hard.W, np.maximum(mu, 0.0), {"solver": "hard margin", "hard_method": hard.info.get("method", ""),
                                         "max_multiplier": float(np.max(mu, initial=0.0))}


def _conic(cs_s: ConstraintSet, C: float, norm: Norm, squared: bool):
    """The reduced conic program through cvxpy on the scaled set. Returns ``(W, lam, xi, info)``."""
    import cvxpy as cp

    basis = SubspaceBasis.of(cs_s.U, cs_s.V)
    Ua, Vb = basis.rows(cs_s.U, cs_s.V)
    r1, r2 = Ua.shape[1], Vb.shape[1]
    if r1 == 0 or r2 == 0:          # every row is zero: W = 0, slack pays every positive rhs
        xi = np.maximum(cs_s.rhs, 0.0)
        lam = np.where(cs_s.rhs > 0, C, 0.0)
        return np.zeros((cs_s.d1, cs_s.d2)), lam, xi, {"solver": "none", "solver_status": "optimal"}
    Q, qidx = np.unique(Vb, axis=0, return_inverse=True)
    qidx = np.asarray(qidx).ravel()
    M = cp.Variable((r1, r2))
    xi = cp.Variable(cs_s.N, nonneg=True)
    expr = cp.sum(cp.multiply(Ua.T, (M @ Q.T)[:, qidx]), axis=0)
    con = expr >= cs_s.rhs - xi
    reg, solver, kw = norm.soft_program(M, squared, r1 + r2)
    # divide the objective by C when C > 1: the conic solvers keep their accuracy for large C
    # (Clarabel fails at C >= 1e9 on the undivided objective); multipliers scale back by C
    div = C if C > 1.0 else 1.0
    prob = cp.Problem(cp.Minimize(reg / div + (C / div) * cp.sum(xi)), [con])
    try:
        prob.solve(solver=solver, **kw)
    except cp.error.SolverError as exc:
        raise RuntimeError(f"soft-margin solve failed in {solver}: {exc}") from None
    if M.value is None:
        raise RuntimeError(f"soft-margin solve failed in {solver}: status {prob.status}")
    W = basis.lift(np.asarray(M.value))
    lam = np.asarray(con.dual_value).ravel() * div
    slack = np.maximum(np.asarray(xi.value).ravel(), 0.0)
    return W, lam, slack, {"solver": solver, "solver_status": prob.status}


def _polish_duals(cs: ConstraintSet, W: np.ndarray, slack: np.ndarray, C: float, squared: bool,
                  tau: float = 1e-7) -> np.ndarray | None:
    """Frobenius only (:attr:`~attnsvm.svm.norms.Norm.soft_polish`): multipliers rebuilt from the primal
    solution (the conic solver's own are accurate only to its tolerance times C).

    Rows with positive slack (beyond ``tau``) get ``lam = C``, rows with margin above rhs get 0,
    and the rows on the margin solve the stationarity condition ``sum_k lam_k u_k w_k^T = T``
    (``T = W / ||W||_F``, or ``2 W`` when squared) in the least-squares sense through their
    Gram matrix; then clipped to [0, C]. Returns ``lam (N,)`` or None when W = 0.
    """
    nrm = float(np.linalg.norm(W))
    if nrm == 0.0:
        return None
    margins = cs.evaluate(W)
    r = cs.rhs - margins
    bound = (slack > tau) | (r > tau)
    free = (~bound) & (np.abs(r) <= tau)
    lam = np.where(bound, C, 0.0)
    T = 2.0 * W if squared else W / nrm
    Rm = T - cs.combine(lam)
    idx = np.flatnonzero(free)
    if idx.size:
        Uf, Vf = cs.U[idx], cs.V[idx]
        G = row_gram(Uf, Vf)
        rhs = np.einsum("kd,kd->k", Uf @ Rm, Vf)
        lam[idx] = np.linalg.lstsq(G, rhs, rcond=1e-13)[0]
    return np.clip(lam, 0.0, C)


def solve_soft(cs: ConstraintSet, C: float, *, norm: str = "fro", squared: bool = False,
               options: SoftOptions | None = None, **kw) -> SVMSolution:
    """Solve the soft-margin SVM over the rows of ``cs`` (inequality rows only).

    Parameters
    ----------
    cs : ConstraintSet, ``U (N, d1)``, ``V (N, d2)``
    C : float > 0 (finite), slack penalty
    norm : a norm of :data:`~attnsvm.svm.norms.NORMS` with a soft margin ("fro" or "nuclear")
    squared : bool, use ``||W||^2`` instead of ``||W||`` in the objective
    options : :class:`~attnsvm.svm.options.SoftOptions`, or its settings as keywords: ``support_tol`` in
        [0, 1) (1e-6), margins within it of rhs (or positive slack) count as support; ``max_memory``, the
        limit for the hard-margin check's N x N matrices (default: the package limit)

    Returns
    -------
    SVMSolution with ``W (d1, d2)``, ``slack (N,)``, ``objective`` the optimal value and
    ``duals (N,)`` the multipliers of the margin rows (``0 <= lam <= C``). Status "optimal"
    only when the certificate passes, else "optimal_inaccurate".
    """
    C = check_number(C, "C", low=0.0, low_open=True)
    o = SoftOptions.resolve(options, kw, "solve_soft")
    support_tol = o.settings.support_tol
    nm = get_norm(norm)
    if nm.soft_program is None:
        raise ValidationError(f"norm={nm.name!r} has no soft margin")
    if not isinstance(squared, (bool, np.bool_)):
        raise ValidationError(f"squared must be True or False, got {squared!r}")
    squared = bool(squared)
    if np.any(cs.is_equality):
        raise ValidationError("soft margin applies to inequality constraints only")
    t0 = time.perf_counter()
    if cs.N == 0:  # nothing to separate: W = 0 is optimal with objective 0
        empty, W0 = np.zeros(0), np.zeros((cs.d1, cs.d2))
        return build_solution(cs, status="optimal", formulation="soft", norm=nm.name, W=W0, norm_value=0.0,
                              margins=empty, duals=empty, parts=SolutionParts(support=np.zeros(0, bool), slack=empty),
                              support_tol=support_tol, certificate=_certify(cs, W0, empty, empty, C, nm, squared),
                              info={"solver": "none", "C": float(C)})
    # exact power-of-two scaling, one for all rows (RowScaling.uniform): u' = u 2^-a, w' = w 2^-b,
    # W = W' 2^-(a+b), C' = C 2^(a+b) (norm) or C 4^(a+b) (squared), multipliers as the objective's
    sc = RowScaling.uniform(cs.U, cs.V)
    kind = "squared" if squared else "norm"
    e = -sc.E                                   # a + b
    k = 2 if squared else 1
    C_s = float(sc.lam_to_n(np.array([C], dtype=np.float64), kind)[0])   # C bounds the multipliers: maps as they do
    cs_s = sc.apply(cs)
    got = _hard_margin(cs_s, C_s, nm, squared, o.settings)
    if got is not None:
        W_s, lam_s, info = got
        slack = np.zeros(cs.N)
    else:
        if not np.isfinite(C_s):
            raise ValidationError(f"C = {C!r} at this data scale exceeds the float64 range (C 2^{k * e}) and the "
                                  "hard-margin SVM does not solve the problem: rescale the data towards unit size")
        W_s, lam_s, slack, info = _conic(cs_s, C_s, nm, squared)
    cert = _certify(cs_s, W_s, lam_s, slack, C_s, nm, squared)
    if status_from(cert, nm.name, stationarity=False) != "optimal" and nm.soft_polish:
        lam_p = _polish_duals(cs_s, W_s, slack, C_s, squared)
        if lam_p is not None:
            cert_p = _certify(cs_s, W_s, lam_p, slack, C_s, nm, squared)
            if cert_p.duality_gap < cert.duality_gap:
                lam_s, cert = lam_p, cert_p
                info["duals"] = "polished from the primal solution"
    W = sc.W(W_s)
    if not representable(W, W_s):
        raise ValidationError(f"the soft-margin solution W lies outside the float64 range at this data scale "
                              f"(entries near 2^{e}): rescale the tokens and queries towards unit size")
    lam = sc.lam(lam_s, kind)
    margins = cs_s.evaluate(W_s)
    nrm_s = nm.value(W_s)
    nrm = float(sc.W(np.float64(nrm_s)))
    objective = (nrm ** 2 if squared else nrm) + C * float(slack.sum())
    support = (np.abs(margins - cs.rhs) <= support_tol * np.maximum(1.0, np.abs(cs.rhs))) | (slack > support_tol)
    info.update({"C": float(C), "squared": squared, "seconds": time.perf_counter() - t0})
    status = status_from(cert, nm.name, stationarity=False)
    return build_solution(cs, status=status, formulation="soft", norm=nm.name, W=W, norm_value=nrm, margins=margins,
                          duals=lam, parts=SolutionParts(objective=objective, support=support, slack=slack), certificate=cert,
                          support_tol=support_tol, info=info)
