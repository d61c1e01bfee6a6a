"""Frobenius-norm SVMs: the dual QP in N variables with Gram ``(U U^T) * (V V^T)``.

``min ||W||_F s.t. u_k^T W w_k >= rhs_k`` has the same solution as
``min 1/2 ||W||_F^2``; its dual is a QP in the N multipliers whose Hessian is the
Gram matrix of the rank-one constraint matrices. ``W = sum_k lam_k u_k w_k^T`` is
formed once at the end. See :mod:`attnsvm.svm.qp` for the exact active-set solvers.

Scale: the QP is solved on the row-normalized set (:meth:`ConstraintSet.normalized`:
every row scaled by powers of two to entries below 1, right-hand sides to at most 1),
so data at 1e-200 or 1e200 gives the same answer as at 1 (the Gram matrix of the raw
rows would overflow or underflow). The solution and multipliers are mapped back
exactly; when float64 cannot hold them (W or the multipliers beyond its range) the
solver refuses with a :class:`~attnsvm.errors.ValidationError` instead of returning
zeros or infinities.

Status: "optimal" only when the certificate (computed from the returned W and
multipliers, all quantities relative) passes; "optimal_inaccurate" otherwise;
"infeasible" with Farkas multipliers.
"""

from __future__ import annotations

import time

import numpy as np

from attnsvm._validate import as_float_array
from attnsvm.errors import ValidationError
from attnsvm.memory import require_memory
from attnsvm.svm.constraints import ConstraintSet, bare_set, checked_set, row_gram
from attnsvm.svm.options import FrobeniusOptions
from attnsvm.svm.settings import SolverSettings
from attnsvm.svm.qp import QPResult, goldfarb_idnani, pdas_batch, pdas_rhs, solve_gram_qp
from attnsvm.svm.result import build_solution, farkas_residual, fro_certificate, infeasible_solution
from attnsvm.svm.reductions import RowScaling, representable
from attnsvm.svm.solution import Certificate, SVMSolution, relative_violation, status_from

__all__ = ["solve_frobenius", "solve_frobenius_rhs", "solve_frobenius_batch", "frobenius_solution", "frobenius_certificate",
           "farkas_residual_of", "dense_frobenius_bytes", "frobenius_qp",
           "require_dense_memory", "row_sizes", "not_representable_error"]

def dense_frobenius_bytes(N: int, R: int = 1) -> float:
    """Peak bytes of a dense Frobenius solve of R instances of N rows.

    Measured with tracemalloc (N = 400 and 1600): about 3.4 N x N float64 arrays (``U U^T``,
    ``V V^T``, the Gram matrix, the active-set factor); 4 are budgeted.
    """
    return 4.0 * 8.0 * float(R) * float(N) ** 2


def require_dense_memory(N: int, max_memory=None, R: int = 1, what: str = "dense Frobenius solve") -> None:
    """Raise :class:`~attnsvm.errors.ResourceLimitError` before building N x N Gram matrices that
    need more than the memory limit (``max_memory``, else the package limit).

    Without an explicit ``max_memory``, solves below 1 MiB are not checked (reading the
    available memory costs more than such a solve)."""
    nbytes = dense_frobenius_bytes(N, R)
    if max_memory is None and nbytes < 2**20:
        return
    many = f"{R} x " if R > 1 else ""
    require_memory(dense_frobenius_bytes(N, R), f"{what} of {many}{N} constraints (N x N Gram matrices)", max_memory,
                   hint="fewer samples or tokens per solve (the dense solver's memory grows as N^2)")


def farkas_residual_of(cs: ConstraintSet, f: np.ndarray) -> float:
    """:func:`~attnsvm.svm.result.farkas_residual` of multipliers ``f (N,)`` of the rows of ``cs``,
    computed on the row-normalized set (exact power-of-two maps), so it cannot overflow."""
    cs_n, sc = cs.normalized()
    return farkas_residual(cs_n.U, cs_n.V, sc.farkas_to_n(np.asarray(f, dtype=np.float64)))


def frobenius_certificate(cs: ConstraintSet, W: np.ndarray, lam: np.ndarray,
                          normalized: tuple[ConstraintSet, RowScaling] | None = None) -> tuple[Certificate, np.ndarray]:
    """Certificate (all relative, see :class:`Certificate`) of ``W (d1, d2)`` with multipliers
    ``lam (N,)`` of ``min 1/2 ||W||_F^2``, and the margins ``u_k^T W w_k`` (N,).

    Computed from the given arrays after the exact map to the row-normalized set
    (``normalized``: the pair returned by ``cs.normalized()``, recomputed if None): the
    stationarity residual compares the given W with the combination of the given multipliers
    (:func:`~attnsvm.svm.solution.stationarity_residual`), so a W or multipliers that do not
    belong together fail the certificate.
    """
    cs_n, sc = normalized if normalized is not None else cs.normalized()
    W_n = sc.W_to_n(np.asarray(W, dtype=np.float64))
    lam_n = sc.lam_to_n(np.asarray(lam, dtype=np.float64), "squared")
    m_n = cs_n.evaluate(W_n)
    b, eq = cs_n.rhs, cs_n.is_equality
    viol = relative_violation(m_n, b, eq, row_sizes(cs_n) * float(np.sqrt(np.sum(W_n * W_n))))
    cert = fro_certificate(violation=viol, U=cs_n.U, V=cs_n.V, b=b, eq=eq, lam=lam_n, slack=m_n - b, W=W_n)
    return cert, sc.margins(m_n)


