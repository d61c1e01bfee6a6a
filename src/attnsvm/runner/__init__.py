"""Run an experiment's tasks serially, on local processes or on a Dask cluster.

Every finished task is stored at once as ``OUT/NAME/shards/<config-hash>/<task>.parquet``,
so a sweep that is interrupted or killed resumes, when re-run with the same command,
without recomputing anything stored. A failing task is recorded with its parameters
(seeds) in ``failures.json`` and the others complete.

Storage is crash-safe and checked:

* a shard is written to an exclusively created temporary file (never through a symbolic
  link), flushed and fsynced, renamed, and its folder fsynced; it carries its provenance
  (experiment, task, config hash, the config itself, the attnsvm version with ``git describe``
  when run from a checkout, a digest of the package's source files, digests of the inputs the
  experiment declares such as a probed model's files, seeds, time written) in the parquet
  key-value metadata, and a SHA-256 checksum of the whole file (:func:`shard_bytes`), so any
  change to the file after it was written, one flipped bit included, is detected;
* on resume every shard is verified (:func:`read_shard`): checksum, then its provenance against
  this run's (another task's shard copied over it, a shard rewritten by another program without
  attnsvm's metadata, a shard of other code or other inputs under the same version); one that
  fails is set aside as ``<task>.parquet.unreadable``, recomputed and reported with the reason
  (:attr:`RunSummary.recomputed`); results, checks and the report's config and provenance are
  built only from verified shards;
* one run at a time per experiment folder (a file lock ``OUT/NAME/.lock``, opened without
  following links): a second ``attnsvm run`` on the same folder waits, at most ``lock_timeout``
  seconds (``--lock-timeout``; then a :class:`LockError` naming the pid that holds it), then
  reuses the first one's shards; a run of several experiments takes their locks in one order
  (sorted folder paths), so two runs never wait for each other; stale temporary files are removed;
* no folder below the run's ``outdir`` is followed when it is a symbolic link (``OUT/NAME``, its ``shards`` and
  shard folders are created one at a time and checked before the lock is taken and again after);
* a write error (disk full, read-only folder) stops the sweep with one clear error naming
  the path, removes the temporary file and keeps every shard already stored; Ctrl-C does
  the same (:class:`RunInterrupted`).

Before anything runs, the memory of planning and of each task is estimated
(:meth:`Experiment.estimate_memory`) and checked against the package's one memory limit
(:func:`attnsvm.memory.require_memory`, option ``--max-memory``), which also applies to
the solvers inside the tasks.
"""

from __future__ import annotations

import json
import math
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
from attnsvm.runner.executors import (  # noqa: F401 - the constants are re-exported
    LANE_DEPTH, PARENT_POLL, WORKER_TIMEOUT, DaskCluster, LocalPool, SchedulerError, Serial, check_scheduler,
    next_for_worker, queue_order, refuse_in_worker_start, shared_state_of,
)
from attnsvm.runner.folders import (  # noqa: F401 - LOCK_FILE is re-exported
    LOCK_FILE, LOCK_TIMEOUT, LockError, check_folders, check_outdir, clean_temp_files, folder_lock, folder_locks,
    make_run_folders,
)
from attnsvm.runner.provenance import (
    code_version, config_hash, environment, expected_provenance, git_version, run_provenance, seeds_of, source_digest,
)
from attnsvm.runner.tasks import TaskAborted, execute_task, execute_timed, one_thread
from attnsvm.runner.storage import (  # noqa: F401 - the constants are re-exported
    CHECKS_DIGEST_KEY, CHECKS_FILE, CHECKSUM_KEY, MAX_SEALED_BYTES, META_DIGEST_KEY, PROVENANCE_KEY, RESULTS_FILE,
    VERIFIED_FIELDS, ShardError, StorageError, TableError, atomic_parquet, atomic_text, durable_write,
    provenance_mismatch, read_shard, results_problem, results_seal, shard_bytes, shard_is_stored, shard_problem,
    short, sha256_text, stored_count, verify_shard_bytes,
)

