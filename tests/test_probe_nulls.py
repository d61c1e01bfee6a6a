"""Null heads and the verdict's statistics: the mathematics of real/nulls.py and real/verdict.py
(no model needed), each check shown to fail on a broken variant where that is not obvious."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from attnsvm.errors import ValidationError
from attnsvm.real.layer import LayerInputs
from attnsvm.real.nulls import (
    haar_frame, head_spectrum, mean_query_direction, null_heads, null_rng, principal_bases, query_split, sink_null,
    spectrum_null, structured_null, top_selection,
)
from attnsvm.real.verdict import (
    DEPENDS, VERDICTS, add_verdict, add_verdict_by_m, by_adjust, mc_pvalues, null_columns, t_pvalues, verdicts,
)


def _head(rng, d=12, m=3):
    """A random bias-augmented head W (d+1, d+1), key on the left, last row zero, rank m."""
    W = np.zeros((d + 1, d + 1))
    W[:d] = rng.standard_normal((d, m)) @ rng.standard_normal((m, d + 1))
    return W


def _layer(rng, n, T, d):
    """Random bias-augmented tokens (n, T, d + 1), each sentence's query its first token, all candidates."""
    X = np.concatenate([rng.standard_normal((n, T, d)), np.ones((n, T, 1))], axis=-1)
    return LayerInputs.build(X, X[:, 0], np.ones((n, T), bool))


def test_spectrum_null_keeps_the_spectrum_and_the_zero_key_row():
    rng = np.random.default_rng(0)
    W = _head(rng)
    s = head_spectrum(W)
    assert s.size == 3
    Wr = spectrum_null(s, W.shape[0], null_rng(0, 1, 2, 3))
    np.testing.assert_allclose(np.linalg.svd(Wr, compute_uv=False)[:3], s, rtol=1e-10)
    assert np.linalg.matrix_rank(Wr) == 3
    np.testing.assert_array_equal(Wr[-1], 0.0)  # the key side's constant coordinate
    assert np.abs(Wr[:, -1]).max() > 0  # the query side uses all d + 1 coordinates


def test_haar_frame_is_orthonormal_and_rotation_invariant_in_law():
    F = haar_frame(np.random.default_rng(1), 7, 3)
    np.testing.assert_allclose(F.T @ F, np.eye(3), atol=1e-12)
    # Haar on the sphere (r = 1): the first coordinate's square is Beta(1/2, (n-1)/2)
    x = np.array([haar_frame(np.random.default_rng(k), 5, 1)[0, 0] ** 2 for k in range(400)])
    assert stats.kstest(x, stats.beta(0.5, 2.0).cdf).pvalue > 0.01


def test_null_draws_depend_only_on_seed_layer_head_draw_kind():
    s = np.array([3.0, 1.0])
    a = spectrum_null(s, 6, null_rng(4, 2, 1, 0))
    np.testing.assert_array_equal(a, spectrum_null(s, 6, null_rng(4, 2, 1, 0)))
    for other in (null_rng(4, 2, 1, 1), null_rng(4, 2, 0, 0), null_rng(4, 1, 1, 0), null_rng(5, 2, 1, 0),
                  null_rng(4, 2, 1, 0, "structured"), null_rng(4, 2, 1, 0, "transplant"), null_rng(4, 2, 1, 0, "sink")):
        assert not np.allclose(a, spectrum_null(s, 6, other))
    with pytest.raises(ValidationError, match="kind"):
        null_rng(0, 0, 0, 0, "random")


def test_top_selection_matches_sizes_and_picks_the_highest_scores():
    rng = np.random.default_rng(2)
    mask = np.ones((4, 6), bool)
    mask[1, 4:] = False
    sc = rng.standard_normal((4, 6))
    sizes = np.array([1, 4, 2, 6])
    sel = top_selection(sc, sizes, mask)
    np.testing.assert_array_equal(sel.sum(axis=1), sizes)
    assert not (sel & ~mask).any()
    for i in range(4):
        inside = np.where(mask[i], sc[i], -np.inf)
        assert inside[sel[i]].min() >= inside[mask[i] & ~sel[i]].max(initial=-np.inf)


