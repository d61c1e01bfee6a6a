"""What an experiment is: a typed config, tasks, a run step, plots and checks.

An :class:`Experiment` reproduces one figure or claim of the papers:

* ``Config``: a pydantic model holding the paper's defaults; ``quick`` holds the
  overrides of a preset small enough for the test suite.
* ``tasks(config)``: independent units of work (each a batch of runs, identified
  by a stable key and the seeds it covers). Finished tasks are stored one by one,
  so an interrupted sweep resumes where it stopped.
* ``run_task(config, task)``: returns a tidy :class:`pandas.DataFrame` (one row per
  run x checkpoint or per instance). An experiment with ``takes_max_memory = True`` is called
  ``run_task(config, task, max_memory=...)`` with the run's memory limit and passes it on itself.
* ``plot(config, table, outdir)``: writes PNG and PDF figures, returns their paths.
* ``checks(config, table)``: the paper's claims as :class:`Check` (a measured
  number, a threshold, a verdict).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd
from pydantic import BaseModel, ConfigDict

from attnsvm.experiments.checks import Check, check  # noqa: F401  (re-exported: experiments build their checks with these)


class ExperimentConfig(BaseModel):
    """Base of every experiment config: unknown keys and wrong types are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=False, allow_inf_nan=False)


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


class Experiment:
    """Base class; subclasses set the class attributes and implement the methods."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Config: ClassVar[type[ExperimentConfig]] = ExperimentConfig
    quick: ClassVar[dict[str, Any]] = {}
    notes: ClassVar[str] = ""
    #: position within its paper group (``attnsvm list`` sorts by group, then by this)
    order: ClassVar[int] = 0
    #: import names of optional packages the experiment needs (e.g. the ``real`` extra)
    requires: ClassVar[tuple[str, ...]] = ()
    #: how to install them
    install_hint: ClassVar[str] = ""
    #: True: the runner calls ``run_task(config, task, max_memory=...)`` with the run's ``--max-memory`` (bytes, or
    #: None: the package limit) and the task passes it to every check itself; False: the runner makes that limit
    #: the package's (``$ATTNSVM_MAX_MEMORY``) while the task runs (:func:`attnsvm.runner.tasks.execute_task`)
    takes_max_memory: ClassVar[bool] = False

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

    def deviations(self, config) -> list[dict]:
        """Departures from the spec's protocol, for the report's deviations table.

        Each a dict ``{"spec": what the spec says, "here": what this run does, "reason": why}``.
        """
        return []

    def estimate_memory(self, config, task: Task | None = None) -> float:
        """Rough peak bytes of running ``task``; with ``task=None``, of building ``tasks(config)``.

        The runner refuses work whose estimate exceeds the package's memory limit
        (:func:`attnsvm.memory.require_memory`, option ``--max-memory``) before starting it.
        The default reads the sizes from ``task.params``, else the config: runs R
        (``task.runs``), samples ``n``, tokens ``T``, dimension ``d`` (or the largest of
        ``ns``/``Ts``/``ds``), the longest ``*steps`` S and the recorded checkpoints C
        (``S / record_every`` or ``n_checkpoints``, plus 2). It counts the float64 values of
        batched training per run: ``16 n T d`` (tokens, keys, gradients, temporaries),
        ``(4 + C) d^2`` (weights, optimizer state, recorded W), ``(4 + C) n T^2`` (attention
        maps in sequence form) and ``S`` (per-step records), times 2 for the copies between
        torch and numpy. Planning (``task=None``) counts 100 bytes per run, instance or
        attempt of every cell of the sweep (the task lists of seeds). An order of magnitude
        meant to refuse configs that cannot fit, not a prediction: experiments with other
        cost drivers override it.
        """
        values = config.model_dump()
        params = dict(task.params) if task is not None else {}

        def largest(x) -> int:
            if isinstance(x, dict):
                x = list(x.values())
            if isinstance(x, (list, tuple)):
                nums = [largest(v) for v in x]
                return max(nums) if nums else 1
            return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else 1

        def size(*names) -> int:
            for name in names:
                if name in params:
                    return max(largest(params[name]), 1)
            for name in names:
                if name in values:
                    return max(largest(values[name]), 1)
            return 1

        if task is None:
            counts = [largest(values[k]) for k in ("runs", "instances", "accepted", "attempts", "default_attempts",
                                                   "lemma_trials") if k in values]
            counts += [len(values["seeds"])] if isinstance(values.get("seeds"), list) else []
            cells = 1
            for v in values.values():
                if isinstance(v, (list, tuple, dict)) and len(v) > 0:
                    cells *= len(v)
            return 100.0 * float(max(counts, default=1)) * float(cells)
        n, T, d = size("n", "ns", "base_n"), size("T", "Ts", "base_T"), size("d", "ds")
        S = max([largest(v) for k, v in values.items() if k.endswith("steps")] + [1])
        if "record_every" in values:
            C = S // max(largest(values["record_every"]), 1) + 2
        else:
            C = size("n_checkpoints") + 2
        per_run = 16 * n * T * d + (4 + C) * d * d + (4 + C) * n * T * T + S
        return 2.0 * 8.0 * float(max(int(task.runs), 1)) * float(per_run)

    def estimate_seconds(self, config, task: Task) -> float:
        """Rough CPU seconds of running ``task``: its runs times the experiment's measured seconds per run
        at the full preset (:func:`attnsvm.experiments.costs.run_seconds`). The runner queues the longest
        work first with it; it changes no result. Experiments whose tasks differ in cost per run override it."""
        from attnsvm.experiments.costs import run_seconds

        return float(max(int(task.runs), 1)) * run_seconds(self.name)

    def shared_state(self, config, task: Task) -> str | None:
        """A name for what running ``task`` builds in its worker process and the next tasks of that name reuse
        there (a loaded pretrained model, a forward pass), or None (the default: nothing worth keeping).

        The pooled runner (:func:`attnsvm.runner.run_experiments`) keeps the tasks of one name on the worker
        process that started the first of them while the other workers have other tasks to run, so the state
        is built once per run instead of once per process. It changes no result: every task builds what it
        needs when its process lacks it."""
        return None

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


#: the paper groups, each a subpackage of :mod:`attnsvm.experiments`, in the order ``attnsvm list`` shows them
GROUPS = ("tf", "mm", "lm", "real")

#: the paper (or part of the package) behind each group, as ``attnsvm list`` and the report title it
GROUP_TITLES = {
    "tf": "Transformers as Support Vector Machines (arXiv 2308.16898)",
    "mm": "Max-Margin Token Selection in Attention Mechanism (NeurIPS 2023, arXiv 2306.13596)",
    "lm": "On the similarity between attention and SVM on the token separation and selection behavior (causal-LM paper)",
    "real": "Beyond the papers: real data and a real model (needs the 'real' extra)",
}


def group_of(exp) -> str:
    """The paper group (a key of :data:`GROUP_TITLES`) of an experiment, from its module; "" when outside them."""
    parts = type(exp).__module__.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["attnsvm", "experiments"] and parts[2] in GROUPS else ""


def _discover() -> None:
    """Import every module of the paper groups once, so that their experiments register themselves."""
    import importlib
    import pkgutil

    for group in GROUPS:
        package = importlib.import_module(f"attnsvm.experiments.{group}")
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{info.name}")


def _position(exp: Experiment) -> tuple:
    group = group_of(exp)
    rank = GROUPS.index(group) if group in GROUPS else len(GROUPS)
    return rank, exp.order, exp.name


def registry() -> dict[str, Experiment]:
    """Every registered experiment by name, built-in ones discovered first; paper group order, then ``order``."""
    _discover()
    return {exp.name: exp for exp in sorted(_REGISTRY.values(), key=_position)}
