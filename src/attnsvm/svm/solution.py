"""The result object of every SVM solver: solution, status and certificate."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import ProblemFileError
from .constraints import ConstraintSet

__all__ = ["Certificate", "SVMSolution", "SOLUTION_FORMAT"]

SOLUTION_FORMAT = "attnsvm.SVMSolution"


@dataclass
class Certificate:
    """A solution's proof of optimality, or of infeasibility.

    Attributes
    ----------
    max_violation : float
        Largest constraint violation ``max_k (rhs_k - margin_k)^+`` (``|.|`` on equality
        rows). For an infeasible result: ``nan``.
    stationarity_residual : float
        Frobenius: ``||W - sum_k lam_k u_k w_k^T||_F / max(1, ||W||_F)``.
        Nuclear: ``(||S||_2 - 1)^+`` plus the alignment residual
        ``| <W, S> - ||W||_* | / max(1, ||W||_*)`` where ``S = sum_k lam_k u_k w_k^T``.
        For an infeasible result: ``||sum_k lam_k u_k w_k^T||_F`` of the Farkas multipliers.
    duality_gap : float
        Relative gap between primal and dual objective values (``nan`` if infeasible).
    dual_infeasibility : float
        ``max_k (-lam_k)^+`` over inequality rows.
    complementarity : float
        ``max_k |lam_k (margin_k - rhs_k)|``.
    farkas : (N,) or None
        Infeasible only: multipliers ``lam`` (>= 0 on inequality rows, either sign
        on equality rows) with ``sum_k lam_k u_k w_k^T ~ 0`` and ``rhs^T lam = 1``
        (so ``sum lam = 1`` when every right-hand side is 1).
    offending : list of int
        Infeasible only: rows carrying the Farkas multipliers (for duplicate tokens the
        single row with ``u = 0``).
    offending_labels : list of str
        Readable names of ``offending``.
    """

    max_violation: float = float("nan")
    stationarity_residual: float = float("nan")
    duality_gap: float = float("nan")
    dual_infeasibility: float = float("nan")
    complementarity: float = float("nan")
    farkas: np.ndarray | None = None
    offending: list = field(default_factory=list)
    offending_labels: list = field(default_factory=list)

    def to_dict(self) -> dict:
        out = {k: _jsonable(getattr(self, k)) for k in
               ("max_violation", "stationarity_residual", "duality_gap", "dual_infeasibility", "complementarity")}
        out["offending"] = [int(k) for k in self.offending]
        out["offending_labels"] = list(self.offending_labels)
        if self.farkas is not None:
            out["farkas_sum"] = float(np.sum(self.farkas))
        return out


def _jsonable(x):
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if np.isfinite(x) else None
    return x


@dataclass
class SVMSolution:
    """Solution of one SVM.

    Attributes
    ----------
    status : "optimal" or "infeasible"
    formulation : str, e.g. "att", "gen", "seq", "causal", "prompt", "prompt-relaxed", "v", "soft", "fin"
    norm : "fro" or "nuclear" (vector problems: "fro", the Euclidean norm)
    W : (d1, d2) or None
        Matrix solution (``None`` when infeasible, and for vector problems).
    p : (d,) or None
        Prompt solution of the p-SVM (``None`` otherwise or when infeasible).
    v : (d,) or None
        Head solution of the v-SVM (``None`` otherwise or when infeasible).
    norm_value : float
        ``||W||_F`` or ``||W||_*`` (``||p||``, ``||v||``); ``inf`` when infeasible.
    objective : float
        The minimized objective (the norm, or norm + C * sum(slack) for soft margin).
    margins : (N,) constraint values ``u_k^T W w_k`` (``nan`` when infeasible)
    duals : (N,) multipliers (zeros when infeasible; see ``certificate.farkas``)
    support : (N,) bool, active rows (margin within ``support_tol`` of rhs)
    constraints : ConstraintSet, the rows with their labels
    certificate : Certificate
    slack : (N,) or None, soft margin only
    info : dict, solver details (method, iterations, seconds)
    """

    status: str
    formulation: str
    norm: str
    W: np.ndarray | None
    norm_value: float
    objective: float
    margins: np.ndarray
    duals: np.ndarray
    support: np.ndarray
    constraints: ConstraintSet
    certificate: Certificate
    p: np.ndarray | None = None
    v: np.ndarray | None = None
    slack: np.ndarray | None = None
    support_tol: float = 1e-6
    info: dict = field(default_factory=dict)

    # ---------------------------------------------------------------- helpers
    @property
    def feasible(self) -> bool:
        return self.status == "optimal"

    @property
    def solution(self) -> np.ndarray | None:
        """The solution array whatever the formulation: W, p or v."""
        if self.p is not None:
            return self.p
        if self.v is not None:
            return self.v
        return self.W

    @property
    def min_margin(self) -> float:
        """Smallest margin over the inequality rows with right-hand side 1 (``nan`` if none)."""
        cs = self.constraints
        rows = (~cs.is_equality) & (cs.rhs == 1.0)
        if not rows.any() or not self.feasible:
            return float("nan")
        return float(self.margins[rows].min())

    def support_tokens(self) -> np.ndarray:
        """Support tokens as a mask (n, T) (single-query formulations); for sequence
        formulations a mask (n, T, T) indexed ``[sample, query, token]``."""
        cs = self.constraints
        n, T = cs.shape
        rows = self.support & (~cs.is_equality) & (cs.other >= 0)
        if cs.kind in ("seq", "causal"):
            out = np.zeros((n, T, T), bool)
            out[cs.sample[rows], cs.query[rows], cs.other[rows]] = True
            return out
        out = np.zeros((n, T), bool)
        out[cs.sample[rows], cs.other[rows]] = True
        return out

    def to_dict(self) -> dict:
        """A JSON-friendly summary (no large arrays except the solution)."""
        sol = self.solution
        out = {
            "status": self.status,
            "formulation": self.formulation,
            "norm": self.norm,
            "norm_value": _jsonable(self.norm_value),
            "objective": _jsonable(self.objective),
            "n_constraints": int(self.constraints.N),
            "n_support": int(self.support.sum()),
            "min_margin": _jsonable(self.min_margin),
            "certificate": self.certificate.to_dict(),
            "info": {k: _jsonable(v) if not isinstance(v, (list, dict)) else v for k, v in self.info.items()},
        }
        if sol is not None:
            out["solution_shape"] = list(sol.shape)
            if sol.size <= 64:
                out["solution"] = np.asarray(sol).tolist()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def save(self, path) -> None:
        """Write the solution to an ``.npz`` file (plain arrays only, no pickle)."""
        cs = self.constraints
        arrays = {
            "format": np.array(SOLUTION_FORMAT),
            "status": np.array(self.status),
            "formulation": np.array(self.formulation),
            "norm": np.array(self.norm),
            "norm_value": np.array(self.norm_value),
            "objective": np.array(self.objective),
            "margins": self.margins,
            "duals": self.duals,
            "support": self.support,
            "rhs": cs.rhs,
            "is_equality": cs.is_equality,
            "sample": cs.sample,
            "query": cs.query,
            "token": cs.token,
            "other": cs.other,
            "max_violation": np.array(self.certificate.max_violation),
            "stationarity_residual": np.array(self.certificate.stationarity_residual),
            "duality_gap": np.array(self.certificate.duality_gap),
            "offending": np.array(self.certificate.offending, dtype=np.int64),
            "summary_json": np.array(self.to_json()),
        }
        for name in ("W", "p", "v", "slack"):
            val = getattr(self, name)
            if val is not None:
                arrays[name] = val
        if self.certificate.farkas is not None:
            arrays["farkas"] = self.certificate.farkas
        path = os.fspath(path)
        try:
            with open(path, "wb") as fh:
                np.savez(fh, **arrays)
        except OSError as exc:
            raise ProblemFileError(f"cannot write solution file {path!r}: {exc.strerror or exc}") from None

    def __repr__(self) -> str:
        return (f"SVMSolution(status={self.status!r}, formulation={self.formulation!r}, norm={self.norm!r}, "
                f"norm_value={self.norm_value:.10g}, N={self.constraints.N}, support={int(self.support.sum())})")
