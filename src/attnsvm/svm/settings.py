"""The solver settings: one frozen dataclass, one meaning and one check per setting (names after Clarabel's).

:class:`SolverSettings` holds what every hard-margin method of a norm accepts; :func:`attnsvm.svm.solve`
(through :func:`attnsvm.svm.dispatch.solve_dispatch`) builds it once from the caller's keywords, which
checks each setting once (:func:`check_setting`, a :class:`~attnsvm.errors.ValidationError` naming the
setting and its range). The per-method views of :mod:`attnsvm.svm.options` carry the object down;
no inner function has a default of its own for a setting: each default is written once, ``feas_tol`` here
(:data:`FEAS_TOL`), ``gap_tol`` and ``support_tol`` in the norm's :class:`~attnsvm.svm.norms.Norm`, and
the lower-level entry points (:func:`attnsvm.svm.ipm.nuclear_ipm`, :mod:`attnsvm.svm.qp`,
:func:`attnsvm.svm.barrier_grow.nuclear_ipm_grow`) read them from there.

==============  ===========================================================================================
setting         meaning (default)
==============  ===========================================================================================
``feas_tol``    in (0, 1): the violation a row may keep, relative to ``max(1, max |rhs|)`` of the rows
                scaled to unit size (``|u_k| |w_k| ~ 1``): the active-set QP's KKT test, the working set's
                violated-row test (the nuclear working set's, measured as the certificate measures it, at
                ``10 feas_tol``: the subsets' own solves leave up to ``feas_tol``), the interior-point
                method's feasibility target, and the Frobenius start and feasibility test of the nuclear
                solvers (1e-10)
``gap_tol``     nuclear norm, in (0, 1e-6]: the relative duality gap ``(||W||_* - rhs^T lam) / max(1,
                ||W||_*)`` the interior-point method aims at (None: the norm's
                :attr:`~attnsvm.svm.norms.Norm.gap_tol`, 1e-9 for a dense solve, 1e-8 for each subset of
                the working set, whose certificate over all rows needs 1e-6)
``support_tol`` in [0, 1): margins within ``support_tol * max(|rhs_k|, max |rhs|)`` of their rhs count
                as support (None: the norm's :attr:`~attnsvm.svm.norms.Norm.support_tol`, 1e-6 Frobenius,
                1e-5 nuclear, whose interior-point margins are less exact)
``time_limit``  seconds (> 0) or None: the working set stops between rounds and the interior-point method
                between iterations once it has run this long (the status then says what was proven); the
                dense Frobenius active-set solve, which has no intermediate W, runs to its end
``max_memory``  bytes or a size string ("8G"), held in bytes, or None (the package limit): refuse
                (ResourceLimitError) before allocating N x N matrices, or a working set's Gram matrix, that
                need more
==============  ===========================================================================================

There is no ``max_iter``: the iteration caps are safeguards, and none means the same for every method of a
norm. The Frobenius norm's dense QPs are finite active-set methods: past its cap (60 iterations) the
primal-dual active-set method hands over to Goldfarb-Idnani, whose cap (``20 N + 100``) is a cycling guard that
raises; a smaller cap would give an error, not a cruder answer. The nuclear norm's interior-point runs stop at
``gap_tol`` or by the stall rule (:func:`~attnsvm.svm.ipm.stall_limit`), below their caps: a dense run took 13 to
23 iterations and the probe's growing first runs up to 53 in the measurements of docs/guide/performance.md,
against :data:`~attnsvm.svm.ipm.MAX_ITER` (80) for a dense run and 200 for a growing run (whose count includes
its retreats as rows join); the working set's rounds have their own knob, ``max_rounds``. ``time_limit`` bounds
the work with one meaning for every method that iterates towards a tolerance (the exact dense Frobenius solve
runs to its end).

The statuses do not depend on these tolerances: "optimal" means the certificate passes its fixed
thresholds (:data:`~attnsvm.svm.solution.CERTIFIED_VIOLATION`, :data:`~attnsvm.svm.solution.CERTIFIED_GAP`).
``tol``, the old name of ``feas_tol`` (deprecated), was removed in 0.3: giving it is a ValidationError that
names ``feas_tol``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields

from attnsvm._validate import check_number
from attnsvm.errors import ValidationError
from attnsvm.svm.norms import NormTable, get_norm

__all__ = ["FEAS_TOL", "SolverSettings", "check_setting", "REMOVED_SETTINGS", "NORM_SETTINGS", "settings_of"]

#: the settings of the soft margin (one cvxpy solve at fixed tolerances), and its default support_tol
SOFT_SETTINGS = ("support_tol", "max_memory")
SOFT_SUPPORT_TOL = 1e-6

#: the settings each norm's hard-margin methods accept (:attr:`~attnsvm.svm.norms.Norm.settings`: gap_tol only
#: where the norm's methods are iterative), and under "soft" those of the soft margin: a read-only view of
#: :data:`~attnsvm.svm.norms.NORMS`
NORM_SETTINGS = NormTable("settings", {"soft": SOFT_SETTINGS})

#: the default ``feas_tol`` (one value for every norm and method; also the default ``tol`` of the dense QPs of
#: :mod:`attnsvm.svm.qp`, which is this setting)
FEAS_TOL = 1e-10

#: old name -> setting: removed in 0.3 (deprecated); giving the old name is a ValidationError naming the setting
REMOVED_SETTINGS = {"tol": "feas_tol"}


def settings_of(norm: str) -> tuple[str, ...]:
    """The settings of ``norm`` (a name of :data:`~attnsvm.svm.norms.NORMS`, ValidationError otherwise) or of
    the soft margin (``"soft"``)."""
    return SOFT_SETTINGS if norm == "soft" else get_norm(norm).settings


def check_setting(name: str, value):
    """The one check of each setting (ValidationError naming it and the expected range); returns the value as the
    solvers read it (``max_memory`` in bytes, :func:`attnsvm.memory.parse_size`; the others as given)."""
    if name == "feas_tol":
        check_number(value, name, low=0.0, high=1.0, low_open=True, high_open=True)
    elif name == "gap_tol":
        check_number(value, name, low=0.0, high=1e-6, low_open=True, allow_none=True)
    elif name == "support_tol":
        check_number(value, name, low=0.0, high=1.0, high_open=True, allow_none=True)
    elif name == "time_limit":
        check_number(value, name, low=0.0, low_open=True, allow_none=True)
    elif name == "max_memory":
        if value is not None:
            from attnsvm.memory import parse_size

            return parse_size(value, name)
    else:  # pragma: no cover - every field is listed above
        raise AssertionError(name)
    return value


@dataclass(frozen=True)
class SolverSettings:
    """The settings of the hard-margin solvers (module docstring: meaning, range, default of each).

    Each field is checked once, when the object is built (``max_memory`` is then held in bytes, so that the
    memory checks of the solvers do not parse it again); :meth:`resolved` fills the defaults that depend on the
    norm and the method (``None`` fields) without checking again.
    """

    feas_tol: float = FEAS_TOL
    gap_tol: float | None = None
    support_tol: float | None = None
    time_limit: float | None = None
    max_memory: object = None

    def __post_init__(self):
        for f in fields(self):
            object.__setattr__(self, f.name, check_setting(f.name, getattr(self, f.name)))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """All setting names."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def take(cls, kw: dict, norm: str) -> "SolverSettings":
        """The settings among the keywords ``kw`` (removed from it) for ``norm`` (a key of
        :data:`NORM_SETTINGS`, :func:`settings_of`), or the object given as ``settings=``; a name of
        :data:`REMOVED_SETTINGS` (``tol``) is a ValidationError naming its replacement. A setting the norm does not
        have stays in ``kw`` (the caller's parser names it as unknown)."""
        for old, new in REMOVED_SETTINGS.items():
            if old in kw and new in settings_of(norm):
                raise ValidationError(f"solver option {old!r}: removed in 0.3: use {new} ({new}={kw[old]!r})")
        if "settings" in kw:
            given = kw.pop("settings")
            if not isinstance(given, cls):
                raise ValidationError(f"settings must be a SolverSettings, got {type(given).__name__}")
            both = [name for name in cls.names() if name in kw]
            if both:
                raise ValidationError(f"give settings=SolverSettings(...) or the settings as keywords, not both "
                                      f"(got {', '.join(both)})")
            extra = [name for name in cls.names() if name not in settings_of(norm) and getattr(given, name)
                     != getattr(cls, name)]
            if extra:
                raise ValidationError(f"settings: {', '.join(extra)} is not a setting of norm={norm!r} (its "
                                      f"settings: {', '.join(settings_of(norm))})")
            return given
        return cls(**{name: kw.pop(name) for name in settings_of(norm) if name in kw})

    def resolved(self, norm: str, method: str) -> "SolverSettings":
        """These settings with the defaults of ``norm`` and ``method`` ("dense" or "working_set") in place of None."""
        fill = {}
        nm = None if norm == "soft" else get_norm(norm)
        if self.support_tol is None:
            fill["support_tol"] = SOFT_SUPPORT_TOL if nm is None else nm.support_tol
        if self.gap_tol is None and nm is not None and nm.gap_tol is not None:
            fill["gap_tol"] = nm.gap_tol[method]
        return self.derive(**fill) if fill else self

    def derive(self, **changes) -> "SolverSettings":
        """A copy with ``changes``, values the solvers derived from checked ones (e.g. the time left for a
        round); not checked again."""
        new = copy.copy(self)
        for name, value in changes.items():
            if name not in self.names():
                raise AttributeError(name)
            object.__setattr__(new, name, value)
        return new
