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
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial

import pandas as pd

from attnsvm._files import oserror_text
from attnsvm.errors import AttnSVMError, ValidationError
from attnsvm.experiments.base import Task
from attnsvm.experiments.checks import integrity_check, mark_findings
from attnsvm.experiments.config import config_to_yaml
from attnsvm.runner.folders import (  # noqa: F401 - LOCK_FILE is re-exported
    LOCK_FILE, LOCK_TIMEOUT, LockError, check_folders, check_outdir, clean_temp_files, folder_lock, folder_locks,
    make_run_folders,
)
from attnsvm.runner.provenance import (
    code_version, config_hash, environment, expected_provenance, git_version, run_provenance, seeds_of, source_digest,
)
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


class TaskAborted(AttnSVMError, RuntimeError):
    """A task raised ``SystemExit``, a ``KeyboardInterrupt`` of its own (no SIGINT arrived) or another exception that
    is not an ``Exception``: recorded as that task's failure instead of ending the sweep."""


class SchedulerError(AttnSVMError, ConnectionError):
    """The Dask scheduler cannot be reached, or what answers is not a Dask scheduler."""


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


@contextmanager
def _one_thread():
    """One BLAS and one torch thread while a task runs, the caller's settings restored afterwards.

    The solvers' matrices are small and a sweep gets its parallelism from worker processes;
    BLAS threads on top of them oversubscribe the cores and slow small solves down.
    The runner never changes its host's settings beyond the task it runs.
    """
    from threadpoolctl import threadpool_limits

    import torch

    before = torch.get_num_threads()
    with threadpool_limits(limits=1):
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)


@contextmanager
def _memory_limit(limit):
    """Make ``limit`` (bytes, or None: unchanged) the package's memory limit while a task runs,
    so the solvers' own checks inside the task use the same ``--max-memory``."""
    from attnsvm.memory import ENV_VAR

    if limit is None:
        yield
        return
    old = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(int(limit))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = old


@contextmanager
def _sigint_watch():
    """Yields ``{"sigint": False}``, set True when SIGINT arrives while the block runs (then KeyboardInterrupt is
    raised as usual), so that a task's own ``raise KeyboardInterrupt`` can be told from Ctrl-C; yields None (cannot
    tell) outside the main thread or when SIGINT has a handler other than Python's default."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield None
        return
    seen = {"sigint": False}

    def handler(signum, frame):
        seen["sigint"] = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def execute_task(experiment, config_json: dict, task: Task, shard_path: str | None = None,
                 max_memory: int | None = None) -> pd.DataFrame | None:
    """Run one task (module-level, so Dask can ship it to any worker with the experiment object).

    Returns ``None`` without computing when ``shard_path`` already holds a readable shard
    (a task resubmitted by Dask after a worker died, whose result is already stored).
    A task that raises ``SystemExit``, its own ``KeyboardInterrupt`` (not a SIGINT: Ctrl-C still interrupts) or
    another non-``Exception`` raises :class:`TaskAborted` instead, so that it is recorded as that task's failure.
    """
    if shard_path is not None and shard_is_stored(shard_path):
        return None
    name = experiment.name
    config = experiment.Config(**config_json)
    with _memory_limit(max_memory), _one_thread(), _sigint_watch() as seen:
        try:
            table = experiment.run_task(config, task)
        except Exception:
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) and (seen is None or seen["sigint"]):
                raise  # Ctrl-C (or cannot tell): interrupt the sweep
            raise TaskAborted(f"{name}.run_task raised {type(exc).__name__}{exc.args!r:.200} instead of returning a "
                              "table (a task must return a DataFrame or raise an Exception)") from None
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"{name}.run_task must return a DataFrame, got {type(table).__name__}")
    table = table.copy()
    table["task"] = task.key
    return table


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
#: seconds ``--scheduler`` waits for a first worker before a clear error (``--worker-timeout``)
WORKER_TIMEOUT = 60.0


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
    _refuse_in_worker_start("run_experiment")
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
        outcomes = _outcomes(experiment, plan["config_json"], sweep.todo, workers, scheduler, connect_timeout,
                             sweep.shard, max_memory, worker_timeout)
        try:
            for task, result in outcomes:
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
            with _one_thread():
                return _collect(self.experiment, self.config, p["config_json"], p["tasks"], self.shard, p["expdir"],
                                p["sharddir"], p["chash"], p["start"], self.workers, self.scheduler, self.failures,
                                self.computed, self.resumed, self.recomputed, self.run_prov, self._timing())
        except KeyboardInterrupt:
            raise self.interrupted() from None
        except StorageError as exc:
            raise StorageError(f"{exc}; {stored_count(self.shard)} finished task(s) stay stored in {p['sharddir']}: fix "
                               "the folder, then run the same command again to write the results") from None


def execute_timed(experiment, config_json: dict, task: Task, max_memory: int | None = None):
    """:func:`execute_task`, returning ``(table, wall seconds, CPU seconds of this process)`` (a task's error is
    raised as it is)."""
    wall, cpu = time.perf_counter(), time.process_time()
    table = execute_task(experiment, config_json, task, None, max_memory)
    return table, time.perf_counter() - wall, time.process_time() - cpu


def _timed(sweep, outcome):
    """The table of ``outcome`` (a :func:`execute_timed` result, or a future of one), its seconds added to ``sweep``."""
    table, wall, cpu = outcome.result() if hasattr(outcome, "result") else outcome
    sweep.task_seconds += wall
    sweep.task_cpu_seconds += cpu
    return table


def _run_timed(sweep, task, max_memory):
    """Run ``task`` of ``sweep`` in this process; its table, its seconds added to ``sweep``."""
    return _timed(sweep, execute_timed(sweep.experiment, sweep.plan["config_json"], task, max_memory))


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
    _refuse_in_worker_start("run_experiments")
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
            for i, task, result in _pooled_outcomes(sweeps, n, max_memory):
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


def queue_order(sweeps) -> list[tuple[int, Task]]:
    """The tasks to compute of ``sweeps`` as ``(index of the sweep, task)``, in the order the pool runs them:
    the experiments by the estimated CPU seconds of their tasks to compute, longest first, and within each
    its tasks longest first (:meth:`~attnsvm.experiments.Experiment.estimate_seconds`; ties keep the order of
    ``sweeps`` and of their tasks). Long work starts early, so no long task runs last on a half-idle pool,
    and each experiment's tasks stay together, so its checks and figures are written while the others run."""
    def cost(s, task) -> float:
        return float(s.experiment.estimate_seconds(s.config, task))

    costs = [[cost(s, t) for t in s.todo] for s in sweeps]
    order = sorted(range(len(sweeps)), key=lambda i: -sum(costs[i]))  # stable: ties in the order of ``sweeps``
    return [(i, sweeps[i].todo[j]) for i in order
            for j in sorted(range(len(sweeps[i].todo)), key=lambda j: -costs[i][j])]


