"""Run an experiment's tasks serially, on local processes or on a Dask cluster.

Every finished task is stored at once as ``OUT/NAME/shards/<config-hash>/<task>.parquet``,
so a sweep that is interrupted or killed resumes, when re-run with the same command,
without recomputing anything stored. A failing task is recorded with its parameters
(seeds) in ``failures.json`` and the others complete.

Storage is crash-safe:

* a shard is written to a temporary file, flushed and fsynced, renamed, and its folder
  fsynced; it carries its provenance (task, config hash, the config itself, code version,
  seeds, time written) in the parquet key-value metadata, and the report's config and
  provenance are built from what the stored shards say;
* one run at a time per experiment folder (a file lock ``OUT/NAME/.lock``): a second
  ``attnsvm run`` on the same folder waits, then reuses the first one's shards;
* on resume, stale temporary files are removed and an unreadable shard (empty, truncated,
  not parquet, or of another config) is set aside as ``<task>.parquet.unreadable``,
  recomputed and reported (:attr:`RunSummary.recomputed`);
* a write error (disk full, read-only folder) stops the sweep with one clear error naming
  the path, removes the temporary file and keeps every shard already stored; Ctrl-C does
  the same (:class:`RunInterrupted`).

Before anything runs, the memory of planning and of each task is estimated
(:meth:`Experiment.estimate_memory`) and checked against the package's one memory limit
(:func:`attnsvm.memory.require_memory`, option ``--max-memory``), which also applies to
the solvers inside the tasks.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache, partial

import pandas as pd

from attnsvm._files import atomic_write, oserror_text
from attnsvm.errors import AttnSVMError, ValidationError
from attnsvm.experiments.base import Task
from attnsvm.experiments.checks import integrity_check, mark_findings
from attnsvm.experiments.config import config_to_yaml

PROVENANCE_KEY = b"attnsvm.provenance"
LOCK_FILE = ".lock"


class StorageError(AttnSVMError, OSError):
    """The results folder cannot be created or written (disk full, read-only, a path through a file)."""


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
    #: shards found unreadable on resume and recomputed: ``{"key", "error", "moved_to"}``
    recomputed: list = field(default_factory=list)

    @property
    def failed_checks(self) -> list:
        """Failed checks that count (verdict "fail": not inconclusive, not listed findings)."""
        from attnsvm.experiments.checks import counts_against

        return [c for c in self.checks if counts_against(c)]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.failed_checks


def config_hash(config) -> str:
    """Hash of the config and the attnsvm version: shards of another config or release are never reused."""
    from attnsvm import __version__

    return hashlib.sha256((config_to_yaml(config) + __version__).encode()).hexdigest()[:12]


@lru_cache(maxsize=None)
def code_version() -> str:
    """``attnsvm.__version__``, plus ``git describe --always --dirty`` when the package runs from its git checkout."""
    from attnsvm import __version__

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        top = subprocess.run(["git", "-C", pkg, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=5)
        if top.returncode != 0 or os.path.realpath(os.path.join(top.stdout.strip(), "src", "attnsvm")) != os.path.realpath(pkg):
            return __version__
        desc = subprocess.run(["git", "-C", pkg, "describe", "--always", "--dirty"], capture_output=True, text=True,
                              timeout=5)
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__} (git {desc.stdout.strip()})" if desc.returncode == 0 and desc.stdout.strip() else __version__


@contextmanager
def _one_thread():
    """One BLAS and one torch thread while a task runs, the caller's settings restored afterwards.

    The solvers' matrices are small and a sweep gets its parallelism from worker processes;
    oversubscribed BLAS threads made small solves ten times slower on a loaded 2-core machine.
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


