"""The pooled ``reproduce`` keeps the tasks that share a worker-process state (a loaded model,
:meth:`attnsvm.experiments.Experiment.shared_state`) on the worker that built it while the other
workers have other tasks (:func:`attnsvm.runner.next_for_worker`), and never lets a worker wait idle
for it; the tables stay those of one process."""

import os
import time

import numpy as np
import pandas as pd
import pytest
from pydantic import PositiveFloat, PositiveInt

from attnsvm.experiments import Experiment, ExperimentConfig, Task, build_config, check, registry
from attnsvm.runner import next_for_worker, run_experiments


class StateToyConfig(ExperimentConfig):
    tasks: PositiveInt = 4
    cost: PositiveFloat = 10.0
    #: folder where each task that builds the state leaves a mark ("" : none)
    marks: str = ""
    #: a task of an experiment without state waits (at most 20 s) for this many marks before it runs
    wait_for: int = 0


class StateToy(Experiment):
    """Seeded rows per task, each with the pid of the process that ran it; every task needs the state "toy
    model" and leaves a mark in ``config.marks``."""

    name = "state-toy"
    title = "state toy"
    Config = StateToyConfig

    def tasks(self, config):
        return [Task(f"t{k}", 1, {"k": k}) for k in range(config.tasks)]

    def estimate_seconds(self, config, task):
        return config.cost

    def shared_state(self, config, task):
        return "toy model"

    def run_task(self, config, task):
        k = task.params["k"]
        if config.marks:
            os.makedirs(config.marks, exist_ok=True)
            open(os.path.join(config.marks, f"{self.name}-{k}"), "w").close()
        value = float(np.random.default_rng([k, len(self.name)]).standard_normal())
        return pd.DataFrame({"k": [k], "value": [value], "pid": [os.getpid()]})

    def checks(self, config, table):
        return [check("rows", float(len(table)), "==", config.tasks, source="test", reason="one row per task",
                      kind="integrity")]


class PlainToy(StateToy):
    """The same without a shared state; its tasks wait for ``wait_for`` marks of the state's tasks."""

    name = "plain-toy"

    def shared_state(self, config, task):
        return None

    def run_task(self, config, task):
        deadline = time.monotonic() + 20.0
        while config.wait_for and time.monotonic() < deadline:
            if len(os.listdir(config.marks)) >= config.wait_for:
                break
            time.sleep(0.02)
        return super().run_task(config.model_copy(update={"marks": ""}), task)


def test_next_for_worker_keeps_a_state_on_its_worker_and_takes_any_task_rather_than_wait():
    # the first task without a state, or whose state no worker holds yet, or that this worker holds
    assert next_for_worker(["m", None, "m"], {"m": {0}}, 1) == 1
    assert next_for_worker(["m", None, "m"], {"m": {0}}, 0) == 0
    assert next_for_worker(["m", "n", None], {"m": {0}}, 1) == 1  # "n": no worker holds it yet
    assert next_for_worker(["m", "n"], {"m": {0}, "n": {0, 1}}, 1) == 1  # worker 1 built "n" too
    # only states that other workers hold are left: the first task, not an idle worker
    assert next_for_worker(["m", "m"], {"m": {0}}, 1) == 0
    assert next_for_worker([None], {}, 3) == 0


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a pool needs 2 CPUs")
def test_the_pool_keeps_the_tasks_of_one_state_on_one_worker_while_the_other_has_work(tmp_path):
    marks = str(tmp_path / "marks")
    os.makedirs(marks)
    # the state's tasks queue first (longer); the plain tasks cannot finish before all four state tasks ran, so
    # the other worker always has a plain task it could run instead of a state task
    jobs = [(StateToy(), StateToyConfig(tasks=4, cost=10.0, marks=marks)),
            (PlainToy(), StateToyConfig(tasks=4, cost=5.0, marks=marks, wait_for=4))]
    pool = run_experiments(jobs, str(tmp_path / "pool"), progress=False)
    assert all(s.computed == s.tasks and not s.failed for s in pool)
    state = pd.read_parquet(tmp_path / "pool" / "state-toy" / "results.parquet")
    plain = pd.read_parquet(tmp_path / "pool" / "plain-toy" / "results.parquet")
    assert state["pid"].nunique() == 1  # the state was built in one worker process
    assert set(plain["pid"]) - set(state["pid"])  # the other worker ran plain tasks meanwhile
    assert os.getpid() not in set(state["pid"]) | set(plain["pid"])
    one = run_experiments([(StateToy(), StateToyConfig(tasks=4, cost=10.0)),
                           (PlainToy(), StateToyConfig(tasks=4, cost=5.0))], str(tmp_path / "one"), workers=1,
                          progress=False)
    assert all(s.computed == s.tasks for s in one)
    for name in ("state-toy", "plain-toy"):
        a = pd.read_parquet(tmp_path / "one" / name / "results.parquet")
        b = pd.read_parquet(tmp_path / "pool" / name / "results.parquet")
        pd.testing.assert_frame_equal(a[["task", "k", "value"]], b[["task", "k", "value"]])


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a pool needs 2 CPUs")
def test_a_worker_with_nothing_else_to_do_builds_the_state_too(tmp_path):
    (summary,) = run_experiments([(StateToy(), StateToyConfig(tasks=4))], str(tmp_path), progress=False)
    assert summary.computed == 4
    table = pd.read_parquet(tmp_path / "state-toy" / "results.parquet")
    assert table["pid"].nunique() == 2  # both workers ran tasks of the one state: none waited idle


def test_the_minilm_experiments_share_the_loaded_model():
    reg = registry()
    heads, emb = reg["real-minilm-heads"], reg["real-minilm-embeddings"]
    hc, ec = build_config(heads, quick=False), build_config(emb, quick=False)
    states = {heads.shared_state(hc, t) for t in heads.tasks(hc)} | {emb.shared_state(ec, t) for t in emb.tasks(ec)}
    assert len(states) == 1 and None not in states
    digits = reg["real-digits"]
    dc = build_config(digits, quick=False)
    assert {digits.shared_state(dc, t) for t in digits.tasks(dc)} == {None}
