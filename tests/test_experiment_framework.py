import json
import os
import sys

import cloudpickle
import numpy as np
import pandas as pd
import pytest
from pydantic import PositiveInt

from attnsvm.errors import ValidationError
from attnsvm.experiments import Experiment, ExperimentConfig, Task, build_config, check, parse_assignments
from attnsvm.report import write_report
from attnsvm.runner import run_experiment
from attnsvm.experiments.config import read_config_file


class ToyConfig(ExperimentConfig):
    runs: PositiveInt = 6
    per_task: PositiveInt = 2
    scale: float = 1.0
    fail_seed: int = -1
    log: str = ""


class Toy(Experiment):
    name = "toy"
    title = "toy experiment"
    Config = ToyConfig
    quick = {"runs": 4}

    def tasks(self, config):
        seeds = list(range(config.runs))
        chunks = (seeds[i:i + config.per_task] for i in range(0, len(seeds), config.per_task))
        return [Task(f"seeds-{c[0]:03d}", len(c), {"seeds": c}) for c in chunks]

    def run_task(self, config, task):
        if config.log:
            with open(config.log, "a") as fh:
                fh.write(task.key + "\n")
        if config.fail_seed in task.params["seeds"]:
            raise RuntimeError("boom")
        rows = [{"seed": s, "value": config.scale * np.random.default_rng(s).standard_normal()} for s in task.params["seeds"]]
        return pd.DataFrame(rows)

    def plot(self, config, table, outdir):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        ax.plot(table["seed"], table["value"], "o")
        ax.set_xlabel("seed")
        ax.set_ylabel("value")
        path = os.path.join(outdir, "toy.png")
        fig.savefig(path)
        plt.close(fig)
        return [path]

    def checks(self, config, table):
        return [check("runs stored", len(table), "==", config.runs, source="test toy", reason="every run is stored",
                      kind="integrity")]


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_config_layers_and_errors(tmp_path):
    toy = Toy()
    assert build_config(toy).runs == 6 and build_config(toy, quick=True).runs == 4
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("runs: 8\nscale: 2.5\n")
    cfg = build_config(toy, quick=True, file_overrides=read_config_file(cfg_file), overrides=parse_assignments(["scale=3"]))
    assert cfg.runs == 8 and cfg.scale == 3.0
    with pytest.raises(ValidationError, match="unknown config key.*nope"):
        build_config(toy, overrides={"nope": 1})
    with pytest.raises(ValidationError, match="runs"):
        build_config(toy, overrides=parse_assignments(["runs=-3"]))
    with pytest.raises(ValidationError, match="scale"):
        build_config(toy, overrides=parse_assignments(["scale=abc"]))
    with pytest.raises(ValidationError, match="key=value"):
        parse_assignments(["runs"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ValidationError, match="mapping"):
        read_config_file(bad)
    with pytest.raises(ValidationError, match="no such config file"):
        read_config_file(tmp_path / "missing.yaml")


def test_outputs_and_resume_after_crash(tmp_path):
    toy = Toy()
    log = tmp_path / "calls.log"
    cfg = build_config(toy, overrides={"log": str(log)})
    calls = {"n": 0}

    def crash_after_two(key):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated crash")

    with pytest.raises(KeyboardInterrupt):
        run_experiment(toy, cfg, str(tmp_path / "out"), progress=False, task_hook=crash_after_two)
    assert log.read_text().split() == ["seeds-000", "seeds-002"]
    summary = run_experiment(toy, cfg, str(tmp_path / "out"), progress=False)
    # the re-run computed only the task that was never stored
    assert log.read_text().split() == ["seeds-000", "seeds-002", "seeds-004"]
    assert summary.resumed == 2 and summary.computed == 1 and summary.ok
    expdir = tmp_path / "out" / "toy"
    table = pd.read_parquet(expdir / "results.parquet")
    assert sorted(table["seed"]) == list(range(6))
    checks = json.loads((expdir / "checks.json").read_text())
    assert [{k: c[k] for k in ("name", "value", "threshold", "passed", "source", "kind", "finding")} for c in checks] == [
        {"name": "runs stored", "value": 6.0, "threshold": "== 6", "passed": True, "source": "test toy",
         "kind": "integrity", "finding": False}]
    assert (expdir / "config.yaml").read_text().startswith("runs: 6")
    assert (expdir / "toy.png").exists()
    # a third run recomputes nothing
    summary = run_experiment(toy, cfg, str(tmp_path / "out"), progress=False)
    assert summary.computed == 0 and summary.resumed == 3
    html_path, md_path = write_report(str(tmp_path / "out"))
    text = open(html_path).read()
    assert "toy/toy.png" in text and "runs stored" in text and "numpy" in text
    assert "| runs stored | test toy | integrity | 6 | == 6 | every run is stored | pass |" in open(md_path).read()


def test_failing_task_is_reported_and_others_complete(tmp_path):
    toy = Toy()
    cfg = build_config(toy, overrides={"fail_seed": 3})
    summary = run_experiment(toy, cfg, str(tmp_path), progress=False)
    assert [f["key"] for f in summary.failed] == ["seeds-002"]
    assert summary.failed[0]["params"] == {"seeds": [2, 3]} and "boom" in summary.failed[0]["error"]
    table = pd.read_parquet(tmp_path / "toy" / "results.parquet")
    assert sorted(table["seed"]) == [0, 1, 4, 5]
    assert not summary.ok
    # fixing the failure and re-running computes only the failed task
    cfg_ok = build_config(toy)
    summary = run_experiment(toy, cfg_ok, str(tmp_path), progress=False)
    assert summary.ok


def test_report_without_results(tmp_path):
    with pytest.raises(ValidationError, match="no experiment results"):
        write_report(str(tmp_path))


class ThreadProbe(Toy):
    name = "toy-threads"

    def run_task(self, config, task):
        import torch

        from threadpoolctl import threadpool_info

        blas = max((p["num_threads"] for p in threadpool_info()), default=1)
        return pd.DataFrame([{"seed": s, "value": 0.0, "torch_threads": torch.get_num_threads(), "blas_threads": blas}
                             for s in task.params["seeds"]])


def test_runner_uses_one_thread_per_task_and_restores_the_callers_setting(tmp_path):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        exp = ThreadProbe()
        run_experiment(exp, build_config(exp, quick=True), str(tmp_path))
        table = pd.read_parquet(tmp_path / "toy-threads" / "results.parquet")
        assert set(table["torch_threads"]) == {1} and set(table["blas_threads"]) == {1}
        assert torch.get_num_threads() == 2, "the runner changed the host's torch thread setting"
    finally:
        torch.set_num_threads(before)
