"""The last stage of every solver: certify a solution and build the :class:`SVMSolution`.

One formula per certificate (:func:`hard_certificate` with the norm's objective from
:mod:`attnsvm.svm.norms`, :func:`soft_certificate`, :func:`farkas_certificate`), whatever the method that found the solution
(dense or working set, one instance or a batch), and one builder of the result
(:func:`build_solution`, by keyword; :func:`infeasible_solution` for a Farkas certificate). The
solvers pass the rows that carry multipliers in their scaled units (:mod:`attnsvm.svm.reductions`):
all N rows for the dense methods, the working set for the working-set methods (multipliers are
zero elsewhere, so the sums are the same).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnsvm.svm.constraints import ConstraintSet
from attnsvm.svm.farkas import exact_farkas, norm_lower_bound
from attnsvm.svm.norms import combine_rows, get_norm
from attnsvm.svm.reductions import SubspaceBasis
from attnsvm.svm.solution import Certificate, SVMSolution, certificate_passes, relative_gap

__all__ = ["build_solution", "SolutionParts", "no_solution",
           "infeasible_solution", "support_mask", "farkas_residual", "hard_certificate",
           "fro_certificate", "nuclear_certificate", "soft_certificate", "farkas_certificate", "lift_solution"]


def _dual_terms(lam: np.ndarray, eq: np.ndarray, slack: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(lam_f, dual_infeasibility, |lam slack|_max)``: multipliers made dual feasible (inequality rows
    clipped at 0), the largest negative inequality multiplier relative to the largest, and the largest
    complementarity product on inequality rows. All (s,)."""
    ineq = ~eq
    lam_f = np.where(ineq, np.maximum(lam, 0.0), lam)
    top = float(np.max(np.abs(lam))) if lam.size else 0.0
    neg = float(np.max(-lam[ineq], initial=0.0))
    comp = float(np.max(np.abs(lam * np.where(ineq, slack, 0.0)), initial=0.0))
    return lam_f, (max(neg, 0.0) / top if top > 0 else 0.0), comp


def hard_certificate(norm, *, violation: float, U: np.ndarray, V: np.ndarray, b: np.ndarray, eq: np.ndarray,
                     lam: np.ndarray, slack: np.ndarray, W: np.ndarray,
                     residual: float | None = None) -> tuple[Certificate, float]:
    """The certificate of ``min ||W||`` for the norm ``norm`` (a name or :class:`~attnsvm.svm.norms.Norm`;
    see :class:`Certificate`) and ``||W||``.

    ``violation``: the relative max violation over all rows (:func:`relative_violation`); the rows
    carrying multipliers, in scaled units: ``U (s, d1)``, ``V (s, d2)``, ``b (s,)``, ``eq (s,)``,
    ``lam (s,)`` (multipliers of the norm's objective, :attr:`~attnsvm.svm.norms.Norm.multipliers`),
    ``slack (s,)`` (margin minus rhs), and ``W (d1, d2)`` in the same units. ``residual``: the
    stationarity residual when the caller measures it on the returned pair (default: the norm's own,
    :attr:`~attnsvm.svm.norms.Norm.objective`). The primal and dual objectives and the stationarity
    residual are the norm's; the dual infeasibility and complementarity are the same for every norm.
    """
    nm = get_norm(norm)
    lam_f, dual_inf, comp = _dual_terms(lam, eq, slack)
    t = nm.objective(U, V, b, lam, lam_f, W, residual)
    cert = Certificate(
        max_violation=violation,
        stationarity_residual=t.stationarity,
        duality_gap=relative_gap(t.primal, t.dual),
        dual_infeasibility=dual_inf,
        complementarity=comp / t.scale if t.scale > 0 else comp,
    )
    return cert, t.value


def fro_certificate(*, violation: float, U: np.ndarray, V: np.ndarray, b: np.ndarray, eq: np.ndarray,
                    lam: np.ndarray, slack: np.ndarray, W: np.ndarray, residual: float | None = None) -> Certificate:
    """The certificate of ``min 1/2 ||W||_F^2``: :func:`hard_certificate` of the Frobenius norm (arguments as
    there; ``residual`` default :func:`stationarity_residual` of these rows)."""
    return hard_certificate("fro", violation=violation, U=U, V=V, b=b, eq=eq, lam=lam, slack=slack, W=W,
                            residual=residual)[0]


def nuclear_certificate(*, violation: float, U: np.ndarray, V: np.ndarray, b: np.ndarray, eq: np.ndarray,
                        lam: np.ndarray, slack: np.ndarray, W: np.ndarray) -> tuple[Certificate, float]:
    """The certificate of ``min ||W||_*`` (dual ball ``||sum lam_k u_k w_k^T||_2 <= 1``) and ``||W||_*``:
    :func:`hard_certificate` of the nuclear norm (arguments as there, multipliers of the norm objective)."""
    return hard_certificate("nuclear", violation=violation, U=U, V=V, b=b, eq=eq, lam=lam, slack=slack, W=W)


