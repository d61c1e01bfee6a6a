"""One layer's SVM inputs, validated once, and what a probe keeps of one SVM.

:class:`LayerInputs` holds the bias-augmented tokens ``X (m, T, D)``, queries ``Z (m, D)`` and
candidates ``(m, T)`` of the sentences entering the SVMs of one layer, checked once, plus the bases
P (token differences) and B (queries) that ``corr_restricted`` projects on. The layer's tokens are
augmented, masked and checked once (:meth:`LayerInputs.build`); every head, random baseline and null
head of the layer then builds its own Gen-SVM rows from these arrays through the public
:func:`attnsvm.svm.gen_constraints` (the rows depend on the selection), whose own check of X is a scan
for non-finite values, small next to building the rows (the svm layer exports no unchecked builder).

**Solved in the layer's bases.** Every Gen-SVM row of the layer is ``(x_a - x_b)^T W z_i`` with
``x_a - x_b`` in the span of P and ``z_i`` in the span of B, whatever the selection. When the layer has
fewer rows than dimensions (``N = sum(cand) - m < D``: the probe's 16-sentence SVMs, N = 299 < 385), the
solver would compute a basis of each SVM's rows anyway, the same span P for all of them; here the rows
are built once on the reduced tokens ``X P (m, T, r1)`` and queries ``Z B (m, r2)`` and the solution is
mapped back, ``W = P M B^T`` (:meth:`LayerInputs.svm`). This is exact for the full problem: margins
``u^T (P M B^T) z = (P^T u)^T M (B^T z)`` and ``||W||_* = ||M||_*`` hold for any u, z; the multipliers'
matrix ``S = sum_k lam_k u_k z_k^T`` equals ``P S_M B^T`` up to the rows' parts outside the bases, which
:meth:`LayerInputs.build` measures (``span_residual``) and :meth:`LayerInputs.svm` bounds per solve by
``||lam||_1 span_residual``; that bound is added to the certificate's duality gap (so "optimal" still
proves the full problem's optimum) and a solve whose bound exceeds :data:`SPAN_TOL` is solved in the
full space instead. With N >= D (the probe at scale) the rows are built in the full space as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm._validate import as_float_array
from attnsvm.errors import ValidationError
from attnsvm.svm import ConstraintSet, SubspaceBasis, gen_constraints, lift_solution, solve
from attnsvm.svm.analysis import row_basis

#: the largest bound ``||lam||_1 span_residual`` on ``||S - P S_M B^T||_2`` (the multipliers' matrix outside the
#: layer's bases) with which a solve in the layer's bases is kept; beyond it the SVM is solved in the full space
SPAN_TOL = 1e-10


def corr_parts(A: np.ndarray, B) -> tuple[float, float, float]:
    """The parts :func:`corr` divides: ``(<A, B>, ||A||_F, ||B||_F)`` of two matrices of one shape (float64); three
    NaNs if B is None (an infeasible SVM). Stored beside a correlation so that a check can recompute it
    (:func:`attnsvm.experiments.checks.correlation_parts_check`)."""
    if B is None:
        return float("nan"), float("nan"), float("nan")
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    return float(np.sum(A * B)), float(np.linalg.norm(A)), float(np.linalg.norm(B))


def corr(A: np.ndarray, B) -> float:
    """Cosine of two matrices, ``<A, B> / (||A||_F ||B||_F)`` of :func:`corr_parts`; NaN if either is zero or B is
    None (an infeasible SVM)."""
    inner, na, nb = corr_parts(A, B)
    if not (na > 0 and nb > 0):  # zero, or NaN (no SVM)
        return float("nan")
    return float(inner / (na * nb))


def margin_ratio(scores: np.ndarray, selected: np.ndarray, cand: np.ndarray, W_visible: np.ndarray,
                 W_svm) -> float:
    """How much of the largest achievable normalized margin a head attains on its own selections.

    ``rho = gamma(W) ||W_svm||_* / ||W_visible||_*``: ``gamma`` the head's own hard margin on its selections (the
    smallest ``s_a - s_b`` of its scores over every sentence with an unselected candidate, a selected, b an
    unselected candidate: the margin of the SVM's inequality rows), ``W_visible`` the part of its W the sentences
    see (:meth:`LayerInputs.restrict`; the margins are exactly those of ``W_visible``), ``W_svm`` the nuclear Gen-SVM
    of the same selections, whose normalized margin ``1 / ||W_svm||_*`` is the largest any W reaches. So
    ``rho <= 1`` whenever W also ties its selected tokens (the SVM's equality rows; only a head that breaks them can
    exceed 1), ``rho = 1`` exactly when the visible W is a max-margin solution, and it is invariant to W's scale.

    Why this and not ``corr_restricted`` (benchmarks/probe_consistency.py, docs/guide/probe.md "Which statistic is
    consistent as m grows"): on planted heads, random and sink-plus-random heads' rho stays flat as the number of
    SVM sentences m grows (0.01-0.07 from m = 8 to 128), while their ``corr_restricted`` drifts with m (up for random
    heads and their nulls, as more rows pin each SVM toward its own head; down for sink heads, as the sink's share
    of the restriction falls), and heads that are max-margin on a larger sample are *below* their nulls in every
    correlation until m nears that sample, but beyond them in rho at every m (z growing with m). What it cannot
    see: a head that is max-margin only in part (a tenth of random W is enough) or whose attention falls off
    gradually has some selected and unselected token close together, and its rho is then that of its nulls. Its
    null values are skewed to the right: a predictive-t p-value should be taken on ``log(rho)``.

    Parameters
    ----------
    scores : (m, T) the head's scores ``x_t^T W z_i`` (:meth:`LayerInputs.scores`)
    selected : (m, T) bool, its selections (inside ``cand``)
    cand : (m, T) bool, the candidates
    W_visible : (D, D) the restricted W (:meth:`LayerInputs.restrict`)
    W_svm : (D, D) the certified SVM of ``selected``, or None (no certified SVM)

    Returns
    -------
    float rho; NaN (as :func:`corr`) without a certified SVM, when every candidate is selected in every sentence
    (no inequality row), or when ``W_visible`` or ``W_svm`` is zero
    """
    scores = np.asarray(scores, dtype=np.float64)
    selected, cand = np.asarray(selected), np.asarray(cand)
    if scores.ndim != 2 or selected.shape != scores.shape or cand.shape != scores.shape:
        raise ValidationError(f"scores, selected and cand must share one (m, T) shape, got {scores.shape}, "
                              f"{selected.shape}, {cand.shape}")
    if selected.dtype != bool or cand.dtype != bool or np.any(selected & ~cand):
        raise ValidationError("selected and cand must be bool arrays with selected inside cand")
    if W_svm is None:
        return float("nan")
    rows = (cand & ~selected).any(axis=1) & selected.any(axis=1)
    if not rows.any():
        return float("nan")
    lo = np.where(selected, scores, np.inf).min(axis=1)
    hi = np.where(cand & ~selected, scores, -np.inf).max(axis=1)
    gamma = float((lo - hi)[rows].min())
    nv, ns = np.linalg.norm(W_visible, "nuc"), np.linalg.norm(W_svm, "nuc")
    if not (nv > 0 and ns > 0) or not np.isfinite(gamma):
        return float("nan")
    return float(gamma * ns / nv)


def summary(sol) -> dict:
    """What the table keeps of an SVMSolution (not its rows): W (None unless ``sol.certified``:
    nothing is compared with an infeasible or uncertified solution), ``sol.status`` ("optimal",
    i.e. certified; "optimal_inaccurate"; "infeasible"), the relative duality gap
    ``(||W||_* - rhs^T lam) / ||W||_*`` (the certificate's gap is divided by ``max(1, ||W||_*)``
    instead, and these optima are ~0.1), the certificate's relative largest violation and the
    nuclear norm, plus the support tokens ``(m, T) bool`` (:meth:`SVMSolution.support_tokens`; all False
    when infeasible) for the probe view."""
    cert = sol.certificate
    secs = float((sol.info or {}).get("seconds", float("nan")))  # the solver's own wall time
    if not sol.feasible:
        return {"W": None, "status": sol.status, "gap": float("nan"), "violation": float("nan"), "nuclear": float("inf"),
                "support": np.zeros(sol.constraints.shape, bool), "seconds": secs}
    nuc = float(sol.norm_value)
    dual = float(sol.constraints.rhs @ sol.duals)
    return {"W": sol.W if sol.certified else None, "status": sol.status,
            "gap": abs(nuc - dual) / nuc if nuc > 0 else 0.0, "violation": float(cert.max_violation), "nuclear": nuc,
            "support": sol.support_tokens(), "seconds": secs}


#: how far (relative to the largest query coordinate) a :class:`QueryMap`'s queries may lie from the layer's Z
QUERY_MAP_TOL = 1e-9


@dataclass(frozen=True)
class QueryMap:
    """A rotary head's queries as a function of its query tokens' states (:func:`attnsvm.real.probe_steps.rotary_query_map`):
    ``z_i = (R_i A s_i, 1)``, the post-rotary bias-augmented query of sentence i.

    Attributes
    ----------
    S : (m, d + 1) float64, the bias-augmented states of each sentence's query token (the states the head acts on;
        last coordinate 1)
    A : (h, d + 1) float64, the head's pre-rotary query map ``[W_Q^T | b_Q]`` (``q = A s``; h the head size)
    R : (m, h, h) float64, the rotation of each query's position
    """

    S: np.ndarray
    A: np.ndarray
    R: np.ndarray

    def queries(self, S: np.ndarray | None = None) -> np.ndarray:
        """``(m, h + 1)`` the post-rotary bias-augmented queries ``(R_i A s_i, 1)`` of the states ``S (m, d + 1)``
        (default :attr:`S`; a null head's rotated states, :func:`attnsvm.real.nulls.sink_query_states`)."""
        S = self.S if S is None else np.asarray(S, dtype=np.float64)
        q = np.einsum("nab,nb->na", self.R, S @ self.A.T)
        return np.concatenate([q, np.ones((q.shape[0], 1))], axis=1)

    def check(self, Z: np.ndarray) -> None:
        """Validate the shapes against the layer's queries ``Z (m, h + 1)`` and that :meth:`queries` gives them
        (within :data:`QUERY_MAP_TOL` of the largest query coordinate); a ValidationError naming ``query_map``."""
        m, D = Z.shape
        S, A, R = (np.asarray(a, dtype=np.float64) for a in (self.S, self.A, self.R))
        if S.ndim != 2 or S.shape[0] != m or A.shape != (D - 1, S.shape[1]) or R.shape != (m, D - 1, D - 1):
            raise ValidationError(f"query_map must have S (m, d + 1), A (h, d + 1), R (m, h, h) with m = {m}, "
                                  f"h = D - 1 = {D - 1}; got {S.shape}, {A.shape}, {R.shape}")
        if not (np.all(np.isfinite(S)) and np.all(np.isfinite(A)) and np.all(np.isfinite(R))):
            raise ValidationError("query_map must hold finite arrays")
        gap = float(np.abs(self.queries() - Z).max())
        if not gap <= QUERY_MAP_TOL * max(1.0, float(np.abs(Z).max())):
            raise ValidationError(f"query_map: its queries (R_i A s_i, 1) lie {gap:.3g} from Z (more than "
                                  f"{QUERY_MAP_TOL:g} relative); it is not this layer's query map")


@dataclass
class LayerInputs:
    """The SVM sentences of one layer (one query per sentence), validated once.

    Attributes
    ----------
    X : (m, T, D) float64 bias-augmented tokens (padding zero)
    Z : (m, D) float64 queries
    cand : (m, T) bool, the tokens each query can select (real tokens; causal: up to the query)
    P : (D, r1) orthonormal basis of the token differences' span
    B : (D, r2) orthonormal basis of the queries' span
    Xr : (m, T, r1) ``X P``, the tokens in the layer's bases, or None: the SVMs are solved in the full space
        (the layer has at least as many rows as dimensions; see the module docstring)
    Zr : (m, r2) ``Z B``, or None with Xr
    span_residual : per unit of multiplier, the bound on the rows' parts outside the bases
        (:func:`span_residual`; inf without Xr); a solve's bound is ``||lam||_1 span_residual``
    query_map : a rotary head's queries as a function of its query tokens' states (:class:`QueryMap`), which its
        sink null rotates (:func:`attnsvm.real.nulls.sink_query_states`); None for heads whose queries are the
        layer's states
    """

    X: np.ndarray
    Z: np.ndarray
    cand: np.ndarray
    P: np.ndarray
    B: np.ndarray
    Xr: np.ndarray | None = None
    Zr: np.ndarray | None = None
    span_residual: float = float("inf")
    query_map: QueryMap | None = None

    @classmethod
    def build(cls, X, Z, cand, query_map: QueryMap | None = None) -> "LayerInputs":
        """Validate ``X (m, T, D)``, ``Z (m, D)``, ``cand (m, T)`` (at least one candidate per
        sentence) and ``query_map`` (:meth:`QueryMap.check`: it must give Z) and compute the bases P, B."""
        X = as_float_array(X, "X", 3, "(m, T, D)")
        m, T, D = X.shape
        Z = as_float_array(Z, "Z", 2, f"(m, D) = ({m}, {D})")
        if Z.shape != (m, D):
            raise ValidationError(f"Z must have shape (m, D) = ({m}, {D}), got {Z.shape}")
        cand = np.asarray(cand)
        if cand.dtype != bool or cand.shape != (m, T):
            raise ValidationError(f"cand must be a bool array of shape (m, T) = ({m}, {T}), got {cand.dtype} "
                                  f"{cand.shape}")
        if not cand.any(axis=1).all():
            raise ValidationError("cand must mark at least one token per sentence")
        if query_map is not None:
            query_map.check(Z)
        first = np.argmax(cand, axis=1)
        diffs = (X - X[np.arange(m), first][:, None, :])[cand]
        P, B = row_basis(diffs), row_basis(Z)
        if int(cand.sum()) - m >= D:  # as many rows as dimensions: the solver keeps the rows' own coordinates
            return cls(X, Z, cand, P, B, query_map=query_map)
        return cls(X, Z, cand, P, B, X @ P, Z @ B, span_residual(diffs, P, Z, B), query_map)

    def with_queries(self, Z: np.ndarray) -> "LayerInputs":
        """The same tokens and candidates with the queries ``Z (m, D)`` (a null head's own, e.g. a rotary head's
        sink null): validated and its bases computed as :meth:`build` does; no query map."""
        return LayerInputs.build(self.X, Z, self.cand)

    @property
    def m(self) -> int:
        return self.X.shape[0]

    def restrict(self, W: np.ndarray) -> np.ndarray:
        """``P P^T W B B^T`` (D, D): the part of W these sentences can see (``W B`` first: ``D^2 r2`` multiply-adds
        instead of ``D^2 r1``, r2 the queries' rank)."""
        return (self.P @ (self.P.T @ (W @ self.B))) @ self.B.T

    def svm(self, selected: np.ndarray, **solver_options):
        """The nuclear Gen-SVM of ``selected (m, T)`` bool (inside ``cand``, one token at least per
        sentence; :func:`attnsvm.svm.gen_constraints` with ``valid = cand``): an SVMSolution of the full
        rows, ``W (D, D)``. With :attr:`Xr` it is solved in the layer's bases and mapped back (see the module
        docstring; ``info["layer_bases"]`` is ``[r1, r2]`` and ``info["span_bound"]`` the bound added to the
        duality gap), unless that bound exceeds :data:`SPAN_TOL` (then solved in the full space)."""
        method = solver_options.pop("method", "auto")
        cs = gen_constraints(self.X, self.Z, selected, valid=self.cand)
        if self.Xr is not None:
            sol = solve(self.reduced(cs), "nuclear", formulation="gen", method=method, **solver_options)
            bound = float(np.abs(sol.duals).sum() * self.span_residual)
            if sol.certificate.farkas is not None:
                bound = float(np.abs(sol.certificate.farkas).sum() * self.span_residual)
            if bound <= SPAN_TOL:
                return self._lift(sol, cs, bound)
        return solve(cs, "nuclear", formulation="gen", method=method, **solver_options)

    def reduced(self, cs: ConstraintSet) -> ConstraintSet:
        """The rows of the layer's Gen-SVM ``cs`` (:func:`attnsvm.svm.gen_constraints` of these sentences) in the
        layer's bases: ``U_r (N, r1) = P^T u`` (the reduced tokens' difference ``Xr[i, a] - Xr[i, b]`` of each row's
        sentence i, token a and token b), ``V_r (N, r2) = B^T z_i``; rhs, equalities and labels as in ``cs``."""
        r, a, b = cs.sample, cs.token, cs.other
        out = ConstraintSet(self.Xr[r, a] - self.Xr[r, b], self.Zr[r], cs.rhs, cs.is_equality, r, cs.query, a, b,
                            kind=cs.kind, shape=cs.shape)
        return out.with_tokens(self.Xr)   # an "infeasible" is proven on the reduced tokens' exact differences

    def _lift(self, sol, cs, bound: float):
        """The reduced solution ``sol`` (``M (r1, r2)``) as the solution of the full rows ``cs``
        (:func:`attnsvm.svm.result.lift_solution`: ``W = P M B^T``, the same margins and multipliers, the duality
        gap raised by ``bound``, the status from that certificate)."""
        return lift_solution(sol, cs, SubspaceBasis(self.P, self.B), gap_bound=bound,
                             info={"layer_bases": [int(self.P.shape[1]), int(self.B.shape[1])], "span_bound": bound})

    def scores(self, W: np.ndarray) -> np.ndarray:
        """The bilinear scores ``x_t^T W z_i`` (m, T) of a head ``W (D, D)`` (key on the left)."""
        return np.einsum("ntd,nd->nt", self.X, self.Z @ W.T)


def span_residual(diffs: np.ndarray, P: np.ndarray, Z: np.ndarray, B: np.ndarray) -> float:
    """How far a layer's Gen-SVM rows reach outside its bases, per unit of multiplier.

    ``diffs (K, D)`` the candidates' differences to their sentence's first candidate (spanned by ``P (D, r1)``),
    ``Z (m, D)`` the queries (spanned by ``B (D, r2)``). A row is ``u z^T`` with ``u = d_a - d_b`` two differences
    of one sentence, so ``||u - P P^T u|| <= 2 rho`` and ``||u|| <= 2 n_d`` (``rho``, ``n_d`` the largest residual
    and norm of the differences), ``||z - B B^T z|| <= sigma`` and ``||z|| <= n_z``. Then
    ``||sum_k lam_k (u_k z_k^T - P P^T u_k z_k^T B B^T)||_2 <= ||lam||_1 (2 rho n_z + 2 n_d sigma)``: the
    returned factor ``2 (rho n_z + n_d sigma)``."""
    rho = float(np.linalg.norm(diffs - (diffs @ P) @ P.T, axis=1).max(initial=0.0))
    sigma = float(np.linalg.norm(Z - (Z @ B) @ B.T, axis=1).max(initial=0.0))
    n_d = float(np.linalg.norm(diffs, axis=1).max(initial=0.0))
    n_z = float(np.linalg.norm(Z, axis=1).max(initial=0.0))
    return 2.0 * (rho * n_z + n_d * sigma)