def row_sizes(cs: ConstraintSet) -> np.ndarray:
    """``||u_k|| ||w_k||`` for every row: shape (N,)."""
    return np.linalg.norm(cs.U, axis=1) * np.linalg.norm(cs.V, axis=1)


def not_representable_error(what: str, sc: RowScaling, top_n: float, exponent) -> ValidationError:
    e = int(np.max(exponent)) if np.ndim(exponent) else int(exponent)
    approx = float(np.log10(max(top_n, 1e-300))) + e * float(np.log10(2.0))
    return ValidationError(
        f"the SVM's {what} would be about 1e{approx:.0f}, outside the float64 range, at this data scale "
        f"(rows |u_k| |w_k| around 2^{int(np.median(sc.a + sc.b))}): rescale the tokens and queries towards "
        "unit size; the solution direction does not depend on the scale (W(cX) = W(X) / c^2)")


def frobenius_solution(cs: ConstraintSet, lam: np.ndarray, formulation: str, info: dict,
                       support_tol: float, normalized: tuple[ConstraintSet, RowScaling] | None = None
                       ) -> SVMSolution:
    """Assemble and certify the Frobenius solution ``W = sum lam_k u_k w_k^T``.

    ``lam (N,)``: multipliers of ``cs``, or of its row-normalized set when ``normalized``
    (the pair of ``cs.normalized()``) is given; they are then mapped back exactly.
    Raises ValidationError when W or the multipliers do not fit in float64.
    """
    if normalized is None:
        normalized = cs.normalized()
        cs_n, sc = normalized
        lam_n = sc.lam_to_n(np.asarray(lam, dtype=np.float64), "squared")
    else:
        cs_n, sc = normalized
        lam_n = np.asarray(lam, dtype=np.float64)
    W_n = cs_n.combine(lam_n)
    W = sc.W(W_n)
    if not representable(W, W_n):
        raise not_representable_error("solution W", sc, float(np.abs(W_n).max()), sc.E)
    lam_out = sc.lam(lam_n, "squared")
    if not representable(lam_out, lam_n):
        raise not_representable_error("multipliers", sc, float(np.abs(lam_n).max()), sc.E - sc.a - sc.b)
    cert, margins = frobenius_certificate(cs, W, lam_out, normalized)
    nrm = float(np.ldexp(np.linalg.norm(W_n), sc.E)) if W_n.size else 0.0
    return build_solution(cs, status=status_from(cert, "fro"), formulation=formulation, norm="fro", W=W,
                          norm_value=nrm, margins=margins, duals=lam_out, certificate=cert, support_tol=support_tol,
                          info=info)


def _merit(cert: Certificate) -> float:
    return max(cert.max_violation / 1e-8, cert.duality_gap / 1e-8)


def frobenius_qp(cs_n: ConstraintSet, settings: SolverSettings, method: str = "auto") -> tuple[QPResult, np.ndarray]:
    """The dual QP of a row-normalized set ``cs_n``: ``(QPResult, G (N, N))`` in its own units
    (no mapping back, so any data scale works; used for feasibility and warm starts) at ``settings.feas_tol``."""
    G = cs_n.gram()
    return _gram_qp(G, cs_n, settings.feas_tol, method), G


def _gram_qp(G: np.ndarray, cs_n: ConstraintSet, tol: float, method: str) -> QPResult:
    """:func:`~attnsvm.svm.qp.solve_gram_qp` of ``cs_n`` with its Gram matrix ``G (N, N)``, failures as errors."""
    try:
        return solve_gram_qp.unchecked(G, cs_n.rhs, cs_n.is_equality, tol=tol, method=method)
    except RuntimeError as exc:
        if method == "pdas":
            raise ValidationError("method='pdas' cannot solve this problem (linearly dependent active rows or "
                                  "cycling): use method='auto' or 'goldfarb-idnani'") from None
        raise RuntimeError(f"the Frobenius SVM solver failed: {exc}") from None


