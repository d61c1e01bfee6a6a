"""Every verdict of the lm-* experiments can fail: corrupted result tables fail the matching check.

A module fixture runs each quick preset once; the tests feed ``experiment.checks`` copies of the
results table that violate one claim each (swapped columns or checkpoints, the attentions'
labels exchanged, a random direction's fit in place of the SVM's, an estimate above the bound,
an uncertified solve, pure noise) and assert that the matching check fails. Every check name of
every experiment is covered; the findings of findings.txt still fail on the real tables and pass
on a table that satisfies their claim.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from attnsvm.experiments import build_config, registry

from attnsvm.runner import run_experiment
from attnsvm.experiments.checks import KINDS, load_findings

LM_NAMES = ["lm-cosine", "lm-margins", "lm-stability"]
#: columns that identify a row (kept when the measured numbers are replaced by noise)
KEYS = {"m", "n", "d", "run", "step", "scale", "radius", "eta", "seq", "query", "token"}


@pytest.fixture(scope="module")
def runs(quick_out):
    """name -> (experiment, quick config, summary, results table, output folder)."""
    out = {}
    base = quick_out
    for name in LM_NAMES:
        exp = registry()[name]
        cfg = build_config(exp, quick=True)
        summary = run_experiment(exp, cfg, str(base), progress=False)
        table = pd.read_parquet(base / name / "results.parquet")
        out[name] = (exp, cfg, summary, table, base / name)
    return out


def _verdicts(exp, cfg, table) -> dict[str, bool]:
    cs = exp.checks(cfg, table)
    names = [c.name for c in cs]
    assert len(names) == len(set(names)), "check names must be unique"
    return {c.name: c.passed for c in cs}


# ------------------------------------------------------------------ the real tables


@pytest.mark.parametrize("name", LM_NAMES)
def test_quick_preset_passes_every_non_finding_check(runs, name):
    exp, cfg, summary, table, expdir = runs[name]
    assert not summary.failed, summary.failed
    assert not summary.failed_checks, [(c["name"], c["value"], c["threshold"]) for c in summary.failed_checks]
    listed = {f.check for f in load_findings() if f.experiment == name and f.applies("quick")}
    names = {c["name"] for c in summary.checks}
    assert listed <= names, f"findings name checks that do not exist: {listed - names}"
    for c in summary.checks:
        assert c["source"].strip() and c["threshold_reason"].strip(), c["name"]
        assert c["kind"] in KINDS
        assert "causal-language-modeling.md" in c["spec_ref"] or c["kind"] == "integrity", c["name"]
        assert "On the similarity between attention and SVM" in c["source"] or c["kind"] == "integrity", c["name"]
        if c["name"] in listed:
            assert not c["passed"], f"finding no longer holds: {c['name']}"
    assert len(summary.checks) >= 5
    files = os.listdir(expdir)
    assert any(f.endswith(".png") for f in files) and any(f.endswith(".pdf") for f in files)
    meta = json.loads((expdir / "meta.json").read_text())
    assert meta["explain"]
    devs = meta["deviations"]
    assert devs and all(set(d) == {"spec", "here", "reason"} for d in devs)
    assert any("quick preset" in d["reason"] for d in devs), "the quick preset is a deviation"
    assert not exp.deviations(build_config(exp)) or all("quick preset" not in d["reason"]
                                                        for d in exp.deviations(build_config(exp)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # log10 of negative noise: NaN, which fails the check
@pytest.mark.parametrize("name", LM_NAMES)
def test_noise_fails_every_check(runs, name):
    """The outside audit: every measured number (and flag) replaced by noise passes no check."""
    exp, cfg, _, table, _ = runs[name]
    for keep in (True, False):
        rng = np.random.default_rng(0)
        noisy = table.copy()
        for col in noisy.columns:
            if keep and col in KEYS:
                continue
            if pd.api.types.is_bool_dtype(noisy[col]):
                noisy[col] = rng.random(len(noisy)) < 0.5
            elif pd.api.types.is_numeric_dtype(noisy[col]):
                noisy[col] = rng.standard_normal(len(noisy))
        passed = [n for n, ok in _verdicts(exp, cfg, noisy).items() if ok]
        assert not passed, (keep, passed)


# ------------------------------------------------------------------ targeted corruptions


def _rows(t, **where):
    m = np.ones(len(t), bool)
    for col, val in where.items():
        m &= (t[col] == val).to_numpy()
    assert m.any(), f"no row matches {where}"
    return m


def swap_steps(col, a_of, b_of, record="train", by=("m", "n", "d", "run")):
    """Corruption: exchange ``col`` between the checkpoints ``a_of(K)`` and ``b_of(K)`` of every run."""
    def f(t):
        t = t.copy()
        rec = t["record"] == record
        for _, g in t[rec].groupby(list(by)):
            steps = np.sort(g["step"].unique())
            sa = steps[np.argmin(np.abs(steps - a_of(steps[-1])))]
            sb = steps[np.argmin(np.abs(steps - b_of(steps[-1])))]
            ia, ib = g.index[g["step"] == sa], g.index[g["step"] == sb]
            va, vb = t.loc[ia, col].to_numpy().copy(), t.loc[ib, col].to_numpy().copy()
            t.loc[ia, col], t.loc[ib, col] = vb, va
        return t
    return f


def swap_cols(a, b, **where):
    def f(t):
        t = t.copy()
        m = _rows(t, **where)
        va, vb = t.loc[m, a].to_numpy().copy(), t.loc[m, b].to_numpy().copy()
        t.loc[m, a], t.loc[m, b] = vb, va
        return t
    return f


def setv(col, fn, **where):
    """Corruption: ``col = fn(rows)`` on the rows matching ``where``."""
    def f(t):
        t = t.copy()
        m = _rows(t, **where)
        t.loc[m, col] = fn(t.loc[m])
        return t
    return f


def swap_attention(**where):
    """Corruption: softmax and linear attention exchange their rows."""
    def f(t):
        t = t.copy()
        m = _rows(t, **where)
        t.loc[m, "attention"] = t.loc[m, "attention"].map({"softmax": "linear", "linear": "softmax"})
        return t
    return f


def first_row(col, value, **where):
    def f(t):
        t = t.copy()
        idx = t.index[_rows(t, **where)][0]
        t.loc[idx, col] = value
        return t
    return f


CORRUPT = {
    "lm-cosine": {
        # X(0) and the final iterate exchanged: the similarity falls instead of rising
        "C1: the similarity to the soft-margin SVM rises": swap_steps("cos", lambda K: K, lambda K: 0),
        # a low final similarity (0.3 in every run) is not above the floor 0.5
        "C1: the final similarity to the soft-margin SVM is above 0.5": setv("cos", lambda r: r["cos"] * 0 + 0.3,
                                                                             record="train"),
        # the soft-margin SVM's cosine in place of the Gen-SVM form's
        "C1: W_fin + R W_svm": swap_cols("cos_eq", "cos", record="train"),
        # the random direction's fit in place of the SVM's
        "C1: the Gen-SVM direction": swap_cols("cos_eq", "cos_rand_eq", record="train"),
        # one soft-margin SVM with a duality gap above the certificate's bound
        "C1: every SVM used is certified": first_row("svm_gap", 1e-3, record="svm"),
        # one cycle-language run whose non-optimal scores do not tie
        "C1 (Theorem 3.15): the cycle language meets": first_row("max_spread", 1e-3, record="cycle_svm"),
        # the last decade reversed: the cosine with X^mm at step K exchanged with that at step 100
        "C1 (Theorem 3.15, cycle language): the cosine with the hard-margin SVM X^mm rises": swap_steps(
            "cos_hard", lambda K: K, lambda K: 100, record="cycle_train"),
        # ||X(k)|| at step K exchanged with that at step 100: the norm falls over the last decade
        "C1 (Theorem 3.15, cycle language): ||X(k)||_F rises": swap_steps("norm", lambda K: K, lambda K: 100,
                                                                          record="cycle_train"),
        # the integrity partners: cosines left as raw inner products (about ||W|| ||W_svm|| times the cosine)
        **{f"{what} ({col}) lies in [-1, 1]": (lambda t, col=col: t.assign(**{col: t[col] * 50.0}))
           for col, what in (("cos", "cosine with the soft-margin SVM"), ("cos_eq", "cosine of W_fin + R W_svm"),
                             ("cos_rand_eq", "cosine of W_fin + R' W_rand"),
                             ("cos_hard", "cosine with the hard-margin SVM"))},
    },
    "lm-margins": {
        "C2: the median normalized margin": swap_steps("median_margin", lambda K: K, lambda K: 0, "summary", ("run",)),
        "C2: the share of positive margins": swap_steps("frac_positive", lambda K: K, lambda K: 0, "summary", ("run",)),
        "C2: the non-support pairs' share of the gradient mass falls":
            swap_steps("grad_frac_nonsupport", lambda K: K, lambda K: 0, "summary", ("run",)),
        "C2: at step K the non-support pairs carry less": swap_cols("grad_frac_nonsupport", "nonsupport_row_share",
                                                                   record="summary"),
        # the last decade reversed: the share rises from K/10 to K
        "C2: the non-support pairs' share of the gradient mass keeps falling":
            swap_steps("grad_frac_nonsupport", lambda K: K, lambda K: K // 10, "summary", ("run",)),
        # the per-run claims, on both languages (quick preset: K = 300, decades 3 -> 30 -> 300): a decade reversed
        # (the share rises from its start to its end in every run that fell), the start and the last step exchanged,
        # the largest non-support coefficient at K/10 and at K exchanged
        **{f"C2 ({what}): the non-support pairs' share of the gradient mass falls over the decade {a} -> {b} ":
           swap_steps("grad_frac_nonsupport", lambda K, a=a: a, lambda K, b=b: b, "summary", ("language", "run"))
           for what in ("Markov default", "cycle language") for a, b in ((3, 30), (30, 300))},
        **{f"C2 ({what}): the non-support pairs' share of the gradient mass at step K is at most half":
           swap_steps("grad_frac_nonsupport", lambda K: K, lambda K: 0, "summary", ("language", "run"))
           for what in ("Markov default", "cycle language")},
        **{f"C2 ({what}): the largest non-support coefficient shrinks":
           swap_steps("coef_max_nonsupport", lambda K: K, lambda K: K // 10, "summary", ("language", "run"))
           for what in ("Markov default", "cycle language")},
        # the start margin as large as the final one
        "C2: the mean margin at the start is near 0": swap_steps("median_margin", lambda K: 0, lambda K: K, "summary",
                                                                 ("run",)),
        # one run ending with a negative margin
        "C2: every run's final margin is positive": setv("median_margin", lambda r: r["median_margin"] * 0 - 0.1,
                                                         record="summary"),
        "C2: every soft-margin SVM used is certified": first_row("svm_status", "optimal_inaccurate", record="summary"),
        # margins not divided by ||X(k)||_F (about 10 at the quick preset's last step)
        "C2: every normalized margin lies in [-2, 2]": lambda t: t.assign(
            **{c: t[c] * 10.0 for c in ("margin", "median_margin", "min_margin") if c in t.columns}),
    },
    "lm-stability": {
        "C3 (logistic): softmax attention's gradient Lipschitz estimate is below": swap_attention(
            record="lipschitz", loss="logistic"),
        "C3 (l2): softmax attention's gradient Lipschitz estimate is below": swap_attention(record="lipschitz", loss="l2"),
        "C3 (logistic): softmax attention tolerates": swap_attention(record="threshold", loss="logistic"),
        "C3 (l2): softmax attention tolerates": swap_attention(record="threshold", loss="l2"),
        # linear attention's estimates growing like c^7 instead of c^6
        "C3 (logistic): linear attention's gradient Lipschitz constant grows like c^6": setv(
            "lip_power", lambda r: r["lip_power"] * r["scale"], record="lipschitz", attention="linear", loss="logistic"),
        "C3 (l2): linear attention's gradient Lipschitz constant grows like c^6": setv(
            "lip_power", lambda r: r["lip_power"] * r["scale"], record="lipschitz", attention="linear", loss="l2"),
        # largest stable steps far below 2/L (the descent lemma guarantees every step up to 2/L)
        "C3 (logistic): linear attention is stable at every step below 2/L": setv(
            "eta_max", lambda r: r["eta_max"] * 0.01, record="threshold", attention="linear", loss="logistic"),
        # a largest stable step twice 2/L
        "C3 (l2): linear attention's largest stable step is the GD threshold 2/L": setv(
            "eta_max", lambda r: r["eta_max"] * 2.0, record="threshold", attention="linear", loss="l2"),
    },
}


@pytest.mark.parametrize("name", LM_NAMES)
def test_each_corruption_fails_its_check(runs, name):
    exp, cfg, _, table, _ = runs[name]
    clean = _verdicts(exp, cfg, table)
    listed = {f.check for f in load_findings() if f.experiment == name and f.applies("quick")}
    covered = set()
    for prefix, corrupt in CORRUPT[name].items():
        hit = [n for n in clean if n.startswith(prefix)]
        assert len(hit) == 1, f"{prefix!r} matches {hit}"
        covered.add(hit[0])
        after = _verdicts(exp, cfg, corrupt(table))
        assert not after[hit[0]], f"corruption for {hit[0]!r} did not make it fail"
    missing = set(clean) - covered
    assert not missing, f"checks without a corruption test: {missing}"
    # the clean quick table: no fail (an inconclusive check states its reason), listed findings aside
    fails = {c.name for c in exp.checks(cfg, table) if c.verdict == "fail"}
    assert fails == listed


def test_late_cosine_trend_is_reported_not_checked(runs):
    """Theorem 3.15 needs its assumption (non-optimal scores within delta); the default language is not built to
    meet it, so the late trend of the cosine is a reported measurement, not a verdict."""
    exp, cfg, _, t, _ = runs["lm-cosine"]
    assert not any("still rises" in n for n in _verdicts(exp, cfg, t))
    assert "mean paired change over the last decade" in exp.explain(cfg, t)


def test_theorem_3_15_runs_cover_every_decade_and_fail_without_their_assumption(runs):
    """The cycle-language runs reach 10^4 steps with checkpoints at 10^2, 10^3 and 10^4 (quick and full); a run
    whose hard-margin SVM is infeasible, or an uncertified one, breaks the assumption check."""
    exp, cfg, _, t, _ = runs["lm-cosine"]
    cyc = t[t["record"] == "cycle_train"]
    assert {100, 1000, 10000} <= set(cyc["step"]) and cfg.cycle_steps == build_config(exp).cycle_steps == 10000
    assert cyc["run"].nunique() == cfg.cycle_runs
    name = next(n for n in _verdicts(exp, cfg, t) if n.startswith("C1 (Theorem 3.15): the cycle language meets"))
    for spoil in (first_row("hard_feasible", False, record="cycle_svm"), first_row("hard_certified", False,
                                                                                   record="cycle_svm"),
                  first_row("min_gap", 0.0, record="cycle_svm"), lambda x: x[x["record"] != "cycle_svm"]):
        assert not _verdicts(exp, cfg, spoil(t))[name]


def test_fit_comparison_is_decided_by_the_random_direction_control(runs):
    """W_fin + R W_svm is fitted to GD's own iterate: without a passing control its pass is inconclusive."""
    exp, cfg, _, t, _ = runs["lm-cosine"]
    fit = "C1: W_fin + R W_svm (Gen-SVM form) fits"
    clean = {c.name: c for c in exp.checks(cfg, t)}
    name = next(n for n in clean if n.startswith(fit))
    assert clean[name].verdict == "pass"
    # random directions as good as the SVM's: the control fails, the fit is no longer evidence
    worse = setv("cos_rand_eq", lambda r: r["cos_eq"] + 0.01, record="train")(t)
    after = {c.name: c for c in exp.checks(cfg, worse)}
    assert after[name].verdict == "inconclusive" and not after[name].passed