#: tasks handed to each worker process at a time: the one it runs and the next, so that it never waits while
#: this process writes a finished experiment (its checks and figures)
LANE_DEPTH = 2


def shared_state_of(sweep, task: Task):
    """The name of the worker-process state ``task`` of ``sweep`` builds and reuses
    (:meth:`~attnsvm.experiments.Experiment.shared_state`; None for an experiment without the method)."""
    hook = getattr(sweep.experiment, "shared_state", None)
    return None if hook is None else hook(sweep.config, task)


def next_for_worker(states: list, holders: dict, worker: int) -> int:
    """Index in the queue of the next task for ``worker``: the first whose shared state (``states``, in queue
    order; None: none) is None, held by no worker yet, or held by ``worker`` (``holders``: state -> set of
    workers that built it); when every task left needs a state only other workers hold, the first (that
    worker then builds it too, rather than wait idle). ``states`` must not be empty."""
    for k, state in enumerate(states):
        if state is None or worker in holders.get(state, (worker,)):
            return k
    return 0


#: set in this process's environment while its pool's workers start: a worker that finds itself re-running a script
#: without a ``__main__`` guard then exits with :data:`_UNGUARDED_EXIT`, which this process reports
#: (see :func:`_refuse_in_worker_start`)
_POOL_WORKER_ENV = "ATTNSVM_POOL_WORKER"
_UNGUARDED_EXIT = 87
#: seconds between a pool worker's checks that the process that started it is still alive
PARENT_POLL = 0.5


def _refuse_in_worker_start(what: str) -> None:
    """Raise :class:`~attnsvm.errors.AttnSVMError` when this is a process started with 'spawn' that is still
    importing the parent's main script: the script calls ``what`` without an ``if __name__ == "__main__":`` guard,
    and running it here would wait forever for the parent's folder lock. A worker of attnsvm's own pool leaves
    instead exits with :data:`_UNGUARDED_EXIT`, and the parent says why (:func:`_broken_pool_error`)."""
    import multiprocessing

    if not getattr(multiprocessing.current_process(), "_inheriting", False):
        return
    if os.environ.get(_POOL_WORKER_ENV) == str(os.getppid()):  # a worker of attnsvm's pool: the parent says why
        os._exit(_UNGUARDED_EXIT)
    raise AttnSVMError(_unguarded_message(what))


def _unguarded_message(what: str) -> str:
    return (f"{what} was called again while a worker process started: worker processes are started with 'spawn', "
            'which runs the calling script again in each of them; put the call under if __name__ == "__main__":')


