"""The options of each solver, declared once (a frozen dataclass per method) and checked before any work.

``SomeOptions.parse(options, what)`` turns the keyword options a caller gave into the method's
dataclass: an unknown name is a :class:`~attnsvm.errors.ValidationError` naming it and listing the
valid ones, a bad value one naming the option (``__post_init__`` checks every field). The solvers
take an instance (``options=``) or its fields as keywords (:meth:`SolverOptions.resolve`): the dataclass
is the one place where an option, its default and its check are declared; :mod:`attnsvm.svm.dispatch`
parses them before it calls a solver.
Every method has room for a ``device`` (today the nuclear interior-point methods use it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from attnsvm._validate import check_choice, check_number
from attnsvm.errors import ValidationError

__all__ = ["SolverOptions", "FrobeniusOptions", "NuclearOptions", "FrobeniusWSOptions", "NuclearWSOptions",
           "SoftOptions", "VectorOptions", "QP_METHODS", "NUCLEAR_SOLVERS"]

#: ``method`` of the dense Frobenius solver (the QP method)
QP_METHODS = ("auto", "pdas", "goldfarb-idnani")
#: ``solver`` of the nuclear solvers: the interior-point method or the reduced SDP through cvxpy
NUCLEAR_SOLVERS = ("auto", "ipm", "cvxpy", "SCS", "CLARABEL")


def _check_memory(value) -> None:
    if value is not None:
        from attnsvm.memory import parse_size

        parse_size(value, "max_memory")


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
    """Base of the per-method option dataclasses."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names of this method."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def parse(cls, options: dict, what: str) -> "SolverOptions":
        """The options of this method from keyword ``options`` (a dict); ``what`` names the solver in errors."""
        valid = cls.names()
        for name in options:
            if name not in valid:
                raise ValidationError(f"unknown solver option {name!r} for {what} (its options: "
                                      f"{', '.join(valid)})")
        return cls(**options)

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

    def kwargs(self) -> dict:
        """The options as keyword arguments of the solver function."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class FrobeniusOptions(SolverOptions):
    """Dense Frobenius solver (:func:`~attnsvm.svm.frobenius.solve_frobenius`).

    tol : in (0, 1), feasibility tolerance of the active-set method (relative to ``max |rhs|``)
    method : QP method, one of :data:`QP_METHODS`
    support_tol : in [0, 1), margins within it (relative) of rhs count as support
    max_memory : bytes or a size string ("8G"), limit of the N x N matrices (None: the package limit)
    """

    tol: float = 1e-10
    method: str = "auto"
    support_tol: float = 1e-6
    max_memory: object = None

    def __post_init__(self):
        check_number(self.tol, "tol", low=0.0, high=1.0, low_open=True, high_open=True)
        check_number(self.support_tol, "support_tol", low=0.0, high=1.0, high_open=True)
        check_choice(self.method, "method", QP_METHODS)
        _check_memory(self.max_memory)


@dataclass(frozen=True)
class VectorOptions(SolverOptions):
    """Vector SVMs (p-SVM, v-SVM; :func:`~attnsvm.svm.prompt.solve_vector_svm`): as :class:`FrobeniusOptions`
    without ``method``."""

    tol: float = 1e-10
    support_tol: float = 1e-6
    max_memory: object = None

    def __post_init__(self):
        check_number(self.tol, "tol", low=0.0, high=1.0, low_open=True, high_open=True)
        check_number(self.support_tol, "support_tol", low=0.0, high=1.0, high_open=True)
        _check_memory(self.max_memory)


@dataclass(frozen=True)
class NuclearOptions(SolverOptions):
    """Dense nuclear solver (:func:`~attnsvm.svm.nuclear.solve_nuclear`).

    solver : one of :data:`NUCLEAR_SOLVERS`
    support_tol : in [0, 1)
    time_limit : seconds (> 0) or None
    max_memory : as :class:`FrobeniusOptions`
    gap_tol : in (0, 1e-6], the relative duality gap the interior-point method aims at
    device : None (numpy / scipy) or a torch device for the interior-point method's dense algebra
    """

    solver: str = "auto"
    support_tol: float = 1e-5
    time_limit: float | None = None
    max_memory: object = None
    gap_tol: float = 1e-9
    device: object = None

    def __post_init__(self):
        check_choice(self.solver, "solver", NUCLEAR_SOLVERS)
        check_number(self.support_tol, "support_tol", low=0.0, high=1.0, high_open=True)
        check_number(self.time_limit, "time_limit", low=0.0, low_open=True, allow_none=True)
        check_number(self.gap_tol, "gap_tol", low=0.0, high=1e-6, low_open=True)
        _check_memory(self.max_memory)
        if self.device is not None and self.solver not in ("auto", "ipm"):
            raise ValidationError(f"device={self.device!r} runs the interior-point method: use solver 'auto' or "
                                  f"'ipm', not {self.solver!r}")


@dataclass(frozen=True)
class FrobeniusWSOptions(SolverOptions):
    """Frobenius working set (:func:`~attnsvm.svm.working_set.solve_frobenius_ws`).

    tol, support_tol, max_memory : as :class:`FrobeniusOptions`
    batch, per_group, max_rounds : integers (>= 1, >= 0, >= 1) or None (the defaults of
        :class:`~attnsvm.svm.working_set.WorkingSetSettings`)
    time_limit : seconds (> 0) or None
    verbose : print one line per round
    """

    tol: float = 1e-10
    support_tol: float = 1e-6
    batch: int | None = None
    per_group: int | None = None
    max_rounds: int | None = None
    time_limit: float | None = None
    max_memory: object = None
    verbose: bool = False

    def __post_init__(self):
        _check_working_set(self)


@dataclass(frozen=True)
class NuclearWSOptions(SolverOptions):
    """Nuclear working set (:func:`~attnsvm.svm.working_set.solve_nuclear_ws`): the options of
    :class:`FrobeniusWSOptions` (``tol`` 1e-9) and ``solver``, ``gap_tol`` (1e-8), ``device`` of
    :class:`NuclearOptions` for the subsets."""

    tol: float = 1e-9
    support_tol: float = 1e-5
    batch: int | None = None
    per_group: int | None = None
    max_rounds: int | None = None
    time_limit: float | None = None
    max_memory: object = None
    solver: str = "auto"
    gap_tol: float = 1e-8
    verbose: bool = False
    device: object = None

    def __post_init__(self):
        _check_working_set(self)
        check_choice(self.solver, "solver", NUCLEAR_SOLVERS)
        check_number(self.gap_tol, "gap_tol", low=0.0, high=1e-6, low_open=True)


def _check_working_set(o) -> None:
    check_number(o.tol, "tol", low=0.0, high=1.0, low_open=True, high_open=True)
    check_number(o.support_tol, "support_tol", low=0.0, high=1.0, high_open=True)
    check_number(o.time_limit, "time_limit", low=0.0, low_open=True, allow_none=True)
    for name, low in (("batch", 1), ("per_group", 0), ("max_rounds", 1)):
        _check_count(name, getattr(o, name), low)
    _check_flag("verbose", o.verbose)
    _check_memory(o.max_memory)


@dataclass(frozen=True)
class SoftOptions(SolverOptions):
    """Soft margin (:func:`~attnsvm.svm.soft.solve_soft`): ``support_tol`` in [0, 1), ``max_memory``."""

    support_tol: float = 1e-6
    max_memory: object = None

    def __post_init__(self):
        check_number(self.support_tol, "support_tol", low=0.0, high=1.0, high_open=True)
        _check_memory(self.max_memory)