def execute_task(experiment, config_json: dict, task: Task, shard_path: str | None = None,
                 max_memory: int | None = None) -> pd.DataFrame | None:
    """Run one task (module-level, so Dask can ship it to any worker with the experiment object).

    Returns ``None`` without computing when ``shard_path`` already holds a readable shard
    (a task resubmitted by Dask after a worker died, whose result is already stored).
    """
    if shard_path is not None and _shard_is_stored(shard_path):
        return None
    name = experiment.name
    config = experiment.Config(**config_json)
    with _memory_limit(max_memory), _one_thread():
        table = experiment.run_task(config, task)
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"{name}.run_task must return a DataFrame, got {type(table).__name__}")
    table = table.copy()
    table["task"] = task.key
    return table


# ------------------------------------------------------------------ storage
def _write_all(fh, data: bytes) -> None:
    """Write ``data`` to the open file (one place, so tests can inject a full disk)."""
    fh.write(data)


def _durable_write(path: str, data: bytes) -> None:
    """Atomically replace ``path`` with ``data`` (temp file, fsync, rename, fsync the folder);
    :class:`StorageError` naming ``path`` on failure, with no temporary file left."""
    try:
        atomic_write(path, lambda fh: _write_all(fh, data), sync_dir=True)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {oserror_text(exc, path)}") from None


def _atomic_text(text: str, path: str) -> None:
    _durable_write(path, text.encode("utf-8"))


def _parquet_bytes(table: pd.DataFrame, provenance: dict | None = None) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    at = pa.Table.from_pandas(table, preserve_index=False)
    if provenance is not None:
        meta = dict(at.schema.metadata or {})
        meta[PROVENANCE_KEY] = json.dumps(provenance, default=str).encode("utf-8")
        at = at.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(at, sink)
    return sink.getvalue().to_pybytes()


def _atomic_parquet(table: pd.DataFrame, path: str, provenance: dict | None = None) -> None:
    _durable_write(path, _parquet_bytes(table, provenance))


def read_shard(path: str) -> tuple[pd.DataFrame, dict | None]:
    """``(table, provenance)`` of a stored shard; raises (pyarrow or OS errors) if it is unreadable."""
    import pyarrow.parquet as pq

    at = pq.read_table(path)
    raw = (at.schema.metadata or {}).get(PROVENANCE_KEY)
    prov = json.loads(raw.decode("utf-8")) if raw else None
    return at.to_pandas(), prov


def _shard_is_stored(path: str) -> bool:
    """Whether ``path`` holds a parquet file with a readable footer (a cheap test)."""
    if not os.path.isfile(path):
        return False
    try:
        import pyarrow.parquet as pq

        pq.read_metadata(path)
        return True
    except Exception:  # noqa: BLE001 - unreadable means "not stored"
        return False


def _clean_temp_files(expdir: str) -> int:
    """Remove temporary files left by a writer that died (the folder lock is held: none is live)."""
    removed = 0
    for pattern in ("*.tmp-*", os.path.join("shards", "*", "*.tmp-*")):
        for path in glob.glob(os.path.join(glob.escape(expdir), pattern)):
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
    return removed


@contextmanager
def _folder_lock(expdir: str):
    """Hold an exclusive lock on ``expdir`` (flock on ``expdir/.lock``); wait, saying so, while another run holds it."""
    path = os.path.join(expdir, LOCK_FILE)
    try:
        fh = open(path, "a+")
    except OSError as exc:
        raise StorageError(f"cannot create the lock file {path}: {oserror_text(exc, path)}") from None
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock
            fcntl = None
        if fcntl is not None:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "?"
                print(f"attnsvm: {expdir} is in use by another run (pid {holder}); waiting for it to finish, "
                      "then its stored tasks are reused", file=sys.stderr, flush=True)
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            except OSError as exc:  # file system without locks (some network mounts)
                print(f"attnsvm: warning: cannot lock {path} ({exc.strerror}); do not run two sweeps on this folder "
                      "at once", file=sys.stderr, flush=True)
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()))
            fh.flush()
        except OSError:
            pass
        yield
    finally:
        fh.close()


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


def _seeds_of(task: Task):
    """The seeds a task covers, as its params state them (else the params that fix its randomness)."""
    for key in ("seeds", "seed", "run"):
        if key in task.params:
            return task.params[key]
    return "set by the config and task params " + json.dumps(task.params, sort_keys=True, default=str)