def test_stability_bound_is_a_sanity_quantity_not_a_verdict(runs):
    """The paper's Lipschitz bound lies decades above every estimate: reported in the notes, never a check."""
    exp, cfg, _, t, _ = runs["lm-stability"]
    assert not any("the paper's gradient Lipschitz bound" in n or "stays bounded" in n for n in _verdicts(exp, cfg, t))
    assert "Sanity quantity (not a verdict" in exp.explain(cfg, t)


def test_gen_comparisons_need_runs_with_a_comparator(runs):
    """One-dimensional Gen-SVM subspaces (the fit is W's own projection there) are left out, not counted."""
    exp, cfg, _, t, _ = runs["lm-cosine"]
    flat = setv("gen_dim", lambda r: np.ones(len(r)), record="svm")(t)
    v = _verdicts(exp, cfg, flat)
    for n, ok in v.items():
        if n.startswith(("C1: W_fin + R W_svm", "C1: the Gen-SVM direction")):
            assert not ok, n


def test_uncertified_soft_svm_is_refused(monkeypatch):
    """An SVM whose certificate fails gives NaN comparisons and fails the integrity check."""
    from attnsvm.experiments.lm import cosine as lm_cosine

    real = lm_cosine.soft_margin_svm

    def spoiled(*a, **k):
        sol = real(*a, **k)
        sol.certificate.duality_gap = 1e-3
        assert not sol.certified
        return sol

    monkeypatch.setattr(lm_cosine, "soft_margin_svm", spoiled)
    exp = registry()["lm-cosine"]
    cfg = build_config(exp, quick=True, overrides={"vary_m": [10], "vary_n": [5], "vary_d": [100], "runs": 2,
                                                   "steps": 30, "cycle_runs": 2, "cycle_steps": 30})
    table = pd.concat([exp.run_task(cfg, task) for task in exp.tasks(cfg)])
    assert table[table["record"] == "train"]["cos"].isna().all()
    v = {c.name: c for c in exp.checks(cfg, table)}
    cert = next(c for n, c in v.items() if n.startswith("C1: every SVM used is certified"))
    assert not cert.passed and cert.kind == "integrity" and cert.value >= 2
    rise = next(c for n, c in v.items() if n.startswith("C1: the similarity to the soft-margin SVM rises"))
    assert not rise.passed
    assumption = next(c for n, c in v.items() if n.startswith("C1 (Theorem 3.15): the cycle language meets"))
    assert not assumption.passed