#: the documented names (classes and functions); the constants above and below are importable from here too
__all__ = [
    "StorageError", "ShardError", "LockError", "TaskAborted", "TableError", "SchedulerError", "RunInterrupted",
    "RunSummary", "config_hash", "source_digest", "git_version", "code_version", "execute_task", "shard_bytes",
    "verify_shard_bytes", "read_shard", "provenance_mismatch", "results_problem", "results_seal", "preset_of",
    "max_workers", "run_experiment", "execute_timed", "default_workers", "run_experiments", "queue_order",
    "shared_state_of", "next_for_worker", "check_scheduler", "environment",
]


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


# ------------------------------------------------------------------ storage


def _progress(total: int, initial: int, desc: str, enabled: bool):
    if enabled:  # a notebook bar in Jupyter, a text bar elsewhere
        from tqdm.auto import tqdm
    else:  # tqdm.auto warns in a notebook without ipywidgets even for a disabled bar
        from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="run", disable=not enabled, dynamic_ncols=True, leave=True)


def preset_of(experiment, config) -> str:
    """"quick" or "full" when ``config`` is exactly that preset of ``experiment``, else "custom"."""
    from attnsvm.experiments.config import build_config

    dump = config.model_dump(mode="json")
    if dump == experiment.Config().model_dump(mode="json"):
        return "full"
    if dump == build_config(experiment, quick=True).model_dump(mode="json"):
        return "quick"
    return "custom"


#: ``--workers`` beyond this many local worker processes per CPU is refused (more start no task sooner)
WORKERS_PER_CPU = 4


def max_workers() -> int:
    """The largest ``--workers``: :data:`WORKERS_PER_CPU` times this machine's CPU count."""
    return WORKERS_PER_CPU * (os.cpu_count() or 1)


