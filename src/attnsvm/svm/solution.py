"""The result object of every SVM solver: solution, status and certificate."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from attnsvm.npzfile import write_npz
from attnsvm.svm.constraints import ConstraintSet
from attnsvm.svm.norms import FROBENIUS, NORMS, NormTable, stationarity_residual

__all__ = ["Certificate", "SVMSolution", "SOLUTION_FORMAT", "CERTIFIED_VIOLATION", "CERTIFIED_GAP",
           "CERTIFIED_STATIONARITY", "certificate_passes", "status_from", "relative_violation", "relative_gap",
           "stationarity_residual"]

SOLUTION_FORMAT = "attnsvm.SVMSolution"

#: A solution is "optimal" (certified) only if its relative max violation is at most this ...
CERTIFIED_VIOLATION = 1e-8
#: ... and its relative duality gap at most this, per norm (interior-point nuclear solves
#: stop at a looser gap than the exact Frobenius active set): each norm's
#: :attr:`~attnsvm.svm.norms.Norm.certified_gap`, a read-only view of :data:`~attnsvm.svm.norms.NORMS` ...
CERTIFIED_GAP = NormTable("certified_gap")
#: ... and its relative stationarity residual at most this, for the norms that threshold it
#: (:attr:`~attnsvm.svm.norms.Norm.certified_stationarity`: the Frobenius norm's
#: ``||W - sum_k lam_k u_k w_k^T||_F / ||W||_F``, :func:`stationarity_residual`, at 1e-8, the order of
#: CERTIFIED_VIOLATION). The nuclear residual (spectral-norm excess plus alignment, see
#: :class:`Certificate`) is reported but not thresholded: an interior-point solution is only stationary
#: to the order of its gap, which CERTIFIED_GAP already bounds; nor is the soft-margin one (see
#: :func:`certificate_passes`).
CERTIFIED_STATIONARITY = NormTable("certified_stationarity")


def certificate_passes(certificate: "Certificate", norm: str, *, stationarity: bool = True) -> bool:
    """True when ``certificate`` proves optimality to the package's standard for ``norm``.

    Relative max violation <= :data:`CERTIFIED_VIOLATION`, relative duality gap
    <= the norm's :attr:`~attnsvm.svm.norms.Norm.certified_gap` and, for a hard-margin certificate
    (``stationarity``) of a norm that thresholds it, relative stationarity residual <=
    :attr:`~attnsvm.svm.norms.Norm.certified_stationarity` (NaN never passes). ``norm``: a name of
    :data:`~attnsvm.svm.norms.NORMS`; another name is held to the Frobenius gap, without a stationarity test.
    The soft-margin solver passes ``stationarity=False``: its residual (of ``W / ||W||`` against
    the multipliers' combination, see :mod:`attnsvm.svm.soft`) measures how accurate the conic
    solver's multipliers are (about 1e-7 on typical instances) while the gap already proves
    the optimality of W.
    """
    nm = NORMS.get(norm)
    viol, gap = certificate.max_violation, certificate.duality_gap
    ok = viol == viol and gap == gap and viol <= CERTIFIED_VIOLATION and gap <= (nm or FROBENIUS).certified_gap
    tol_res = nm.certified_stationarity if stationarity and nm is not None else None
    if tol_res is not None:
        res = certificate.stationarity_residual
        ok = ok and res == res and res <= tol_res
    return bool(ok)


def status_from(certificate: "Certificate", norm: str, *, stationarity: bool = True) -> str:
    """"optimal" when ``certificate`` passes (:func:`certificate_passes`), else "optimal_inaccurate"."""
    return "optimal" if certificate_passes(certificate, norm, stationarity=stationarity) else "optimal_inaccurate"


def relative_violation(margins: np.ndarray, rhs: np.ndarray, eq: np.ndarray, size: np.ndarray,
                       slack: np.ndarray | None = None) -> float:
    """``max_k viol_k / (|rhs_k| + size_k)``: the largest violation as a backward error.

    ``viol_k = (rhs_k - slack_k - margin_k)^+`` (``|margin_k - rhs_k|`` on equality rows;
    ``slack`` only for the soft margin) and ``size_k = ||u_k|| ||w_k|| ||W||_F``, a bound on
    ``|margin_k|``: the relative change of row k that W would need to satisfy it exactly.
    Scale-free, also when the samples have very different scales (then the large rows'
    margins are only known to ``eps size_k``); for rows of size about 1 and rhs 1 it is about
    the plain violation. Rows with ``rhs_k = size_k = 0`` count as satisfied.
    """
    if margins.size == 0:
        return 0.0
    r = rhs if slack is None else rhs - slack
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        viol = np.where(eq, np.abs(margins - rhs), np.maximum(r - margins, 0.0))
        den = np.abs(rhs) + size
        rel = np.where(viol > 0, viol / np.where(den > 0, den, 1.0), 0.0)
        out = float(np.max(rel))
    return out if out == out else float("inf")


def relative_gap(primal: float, dual: float) -> float:
    """``|primal - dual| / max(|primal|, |dual|)`` (0 when both are 0): scale-free."""
    den = max(abs(primal), abs(dual))
    if den == 0.0:
        return 0.0
    out = abs(primal - dual) / den
    return out if out == out else float("inf")


@dataclass
class Certificate:
    """A solution's proof of optimality, or of infeasibility.

    Every quantity is RELATIVE (scale-free): multiplying the data by any c > 0 leaves
    it unchanged, so the thresholds of :func:`certificate_passes` mean the same at any
    scale. They are computed from the returned W and multipliers (mapped exactly, by
    powers of two, to the row-normalized problem of
    :meth:`~attnsvm.svm.constraints.ConstraintSet.normalized`, which avoids overflow).

    Attributes
    ----------
    max_violation : float
        ``max_k viol_k / (|rhs_k| + ||u_k|| ||w_k|| ||W||_F)`` with ``viol_k = (rhs_k - margin_k)^+``
        (``|.|`` on equality rows; soft margin: ``(rhs_k - slack_k - margin_k)^+``): the largest
        violation as a backward error (the relative change of a row that W needs to satisfy
        it; see :func:`relative_violation`). For an infeasible result: ``nan``.
    stationarity_residual : float
        Frobenius: ``||W - sum_k lam_k u_k w_k^T||_F / ||W||_F`` (W and multipliers as
        returned: shows a pair that does not match, e.g. multipliers lost to underflow).
        Nuclear: ``(||S||_2 - 1)^+`` plus the alignment residual
        ``| <W, S> - ||W||_* | / ||W||_*`` where ``S = sum_k lam_k u_k w_k^T``.
        For an infeasible result: ``||sum_k f_k A_k||_F / sum_k |f_k| ||A_k||_F`` of the Farkas
        multipliers f (``A_k = u_k w_k^T``); 0 is an exact proof, and in general every W
        satisfying the rows has ``||W||_F >= 1 / ||sum_k f_k A_k||_F``.
    duality_gap : float
        ``|P - D| / max(|P|, |D|)`` (``nan`` if infeasible) between the primal value P of the
        returned W and the dual value D of the returned multipliers made dual feasible
        (inequality multipliers clipped at 0; nuclear and norm objectives: scaled into the
        dual-norm ball). Frobenius: ``P = ||W||_F^2 / 2``, ``D = rhs^T lam - ||S||_F^2 / 2``;
        nuclear: ``P = ||W||_*``, ``D = rhs^T lam / max(1, ||S||_2)``; soft margin: the
        soft objective and its dual. By weak duality ``D <= optimum <= P`` (up to the
        violation), so a small gap proves optimality.
    dual_infeasibility : float
        ``max_k (-lam_k)^+ / max_k |lam_k|`` over inequality rows (multipliers of the
        row-normalized problem); soft margin also ``(lam_k - C)^+`` relative to C.
    complementarity : float
        ``max_k |lam_k (margin_k - rhs_k)|`` relative to the objective (``||W||_F^2`` for the
        Frobenius SVM, ``||W||_*`` for the nuclear one) on the row-normalized problem.
    farkas : (N,) or None
        Infeasible only: multipliers ``lam`` (>= 0 on inequality rows, either sign
        on equality rows) with ``sum_k lam_k u_k w_k^T ~ 0`` and ``rhs^T lam = 1``
        (so ``sum lam = 1`` when every right-hand side is 1).
    offending : list of int
        Infeasible only: rows carrying the Farkas multipliers (for duplicate tokens the
        single row with ``u = 0``).
    offending_labels : list of str
        Readable names of ``offending``.
    norm_lower_bound : float
        "undecided" after Farkas multipliers that did not verify exactly: a proven lower bound on
        ``||W||_F`` (and ``||W||_*``) of every W satisfying the rows (see
        :func:`~attnsvm.svm.farkas.norm_lower_bound`); ``inf`` for a proven "infeasible"; else ``nan``.
    """

    max_violation: float = float("nan")
    stationarity_residual: float = float("nan")
    duality_gap: float = float("nan")
    dual_infeasibility: float = float("nan")
    complementarity: float = float("nan")
    farkas: np.ndarray | None = None
    offending: list = field(default_factory=list)
    offending_labels: list = field(default_factory=list)
    norm_lower_bound: float = float("nan")

    def __repr__(self) -> str:
        """Status-like summary with the relative quantities; never whole arrays."""
        if self.farkas is not None:
            return (f"Certificate(infeasible, farkas_residual={self.stationarity_residual:.3g}, "
                    f"farkas=({self.farkas.shape[0]},), offending={len(self.offending)} rows)")
        if self.norm_lower_bound == self.norm_lower_bound:
            return f"Certificate(undecided, every W satisfying the rows has ||W||_F >= {self.norm_lower_bound:.3g})"
        return (f"Certificate(violation={self.max_violation:.3g}, gap={self.duality_gap:.3g}, "
                f"residual={self.stationarity_residual:.3g}, dual_infeasibility={self.dual_infeasibility:.3g}, "
                f"complementarity={self.complementarity:.3g})")

    def to_dict(self) -> dict:
        out = {k: _jsonable(getattr(self, k)) for k in
               ("max_violation", "stationarity_residual", "duality_gap", "dual_infeasibility", "complementarity",
                "norm_lower_bound")}
        out["offending"] = [int(k) for k in self.offending]
        out["offending_labels"] = list(self.offending_labels)
        if self.farkas is not None:
            out["farkas_sum"] = float(np.sum(self.farkas))
        return out


def _jsonable(x):
    """A JSON value: finite floats as floats (never -0.0: ``x + 0.0`` is +0.0), non-finite ones as None."""
    if isinstance(x, (float, np.floating)):
        x = float(x) + 0.0
        return x if np.isfinite(x) else None
    return x


@dataclass
class SVMSolution:
    """Solution of one SVM.

    Attributes
    ----------
    status : "optimal", "optimal_inaccurate", "infeasible" or "undecided"
        "optimal" only when the certificate passes (:func:`certificate_passes`: relative max
        violation <= 1e-8 and relative duality gap <= 1e-8 Frobenius / 1e-6 nuclear);
        "optimal_inaccurate" when a W was found but its certificate does not pass (see
        ``certificate.duality_gap`` and ``certificate.max_violation``); "infeasible" with
        Farkas multipliers in ``certificate.farkas`` (W is None); "undecided" when the working
        set stopped (``max_rounds``, ``time_limit``) before it found a W satisfying every row or a
        Farkas certificate (W is the last subset's solution, ``feasible`` is False).
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
    info : dict
        solver details: method, iterations, seconds
    """

    #: the format tag :meth:`save` writes (``format`` entry of the .npz): what the CLI's ``info`` recognizes
    FORMAT = SOLUTION_FORMAT

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
        """True for both "optimal" and "optimal_inaccurate" (a W exists); False for "infeasible" and
        "undecided" (feasibility not proven)."""
        return self.status in ("optimal", "optimal_inaccurate")

    @property
    def certified(self) -> bool:
        """True only for status "optimal" with a certificate that passes (see :func:`certificate_passes`).

        Code that needs the exact SVM (metrics, checks) asks for this, not for ``feasible``.
        """
        return self.status == "optimal" and certificate_passes(self.certificate, self.norm,
                                                               stationarity=self.slack is None)

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
                out["solution"] = (np.asarray(sol, dtype=np.float64) + 0.0).tolist()  # + 0.0: no -0.0
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def save(self, path) -> None:
        """Write the solution to an ``.npz`` file (plain arrays only, no pickle; atomic: temporary file,
        fsync, rename)."""
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
        write_npz(path, arrays, "solution file")

    def __repr__(self) -> str:
        """Status, shapes, objective, certificate quantities and support size; never whole arrays."""
        sol = self.solution
        what = "W" if self.W is not None else ("p" if self.p is not None else ("v" if self.v is not None else "W"))
        shape = "None" if sol is None else str(tuple(int(k) for k in sol.shape))
        c = self.certificate
        return (f"SVMSolution(status={self.status!r}, formulation={self.formulation!r}, norm={self.norm!r}, "
                f"{what}={shape}, N={self.constraints.N}, objective={self.objective:.10g}, "
                f"norm_value={self.norm_value:.10g}, violation={c.max_violation:.3g}, gap={c.duality_gap:.3g}, "
                f"residual={c.stationarity_residual:.3g}, support={int(self.support.sum())})")