def _pool_worker_start(parent: int, interval: float = PARENT_POLL) -> None:
    """A pool worker's initializer: a daemon thread ends the worker as soon as the process that started it is gone
    (killed with SIGKILL or SIGTERM, it cannot stop its workers), so that no idle worker stays behind."""
    import threading

    def watch():
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="attnsvm-parent-watch", daemon=True).start()


def _broken_pool_error(sweeps, i: int, processes) -> AttnSVMError:
    """The error for a worker that died: a script without a ``__main__`` guard when one of the pool's worker
    ``processes`` exited with :data:`_UNGUARDED_EXIT`, else the stored tasks and how to resume."""
    deadline = time.monotonic() + 5.0
    for p in processes:
        if p.exitcode is None:  # the pool saw it end before it was reaped (a loaded machine): wait, bounded
            with suppress(Exception):
                p.join(max(deadline - time.monotonic(), 0.0))
        if p.exitcode == _UNGUARDED_EXIT:
            return AttnSVMError(_unguarded_message("run_experiments"))
    n = sum(stored_count(s.shard) for s in sweeps)
    return AttnSVMError(f"a worker process died during the run (killed, or out of memory: see --max-memory); {n} "
                        f"finished task(s) are stored under {os.path.dirname(sweeps[i].plan['expdir'])}: run the same "
                        "command again to resume (--workers 1 runs every task in this process)")


def _restore_env(old) -> None:
    """Put :data:`_POOL_WORKER_ENV` back as it was (``old``: its value, None when unset)."""
    if old is None:
        os.environ.pop(_POOL_WORKER_ENV, None)
    else:
        os.environ[_POOL_WORKER_ENV] = old


