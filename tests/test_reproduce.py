"""The main job: every registered experiment's quick preset, its checks, the report; CLI errors."""

import json
import os

import pandas as pd
import pytest
from conftest import attnsvm_cli

from attnsvm.experiments import build_config, registry

from attnsvm.runner import run_experiment
from attnsvm.experiments.checks import KINDS, load_findings


@pytest.fixture(scope="module")
def quick_results(quick_reproduce, quick_out):
    _, r = quick_reproduce
    # experiments whose optional extra is missing are named as skipped, never silently dropped
    for name, exp in registry().items():
        if exp.missing():
            assert f"{name}: skipped, needs" in r.stderr
    return quick_out


def test_every_experiment_runs_quick_and_passes_its_checks(quick_results):
    names = [name for name, exp in registry().items() if not exp.missing()]
    assert len(names) >= 16
    for name in names:
        expdir = quick_results / name
        for f in ("results.parquet", "checks.json", "config.yaml", "meta.json"):
            assert (expdir / f).exists(), (name, f)
        checks = json.loads((expdir / "checks.json").read_text())
        assert checks, f"{name} states no checks"
        failed = [c for c in checks if not c["passed"] and not c.get("finding")]
        assert not failed, (name, failed)
        for c in checks:
            # every verdict says where its claim and its threshold come from
            assert c.get("source", "").strip() and c.get("threshold_reason", "").strip(), (name, c["name"])
            assert c.get("kind") in KINDS, (name, c["name"], c.get("kind"))
        assert not pd.read_parquet(expdir / "results.parquet").empty
        pngs = [p for p in os.listdir(expdir) if p.endswith(".png")]
        pdfs = [p for p in os.listdir(expdir) if p.endswith(".pdf")]
        assert pngs and len(pngs) == len(pdfs), name


def test_listed_findings_still_fail(quick_results):
    """A finding is a spec target that measurement contradicts: it must keep failing (or be removed from the list)."""
    for f in load_findings():
        if f.preset == "full" or registry()[f.experiment].missing():
            continue
        checks = json.loads((quick_results / f.experiment / "checks.json").read_text())
        match = [c for c in checks if c["name"] == f.check]
        assert match, f"findings.txt names a check that {f.experiment} no longer states: {f.check!r}"
        assert not match[0]["passed"] and match[0]["finding"], (f.experiment, f.check, "finding now passes")


def test_report_lists_every_experiment_and_check(quick_results):
    html = (quick_results / "report.html").read_text()
    md = (quick_results / "report.md").read_text()
    for name in [name for name, exp in registry().items() if not exp.missing()]:
        assert name in html and name in md
        for c in json.loads((quick_results / name / "checks.json").read_text()):
            assert c["name"].replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;") in html or c["name"] in md
    assert "torch" in html and "Environment" in html


def test_rerun_resumes_without_recomputing(quick_results):
    r = attnsvm_cli("run", "tf-feasibility", "--quick", "--out", str(quick_results))
    assert r.returncode == 0, r.stderr
    assert "0 computed" in r.stdout and "failed" in r.stdout


def test_dask_local_cluster_on_a_real_experiment(tmp_path):
    exp = registry()["tf-feasibility"]
    cfg = build_config(exp, quick=True)
    serial = run_experiment(exp, cfg, str(tmp_path / "serial"), progress=False)
    dask = run_experiment(exp, cfg, str(tmp_path / "dask"), workers=2, progress=False)
    assert serial.ok and dask.ok and dask.computed == serial.tasks
    key = ["n", "T", "d", "seed"]
    a = pd.read_parquet(tmp_path / "serial" / "tf-feasibility" / "results.parquet").drop(columns="task").sort_values(key)
    b = pd.read_parquet(tmp_path / "dask" / "tf-feasibility" / "results.parquet").drop(columns="task").sort_values(key)
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))


@pytest.mark.parametrize("args, match", [
    (["run", "tf-local-convergence", "--quick", "--set", "bogus=1"], "unknown config key"),
    (["run", "tf-local-convergence", "--quick", "--set", "runs=-5"], "runs"),
    (["run", "tf-local-convergence", "--quick", "--set", "lr=fast"], "lr"),
    (["run", "no-such-experiment"], "unknown experiment"),
    (["run", "tf-feasibility", "--config", "missing.yaml"], "no such config file"),
    (["report", "empty"], "no experiment results"),
])
def test_bad_configs_give_one_line_errors(tmp_path, args, match):
    (tmp_path / "empty").mkdir()
    r = attnsvm_cli(*args, cwd=tmp_path, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and match in lines[0], r.stderr


def test_list_names_every_experiment():
    r = attnsvm_cli("list", timeout=120)
    assert r.returncode == 0
    for name in ("tf-trajectories", "tf-local-convergence", "tf-svm-rank", "tf-convergence-types", "tf-multi-token",
                 "tf-lambda-head", "tf-seq-causal", "tf-feasibility", "mm-single-input", "mm-multi-input", "mm-joint",
                 "mm-loss-functions", "mm-regularization-path", "lm-cosine", "lm-margins", "lm-stability",
                 "real-digits", "real-minilm-embeddings", "real-minilm-heads"):
        assert name in r.stdout
