"""Run an experiment's tasks serially, on local processes or on a Dask cluster.

Every finished task is stored at once as ``OUT/NAME/shards/<config-hash>/<task>.parquet``
(written to a temporary file, then renamed), so a sweep that is interrupted or killed
resumes, when re-run with the same command, without recomputing anything stored.
A failing task is recorded with its parameters (seeds) in ``failures.json`` and the
others complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
import traceback
from functools import partial
from dataclasses import dataclass, field

import pandas as pd

from ..errors import AttnSVMError, ValidationError
from .base import Task
from .config import config_to_yaml


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

    @property
    def ok(self) -> bool:
        return not self.failed and all(c["passed"] for c in self.checks)


def config_hash(config) -> str:
    """Hash of the config and the attnsvm version: shards of another config or release are never reused."""
    from .. import __version__

    return hashlib.sha256((config_to_yaml(config) + __version__).encode()).hexdigest()[:12]


def _set_threads():
    """One BLAS and one torch thread per task: the solvers' matrices are small, and a sweep
    gets its parallelism from worker processes; oversubscribed BLAS threads made small
    solves ten times slower on a loaded 2-core machine."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
    import torch

    torch.set_num_threads(1)


def execute_task(experiment, config_json: dict, task: Task) -> pd.DataFrame:
    """Run one task (module-level, so Dask can ship it to any worker with the experiment object)."""
    _set_threads()
    name = experiment.name
    config = experiment.Config(**config_json)
    table = experiment.run_task(config, task)
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"{name}.run_task must return a DataFrame, got {type(table).__name__}")
    table = table.copy()
    table["task"] = task.key
    return table


def _atomic_parquet(table: pd.DataFrame, path: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    table.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def _atomic_text(text: str, path: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _progress(total: int, initial: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="run", disable=not enabled, dynamic_ncols=True, leave=True)


def run_experiment(experiment, config, outdir: str, *, workers: int | None = None, scheduler: str | None = None,
                   progress: bool = True, task_hook=None) -> RunSummary:
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
    """
    if workers is not None and workers < 1:
        raise ValidationError(f"--workers must be >= 1, got {workers}")
    start = time.time()
    name = experiment.name
    expdir = os.path.join(outdir, name)
    chash = config_hash(config)
    sharddir = os.path.join(expdir, "shards", chash)
    os.makedirs(sharddir, exist_ok=True)
    _atomic_text(config_to_yaml(config), os.path.join(expdir, "config.yaml"))

    tasks = experiment.tasks(config)
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise AttnSVMError(f"{name}: task keys are not unique")
    shard = {t.key: os.path.join(sharddir, f"{t.key}.parquet") for t in tasks}
    todo = [t for t in tasks if not os.path.exists(shard[t.key])]
    resumed = len(tasks) - len(todo)
    total_runs = sum(t.runs for t in tasks)
    done_runs = sum(t.runs for t in tasks if t not in todo)
    failures = []
    config_json = config.model_dump(mode="json")

    bar = _progress(total_runs, done_runs, name, progress)
    outcomes = _outcomes(experiment, config_json, todo, workers, scheduler)
    try:
        for task, result in outcomes:
            try:
                table = result()
            except Exception as exc:  # noqa: BLE001 - a failing task must not stop the sweep
                failures.append(_failure(task, exc))
            else:
                _atomic_parquet(table, shard[task.key])
                if task_hook is not None:
                    task_hook(task.key)
            bar.update(task.runs)
    finally:
        outcomes.close()
        bar.close()

    _atomic_text(json.dumps(failures, indent=2), os.path.join(expdir, "failures.json"))
    tables = [pd.read_parquet(shard[t.key]) for t in tasks if os.path.exists(shard[t.key])]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    _atomic_parquet(table, os.path.join(expdir, "results.parquet"))

    checks = []
    figures = []
    if not table.empty:
        checks = [c.to_dict() for c in experiment.checks(config, table)]
        figures = [os.path.basename(os.fspath(p)) for p in experiment.plot(config, table, expdir)]
    if failures:
        checks.append({"name": "every task completed", "value": float(len(failures)), "threshold": "== 0",
                       "passed": False, "detail": "failed tasks: " + ", ".join(f["key"] for f in failures)})
    _atomic_text(json.dumps(checks, indent=2), os.path.join(expdir, "checks.json"))
    wall = time.time() - start
    meta = {
        "name": name, "title": experiment.title, "paper": experiment.paper, "config_hash": chash,
        "tasks": len(tasks), "computed": len(todo) - len(failures), "resumed": resumed, "failed": len(failures),
        "runs": total_runs, "wall_seconds": wall, "figures": figures,
        "explain": experiment.explain(config, table) if not table.empty else "",
        "environment": environment(), "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "workers": workers or 1, "scheduler": scheduler,
    }
    _atomic_text(json.dumps(meta, indent=2), os.path.join(expdir, "meta.json"))
    return RunSummary(name, expdir, len(tasks), len(todo) - len(failures), resumed, failures, checks, wall)


def _failure(task: Task, exc: BaseException) -> dict:
    return {"key": task.key, "params": task.params, "error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]}


def _outcomes(experiment, config_json, todo, workers, scheduler):
    """Yield ``(task, result)`` as tasks finish; ``result()`` returns the task's table or raises.

    In this process when neither ``workers > 1`` nor ``scheduler`` is given, else on Dask.
    """
    if not (scheduler or (workers is not None and workers > 1)):
        _set_threads()
        for task in todo:
            yield task, partial(execute_task, experiment, config_json, task)
        return
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        futures = {client.submit(execute_task, experiment, config_json, task, pure=False,
                                 key=f"{experiment.name}-{task.key}-{time.time_ns()}"): task for task in todo}
        for future in as_completed(futures):
            yield futures[future], future.result
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
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(), "packages": versions}
