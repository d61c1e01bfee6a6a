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


LAYERS = os.path.join(ROOT, "docs", "data", "probe_minilm_layers.csv")


@pytest.mark.parametrize("csv, layers", [(CSV, {3}), (LAYERS, {0, 1, 2, 4, 5})], ids=["L3", "other layers"])
def test_verdicts_follow_from_the_table(csv, layers):
    t = pd.read_csv(csv)
    assert set(t["layer"]) == layers and sorted(t["head"].unique()) == list(range(12))
    assert t.groupby("m").size().eq(12 * len(layers)).all()
    ok = t["svm_status"] == "optimal"
    # a head without a certified SVM has no verdict ("no SVM", no p-value); every other is certified
    assert (t.loc[~ok, "verdict"] == "no SVM").all() and (t.loc[ok, "verdict"] != "no SVM").all()
    assert (t.loc[ok, "svm_gap"] <= 1e-6).all()
    # "beyond null" exactly where BY's q of the upper tail is <= 0.05 (the verdict's own rule)
    beyond = t["verdict"] == "beyond null"
    assert (beyond == (t["q_upper"] <= 0.05)).all()
    assert (t.loc[beyond, "corr_restricted"] > t.loc[beyond, "null_mean"]).all()
    assert ((t.loc[ok, "corr_restricted"] >= -1) & (t.loc[ok, "corr_restricted"] <= 1)).all()
    # the stable verdict: the verdicts at the two largest m where they agree
    ms = sorted(t["m"].unique())[-2:]
    short = {"beyond null": "beyond", "below null": "below", "not distinguishable": "not distinguishable",
             "no SVM": "no SVM"}
    for key, g in t.groupby(["layer", "head"]):
        a, b = (g.loc[g["m"] == m, "verdict"].item() for m in ms)
        want = short.get(a, a) if a == b else "depends on sample size"
        assert set(g["stable_verdict"]) == {want}, key
    # a certified head has a p-value unless fewer than two of its nulls have an SVM, and then no verdict beyond
    # "not distinguishable", for that reason in words (layer 0: its sink nulls meet the same contradictions)
    p = ok & np.isfinite(t["p_upper"]) & np.isfinite(t["q_upper"])
    assert np.isfinite(t.loc[p, ["null_mean", "null_sd"]].to_numpy()).all()
    few = t[ok & ~p]
    assert (few["verdict"] == "not distinguishable").all() and (few["n_null"] < 2).all()
    if "verdict_reason" in t.columns:
        assert (few["verdict_reason"] == "too few certified null heads for a p-value").all()


def test_the_guide_shows_the_other_layers():
    """The guide's per-layer table is `probe_table.py --summary` of the committed table, and it states how the two
    codes that ran it agree (the provenance's measured agreement on the tasks both ran)."""
    text = open(os.path.join(ROOT, "docs", "guide", "probe.md"), encoding="utf-8").read()
    t = pd.read_csv(LAYERS)
    assert _script().summary(t) in text, "docs/guide/probe.md does not hold `python scripts/probe_table.py x " \
                                         "docs/data/probe_minilm_layers.csv --summary`"
    prov = json.load(open(os.path.splitext(LAYERS)[0] + ".json", encoding="utf-8"))
    agree = prov["agreement"]
    assert agree["tasks_compared"] > 0 and prov["mixed_code"]["reason"]
    worst = max(agree["max_abs_diff"].values())
    assert f"{agree['tasks_compared']} tasks" in text and f"largest difference {worst:.3g}" in text
    assert f"{len(prov['replaced']['only_in_later'])} of layer 0's 48 tasks failed" in text
    # the layer-0 table beside the contradiction counts: the solver's statuses are the committed table's
    for m, g in t[t["layer"] == 0].groupby("m"):
        assert f"| m = {m}: solver | " + " | ".join(g.sort_values("head")["svm_status"]) + " |" in text, m


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


@pytest.mark.parametrize("csv", [CSV, LAYERS], ids=["L3", "other layers"])
def test_the_per_layer_summary_counts_the_stable_verdicts(csv):
    """``--summary``: one row per layer, its counts of each stable verdict (from the table's own column) summing to
    its heads, and the heads named beyond/below are exactly those whose stable verdict says so."""
    t = pd.read_csv(csv)
    text = _script().summary(t)
    top = t[t["m"] == t["m"].max()]
    for layer, g in top.groupby("layer"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {layer} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        counts = [int(c) for c in cells[2:7]]
        vc = g["stable_verdict"].value_counts()
        assert counts == [int(vc.get(v, 0)) for v in ("beyond", "below", "not distinguishable",
                                                      "depends on sample size", "no SVM")]
        assert sum(counts) == len(g) == int(cells[1])
        named = [int(x.split(" ")[0][1:]) for x in cells[9].split(", ")] if cells[9] != "none" else []
        assert named == sorted(g.loc[g["stable_verdict"] == "beyond", "head"])
    # a table whose stable verdicts are all "not distinguishable" names no head
    flat = _script().summary(t.assign(stable_verdict="not distinguishable"))
    assert "| none | none |" in flat


def test_the_readme_counts_the_stably_beyond_heads_of_every_layer():
    """README item 6: the heads stably beyond the sink null in each of MiniLM's six layers, from both tables."""
    both = pd.concat([pd.read_csv(CSV), pd.read_csv(LAYERS)])
    top = both[both["m"] == both.groupby("layer")["m"].transform("max")]
    beyond = top[top["stable_verdict"] == "beyond"].groupby("layer").size().reindex(range(6), fill_value=0)
    readme = " ".join(open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().split())
    assert f"{beyond.sum()} of {len(top)} heads are stably beyond it" in readme
    words = {0: "none", 1: "one"}
    claim = (f"{beyond[1]} in layer 1, {beyond[2]} in layer 2, {beyond[3]} in layer 3, {beyond[4]} in layer 4, "
             f"{words.get(beyond[5], beyond[5])} in layer 5")
    assert claim in readme
    assert (top.loc[top["layer"] == 0, "verdict"] == "no SVM").all()
    assert "layer 0 has no SVM to compare with at 512 sentences" in readme
