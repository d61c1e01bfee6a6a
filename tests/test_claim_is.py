"""claim_is and p-values (issue 40): every check says which rule decided it; a claim tested as the alternative
carries the p-value of its test; the integrity partners of correlations and margins fail on the bugs they name."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from attnsvm.experiments import build_config, registry
from attnsvm.experiments.checks import (CLAIM_IS, CORR_TOL, Check, band_check, bounded_check, check,
                                        correlation_partners, correlation_parts_check, correlation_parts_checks,
                                        correlation_range_check, mean_check, share_check, share_difference_check)
from attnsvm.experiments.claims import claim_cell, claims_page
from attnsvm.experiments.lm.common import grouped_ordering_check, ordering_check
from attnsvm.experiments.real.common import random_direction_check, paired_check, sign_share_check
from attnsvm.experiments.tf.common import approx_mean_check, majority_check

SRC = "transformers-as-svms.md 7.2 item 4"
DATA = os.path.join(os.path.dirname(__file__), "data", "quick")


# ------------------------------------------------------------------ the field itself
def test_a_statistical_check_must_state_its_rule():
    with pytest.raises(ValueError, match="claim_is"):
        Check("c", 1.0, ">= 0", True, "s", "r", "statistical")
    with pytest.raises(ValueError, match="claim_is"):
        Check("c", 1.0, ">= 0", True, "s", "r", "qualitative", power=0.9)
    with pytest.raises(ValueError, match="claim_is must be one of"):
        Check("c", 1.0, ">= 0", True, "s", "r", "statistical", claim_is="maybe")
    with pytest.raises(ValueError, match="p_value"):
        Check("c", 1.0, ">= 0", True, "s", "r", "statistical", claim_is="null", p_value=0.01)
    exact = check("c", 1.0, ">=", 0.5, source=SRC, reason="r", kind="tolerance")
    assert exact.claim_is == "exact" and exact.p_value is None
    d = exact.to_dict()
    assert d["claim_is"] == "exact" and d["p_value"] is None


def test_null_builders_state_null():
    built = [
        share_check("s", 7, 10, ">=", 0.7, source=SRC),
        share_check("s", 0, 0, ">=", 0.7, source=SRC),
        mean_check("m", np.linspace(0.9, 1.0, 20), ">=", 0.9, source=SRC, sigma=0.1, effect=0.05),
        mean_check("m", [1.0, np.nan], ">=", 0.9, source=SRC),
        share_difference_check("d", 9, 10, 5, 10, ">=", 0.1, source=SRC, p1=0.9, p2=0.9),
        band_check("b", {"a": np.ones(5)}, {"a": 1.0}, 0.1, source=SRC, sigmas={"a": 0.1}, effect=0.1),
        approx_mean_check("a", np.linspace(0.4, 0.6, 20), 0.45, 0.55, source=SRC, reason="r", sigma=0.1, effect=0.1),
    ]
    for c in built:
        assert c.claim_is == "null" and c.p_value is None, c
        assert c.to_dict()["claim_is"] == "null"


def test_ordering_check_p_value_is_the_one_sided_t_test():
    rng = np.random.default_rng(0)
    d = rng.normal(0.3, 0.2, 15)
    c = ordering_check("o", d, 0.1, source=SRC, reason="r", effect=0.1, sigma=0.2)
    want = stats.ttest_1samp(d - 0.1, 0.0, alternative="greater").pvalue
    assert c.claim_is == "alternative" and c.p_value == pytest.approx(want, rel=1e-9)
    assert c.verdict == "pass" and c.p_value < 0.01
    # the verdict and the p-value agree: a pass has p <= alpha, a fail p > alpha
    bad = ordering_check("o", rng.normal(0.0, 0.2, 15), 0.1, source=SRC, reason="r", effect=0.1, sigma=0.2)
    assert bad.verdict != "pass" and bad.p_value > 0.01


def test_grouped_ordering_p_value_is_the_largest_group():
    rng = np.random.default_rng(1)
    g = {"a": rng.normal(1.0, 0.2, 12), "b": rng.normal(0.4, 0.3, 12)}
    c = grouped_ordering_check("g", g, 0.0, source=SRC, reason="r", standardized=0.8)
    ps = [stats.ttest_1samp(v, 0.0, alternative="greater").pvalue for v in g.values()]
    assert c.claim_is == "alternative" and c.p_value == pytest.approx(max(ps), rel=1e-9)


def test_sign_majority_and_random_direction_p_values():
    m = majority_check("m", 18, 20, source=SRC, reason="r")
    assert m.claim_is == "alternative" and m.p_value == pytest.approx(stats.binom.sf(17, 20, 0.5))
    s = sign_share_check("s", 9, 10, source=SRC, comparator="c", units="runs", p_win=0.9)
    assert s.claim_is == "alternative" and s.p_value == pytest.approx(stats.binom.sf(8, 10, 0.5))
    d = np.array([0.2, 0.3, 0.25, 0.4, 0.35, 0.3, 0.2, 0.3, 0.28, 0.33])
    p = paired_check("p", d, source=SRC, comparator="c", units="runs", effect=0.1, sigma=0.1)
    p_t = stats.ttest_1samp(d, 0.0, alternative="greater").pvalue
    assert p.claim_is == "alternative" and p.p_value == pytest.approx(max(p_t, 0.5 ** 10))
    own = pd.Series([0.9, 0.8, 0.95], index=[0, 1, 2])
    nulls = pd.DataFrame({"seed": np.repeat([0, 1, 2], 200), "corr_random_dir": np.zeros(600)})
    r = random_direction_check("r", own, nulls, 200, source=SRC)
    assert r.claim_is == "alternative" and r.p_value == pytest.approx((1 / 201) ** 3)


def test_report_and_claims_page_state_the_rule_and_the_p_value(tmp_path):
    from attnsvm.report import check_detail

    c = majority_check("m", 18, 20, source=SRC, reason="r").to_dict()
    assert CLAIM_IS["alternative"] in check_detail(c) and f"p = {c['p_value']:.3g}" in check_detail(c)
    n = share_check("s", 7, 10, ">=", 0.7, source=SRC).to_dict()
    assert CLAIM_IS["null"] in check_detail(n) and "p = " not in check_detail(n)
    assert claim_cell(c) == CLAIM_IS["alternative"] + f"; p = {c['p_value']:.3g}"
    assert claim_cell({"name": "old"}) == "not recorded"
    exp = tmp_path / "exp-a"
    exp.mkdir()
    (exp / "checks.json").write_text(json.dumps([c, n]))
    (exp / "meta.json").write_text(json.dumps({"title": "T", "preset": "quick", "runs": 20}))
    page = claims_page(str(tmp_path))
    assert f"| {claim_cell(c)} |" in page and f"| {CLAIM_IS['null']} |" in page


@pytest.mark.parametrize("name", sorted(f[:-8] for f in os.listdir(DATA) if f.endswith(".parquet")))
def test_every_quick_check_carries_claim_is(name):
    """The stored quick tables (tests/data/quick) re-judged: every check states its rule; every statistical one is
    null or alternative; every passing claim tested as the alternative has its p-value, at most alpha."""
    exp = registry()[name]
    checks = exp.checks(build_config(exp, quick=True), pd.read_parquet(os.path.join(DATA, f"{name}.parquet")))
    assert checks
    for c in checks:
        d = c.to_dict()
        assert d["claim_is"] in CLAIM_IS, (name, c.name)
        if c.kind == "statistical" or c.power is not None:
            assert c.claim_is in ("null", "alternative"), (name, c.name)
        if c.claim_is == "alternative" and c.verdict == "pass":
            assert c.p_value is not None and c.p_value <= 0.01, (name, c.name, c.p_value)


def test_checks_json_of_a_quick_run_carries_claim_is(quick_out):
    """The session's reproduce --quick (slow): every checks.json entry has claim_is (and p_value)."""
    for name in registry():
        path = quick_out / name / "checks.json"
        if not path.is_file():
            continue
        for c in json.loads(path.read_text()):
            assert c["claim_is"] in CLAIM_IS and "p_value" in c, (name, c["name"])
            if c["claim_is"] == "alternative" and c["verdict"] == "pass":
                assert c["p_value"] is not None, (name, c["name"])