def _check_outdir(outdir) -> str:
    if not isinstance(outdir, (str, os.PathLike)):
        raise ValidationError(f"outdir (--out) must be a folder path, got {type(outdir).__name__}")
    out = os.fspath(outdir)
    if isinstance(out, bytes):
        out = os.fsdecode(out)
    if not out.strip():
        raise ValidationError("outdir (--out) must name a folder, got an empty path ''")
    if "\0" in out:
        raise ValidationError(f"outdir (--out) must be a folder path without NUL characters, got {out!r}")
    return out


def _makedirs(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the results folder {path}: {oserror_text(exc, path)}") from None


def run_experiment(experiment, config, outdir: str, *, workers: int | None = None, scheduler: str | None = None,
                   progress: bool = True, task_hook=None, connect_timeout: float = 20.0,
                   max_memory=None) -> RunSummary:
    """Run (or resume) ``experiment`` with ``config`` into ``outdir/NAME``.

    Parameters
    ----------
    workers : int, optional
        ``None``/``1``: run in this process. ``N > 1``: start a local Dask cluster
        of N single-threaded worker processes.
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:port``); overrides ``workers``.
    task_hook : callable, optional
        Called with each task key after its shard is stored (tests use it to
        simulate a crash mid-sweep).
    connect_timeout : float
        Seconds to wait for the Dask scheduler before a clear error (:class:`SchedulerError`).
    max_memory : int or str, optional
        Memory limit for planning and for one task (see :mod:`attnsvm.memory`; default
        ``$ATTNSVM_MAX_MEMORY``, else 80 % of available memory). Work estimated above it
        is refused before it starts (:class:`~attnsvm.errors.ResourceLimitError`).

    Raises
    ------
    StorageError
        The results folder cannot be created or written; shards already stored are kept.
    RunInterrupted
        (a KeyboardInterrupt) on Ctrl-C; shards already stored are kept.
    """
    from attnsvm.memory import max_memory as _limit_of, require_memory

    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValidationError(f"--workers must be an integer >= 1, got {workers!r}")
    if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)) or \
            not (math.isfinite(connect_timeout) and connect_timeout > 0):
        raise ValidationError(f"--connect-timeout must be a finite number of seconds > 0, got {connect_timeout!r}")
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
        raise ValidationError(f"--scheduler must be an address such as tcp://host:8786, got {scheduler!r}")
    outdir = _check_outdir(outdir)
    limit = _limit_of(max_memory)  # validates max_memory
    if max_memory is not None:
        max_memory = limit
    start = time.time()
    name = experiment.name
    config_json = config.model_dump(mode="json")
    hint = "reduce the sizes or runs in the config, or raise --max-memory / ATTNSVM_MAX_MEMORY"
    require_memory(experiment.estimate_memory(config, None), f"{name}: planning the tasks", limit=max_memory, hint=hint)
    tasks = experiment.tasks(config)
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise AttnSVMError(f"{name}: task keys are not unique")
    for t in tasks:
        require_memory(experiment.estimate_memory(config, t), f"{name} task {t.key} ({t.runs} run(s))",
                       limit=max_memory, hint=hint)
    if scheduler:
        check_scheduler(scheduler, connect_timeout)  # before anything is written: a clear error, never a hang

    expdir = os.path.join(outdir, name)
    chash = config_hash(config)
    sharddir = os.path.join(expdir, "shards", chash)
    _makedirs(sharddir)
    with _folder_lock(expdir):
        return _run_locked(experiment, config, config_json, tasks, expdir, sharddir, chash, start, workers,
                           scheduler, progress, task_hook, connect_timeout, max_memory)


