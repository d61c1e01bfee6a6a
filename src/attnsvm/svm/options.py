"""The per-method view of the solver settings: a frozen dataclass per method, built before any work.

Every method of a norm takes the same :class:`~attnsvm.svm.settings.SolverSettings` (its ``settings``
field: tolerances, limits, memory; each checked once, where the object is built) and adds the knobs
of its strategy (the QP method, the nuclear inner solver and device, the working set's batches and
rounds). ``SomeOptions.parse(options, what)`` turns the keyword options a caller gave into the
method's dataclass: the settings into one SolverSettings (``tol``, removed in 0.3, is a ValidationError
naming ``feas_tol``), the rest into the knobs; an unknown name is a
:class:`~attnsvm.errors.ValidationError` naming it and listing the valid ones, a bad value one naming
the option. The solvers take an instance (``options=``) or the keywords
(:meth:`SolverOptions.resolve`); :mod:`attnsvm.svm.dispatch` parses them before it calls a solver.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

import numpy as np

from attnsvm._validate import check_choice
from attnsvm.errors import ValidationError
from attnsvm.svm.settings import SolverSettings, settings_of

__all__ = ["SolverOptions", "FrobeniusOptions", "NuclearOptions", "FrobeniusWSOptions", "NuclearWSOptions",
           "SoftOptions", "VectorOptions", "QP_METHODS", "NUCLEAR_SOLVERS", "SolverSettings", "WS_KNOBS"]

#: ``method`` of the dense Frobenius solver (the QP method)
QP_METHODS = ("auto", "pdas", "goldfarb-idnani")
#: ``solver`` of the nuclear solvers: the interior-point method or the reduced SDP through cvxpy
NUCLEAR_SOLVERS = ("auto", "ipm", "cvxpy", "SCS", "CLARABEL")
#: the knobs of the working sets' strategy (only a working set has them)
WS_KNOBS = ("batch", "per_group", "max_rounds", "verbose")


def _check_count(name: str, value, low: int) -> None:
    if value is None:
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValidationError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_flag(name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ValidationError(f"{name} must be True or False, got {value!r}")


@dataclass(frozen=True)
class SolverOptions:
    """Base of the per-method option dataclasses: ``settings`` (a
    :class:`~attnsvm.svm.settings.SolverSettings`, its None defaults filled for the method's norm and
    kind) and the method's knobs."""

    #: whose settings it accepts (a norm of :data:`~attnsvm.svm.norms.NORMS`, or "soft") and its kind ("dense" or
    #: "working_set"): they choose the defaults :meth:`SolverSettings.resolved` fills in
    NORM: ClassVar[str] = "fro"
    KIND: ClassVar[str] = "dense"

    settings: SolverSettings = field(default_factory=SolverSettings)

    def __post_init__(self):
        if not isinstance(self.settings, SolverSettings):
            raise ValidationError(f"settings must be a SolverSettings, got {type(self.settings).__name__}")
        object.__setattr__(self, "settings", self.settings.resolved(self.NORM, self.KIND))
        self.check()

    def check(self) -> None:
        """Check the method's knobs (the settings are checked where they are built)."""

    @classmethod
    def knobs(cls) -> tuple[str, ...]:
        """The knob names of this method (its fields but ``settings``)."""
        return tuple(f.name for f in fields(cls) if f.name != "settings")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names of this method: its settings and its knobs."""
        return settings_of(cls.NORM) + cls.knobs()

    @classmethod
    def parse(cls, options: dict, what: str) -> "SolverOptions":
        """The options of this method from keyword ``options`` (a dict); ``what`` names the solver in errors."""
        kw = dict(options)
        settings = SolverSettings.take(kw, cls.NORM)
        return cls.with_knobs(settings, kw, what)

    @classmethod
    def with_knobs(cls, settings: SolverSettings, knobs: dict, what: str) -> "SolverOptions":
        """This method's options from ``settings`` (already built, so checked) and the keyword ``knobs``."""
        valid = cls.knobs()
        for name in knobs:
            if name not in valid:
                raise ValidationError(f"unknown solver option {name!r} for {what} (its options: "
                                      f"{', '.join(cls.names())})")
        return cls(settings=settings, **knobs)

    @classmethod
    def resolve(cls, options, kw: dict, what: str) -> "SolverOptions":
        """A solver's options: ``options`` (an instance, already checked) or else the keywords ``kw``."""
        if options is None:
            return cls.parse(kw, what)
        if kw:
            raise ValidationError(f"{what}: give options={cls.__name__}(...) or keyword options, not both "
                                  f"(got {', '.join(kw)})")
        if not isinstance(options, cls):
            raise ValidationError(f"{what}: options must be a {cls.__name__}, got {type(options).__name__}")
        return options


