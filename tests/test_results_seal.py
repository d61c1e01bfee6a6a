"""The stored checks of an experiment folder are verified against its results.parquet before they are shown.

results.parquet carries a checksum and, in its provenance, the digest of the checks.json written with it
(:func:`attnsvm.runner.results_problem`). A flipped bit, a hand-edited checks.json, or checks left over from an
earlier run whose new run stopped before its checks are reported by ``attnsvm report``, and those checks are
not counted as verdicts.
"""

import json
import os

import numpy as np
import pandas as pd
from pydantic import PositiveInt

from attnsvm.experiments import Experiment, ExperimentConfig, Task, check
from attnsvm.report import collect, write_report
from attnsvm.runner import StorageError, read_shard, results_problem, run_experiment, shard_bytes


class SealConfig(ExperimentConfig):
    runs: PositiveInt = 4
    fail_checks: bool = False


class SealToy(Experiment):
    name = "seal-toy"
    title = "seal toy"
    Config = SealConfig

    def tasks(self, config):
        return [Task(f"seed-{s}", 1, {"seed": s}) for s in range(config.runs)]

    def run_task(self, config, task):
        s = task.params["seed"]
        return pd.DataFrame([{"seed": s, "value": float(np.random.default_rng(s).standard_normal())}])

    def checks(self, config, table):
        if config.fail_checks:
            raise RuntimeError("a check crashed")
        return [check("runs stored", len(table), "==", config.runs, source="test", reason="every run is stored")]


def _run(out, **kw):
    toy = SealToy()
    return run_experiment(toy, toy.Config(**kw), str(out), progress=False)


def _report_md(out) -> str:
    _, md = write_report(str(out))
    return open(md, encoding="utf-8").read()


def test_a_clean_run_is_sealed_and_reported(tmp_path):
    s = _run(tmp_path)
    assert results_problem(s.outdir) is None
    table, prov = read_shard(os.path.join(s.outdir, "results.parquet"))
    assert len(table) == 4 and prov["experiment"] == "seal-toy" and prov["checks_sha256"].startswith("sha256:")
    (e,) = collect(str(tmp_path))
    assert e["problems"] == [] and len(e["checks"]) == 1


def test_an_edited_checks_json_is_reported_and_not_counted(tmp_path):
    s = _run(tmp_path, runs=3)
    path = os.path.join(s.outdir, "checks.json")
    checks = json.load(open(path))
    checks[0]["value"] = 4.0            # still valid JSON, still "passed": a silent edit without the seal
    open(path, "w").write(json.dumps(checks, indent=2))
    problem = results_problem(s.outdir)
    assert problem is not None and "checks.json changed after the run" in problem
    (e,) = collect(str(tmp_path))
    assert e["checks"] == [] and "checks.json changed after the run" in e["problems"][0]
    text = _report_md(tmp_path)
    assert "0 checks: 0 pass" in text and "checks.json changed after the run" in text


def test_a_flipped_bit_in_results_parquet_is_reported(tmp_path):
    s = _run(tmp_path)
    path = os.path.join(s.outdir, "results.parquet")
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) // 3] ^= 0x04
    open(path, "wb").write(bytes(raw))
    problem = results_problem(s.outdir)
    assert problem is not None and problem.startswith("results.parquet:")
    (e,) = collect(str(tmp_path))
    assert e["checks"] == [] and e["problems"]


def test_checks_left_from_an_earlier_run_are_not_shown_as_the_new_runs(tmp_path):
    s = _run(tmp_path)
    assert results_problem(s.outdir) is None
    try:
        _run(tmp_path, runs=5, fail_checks=True)     # stores its results, then its checks crash
    except RuntimeError:
        pass
    assert len(pd.read_parquet(os.path.join(s.outdir, "results.parquet"))) == 5   # the data are kept
    problem = results_problem(s.outdir)
    assert problem is not None and "not written for these results" in problem
    (e,) = collect(str(tmp_path))
    assert e["checks"] == []


def test_results_without_provenance_have_nothing_to_verify(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    (d / "results.parquet").write_bytes(shard_bytes(pd.DataFrame({"x": [1.0]})))   # attnsvm 0.2 wrote these
    (d / "checks.json").write_text("[]")
    assert results_problem(str(d)) is None
    (d / "results.parquet").write_bytes(b"PAR1" + b"\0" * 20 + b"PAR1")
    assert "results.parquet" in results_problem(str(d))
    assert issubclass(StorageError, OSError)