def _run_locked(experiment, config, config_json, tasks, expdir, sharddir, chash, start, workers, scheduler,
                progress, task_hook, connect_timeout, max_memory) -> RunSummary:
    name = experiment.name
    _clean_temp_files(expdir)
    shard = {t.key: os.path.join(sharddir, f"{t.key}.parquet") for t in tasks}
    recomputed = []
    stored = set()
    for t in tasks:
        path = shard[t.key]
        if not os.path.exists(path):
            continue
        problem = _shard_problem(path, chash)
        if problem is None:
            stored.add(t.key)
            continue
        moved = path + ".unreadable"
        try:
            os.replace(path, moved)
        except OSError as exc:
            raise StorageError(f"cannot set aside the unreadable shard {path}: {oserror_text(exc, path)}") from None
        recomputed.append({"key": t.key, "error": problem, "moved_to": moved})
        print(f"attnsvm: {name}: stored shard {path} is unreadable ({problem}); moved to {moved}, recomputing it",
              file=sys.stderr, flush=True)
    todo = [t for t in tasks if t.key not in stored]
    resumed = len(tasks) - len(todo)
    total_runs = sum(t.runs for t in tasks)
    done_runs = sum(t.runs for t in tasks if t.key in stored)
    failures = []
    computed = 0
    version = code_version()

    def provenance(task):
        return {"task": task.key, "config_hash": chash, "version": version, "seeds": _seeds_of(task),
                "params": task.params, "config": config_json, "experiment": name,
                "written": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node()}

    bar = _progress(total_runs, done_runs, name, progress)
    outcomes = _outcomes(experiment, config_json, todo, workers, scheduler, connect_timeout, shard, max_memory)
    try:
        for task, result in outcomes:
            try:
                table = result()
            except Exception as exc:  # noqa: BLE001 - a failing task must not stop the sweep
                failures.append(_failure(task, exc))
            else:
                if table is None:  # resubmitted by Dask after its shard was stored
                    resumed += 1
                else:
                    _atomic_parquet(table, shard[task.key], provenance(task))
                    computed += 1
                if task_hook is not None:
                    task_hook(task.key)
            bar.update(task.runs)
    except KeyboardInterrupt:
        raise _interrupted(name, shard, sharddir) from None
    except StorageError as exc:
        raise StorageError(f"{exc}; the sweep stopped, {_stored(shard)} finished task(s) are kept in {sharddir}: "
                           "free space or fix the folder, then run the same command again to resume") from None
    finally:
        outcomes.close()
        bar.close()

    try:
        return _collect(experiment, config, config_json, tasks, shard, expdir, sharddir, chash, start, workers,
                        scheduler, failures, computed, resumed, recomputed)
    except KeyboardInterrupt:
        raise _interrupted(name, shard, sharddir) from None
    except StorageError as exc:
        raise StorageError(f"{exc}; {_stored(shard)} finished task(s) stay stored in {sharddir}: fix the folder, "
                           "then run the same command again to write the results") from None


def _stored(shard: dict) -> int:
    """How many of the tasks' shards exist."""
    return sum(os.path.exists(p) for p in shard.values())


def _interrupted(name: str, shard: dict, sharddir: str) -> "RunInterrupted":
    n = _stored(shard)
    return RunInterrupted(f"interrupted; {n} finished task(s) of {name} are stored in {sharddir}; "
                          "run the same command again to resume", n, sharddir)


def _shard_problem(path: str, chash: str) -> str | None:
    """Why the shard at ``path`` cannot be used (None: it can)."""
    try:
        if os.path.getsize(path) == 0:
            return "empty file"
        table, prov = read_shard(path)
    except Exception as exc:  # noqa: BLE001 - any failure to read means "recompute"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    if prov is not None and prov.get("config_hash") != chash:
        return f"written for config {prov.get('config_hash')!r}, not {chash!r}"
    return None


