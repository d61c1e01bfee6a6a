"""What an experiment is: a typed config, tasks, a run step, plots and checks.

An :class:`Experiment` reproduces one figure or claim of the papers:

* ``Config``: a pydantic model holding the paper's defaults; ``quick`` holds the
  overrides of a preset small enough for the test suite.
* ``tasks(config)``: independent units of work (each a batch of runs, identified
  by a stable key and the seeds it covers). Finished tasks are stored one by one,
  so an interrupted sweep resumes where it stopped.
* ``run_task(config, task)``: returns a tidy :class:`pandas.DataFrame` (one row per
  run x checkpoint or per instance).
* ``plot(config, table, outdir)``: writes PNG and PDF figures, returns their paths.
* ``checks(config, table)``: the paper's claims as :class:`Check` (a measured
  number, a threshold, a verdict).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar

import pandas as pd
from pydantic import BaseModel, ConfigDict


class ExperimentConfig(BaseModel):
    """Base of every experiment config: unknown keys and wrong types are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=False)


@dataclass(frozen=True)
class Task:
    """One independent unit of work.

    Attributes
    ----------
    key : str
        Stable, file-name-safe identifier (also the shard file name).
    runs : int
        How many runs the task covers (drives the progress bar).
    params : dict
        JSON-friendly parameters (seeds, sizes, ...) passed to ``run_task``.
    """

    key: str
    runs: int
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """A claim of a paper stated as a measured number against a threshold."""

    name: str
    value: float
    threshold: str
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["value"] = None if self.value is None else float(self.value)
        d["passed"] = bool(self.passed)
        return d


def check(name: str, value: float, op: str, bound: float, detail: str = "") -> Check:
    """Build a :class:`Check` comparing ``value`` with ``bound`` (op in <, <=, >, >=, ==)."""
    ops: dict[str, Callable[[float, float], bool]] = {
        "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b,
    }
    value = float(value)
    passed = bool(ops[op](value, bound)) if value == value else False  # NaN never passes
    return Check(name=name, value=value, threshold=f"{op} {bound:g}", passed=passed, detail=detail)


class Experiment:
    """Base class; subclasses set the class attributes and implement the methods."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Config: ClassVar[type[ExperimentConfig]] = ExperimentConfig
    quick: ClassVar[dict[str, Any]] = {}
    notes: ClassVar[str] = ""
    #: import names of optional packages the experiment needs (e.g. the ``real`` extra)
    requires: ClassVar[tuple[str, ...]] = ()
    #: how to install them
    install_hint: ClassVar[str] = ""

    def missing(self) -> list[str]:
        """The required packages that cannot be imported here."""
        import importlib.util

        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def tasks(self, config) -> list[Task]:  # pragma: no cover - abstract
        raise NotImplementedError

    def run_task(self, config, task: Task) -> pd.DataFrame:  # pragma: no cover - abstract
        raise NotImplementedError

    def plot(self, config, table: pd.DataFrame, outdir) -> list:
        return []

    def checks(self, config, table: pd.DataFrame) -> list[Check]:
        return []

    def explain(self, config, table: pd.DataFrame) -> str:
        """Extra text for the report (pitfalls, protocol notes); markdown."""
        return self.notes


_REGISTRY: dict[str, Experiment] = {}


def register(cls):
    """Class decorator: register an experiment under ``cls.name``."""
    if not cls.name:
        raise ValueError("experiment classes need a name")
    if cls.name in _REGISTRY:
        raise ValueError(f"experiment {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def registry() -> dict[str, Experiment]:
    """Every registered experiment by name (imports the built-in ones first)."""
    from . import catalog  # noqa: F401  (registers the built-in experiments)

    return dict(_REGISTRY)