@dataclass(frozen=True)
class FrobeniusOptions(SolverOptions):
    """Dense Frobenius solver (:func:`~attnsvm.svm.frobenius.solve_frobenius`): ``settings`` and

    method : QP method, one of :data:`QP_METHODS`
    """

    method: str = "auto"

    def check(self) -> None:
        check_choice(self.method, "method", QP_METHODS)


@dataclass(frozen=True)
class VectorOptions(SolverOptions):
    """Vector SVMs (p-SVM, v-SVM; :func:`~attnsvm.svm.prompt.solve_vector_svm`): the dense Frobenius
    solver's ``settings``, without a QP method."""


@dataclass(frozen=True)
class NuclearOptions(SolverOptions):
    """Dense nuclear solver (:func:`~attnsvm.svm.nuclear.solve_nuclear`): ``settings`` and

    solver : one of :data:`NUCLEAR_SOLVERS`
    device : None (numpy / scipy) or a torch device for the interior-point method's dense algebra
    """

    NORM: ClassVar[str] = "nuclear"

    solver: str = "auto"
    device: object = None

    def check(self) -> None:
        check_choice(self.solver, "solver", NUCLEAR_SOLVERS)
        if self.device is not None and self.solver not in ("auto", "ipm"):
            raise ValidationError(f"device={self.device!r} runs the interior-point method: use solver 'auto' or "
                                  f"'ipm', not {self.solver!r}")


@dataclass(frozen=True)
class FrobeniusWSOptions(SolverOptions):
    """Frobenius working set (:func:`~attnsvm.svm.working_set.solve_frobenius_ws`): ``settings`` and

    batch, per_group, max_rounds : integers (>= 1, >= 0, >= 1) or None (the defaults of
        :class:`~attnsvm.svm.working_set.WorkingSetSettings`)
    verbose : print one line per round
    """

    KIND: ClassVar[str] = "working_set"

    batch: int | None = None
    per_group: int | None = None
    max_rounds: int | None = None
    verbose: bool = False

    def check(self) -> None:
        for name, low in (("batch", 1), ("per_group", 0), ("max_rounds", 1)):
            _check_count(name, getattr(self, name), low)
        _check_flag("verbose", self.verbose)


@dataclass(frozen=True)
class NuclearWSOptions(SolverOptions):
    """Nuclear working set (:func:`~attnsvm.svm.working_set.solve_nuclear_ws`): the knobs of
    :class:`FrobeniusWSOptions` and ``solver``, ``device`` of :class:`NuclearOptions` for the subsets."""

    NORM: ClassVar[str] = "nuclear"
    KIND: ClassVar[str] = "working_set"

    batch: int | None = None
    per_group: int | None = None
    max_rounds: int | None = None
    verbose: bool = False
    solver: str = "auto"
    device: object = None

    def check(self) -> None:
        FrobeniusWSOptions.check(self)
        NuclearOptions.check(self)


@dataclass(frozen=True)
class SoftOptions(SolverOptions):
    """Soft margin (:func:`~attnsvm.svm.soft.solve_soft`): the settings ``support_tol`` and ``max_memory``."""

    NORM: ClassVar[str] = "soft"
