"""One experiment's sweep: the tasks of its config (:func:`make_plan`), which of them are stored, each finished task's
shard or failure (:meth:`Sweep.record`), and at the end its results, checks, figures, config and meta, all from the
verified shards (:meth:`Sweep.collect`).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field

import pandas as pd

from attnsvm._files import oserror_text
from attnsvm.errors import AttnSVMError, ValidationError
from attnsvm.experiments.base import Task
from attnsvm.experiments.checks import integrity_check, mark_findings
from attnsvm.experiments.config import config_to_yaml
from attnsvm.runner.executors import SchedulerError
from attnsvm.runner.folders import clean_temp_files
from attnsvm.runner.provenance import config_hash, environment, expected_provenance, run_provenance, seeds_of
from attnsvm.runner.storage import (
    CHECKS_DIGEST_KEY, CHECKS_FILE, META_DIGEST_KEY, RESULTS_FILE, ShardError, StorageError, TableError,
    atomic_parquet, atomic_text, durable_write, read_shard, sha256_text, shard_bytes, shard_problem, short,
    stored_count,
)
from attnsvm.runner.tasks import one_thread


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or another KeyboardInterrupt) during a sweep; stored shards are kept.

    ``message`` says how many finished tasks are stored where, and how to resume.
    """

    def __init__(self, message: str, stored: int = 0, sharddir: str = ""):
        super().__init__(message)
        self.message, self.stored, self.sharddir = message, stored, sharddir


@dataclass
class RunSummary:
    """What :func:`run_experiment` did."""

    name: str
    outdir: str
    tasks: int
    computed: int
    resumed: int
    failed: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    wall_seconds: float = 0.0

    preset: str = "custom"
    #: stored shards refused on resume (unreadable, failed checksum or provenance) and recomputed:
    #: ``{"key", "error": why, "moved_to"}``
    recomputed: list = field(default_factory=list)

    @property
    def failed_checks(self) -> list:
        """Failed checks that count (verdict "fail": not inconclusive, not listed findings)."""
        from attnsvm.experiments.checks import counts_against

        return [c for c in self.checks if counts_against(c)]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.failed_checks


@dataclass(frozen=True)
class Plan:
    """The tasks of an experiment's config and its folders, before anything is written (:func:`make_plan`)."""

    tasks: list
    #: the config as JSON (what the tasks are run with, and what each shard's provenance holds)
    config_json: dict
    #: the run's ``--out``, the experiment's folder ``outdir/NAME`` and its shard folder ``expdir/shards/HASH``
    outdir: str
    expdir: str
    sharddir: str
    #: :func:`~attnsvm.runner.provenance.config_hash` of the config
    chash: str
    #: ``time.time()`` when planning began
    start: float


def make_plan(experiment, config, outdir: str, max_memory) -> Plan:
    """The tasks of ``experiment`` with ``config``, each checked against the memory limit, and its folders
    (not created yet: nothing is written before the run's last check, e.g. of the scheduler)."""
    from attnsvm.memory import require_memory

    start = time.time()
    name = experiment.name
    config_json = config.model_dump(mode="json")
    hint = "reduce the sizes or runs in the config, or raise --max-memory / ATTNSVM_MAX_MEMORY"
    require_memory(experiment.estimate_memory(config, None), f"{name}: planning the tasks", limit=max_memory, hint=hint)
    tasks = experiment.tasks(config)
    if not tasks:
        raise ValidationError(f"{name}: nothing to run: this config gives no task (an empty list, such as ds=[], "
                              "in the config or a --set?)")
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise AttnSVMError(f"{name}: task keys are not unique")
    for t in tasks:
        require_memory(experiment.estimate_memory(config, t), f"{name} task {t.key} ({t.runs} run(s))",
                       limit=max_memory, hint=hint)
    expdir = os.path.join(outdir, name)
    chash = config_hash(config)
    sharddir = os.path.join(expdir, "shards", chash)
    return Plan(tasks, config_json, outdir, expdir, sharddir, chash, start)


def preset_of(experiment, config) -> str:
    """"quick" or "full" when ``config`` is exactly that preset of ``experiment``, else "custom"."""
    from attnsvm.experiments.config import build_config

    dump = config.model_dump(mode="json")
    if dump == experiment.Config().model_dump(mode="json"):
        return "full"
    if dump == build_config(experiment, quick=True).model_dump(mode="json"):
        return "quick"
    return "custom"