def soft_certificate(*, violation: float, cs: ConstraintSet, W: np.ndarray, lam: np.ndarray, margins: np.ndarray,
                     slack: np.ndarray, C: float, norm: str, squared: bool, nrm: float) -> Certificate:
    """The certificate of the soft margin ``min ||W|| + C sum xi`` (``||W||^2`` when ``squared``).

    ``cs`` the (scaled) rows, ``W (d1, d2)``, ``lam (N,)`` (``0 <= lam <= C``), ``margins (N,)``,
    ``slack (N,)``, ``nrm`` the norm of W. The dual value is that of the multipliers clipped to
    [0, C] and, for the norm objective, scaled into the dual-norm ball; the stationarity residual
    compares ``W / ||W||`` (``2 W``) with ``sum lam_k u_k w_k^T`` (Frobenius) or measures the
    spectral-norm excess and the alignment (nuclear).
    """
    primal = (nrm ** 2 if squared else nrm) + C * float(slack.sum())
    lam_c = np.clip(lam, 0.0, C)
    S_c = cs.combine(lam_c)
    nm = get_norm(norm)
    dual_norm = nm.dual(S_c)
    if squared:
        dual = float(cs.rhs @ lam_c) - 0.25 * dual_norm ** 2
    else:
        dual = (1.0 / dual_norm if dual_norm > 1.0 else 1.0) * float(cs.rhs @ lam_c)
    top = float(np.max(np.abs(lam))) if lam.size else 0.0
    residual = 0.0 if cs.N == 0 else float("nan")
    if W.size and cs.N:
        residual = nm.soft_stationarity(W, cs.combine(lam), nrm, squared)
    return Certificate(max_violation=violation,
                       duality_gap=relative_gap(primal, dual),
                       stationarity_residual=residual,
                       dual_infeasibility=float(max(np.max(-lam, initial=0.0), np.max(lam - C, initial=0.0))) / C,
                       complementarity=(float(np.abs(lam * (margins - cs.rhs + slack)).max()) / max(primal, 1e-300)
                                        if top > 0 else 0.0))


def farkas_residual(U: np.ndarray, V: np.ndarray, f: np.ndarray) -> float:
    """``||sum_k f_k u_k w_k^T||_F / sum_k |f_k| ||u_k|| ||w_k||`` (0 for an exact Farkas certificate).

    ``U (s, d1)``, ``V (s, d2)``, ``f (s,)`` in scaled units (rows of size about 1: nothing overflows);
    ``inf`` when ``f`` is not finite.
    """
    if not np.all(np.isfinite(f)):
        return float("inf")
    size = np.linalg.norm(U, axis=1) * np.linalg.norm(V, axis=1)
    den = float(np.abs(f) @ size)
    num = float(np.linalg.norm(combine_rows(U, V, f)))
    return num / den if den > 0 else 0.0


def farkas_certificate(cs: ConstraintSet, farkas: np.ndarray, residual: float, offending=None) -> Certificate:
    """The certificate of infeasibility: Farkas multipliers ``farkas (N,)`` of the rows of ``cs``, their
    relative residual (:func:`farkas_residual`) and the offending rows (default: the multipliers above
    ``1e-9`` of the largest) with readable labels (the first 20)."""
    farkas = np.asarray(farkas, dtype=np.float64)
    if offending is None:
        offending = np.flatnonzero(np.abs(farkas) > 1e-9 * max(float(np.abs(farkas).max(initial=0.0)), 1e-300))
    offending = [int(k) for k in offending]
    return Certificate(stationarity_residual=residual, farkas=farkas, offending=offending,
                       offending_labels=[cs.label(k) for k in offending[:20]])


def support_mask(margins: np.ndarray, cs: ConstraintSet, support_tol: float) -> np.ndarray:
    """Active inequality rows (N,) bool: ``|margin - rhs| <= support_tol * max(|rhs|, max |rhs|)``."""
    b = cs.rhs
    R = float(np.max(np.abs(b))) if b.size else 1.0
    R = R if R > 0 else 1.0
    return (np.abs(margins - b) <= support_tol * np.maximum(R, np.abs(b))) & ~cs.is_equality


@dataclasses.dataclass(frozen=True)
class SolutionParts:
    """Parts of an :class:`SVMSolution` that a solver computed itself, in place of :func:`build_solution`'s
    defaults: ``objective`` (default the norm value), ``support (N,) bool`` (default :func:`support_mask`),
    ``slack (N,)`` (soft margin; default None)."""

    objective: float | None = None
    support: np.ndarray | None = None
    slack: np.ndarray | None = None


