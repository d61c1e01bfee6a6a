"""The full preset's power of checks decided in every group (issue 40): planned at the full preset's own groups
(tf-lambda-head's neighbouring lambdas, lm-cosine's configurations), not left without power because the groups
differ from the quick preset's; lm-cosine's cycle language sized so that the Theorem 3.15 checks can fail at the
full preset, and its runs per configuration sized for the Gen-SVM comparison (planned from the measured share of
runs with a usable comparator). Judged on the stored quick tables (tests/data/quick; no experiment runs here)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from attnsvm.experiments import build_config, registry
from attnsvm.experiments.checks import ALPHA
from attnsvm.experiments.claims import CANNOT_FAIL, cannot_fail, full_power, planned_full_power
from attnsvm.experiments.power import POWER_GOAL, STANDARDIZED_EFFECT, ordering_power

DATA = os.path.join(os.path.dirname(__file__), "data", "quick")
TREND = "mean |O_i| increases along the lambda grid (per-seed rise between neighbouring lambdas)"
RISE = "C1: the similarity to the soft-margin SVM rises from X(0) in every configuration"
CYCLE = "C1 (Theorem 3.15, cycle language)"


def _checks(name: str, table=None, config=None) -> list:
    exp = registry()[name]
    table = pd.read_parquet(os.path.join(DATA, f"{name}.parquet")) if table is None else table
    return exp.checks(build_config(exp, quick=True) if config is None else config, table)


def _one(name: str, start: str) -> dict:
    got = [c.to_dict() for c in _checks(name) if c.name.startswith(start)]
    assert len(got) == 1, (name, start)
    return got[0]


def test_the_lambda_trend_is_planned_at_the_full_grid():
    """The full preset's grid has 6 neighbouring pairs (the quick one 2, other pairs): its power is the product over
    the full pairs of the ordering power at 100 seeds, the spec table's rise and each pair's own planning sigma."""
    from attnsvm.experiments.planning import lookup
    from attnsvm.experiments.tf.lambda_head import SPEC_SELECTED

    check = _one("tf-lambda-head", TREND)
    p, what = planned_full_power("tf-lambda-head", check)
    assert p is not None and p >= POWER_GOAL, (p, what)
    full = build_config(registry()["tf-lambda-head"], quick=False)
    lams = sorted(full.lambdas)
    labels = [f"{a:g}->{b:g}" for a, b in zip(lams[:-1], lams[1:])]
    assert not set(labels) & {p["label"] for p in check["power_inputs"]["parts"]}, "the groups differ between presets"
    sigmas = lookup(TREND)["sigmas"]
    want = float(np.prod([ordering_power(full.runs, SPEC_SELECTED[b] - SPEC_SELECTED[a], sigmas[f"{a:g}->{b:g}"],
                                         ALPHA) for a, b in zip(lams[:-1], lams[1:])]))
    assert p == pytest.approx(want)
    assert "6 groups" in what and "own planning sigma" in what
    assert cannot_fail(check, p, what) == ""


def test_a_grouped_check_with_too_few_runs_per_group_still_cannot_fail(monkeypatch):
    """The same plan at 3 seeds per lambda: a number below the goal, so the page names the check "cannot fail"
    (planning group by group does not make a check decided by itself)."""
    from attnsvm.experiments.tf import lambda_head

    full = lambda_head.preset_trend_groups
    monkeypatch.setattr(lambda_head, "preset_trend_groups",
                        lambda config: {k: (3, e) for k, (_, e) in full(config).items()})
    check = _one("tf-lambda-head", TREND)
    p, what = full_power("tf-lambda-head", check)
    assert p is not None and p < POWER_GOAL and "n = 3 each" in what
    assert cannot_fail(check, p, what).startswith(f"{CANNOT_FAIL}: power {p:.3f} < 0.8 at the full preset")


def test_the_rise_from_x0_plans_unmeasured_configurations_at_the_largest_quick_sigma(monkeypatch):
    """lm-cosine's full preset has 10 configurations at 5 runs each; 3 of them were judged at the quick preset (their
    quick check's sigma: the larger of the planning sigma and the run's own), the other 7 were measured nowhere and
    take the largest sigma any quick group used. The power is that product: a number (far below the goal at 5 runs;
    above it with enough runs per configuration)."""
    from attnsvm.experiments.lm import cosine

    check = _one("lm-cosine", RISE)
    parts = {p["label"]: p for p in check["power_inputs"]["parts"]}
    largest = max(p["sigma"] for p in parts.values())
    full = build_config(registry()["lm-cosine"], quick=False)
    labels = list(cosine.rise_groups(full))  # one per C1 configuration
    assert len(labels) == 10 and len(set(labels) & set(parts)) == 3
    sig = [parts[k]["sigma"] if k in parts else largest for k in labels]
    p, what = planned_full_power("lm-cosine", check)
    assert p == pytest.approx(float(np.prod([ordering_power(full.runs, 0.1, s, ALPHA) for s in sig])))
    assert p < POWER_GOAL and f"10 groups, n = {full.runs} each" in what and "7 measured nowhere" in what
    monkeypatch.setattr(cosine, "rise_groups", lambda config: {k: (200, None) for k in labels})
    assert full_power("lm-cosine", check)[0] >= POWER_GOAL


def test_parts_without_group_labels_have_no_full_power():
    """A checks.json written before the parts carried their labels: no plan (the groups cannot be matched)."""
    check = _one("tf-lambda-head", TREND)
    check["power_inputs"]["parts"] = [{k: v for k, v in p.items() if k != "label"}
                                      for p in check["power_inputs"]["parts"]]
    p, what = full_power("tf-lambda-head", check)
    assert p is None and "do not name them" in what


def test_the_cycle_language_is_sized_for_power_at_the_full_preset():
    """Both decades must pass (a product of two ordering powers at level 0.01 against d = 0.8): the full preset runs
    the smallest count that reaches 0.8, and one run fewer would not."""
    full = build_config(registry()["lm-cosine"], quick=False)
    cyc = [c.to_dict() for c in _checks("lm-cosine") if c.name.startswith(CYCLE) and c.power is not None]
    assert len(cyc) == 2
    for c in cyc:
        p, what = planned_full_power("lm-cosine", c)
        assert p >= POWER_GOAL and what == f"n = {full.cycle_runs}", (c["name"], p, what)
    from attnsvm.experiments.lm.cosine import CYCLE_RUNS

    assert full.cycle_runs == CYCLE_RUNS
    assert ordering_power(CYCLE_RUNS, STANDARDIZED_EFFECT, 1.0, ALPHA) ** 2 >= POWER_GOAL
    assert ordering_power(CYCLE_RUNS - 1, STANDARDIZED_EFFECT, 1.0, ALPHA) ** 2 < POWER_GOAL


def test_a_reversed_decade_fails_at_the_full_cycle_runs():
    """At the full preset's cycle runs (the quick table's 10 repeated under new run ids), the last decade reversed
    (step 10000 exchanged with step 100) is a fail, not inconclusive."""
    from attnsvm.experiments.lm.cosine import CYCLE_RUNS

    t = pd.read_parquet(os.path.join(DATA, "lm-cosine.parquet"))
    cyc = t["record"].isin(["cycle_svm", "cycle_train"])
    per = int(t.loc[cyc, "run"].max()) + 1
    grown = pd.concat([t[~cyc]] + [t[cyc].assign(run=t.loc[cyc, "run"] + k * per) for k in range(-(-CYCLE_RUNS // per))])
    grown = grown[~grown["record"].isin(["cycle_svm", "cycle_train"]) | (grown["run"] < CYCLE_RUNS)]
    cfg = build_config(registry()["lm-cosine"], quick=True).model_copy(update={"cycle_runs": CYCLE_RUNS})
    clean = {c.name: c for c in _checks("lm-cosine", grown, cfg) if c.name.startswith(CYCLE)}
    assert all(c.verdict == "pass" for c in clean.values()), {n: c.verdict for n, c in clean.items()}
    rev = grown.copy()
    tr = rev["record"] == "cycle_train"
    for col in ("cos_hard", "norm"):
        hi = rev.loc[tr & (rev["step"] == 10000)].set_index("run")[col]
        lo = rev.loc[tr & (rev["step"] == 100)].set_index("run")[col]
        rev.loc[tr & (rev["step"] == 10000), col] = rev.loc[tr & (rev["step"] == 10000), "run"].map(lo).to_numpy()
        rev.loc[tr & (rev["step"] == 100), col] = rev.loc[tr & (rev["step"] == 100), "run"].map(hi).to_numpy()
    bad = {c.name: c for c in _checks("lm-cosine", rev, cfg) if c.name.startswith(CYCLE) and c.power is not None}
    assert len(bad) == 2
    for c in bad.values():
        assert c.power >= POWER_GOAL and c.verdict == "fail", (c.name, c.power, c.verdict)


def test_the_gen_svm_comparison_is_planned_from_its_usable_runs_and_sized_for_power():
    """Only runs with a usable Gen-SVM comparator enter "W_fin + R W_svm fits better than the soft-margin SVM": the
    full preset's count is the runs times the measured share of each configuration (not the quick preset's share,
    about twice as large), and the full preset's runs per configuration are the fewest that reach 0.8 there."""
    from attnsvm.experiments.lm import cosine

    exp = registry()["lm-cosine"]
    full = build_config(exp, quick=False)
    check = _one("lm-cosine", "C1: W_fin + R W_svm")
    p, what = planned_full_power("lm-cosine", check)
    assert p >= POWER_GOAL, (p, what)
    usable = cosine.gen_svm_runs(full)
    assert what == f"n = {usable}"
    assert usable < full.runs * len(cosine.rise_groups(full)) / 3, "the full configurations' share is the smaller"
    sigma = check["power_inputs"]["sigma"]
    assert ordering_power(usable, 0.1, sigma, ALPHA) == pytest.approx(p)
    fewer = cosine.gen_svm_runs(full.model_copy(update={"runs": full.runs - 1}))
    assert ordering_power(fewer, 0.1, sigma, ALPHA) < POWER_GOAL
    # its control on the same runs follows the same count
    assert planned_full_power("lm-cosine", _one("lm-cosine", "C1: the Gen-SVM direction"))[1] == what
    # a configuration the planning table lacks takes the smallest measured share (here 0: no usable runs)
    odd = full.model_copy(update={"vary_m": [7], "vary_n": [], "vary_d": [], "m": 7})
    assert cosine.gen_svm_runs(odd) == 0
