"""The committed at-scale probe table (docs/data/probe_minilm_L3.csv, issue 39) is what the docs cite: the guide's
tables are this table's (scripts/probe_table.py --markdown), its provenance names the frozen commit, the model
digest and the command, and its verdicts follow from its own numbers."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSV = os.path.join(ROOT, "docs", "data", "probe_minilm_L3.csv")
pytestmark = pytest.mark.skipif(not os.path.exists(CSV), reason="no committed at-scale table")


def _script():
    spec = importlib.util.spec_from_file_location("probe_table", os.path.join(ROOT, "scripts", "probe_table.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_guide_shows_the_committed_table():
    text = open(os.path.join(ROOT, "docs", "guide", "probe.md"), encoding="utf-8").read()
    tables = _script().markdown(pd.read_csv(CSV))
    assert tables in text, "docs/guide/probe.md does not hold `python scripts/probe_table.py x " \
                           "docs/data/probe_minilm_L3.csv --markdown`"


def test_provenance_names_commit_model_and_command():
    prov = json.load(open(os.path.splitext(CSV)[0] + ".json", encoding="utf-8"))
    assert len(prov["commit"]) == 40 and prov["command"].startswith("bash scripts/probe_at_scale.sh")
    assert [i["model"].startswith("sha256:") for i in prov["inputs"]] == [True]
    assert prov["rows"] == len(pd.read_csv(CSV)) and prov["task_seconds"]


def test_verdicts_follow_from_the_table():
    t = pd.read_csv(CSV)
    assert set(t["layer"]) == {3} and sorted(t["head"].unique()) == list(range(12))
    assert t.groupby("m").size().eq(12).all()
    ok = t["svm_status"] == "optimal"
    assert ok.all() and (t["svm_gap"] <= 1e-6).all()
    # "beyond null" exactly where BY's q of the upper tail is <= 0.05 (the verdict's own rule)
    beyond = t["verdict"] == "beyond null"
    assert (beyond == (t["q_upper"] <= 0.05)).all()
    assert (t.loc[beyond, "corr_restricted"] > t.loc[beyond, "null_mean"]).all()
    assert ((t["corr_restricted"] >= -1) & (t["corr_restricted"] <= 1)).all()
    # the stable verdict: the verdicts at the two largest m where they agree
    ms = sorted(t["m"].unique())[-2:]
    short = {"beyond null": "beyond", "below null": "below", "not distinguishable": "not distinguishable"}
    for head, g in t.groupby("head"):
        a, b = (g.loc[g["m"] == m, "verdict"].item() for m in ms)
        want = short.get(a, a) if a == b else "depends on sample size"
        assert set(g["stable_verdict"]) == {want}, head
    assert np.isfinite(t[["null_mean", "null_sd", "p_upper", "q_upper"]].to_numpy()).all()


def test_the_guide_shows_the_query_draws_table():
    q = pd.read_csv(os.path.join(ROOT, "docs", "data", "probe_minilm_L3_query_draws.csv"))
    text = open(os.path.join(ROOT, "docs", "guide", "probe.md"), encoding="utf-8").read()
    assert sorted(q["head"]) == list(range(12)) and set(q["m"]) == {1000}
    np.testing.assert_allclose(q["diff"], q["corr_restricted_b"] - q["corr_restricted_a"], atol=1e-6)
    for col in ("corr_restricted_a", "corr_restricted_b"):
        assert " | ".join(f"{v:.3f}" for v in q[col]) in text, col
    assert f"at most {q['diff'].abs().max():.4f}" in text
    prov = json.load(open(os.path.join(ROOT, "docs", "data", "probe_minilm_L3_query_draws.json"), encoding="utf-8"))
    assert prov["runs"]["a"]["query_seed"] != prov["runs"]["b"]["query_seed"] and len(prov["commit"]) == 40


def test_the_per_layer_summary_counts_the_stable_verdicts():
    """``--summary``: one row per layer, its counts of each stable verdict (from the table's own column) summing to
    its heads, and the heads named beyond/below are exactly those whose stable verdict says so."""
    t = pd.read_csv(CSV)
    text = _script().summary(t)
    top = t[t["m"] == t["m"].max()]
    for layer, g in top.groupby("layer"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {layer} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        counts = [int(c) for c in cells[2:6]]
        vc = g["stable_verdict"].value_counts()
        assert counts == [int(vc.get(v, 0)) for v in ("beyond", "below", "not distinguishable",
                                                      "depends on sample size")]
        assert sum(counts) + int(vc.get("no SVM", 0)) == len(g) == int(cells[1])
        named = [int(x.split(" ")[0][1:]) for x in cells[8].split(", ")] if cells[8] != "none" else []
        assert named == sorted(g.loc[g["stable_verdict"] == "beyond", "head"])
    # a table whose stable verdicts are all "not distinguishable" names no head
    flat = _script().summary(t.assign(stable_verdict="not distinguishable"))
    assert "| none | none |" in flat
