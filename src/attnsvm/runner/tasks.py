"""One task run where it is sent (this process, a pool worker, a Dask worker): :func:`execute_task`.

While a task runs, the process uses one BLAS and one torch thread, the run's ``--max-memory`` reaches the task
(passed to ``run_task`` as ``max_memory`` when the experiment takes it,
:attr:`attnsvm.experiments.base.Experiment.takes_max_memory`; else made the package's limit,
``$ATTNSVM_MAX_MEMORY``, while the task runs), and a task that ends with ``SystemExit`` or its own
``KeyboardInterrupt`` is that task's failure (:class:`TaskAborted`), while Ctrl-C still interrupts the sweep.
Each setting of the host is restored afterwards.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from functools import partial

import pandas as pd

from attnsvm.errors import AttnSVMError
from attnsvm.experiments.base import Task
from attnsvm.runner.storage import shard_is_stored


class TaskAborted(AttnSVMError, RuntimeError):
    """A task raised ``SystemExit``, a ``KeyboardInterrupt`` of its own (no SIGINT arrived) or another exception that
    is not an ``Exception``: recorded as that task's failure instead of ending the sweep."""



@contextmanager
def one_thread():
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
    """Make ``limit`` (bytes, or None: unchanged) the package's memory limit while a task of an experiment that
    does not take ``max_memory`` runs, so the solvers' own checks inside the task use the same ``--max-memory``."""
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

    ``max_memory`` (bytes, or None: the package limit): passed to ``run_task`` when the experiment takes it
    (:attr:`attnsvm.experiments.base.Experiment.takes_max_memory`), else the package's limit while the task runs.

    Returns ``None`` without computing when ``shard_path`` already holds a readable shard
    (a task resubmitted by Dask after a worker died, whose result is already stored).
    A task that raises ``SystemExit``, its own ``KeyboardInterrupt`` (not a SIGINT: Ctrl-C still interrupts) or
    another non-``Exception`` raises :class:`TaskAborted` instead, so that it is recorded as that task's failure.
    """
    if shard_path is not None and shard_is_stored(shard_path):
        return None
    name = experiment.name
    config = experiment.Config(**config_json)
    explicit = getattr(experiment, "takes_max_memory", False)  # the limit passed on, no environment variable set
    run = partial(experiment.run_task, max_memory=max_memory) if explicit else experiment.run_task
    with _memory_limit(None if explicit else max_memory), one_thread(), _sigint_watch() as seen:
        try:
            table = run(config, task)
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



def execute_timed(experiment, config_json: dict, task: Task, max_memory: int | None = None,
                  shard_path: str | None = None):
    """:func:`execute_task`, returning ``(table, wall seconds, CPU seconds of this process)`` (a task's error is
    raised as it is; ``table`` is None, as there, when ``shard_path`` already holds a readable shard). The runner
    stores the two seconds in the task's shard, the one record of its cost (:mod:`attnsvm.runner.costs`)."""
    wall, cpu = time.perf_counter(), time.process_time()
    table = execute_task(experiment, config_json, task, shard_path, max_memory)
    return table, time.perf_counter() - wall, time.process_time() - cpu