class Sweep:
    """One experiment's run in its locked folder: which tasks are stored (unusable shards set aside), each
    finished task's shard or failure, and the results, checks and figures at the end."""

    def __init__(self, experiment, config, plan: Plan, workers, scheduler, task_hook=None):
        self.experiment, self.config, self.plan = experiment, config, plan
        self.workers, self.scheduler, self.task_hook = workers, scheduler, task_hook
        tasks = plan.tasks
        clean_temp_files(plan.expdir)
        self.shard = {t.key: os.path.join(plan.sharddir, f"{t.key}.parquet") for t in tasks}
        self.run_prov = run_provenance(experiment, config, plan.config_json, plan.chash)
        self.recomputed = []
        stored = {t.key for t in tasks if self._usable(t)}
        self.todo = [t for t in tasks if t.key not in stored]
        self.resumed = len(tasks) - len(self.todo)
        self.total_runs = sum(t.runs for t in tasks)
        self.done_runs = sum(t.runs for t in tasks if t.key in stored)
        self.failures = []
        self.computed = 0
        #: the computed tasks' seconds (wall and CPU, each in the process that ran it), summed
        self.task_seconds = 0.0
        self.task_cpu_seconds = 0.0
        #: each task computed by this run: ``{key: {"wall_seconds", "cpu_seconds"}}`` (stored in its shard's provenance)
        self.task_costs = {}
        #: the keys of the tasks this run computed and stored (the others stored shards are reused)
        self.computed_keys = set()
        #: set by run_experiments, whose experiments share their time: the meta then gives the sums above and a
        #: ``wall_seconds`` of the tasks' seconds plus the collection's
        self.timed = False

    def _usable(self, task: Task) -> bool:
        """Whether the shard of ``task`` is stored and verifies; one that does not is set aside as
        ``<task>.parquet.unreadable`` (recorded in ``recomputed``, said on stderr) and computed again."""
        path = self.shard[task.key]
        if not os.path.lexists(path):
            return False
        problem = shard_problem(path, expected_provenance(self.run_prov, task))
        if problem is None:
            return True
        moved = path + ".unreadable"
        try:
            os.replace(path, moved)
        except OSError as exc:
            raise StorageError(f"cannot set aside the unusable shard {path}: {oserror_text(exc, path)}") from None
        self.recomputed.append({"key": task.key, "error": problem, "moved_to": moved})
        print(f"attnsvm: {self.experiment.name}: stored shard {path} cannot be used ({problem}); moved to {moved}, "
              "recomputing it", file=sys.stderr, flush=True)
        return False

    def _provenance(self, task):
        return {**expected_provenance(self.run_prov, task), "seeds": seeds_of(task), "params": task.params,
                "written": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
                **self.task_costs.get(task.key, {})}

    def record(self, task, result) -> None:
        """Store the outcome of ``task``: ``result()`` returns its table (None: already stored) or raises."""
        try:
            table = result()
            data = None if table is None else shard_bytes(table, self._provenance(task))
        except (SchedulerError, KeyboardInterrupt):  # the scheduler is lost, or Ctrl-C: stop the sweep
            raise
        except BaseException as exc:  # noqa: BLE001 - a failing task (SystemExit included) must not stop the sweep
            if isinstance(exc, TableError):
                exc = TableError(f"{self.experiment.name}.run_task: {exc}")
            self.failures.append(_failure(task, exc))
        else:
            if data is None:  # resubmitted by Dask after its shard was stored
                self.resumed += 1
            else:
                durable_write(self.shard[task.key], data)
                self.computed += 1
                self.computed_keys.add(task.key)
            if self.task_hook is not None:
                self.task_hook(task.key)

    def _timing(self) -> dict | None:
        if not self.timed:
            return None
        return {"task_seconds": round(self.task_seconds, 3), "task_cpu_seconds": round(self.task_cpu_seconds, 3)}

    def interrupted(self) -> RunInterrupted:
        n = stored_count(self.shard)
        return RunInterrupted(f"interrupted; {n} finished task(s) of {self.experiment.name} are stored in "
                              f"{self.plan.sharddir}; run the same command again to resume", n, self.plan.sharddir)

    def stopped(self, exc: StorageError) -> StorageError:
        return StorageError(f"{exc}; the sweep stopped, {stored_count(self.shard)} finished task(s) are kept in "
                            f"{self.plan.sharddir}: free space or fix the folder, then run the same command again "
                            "to resume")

    # -------------------------------------------------------------- the results, from the verified shards
    def collect(self) -> RunSummary:
        """Results, checks, figures, config and meta from the verified shards (one thread while checks and
        figures compute)."""
        try:
            with one_thread():
                return self._write_results()
        except KeyboardInterrupt:
            raise self.interrupted() from None
        except StorageError as exc:
            raise StorageError(f"{exc}; {stored_count(self.shard)} finished task(s) stay stored in "
                               f"{self.plan.sharddir}: fix the folder, then run the same command again to write the "
                               "results") from None

    def _write_results(self) -> RunSummary:
        """Read and verify every stored shard, then write results, checks, figures, config and meta (all from the
        verified shards).

        A timed sweep (:func:`run_experiments`, whose experiments share their time) writes its tasks' seconds to
        the meta, whose ``wall_seconds`` is then the tasks' seconds plus this collection's; otherwise the time
        since planning began."""
        collect_start = time.time()
        p, name = self.plan, self.experiment.name
        atomic_text(json.dumps(self.failures, indent=2), os.path.join(p.expdir, "failures.json"))
        stored, tables, provenance, configs = self._read_stored()
        table, provenance = self._store_table(stored, tables, provenance)
        # the config that produced the stored numbers is what the shards say (one config per shard folder)
        shown = configs[0] if len(configs) == 1 else p.config_json
        atomic_text(config_to_yaml(self.experiment.Config(**shown)), os.path.join(p.expdir, "config.yaml"))
        checks, figures = self._checks_and_figures(table)
        preset = preset_of(self.experiment, self.config)
        checks = mark_findings(name, checks, preset)
        checks_text = json.dumps(checks, indent=2)
        atomic_text(checks_text, os.path.join(p.expdir, CHECKS_FILE))
        timing = dict(self._timing() or {})
        wall = timing["task_seconds"] + time.time() - collect_start if timing else time.time() - p.start
        meta = {
            "name": name, "title": self.experiment.title, "paper": self.experiment.paper, "config_hash": p.chash,
            "tasks": len(p.tasks), "computed": self.computed, "resumed": self.resumed, "failed": len(self.failures),
            "runs": sum(t.runs for t in p.tasks), "wall_seconds": wall, "figures": figures,
            "explain": self.experiment.explain(self.config, table) if not table.empty else "",
            "environment": environment(), "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            "workers": self.workers or 1, "scheduler": self.scheduler, "preset": preset,
            "deviations": self.experiment.deviations(self.config),
            "config": shown, "provenance": provenance, "code_version": self.run_prov["version"],
            "source": self.run_prov["source"], "recomputed_unreadable": self.recomputed, **timing,
        }
        meta_text = json.dumps(meta, indent=2, default=str)
        atomic_text(meta_text, os.path.join(p.expdir, "meta.json"))
        self._seal(table, {CHECKS_DIGEST_KEY: sha256_text(checks_text), META_DIGEST_KEY: sha256_text(meta_text)})
        return RunSummary(name, p.expdir, len(p.tasks), self.computed, self.resumed, self.failures, checks, wall,
                          preset, self.recomputed)

    def _read_stored(self) -> tuple[list, list, list, list]:
        """``(tasks, tables, provenance, configs)`` of the stored shards, each verified against this run
        (:class:`StorageError` when one changed during the run): its task, table and provenance summary, and the
        distinct configs they were written for."""
        stored, tables, provenance, configs = [], [], [], []
        for t in self.plan.tasks:
            path = self.shard[t.key]
            if not os.path.lexists(path):
                continue
            try:
                table, prov = read_shard(path, expected_provenance(self.run_prov, t))
            except ShardError as exc:
                raise StorageError(f"the stored shard {path} changed during the run ({exc.reason}); run the same "
                                   "command again to recompute it") from None
            tables.append(table)
            stored.append(t)
            if isinstance(prov.get("config"), dict) and prov["config"] not in configs:
                configs.append(prov["config"])
            # the task's cost as its shard records it (:mod:`attnsvm.runner.costs`), and whether this run computed it
            provenance.append({**{k: prov.get(k) for k in ("task", "config_hash", "version", "seeds", "written",
                                                           "source", "inputs", "wall_seconds", "cpu_seconds")},
                               "computed": t.key in self.computed_keys})
        return stored, tables, provenance, configs

    def _store_table(self, stored: list, tables: list, provenance: list) -> tuple[pd.DataFrame, list]:
        """``(table, provenance)``: the stored tasks' tables as one, written as results.parquet (the data first,
        kept if a check or a figure fails; sealed again with the digests of its checks and meta at the end). When
        each task's table stores but together they do not, the tasks whose tables do not join fail (recorded in
        failures.json) and the others are the results."""
        table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
        unsealed = {CHECKS_DIGEST_KEY: None, META_DIGEST_KEY: None}
        try:
            self._seal(table, unsealed)
        except TableError:
            keep = _joinable(tables)
            self.failures.extend(
                _failure(t, TableError(f"{self.experiment.name}.run_task: its table's columns cannot join those of "
                                       f"the other tasks ({_column_types(tables[k])})"))
                for k, t in enumerate(stored) if k not in keep)
            provenance = [p for k, p in enumerate(provenance) if k in keep]
            table = pd.concat([tables[k] for k in sorted(keep)], ignore_index=True)
            self._seal(table, unsealed)
            atomic_text(json.dumps(self.failures, indent=2), os.path.join(self.plan.expdir, "failures.json"))
        return table, provenance

    def _seal(self, table: pd.DataFrame, digests: dict) -> None:
        """Write ``table`` as the folder's results.parquet, sealed for this experiment and config with ``digests``
        (those of checks.json and meta.json; None before they are written)."""
        atomic_parquet(table, os.path.join(self.plan.expdir, RESULTS_FILE),
                       {"experiment": self.experiment.name, "config_hash": self.plan.chash, **digests})

    def _checks_and_figures(self, table: pd.DataFrame) -> tuple[list, list]:
        """``(checks as dicts, figure file names)`` of the results ``table`` (none when it is empty), and a failed
        integrity check when a task failed."""
        checks, figures = [], []
        if not table.empty:
            checks = [c.to_dict() for c in self.experiment.checks(self.config, table)]
            try:
                figures = [os.path.basename(os.fspath(p)) for p in self.experiment.plot(self.config, table,
                                                                                        self.plan.expdir)]
            except OSError as exc:  # a figure's path taken by a folder, a fifo, a device; disk full
                where = os.fspath(exc.filename) if isinstance(exc.filename, (str, os.PathLike)) else self.plan.expdir
                raise StorageError(f"cannot write the figures of {self.experiment.name}: {where}: "
                                   f"{oserror_text(exc, where)}") from None
        if self.failures:
            checks.append(integrity_check("every task completed", float(len(self.failures)), "==", 0,
                                          "failed tasks: " + ", ".join(f["key"] for f in self.failures),
                                          reason="a failed task leaves runs unmeasured").to_dict())
        return checks, figures


def _column_types(table: pd.DataFrame) -> str:
    """``"a: float64, b: object"``: a table's columns and dtypes, for an error (at most 200 characters)."""
    return short(", ".join(f"{c}: {t}" for c, t in table.dtypes.items()), 200)


def _joinable(tables: list) -> set:
    """The indices of the tables that store as one (:func:`shard_bytes`): those of the most common column
    dtypes (the first such table on a tie), then each other table that still stores when added. Called only when
    all of them together do not store (a task returned text where the others return numbers)."""
    kinds = [tuple((str(c), str(t)) for c, t in table.dtypes.items()) for table in tables]
    base = max(range(len(tables)), key=lambda k: (kinds.count(kinds[k]), -k))
    keep = {base}
    for k in sorted(range(len(tables)), key=lambda k: (kinds[k] != kinds[base], k)):
        if k not in keep:
            try:
                shard_bytes(pd.concat([tables[j] for j in sorted(keep | {k})], ignore_index=True))
            except TableError:
                continue
            keep.add(k)
    return keep


def _failure(task: Task, exc: BaseException) -> dict:
    return {"key": task.key, "params": task.params, "error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]}
