"""lm-margins' per-run claims on the non-support gradient (issue 40): a sign test over runs per late decade, a binomial
test of "at most half its X(0) value", and the largest non-support coefficient against the largest support one, on
the Markov default and on the cycle language. Judged on the stored quick table (tests/data/quick, no experiment runs
here) and on copies of it grown to the full preset's run count."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from attnsvm.experiments import build_config, registry
from attnsvm.experiments.claims import full_power

DATA = os.path.join(os.path.dirname(__file__), "data", "quick", "lm-margins.parquet")
EXP = registry()["lm-margins"]
LANGS = ("Markov default", "cycle language")


@pytest.fixture(scope="module")
def table():
    return pd.read_parquet(DATA)


def _checks(cfg, table) -> dict:
    return {c.name: c for c in EXP.checks(cfg, table)}


def _one(checks: dict, start: str):
    got = [c for n, c in checks.items() if n.startswith(start)]
    assert len(got) == 1, (start, sorted(checks))
    return got[0]


def _grow(table, runs: int) -> pd.DataFrame:
    """The quick table's runs repeated (new run ids) up to ``runs`` runs per language: the full preset's count."""
    per = int(table["run"].max()) + 1
    parts = [table.assign(run=table["run"] + k * per) for k in range(-(-runs // per))]
    out = pd.concat(parts, ignore_index=True)
    return out[out["run"] < runs].reset_index(drop=True)


def _swap(table, col, a, b, lang=None):
    """``col`` exchanged between steps ``a`` and ``b`` in every run (of language ``lang``, default both)."""
    t = table.copy()
    summ = (t["record"] == "summary") & (t["language"] == lang if lang else True)
    ia = t.index[summ & (t["step"] == a)]
    ib = t.index[summ & (t["step"] == b)]
    va, vb = t.loc[ia, col].to_numpy().copy(), t.loc[ib, col].to_numpy().copy()
    t.loc[ia, col], t.loc[ib, col] = vb, va
    return t


def test_the_floor_is_gone_and_the_per_run_claims_cover_both_languages(table):
    cfg = build_config(EXP, quick=True)
    checks = _checks(cfg, table)
    assert not any("below 0.05" in n for n in checks)
    for what in LANGS:
        for start in (f"C2 ({what}): the non-support pairs' share of the gradient mass falls over the decade 3 -> 30 ",
                      f"C2 ({what}): the non-support pairs' share of the gradient mass falls over the decade 30 -> 300 ",
                      f"C2 ({what}): the non-support pairs' share of the gradient mass at step K is at most half",
                      f"C2 ({what}): the largest non-support coefficient shrinks"):
            c = _one(checks, start)
            assert c.claim_is == "alternative" and c.power is not None and c.power_inputs
            assert "zero gradients" in c.threshold_reason and "Sec. 1" in c.threshold_reason
            assert c.verdict in ("pass", "inconclusive"), (c.name, c.verdict)
            assert c.verdict != "pass" or c.p_value <= 0.01
    # the cycle language, where Theorem 3.14's assumption holds: every per-run claim passes at the quick preset
    assert all(c.verdict == "pass" for n, c in checks.items() if n.startswith("C2 (cycle language)"))


def test_every_per_run_claim_has_power_at_the_full_preset(table):
    """Power >= 0.8 at the full preset's run count (130 per language), computed from the check's own power inputs."""
    cfg = build_config(EXP, quick=True)
    full = build_config(EXP, quick=False)
    assert full.runs == full.cycle_runs == 130
    for c in EXP.checks(cfg, table):
        if c.power is not None:
            p, what = full_power("lm-margins", c.to_dict())
            assert p is not None and p >= 0.8, (c.name, p, what)


def test_the_per_run_claims_fail_at_the_full_preset_size(table):
    """At 130 runs a reversed decade, an unchanged share and a growing coefficient ratio are fails, not
    inconclusive: the checks can fail where the claims are decided."""
    cfg = build_config(EXP, quick=True).model_copy(update={"runs": 130, "cycle_runs": 130})
    big = _grow(table, 130)
    clean = _checks(cfg, big)
    for what in LANGS:
        assert _one(clean, f"C2 ({what}): the non-support pairs' share of the gradient mass falls over the decade "
                           "30 -> 300 ").verdict == "pass"
    for lang, what in (("markov", "Markov default"), ("cycle", "cycle language")):
        rev = _checks(cfg, _swap(big, "grad_frac_nonsupport", 30, 300, lang))
        c = _one(rev, f"C2 ({what}): the non-support pairs' share of the gradient mass falls over the decade 30 -> 300 ")
        assert c.verdict == "fail" and c.power >= 0.8, (c.verdict, c.power)
        same = big.copy()
        summ = (same["record"] == "summary") & (same["language"] == lang)
        start = same[summ & (same["step"] == 0)].set_index("run")["grad_frac_nonsupport"]
        same.loc[summ, "grad_frac_nonsupport"] = same.loc[summ, "run"].map(start).to_numpy()
        c = _one(_checks(cfg, same), f"C2 ({what}): the non-support pairs' share of the gradient mass at step K is "
                                     "at most half")
        assert c.verdict == "fail" and c.power >= 0.8
        grow = _checks(cfg, _swap(big, "coef_max_nonsupport", 30, 300, lang))
        assert _one(grow, f"C2 ({what}): the largest non-support coefficient shrinks").verdict == "fail"


def test_the_markov_runs_whose_share_rises_are_named(table):
    cfg = build_config(EXP, quick=True)
    t = table.copy()
    sel = (t["record"] == "summary") & (t["language"] == "markov") & (t["run"] == 2) & (t["step"] == 300)
    t.loc[sel, "grad_frac_nonsupport"] = 0.9
    c = _one(_checks(cfg, t), "C2 (Markov default): the non-support pairs' share of the gradient mass falls over the "
                              "decade 30 -> 300 ")
    rises = c.detail.split("runs whose share rises: ")[1]
    assert "2" in rises.split("]")[0].strip("[").replace(" ", "").split(",")
    assert "30 -> 300:" in EXP.explain(cfg, t) and "runs [" in EXP.explain(cfg, t)


def test_missing_cycle_runs_fail_their_claims(table):
    cfg = build_config(EXP, quick=True)
    checks = _checks(cfg, table[table["language"] != "cycle"])
    assert _one(checks, "C2 (cycle language): the largest non-support coefficient shrinks").verdict == "fail"
    assert not _one(checks, "C2 (cycle language): the non-support pairs' share of the gradient mass at step K").passed
    assert _one(checks, "C2: every soft-margin SVM used is certified").verdict == "fail"


def test_a_run_without_non_support_rows_is_left_out_and_counted(table):
    cfg = build_config(EXP, quick=True)
    c = _one(_checks(cfg, table), "C2 (Markov default): the largest non-support coefficient shrinks")
    s = table[(table["record"] == "summary") & (table["language"] == "markov") & (table["step"] == 0)]
    empty = int((s["n_support"] >= s["n_rows"]).sum())
    assert empty >= 1 and f"{empty} runs without a non-support row left out" in c.detail
    assert np.isfinite(c.value)
