"""Theorem 3.15's near ties: the language family with a controlled non-optimal score spread delta (attnsvm.language,
attnsvm.svm.language) and the experiment lm-near-ties (checks re-judged on the stored quick table and on rewrites of
it that each check must fail)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from attnsvm.errors import ValidationError
from attnsvm.experiments import build_config, registry
from attnsvm.language import chain_sequences, cycle_language, make_lm_data, markov_language, scaled_cycle_language
from attnsvm.svm import lm_constraints, solve
from attnsvm.svm.language import (language_score_spread, near_tie_language, optimal_prefix_tokens, prefix_scores,
                                  score_ties)

TABLE = os.path.join(os.path.dirname(__file__), "data", "quick", "lm-near-ties.parquet")


# ------------------------------------------------------------------ the language family


def test_scaled_cycle_language_at_eps_0_is_the_cycle_language_and_scales_the_gram_matrix():
    base = cycle_language(9, 20, rho=0.3, seed=5)
    same = scaled_cycle_language(9, 20, rho=0.3, eps=0.0, seed=5)
    assert np.array_equal(same.E, base.E) and np.array_equal(same.trans1, base.trans1)
    lang = scaled_cycle_language(9, 20, rho=0.3, eps=0.2, seed=5)
    s = np.linalg.norm(lang.E, axis=1)
    assert np.all(np.abs(s - 1.0) <= 0.2 + 1e-12) and np.ptp(s) > 0.05
    assert np.allclose(lang.E @ lang.E.T, s[:, None] * (base.E @ base.E.T) * s[None, :], atol=1e-12)
    # the same sequences at every eps: the runs of one seed are paired across delta
    assert np.array_equal(lang.sample(7, 6, seed=2), base.sample(7, 6, seed=2))


@pytest.mark.parametrize("eps", [-0.1, 1.0, 1.5])
def test_scaled_cycle_language_rejects_scales_that_are_not_positive(eps):
    with pytest.raises(ValidationError, match="eps"):
        scaled_cycle_language(6, 10, eps=eps)


def test_chain_sequences_are_every_sequence_of_a_deterministic_chain():
    lang = cycle_language(7, 10, seed=1)
    toks = chain_sequences(lang, 5)
    succ = lang.trans1.argmax(1)
    assert toks.shape == (7, 5) and np.array_equal(toks[:, 0], np.arange(7))
    assert np.array_equal(toks[:, 1:], succ[toks[:, :-1]])
    with pytest.raises(ValidationError, match="deterministic"):
        chain_sequences(markov_language(6, 10, successors=2, seed=0), 4)


def test_language_spread_of_the_cycle_language_is_an_exact_tie_with_gap_rho():
    delta, gap = language_score_spread(cycle_language(12, 30, rho=0.35, seed=2), 6)
    assert delta <= 1e-12 and gap == pytest.approx(0.35, abs=1e-12)   # gap = softplus(rho) - softplus(-rho) = rho


@pytest.mark.parametrize("delta", [0.0, 0.003, 0.05, 0.3])
def test_near_tie_language_has_the_wanted_spread_and_bounds_every_sample(delta):
    lang, eps, got, gap = near_tie_language(delta, 10, 24, n=6, seed=3)
    assert got == pytest.approx(delta, abs=1e-9) and gap > 0
    assert (eps == 0.0) == (delta == 0.0)
    data = make_lm_data(lang, 15, 6, seed=4)
    spread, data_gap = score_ties(data)
    assert spread.max() <= delta + 1e-12 and data_gap.min() >= gap - 1e-12
    assert (spread.max() > 1e-12) == (delta > 0)      # near ties, not exact ones, once delta > 0
    sel = optimal_prefix_tokens(prefix_scores(data))
    assert np.array_equal(sel[:, :5], np.broadcast_to(np.arange(5), (15, 5)))   # the query stays the optimal token
    hard = solve(lm_constraints(data), method="dense")
    assert hard.feasible and hard.certified


def test_near_tie_language_eps_grows_with_delta():
    eps = [near_tie_language(x, 10, 24, n=6, seed=3)[1] for x in (0.01, 0.05, 0.1)]
    assert eps[0] < eps[1] < eps[2]


@pytest.mark.parametrize("kw,match", [(dict(delta=-0.1), "delta"), (dict(delta=50.0), "beyond"),
                                      (dict(delta=0.1, n=10), "n must"), (dict(delta=0.1, n=1), "n must")])
def test_near_tie_language_rejects_what_it_cannot_build(kw, match):
    args = dict(V=10, d=24, n=6, seed=0) | kw
    with pytest.raises(ValidationError, match=match):
        near_tie_language(args.pop("delta"), args.pop("V"), args.pop("d"), **args)


# ------------------------------------------------------------------ the experiment


def _exp():
    return registry()["lm-near-ties"]


def _checks(table):
    exp = _exp()
    return {c.name: c for c in exp.checks(build_config(exp, quick=True), table)}


def _named(checks, start):
    got = [c for n, c in checks.items() if n.startswith(start)]
    assert got, (start, sorted(checks))
    return got


@pytest.fixture(scope="module")
def table():
    return pd.read_parquet(TABLE)


def test_the_quick_table_passes_every_check_with_power(table):
    checks = _checks(table)
    assert len(checks) == 1 + 2 * 3 + 2
    for c in checks.values():
        assert c.verdict == "pass", (c.name, c.value, c.threshold)
    for c in _named(checks, "Theorem 3.15 at delta"):
        assert c.claim_is == "alternative" and c.power >= 0.8 and c.p_value is not None and c.p_value < 0.01


def _late(table, delta, col, how):
    """Rewrite ``col`` of the runs at ``delta`` at the last checkpoint (``how(values at step K/10)``)."""
    t = table.copy()
    tr = t[(t["record"] == "train") & (t["delta"] == delta)]
    K = int(tr["step"].max())
    early = tr[tr["step"] == K // 10].set_index("run")[col]
    idx = tr[tr["step"] == K].index
    t.loc[idx, col] = how(early.reindex(t.loc[idx, "run"]).to_numpy())
    return t


@pytest.mark.parametrize("col,start", [("cos_hard", "Theorem 3.15 at delta = 0.01: the cosine"),
                                       ("norm", "Theorem 3.15 at delta = 0.01: ||X(k)||_F rises")])
def test_a_limit_that_stalls_at_one_delta_fails_that_deltas_check_only(table, col, start):
    """1 - O(delta) instead of the limit: at delta 0.01 the last checkpoint falls slightly below the one a decade
    earlier (a plateau with noise); the check fails (not inconclusive), the other deltas' checks still pass."""
    g = np.random.default_rng(0)
    checks = _checks(_late(table, 0.01, col, lambda v: v - 1e-4 * (1.0 + g.random(v.size))))
    for c in checks.values():
        failed = c.name.startswith(start)
        assert c.verdict == ("fail" if failed else "pass"), (c.name, c.verdict)


