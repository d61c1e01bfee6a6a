"""Power of the statistical checks, computed exactly and confirmed by simulation at the check functions' level.

For each check function: tables drawn from the stated alternative make it fail (claim is the null) or
pass (claim is the alternative) at a rate within 3 standard errors of the computed power, and tables
drawn at the spec's value pass at the stated level.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnsvm.experiments import power as pw
from attnsvm.experiments.checks import ALPHA, mean_check, share_check, share_difference_check
from attnsvm.experiments.lm.common import ordering_check
from attnsvm.experiments.real.common import paired_check, sign_share_check

SRC = "test"
DRAWS = 3000


def _within(rate: float, p: float, draws: int = DRAWS) -> bool:
    se = math.sqrt(max(p * (1 - p), 1e-4) / draws)
    return abs(rate - p) <= 3 * se


# ------------------------------------------------------------------ shares (claim is the null)
@pytest.mark.parametrize("n,op,target", [(70, "~", 0.70), (70, "~", 0.02), (70, ">=", 0.90), (52, ">=", 0.95),
                                         (21, "<=", 0.07), (100, ">=", 0.68)])
def test_share_check_power_matches_simulation(n, op, target):
    rng = np.random.default_rng(12345)
    power, alts = pw.share_power(n, op, target, ALPHA)
    assert alts and all(0 <= p <= 1 for p in alts)
    # the least favourable alternative: the one with the smallest fail probability
    _, worst = min((pw.share_power(n, op, target, ALPHA, [p])[0], p) for p in alts)
    memo = {}

    def verdict(k):
        if k not in memo:
            memo[k] = share_check("s", k, n, op, target, source=SRC)
        return memo[k]

    fails = np.mean([verdict(k).verdict == "fail" for k in rng.binomial(n, worst, DRAWS)])
    assert _within(fails, power)
    # at the spec's value the check does not fail at rate above the level (+ 3 s.e.)
    not_fail = np.mean([verdict(k).verdict != "fail" for k in rng.binomial(n, target, DRAWS)])
    assert not_fail >= 1 - ALPHA - 3 * math.sqrt(ALPHA * (1 - ALPHA) / DRAWS)
    # the verdict of a pass follows the power
    ok = verdict(round(target * n))
    assert ok.power == pytest.approx(power) and ok.verdict == ("pass" if power >= 0.8 else "inconclusive")


def test_share_power_is_sawtooth_and_computed_at_the_n_used():
    powers = [pw.share_power(n, ">=", 0.9, ALPHA)[0] for n in range(40, 80)]
    assert any(b < a for a, b in zip(powers, powers[1:])), "discrete power is not monotone in n"
    c = share_check("s", 45, 50, ">=", 0.9, source=SRC)
    assert c.power == pytest.approx(pw.share_power(50, ">=", 0.9, ALPHA)[0])


def test_share_alternatives_stay_inside_the_unit_interval():
    assert pw.share_alternatives("~", 0.02) == [0.17]
    assert pw.share_alternatives(">=", 1.0) == [0.85]
    assert pw.share_alternatives("~", 0.5) == [0.35, 0.65]
    assert pw.share_alternatives("<=", 0.9) == []
    # no alternative inside [0, 1]: power unknown, a pass is inconclusive
    assert share_check("s", 5, 10, "<=", 0.9, source=SRC).verdict == "inconclusive"


# ------------------------------------------------------------------ share differences (exact enumeration)
@pytest.mark.parametrize("n1,n2,p1,p2", [(70, 70, 0.65, 0.4), (100, 100, 0.5, 0.4), (30, 50, 0.7, 0.1)])
def test_share_difference_power_matches_simulation(n1, n2, p1, p2):
    rng = np.random.default_rng(1)
    target = 0.4
    power = pw.share_difference_power(n1, n2, ">=", target, ALPHA, p1, p2)
    s1, s2 = rng.binomial(n1, p1, DRAWS), rng.binomial(n2, p2, DRAWS)
    fails = np.mean([share_difference_check("d", a, n1, b, n2, ">=", target, source=SRC, p1=p1, p2=p2).verdict
                     == "fail" for a, b in zip(s1, s2)])
    assert _within(fails, power)
    c = share_difference_check("d", round(0.9 * n1), n1, round(0.3 * n2), n2, ">=", target, source=SRC, p1=p1, p2=p2)
    assert c.power == pytest.approx(power)


def test_share_difference_passes_at_the_claimed_difference():
    # the normal approximation's level at the claimed difference (p1, p2) = (0.9, 0.5)
    rng = np.random.default_rng(2)
    s1, s2 = rng.binomial(100, 0.9, DRAWS), rng.binomial(100, 0.5, DRAWS)
    passes = pw.share_difference_passes(s1, 100, s2, 100, ">=", 0.4, ALPHA).mean()
    assert passes >= 1 - 2 * ALPHA - 3 * math.sqrt(2 * ALPHA / DRAWS)


# ------------------------------------------------------------------ means (claim is the null, planning sigma)
@pytest.mark.parametrize("n,op,effect,sigma", [(12, ">=", 0.15, 0.2), (50, ">=", 0.05, 0.1), (8, "<=", 0.3, 0.25),
                                               (30, "<=", 0.02, 0.05)])
def test_mean_check_power_matches_simulation(n, op, effect, sigma):
    rng = np.random.default_rng(3)
    target = 0.5
    power = pw.mean_power(n, op, effect, sigma, ALPHA)
    alt = target - effect if op == ">=" else target + effect
    kw = dict(source=SRC, sigma=sigma, effect=effect, sigma_source="unit test")
    fails = np.mean([mean_check("m", v, op, target, **kw).verdict == "fail"
                     for v in alt + sigma * rng.standard_normal((DRAWS, n))])
    assert _within(fails, power)
    not_fail = np.mean([mean_check("m", v, op, target, **kw).verdict != "fail"
                        for v in target + sigma * rng.standard_normal((DRAWS, n))])
    assert _within(not_fail, 1 - ALPHA)
    c = mean_check("m", np.full(n, target) + sigma * np.linspace(-1, 1, n), op, target, **kw)
    assert c.power == pytest.approx(power)
    assert c.verdict == ("pass" if power >= 0.8 else "inconclusive")


# ------------------------------------------------------------------ orderings, paired and sign checks (claim is the alternative)
@pytest.mark.parametrize("n,effect,sigma", [(5, 0.05, 0.03), (10, 0.1, 0.2), (30, 0.03, 0.05)])
def test_ordering_check_power_matches_simulation(n, effect, sigma):
    rng = np.random.default_rng(4)
    power = pw.ordering_power(n, effect, sigma, ALPHA)
    kw = dict(source=SRC, reason="r", effect=effect, sigma=sigma)
    verdicts = [ordering_check("o", v, **kw).verdict for v in effect + sigma * rng.standard_normal((DRAWS, n))]
    assert _within(np.mean([v == "pass" for v in verdicts]), power)
    assert set(verdicts) <= ({"pass", "inconclusive"} if power < 0.8 else {"pass", "fail"})
    # no ordering (mean difference 0): passes at most at the level
    null = [ordering_check("o", v, **kw).passed for v in sigma * rng.standard_normal((DRAWS, n))]
    assert np.mean(null) <= ALPHA + 3 * math.sqrt(ALPHA / DRAWS)


@pytest.mark.parametrize("n,p", [(12, 0.9), (30, 0.75), (8, 0.95)])
def test_sign_share_check_power_matches_simulation(n, p):
    rng = np.random.default_rng(6)
    power = pw.sign_power(n, p, ALPHA)
    cs = [sign_share_check("s", k, n, source=SRC, comparator="c", units="heads", p_win=p)
          for k in rng.binomial(n, p, DRAWS)]
    assert _within(np.mean([c.passed for c in cs]), power)
    assert all(c.power == pytest.approx(power) for c in cs[:5])
    null = np.mean([sign_share_check("s", k, n, source=SRC, comparator="c", units="heads", p_win=p).passed
                    for k in rng.binomial(n, 0.5, DRAWS)])
    assert null <= ALPHA + 3 * math.sqrt(ALPHA / DRAWS)


# ------------------------------------------------------------------ the verdict rule
def test_decide_is_the_issue_rule():
    assert pw.decide(True, 0.9, "null") == "pass"
    assert pw.decide(True, 0.5, "null") == "inconclusive"
    assert pw.decide(True, None, "null") == "inconclusive"
    assert pw.decide(False, 0.5, "null") == "fail"
    assert pw.decide(True, 0.1, "alternative") == "pass"
    assert pw.decide(False, 0.5, "alternative") == "inconclusive"
    assert pw.decide(False, 0.9, "alternative") == "fail"
    assert pw.decide(False, None, "alternative") == "fail"
    with pytest.raises(ValueError):
        pw.decide(True, 0.9, "maybe")


def test_power_at_the_limits():
    # runs without spread, or a noncentrality beyond scipy's range: the power is 1, never NaN
    assert pw.mean_power(8, ">=", 0.01, 0.0, ALPHA) == 1.0
    assert pw.mean_power(8, ">=", 0.01, 1e-15, ALPHA) == 1.0
    assert pw.ordering_power(8, 0.01, 1e-12, ALPHA) == 1.0
    c = mean_check("m", [0.999999] * 8, ">=", 0.99, source=SRC, sigma=1e-15, effect=0.01)
    assert c.power == 1.0 and c.verdict == "pass"


def test_power_functions_validate():
    with pytest.raises(ValueError, match="op"):
        pw.share_power(10, "=", 0.5, ALPHA)
    with pytest.raises(ValueError, match="n"):
        pw.mean_power(0, ">=", 0.1, 0.1, ALPHA)
    with pytest.raises(ValueError, match="sigma"):
        pw.ordering_power(10, 0.1, 0.0, ALPHA)


# ------------------------------------------------------------------ approx-mean ("about x", claim is the null)
@pytest.mark.parametrize("n,lo,hi,effect,sigma,slack,side", [(50, 0.13, 0.2, 0.03, 0.087, 0.0, -1),
                                                             (100, 1.2, 1.2, 0.18, 0.32, 0.05, +1)])
def test_approx_mean_check_power_matches_simulation(n, lo, hi, effect, sigma, slack, side):
    """tf-multi-token's "about 0.16" at the quick preset's 50 runs (power well below 0.8) and tf-lambda-head's
    "about 1.2" at 100 runs with its rounding slack; ``side``: which end of the range the alternative breaks."""
    from attnsvm.experiments.tf.common import approx_mean_check

    draws = 1500
    rng = np.random.default_rng(7)
    power = pw.mean_power(n, ">=", effect - slack, sigma, ALPHA / 2)
    kw = dict(source=SRC, reason="r", slack=slack, sigma=sigma, effect=effect, sigma_source="unit test")
    alt = lo - effect if side < 0 else hi + effect
    fails = np.mean([approx_mean_check("a", v, lo, hi, **kw).verdict == "fail"
                     for v in alt + sigma * rng.standard_normal((draws, n))])
    assert _within(fails, power, draws)
    # at the end of the spec's range the check fails at most at its two-sided level
    end = lo if side < 0 else hi
    not_fail = np.mean([approx_mean_check("a", v, lo, hi, **kw).verdict != "fail"
                        for v in end + sigma * rng.standard_normal((draws, n))])
    assert not_fail >= 1 - ALPHA / 2 - 3 * math.sqrt(ALPHA / draws)
    c = approx_mean_check("a", (lo + hi) / 2 + sigma * np.linspace(-1, 1, n), lo, hi, **kw)
    assert c.power == pytest.approx(power) and c.verdict == ("pass" if power >= 0.8 else "inconclusive")


# ------------------------------------------------------------------ majority (claim is the alternative)
@pytest.mark.parametrize("n,p", [(150, 0.65), (200, 0.65), (20, 0.65)])  # tf-multi-token's pooled runs: 3 x 50, 4 x 50
def test_majority_check_power_matches_simulation(n, p):
    from attnsvm.experiments.tf.common import majority_check

    rng = np.random.default_rng(8)
    power = pw.majority_power(n, p, ALPHA)
    cs = [majority_check("m", k, n, source=SRC, reason="r", p_win=p) for k in rng.binomial(n, p, DRAWS)]
    assert _within(np.mean([c.passed for c in cs]), power)
    assert cs[0].power == pytest.approx(power) and cs[0].power_inputs["fn"] == "sign"
    assert {c.verdict for c in cs} <= ({"pass", "fail"} if power >= 0.8 else {"pass", "inconclusive"})
    # a coin (probability 1/2, what unrelated numbers give) passes at most at the level
    null = np.mean([majority_check("m", k, n, source=SRC, reason="r", p_win=p).passed
                    for k in rng.binomial(n, 0.5, DRAWS)])
    assert null <= ALPHA + 3 * math.sqrt(ALPHA / DRAWS)
    # the default alternative is chance moved by the share shift toward the claim
    assert majority_check("m", n, n, source=SRC, reason="r").power == pytest.approx(pw.majority_power(n, 0.65, ALPHA))


# ------------------------------------------------------------------ grouped orderings: tf-lambda-head's trend test
@pytest.mark.parametrize("lams", [[0.05, 0.3, 2.0], [0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0]])  # quick and full grids
def test_lambda_head_trend_power_at_the_presets_n(lams, monkeypatch):
    from attnsvm.experiments import planning
    from attnsvm.experiments.tf.lambda_head import SPEC_SELECTED, Config

    name = "mean |O_i| increases along the lambda grid (per-seed rise between neighbouring lambdas)"
    entry = planning.lookup(name)
    assert entry is not None and entry["experiment"] == "tf-lambda-head", "the trend test needs its planning sigmas"
    n = Config().runs  # both presets run 100 seeds per lambda
    labels = [f"{a:g}->{b:g}" for a, b in zip(lams[:-1], lams[1:])]
    effects = {k: SPEC_SELECTED[b] - SPEC_SELECTED[a] for k, (a, b) in zip(labels, zip(lams[:-1], lams[1:]))}
    sigmas = {k: entry["sigmas"][k] for k in labels}
    power = float(np.prod([pw.ordering_power(n, effects[k], sigmas[k], ALPHA) for k in labels]))
    assert power >= 0.8, "the trend test is decided at both presets"
    # the check itself, named as in the experiment, takes the stored sigmas of each group
    monkeypatch.setattr(planning, "lookup", lambda key: entry if key == name else None)
    rng = np.random.default_rng(9)
    from attnsvm.experiments.lm.common import grouped_ordering_check

    draws = 300
    cs = []
    for _ in range(draws):
        groups = {k: effects[k] + sigmas[k] * rng.standard_normal(n) for k in labels}
        cs.append(grouped_ordering_check(name, groups, 0.0, source=SRC, reason="r", effect=effects))
    # planned at the stored sigmas; the power used takes the larger of them and each run's own spread
    assert cs[0].power_planned == pytest.approx(power) and cs[0].power <= cs[0].power_planned + 1e-12
    assert _within(np.mean([c.passed for c in cs]), power, draws)
    # a flat curve (no rise in one group) fails at rate >= 1 - level
    flat = dict(effects, **{labels[-1]: 0.0})
    fl = []
    for _ in range(draws):
        groups = {k: flat[k] + sigmas[k] * rng.standard_normal(n) for k in labels}
        fl.append(grouped_ordering_check(name, groups, 0.0, source=SRC, reason="r", effect=effects).passed)
    assert np.mean(fl) <= ALPHA + 3 * math.sqrt(ALPHA / draws)


# ------------------------------------------------------------------ paired checks: the Bonferroni bound is tight enough
@pytest.mark.parametrize("n,effect,sigma,seed", [(21, 0.03, 0.04, 5), (10, 0.05, 0.03, 5), (21, 0.15, 0.35, 10),
                                                  (30, 0.1, 0.2, 10)])
def test_paired_check_power_is_between_its_bound_and_each_tests_power(n, effect, sigma, seed):
    from scipy.stats import norm

    draws = 1000
    rng = np.random.default_rng(seed)
    kw = dict(source=SRC, comparator="c", units="runs", effect=effect, sigma=sigma)
    cs = [paired_check("p", v, **kw) for v in effect + sigma * rng.standard_normal((draws, n))]
    bound = cs[0].power
    rate = np.mean([c.passed for c in cs])
    # the stated power is a lower bound on the pass rate
    assert rate >= bound - 3 * math.sqrt(max(bound * (1 - bound), 1e-4) / draws)
    se = math.sqrt(max(rate * (1 - rate), 1e-4) / draws)
    top = min(pw.ordering_power(n, effect, sigma, ALPHA), pw.sign_power(n, float(norm.cdf(effect / sigma)), ALPHA))
    assert rate <= top + 3 * se  # the pass needs both tests: at most either one's power
    assert pw.power_from(cs[0].power_inputs) == pytest.approx(bound)
    # no difference: passes at most at the level
    null = np.mean([paired_check("p", v, **kw).passed for v in sigma * rng.standard_normal((draws, n))])
    assert null <= ALPHA + 3 * math.sqrt(ALPHA / draws)


# ------------------------------------------------------------------ the random-direction control (real-*)
@pytest.mark.parametrize("runs,draws,effect,sigma", [(21, 99, 0.3, 0.0508), (21, 99, 0.17, 0.05)])
def test_random_direction_check_power_matches_simulation(runs, draws, effect, sigma):
    import pandas as pd

    from attnsvm.experiments.real.common import random_direction_check

    sims = 200
    rng = np.random.default_rng(11)
    power = pw.random_direction_power(runs, draws, effect, sigma, ALPHA)
    seeds = np.repeat(np.arange(runs), draws)
    own = pd.Series(np.full(runs, effect), index=np.arange(runs))

    def run(null_mean):
        nulls = pd.DataFrame({"seed": seeds, "corr_random_dir": null_mean + sigma * rng.standard_normal(runs * draws)})
        return random_direction_check("r", own, nulls, draws, source=SRC, effect=effect, sigma=sigma)

    cs = [run(0.0) for _ in range(sims)]
    # the planned power is the formula's; the power used is planned with the larger of it and the run's own spread
    assert cs[0].power_planned == pytest.approx(power)
    assert all(c.power <= c.power_planned + 1e-12 for c in cs)
    assert _within(np.mean([c.passed for c in cs]), power, sims)
    assert all(c.verdict in ({"pass", "fail"} if c.power >= 0.8 else {"pass", "inconclusive"}) for c in cs)
    # no information (own exchangeable with the random directions): passes at most at the level
    null_pass = np.mean([run(effect).passed for _ in range(sims)])
    assert null_pass <= ALPHA + 3 * math.sqrt(ALPHA / sims)


def test_random_direction_power_limits():
    assert pw.random_direction_power(5, 50, 0.3, 0.05, ALPHA) == 0.0  # level 1/51 > 0.01: cannot pass
    assert pw.random_direction_power(5, 99, 0.3, 0.0, ALPHA) == 1.0
    with pytest.raises(ValueError, match="effect"):
        pw.random_direction_power(5, 99, 0.0, 0.05, ALPHA)


# ------------------------------------------------------------------ band (the spec's own tolerance, claim is the null)
@pytest.mark.parametrize("ns,sigmas", [([60, 60, 60], [0.48, 0.35, 0.0]),            # tf-svm-rank quick: d = 2, 4, 10
                                       ([100] * 4, [0.3, 0.48, 0.75, 0.2]),           # a full-preset-like grid
                                       ([60] * 3, [1.0] * 3)])   # wide spread: the other groups' own fails count
def test_band_check_power_and_false_fail_match_simulation(ns, sigmas):
    """tf-svm-rank's research band (+-0.15 around each d's spec value): tables with one group 0.15 beyond the
    band (the least favourable group: the largest sigma) fail at the computed power; tables at the spec's
    values pass at 1 minus the computed false-fail rate."""
    from attnsvm.experiments.checks import band_check

    band, effect, draws = 0.15, 0.15, 2000
    rng = np.random.default_rng(11)
    labels = [f"d={k}" for k in range(len(ns))]
    targets = dict(zip(labels, [1.34, 4.0, 5.0, 2.82][:len(ns)]))
    sig = dict(zip(labels, sigmas))
    kw = dict(source=SRC, reason="r", sigmas=sig, effect=effect, sigma_source="unit test")
    power = pw.band_power(band, effect, ns, sigmas)
    worst = labels[int(np.argmax(sigmas))]

    def table(shift):
        return {k: targets[k] + (shift if k == worst else 0.0) + s * rng.standard_normal(n)
                for k, n, s in zip(labels, ns, sigmas)}

    fails = np.mean([band_check("b", table(band + effect), targets, band, **kw).verdict == "fail" for _ in range(draws)])
    assert _within(fails, power, draws)
    ff = pw.band_false_fail(band, ns, sigmas)
    passes = np.mean([band_check("b", table(0.0), targets, band, **kw).verdict != "fail" for _ in range(draws)])
    assert _within(passes, 1 - ff, draws)
    c = band_check("b", {k: np.full(n, targets[k]) for k, n in zip(labels, ns)}, targets, band, **kw)
    assert c.value == pytest.approx(0.0, abs=1e-12) and c.power == pytest.approx(power)
    assert c.verdict == ("pass" if power >= 0.8 else "inconclusive")
    assert pw.power_from(c.power_inputs) == pytest.approx(power)


def test_band_power_limits_and_validation():
    # a group without spread never errs: the power is that of the other groups only
    assert pw.band_power(0.15, 0.15, [60, 60], [0.0, 0.0]) == 1.0
    assert pw.band_false_fail(0.15, [60], [0.0]) == 0.0
    # more runs, more power; the power grows with the effect
    assert pw.band_power(0.15, 0.15, [100], [0.8]) > pw.band_power(0.15, 0.15, [60], [0.8])
    assert pw.band_power(0.15, 0.3, [60], [0.8]) > pw.band_power(0.15, 0.15, [60], [0.8])
    with pytest.raises(ValueError, match="sigmas"):
        pw.band_power(0.15, 0.15, [60, 60], [0.5])
    with pytest.raises(ValueError, match="effect"):
        pw.band_power(0.15, 0.0, [60], [0.5])
    from attnsvm.experiments.checks import band_check

    with pytest.raises(ValueError, match="labels"):
        band_check("b", {"a": [1.0]}, {"b": 1.0}, 0.15, source=SRC)
    # a run without a value fails (never dropped); no sigma for a group: power unknown, a pass is inconclusive
    assert band_check("b", {"a": [1.0, np.nan]}, {"a": 1.0}, 0.15, source=SRC).verdict == "fail"
    c = band_check("b", {"a": [1.0, 1.0]}, {"a": 1.0}, 0.15, source=SRC, sigmas={}, effect=0.15)
    assert c.power is None and c.verdict == "inconclusive"


# ------------------------------------------------------------------ power at another preset's size
def test_power_from_recomputes_each_kind_at_a_scaled_count():
    assert pw.power_from(dict(fn="share", n=70, op="~", target=0.7, alpha=ALPHA), 132 / 70) == pytest.approx(
        pw.share_power(132, "~", 0.7, ALPHA)[0])
    assert pw.power_from(dict(fn="mean", n=50, op=">=", effect=0.05, sigma=0.165, alpha=ALPHA), 10) == pytest.approx(
        pw.mean_power(500, ">=", 0.05, 0.165, ALPHA))
    assert pw.power_from(dict(fn="share_difference", n1=70, n2=70, op=">=", target=0.4, alpha=ALPHA, p1=0.65, p2=0.4,
                              tolerance=True), 2) == pytest.approx(
        pw.share_difference_power(140, 140, ">=", 0.4, ALPHA, 0.65, 0.4))
    assert pw.power_from(dict(fn="sign", n=150, p_win=0.65, alpha=ALPHA)) == pytest.approx(pw.sign_power(150, 0.65, ALPHA))
    assert pw.power_from(dict(fn="unknown")) is None
    c = share_check("s", 60, 70, ">=", 0.9, source=SRC)
    assert pw.power_from(c.power_inputs) == pytest.approx(c.power)
