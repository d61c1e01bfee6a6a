"""One scenario run once per executor (:mod:`attnsvm.runner.executors`): ``run_experiment`` in this process (the
reference), ``run_experiments`` in this process (``workers=1``), on its pool of local processes (the default) and
on a local Dask cluster (``workers=2``). Every executor gives the reference's tables and checks, runs the tasks
where it says (pid), on one torch thread, and records its workers and (pool, one process) its task seconds.

The scenario is a toy whose cost estimates reverse its task order (so the pool's queue order differs from the
tasks' order) and a real experiment's quick preset. Each slow executor (the pool, Dask) starts once here.
"""

import json
import os
import sys

import cloudpickle
import pandas as pd
import pytest
from test_reproduce_pool import PoolToy, PoolToyConfig

from attnsvm.experiments import build_config, registry
from attnsvm.runner import default_workers, run_experiment, run_experiments

REAL = "mm-loss-functions"


class ExecToy(PoolToy):
    """:class:`PoolToy` (seeded rows, with the pid and torch threads that computed them) whose later tasks are
    estimated longer, so that the pool queues them first."""

    name = "exec-toy"

    def estimate_seconds(self, config, task):
        return 1.0 + task.params["seeds"][0]


for _module in (__name__, PoolToy.__module__):  # Dask's workers get the toy by value
    cloudpickle.register_pickle_by_value(sys.modules[_module])


def _jobs():
    real = registry()[REAL]
    return [(ExecToy(), PoolToyConfig()), (real, build_config(real, quick=True))]


def _run(executor: str, out: str) -> list:
    """The scenario's summaries, run by ``executor``."""
    if executor == "run_experiment":
        return [run_experiment(e, c, out, progress=False) for e, c in _jobs()]
    if executor == "one process":
        return run_experiments(_jobs(), out, workers=1, progress=False)
    if executor == "pool":
        return run_experiments(_jobs(), out, progress=False)
    assert executor == "dask"
    return run_experiments(_jobs(), out, workers=2, progress=False)  # each experiment on a local Dask cluster


def _table(out, name) -> pd.DataFrame:
    return pd.read_parquet(os.path.join(out, name, "results.parquet"))


def _json(out, name, file):
    with open(os.path.join(out, name, file)) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("reference"))
    summaries = _run("run_experiment", out)
    assert all(s.ok and s.computed == s.tasks for s in summaries), [s.failed or s.failed_checks for s in summaries]
    return out


#: executor -> (workers recorded in meta.json (None: the pool's default), tasks run in this process, tasks timed)
EXECUTORS = {"one process": (1, True, True), "pool": (None, False, True), "dask": (2, False, False)}


@pytest.mark.parametrize("executor", list(EXECUTORS))
def test_every_executor_gives_the_tables_and_checks_of_one_process(tmp_path, reference, executor):
    if executor == "pool" and (os.cpu_count() or 1) < 2:
        pytest.skip("a pool needs 2 CPUs")
    workers, here, timed = EXECUTORS[executor]
    out = str(tmp_path)
    summaries = _run(executor, out)
    assert [s.name for s in summaries] == ["exec-toy", REAL]  # in the order of the jobs
    assert all(s.ok and s.computed == s.tasks and not s.failed for s in summaries)
    workers = workers or default_workers(sum(s.tasks for s in summaries))
    toy, toy_ref = _table(out, "exec-toy"), _table(reference, "exec-toy")
    cols = ["task", "seed", "value"]
    pd.testing.assert_frame_equal(toy[cols], toy_ref[cols])
    assert set(toy_ref["pid"]) == {os.getpid()}
    assert (set(toy["pid"]) == {os.getpid()}) if here else (os.getpid() not in set(toy["pid"]))
    assert set(toy["torch_threads"]) == {1}
    pd.testing.assert_frame_equal(_table(out, REAL), _table(reference, REAL))
    for name in ("exec-toy", REAL):
        a, b = _json(reference, name, "checks.json"), _json(out, name, "checks.json")
        assert [(c["name"], c["value"], c["passed"]) for c in a] == [(c["name"], c["value"], c["passed"]) for c in b]
        meta = _json(out, name, "meta.json")
        assert meta["workers"] == workers and meta["computed"] == meta["tasks"]
        # every executor records each task's own seconds, where it ran (attnsvm.runner.costs reads them)
        assert all(p["computed"] is True and p["cpu_seconds"] >= 0 and p["wall_seconds"] > 0
                   for p in meta["provenance"]), meta["provenance"]
        if timed:
            assert meta["task_cpu_seconds"] > 0 and meta["task_seconds"] <= meta["wall_seconds"]
        else:
            assert "task_seconds" not in meta and "task_seconds" not in _json(reference, name, "meta.json")
