"""``reproduce``'s default: the tasks of all the experiments on one pool of local processes
(:func:`attnsvm.runner.run_experiments`): resumable, failures recorded, checks and figures on one thread, a dead
worker one clear error. That it gives the tables of one process: tests/test_runner_executors.py."""

import os

import numpy as np
import pandas as pd
import pytest
import torch
from pydantic import PositiveInt
from threadpoolctl import threadpool_info

from attnsvm.errors import AttnSVMError, ValidationError
from attnsvm.experiments import Experiment, ExperimentConfig, Task, check
from attnsvm.runner import default_workers, read_shard, run_experiment, run_experiments


class PoolToyConfig(ExperimentConfig):
    runs: PositiveInt = 6
    per_task: PositiveInt = 2
    fail_seed: int = -1
    die_seed: int = -1


class PoolToy(Experiment):
    """Seeded rows per task; the checks record the BLAS and torch threads they ran with."""

    name = "pool-toy"
    title = "pool toy"
    Config = PoolToyConfig

    def tasks(self, config):
        seeds = list(range(config.runs))
        return [Task(f"seeds-{s:03d}", len(seeds[s:s + config.per_task]), {"seeds": seeds[s:s + config.per_task]})
                for s in range(0, len(seeds), config.per_task)]

    def run_task(self, config, task):
        if config.fail_seed in task.params["seeds"]:
            raise RuntimeError("boom")
        if config.die_seed in task.params["seeds"]:
            os._exit(1)  # the worker process dies
        rows = []
        for s in task.params["seeds"]:
            a = np.random.default_rng(s).standard_normal((40, 40))
            rows.append({"seed": s, "value": float(np.linalg.norm(a @ a.T)), "pid": os.getpid(),
                         "torch_threads": torch.get_num_threads()})
        return pd.DataFrame(rows)

    def checks(self, config, table):
        blas = max((p["num_threads"] for p in threadpool_info()), default=1)
        return [check("torch threads in the checks", torch.get_num_threads(), "==", 1, source="test",
                      reason="one thread", kind="integrity"),
                check("BLAS threads in the checks", blas, "==", 1, source="test", reason="one thread",
                      kind="integrity")]


def _table(out, name):
    return pd.read_parquet(os.path.join(out, name, "results.parquet"))


def test_default_workers_is_one_per_cpu_and_at_most_one_per_task(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert [default_workers(n) for n in (0, 1, 2, 5)] == [1, 1, 2, 2]
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert default_workers(7) == 1


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a pool needs 2 CPUs")
def test_default_pool_resumes_and_records_failures(tmp_path):
    out = str(tmp_path / "out")
    jobs = [(PoolToy(), PoolToyConfig(fail_seed=3))]
    first = run_experiments(jobs, out, progress=False)[0]
    assert first.computed == 2 and [f["key"] for f in first.failed] == ["seeds-002"]
    assert "boom" in first.failed[0]["error"]
    shards = tmp_path / "out" / "pool-toy" / "shards"
    (stored,) = list(shards.iterdir())
    os.remove(stored / "seeds-000.parquet")
    again = run_experiments([(PoolToy(), PoolToyConfig())], out, progress=False)[0]
    assert again.tasks == 3  # another config: another shard folder, all computed
    back = run_experiments(jobs, out, progress=False)[0]
    assert back.computed == 1 and back.resumed == 1 and len(back.failed) == 1  # the removed shard only, and the failure
    assert sorted(_table(tmp_path / "out", "pool-toy")["seed"]) == [0, 1, 4, 5]


def test_checks_run_on_one_thread(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        summary = run_experiment(PoolToy(), PoolToyConfig(runs=2), str(tmp_path), progress=False)
        assert torch.get_num_threads() == 2  # restored after the run
    finally:
        torch.set_num_threads(before)
    assert summary.ok, summary.checks


def test_run_experiments_validates_its_options(tmp_path):
    with pytest.raises(ValidationError, match="--workers"):
        run_experiments([(PoolToy(), PoolToyConfig())], str(tmp_path), workers=0, progress=False)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a pool needs 2 CPUs")
def test_a_dead_worker_stops_the_run_with_one_error_and_keeps_the_stored_tasks(tmp_path):
    cfg = PoolToyConfig(runs=4, per_task=1, die_seed=3)
    with pytest.raises(AttnSVMError, match="worker process died.*resume"):
        run_experiments([(PoolToy(), cfg)], str(tmp_path), progress=False)
    (folder,) = list((tmp_path / "pool-toy" / "shards").iterdir())
    stored = sorted(folder.glob("*.parquet"))
    assert "seeds-003.parquet" not in [p.name for p in stored]
    for path in stored:  # what was stored before the death is whole
        assert read_shard(str(path))[0]["seed"].tolist() == [int(path.stem[-3:])]


def test_reproduce_help_says_what_the_default_workers_do():
    from click.testing import CliRunner

    from attnsvm.cli import cli

    text = " ".join(CliRunner().invoke(cli, ["reproduce", "--help"]).output.split())
    assert "one pool of local processes, one per CPU" in text
    assert "1: run everything in this process" in text
