"""One reading of a stored run's times and costs: every display of a time (the report's banner and sections,
probe.html, the terminal lines of ``attnsvm reproduce``, ``run``, ``probe`` and ``attnsvm list --out``) reads it.

The records, written by the runner:

* each computed task's shard stores the task's wall and CPU seconds in the process that ran it
  (:func:`attnsvm.runner.execute_timed`); an experiment's ``meta.json`` lists every stored task's provenance with
  those two numbers and ``computed`` (whether the run that wrote the meta computed it, else it reused the shard an
  earlier run stored, with that run's seconds);
* ``meta.json``'s ``wall_seconds`` (the experiment's time in that run) and, in a pooled ``reproduce``,
  ``task_cpu_seconds`` (its computed tasks' CPU summed, also in folders written before tasks recorded their own);
* ``run.json`` (written by ``attnsvm reproduce``): the run's wall clock and its own process's CPU.

:func:`experiment_cost` and :func:`run_cost` turn them into :class:`ExperimentCost` and :class:`RunCost`;
nothing here reads a clock or a table of estimates. Pure: dicts in, numbers out (no file is read here;
:func:`attnsvm.report.stored_cost` reads a folder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from attnsvm._validate import finite_or_none

__all__ = ["TaskCost", "PartCost", "ExperimentCost", "RunCost", "experiment_cost", "run_cost", "seconds_text",
           "reuse_text", "run_cost_text", "experiment_cost_text", "part_cost_text", "part_cost", "task_cost_text"]


def _number(value) -> float | None:
    """A recorded number of seconds: finite and >= 0, else None (not recorded)."""
    out = finite_or_none(value)
    return out if out is not None and out >= 0 else None


def _sum(values) -> float | None:
    """The sum of the numbers among ``values`` (None: none is a number)."""
    nums = [v for v in values if v is not None]
    return float(sum(nums)) if nums else None


@dataclass(frozen=True)
class TaskCost:
    """One stored task's record: its wall and CPU seconds (None: not recorded, e.g. stored by an older version)
    and whether the run that wrote the folder computed it (``False``: reused from an earlier run)."""

    key: str
    wall_seconds: float | None
    cpu_seconds: float | None
    computed: bool


@dataclass(frozen=True)
class PartCost:
    """The tasks of one part of a run (an experiment, the probe's heads or its null heads), summed.

    ``cpu_seconds`` / ``wall_seconds``: the tasks computed by the run (None: none of them recorded);
    ``reused_cpu_seconds``: the recorded CPU of the tasks it reused (from the earlier run that computed them)."""

    tasks: int
    computed: int
    reused: int
    wall_seconds: float | None
    cpu_seconds: float | None
    reused_cpu_seconds: float | None

    def as_dict(self) -> dict:
        return {"tasks": self.tasks, "computed": self.computed, "reused": self.reused,
                "wall_seconds": self.wall_seconds, "cpu_seconds": self.cpu_seconds,
                "reused_cpu_seconds": self.reused_cpu_seconds}


def part_cost(tasks) -> PartCost:
    """:class:`PartCost` of the :class:`TaskCost` records ``tasks``."""
    tasks = list(tasks)
    done = [t for t in tasks if t.computed]
    old = [t for t in tasks if not t.computed]
    return PartCost(len(tasks), len(done), len(old), _sum(t.wall_seconds for t in done),
                    _sum(t.cpu_seconds for t in done), _sum(t.cpu_seconds for t in old))


@dataclass(frozen=True)
class ExperimentCost:
    """One experiment folder's cost (:func:`experiment_cost`)."""

    name: str
    #: the experiment's time in the run that wrote it (meta ``wall_seconds``; None: not recorded)
    wall_seconds: float | None
    #: the task count and how many that run computed / reused (meta ``tasks``, ``computed``, ``resumed``)
    n_tasks: int
    computed: int
    reused: int
    #: each stored task's record (empty for a folder written before tasks recorded their own)
    tasks: tuple = ()
    #: meta ``task_cpu_seconds`` (the computed tasks' CPU summed by a pooled reproduce), used without task records
    summed_cpu_seconds: float | None = None
    #: whether its tasks ran in the process that ran the experiment (one worker, no scheduler)
    in_process: bool = False

    @property
    def cpu_seconds(self) -> float | None:
        """CPU of the tasks this run computed: their records summed (0 when it reused every task), else meta's
        ``task_cpu_seconds`` (None: not recorded)."""
        done = [t for t in self.tasks if t.computed]
        if self.tasks and not done:
            return 0.0
        recorded = _sum(t.cpu_seconds for t in done)
        return recorded if recorded is not None else self.summed_cpu_seconds

    @property
    def reused_cpu_seconds(self) -> float | None:
        """The recorded CPU of the tasks this run reused (computed by an earlier run; None: none recorded)."""
        return _sum(t.cpu_seconds for t in self.tasks if not t.computed)

    def parts(self, part_of: Callable[[str], str]) -> dict[str, PartCost]:
        """The tasks grouped by ``part_of(task key)`` (e.g. the probe's heads and null heads), in first-seen order."""
        groups: dict = {}
        for t in self.tasks:
            groups.setdefault(part_of(t.key), []).append(t)
        return {k: part_cost(v) for k, v in groups.items()}


def experiment_cost(meta: dict) -> ExperimentCost:
    """The cost recorded in an experiment's ``meta.json`` content ``meta`` (values of the wrong type count as not
    recorded)."""
    def count(key) -> int:
        v = meta.get(key)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

    tasks = []
    for p in meta.get("provenance") or []:
        if isinstance(p, dict) and "computed" in p:
            tasks.append(TaskCost(str(p.get("task")), _number(p.get("wall_seconds")), _number(p.get("cpu_seconds")),
                                  p.get("computed") is True))
    return ExperimentCost(str(meta.get("name", "")), _number(meta.get("wall_seconds")), count("tasks"),
                          count("computed"), count("resumed"), tuple(tasks), _number(meta.get("task_cpu_seconds")),
                          meta.get("workers") == 1 and not meta.get("scheduler"))


@dataclass(frozen=True)
class RunCost:
    """A results folder's cost: its experiments' and, when ``run.json`` records the run that wrote every one of
    them, that run's wall clock and its own process's CPU."""

    experiments: tuple = field(default_factory=tuple)
    #: the run's wall clock (run.json; None: no record of a run that wrote every experiment shown)
    wall_seconds: float | None = None
    #: the CPU of the reproducing process itself (run.json; it includes the tasks it ran in-process)
    process_cpu_seconds: float | None = None

    @property
    def worker_cpu_seconds(self) -> float:
        """The CPU the tasks computed in worker processes recorded (the others are in the process's own)."""
        return _sum(e.cpu_seconds for e in self.experiments if not e.in_process) or 0.0

    @property
    def cpu_seconds(self) -> float | None:
        """This run's CPU: the process's own plus its workers' tasks when run.json speaks for it, else the
        experiments' computed tasks summed (None: nothing recorded). Reused tasks' CPU is not in it."""
        if self.wall_seconds is not None and self.process_cpu_seconds is not None:
            return self.process_cpu_seconds + self.worker_cpu_seconds
        return _sum(e.cpu_seconds for e in self.experiments)

    @property
    def tasks(self) -> int:
        return sum(e.n_tasks for e in self.experiments)

    @property
    def reused(self) -> int:
        return sum(e.reused for e in self.experiments)

    @property
    def reused_cpu_seconds(self) -> float | None:
        return _sum(e.reused_cpu_seconds for e in self.experiments)


def run_cost(run, metas) -> RunCost:
    """:class:`RunCost` of the experiments' ``meta.json`` contents ``metas`` and ``run`` (``run.json``'s content,
    None when absent): run.json's clock counts only when it names every experiment given."""
    exps = tuple(experiment_cost(m) for m in metas)
    names = {e.name for e in exps}
    if isinstance(run, dict) and isinstance(run.get("experiments"), list) and names <= set(map(str, run["experiments"])):
        wall, own = _number(run.get("wall_seconds")), _number(run.get("process_cpu_seconds"))
        if wall is not None and own is not None:
            return RunCost(exps, wall, own)
    return RunCost(exps)


# ------------------------------------------------------------------ words
def seconds_text(value: float | None, unit: str = "s") -> str:
    """``"12.3 s"`` (``unit`` "CPU-s": ``"12.3 CPU-s"``), or ``"not recorded"``."""
    return "not recorded" if value is None else f"{value:.1f} {unit}"


def reuse_text(reused: int, tasks: int, reused_cpu: float | None) -> str:
    """``"N of M tasks reused (their X CPU-s from an earlier run)"``; "" when nothing was reused."""
    if not reused:
        return ""
    cpu = (f"their {reused_cpu:.1f} CPU-s from an earlier run" if reused_cpu is not None else
           "stored by an earlier run that did not record their CPU")
    return f"{reused} of {tasks} tasks reused ({cpu})"


def run_cost_text(cost: RunCost) -> str:
    """The run's time in one sentence (the report's banner and ``attnsvm reproduce``'s last lines): its wall
    clock and CPU when run.json records them, else the experiments' recorded times, said to overlap; and what a
    resumed run reused."""
    if cost.wall_seconds is not None:
        own, workers = cost.process_cpu_seconds, cost.worker_cpu_seconds
        text = (f"the run took {cost.wall_seconds:.1f} s of wall clock and {own + workers:.1f} s of CPU (its tasks in "
                f"worker processes {workers:.1f} s, the reproducing process {own:.1f} s)")
    else:
        walls = sum(e.wall_seconds or 0.0 for e in cost.experiments)
        cpu = cost.cpu_seconds
        text = (f"the experiments' recorded times add up to {walls:.1f} s"
                + (f", {cpu:.1f} s of CPU" if cpu is not None else "")
                + "; experiments run together overlap, so this is more than the run's wall clock (not recorded for "
                  "these results)")
    reuse = reuse_text(cost.reused, cost.tasks, cost.reused_cpu_seconds)
    return f"{text}; {reuse}" if reuse else text


def experiment_cost_text(cost: ExperimentCost) -> str:
    """One experiment's time: ``"3.6 s, its tasks 3.1 CPU-s"`` (its time in the run that wrote it, and the CPU of
    the tasks that run computed, each in the process that ran it) plus what it reused (``attnsvm run``'s line, the
    report's section, ``attnsvm list --out``)."""
    text = seconds_text(cost.wall_seconds)
    if cost.cpu_seconds is not None:
        text += f", its tasks {cost.cpu_seconds:.1f} CPU-s"
    reuse = reuse_text(cost.reused, cost.n_tasks, cost.reused_cpu_seconds)
    return f"{text}; {reuse}" if reuse else text


def part_cost_text(part: PartCost) -> str:
    """One part's tasks (the probe's heads or null heads): ``"N tasks computed: C CPU-s, W s of task time"``
    (summed over tasks: more than the wall clock when workers ran them together), plus what was reused."""
    text = (f"{part.computed} task(s) computed: {seconds_text(part.cpu_seconds, 'CPU-s')}, "
            f"{seconds_text(part.wall_seconds)} of task time" if part.computed else "none computed")
    reuse = reuse_text(part.reused, part.tasks, part.reused_cpu_seconds)
    return f"{text}; {reuse}" if reuse else text


def task_cost_text(task: TaskCost | None) -> str:
    """One task's record: ``"0.3 CPU-s, 0.8 s, this run"`` (or ``"..., reused from an earlier run"``); ``"not
    recorded"`` for None or a task stored before tasks recorded their seconds."""
    if task is None or (task.cpu_seconds is None and task.wall_seconds is None):
        return "not recorded"
    when = "this run" if task.computed else "reused from an earlier run"
    return f"{seconds_text(task.cpu_seconds, 'CPU-s')}, {seconds_text(task.wall_seconds)}, {when}"
