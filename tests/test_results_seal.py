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
import pytest
from pydantic import PositiveInt

from attnsvm.experiments import Experiment, ExperimentConfig, Task, check
from attnsvm.report import collect, record_skipped, skipped_seal_warning, write_report
from attnsvm.runner import StorageError, read_shard, results_problem, results_seal, run_experiment, shard_bytes


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
    assert e["problems"] == [] and e["warnings"] == [] and len(e["checks"]) == 1
    assert results_seal(s.outdir) == (None, None) and prov["meta_sha256"].startswith("sha256:")
    assert "All checks pass" in _report_md(tmp_path).splitlines()[2]


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


# ------------------------------------------------------------------ the seal covers the folder's meaning (issue 43)
def _banner_of(out) -> str:
    return _report_md(out).splitlines()[2]


def test_checks_without_their_results_are_not_a_green_verdict(tmp_path):
    s = _run(tmp_path, runs=3)
    path = os.path.join(s.outdir, "checks.json")
    checks = json.load(open(path))
    checks[0].update(passed=True, verdict="pass", value=3.0)
    open(path, "w").write(json.dumps(checks))
    os.unlink(os.path.join(s.outdir, "results.parquet"))
    (e,) = collect(str(tmp_path))
    assert e["checks"] == [] and "results.parquet is missing" in e["problems"][0]
    banner = _banner_of(tmp_path)
    assert "All checks pass" not in banner and "FAILURES" in banner


def test_another_experiments_sealed_results_and_checks_are_refused(tmp_path):
    a = _run(tmp_path / "a", runs=3)
    b = _run(tmp_path / "b", runs=4)                  # the same experiment, another config
    other = tmp_path / "b" / "other-exp"
    os.rename(b.outdir, other)                         # a folder of another name holding seal-toy's results
    problem = results_problem(str(other))
    assert problem is not None and "sealed for experiment 'seal-toy', not 'other-exp'" in problem
    for name in ("results.parquet", "checks.json"):    # a's folder gets b's sealed results and checks
        open(os.path.join(a.outdir, name), "wb").write(open(os.path.join(other, name), "rb").read())
    problem = results_problem(a.outdir)
    assert problem is not None and "meta.json changed after the run" in problem
    (e,) = collect(str(tmp_path / "a"))
    assert e["checks"] == [] and e["problems"]


@pytest.mark.parametrize("edit", [{"preset": "full"}, {"runs": 6000}, {"explain": "all is proven"}])
def test_an_edited_meta_json_is_detected(tmp_path, edit):
    s = _run(tmp_path, runs=3)
    path = os.path.join(s.outdir, "meta.json")
    meta = json.load(open(path))
    meta.update(edit)
    open(path, "w").write(json.dumps(meta, indent=2))
    problem = results_problem(s.outdir)
    assert problem is not None and "meta.json changed after the run" in problem
    (e,) = collect(str(tmp_path))
    assert e["checks"] == [] and "meta.json changed after the run" in e["problems"][0]
    assert "FAILURES" in _banner_of(tmp_path)


def _reseal(expdir, **prov_edit):
    """Rewrite results.parquet as an earlier attnsvm sealed it: its provenance edited by ``prov_edit``
    (a value None removes the key)."""
    table, prov = read_shard(os.path.join(expdir, "results.parquet"))
    prov.update(prov_edit)
    prov = {k: v for k, v in prov.items() if v is not None}
    open(os.path.join(expdir, "results.parquet"), "wb").write(shard_bytes(table, prov))


def test_a_folder_sealed_before_meta_json_was_is_read_with_a_warning(tmp_path):
    s = _run(tmp_path, runs=3)
    _reseal(s.outdir, meta_sha256=None)                # the seal of the previous attnsvm: checks only
    assert results_seal(s.outdir) == (None, results_seal(s.outdir)[1])
    assert "before meta.json was" in results_seal(s.outdir)[1]
    (e,) = collect(str(tmp_path))
    assert len(e["checks"]) == 1 and e["problems"] == [] and "meta.json" in e["warnings"][0]
    text = _report_md(tmp_path)
    banner = text.splitlines()[2]
    assert "All checks pass" not in banner and "1 warning(s)" in banner and "shown unverified" in text
    # its seal still names its experiment and config: another run's results and checks copied in are refused
    meta = json.load(open(os.path.join(s.outdir, "meta.json")))
    _reseal(s.outdir, config_hash="sha256:0123456789abcdef")
    assert "sealed for config" in results_problem(s.outdir) and meta["config_hash"][:12] in results_problem(s.outdir)
    _reseal(s.outdir, experiment="tf-svm-rank", config_hash=meta["config_hash"])
    assert "sealed for experiment 'tf-svm-rank', not 'seal-toy'" in results_problem(s.outdir)


def test_results_without_provenance_are_reported_as_unverified(tmp_path):
    s = _run(tmp_path, runs=3)
    table, _ = read_shard(os.path.join(s.outdir, "results.parquet"))
    open(os.path.join(s.outdir, "results.parquet"), "wb").write(shard_bytes(table))
    problem, warning = results_seal(s.outdir)
    assert problem is None and "predates the seal" in warning
    assert "1 warning(s)" in _banner_of(tmp_path)


def test_a_meta_json_naming_another_experiment_is_a_problem(tmp_path):
    s = _run(tmp_path, runs=3)
    _reseal(s.outdir, meta_sha256=None)
    path = os.path.join(s.outdir, "meta.json")
    meta = json.load(open(path))
    meta["name"] = "tf-svm-rank"
    open(path, "w").write(json.dumps(meta))
    (e,) = collect(str(tmp_path))
    assert e["name"] == "seal-toy" and "names experiment 'tf-svm-rank'" in e["problems"][0]


def test_a_removed_meta_json_is_shown_not_skipped(tmp_path):
    s = _run(tmp_path, runs=3)
    os.unlink(os.path.join(s.outdir, "meta.json"))
    (e,) = collect(str(tmp_path))
    assert e["checks"] == [] and "meta.json is missing" in e["problems"][0]


def test_skipped_json_is_sealed(tmp_path):
    _run(tmp_path, runs=3)
    record_skipped(str(tmp_path), [{"name": "real-x", "title": "t", "reason": "needs transformers", "hint": "pip"}])
    assert skipped_seal_warning(str(tmp_path)) is None
    assert "warning" not in _banner_of(tmp_path)
    path = tmp_path / "skipped.json"
    path.write_text("[]")                              # the skipped experiment removed by hand: not a green report
    assert "skipped.json changed after the run" in skipped_seal_warning(str(tmp_path))
    banner = _banner_of(tmp_path)
    assert "All checks pass" not in banner and "1 warning(s)" in banner
    (tmp_path / "skipped.sha256").unlink()             # an earlier attnsvm wrote no seal
    assert "is not sealed" in skipped_seal_warning(str(tmp_path))
    path.unlink()
    assert skipped_seal_warning(str(tmp_path)) is None
    record_skipped(str(tmp_path), [])
    path.unlink()                                      # removed, its seal left
    assert "skipped.json was removed" in skipped_seal_warning(str(tmp_path))