# ------------------------------------------------------------------ integrity partners
def test_correlation_range_check_fails_outside_the_range_and_names_the_bug():
    ok = correlation_range_check("corr", np.array([0.2, -1.0, 1.0 + CORR_TOL / 2, np.nan]))
    assert ok.verdict == "pass" and ok.kind == "integrity" and "raw inner product" in ok.alternative
    assert "1 without a value skipped" in ok.detail
    assert correlation_range_check("corr", np.array([0.2, 1.0 + 1e-6])).verdict == "fail"
    assert correlation_range_check("corr", np.array([-1.5, 0.2])).verdict == "fail"
    assert correlation_range_check("corr", np.array([np.nan])).verdict == "fail"     # nothing was measured
    t = pd.DataFrame({"corr": [0.5, 0.9], "other": [7.0, 8.0]})
    got = correlation_partners(t, {"corr": "corr(W, W^mm)", "missing": "not in the table"})
    assert [c.verdict for c in got] == ["pass"] and "(corr)" in got[0].name
    t["corr"] *= 5
    assert correlation_partners(t, {"corr": "corr(W, W^mm)"})[0].verdict == "fail"


def test_correlation_parts_check_fails_on_a_raw_inner_product_whatever_the_norms():
    """The recomputation from stored parts catches a raw inner product whose norms' product keeps it inside [-1, 1]
    (MiniLM's heads: 0.03-0.2), which the range partner passes."""
    from attnsvm.real.layer import corr, corr_parts

    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((4, 6, 6)), 0.01 * rng.standard_normal((4, 6, 6))  # ||A|| ||B|| ~ 0.4 < 1
    parts = np.array([corr_parts(a, b) for a, b in zip(A, B)])  # (4, 3): inner, ||A||, ||B||
    good = np.array([corr(a, b) for a, b in zip(A, B)])
    ok = correlation_parts_check("corr", good, *parts.T)
    assert ok.verdict == "pass" and ok.kind == "integrity" and ok.value <= CORR_TOL and "raw inner product" in ok.alternative
    raw = parts[:, 0]  # the bug: the inner product left undivided
    assert np.abs(raw).max() < 1 and correlation_range_check("corr", raw).verdict == "pass"  # [-1, 1] misses it
    bad = correlation_parts_check("corr", raw, *parts.T)
    assert bad.verdict == "fail" and bad.value > 1e-3
    # a correlation off by a relative 1e-6 (any scaling but 1) fails; a row without an SVM (NaN parts) is skipped
    assert correlation_parts_check("corr", good * (1 + 1e-6), *parts.T).verdict == "fail"
    nan = np.r_[good, np.nan], *(np.r_[p, np.nan] for p in parts.T)
    skipped = correlation_parts_check("corr", *nan)
    assert skipped.verdict == "pass" and "1 without a value skipped" in skipped.detail
    # a value on one side only disagrees (value inf); no finite row at all fails
    one_side = correlation_parts_check("corr", np.r_[good, 0.5], *(np.r_[p, np.nan] for p in parts.T))
    assert one_side.verdict == "fail" and one_side.value == np.inf
    assert correlation_parts_check("corr", [np.nan], [np.nan], [np.nan], [np.nan]).verdict == "fail"
    with pytest.raises(ValueError, match="one length"):
        correlation_parts_check("corr", good, parts[:3, 0], parts[:, 1], parts[:, 2])
    # a table without the parts' columns fails the check (never skipped)
    t = pd.DataFrame({"corr": good, "inner": parts[:, 0], "na": parts[:, 1], "nb": parts[:, 2]})
    assert correlation_parts_checks(t, {"corr": ("inner", "na", "nb")}, {"corr": "c"})[0].verdict == "pass"
    missing = correlation_parts_checks(t.drop(columns="nb"), {"corr": ("inner", "na", "nb")}, {"corr": "c"})[0]
    assert missing.verdict == "fail" and "stores no nb" in missing.detail


