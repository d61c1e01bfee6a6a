"""Dispatch: which solver runs a ConstraintSet, with its options parsed before any work.

The solver interface: each method is a :class:`Solver` (a name, its options dataclass from
:mod:`attnsvm.svm.options` and the function that runs it), implemented in its own module. Each
function follows the same three stages, after cvxpy's apply -> solve -> invert: it scales the rows
(:mod:`attnsvm.svm.reductions`), solves the scaled problem, and maps the result back, certifies it and
builds the :class:`~attnsvm.svm.solution.SVMSolution` (:mod:`attnsvm.svm.result`).

=========================  ==========================================  ==========================
(norm, method)             function                                    options
=========================  ==========================================  ==========================
("fro", "dense")           :func:`~attnsvm.svm.frobenius.solve_frobenius`     :class:`FrobeniusOptions`
("nuclear", "dense")       :func:`~attnsvm.svm.nuclear.solve_nuclear`         :class:`NuclearOptions`
("fro", "working_set")     :func:`~attnsvm.svm.working_set.solve_frobenius_ws`  :class:`FrobeniusWSOptions`
("nuclear", "working_set") :func:`~attnsvm.svm.working_set.solve_nuclear_ws`    :class:`NuclearWSOptions`
=========================  ==========================================  ==========================

The norms are :data:`attnsvm.svm.norms.NORMS`; a norm's methods are its entries here, and
:data:`CERTIFIERS` holds the function that certifies a candidate solution of it (:func:`attnsvm.svm.certify`).

(The soft margin, :func:`~attnsvm.svm.soft.solve_soft` with :class:`SoftOptions`, and the vector
SVMs, :func:`~attnsvm.svm.prompt.solve_vector_svm` with :class:`VectorOptions`, are called by
:mod:`attnsvm.svm.api` directly: each has one method.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from attnsvm._validate import check_choice
from attnsvm.errors import ResourceLimitError, ValidationError
from attnsvm.svm.constraints import ConstraintSet
from attnsvm.svm.frobenius import frobenius_certificate, solve_frobenius
from attnsvm.svm.norms import get_norm
from attnsvm.svm.nuclear import nuclear_certificate, solve_nuclear
from attnsvm.svm.options import (WS_KNOBS, FrobeniusOptions, FrobeniusWSOptions, NuclearOptions, NuclearWSOptions,
                                 SolverOptions)
from attnsvm.svm.settings import SolverSettings
from attnsvm.svm.solution import SVMSolution
from attnsvm.svm.working_set import ScaleError, solve_frobenius_ws, solve_nuclear_ws

__all__ = ["solve_dispatch", "Solver", "SOLVERS", "CERTIFIERS", "METHODS", "AUTO_DENSE_MAX_N", "accepted_options"]

#: ``method`` values of :func:`solve_dispatch` ("pdas" and "goldfarb-idnani" select the dense
#: Frobenius solver with that QP method).
METHODS = ("auto", "dense", "working_set", "pdas", "goldfarb-idnani")

#: ``method="auto"`` solves up to this many rows densely (N x N Gram matrices) and more by the
#: working set (``python benchmarks/solvers.py --scale`` times both side by side; the measured
#: crossover is in docs/guide/performance.md).
AUTO_DENSE_MAX_N = 800


@dataclass(frozen=True)
class Solver:
    """One method: ``run(cs, formulation=..., options=...)`` returns an SVMSolution."""

    name: str
    options: type
    run: Callable[..., SVMSolution]

    def __call__(self, cs: ConstraintSet, formulation: str, options: SolverOptions) -> SVMSolution:
        return self.run(cs, formulation=formulation, options=options)


#: (norm, method) -> Solver
SOLVERS = {
    ("fro", "dense"): Solver("the dense Frobenius solver", FrobeniusOptions, solve_frobenius),
    ("nuclear", "dense"): Solver("the dense nuclear solver", NuclearOptions, solve_nuclear),
    ("fro", "working_set"): Solver("the Frobenius working set", FrobeniusWSOptions, solve_frobenius_ws),
    ("nuclear", "working_set"): Solver("the nuclear working set", NuclearWSOptions, solve_nuclear_ws),
}


#: norm -> ``certify(cs, W, lam) -> (Certificate, margins (N,))`` of a candidate ``W (d1, d2)`` with multipliers
#: ``lam (N,)`` of the norm's objective (:attr:`~attnsvm.svm.norms.Norm.multipliers`), in the units of ``cs``
CERTIFIERS = {"fro": frobenius_certificate, "nuclear": nuclear_certificate}


#: options only the working sets have: under ``method="auto"`` giving one chooses the working set
WS_ONLY = frozenset(WS_KNOBS)


def accepted_options(norm: str) -> tuple[str, ...]:
    """The keyword options ``norm``'s methods accept: the settings of the norm and every method's knobs."""
    knobs = [k for (nm, _), sv in SOLVERS.items() if nm == norm for k in sv.options.knobs()]
    return get_norm(norm).settings + tuple(dict.fromkeys(knobs))


def _parse(norm: str, method: str, settings: SolverSettings, kw: dict) -> tuple[Solver, SolverOptions]:
    solver = SOLVERS[(norm, method)]
    return solver, solver.options.with_knobs(settings, kw, solver.name)


def solve_dispatch(cs: ConstraintSet, norm: str, formulation: str, method: str = "auto", *,
                   settings: SolverSettings | None = None, **kw) -> SVMSolution:
    """Solve the SVM of ``cs`` (a norm of :data:`~attnsvm.svm.norms.NORMS`) by the dense or the working-set method.

    Parameters
    ----------
    method : "auto" (dense up to :data:`AUTO_DENSE_MAX_N` rows if its N x N matrices fit in
        memory, else the working set; an option only the working set has chooses it), "dense",
        "working_set", or a dense Frobenius QP method ("pdas", "goldfarb-idnani")
    settings : the :class:`~attnsvm.svm.settings.SolverSettings` (None: built from ``kw``)
    **kw : the settings (when ``settings`` is None) and the knobs of the chosen method (:data:`SOLVERS`),
        parsed before any work: an unknown or bad option is a ValidationError naming it. Every method of a
        norm accepts the same settings (:attr:`~attnsvm.svm.norms.Norm.settings`); the working-set knobs
        choose the working set under ``method="auto"``. ``max_memory`` applies to every path: the dense one
        refuses (ResourceLimitError) when its N x N matrices need more, and ``method="auto"`` then takes the
        working set.
    """
    check_choice(method, "method", METHODS)
    if settings is None:
        settings = SolverSettings.take(kw, norm)
    valid = accepted_options(norm)
    for name in kw:
        if name not in valid:
            raise ValidationError(f"unknown solver option {name!r} for norm={norm!r} (its options: "
                                  f"{', '.join(valid)})")
    if method in ("pdas", "goldfarb-idnani"):
        if "method" not in SOLVERS[(norm, "dense")].options.knobs():
            raise ValidationError(f"method={method!r} is a Frobenius QP method; for norm={norm!r} use 'auto', "
                                  "'dense' or 'working_set'")
        kw["method"] = method
        method = "dense"
    auto = method == "auto"
    ws_only = WS_ONLY
    has_ws = (norm, "working_set") in SOLVERS
    if auto:
        small = cs.N <= AUTO_DENSE_MAX_N or not has_ws
        method = "dense" if small and not ws_only.intersection(kw) else "working_set"
    if (norm, method) not in SOLVERS:
        have = ", ".join(repr(m) for (nm, m) in SOLVERS if nm == norm)
        raise ValidationError(f"norm={norm!r} has no method {method!r} (its methods: 'auto', {have})")
    solver, opts = _parse(norm, method, settings, kw)
    if method == "working_set":
        try:
            return solver(cs, formulation, opts)
        except ScaleError:
            if not auto or ws_only.intersection(kw):
                raise
        # extreme data scales: the dense solver normalizes the rows
        solver, opts = _parse(norm, "dense", settings, kw)
        return solver(cs, formulation, opts)
    try:
        return solver(cs, formulation, opts)
    except ResourceLimitError:
        if not auto or not has_ws:
            raise
    # the dense solver refused (before allocating) for lack of memory: the working set needs O(N d)
    solver, opts = _parse(norm, "working_set", settings, kw)
    return solver(cs, formulation, opts)