def dense_start(cs: ConstraintSet, formulation: str | None, options):
    """The start every dense solve of one constraint set shares (:func:`solve_frobenius`, :func:`solve_frobenius_rhs`,
    :func:`attnsvm.svm.nuclear.solve_nuclear`): the refusal (ResourceLimitError) before building the N x N
    matrices of ``cs`` (N rows) when they need more than the resolved ``options``' ``max_memory``; returns
    ``(options, formulation)``, the label defaulting to ``cs.kind``."""
    require_dense_memory(cs.N, options.settings.max_memory)
    return options, formulation or cs.kind


def solve_frobenius(cs: ConstraintSet, *, formulation: str | None = None, options: FrobeniusOptions | None = None,
                    **kw) -> SVMSolution:
    """Solve ``min ||W||_F s.t.`` the rows of ``cs`` exactly.

    Parameters
    ----------
    cs : ConstraintSet with ``U (N, d1)``, ``V (N, d2)``
    formulation : label stored in the solution (defaults to ``cs.kind``)
    options : :class:`~attnsvm.svm.options.FrobeniusOptions`, or its settings and knobs as keywords:
        the settings (:class:`~attnsvm.svm.settings.SolverSettings`) ``feas_tol`` (the active-set method's
        KKT tolerance), ``support_tol``, ``time_limit`` (the active-set solve runs to its end), ``max_memory``
        (refuse, ResourceLimitError, before building the N x N Gram matrices when they need more), and
        ``method`` ("auto", "pdas", "goldfarb-idnani")

    Returns
    -------
    SVMSolution with ``W (d1, d2)`` (status "optimal", or "optimal_inaccurate" when the
    certificate does not pass) or a Farkas certificate (status "infeasible", ``W is None``).
    """
    o, formulation = dense_start(cs, formulation, FrobeniusOptions.resolve(options, kw, "solve_frobenius"))
    t0 = time.perf_counter()
    normalized = cs.normalized()
    res, G = frobenius_qp(normalized[0], o.settings, o.method)
    return _finish(cs, normalized, G, res, o, formulation, t0)


def solve_frobenius_rhs(cs: ConstraintSet, rhs: np.ndarray, *, formulation: str | None = None,
                        options: FrobeniusOptions | None = None, **kw) -> list[SVMSolution]:
    """:func:`solve_frobenius` of the rows of ``cs`` with R right-hand sides: ``rhs (R, N)``.

    The result r is that of ``solve_frobenius(cs with rhs[r])``, each an SVMSolution with its own
    status and certificate; the row scaling's factors, the Gram matrix and, when every row is an
    equality (a projection onto the rows' span), its Cholesky factor are computed once
    (:func:`~attnsvm.svm.qp.pdas_rhs`). Options as :func:`solve_frobenius`.
    """
    o = FrobeniusOptions.resolve(options, kw, "solve_frobenius_rhs")
    cs = checked_set(cs, "cs")
    rhs = np.array(as_float_array(rhs, "rhs", 2, f"(R, N) with N = {cs.N} (the rows of cs)"), copy=True)
    if rhs.shape[1] != cs.N:
        raise ValidationError(f"rhs must have shape (R, N) with N = {cs.N} (the rows of cs), got {rhs.shape}")
    rhs.flags.writeable = False                                      # the rows become the sets' rhs
    o, formulation = dense_start(cs, formulation, o)
    t0 = time.perf_counter()
    scalings = [RowScaling.unit_rows(cs.U, cs.V, b) for b in rhs]      # the same row factors, E per rhs
    if not scalings:
        return []
    U_n, V_n = scalings[0].rows(cs.U, cs.V)
    G = row_gram(U_n, V_n)
    b_n = np.stack([sc.rhs(b) for sc, b in zip(scalings, rhs)])
    fast = (pdas_rhs.unchecked(G, b_n, cs.is_equality, tol=o.settings.feas_tol) if o.method in ("auto", "pdas")
            else [None] * len(rhs))
    out = []
    for b, sc, bn, res in zip(rhs, scalings, b_n, fast):
        t1 = time.perf_counter() if out else t0
        cs_r = cs.with_rows(cs.U, cs.V, b)
        cs_n = cs_r.with_rows(U_n, V_n, bn)
        if res is None:                                             # what solve_frobenius does after pdas fails
            res = _gram_qp(G, cs_n, o.settings.feas_tol, "goldfarb-idnani" if o.method == "auto" else o.method)
        out.append(_finish(cs_r, (cs_n, sc), G, res, o, formulation, t1))
    return out


