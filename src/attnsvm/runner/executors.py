"""Where a sweep's tasks run: in this process (:class:`Serial`), on a pool of local worker processes
(:class:`LocalPool`) or on Dask (:class:`DaskCluster`), each behind one interface (:class:`Executor`).

An executor is handed the sweeps and a queue of their tasks to compute, ``(index of the sweep, task)``, and
yields ``(index of the sweep, task, result)`` as each task finishes; ``result()`` returns the task's table (None:
its shard was already stored) or raises the task's error. The caller stores each outcome at once
(:meth:`attnsvm.runner.sweep.Sweep.record`), so a sweep stopped at any point resumes from its stored shards.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterator, Protocol

from attnsvm.errors import AttnSVMError
from attnsvm.experiments.base import Task
from attnsvm.runner.storage import stored_count
from attnsvm.runner.tasks import execute_timed

#: seconds ``--scheduler`` waits for a first worker before a clear error (``--worker-timeout``)
WORKER_TIMEOUT = 60.0
#: where a local Dask cluster's scheduler serves HTTP (its health routes, and the dashboard if bokeh is installed):
#: this machine only, on a free port. ``dashboard_address=None`` still serves them, at port 8787, and warns "Port 8787
#: is already in use" when another cluster holds it.
LOCAL_HTTP = "127.0.0.1:0"


class SchedulerError(AttnSVMError, ConnectionError):
    """The Dask scheduler cannot be reached, or what answers is not a Dask scheduler."""


class Executor(Protocol):
    """Runs the tasks of ``queue`` (``(index into sweeps, task)``, in the order to start them) and yields
    ``(index of the sweep, task, result)`` as each finishes; ``result()`` returns the table or raises."""

    def outcomes(self, sweeps: list, queue: list[tuple[int, Task]]) -> Iterator[tuple[int, Task, Callable]]:
        ...


@dataclass(frozen=True)
class Serial:
    """Each task in this process, in the order of the queue, timed (:func:`_timed`)."""

    max_memory: int | None = None

    def outcomes(self, sweeps: list, queue: list[tuple[int, Task]]) -> Iterator[tuple[int, Task, Callable]]:
        for i, task in queue:
            yield i, task, partial(_run_timed, sweeps[i], task, self.max_memory)


def _run_timed(sweep, task, max_memory):
    """Run ``task`` of ``sweep`` in this process; its table, its seconds recorded in ``sweep``."""
    return _timed(sweep, task, execute_timed(sweep.experiment, sweep.plan.config_json, task, max_memory))


def _timed(sweep, task, outcome):
    """The table of ``outcome`` (a :func:`execute_timed` result, or a future of one); its seconds added to
    ``sweep``'s sums and, for a computed table, recorded as the cost of ``task`` (``sweep.task_costs``, stored in its
    shard)."""
    table, wall, cpu = outcome.result() if hasattr(outcome, "result") else outcome
    sweep.task_seconds += wall
    sweep.task_cpu_seconds += cpu
    if table is not None:
        sweep.task_costs[task.key] = {"wall_seconds": round(float(wall), 3), "cpu_seconds": round(float(cpu), 3)}
    return table


# ------------------------------------------------------------------ a pool of local processes
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


@dataclass(frozen=True)
class LocalPool:
    """``workers`` local worker processes (started fresh with 'spawn', so no thread state of this process is
    inherited), each handed :data:`LANE_DEPTH` tasks at a time, the next one by :func:`next_for_worker`, so that
    the tasks sharing a worker-process state (a loaded model) stay on the worker that built it while the others
    have other work. Every task is timed (:func:`~attnsvm.runner.tasks.execute_timed`)."""

    workers: int
    max_memory: int | None = None

    def outcomes(self, sweeps: list, queue: list[tuple[int, Task]]) -> Iterator[tuple[int, Task, Callable]]:
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        workers, max_memory = self.workers, self.max_memory
        context = multiprocessing.get_context("spawn")
        before = set(multiprocessing.active_children())
        old_env = os.environ.get(_POOL_WORKER_ENV)
        os.environ[_POOL_WORKER_ENV] = str(os.getpid())  # seen by the workers, started (at their first task) from here
        lanes = [ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_pool_worker_start,
                                     initargs=(os.getpid(),)) for _ in range(workers)]
        queue = list(queue)
        states = [shared_state_of(sweeps[i], task) for i, task in queue]
        holders: dict = {}
        futures = {}  # future -> (worker, index of the sweep, task)
        handed = [0] * workers

        def hand(worker: int) -> None:
            k = next_for_worker(states, holders, worker)
            (i, task), state = queue.pop(k), states.pop(k)
            if state is not None:
                holders.setdefault(state, set()).add(worker)
            future = lanes[worker].submit(execute_timed, sweeps[i].experiment, sweeps[i].plan.config_json, task,
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
                    yield i, task, partial(_timed, sweeps[i], task, future)
        finally:
            for lane in lanes:  # cancel what has not started everywhere first, then wait for the running tasks
                lane.shutdown(wait=False, cancel_futures=True)
            for lane in lanes:
                lane.shutdown(wait=True)
            _restore_env(old_env)


#: set in this process's environment while its pool's workers start: a worker that finds itself re-running a script
#: without a ``__main__`` guard then exits with :data:`_UNGUARDED_EXIT`, which this process reports
#: (see :func:`refuse_in_worker_start`)
_POOL_WORKER_ENV = "ATTNSVM_POOL_WORKER"
_UNGUARDED_EXIT = 87
#: seconds between a pool worker's checks that the process that started it is still alive
PARENT_POLL = 0.5


def refuse_in_worker_start(what: str) -> None:
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
                        f"finished task(s) are stored under {os.path.dirname(sweeps[i].plan.expdir)}: run the same "
                        "command again to resume (--workers 1 runs every task in this process)")


def _restore_env(old) -> None:
    """Put :data:`_POOL_WORKER_ENV` back as it was (``old``: its value, None when unset)."""
    if old is None:
        os.environ.pop(_POOL_WORKER_ENV, None)
    else:
        os.environ[_POOL_WORKER_ENV] = old


# ------------------------------------------------------------------ Dask
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


@dataclass(frozen=True)
class DaskCluster:
    """The tasks on the Dask scheduler at ``scheduler``, else on a local Dask cluster of ``workers`` single-threaded
    worker processes. A scheduler without a worker after ``worker_timeout`` seconds, or one lost during the run,
    raises one :class:`SchedulerError` (distributed's own reconnect tracebacks are kept off the terminal
    meanwhile). A task resubmitted after its shard was stored is not computed again (its result is None)."""

    workers: int | None = None
    scheduler: str | None = None
    connect_timeout: float = 20.0
    worker_timeout: float = WORKER_TIMEOUT
    max_memory: int | None = None

    def outcomes(self, sweeps: list, queue: list[tuple[int, Task]]) -> Iterator[tuple[int, Task, Callable]]:
        if not queue:
            return
        from dask.distributed import as_completed

        scheduler, shards = self.scheduler, [p for s in sweeps for p in s.shard.values()]
        with _quiet_distributed():
            client, cluster = self._connect()
            where = scheduler or "the local Dask cluster"

            def lost(why: str) -> SchedulerError:
                n = sum(stored_count(s.shard) for s in sweeps)
                folder = os.path.dirname(shards[0]) if shards else "the results folder"
                return SchedulerError(f"lost the Dask scheduler at {where!r} during the run ({why}); {n} finished "
                                      f"task(s) are kept in {folder}: start the scheduler and its workers again, then "
                                      "run the same command to resume")

            def result_of(i, task, future):
                def result():
                    try:
                        return _timed(sweeps[i], task, future.result())
                    except Exception as exc:  # noqa: BLE001 - a task's own error, unless the scheduler is gone
                        if client.status != "running":
                            raise lost(type(exc).__name__) from None
                        raise
                return result

            try:
                if scheduler:
                    self._wait_for_a_worker(client)
                futures = {client.submit(execute_timed, sweeps[i].experiment, sweeps[i].plan.config_json, task,
                                         self.max_memory, sweeps[i].shard.get(task.key), pure=False,
                                         key=f"{sweeps[i].experiment.name}-{task.key}-{time.time_ns()}"): (i, task)
                           for i, task in queue}
                for future in as_completed(futures):
                    i, task = futures.pop(future)
                    if future.status == "cancelled" or client.status != "running":
                        raise lost(f"task {task.key} {future.status}, client {client.status}")
                    yield i, task, result_of(i, task, future)
                    # the result is stored: release it so that a worker lost later does not make Dask recompute it
                    future.release()
            finally:
                try:
                    client.close(timeout=10)
                except Exception:  # noqa: BLE001 - closing a client whose scheduler is gone
                    pass
                if cluster is not None:
                    cluster.close()

    def _connect(self):
        """``(client, cluster)``: a client of the scheduler (cluster None), or of a local cluster started here."""
        from dask.distributed import Client, LocalCluster

        if self.scheduler:
            try:
                return Client(self.scheduler, timeout=self.connect_timeout), None
            except Exception as exc:  # noqa: BLE001
                raise SchedulerError(f"cannot connect to the Dask scheduler at {self.scheduler!r}: "
                                     f"{type(exc).__name__}: {exc}"[:400]) from None
        cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                               dashboard_address=LOCAL_HTTP)
        return Client(cluster), cluster

    def _wait_for_a_worker(self, client) -> None:
        try:
            client.wait_for_workers(1, timeout=self.worker_timeout)
        except (TimeoutError, OSError):
            raise SchedulerError(f"the Dask scheduler at {self.scheduler!r} has no worker after --worker-timeout "
                                 f"{self.worker_timeout:g} s: start workers (dask worker {self.scheduler}) or wait "
                                 "longer with a larger --worker-timeout") from None


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