def test_structured_null_lives_in_the_principal_subspaces():
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.standard_normal((5, 8, 6)) @ np.diag([5, 4, 1, 1e-3, 1e-3, 1e-3]),
                        np.ones((5, 8, 1))], axis=-1)
    mask = np.ones((5, 8), bool)
    key, query = principal_bases(X, mask, X[:, 0], 2)
    np.testing.assert_array_equal(key[-1], 0.0)
    W = structured_null(np.array([2.0, 1.0]), key, query, null_rng(0, 0, 0, 0, "structured"))
    np.testing.assert_allclose(key @ (key.T @ W @ query) @ query.T, W, atol=1e-12)
    np.testing.assert_allclose(np.linalg.svd(W, compute_uv=False)[:2], [2.0, 1.0], rtol=1e-10)


def test_null_heads_select_their_own_top_tokens_with_the_heads_sizes():
    rng = np.random.default_rng(4)
    n, T, d = 6, 5, 4
    inp, W = _layer(rng, n, T, d), _head(rng, d, 2)
    sizes = np.array([1, 2, 1, 3, 1, 2])
    rows = null_heads(inp, W, sizes, seed=0, layer=0, head=0, draws=3)
    assert [r["draw"] for r in rows] == [0, 1, 2] and all(r["mean_selected"] == sizes.mean() for r in rows)
    assert all(r["status"] == "optimal" and np.isfinite(r["corr_restricted"]) for r in rows)
    # draw 2 alone equals draw 2 of the three: no dependence on the other draws
    again = null_heads(inp, W, sizes, seed=0, layer=0, head=0, draws=1, start=2)
    assert again[0]["corr_restricted"] == rows[2]["corr_restricted"]
    with pytest.raises(ValidationError, match="sizes"):
        null_heads(inp, W, np.full(n, T + 1), seed=0, layer=0, head=0, draws=1)


def test_monte_carlo_pvalues():
    assert mc_pvalues(0.5, [0.1, 0.2, 0.6, np.nan]) == (2 / 4, 3 / 4)
    assert mc_pvalues(1.0, [0.1, 0.2]) == (1 / 3, 1.0)
    assert all(np.isnan(mc_pvalues(np.nan, [0.1])))


def test_predictive_t_pvalues_are_uniform_for_exchangeable_normal_draws():
    """The real value and its K nulls iid normal: p_upper ~ U(0, 1) exactly (KS not rejected), and
    p_upper + p_lower = 1; a shifted real value is rejected (the test has power)."""
    rng = np.random.default_rng(5)
    K = 8
    draws = rng.normal(0.2, 0.05, (2000, K + 1))
    p = np.array([t_pvalues(r[0], r[1:])[0] for r in draws])
    assert stats.kstest(p, "uniform").pvalue > 0.01
    pu, pl, z = t_pvalues(draws[0, 0], draws[0, 1:])
    assert abs(pu + pl - 1) < 1e-12
    shifted = np.array([t_pvalues(r[0] + 0.05, r[1:])[0] for r in draws[:500]])
    assert stats.kstest(shifted, "uniform").pvalue < 1e-6
    assert all(np.isnan(t_pvalues(0.3, [0.1, 0.2])))  # fewer than 3 null values


def test_benjamini_yekutieli_matches_the_definition():
    p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, np.nan])
    m = 8
    c = sum(1 / k for k in range(1, m + 1))
    ps = np.sort(p[:m])
    raw = ps * m * c / np.arange(1, m + 1)
    expected = np.minimum(np.minimum.accumulate(raw[::-1])[::-1], 1)
    q = by_adjust(p)
    np.testing.assert_allclose(q[:m], expected)  # p is sorted already
    assert np.isnan(q[-1])
    # BY is more conservative than Benjamini-Hochberg by the factor c(m) (before the cap at 1)
    assert q[0] == pytest.approx(0.001 * m * c)
    with pytest.raises(ValidationError):
        by_adjust(np.array([0.5, 1.5]))