def test_bounded_check_states_its_bound_reason_and_bug():
    c = bounded_check("b", [1.0, -2.0], 2.0, reason="because", bug="a bug")
    assert c.verdict == "pass" and c.value == 2.0 and c.alternative == "a plausible bug: a bug"
    assert bounded_check("b", [2.5], 2.0, reason="because", bug="a bug").verdict == "fail"


def test_margin_bound_fails_on_margins_not_divided_by_the_norm():
    from attnsvm.experiments.lm.margins import margin_bound_check

    t = pd.read_parquet(os.path.join(DATA, "lm-margins.parquet"))
    assert margin_bound_check(t).verdict == "pass"
    from attnsvm.experiments.mutations import MUTATIONS

    unnormalized = next(m for m in MUTATIONS if m.name == "unnormalized-margins")
    c = margin_bound_check(unnormalized.apply(t))
    assert c.verdict == "fail" and "not divided by ||X(k)||_F" in c.alternative


# ------------------------------------------------------------------ power with the judged run's own spread
def test_plan_with_run_takes_the_larger_sigma():
    from attnsvm.experiments.power import mean_power, plan_with_run

    base = dict(fn="mean", n=20, op=">=", effect=0.05, sigma=0.05, alpha=0.01)
    used, planned, judged = plan_with_run(base, 0.15)
    assert used["sigma"] == 0.15 and used["sigma_planned"] == 0.05 and used["sigma_judged"] == 0.15
    assert planned == pytest.approx(mean_power(20, ">=", 0.05, 0.05, 0.01))
    assert judged == pytest.approx(mean_power(20, ">=", 0.05, 0.15, 0.01)) and judged < planned
    used, _, judged = plan_with_run(base, 0.01)          # a quieter run: the planning sigma stays
    assert used["sigma"] == 0.05 and judged > planned
    used, _, judged = plan_with_run(base, None)
    assert used["sigma"] == 0.05 and judged is None
    band = dict(fn="band", band=0.1, effect=0.1, ns=[10, 10], sigmas=[0.1, 0.2], labels=["a", "b"])
    used, _, _ = plan_with_run(band, [0.3, 0.1])
    assert used["sigmas"] == [0.3, 0.2]