def _check_seconds(value, option: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValidationError(f"{option} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _check_options(workers, scheduler, connect_timeout, worker_timeout, outdir, max_memory,
                   lock_timeout=LOCK_TIMEOUT) -> tuple:
    """Validate the run options; returns ``(worker_timeout as a float, outdir as a str, max_memory in bytes or
    None)``."""
    from attnsvm.memory import max_memory as _limit_of

    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValidationError(f"--workers must be an integer >= 1, got {workers!r}")
    if workers is not None and workers > max_workers():
        raise ValidationError(f"--workers must be at most {max_workers()} ({WORKERS_PER_CPU} per CPU, "
                              f"{os.cpu_count() or 1} CPU(s) here), got {workers}; for more, start a Dask cluster and "
                              "give its address with --scheduler")
    _check_seconds(connect_timeout, "--connect-timeout")
    worker_timeout = _check_seconds(worker_timeout, "--worker-timeout")
    _check_seconds(lock_timeout, "--lock-timeout")
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
        raise ValidationError(f"--scheduler must be an address such as tcp://host:8786, got {scheduler!r}")
    outdir = check_outdir(outdir)
    limit = _limit_of(max_memory)  # validates max_memory
    return worker_timeout, outdir, (limit if max_memory is not None else None)


def _plan(experiment, config, outdir: str, max_memory) -> dict:
    """The tasks of ``experiment`` with ``config``, each checked against the memory limit, and its folders
    (not created yet: nothing is written before the run's last check, e.g. of the scheduler):
    ``{"tasks", "config_json", "outdir", "expdir", "sharddir", "chash", "start"}``."""
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
    return {"tasks": tasks, "config_json": config_json, "outdir": outdir, "expdir": expdir, "sharddir": sharddir,
            "chash": chash, "start": start}


def run_experiment(experiment, config, outdir: str, *, workers: int | None = None, scheduler: str | None = None,
                   progress: bool = True, task_hook=None, connect_timeout: float = 20.0,
                   max_memory=None, worker_timeout: float = WORKER_TIMEOUT,
                   lock_timeout: float = LOCK_TIMEOUT) -> RunSummary:
    """Run (or resume) ``experiment`` with ``config`` into ``outdir/NAME``.

    Parameters
    ----------
    workers : int, optional
        ``None``/``1``: run in this process. ``N > 1``: start a local Dask cluster
        of N single-threaded worker processes (at most :func:`max_workers`, 4 per CPU).
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:port``); overrides ``workers``.
    task_hook : callable, optional
        Called with each task key after its shard is stored (tests use it to
        simulate a crash mid-sweep).
    connect_timeout : float
        Seconds to wait for the Dask scheduler before a clear error (:class:`SchedulerError`).
    worker_timeout : float
        Seconds the tasks wait for a first worker of ``scheduler`` before a clear error naming the
        address (:class:`SchedulerError`; default 60).
    max_memory : int or str, optional
        Memory limit for planning and for one task (see :mod:`attnsvm.memory`; default
        ``$ATTNSVM_MAX_MEMORY``, else 80 % of available memory). Work estimated above it
        is refused before it starts (:class:`~attnsvm.errors.ResourceLimitError`).
    lock_timeout : float
        Seconds to wait while another run holds the experiment folder's lock (default :data:`LOCK_TIMEOUT`,
        an hour) before a :class:`LockError` naming that run's pid.

    Raises
    ------
    StorageError
        The results folder cannot be created or written; shards already stored are kept.
    LockError
        (a StorageError) another run holds the folder for longer than ``lock_timeout``.
    SchedulerError
        No scheduler answers, it has no worker within ``worker_timeout``, or it is lost during the run
        (shards already stored are kept; the message says how to resume).
    ValidationError
        A bad option, or a config whose design is empty ("nothing to run", e.g. ``ds=[]``).
    RunInterrupted
        (a KeyboardInterrupt) on Ctrl-C; shards already stored are kept.
    """
    refuse_in_worker_start("run_experiment")
    worker_timeout, outdir, max_memory = _check_options(workers, scheduler, connect_timeout, worker_timeout, outdir,
                                                        max_memory, lock_timeout)
    plan = _plan(experiment, config, outdir, max_memory)
    if scheduler:
        check_scheduler(scheduler, connect_timeout)  # before anything is written: a clear error, never a hang
    make_run_folders(plan["outdir"], plan["sharddir"])
    with folder_lock(plan["expdir"], lock_timeout):
        check_folders(plan["outdir"], plan["sharddir"])  # again, once the folder is ours
        sweep = _Sweep(experiment, config, plan, workers, scheduler, task_hook)
        bar = _progress(sweep.total_runs, sweep.done_runs, experiment.name, progress)
        if scheduler or (workers is not None and workers > 1):
            executor = DaskCluster(workers, scheduler, connect_timeout, worker_timeout, max_memory)
        else:
            executor = Serial(max_memory)
        outcomes = executor.outcomes([sweep], [(0, task) for task in sweep.todo])
        try:
            for _, task, result in outcomes:
                sweep.record(task, result)
                bar.update(task.runs)
        except KeyboardInterrupt:
            raise sweep.interrupted() from None
        except StorageError as exc:
            raise sweep.stopped(exc) from None
        finally:
            outcomes.close()
            bar.close()
        return sweep.collect()


class _Sweep:
    """One experiment's run in its locked folder: which tasks are stored (unusable shards set aside), each
    finished task's shard or failure, and the results, checks and figures at the end."""

    def __init__(self, experiment, config, plan: dict, workers, scheduler, task_hook=None):
        self.experiment, self.config, self.plan = experiment, config, plan
        self.workers, self.scheduler, self.task_hook = workers, scheduler, task_hook
        name = experiment.name
        tasks, sharddir = plan["tasks"], plan["sharddir"]
        clean_temp_files(plan["expdir"])
        self.shard = {t.key: os.path.join(sharddir, f"{t.key}.parquet") for t in tasks}
        self.run_prov = run_provenance(experiment, config, plan["config_json"], plan["chash"])
        self.recomputed = []
        stored = set()
        for t in tasks:
            path = self.shard[t.key]
            if not os.path.lexists(path):
                continue
            problem = shard_problem(path, expected_provenance(self.run_prov, t))
            if problem is None:
                stored.add(t.key)
                continue
            moved = path + ".unreadable"
            try:
                os.replace(path, moved)
            except OSError as exc:
                raise StorageError(f"cannot set aside the unusable shard {path}: {oserror_text(exc, path)}") from None
            self.recomputed.append({"key": t.key, "error": problem, "moved_to": moved})
            print(f"attnsvm: {name}: stored shard {path} cannot be used ({problem}); moved to {moved}, recomputing it",
                  file=sys.stderr, flush=True)
        self.todo = [t for t in tasks if t.key not in stored]
        self.resumed = len(tasks) - len(self.todo)
        self.total_runs = sum(t.runs for t in tasks)
        self.done_runs = sum(t.runs for t in tasks if t.key in stored)
        self.failures = []
        self.computed = 0
        #: the computed tasks' seconds (wall and CPU, each in the process that ran it), when the runner timed them
        self.task_seconds = 0.0
        self.task_cpu_seconds = 0.0
        self.timed = False  # set by run_experiments, whose tasks are timed

    def _provenance(self, task):
        return {**expected_provenance(self.run_prov, task), "seeds": seeds_of(task), "params": task.params,
                "written": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node()}

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
            if self.task_hook is not None:
                self.task_hook(task.key)

    def _timing(self) -> dict | None:
        if not self.timed:
            return None
        return {"task_seconds": round(self.task_seconds, 3), "task_cpu_seconds": round(self.task_cpu_seconds, 3)}

    def interrupted(self) -> "RunInterrupted":
        return _interrupted(self.experiment.name, self.shard, self.plan["sharddir"])

    def stopped(self, exc: StorageError) -> StorageError:
        return StorageError(f"{exc}; the sweep stopped, {stored_count(self.shard)} finished task(s) are kept in "
                            f"{self.plan['sharddir']}: free space or fix the folder, then run the same command again "
                            "to resume")

    def collect(self) -> RunSummary:
        """Results, checks, figures, config and meta from the verified shards (one thread while checks and
        figures compute)."""
        p = self.plan
        try:
            with one_thread():
                return _collect(self.experiment, self.config, p["config_json"], p["tasks"], self.shard, p["expdir"],
                                p["sharddir"], p["chash"], p["start"], self.workers, self.scheduler, self.failures,
                                self.computed, self.resumed, self.recomputed, self.run_prov, self._timing())
        except KeyboardInterrupt:
            raise self.interrupted() from None
        except StorageError as exc:
            raise StorageError(f"{exc}; {stored_count(self.shard)} finished task(s) stay stored in {p['sharddir']}: fix "
                               "the folder, then run the same command again to write the results") from None


def default_workers(tasks: int) -> int:
    """The default number of local worker processes of :func:`run_experiments`: one per CPU, at most one per
    task to compute (``tasks``), at least 1."""
    return max(1, min(os.cpu_count() or 1, int(tasks)))


def run_experiments(jobs, outdir: str, *, workers: int | None = None, scheduler: str | None = None,
                    progress: bool = True, connect_timeout: float = 20.0, max_memory=None,
                    worker_timeout: float = WORKER_TIMEOUT, on_done=None,
                    lock_timeout: float = LOCK_TIMEOUT) -> list[RunSummary]:
    """Run (or resume) several experiments into ``outdir``: ``jobs`` is a list of ``(experiment, config)``.

    ``workers=None`` and no ``scheduler``: the tasks of all the experiments share one pool of
    :func:`default_workers` local processes (one per CPU, at most one per task to compute; one BLAS and one
    torch thread each), queued longest first (:func:`queue_order`), the tasks that share a worker-process state
    (:meth:`~attnsvm.experiments.Experiment.shared_state`, a loaded model) kept on one worker while the
    others have other work (:func:`next_for_worker`); each finished task is stored at once,
    and each experiment's results, checks and figures are written in this process as soon as its last task
    is in, whatever the other experiments do. With one worker everything runs in this process. The tables
    equal those of :func:`run_experiment` (each task is seeded by its own parameters and runs single-threaded
    either way, so neither the order nor the process changes a result).
    ``workers=1``: the same in this process. ``workers=N > 1`` or ``scheduler``: each experiment in turn through
    :func:`run_experiment` (a Dask cluster).

    ``on_done(summary)`` is called for each experiment as soon as it is written (experiments finishing
    together: in the order of ``jobs``).
    The pool starts its workers with 'spawn', which re-runs the calling script in each: a script must call this
    under ``if __name__ == "__main__":`` (without it, an :class:`~attnsvm.errors.AttnSVMError` says so at once,
    instead of workers that wait forever); a worker ends by itself when this process is killed.
    Each experiment may appear once in ``jobs`` (one folder each; a :class:`~attnsvm.errors.ValidationError`
    otherwise); their folder locks are taken in one order whatever the order of ``jobs``, so two runs of the same
    experiments never wait for each other (``lock_timeout`` as in :func:`run_experiment`).
    Returns the summaries in the order of ``jobs``. Raises as :func:`run_experiment`; a worker process that
    dies (killed, out of memory) stops the run with an :class:`~attnsvm.errors.AttnSVMError` saying that the
    stored tasks are kept and how to resume.
    """
    refuse_in_worker_start("run_experiments")
    worker_timeout, outdir, max_memory = _check_options(workers, scheduler, connect_timeout, worker_timeout, outdir,
                                                        max_memory, lock_timeout)
    jobs = list(jobs)
    names = [experiment.name for experiment, _ in jobs]
    twice = sorted({n for n in names if names.count(n) > 1}, key=str)
    if twice:
        raise ValidationError(f"jobs must name each experiment once (one results folder each): {twice[0]!r} is "
                              f"listed {names.count(twice[0])} times")
    done = on_done or (lambda summary: None)
    if scheduler or (workers is not None and workers > 1):
        out = []
        for experiment, config in jobs:
            out.append(run_experiment(experiment, config, outdir, workers=workers, scheduler=scheduler,
                                      progress=progress, connect_timeout=connect_timeout, max_memory=max_memory,
                                      worker_timeout=worker_timeout, lock_timeout=lock_timeout))
            done(out[-1])
        return out
    plans = [_plan(experiment, config, outdir, max_memory) for experiment, config in jobs]
    for plan in plans:
        make_run_folders(plan["outdir"], plan["sharddir"])
    with folder_locks([plan["expdir"] for plan in plans], lock_timeout):
        for plan in plans:
            check_folders(plan["outdir"], plan["sharddir"])  # again, once the folders are ours
        sweeps = [_Sweep(experiment, config, plan, None, None) for (experiment, config), plan in zip(jobs, plans)]
        n = 1 if workers == 1 else default_workers(sum(len(s.todo) for s in sweeps))
        for s in sweeps:
            s.workers, s.timed = n, True
        bar = _progress(sum(s.total_runs for s in sweeps), sum(s.done_runs for s in sweeps), "reproduce", progress)
        summaries = [None] * len(sweeps)
        left = [len(s.todo) for s in sweeps]
        try:
            def finish_ready():
                for k, sweep in enumerate(sweeps):
                    if left[k] == 0 and summaries[k] is None:
                        summaries[k] = sweep.collect()
                        done(summaries[k])

            finish_ready()
            executor = Serial(max_memory) if n <= 1 else LocalPool(n, max_memory)
            for i, task, result in executor.outcomes(sweeps, queue_order(sweeps)):
                try:
                    sweeps[i].record(task, result)
                except KeyboardInterrupt:
                    raise
                except StorageError as exc:
                    raise sweeps[i].stopped(exc) from None
                left[i] -= 1
                bar.update(task.runs)
                finish_ready()
        except KeyboardInterrupt:
            s = next((sweeps[k] for k in range(len(sweeps)) if summaries[k] is None), sweeps[-1])
            raise s.interrupted() from None
        finally:
            bar.close()
        return summaries


def _interrupted(name: str, shard: dict, sharddir: str) -> "RunInterrupted":
    n = stored_count(shard)
    return RunInterrupted(f"interrupted; {n} finished task(s) of {name} are stored in {sharddir}; "
                          "run the same command again to resume", n, sharddir)


def _collect(experiment, config, config_json, tasks, shard, expdir, sharddir, chash, start, workers, scheduler,
             failures, computed, resumed, recomputed, run_prov, timing=None) -> RunSummary:
    """Read and verify every stored shard, then write results, checks, figures, config and meta (all from the
    verified shards).

    ``timing``: ``{"task_seconds", "task_cpu_seconds"}`` of the computed tasks (given by :func:`run_experiments`,
    whose experiments share their time), written to the meta, whose ``wall_seconds`` is then the tasks' seconds
    plus this collection's; without it, the time since ``start``."""
    collect_start = time.time()
    name = experiment.name
    atomic_text(json.dumps(failures, indent=2), os.path.join(expdir, "failures.json"))
    tables, provenance, configs, stored = [], [], [], []
    for t in tasks:
        path = shard[t.key]
        if not os.path.lexists(path):
            continue
        try:
            table, prov = read_shard(path, expected_provenance(run_prov, t))
        except ShardError as exc:
            raise StorageError(f"the stored shard {path} changed during the run ({exc.reason}); run the same command "
                               "again to recompute it") from None
        tables.append(table)
        stored.append(t)
        if isinstance(prov.get("config"), dict) and prov["config"] not in configs:
            configs.append(prov["config"])
        provenance.append({k: prov.get(k) for k in ("task", "config_hash", "version", "seeds", "written", "source",
                                                    "inputs")})
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    results_path = os.path.join(expdir, RESULTS_FILE)
    sealed = {"experiment": name, "config_hash": chash}
    # the data first (kept if a check or a figure fails), then sealed again with the digests of its checks and meta
    try:
        atomic_parquet(table, results_path, {**sealed, CHECKS_DIGEST_KEY: None, META_DIGEST_KEY: None})
    except TableError:   # each task's table stores, together they do not: the tasks that disagree fail
        keep = _joinable(tables)
        failures.extend(_failure(t, TableError(f"{name}.run_task: its table's columns cannot join those of the "
                                               f"other tasks ({_column_types(tables[k])})"))
                        for k, t in enumerate(stored) if k not in keep)
        provenance = [p for k, p in enumerate(provenance) if k in keep]
        table = pd.concat([tables[k] for k in sorted(keep)], ignore_index=True)
        atomic_parquet(table, results_path, {**sealed, CHECKS_DIGEST_KEY: None, META_DIGEST_KEY: None})
        atomic_text(json.dumps(failures, indent=2), os.path.join(expdir, "failures.json"))
    # the config that produced the stored numbers is what the shards say (one config per shard folder)
    shown = configs[0] if len(configs) == 1 else config_json
    atomic_text(config_to_yaml(experiment.Config(**shown)), os.path.join(expdir, "config.yaml"))

    checks = []
    figures = []
    if not table.empty:
        checks = [c.to_dict() for c in experiment.checks(config, table)]
        try:
            figures = [os.path.basename(os.fspath(p)) for p in experiment.plot(config, table, expdir)]
        except OSError as exc:  # a figure's path taken by a folder, a fifo, a device; disk full
            where = os.fspath(exc.filename) if isinstance(exc.filename, (str, os.PathLike)) else expdir
            raise StorageError(f"cannot write the figures of {name}: {where}: {oserror_text(exc, where)}") from None
    if failures:
        checks.append(integrity_check("every task completed", float(len(failures)), "==", 0,
                                      "failed tasks: " + ", ".join(f["key"] for f in failures),
                                      reason="a failed task leaves runs unmeasured").to_dict())
    preset = preset_of(experiment, config)
    checks = mark_findings(name, checks, preset)
    checks_text = json.dumps(checks, indent=2)
    atomic_text(checks_text, os.path.join(expdir, CHECKS_FILE))
    timing = dict(timing or {})
    wall = timing["task_seconds"] + time.time() - collect_start if timing else time.time() - start
    meta = {
        "name": name, "title": experiment.title, "paper": experiment.paper, "config_hash": chash,
        "tasks": len(tasks), "computed": computed, "resumed": resumed, "failed": len(failures),
        "runs": sum(t.runs for t in tasks), "wall_seconds": wall, "figures": figures,
        "explain": experiment.explain(config, table) if not table.empty else "",
        "environment": environment(), "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "workers": workers or 1, "scheduler": scheduler, "preset": preset,
        "deviations": experiment.deviations(config),
        "config": shown, "provenance": provenance, "code_version": run_prov["version"], "source": run_prov["source"],
        "recomputed_unreadable": recomputed, **timing,
    }
    meta_text = json.dumps(meta, indent=2, default=str)
    atomic_text(meta_text, os.path.join(expdir, "meta.json"))
    atomic_parquet(table, results_path, {**sealed, CHECKS_DIGEST_KEY: sha256_text(checks_text),
                                          META_DIGEST_KEY: sha256_text(meta_text)})
    return RunSummary(name, expdir, len(tasks), computed, resumed, failures, checks, wall, preset, recomputed)


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


# ------------------------------------------------------------------- Dask