def test_verdicts_and_reasons():
    v, why = verdicts([0.01, 0.5, 0.9, np.nan, 0.5, 0.01], [0.99, 0.5, 0.02, np.nan, 0.5, 0.99],
                      ["optimal", "optimal", "optimal", "optimal", "infeasible", "optimal"],
                      selected_all=[False, False, False, False, False, True])
    assert v == ["beyond null", "not distinguishable", "below null", "not distinguishable", "no SVM", "no SVM"]
    assert "Farkas" in why[4] and why[5] == "all candidates selected: W = 0"
    assert set(v) <= set(VERDICTS)


def test_add_verdict_over_a_table_and_null_columns():
    rng = np.random.default_rng(6)
    rows = []
    for k in range(10):
        nulls = [{"corr_restricted": float(x), "seconds": 0.1} for x in rng.normal(0.2, 0.02, 8)]
        nulls.append({"corr_restricted": float("nan"), "seconds": 0.1})  # an uncertified draw: dropped
        real = 0.9 if k == 0 else float(rng.normal(0.2, 0.02))
        rows.append({"layer": 0, "head": k, "corr_restricted": real, "svm_status": "optimal", **null_columns(real, nulls)})
    t = add_verdict(pd.DataFrame(rows))
    assert (t["n_null"] == 8).all() and (t["n_null_dropped"] == 1).all() and (t["null_kind"] == "spectrum").all()
    assert t.loc[0, "verdict"] == "beyond null"
    assert (t.loc[1:, "verdict"] != "beyond null").all()
    assert (t["q_upper"] >= t["p_upper"]).all()


def test_sink_null_keeps_the_query_independent_part_the_key_side_and_the_spectrum():
    rng = np.random.default_rng(7)
    d = 12
    W = _head(rng, d, 3)
    Z = np.concatenate([rng.standard_normal((9, d)) + 0.5, np.ones((9, 1))], axis=1)
    mu = mean_query_direction(Z)
    np.testing.assert_allclose(mu, Z.mean(0) / np.linalg.norm(Z.mean(0)), rtol=1e-14)
    Wr = sink_null(W, mu, null_rng(0, 1, 2, 3, "sink"))
    assert Wr.dtype == np.float64 and Wr.shape == W.shape
    np.testing.assert_allclose(Wr @ mu, W @ mu, atol=1e-12)  # the key preference shared by every query
    np.testing.assert_allclose(np.linalg.svd(Wr, compute_uv=False), np.linalg.svd(W, compute_uv=False), atol=1e-12)
    np.testing.assert_allclose(Wr @ Wr.T, W @ W.T, atol=1e-12)  # same key side: W R R^T W^T = W W^T
    np.testing.assert_array_equal(Wr[-1], 0.0)  # the key side's constant coordinate stays a zero row
    assert np.abs(Wr - W).max() > 1e-3  # the query-dependent rest is rotated
    # R = W^+ W_r is orthogonal on W's row space, fixes mu and is Haar otherwise: a draw differs from another
    assert np.abs(sink_null(W, mu, null_rng(0, 1, 2, 4, "sink")) - Wr).max() > 1e-3
    with pytest.raises(ValidationError, match="mu"):
        sink_null(W, 2 * mu, null_rng(0, 0, 0, 0, "sink"))
    with pytest.raises(ValidationError, match="mean query"):
        mean_query_direction(np.zeros((3, d + 1)))


def test_sink_null_rotation_is_haar_on_the_complement_of_mu():
    """R mu = mu and, for a unit v orthogonal to mu, R v is uniform on the sphere of mu's complement: the squared
    coordinate of R v along another unit w orthogonal to mu is Beta(1/2, (D - 2)/2). A rotation that also fixed v
    (or a non-Haar one) fails the KS test."""
    D = 6
    mu = np.ones(D) / np.sqrt(D)
    v = np.array([1.0, -1.0, 0, 0, 0, 0]) / np.sqrt(2)
    w = np.array([0, 0, 1.0, -1.0, 0, 0]) / np.sqrt(2)
    # with W = I, sink_null returns R itself
    x = np.array([(w @ sink_null(np.eye(D), mu, null_rng(0, 0, 0, k, "sink")) @ v) ** 2 for k in range(400)])
    assert stats.kstest(x, stats.beta(0.5, (D - 2) / 2).cdf).pvalue > 0.01
    R = sink_null(np.eye(D), mu, null_rng(0, 0, 0, 0, "sink"))
    np.testing.assert_allclose(R @ R.T, np.eye(D), atol=1e-12)
    np.testing.assert_allclose(R @ mu, mu, atol=1e-12)