def _collect(experiment, config, config_json, tasks, shard, expdir, sharddir, chash, start, workers, scheduler,
             failures, computed, resumed, recomputed) -> RunSummary:
    """Read every stored shard, then write results, checks, figures, config and meta (all from the shards)."""
    name = experiment.name
    _atomic_text(json.dumps(failures, indent=2), os.path.join(expdir, "failures.json"))
    tables, provenance, configs = [], [], []
    for t in tasks:
        path = shard[t.key]
        if not os.path.exists(path):
            continue
        try:
            table, prov = read_shard(path)
        except Exception as exc:  # noqa: BLE001
            raise StorageError(f"the stored shard {path} became unreadable during the run ({type(exc).__name__}: "
                               f"{exc}); run the same command again to recompute it") from None
        tables.append(table)
        prov = prov or {"task": t.key, "config_hash": chash, "version": "unknown (shard without provenance)",
                        "seeds": _seeds_of(t), "written": ""}
        if isinstance(prov.get("config"), dict) and prov["config"] not in configs:
            configs.append(prov["config"])
        provenance.append({k: prov.get(k) for k in ("task", "config_hash", "version", "seeds", "written")})
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    _atomic_parquet(table, os.path.join(expdir, "results.parquet"))
    # the config that produced the stored numbers is what the shards say (one config per shard folder)
    shown = configs[0] if len(configs) == 1 else config_json
    _atomic_text(config_to_yaml(experiment.Config(**shown)), os.path.join(expdir, "config.yaml"))

    checks = []
    figures = []
    if not table.empty:
        checks = [c.to_dict() for c in experiment.checks(config, table)]
        figures = [os.path.basename(os.fspath(p)) for p in experiment.plot(config, table, expdir)]
    if failures:
        checks.append(integrity_check("every task completed", float(len(failures)), "==", 0,
                                      "failed tasks: " + ", ".join(f["key"] for f in failures),
                                      reason="a failed task leaves runs unmeasured").to_dict())
    preset = preset_of(experiment, config)
    checks = mark_findings(name, checks, preset)
    _atomic_text(json.dumps(checks, indent=2), os.path.join(expdir, "checks.json"))
    wall = time.time() - start
    meta = {
        "name": name, "title": experiment.title, "paper": experiment.paper, "config_hash": chash,
        "tasks": len(tasks), "computed": computed, "resumed": resumed, "failed": len(failures),
        "runs": sum(t.runs for t in tasks), "wall_seconds": wall, "figures": figures,
        "explain": experiment.explain(config, table) if not table.empty else "",
        "environment": environment(), "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "workers": workers or 1, "scheduler": scheduler, "preset": preset,
        "deviations": experiment.deviations(config),
        "config": shown, "provenance": provenance, "code_version": code_version(),
        "recomputed_unreadable": recomputed,
    }
    _atomic_text(json.dumps(meta, indent=2, default=str), os.path.join(expdir, "meta.json"))
    return RunSummary(name, expdir, len(tasks), computed, resumed, failures, checks, wall, preset, recomputed)


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


def _outcomes(experiment, config_json, todo, workers, scheduler, connect_timeout=20.0, shard=None, max_memory=None):
    """Yield ``(task, result)`` as tasks finish; ``result()`` returns the task's table (None: already
    stored) or raises.

    In this process when neither ``workers > 1`` nor ``scheduler`` is given, else on Dask.
    """
    shard = shard or {}
    if not (scheduler or (workers is not None and workers > 1)):
        for task in todo:
            yield task, partial(execute_task, experiment, config_json, task, None, max_memory)
        return
    if not todo:
        return
    from dask.distributed import Client, LocalCluster, as_completed

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
    try:
        futures = {client.submit(execute_task, experiment, config_json, task, shard.get(task.key), max_memory,
                                 pure=False, key=f"{experiment.name}-{task.key}-{time.time_ns()}"): task
                   for task in todo}
        for future in as_completed(futures):
            task = futures.pop(future)
            yield task, future.result
            # the result is stored: release it so that a worker lost later does not make Dask recompute it
            future.release()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def environment() -> dict:
    """Versions of the pieces that decide the numbers."""
    import importlib.metadata as md

    versions = {}
    for pkg in ("attnsvm", "numpy", "scipy", "torch", "cvxpy", "clarabel", "pandas", "matplotlib", "dask"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "packages": versions, "attnsvm_code": code_version()}