def _pooled_outcomes(sweeps, workers: int, max_memory):
    """Yield ``(index of the sweep, task, result)`` as the tasks of all ``sweeps`` finish, computed in this
    process (``workers == 1``) or on ``workers`` local worker processes (started fresh, so no thread state of
    this process is inherited), taken in :func:`queue_order`: each worker is handed :data:`LANE_DEPTH` tasks
    at a time, the next one by :func:`next_for_worker`, so that the tasks sharing a worker-process state
    (a loaded model) stay on the worker that built it while the others have other work."""
    todo = queue_order(sweeps)
    if workers <= 1:
        for i, task in todo:
            s = sweeps[i]
            yield i, task, partial(_run_timed, s, task, max_memory)
        return
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")
    before = set(multiprocessing.active_children())
    old_env = os.environ.get(_POOL_WORKER_ENV)
    os.environ[_POOL_WORKER_ENV] = str(os.getpid())  # seen by the workers, started (at their first task) from here
    lanes = [ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_pool_worker_start,
                                 initargs=(os.getpid(),)) for _ in range(workers)]
    queue = list(todo)
    states = [shared_state_of(sweeps[i], task) for i, task in queue]
    holders: dict = {}
    futures = {}  # future -> (worker, index of the sweep, task)
    handed = [0] * workers

    def hand(worker: int) -> None:
        k = next_for_worker(states, holders, worker)
        (i, task), state = queue.pop(k), states.pop(k)
        if state is not None:
            holders.setdefault(state, set()).add(worker)
        future = lanes[worker].submit(execute_timed, sweeps[i].experiment, sweeps[i].plan["config_json"], task,
                                      max_memory)
        futures[future] = (worker, i, task)
        handed[worker] += 1

    processes = []
    try:
        for _ in range(LANE_DEPTH):  # one task each in turn: the longest ones start first on different workers
            for worker in range(workers):
                if queue:
                    hand(worker)
        # the workers start at their first task, just handed: they are this process's children now
        processes = [p for p in multiprocessing.active_children() if p not in before]
        _restore_env(old_env)
        while futures:
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=lambda f: futures[f][1]):
                worker, i, task = futures.pop(future)
                handed[worker] -= 1
                exc = future.exception()
                if isinstance(exc, BrokenProcessPool):
                    raise _broken_pool_error(sweeps, i, processes) from None
                while queue and handed[worker] < LANE_DEPTH:
                    hand(worker)
                yield i, task, partial(_timed, sweeps[i], future)
    finally:
        for lane in lanes:  # cancel what has not started everywhere first, then wait for the running tasks
            lane.shutdown(wait=False, cancel_futures=True)
        for lane in lanes:
            lane.shutdown(wait=True)
        _restore_env(old_env)


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
def _run_blocking(make_coroutine):
    """Run the coroutine ``make_coroutine()`` to completion and return its result, also when this thread
    already runs an event loop (a Jupyter kernel does, and ``asyncio.run`` refuses to nest): then on a
    fresh loop in a helper thread."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coroutine())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make_coroutine())).result()


def check_scheduler(address: str, timeout: float) -> None:
    """Raise :class:`SchedulerError` unless a Dask scheduler answers at ``address`` within ``timeout`` seconds.

    Sends Dask's ``identity`` request over a fresh connection and waits for a reply of
    type ``Scheduler``; a closed port, a silent server or another protocol ends in a
    clear error after at most about ``timeout`` seconds instead of a hang or a traceback.
    """
    import asyncio

    from distributed.comm import connect

    async def probe():
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    what = f"no Dask scheduler answered at {address!r}"
    try:
        reply = _run_blocking(lambda: asyncio.wait_for(probe(), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        raise SchedulerError(f"{what} within --connect-timeout {timeout:g} s (is the address right and the scheduler "
                             "running?)") from None
    except Exception as exc:  # noqa: BLE001 - refused, unreachable, bad address, garbage reply
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise SchedulerError(f"{what}: {type(exc).__name__}: {text}"[:400]) from None
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise SchedulerError(f"{address!r} answered, but not as a Dask scheduler (reply {str(reply)[:80]!r})")


def _outcomes(experiment, config_json, todo, workers, scheduler, connect_timeout=20.0, shard=None, max_memory=None,
              worker_timeout=WORKER_TIMEOUT):
    """Yield ``(task, result)`` as tasks finish; ``result()`` returns the task's table (None: already
    stored) or raises.

    In this process when neither ``workers > 1`` nor ``scheduler`` is given, else on Dask: a scheduler
    without a worker after ``worker_timeout`` seconds, or one lost during the run, raises one
    :class:`SchedulerError` (distributed's own reconnect tracebacks are kept off the terminal meanwhile).
    """
    shard = shard or {}
    if not (scheduler or (workers is not None and workers > 1)):
        for task in todo:
            yield task, partial(execute_task, experiment, config_json, task, None, max_memory)
        return
    if not todo:
        return
    from dask.distributed import Client, LocalCluster, as_completed

    with _quiet_distributed():
        cluster = None
        if scheduler:
            try:
                client = Client(scheduler, timeout=connect_timeout)
            except Exception as exc:  # noqa: BLE001
                raise SchedulerError(f"cannot connect to the Dask scheduler at {scheduler!r}: {type(exc).__name__}: "
                                     f"{exc}"[:400]) from None
        else:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster)
        where = scheduler or "the local Dask cluster"

        def lost(why: str) -> SchedulerError:
            n = sum(os.path.exists(p) for p in shard.values())
            folder = os.path.dirname(next(iter(shard.values()))) if shard else "the results folder"
            return SchedulerError(f"lost the Dask scheduler at {where!r} during the run ({why}); {n} finished task(s) "
                                  f"are kept in {folder}: start the scheduler and its workers again, then run the same "
                                  "command to resume")

        def result_of(future):
            def result():
                try:
                    return future.result()
                except Exception as exc:  # noqa: BLE001 - a task's own error, unless the scheduler is gone
                    if client.status != "running":
                        raise lost(type(exc).__name__) from None
                    raise
            return result

        try:
            if scheduler:
                try:
                    client.wait_for_workers(1, timeout=worker_timeout)
                except (TimeoutError, OSError):
                    raise SchedulerError(f"the Dask scheduler at {scheduler!r} has no worker after --worker-timeout "
                                         f"{worker_timeout:g} s: start workers (dask worker {scheduler}) or wait longer "
                                         "with a larger --worker-timeout") from None
            futures = {client.submit(execute_task, experiment, config_json, task, shard.get(task.key), max_memory,
                                     pure=False, key=f"{experiment.name}-{task.key}-{time.time_ns()}"): task
                       for task in todo}
            for future in as_completed(futures):
                task = futures.pop(future)
                if future.status == "cancelled" or client.status != "running":
                    raise lost(f"task {task.key} {future.status}, client {client.status}")
                yield task, result_of(future)
                # the result is stored: release it so that a worker lost later does not make Dask recompute it
                future.release()
        finally:
            try:
                client.close(timeout=10)
            except Exception:  # noqa: BLE001 - closing a client whose scheduler is gone
                pass
            if cluster is not None:
                cluster.close()


@contextmanager
def _quiet_distributed():
    """distributed's client-side loggers at CRITICAL while this run uses Dask: a lost scheduler then ends in
    the runner's one :class:`SchedulerError`, not in distributed's reconnect tracebacks."""
    import logging

    names = ("distributed.client", "distributed.core", "distributed.comm", "distributed.batched", "distributed.utils")
    loggers = [logging.getLogger(n) for n in names]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, old):
            lg.setLevel(level)


