"""The pooled ``reproduce``'s queue (:func:`attnsvm.runner.queue_order`): longest experiments first, each
one's longest tasks first, each experiment written as soon as its tasks are in. That the order changes no table:
tests/test_runner_executors.py (the pool, whose queue there differs from the tasks' order)."""

import json

import numpy as np
import pandas as pd
import pytest
from pydantic import PositiveFloat, PositiveInt

from attnsvm.experiments import Experiment, ExperimentConfig, Task, check
from attnsvm.experiments.costs import DEFAULT_RUN_SECONDS, RUN_SECONDS, measured_run_seconds, run_seconds
from attnsvm.runner import queue_order, run_experiments
from attnsvm.runner.sweep import Sweep, make_plan

#: what the toys' tasks and the runner's on_done did, in this process (``workers=1``)
EVENTS: list = []


class OrderToyConfig(ExperimentConfig):
    #: one task per entry, its estimated seconds
    costs: list[PositiveFloat] = [1.0, 3.0, 2.0]
    rows: PositiveInt = 3


class OrderToy(Experiment):
    """Tasks with stated costs (``estimate_seconds``); seeded rows; the tasks record when they ran."""

    name = "order-toy-a"
    title = "order toy"
    Config = OrderToyConfig

    def tasks(self, config):
        return [Task(f"t{k}", 1, {"k": k, "cost": c}) for k, c in enumerate(config.costs)]

    def estimate_seconds(self, config, task):
        return task.params["cost"]

    def run_task(self, config, task):
        EVENTS.append(("task", self.name, task.key))
        rng = np.random.default_rng([task.params["k"], len(self.name)])
        return pd.DataFrame({"k": task.params["k"], "value": rng.standard_normal(config.rows)})

    def checks(self, config, table):
        return [check("rows", float(len(table)), "==", config.rows * len(config.costs), source="test",
                      reason="every task's rows", kind="integrity")]


class OrderToyB(OrderToy):
    name = "order-toy-b"


def _sweeps(tmp_path, jobs):
    return [Sweep(e, c, make_plan(e, c, str(tmp_path), None), None, None) for e, c in jobs]


def _keys(order, sweeps):
    return [(sweeps[i].experiment.name, t.key) for i, t in order]


def test_queue_order_is_longest_experiment_first_then_longest_task_first(tmp_path):
    jobs = [(OrderToy(), OrderToyConfig(costs=[1.0, 3.0, 2.0])),  # 6 s in all
            (OrderToyB(), OrderToyConfig(costs=[0.5, 9.0, 0.5, 4.0]))]  # 14 s: queued first
    sweeps = _sweeps(tmp_path, jobs)
    assert _keys(queue_order(sweeps), sweeps) == [
        ("order-toy-b", "t1"), ("order-toy-b", "t3"), ("order-toy-b", "t0"), ("order-toy-b", "t2"),
        ("order-toy-a", "t1"), ("order-toy-a", "t2"), ("order-toy-a", "t0")]


def test_queue_order_keeps_the_given_order_on_ties_and_counts_only_tasks_to_compute(tmp_path):
    jobs = [(OrderToy(), OrderToyConfig(costs=[2.0, 2.0])), (OrderToyB(), OrderToyConfig(costs=[1.0, 3.0]))]
    sweeps = _sweeps(tmp_path, jobs)
    assert _keys(queue_order(sweeps), sweeps) == [
        ("order-toy-a", "t0"), ("order-toy-a", "t1"), ("order-toy-b", "t1"), ("order-toy-b", "t0")]
    sweeps[1].todo = sweeps[1].todo[:1]  # t1 of b stored: b has 1 s left, a 4 s
    assert _keys(queue_order(sweeps), sweeps) == [("order-toy-a", "t0"), ("order-toy-a", "t1"),
                                                  ("order-toy-b", "t0")]


def test_one_process_runs_the_queue_order_and_writes_each_experiment_when_its_tasks_are_in(tmp_path):
    EVENTS.clear()
    jobs = [(OrderToy(), OrderToyConfig(costs=[1.0, 3.0])), (OrderToyB(), OrderToyConfig(costs=[5.0, 0.5]))]
    out = run_experiments(jobs, str(tmp_path), workers=1, progress=False,
                          on_done=lambda s: EVENTS.append(("done", s.name)))
    assert [s.name for s in out] == ["order-toy-a", "order-toy-b"]  # returned in the order of jobs
    assert all(s.ok and s.computed == 2 for s in out)
    assert EVENTS == [("task", "order-toy-b", "t0"), ("task", "order-toy-b", "t1"), ("done", "order-toy-b"),
                      ("task", "order-toy-a", "t1"), ("task", "order-toy-a", "t0"), ("done", "order-toy-a")]


def test_the_default_estimate_is_runs_times_the_measured_seconds_per_run():
    from attnsvm.experiments import registry

    reg = registry()
    assert set(RUN_SECONDS) <= set(reg)  # every entry names an experiment
    heads = reg["real-minilm-heads"]
    task = heads.tasks(heads.Config())[0]
    assert heads.estimate_seconds(heads.Config(), task) == pytest.approx(task.runs * RUN_SECONDS[heads.name])
    assert run_seconds("no-such-experiment") == DEFAULT_RUN_SECONDS
    assert OrderToy().estimate_seconds(OrderToyConfig(), Task("x", 4, {"cost": 2.5})) == 2.5
    assert Experiment.estimate_seconds(OrderToy(), OrderToyConfig(), Task("x", 4)) == 4 * DEFAULT_RUN_SECONDS


def test_measured_run_seconds_reads_the_pooled_metas(tmp_path):
    for name, meta in (("a", {"name": "a", "runs": 8, "tasks": 2, "computed": 2, "task_cpu_seconds": 2.0}),
                       ("b", {"name": "b", "runs": 8, "tasks": 2, "computed": 1, "task_cpu_seconds": 1.0}),
                       ("c", {"name": "c", "runs": 3, "tasks": 1, "computed": 1})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "meta.json").write_text(json.dumps(meta))
    assert measured_run_seconds(str(tmp_path)) == {"a": 0.25}  # b resumed a task, c was not timed