def build_solution(cs: ConstraintSet, *, status: str, formulation: str, norm: str, W: np.ndarray | None,
                   norm_value: float, margins: np.ndarray, duals: np.ndarray, certificate: Certificate,
                   support_tol: float = 1e-6, info: dict | None = None, parts: SolutionParts | None = None) -> SVMSolution:
    """The :class:`SVMSolution` of the rows ``cs`` (N rows): ``W (d1, d2)`` or None, ``margins (N,)``,
    ``duals (N,)`` in the units of ``cs``; ``parts`` (:class:`SolutionParts`) the objective, support and slack
    when the solver gives them (the objective defaults to ``norm_value``, the support to :func:`support_mask`
    at ``support_tol``)."""
    parts = SolutionParts() if parts is None else parts
    objective, support, slack = parts.objective, parts.support, parts.slack
    return SVMSolution(status=status, formulation=formulation, norm=norm, W=W, norm_value=norm_value,
                       objective=norm_value if objective is None else objective, margins=margins, duals=duals,
                       support=support_mask(margins, cs, support_tol) if support is None else support,
                       constraints=cs, certificate=certificate, slack=slack, support_tol=support_tol,
                       info={} if info is None else info)


def infeasible_solution(cs: ConstraintSet, farkas: np.ndarray, *, formulation: str, norm: str, residual: float,
                        info: dict | None = None, offending=None) -> SVMSolution:
    """The result of a solver that stopped on Farkas multipliers ``farkas (N,)`` (original units).

    "infeasible" (W None, margins NaN, duals 0) only when :func:`~attnsvm.svm.farkas.exact_farkas`
    proves it on the data as given (rows built from tokens: on the tokens' exact differences); the
    certificate then holds the exact multipliers rounded to float64 (the solver's when those do not
    fit, and for a robust proof, ``info["farkas_proof"] == "robust"``, the float multipliers near which
    exact ones are proven to exist). Otherwise "undecided": the multipliers proved only that every W satisfying the rows has
    ``||W||_F >= certificate.norm_lower_bound`` (:func:`~attnsvm.svm.farkas.norm_lower_bound`),
    ``info["farkas_unproven"]`` says why, and ``info["farkas_residual"]`` gives their relative
    residual ``residual``.
    """
    info = {} if info is None else info
    proof = exact_farkas(cs.U, cs.V, cs.rhs, cs.is_equality, farkas, differences=cs.token_differences)
    if proof.proven:
        f = farkas if proof.farkas is None else proof.farkas
        if proof.farkas is not None:
            cs_n, sc = cs.normalized()
            residual = farkas_residual(cs_n.U, cs_n.V, sc.farkas_to_n(f))
            offending = proof.rows
        cert = farkas_certificate(cs, f, residual, offending)
        cert.norm_lower_bound = float("inf")
        info["farkas_proof"] = "exact" if proof.exact else "robust"
        return no_solution(cs, "infeasible", formulation, norm, float("inf"), cert, info)
    bound = norm_lower_bound(cs.U, cs.V, cs.rhs, cs.is_equality, farkas)
    info.update(farkas_unproven=proof.reason, farkas_residual=float(residual))
    cert = Certificate(norm_lower_bound=bound)
    return no_solution(cs, "undecided", formulation, norm, float("nan"), cert, info)


def no_solution(cs: ConstraintSet, status: str, formulation: str, norm: str, norm_value: float,
                certificate: Certificate, info: dict) -> SVMSolution:
    """A result without a W ("infeasible" or "undecided"): margins NaN (N,), duals 0, empty support."""
    N = cs.N
    return build_solution(cs, status=status, formulation=formulation, norm=norm, W=None, norm_value=norm_value,
                          margins=np.full(N, np.nan), duals=np.zeros(N), certificate=certificate, info=info,
                          parts=SolutionParts(support=np.zeros(N, bool)))


def lift_solution(sol: SVMSolution, cs: ConstraintSet, basis: SubspaceBasis, *, gap_bound: float = 0.0,
                  info: dict | None = None) -> SVMSolution:
    """The solution ``sol`` of rows reduced to ``basis`` (``M (r1, r2)``) as the solution of the full rows ``cs``
    (the same N rows, in the same order): ``W = P M B^T`` (:meth:`~attnsvm.svm.reductions.SubspaceBasis.lift`),
    the same margins, multipliers and support, and the duality gap raised by ``gap_bound`` >= 0 (what the
    rows' parts outside the bases can add to it); the status is "optimal" only if that certificate still
    passes (:func:`~attnsvm.svm.solution.certificate_passes`), else "optimal_inaccurate". An infeasible or
    undecided ``sol`` keeps its certificate (the Farkas multipliers are those of the same rows). ``info``: entries
    added to the solution's info.
    """
    extra = dict(sol.info or {}, **(info or {}))
    if not sol.feasible:
        return dataclasses.replace(sol, constraints=cs, info=extra)
    cert = dataclasses.replace(sol.certificate, duality_gap=sol.certificate.duality_gap + gap_bound)
    status = sol.status
    if status == "optimal" and not certificate_passes(cert, sol.norm):
        status = "optimal_inaccurate"
    return dataclasses.replace(sol, W=basis.lift(sol.W), constraints=cs, certificate=cert, status=status, info=extra)
