"""The norms of the SVM ``min ||W|| s.t. u_k^T W w_k >= rhs_k`` as objects: one registry, :data:`NORMS`.

Every part of the solver pipeline that depends on the norm reads its :class:`Norm` here instead of
comparing the norm's name: the certificate (:mod:`attnsvm.svm.result`: the primal and dual objective,
stationarity, the soft margin's dual norm), the statuses (:mod:`attnsvm.svm.solution`: the certified
gap and stationarity thresholds), the settings (:mod:`attnsvm.svm.settings`: which settings the norm
has, their norm-dependent defaults), the soft margin (:mod:`attnsvm.svm.soft`: its conic program and
how the hard-margin multipliers map to it), the memory estimate (:mod:`attnsvm.svm.api`) and the
multipliers' units (:class:`~attnsvm.svm.reductions.RowScaling` ``objective``).

Adding a norm touches three files: its :class:`Norm` in :data:`NORMS` (this module), the module with its
solvers, and their entries in :data:`attnsvm.svm.dispatch.SOLVERS` and
:data:`attnsvm.svm.dispatch.CERTIFIERS` (``tests/test_norm_registry.py`` adds a toy norm from a test file
alone). :func:`get_norm` is the one check of a ``norm`` argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.svm.ipm.linalg import singular_values, spectral_norm

__all__ = ["Norm", "ObjectiveTerms", "NORMS", "get_norm", "NormTable", "FROBENIUS", "NUCLEAR",
           "stationarity_residual", "combine_rows"]

_TINY = float(np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class ObjectiveTerms:
    """The norm-dependent part of a hard-margin certificate (all in the rows' scaled units).

    primal : the primal objective of W; dual : the dual objective of the dual-feasible multipliers;
    stationarity : the relative stationarity residual; scale : what the complementarity is relative to
    (the objective's size); value : ``||W||``.
    """

    primal: float
    dual: float
    stationarity: float
    scale: float
    value: float


@dataclass(frozen=True)
class Norm:
    """One norm of the SVM: what the solver pipeline needs to know about it.

    Attributes
    ----------
    name : the ``norm=`` value ("fro", "nuclear")
    title : its name in messages ("Frobenius", "nuclear")
    value : ``W (d1, d2) -> ||W||``
    dual : ``S (d1, d2) -> ||S||_dual`` (0 for an empty S)
    multipliers : the objective whose multipliers its hard-margin solvers return: "squared"
        (``1/2 ||W||^2``) or "norm" (``||W||``, dual ball ``||sum lam_k u_k w_k^T||_dual <= 1``): the
        ``objective`` of :meth:`~attnsvm.svm.reductions.RowScaling.lam`
    objective : ``(U (s, d1), V (s, d2), b (s,), lam (s,), lam_f (s,), W (d1, d2), residual) ->``
        :class:`ObjectiveTerms` of the hard-margin certificate (``lam_f``: the multipliers made dual
        feasible; ``residual``: a stationarity residual the caller measured, or None)
    certified_gap : a certified solution's relative duality gap is at most this
    certified_stationarity : ... and its stationarity residual at most this (None: not thresholded)
    support_tol : the default ``support_tol`` setting
    gap_tol : the default ``gap_tol`` setting per method ("dense", "working_set"); None: the norm's
        methods have no ``gap_tol`` setting (an exact method)
    solution_arrays : d1 x d2 float64 arrays alive at the peak of a solve (the memory estimate)
    soft_stationarity : ``(W, S, nrm, squared) -> residual`` of the soft margin (``S`` the multipliers'
        combination, ``nrm = ||W||``); None: the norm has no soft margin
    soft_program : ``(M, squared, r) -> (regularizer, solver, solver keywords)``: the cvxpy objective of
        the soft margin's reduced variable ``M (r1, r2)`` (``r = r1 + r2``) and the conic solver for it
    soft_polish : the soft margin's multipliers can be rebuilt from W by least squares (the norm's
        gradient is ``W / ||W||_F``)
    """

    name: str
    title: str
    value: Callable[[np.ndarray], float]
    dual: Callable[[np.ndarray], float]
    multipliers: str
    objective: Callable[..., ObjectiveTerms]
    certified_gap: float
    certified_stationarity: float | None
    support_tol: float
    gap_tol: Mapping | None
    solution_arrays: int
    soft_stationarity: Callable | None = None
    soft_program: Callable | None = None
    soft_polish: bool = False

    @property
    def settings(self) -> tuple[str, ...]:
        """The settings every hard-margin method of the norm accepts
        (:class:`~attnsvm.svm.settings.SolverSettings` names)."""
        gap = ("gap_tol",) if self.gap_tol is not None else ()
        return ("feas_tol", *gap, "support_tol", "time_limit", "max_memory")


def combine_rows(U: np.ndarray, V: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """``sum_k lam_k u_k w_k^T`` of rows ``U (s, d1)``, ``V (s, d2)``: (d1, d2)."""
    return (U * lam[:, None]).T @ V


def stationarity_residual(U: np.ndarray, V: np.ndarray, lam: np.ndarray, W: np.ndarray) -> float:
    """``||W - U^T diag(lam) V||_F / max(||W||_F, tiny)``: how far W is from the combination
    ``sum_k lam_k u_k w_k^T`` of its multipliers (Frobenius stationarity).

    ``U (N, d1)``, ``V (N, d2)``, ``lam (N,)``, ``W (d1, d2)``, all in the same units (the
    callers pass the row-scaled rows with the multipliers and W mapped to them). Only rows
    with a nonzero multiplier enter (a sparse combination costs ``nnz d1 d2``, not ``N d1 d2``).
    ``inf`` if not finite.
    """
    nz = np.flatnonzero(lam)
    S = (U[nz] * lam[nz, None]).T @ V[nz]
    with np.errstate(over="ignore", invalid="ignore"):
        out = float(np.linalg.norm(W - S)) / max(float(np.linalg.norm(W)), _TINY)
    return out if out == out else float("inf")


# ------------------------------------------------------------------------------------------ Frobenius
def _fro_value(W: np.ndarray) -> float:
    return float(np.linalg.norm(W)) if W.size else 0.0


def _fro_dual(S: np.ndarray) -> float:
    return float(np.linalg.norm(S)) if S.size else 0.0


def _fro_objective(U, V, b, lam, lam_f, W, residual) -> ObjectiveTerms:
    """``min 1/2 ||W||_F^2``: ``P = ||W||_F^2 / 2``, ``D = rhs^T lam_f - ||S_f||_F^2 / 2``, the residual of
    ``W = S`` (:func:`stationarity_residual`), relative to ``||W||_F^2``."""
    S_f = combine_rows(U, V, lam_f)
    nW2 = float(np.sum(W * W))
    dual = float(b @ lam_f) - 0.5 * float(np.sum(S_f * S_f))
    res = stationarity_residual(U, V, lam, W) if residual is None else residual
    return ObjectiveTerms(primal=0.5 * nW2, dual=dual, stationarity=res, scale=nW2, value=float(np.sqrt(nW2)))


def _fro_soft_stationarity(W, S, nrm, squared) -> float:
    # W / ||W|| = S (norm objective) or 2 W = S (squared)
    target = 2 * W if squared else (W / nrm if nrm > 0 else W)
    den = max(float(np.linalg.norm(target)), float(np.linalg.norm(S)))
    return float(np.linalg.norm(S - target)) / den if den > 0 else 0.0


_CLARABEL = ("CLARABEL", {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10})


def _fro_soft_program(M, squared, r):
    import cvxpy as cp

    return (cp.sum_squares(M) if squared else cp.norm(cp.vec(M, order="F"), 2)), *_CLARABEL


# -------------------------------------------------------------------------------------------- nuclear
def _nuclear_value(W: np.ndarray) -> float:
    return float(singular_values(W).sum()) if W.size else 0.0


def _nuclear_objective(U, V, b, lam, lam_f, W, residual) -> ObjectiveTerms:
    """``min ||W||_*`` (dual ball ``||S||_2 <= 1``): ``P = ||W||_*``, ``D = rhs^T lam_f / max(1, ||S_f||_2)``
    (scaled into the dual ball), stationarity ``(||S||_2 - 1)^+`` plus the alignment
    ``|<W, S> - ||W||_*| / ||W||_*``, relative to ``||W||_*``."""
    S = combine_rows(U, V, lam)
    spec = spectral_norm(S)
    nuc = float(singular_values(W).sum())
    align = abs(float(np.sum(W * S)) - nuc) / nuc if nuc > 0 else abs(float(np.sum(W * S)))
    if np.array_equal(lam_f, lam):                             # already dual feasible (as the IPM's are)
        spec_f = spec
    else:
        spec_f = spectral_norm(combine_rows(U, V, lam_f)) if S.size else 0.0
    dual = float(b @ lam_f) / max(1.0, spec_f)                 # scaled into the dual ball
    return ObjectiveTerms(primal=nuc, dual=dual, stationarity=max(spec - 1.0, 0.0) + align, scale=nuc, value=nuc)


def _nuclear_soft_stationarity(W, S, nrm, squared) -> float:
    # ||S||_2 <= 1 (times 2 ||W||_* when squared) and <W, S> = ||W||_* (times 2 ||W||_*)
    k = 2.0 * nrm if squared else 1.0
    spec = float(np.linalg.norm(S, 2)) if S.size else 0.0
    ref = k * nrm if nrm > 0 else 1.0
    return max(spec - k, 0.0) / max(k, 1e-300) + abs(float(np.sum(W * S)) - k * nrm) / ref


#: the reduced nuclear program up to this r1 + r2 goes to Clarabel, larger ones to SCS
_SOFT_CLARABEL_MAX = 150


def _nuclear_soft_program(M, squared, r):
    import cvxpy as cp

    reg = cp.square(cp.normNuc(M)) if squared else cp.normNuc(M)
    if r <= _SOFT_CLARABEL_MAX:
        return (reg, *_CLARABEL)
    return reg, "SCS", {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 200000}


#: ``min ||W||_F`` (its hard-margin solvers solve ``min 1/2 ||W||_F^2`` exactly, by an active-set method).
#: The stationarity threshold: like the violation a relative backward error of the returned pair
#: (W, lam); an exact pair leaves only the rounding of a sum of N rank-one terms (about ``N eps``,
#: below 1e-10 up to a million rows), so 1e-8 fails only a W that is not the combination of its
#: multipliers. d1 x d2 arrays: 7 budgeted, above the peaks ``python benchmarks/memory_estimates.py`` measures
#: (docs/guide/performance.md, "Solver design decisions and their measurements").
FROBENIUS = Norm(name="fro", title="Frobenius", value=_fro_value, dual=_fro_dual, multipliers="squared",
                 objective=_fro_objective, certified_gap=1e-8, certified_stationarity=1e-8, support_tol=1e-6,
                 gap_tol=None, solution_arrays=7, soft_stationarity=_fro_soft_stationarity,
                 soft_program=_fro_soft_program, soft_polish=True)

#: ``min ||W||_*`` (interior-point method: it stops at a looser gap than the exact Frobenius active set, its
#: margins are less exact, and its residual is only stationary to the order of its gap, which the gap
#: threshold already bounds: not thresholded). d1 x d2 arrays: 9 budgeted, above the peaks
#: ``python benchmarks/memory_estimates.py`` measures (docs/guide/performance.md).
NUCLEAR = Norm(name="nuclear", title="nuclear", value=_nuclear_value, dual=spectral_norm, multipliers="norm",
               objective=_nuclear_objective, certified_gap=1e-6, certified_stationarity=None, support_tol=1e-5,
               gap_tol={"dense": 1e-9, "working_set": 1e-8}, solution_arrays=9,
               soft_stationarity=_nuclear_soft_stationarity, soft_program=_nuclear_soft_program)

#: name -> Norm: the norms the package solves
NORMS: dict[str, Norm] = {n.name: n for n in (FROBENIUS, NUCLEAR)}


def get_norm(norm) -> Norm:
    """The :class:`Norm` of ``norm`` (a name of :data:`NORMS`, or a Norm of it); ValidationError otherwise."""
    if isinstance(norm, Norm) and NORMS.get(norm.name) is norm:
        return norm
    if isinstance(norm, str) and norm in NORMS:
        return NORMS[norm]
    names = " or ".join(repr(n) for n in NORMS)
    raise ValidationError(f"norm must be {names}, got {norm!r}")


@dataclass(frozen=True, eq=False)
class NormTable(Mapping):
    """A read-only view ``name -> getattr(norm, attr)`` over :data:`NORMS` (norms whose attribute is None
    left out), plus ``extra`` entries: the per-norm constants (``CERTIFIED_GAP``, ``NORM_SETTINGS``)
    follow the registry."""

    attr: str
    extra: Mapping = field(default_factory=dict)

    def _items(self) -> dict:
        out = {name: getattr(n, self.attr) for name, n in NORMS.items() if getattr(n, self.attr) is not None}
        out.update(self.extra)
        return out

    def __getitem__(self, key):
        return self._items()[key]

    def __iter__(self):
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return repr(self._items())