def test_missing_runs_and_broken_ties_fail_the_assumption_check(table):
    start = "Theorem 3.15: every run meets the assumption"
    t = table[~((table["delta"] == 0.1) & (table["run"] == 3))]
    assert _named(_checks(t), start)[0].verdict == "fail"
    t = table.copy()
    t.loc[(t["record"] == "svm") & (t["delta"] == 0.01) & (t["run"] == 0), "data_spread"] = 0.02   # beyond delta
    assert _named(_checks(t), start)[0].verdict == "fail"
    t = table.copy()
    t.loc[(t["record"] == "svm") & (t["delta"] == 0.0) & (t["run"] == 0), "data_spread"] = 1e-6   # no exact tie
    assert _named(_checks(t), start)[0].verdict == "fail"
    t = table.copy()
    t.loc[(t["record"] == "svm") & (t["delta"] == 0.1) & (t["run"] == 5), "query_optimal"] = False  # another optimum
    assert _named(_checks(t), start)[0].verdict == "fail"


def test_an_uncertified_svm_fails_the_certificate_check(table):
    t = table.copy()
    t.loc[(t["record"] == "svm") & (t["run"] == 2) & (t["delta"] == 0.0), "hard_certified"] = False
    assert _named(_checks(t), "Theorem 3.15: every hard-margin SVM is certified")[0].verdict == "fail"


def test_contrast_deltas_are_reported_not_checked():
    exp = _exp()
    cfg = build_config(exp, quick=True).model_copy(update={"contrast_deltas": [0.3]})
    tasks = exp.tasks(cfg)
    assert [t.params for t in tasks][-1] == {"delta": 0.3, "claimed": False}
    names = [c.name for c in exp.checks(cfg, pd.read_parquet(TABLE))]
    assert not any("delta = 0.3" in n for n in names)
    # the missing contrast runs still count against the assumption check (every run of the preset must be there)
    assert next(c for c in exp.checks(cfg, pd.read_parquet(TABLE)) if "meets the assumption" in c.name).verdict == "fail"


@pytest.mark.parametrize("kw", [dict(n=16), dict(d=8), dict(deltas=[0.1], contrast_deltas=[0.1]),
                                dict(deltas=[-0.1]), dict(steps=5)])
def test_config_rejects_sizes_that_break_the_construction(kw):
    with pytest.raises(ValueError):
        _exp().Config(**kw)


def test_a_tiny_run_writes_the_columns_the_checks_read():
    exp = _exp()
    cfg = exp.Config(m=3, n=4, d=12, vocab=6, deltas=[0.0, 0.05], contrast_deltas=[], runs=2, steps=20)
    table = pd.concat([exp.run_task(cfg, t) for t in exp.tasks(cfg)], ignore_index=True)
    sv, tr = table[table["record"] == "svm"], table[table["record"] == "train"]
    assert len(sv) == 4 and set(tr["step"]) >= {0, 1, 2, 20}
    assert (sv["lang_delta"] - sv["delta"]).abs().max() <= 1e-9
    assert np.all(np.abs(tr["cos_hard"]) <= 1.0) and np.all((tr["opt_prob"] > 0) & (tr["opt_prob"] <= 1))
    # the runs of one seed are paired across delta: the same X(0), so the same norm at step 0
    n0 = tr[tr["step"] == 0].pivot(index="run", columns="delta", values="norm")
    assert np.allclose(n0[0.0], n0[0.05])
    assert {c.name.split(":")[0] for c in exp.checks(cfg, table)} >= {"Theorem 3.15 at delta = 0.05"}
