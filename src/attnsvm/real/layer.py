"""One layer's SVM inputs, validated once, and what a probe keeps of one SVM.

:class:`LayerInputs` holds the bias-augmented tokens ``X (m, T, D)``, queries ``Z (m, D)`` and
candidates ``(m, T)`` of the sentences entering the SVMs of one layer, checked once, plus the bases
P (token differences) and B (queries) that ``corr_restricted`` projects on. The layer's tokens are
augmented, masked and checked once (:meth:`LayerInputs.build`); every head, random baseline and null
head of the layer then builds its own Gen-SVM rows from these arrays through the public
:func:`attnsvm.svm.gen_constraints` (the rows depend on the selection), whose own check of X is a scan
for non-finite values, small next to building the rows (the svm layer exports no unchecked builder).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm._validate import as_float_array
from attnsvm.errors import ValidationError
from attnsvm.svm import gen_constraints, solve
from attnsvm.svm.analysis import row_basis


def corr(A: np.ndarray, B) -> float:
    """Cosine of two matrices; NaN if either is zero or B is None (an infeasible SVM)."""
    if B is None:
        return float("nan")
    na, nb = np.linalg.norm(A), np.linalg.norm(B)
    if na == 0 or nb == 0:
        return float("nan")
    return float(np.sum(A * B) / (na * nb))


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
    """

    X: np.ndarray
    Z: np.ndarray
    cand: np.ndarray
    P: np.ndarray
    B: np.ndarray

    @classmethod
    def build(cls, X, Z, cand) -> "LayerInputs":
        """Validate ``X (m, T, D)``, ``Z (m, D)``, ``cand (m, T)`` (at least one candidate per
        sentence) and compute the bases P, B."""
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
        first = np.argmax(cand, axis=1)
        diffs = (X - X[np.arange(m), first][:, None, :])[cand]
        return cls(X, Z, cand, row_basis(diffs), row_basis(Z))

    @property
    def m(self) -> int:
        return self.X.shape[0]

    def restrict(self, W: np.ndarray) -> np.ndarray:
        """``P P^T W B B^T`` (D, D): the part of W these sentences can see."""
        return self.P @ (self.P.T @ W @ self.B) @ self.B.T

    def svm(self, selected: np.ndarray, **solver_options):
        """The nuclear Gen-SVM of ``selected (m, T)`` bool (inside ``cand``, one token at least per
        sentence; :func:`attnsvm.svm.gen_constraints` with ``valid = cand``)."""
        return solve(gen_constraints(self.X, self.Z, selected, valid=self.cand), "nuclear", formulation="gen",
                     method=solver_options.pop("method", "auto"), **solver_options)

    def scores(self, W: np.ndarray) -> np.ndarray:
        """The bilinear scores ``x_t^T W z_i`` (m, T) of a head ``W (D, D)`` (key on the left)."""
        return np.einsum("ntd,nd->nt", self.X, self.Z @ W.T)