def test_query_split_shares():
    """A head that is only a sink (W = k mu^T) has qi_share 1 and a position-0 advantage; a head whose query side
    is orthogonal to mu has qi_share 0."""
    rng = np.random.default_rng(8)
    n, T, d = 5, 6, 4
    X = np.concatenate([rng.standard_normal((n, T, d)), np.ones((n, T, 1))], axis=-1)
    Z = X[:, 2]
    cand = np.ones((n, T), bool)
    mu = mean_query_direction(Z)
    k = np.zeros(d + 1)
    k[:d] = X[:, 0, :d].mean(0) - X[:, 1:, :d].mean((0, 1))
    q = query_split(np.outer(k, mu), X, Z, cand)
    assert q["qi_share"] == pytest.approx(1.0) and q["qi_first_logit"] > 0
    P = np.eye(d + 1) - np.outer(mu, mu)
    q0 = query_split(_head(rng, d, 2) @ P, X, Z, cand)
    assert q0["qi_share"] == pytest.approx(0.0, abs=1e-20) and q0["qi_first_logit"] == pytest.approx(0.0, abs=1e-12)


def test_sink_null_heads_draw_from_their_own_stream():
    rng = np.random.default_rng(9)
    n, T, d = 6, 5, 4
    inp, W = _layer(rng, n, T, d), _head(rng, d, 2)
    rows = null_heads(inp, W, np.ones(n, int), seed=0, layer=0, head=0, draws=2, kind="sink")
    assert [r["kind"] for r in rows] == ["sink", "sink"] and all(np.isfinite(r["corr_restricted"]) for r in rows)
    again = null_heads(inp, W, np.ones(n, int), seed=0, layer=0, head=0, draws=1, start=1, kind="sink")
    assert again[0]["corr_restricted"] == rows[1]["corr_restricted"]
    with pytest.raises(ValidationError, match="kind"):
        null_heads(inp, W, np.ones(n, int), seed=0, layer=0, head=0, draws=1, kind="rotation")


def test_verdicts_at_each_m_and_the_stable_verdict():
    """BY runs over the heads at each m (a head far beyond its nulls at one m is not diluted by the other m's rows);
    the stable verdict is the verdict where the two largest m agree, else 'depends on sample size'."""
    rng = np.random.default_rng(10)
    rows = []
    for m in (16, 48, 128):
        for h in range(6):
            nulls = [{"corr_restricted": float(x), "seconds": 0.0} for x in rng.normal(0.2, 0.02, 8)]
            real = {0: 0.9, 1: 0.9 if m < 128 else 0.2, 2: 0.2 if m == 16 else 0.9}.get(h, float(rng.normal(0.2, 0.02)))
            rows.append({"layer": 3, "head": h, "m": m, "corr_restricted": real, "svm_status": "optimal",
                         **null_columns(real, nulls)})
    t = add_verdict_by_m(pd.DataFrame(rows))
    for m, g in t.groupby("m"):  # q-values are BY over the 6 heads of that m only
        np.testing.assert_allclose(g["q_upper"], by_adjust(g["p_upper"].to_numpy()))
    stable = t.groupby("head")["stable_verdict"].first()
    assert stable[0] == "beyond" and stable[1] == DEPENDS and stable[2] == "beyond"
    assert (t.groupby("head")["stable_verdict"].nunique() == 1).all()
    one = add_verdict_by_m(pd.DataFrame(rows[:6]))  # one m: that m's verdict
    assert one.loc[0, "stable_verdict"] == "beyond"
    with pytest.raises(ValidationError, match="'m'"):
        add_verdict_by_m(pd.DataFrame(rows).drop(columns="m"))
