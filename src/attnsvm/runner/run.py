"""The two entry points: :func:`run_experiment` (one experiment, in this process or on Dask) and
:func:`run_experiments` (several, their tasks on one pool of local processes), with the validation of their
options. Each plans its experiments (:func:`~attnsvm.runner.sweep.make_plan`), creates and locks their folders
(:mod:`attnsvm.runner.folders`), hands the tasks to an executor (:mod:`attnsvm.runner.executors`) and stores each
outcome as it comes (:class:`~attnsvm.runner.sweep.Sweep`).
"""

from __future__ import annotations

import math
import os

from attnsvm.errors import ValidationError
from attnsvm.runner.executors import (
    WORKER_TIMEOUT, DaskCluster, Executor, LocalPool, Serial, check_scheduler, queue_order, refuse_in_worker_start,
)
from attnsvm.runner.folders import LOCK_TIMEOUT, check_folders, check_outdir, folder_lock, folder_locks, make_run_folders
from attnsvm.runner.storage import StorageError
from attnsvm.runner.sweep import RunSummary, Sweep, make_plan

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
    plan = make_plan(experiment, config, outdir, max_memory)
    if scheduler:
        check_scheduler(scheduler, connect_timeout)  # before anything is written: a clear error, never a hang
    make_run_folders(plan.outdir, plan.sharddir)
    with folder_lock(plan.expdir, lock_timeout):
        check_folders(plan.outdir, plan.sharddir)  # again, once the folder is ours
        sweep = Sweep(experiment, config, plan, workers, scheduler, task_hook)
        bar = _progress(sweep.total_runs, sweep.done_runs, experiment.name, progress)
        executor: Executor
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
    return _run_pooled(jobs, outdir, workers, progress, max_memory, lock_timeout, done)


def _run_pooled(jobs: list, outdir: str, workers: int | None, progress: bool, max_memory, lock_timeout: float,
                done) -> list[RunSummary]:
    """:func:`run_experiments` on one pool of local processes (``workers`` None) or in this process (1): every
    folder locked, the tasks of all the experiments queued together (:func:`queue_order`), each experiment written
    (and ``done`` called) as soon as its last task is in."""
    plans = [make_plan(experiment, config, outdir, max_memory) for experiment, config in jobs]
    for plan in plans:
        make_run_folders(plan.outdir, plan.sharddir)
    with folder_locks([plan.expdir for plan in plans], lock_timeout):
        for plan in plans:
            check_folders(plan.outdir, plan.sharddir)  # again, once the folders are ours
        sweeps = [Sweep(experiment, config, plan, None, None) for (experiment, config), plan in zip(jobs, plans)]
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
            executor: Executor = Serial(max_memory) if n <= 1 else LocalPool(n, max_memory)
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


def _progress(total: int, initial: int, desc: str, enabled: bool):
    if enabled:  # a notebook bar in Jupyter, a text bar elsewhere
        from tqdm.auto import tqdm
    else:  # tqdm.auto warns in a notebook without ipywidgets even for a disabled bar
        from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="run", disable=not enabled, dynamic_ncols=True, leave=True)