def test_a_noisier_run_than_planned_loses_its_pass():
    """Planned at sigma 0.02 the check has power >= 0.8; the judged run's spread 0.1 leaves it below: the pass of a
    claim tested as the null becomes inconclusive, and checks.json records both powers."""
    rng = np.random.default_rng(3)
    vals = 1.0 + 0.1 * rng.standard_normal(20)
    c = mean_check("m", vals, ">=", 0.99, source=SRC, sigma=0.02, effect=0.02)
    assert c.power_planned >= 0.8 and c.power_judged < 0.8 and c.power == pytest.approx(c.power_judged)
    assert c.verdict == "inconclusive" and "this run's own" in c.alternative
    d = c.to_dict()
    assert d["power_planned"] == c.power_planned and d["power_judged"] == c.power_judged
    assert d["power_inputs"]["sigma"] == pytest.approx(vals.std(ddof=1))
    quiet = mean_check("m", 1.0 + 0.001 * rng.standard_normal(20), ">=", 0.99, source=SRC, sigma=0.02, effect=0.02)
    assert quiet.verdict == "pass" and quiet.power == pytest.approx(quiet.power_planned)


def test_ordering_power_uses_the_larger_sigma_and_keeps_standardized_effects():
    d = np.random.default_rng(4).normal(0.5, 0.3, 10)
    c = ordering_check("o", d, 0.0, source=SRC, reason="r", effect=0.1, sigma=0.1)
    assert c.power_judged < c.power_planned and c.power == pytest.approx(c.power_judged)
    s = ordering_check("o", d, 0.0, source=SRC, reason="r", standardized=0.8)
    assert s.power == pytest.approx(s.power_planned) and s.power_judged is None
