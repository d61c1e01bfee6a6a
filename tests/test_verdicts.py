"""Verdict framework: checks state their origin, statistical tolerances, findings, exit status, report order."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from click.testing import CliRunner

from attnsvm.cli import cli
from attnsvm.experiments import base, checks as checks_mod
from attnsvm.experiments.base import Experiment, ExperimentConfig, Task
from attnsvm.experiments.checks import (
    check, count_failures, load_findings, mark_findings, mean_check, share_check, share_difference_check,
)
from attnsvm.report import record_skipped, write_report

SRC = "test-spec.md 1.1"


# ------------------------------------------------------------------ check builders
def test_check_states_its_origin_and_nan_never_passes():
    c = check("claim", 0.5, ">=", 0.4, source=SRC, reason="spec's number")
    assert c.passed and c.source == SRC and c.threshold_reason == "spec's number" and c.threshold == ">= 0.4"
    assert not check("claim", float("nan"), ">=", 0.4, source=SRC, reason="r").passed
    assert not check("claim", 0.3, ">=", 0.4, source=SRC, reason="r").passed
    with pytest.raises(ValueError):
        check("claim", 1.0, "=>", 0.4, source=SRC, reason="r")


def test_check_requires_source_and_reason():
    with pytest.raises(ValueError, match="source"):
        check("claim", 1.0, ">=", 0.0, reason="r")
    with pytest.raises(ValueError, match="threshold_reason"):
        check("claim", 1.0, ">=", 0.0, source=SRC)


def test_share_check_binomial_tolerance_shrinks_with_runs():
    # the spec's share itself never fails; a share far below it fails at every run count
    for R in (10, 100, 1000):
        assert share_check("s", round(0.68 * R), R, ">=", 0.68, source=SRC).verdict != "fail"
        assert share_check("s", round(0.2 * R), R, ">=", 0.68, source=SRC).verdict == "fail"
    # 10 runs cannot tell 0.68 from 0.53: the pass is inconclusive; 1000 runs can
    weak = share_check("s", 7, 10, ">=", 0.68, source=SRC)
    assert weak.verdict == "inconclusive" and not weak.passed and weak.power < 0.8
    strong = share_check("s", 680, 1000, ">=", 0.68, source=SRC)
    assert strong.verdict == "pass" and strong.passed and strong.power > 0.99
    # 0.60 is within sampling error at 20 runs but not at 1000
    assert share_check("s", 12, 20, ">=", 0.68, source=SRC).verdict == "inconclusive"
    assert share_check("s", 600, 1000, ">=", 0.68, source=SRC).verdict == "fail"
    # a target of 1 tolerates no failure; "<=" and "~" mirror it
    assert not share_check("s", 99, 100, ">=", 1.0, source=SRC).passed
    assert share_check("s", 90, 100, "<=", 0.5, source=SRC).verdict == "fail"
    assert share_check("s", 140, 200, "~", 0.68, source=SRC).verdict == "pass"
    assert share_check("s", 190, 200, "~", 0.68, source=SRC).verdict == "fail"
    c = share_check("s", 0, 0, ">=", 0.5, source=SRC)
    assert not c.passed and c.verdict == "fail"
    assert "binomial" in share_check("s", 5, 10, ">=", 0.5, source=SRC).threshold_reason


def test_mean_check_and_difference():
    rng = __import__("numpy").random.default_rng(0)
    good = 0.995 + 0.002 * rng.standard_normal(50)
    kw = dict(source=SRC, sigma=0.002, effect=0.002, sigma_source="a unit test's planning value")
    assert mean_check("m", good, ">=", 0.99, **kw).verdict == "pass"
    # without a planning sigma the power is unknown: a pass is inconclusive, never a pass
    assert mean_check("m", good, ">=", 0.99, source=SRC).verdict == "inconclusive"
    assert mean_check("m", good - 0.1, ">=", 0.99, **kw).verdict == "fail"
    assert not mean_check("m", [1.0, float("nan")], ">=", 0.5, **kw).passed
    kw = dict(source=SRC, sigma=0.001, effect=0.01)
    assert mean_check("m", [0.01, 0.012, 0.011], "<=", 0.02, **kw).verdict == "pass"
    assert mean_check("m", [0.05, 0.06, 0.055], "<=", 0.02, **kw).verdict == "fail"
    assert share_difference_check("d", 90, 100, 40, 100, ">=", 0.4, source=SRC, p1=0.5, p2=0.4).verdict == "pass"
    assert share_difference_check("d", 50, 100, 45, 100, ">=", 0.4, source=SRC, p1=0.5, p2=0.4).verdict == "fail"
    assert share_difference_check("d", 90, 100, 40, 100, ">=", 0.4, source=SRC).verdict == "inconclusive"


# ------------------------------------------------------------------ findings
def test_findings_file_parses_and_marks(tmp_path, monkeypatch):
    f = tmp_path / "findings.txt"
    f.write_text("# comment\nexp-a | claim one | full | measured: 0.94 over 1000 runs; independently: 0.95 with "
                 "another solver; paper: \"about 0.9\" (Sec. 1)\n")
    found = load_findings(str(f))
    assert [(x.experiment, x.check, x.preset) for x in found] == [("exp-a", "claim one", "full")]
    cs = [{"name": "claim one", "passed": False}, {"name": "claim two", "passed": False}]
    marked = mark_findings("exp-a", cs, "full", found)
    assert marked[0]["finding"] and not marked[1]["finding"]
    assert [c["verdict"] for c in marked] == ["finding", "fail"]
    assert count_failures(marked) == (1, 1)
    # an inconclusive check is neither a fail nor a finding, even when listed
    inc = mark_findings("exp-a", [{"name": "claim one", "passed": False, "verdict": "inconclusive"}], "full", found)
    assert inc[0]["verdict"] == "inconclusive" and not inc[0]["finding"] and count_failures(inc) == (0, 0)
    # the finding covers only its preset (custom runs get every finding)
    assert not mark_findings("exp-a", cs, "quick", found)[0]["finding"]
    assert mark_findings("exp-a", cs, "custom", found)[0]["finding"]
    # a listed finding that passes is flagged as resolved, not hidden
    res = mark_findings("exp-a", [{"name": "claim one", "passed": True}], "full", found)[0]
    assert res["finding_resolved"] and not res["finding"]
    bad = tmp_path / "bad.txt"
    bad.write_text("exp-a | claim | sometimes | reason\n")
    with pytest.raises(ValueError, match="expected"):
        load_findings(str(bad))
    # an unvetted finding (one measurement, no paper words) is refused
    bad.write_text("exp-a | claim | full | measured 0.94 over 1000 runs\n")
    with pytest.raises(ValueError, match="vetted"):
        load_findings(str(bad))


def test_shipped_findings_file_is_valid():
    from attnsvm.experiments import registry

    reg = registry()
    for f in load_findings():
        assert f.experiment in reg, f"findings.txt names an unknown experiment {f.experiment!r}"
        assert len(f.reason) > 20, "a finding states its evidence"


# ------------------------------------------------------------------ exit status and report
class _Cfg(ExperimentConfig):
    value: float = 1.0
    bound: float = 0.5


class _Dummy(Experiment):
    name = "zz-test-verdict"
    title = "dummy experiment for the verdict tests"
    Config = _Cfg
    quick = {"value": 1.0}

    def tasks(self, config):
        return [Task("t0", 1, {"seeds": [0]})]

    def run_task(self, config, task):
        return pd.DataFrame({"value": [config.value]})

    def checks(self, config, table):
        return [check("value is at least the bound", table["value"].iloc[0], ">=", config.bound,
                      source=SRC, reason="the test's number")]

    def deviations(self, config):
        return [{"spec": "100 runs", "here": "1 run", "reason": "a unit test"}]


class _NoChecks(_Dummy):
    name = "zz-test-nochecks"

    def checks(self, config, table):
        return []


@pytest.fixture
def dummies(monkeypatch):
    reg = dict(base._REGISTRY)
    reg[_Dummy.name] = _Dummy()
    reg[_NoChecks.name] = _NoChecks()
    monkeypatch.setattr(base, "_REGISTRY", reg)
    yield


def _run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_failed_check_exits_1_and_tops_the_report(dummies, tmp_path):
    out = str(tmp_path / "res")
    r = _run(["run", "zz-test-verdict", "--set", "value=0.1", "--out", out])
    assert r.exit_code == 1
    assert "1 checks: 0 pass, 1 fail, 0 inconclusive, 0 findings, 0 experiments skipped" in r.output
    page = open(os.path.join(out, "report.html")).read()
    assert page.index("Failed checks") < page.index("<h2 id='summary'>Summary")
    assert "test-spec.md 1.1" in page and "the test&#x27;s number" in page
    assert "Deviations" in page and "a unit test" in page
    r = _run(["run", "zz-test-verdict", "--set", "value=0.1", "--out", out, "--allow-failures"])
    assert r.exit_code == 0
    r = _run(["run", "zz-test-verdict", "--set", "value=2", "--out", out])
    assert r.exit_code == 0 and "1 checks: 1 pass, 0 fail" in r.output


def test_listed_finding_does_not_fail_the_run(dummies, tmp_path, monkeypatch):
    f = tmp_path / "findings.txt"
    f.write_text("zz-test-verdict | value is at least the bound | any | the spec's bound is wrong: measured: 0.1; "
                 "independently: 0.1 by hand; paper: \"the bound\" (Sec. 1)\n")
    monkeypatch.setattr(checks_mod, "FINDINGS_FILE", str(f))
    out = str(tmp_path / "res")
    r = _run(["run", "zz-test-verdict", "--set", "value=0.1", "--out", out])
    assert r.exit_code == 0, r.output
    assert "1 checks: 0 pass, 0 fail, 0 inconclusive, 1 findings, 0 experiments skipped" in r.output
    page = open(os.path.join(out, "report.html")).read()
    assert "Findings" in page and "the spec&#x27;s bound is wrong" in page
    assert "No unexpected failures" in page and "All checks pass" not in page
    stored = json.load(open(os.path.join(out, "zz-test-verdict", "checks.json")))
    assert stored[0]["finding"] and not stored[0]["passed"] and stored[0]["verdict"] == "finding"


def test_no_checks_and_skipped_are_shown(dummies, tmp_path):
    out = str(tmp_path / "res")
    assert _run(["run", "zz-test-nochecks", "--out", out]).exit_code == 0
    record_skipped(out, [{"name": "real-x", "title": "t", "reason": "needs transformers, which is not installed",
                          "hint": "pip install 'attnsvm[real]'"}])
    html_path, md_path = write_report(out)
    page = open(html_path).read()
    assert "no checks" in page
    assert "Skipped experiments" in page and "pip install &#x27;attnsvm[real]&#x27;" in page
    assert "1 experiments skipped" in page
    # an experiment that later runs leaves the skipped list
    record_skipped(out, [], ran=["real-x"])
    assert "Skipped experiments" not in open(write_report(out)[0]).read()


def test_corrupt_checks_json_does_not_break_the_report(dummies, tmp_path):
    out = str(tmp_path / "res")
    _run(["run", "zz-test-verdict", "--out", out])
    _run(["run", "zz-test-nochecks", "--out", out])
    with open(os.path.join(out, "zz-test-nochecks", "checks.json"), "w") as fh:
        fh.write("{not json")
    with open(os.path.join(out, "zz-test-verdict", "meta.json"), "wb") as fh:
        fh.write(b"\xff\xfe\x00garbage")
    page = open(write_report(out)[0]).read()
    assert "Unreadable results" in page and "checks.json is unreadable" in page and "meta.json" in page
    assert "FAILURES" in page