def _finish(cs: ConstraintSet, normalized: tuple[ConstraintSet, RowScaling], G: np.ndarray, res: QPResult,
            o: FrobeniusOptions, formulation: str, t0: float) -> SVMSolution:
    """The SVMSolution of the QP result ``res`` of ``cs`` (its row-normalized pair and Gram matrix ``G (N, N)``):
    Farkas certificate when infeasible; else certified, refined by the robust method when pdas's is not optimal."""
    tol, method, support_tol = o.settings.feas_tol, o.method, o.settings.support_tol
    cs_n, sc = normalized
    info = {"method": res.method, "iterations": res.iterations, "seconds": time.perf_counter() - t0}
    if res.status == "infeasible":
        f = sc.farkas(res.farkas)
        return infeasible_solution(cs, f, formulation=formulation, norm="fro", info=info,
                                   residual=farkas_residual_of(cs, f), offending=res.info.get("offending"))
    sol = frobenius_solution(cs, res.lam, formulation, info, support_tol, normalized)
    if sol.status != "optimal" and method == "auto" and res.method == "pdas":
        # refine: the robust dual active-set method from scratch, keep the better certificate
        res2 = goldfarb_idnani.unchecked(G, cs_n.rhs, cs_n.is_equality, tol=tol)
        if res2.status == "optimal":
            sol2 = frobenius_solution(cs, res2.lam, formulation, dict(info, method=res2.method,
                                                                      iterations=res.iterations + res2.iterations),
                                      support_tol, normalized)
            if _merit(sol2.certificate) < _merit(sol.certificate):
                sol = sol2
    sol.info["seconds"] = time.perf_counter() - t0
    return sol


def solve_frobenius_batch(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, is_equality: np.ndarray,
                          settings: SolverSettings):
    """Solve R independent Frobenius SVMs of equal size at once (vectorized numpy).

    Each instance is row-normalized first (as :func:`solve_frobenius`), so any data scale
    float64 can represent gives the same answer.

    Parameters
    ----------
    U : (R, N, d1), V : (R, N, d2), rhs : (R, N), is_equality : (R, N) bool
    settings : :class:`~attnsvm.svm.settings.SolverSettings` with its defaults filled
        (``SolverSettings(...).resolved("fro", "dense")``): ``feas_tol`` of the active-set methods,
        ``support_tol``, ``max_memory`` (the limit for the R x N x N Gram matrices)

    Returns
    -------
    W : (R, d1, d2), NaN for infeasible and undecided instances
    lam : (R, N) multipliers (Farkas multipliers for infeasible instances: exact ones rounded, see
        :func:`~attnsvm.svm.result.infeasible_solution`; the solver's for undecided ones)
    status : (R,) array of str ("optimal", "optimal_inaccurate", "infeasible" (proven) or "undecided")
    certificates : list of R Certificate
    """
    tol, support_tol = settings.feas_tol, settings.support_tol
    R, N, d1 = U.shape
    d2 = V.shape[2]
    require_dense_memory(N, settings.max_memory, R=R, what="batched dense Frobenius solve")
    sets = [bare_set(U[r], V[r], rhs[r], is_equality[r], "batch").normalized() for r in range(R)]
    Un = np.stack([s[0].U for s in sets]) if R else np.zeros((0, N, d1))
    Vn = np.stack([s[0].V for s in sets]) if R else np.zeros((0, N, d2))
    bn = np.stack([s[0].rhs for s in sets]) if R else np.zeros((0, N))
    G = row_gram(Un, Vn)
    lam_n, ok = pdas_batch.unchecked(G, bn, is_equality, tol=tol)
    W = np.full((R, d1, d2), np.nan)
    lam = np.zeros((R, N))
    status = np.empty(R, dtype=object)
    certs: list[Certificate] = []
    for r in range(R):
        cs_r, (cs_n, sc) = bare_set(U[r], V[r], rhs[r], is_equality[r], "batch"), sets[r]
        res = None if ok[r] else goldfarb_idnani.unchecked(G[r], bn[r], is_equality[r], tol=tol)
        if res is not None and res.status == "infeasible":
            f = sc.farkas(res.farkas)
            sol = infeasible_solution(cs_r, f, formulation="batch", norm="fro", residual=farkas_residual_of(cs_r, f))
            lam[r] = f if sol.certificate.farkas is None else sol.certificate.farkas
            status[r] = sol.status
            certs.append(sol.certificate)
            continue
        ln = lam_n[r] if res is None else res.lam
        sol = frobenius_solution(cs_r, ln, "batch", {}, support_tol, (cs_n, sc))
        if sol.status != "optimal" and res is None:
            res2 = goldfarb_idnani.unchecked(G[r], bn[r], is_equality[r], tol=tol)
            if res2.status == "optimal":
                sol2 = frobenius_solution(cs_r, res2.lam, "batch", {}, support_tol, (cs_n, sc))
                if _merit(sol2.certificate) < _merit(sol.certificate):
                    sol = sol2
        W[r], lam[r], status[r] = sol.W, sol.duals, sol.status
        certs.append(sol.certificate)
    return W, lam, status.astype(str), certs
