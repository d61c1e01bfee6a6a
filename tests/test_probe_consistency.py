"""The margin ratio (:func:`attnsvm.real.layer.margin_ratio`) is consistent in m where ``corr_restricted`` is not.

Planted heads on a random-weight BERT-like model (tests/test_probe_calibration.py's model, layer 1), at two numbers
of SVM sentences m (nested samples): max-margin heads (40 times the nuclear Gen-SVM of random one-token selections
on a larger sample of POOL sentences: every probe sees a part of it), random heads (the model's own) and
sink-plus-random heads (a random head plus tests/test_probe_sink_calibration.py's planted sink), each selecting by
its own attention and judged against its sink nulls. benchmarks/probe_consistency.py measures the same at m = 8..128
with every candidate statistic (docs/guide/probe.md, "Which statistic is consistent as m grows").
"""

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("transformers")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real.layer import corr, margin_ratio, summary  # noqa: E402
from attnsvm.real.nulls import mean_query_direction, null_heads, own_selection  # noqa: E402
from attnsvm.real.probe_steps import layer_inputs, prepare_probe, random_like  # noqa: E402
from attnsvm.real.sentences import corpus_sentences  # noqa: E402
from attnsvm.real.verdict import LEVEL, P_METHOD_LOG, add_verdict, null_columns, t_pvalues  # noqa: E402
from test_probe_calibration import THRESHOLD, random_model  # noqa: E402
from test_probe_sink_calibration import SINK, sink_direction  # noqa: E402

POOL = 64  # the max-margin heads' sample
MS = (8, 48)
HEADS = (0, 1, 2, 3)
DRAWS = 8  # sink nulls per head and m (the probe's default, attnsvm.real.nulls.NULL_DRAWS)


def _stats(inp, W) -> dict:
    """``corr_restricted`` and ``margin_ratio`` of a head ``W (D, D)`` against the SVM of its own selections."""
    sc = inp.scores(W)
    sel = own_selection(sc, inp.cand, THRESHOLD)
    sol = summary(inp.svm(sel))
    S, R = sol["W"], inp.restrict(W)
    return {"corr_restricted": corr(R, S), "margin_ratio": margin_ratio(sc, sel, inp.cand, R, S),
            "svm_status": sol["status"]}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """``{(kind, head, m): (head's statistics, [its sink nulls' statistics])}`` (no nulls for "random")."""
    path = random_model("bert", tmp_path_factory.mktemp("bert") / "random", layers=2, heads=len(HEADS))
    setup = prepare_probe(corpus_sentences(POOL, 3), model=path, max_length=24, threshold=THRESHOLD, seed=0)
    big = layer_inputs(setup, 1, POOL)
    out = {}
    for h in HEADS:
        first = np.eye(big.X.shape[1], dtype=bool)[np.zeros(POOL, int)]
        sol = big.svm(random_like(first, big.cand, np.random.default_rng([17, h])))
        assert sol.status == "optimal"
        Wr = setup.model.head_weights(1, h)
        for m in MS:
            inp = layer_inputs(setup, 1, m)
            mu = mean_query_direction(inp.Z)
            heads = {"max-margin": 40.0 * sol.W, "random": Wr,
                     "sink+random": Wr + SINK * np.outer(sink_direction(inp), mu)}
            for kind, W in heads.items():  # the probe's own sink nulls (null_heads: both statistics per draw)
                nulls = [] if kind == "random" else null_heads(inp, W, np.ones(m, int), seed=0, layer=1, head=h,
                                                               draws=DRAWS, kind="sink", threshold=THRESHOLD)
                out[(kind, h, m)] = (_stats(inp, W), nulls)
    return out


def _p(planted, kind, h, m, stat) -> float:
    real, nulls = planted[(kind, h, m)]
    return t_pvalues(real[stat], [d[stat] for d in nulls])[0]


def _means(planted, kind, stat) -> list:
    """The mean ``stat`` of the ``kind`` heads at each m of :data:`MS`."""
    return [float(np.mean([planted[(kind, h, m)][0][stat] for h in HEADS])) for m in MS]


def test_margin_ratio_detects_max_margin_heads_at_both_m_and_corr_restricted_does_not(planted):
    """Every max-margin head is beyond its sink nulls in margin_ratio at both m; in corr_restricted not at the
    smaller m (the head is max-margin on POOL sentences, and at m = 8 its SVM is another minimal-norm solution)."""
    for m in MS:
        p = [_p(planted, "max-margin", h, m, "margin_ratio") for h in HEADS]
        assert max(p) < LEVEL, (m, p)
    p = [_p(planted, "max-margin", h, MS[0], "corr_restricted") for h in HEADS]
    assert max(p) >= LEVEL, p  # corr_restricted misses some at m = 8


def _verdicts(planted, statistic: str):
    """The probe's verdict with ``statistic`` on the max-margin and sink-plus-random heads judged together (one
    Benjamini-Yekutieli step over the 8 heads at each m), from :func:`null_columns` of their sink nulls'
    :func:`null_heads` draws, as :func:`attnsvm.real.probe_tasks.combine` does."""
    tables = []
    for m in MS:
        rows = [{"m": m, "layer": 1, "head": 10 * k + h, "kind": kind, "svm_status": real["svm_status"],
                 "corr_restricted": real["corr_restricted"], "margin_ratio": real["margin_ratio"],
                 **null_columns(real[statistic], nulls, kind="sink", statistic=statistic,
                                margin_ratio=real["margin_ratio"])}
                for k, kind in enumerate(("max-margin", "sink+random")) for h in HEADS
                for real, nulls in [planted[(kind, h, m)]]]
        tables.append(add_verdict(pd.DataFrame(rows)))
    return pd.concat(tables, ignore_index=True)


def test_the_margin_ratio_verdict_finds_max_margin_heads_at_both_m_where_corr_restricted_does_not(planted):
    """statistic="margin_ratio" (issue 39): every head that is max-margin on POOL sentences is "beyond null" against
    its sink nulls at both m, its p-values the predictive t on log(margin_ratio), and at most one sink-plus-random head
    is (a stray false call at FDR 0.05); the default statistic, corr_restricted, calls none of the max-margin heads
    beyond null at the smaller m (the reason the option exists)."""
    mr, cr = _verdicts(planted, "margin_ratio"), _verdicts(planted, "corr_restricted")
    for name, t in (("margin_ratio", mr), ("corr_restricted", cr)):
        print(f"\n{name}:\n" + t[["m", "kind", "head", name, "null_mean", "p_upper", "q_upper", "p_margin_ratio",
                                   "verdict"]].to_string(index=False))
    assert (mr["statistic"] == "margin_ratio").all() and (mr["p_method"] == P_METHOD_LOG).all()
    assert np.allclose(mr["p_upper"], mr["p_margin_ratio"]) and np.allclose(cr["p_margin_ratio"], mr["p_margin_ratio"])
    for m in MS:
        g = mr[mr["m"] == m]
        assert (g.loc[g["kind"] == "max-margin", "verdict"] == "beyond null").all(), m
        assert (g.loc[g["kind"] == "sink+random", "verdict"] == "beyond null").sum() <= 1, m
    small = cr[(cr["m"] == MS[0]) & (cr["kind"] == "max-margin")]
    assert not (small["verdict"] == "beyond null").any(), small["verdict"].tolist()


def test_one_margin_ratio_threshold_separates_max_margin_from_random_heads_at_every_m(planted):
    """The smallest max-margin value over both m exceeds the largest random and sink-plus-random value over both m
    (a statistic whose scale does not move with m); corr_restricted has no such threshold."""
    def split(stat):
        mm = min(planted[("max-margin", h, m)][0][stat] for h in HEADS for m in MS)
        other = max(planted[(k, h, m)][0][stat] for k in ("random", "sink+random") for h in HEADS for m in MS)
        return mm, other

    mm, other = split("margin_ratio")
    print(f"\nmargin_ratio: max-margin >= {mm:.3f}, random and sink+random <= {other:.3f}")
    assert mm > other
    mm, other = split("corr_restricted")
    print(f"corr_restricted: max-margin >= {mm:.3f}, random and sink+random <= {other:.3f}")
    assert mm <= other


def test_sink_plus_random_drift_with_m_is_smaller_than_the_max_margin_excess_in_margin_ratio_only(planted):
    """From m = 8 to 48 the sink-plus-random heads' mean margin_ratio moves by less than the max-margin heads' mean
    excess over them at either m, so no drift with m can carry them across (it does move: a running minimum of
    margins over nested samples against a growing SVM norm); in corr_restricted the max-margin heads' excess is
    negative at m = 8 while the sink-plus-random heads drift down, the flip issue 39 saw."""
    for stat, holds in (("margin_ratio", True), ("corr_restricted", False)):
        sr, mm = _means(planted, "sink+random", stat), _means(planted, "max-margin", stat)
        drift, excess = abs(sr[1] - sr[0]), min(b - a for a, b in zip(sr, mm))
        print(f"\n{stat}: sink+random {sr[0]:.3f} -> {sr[1]:.3f}, max-margin {mm[0]:.3f} -> {mm[1]:.3f}")
        assert (drift < excess) == holds, stat


def test_margin_ratio_is_one_for_the_svm_itself_scale_free_and_checked():
    """On a toy layer: the SVM's own W (any scale) has ratio 1, a random W on its own selections less; no SVM or
    no inequality row gives NaN; shapes and selections outside the candidates are refused."""
    from attnsvm.real.layer import LayerInputs

    rng = np.random.default_rng(0)
    m, T, d = 6, 5, 4
    X = np.concatenate([rng.standard_normal((m, T, d)), np.ones((m, T, 1))], axis=2)
    inp = LayerInputs.build(X, X[:, 1], np.ones((m, T), bool))
    sel = np.zeros((m, T), bool)
    sel[np.arange(m), rng.integers(0, T, m)] = True
    S = summary(inp.svm(sel))["W"]
    for scale in (1.0, 7.0):
        assert margin_ratio(inp.scores(scale * S), sel, inp.cand, inp.restrict(scale * S), S) == pytest.approx(
            1.0, abs=1e-6)
    W = rng.standard_normal((d + 1, d + 1))
    W[-1] = 0.0
    own = own_selection(inp.scores(W), inp.cand, 0.5)
    So = summary(inp.svm(own))["W"]
    assert margin_ratio(inp.scores(W), own, inp.cand, inp.restrict(W), So) < 1.0
    assert np.isnan(margin_ratio(inp.scores(S), sel, inp.cand, inp.restrict(S), None))
    assert np.isnan(margin_ratio(inp.scores(S), inp.cand, inp.cand, inp.restrict(S), S))  # all selected: no row
    with pytest.raises(ValidationError, match="shape"):
        margin_ratio(inp.scores(S)[:, :3], sel, inp.cand, S, S)
    with pytest.raises(ValidationError, match="inside cand"):
        margin_ratio(inp.scores(S), sel, sel & False, S, S)


def test_a_margin_ratio_at_or_below_zero_gets_exact_ranks_and_words_not_nan():
    """A ratio <= 0 (no positive margin on the selections) has no log: the head's margin-ratio p-values are then the
    exact Monte Carlo ranks (never NaN), the row says so in words, and the early stop never stops on it."""
    from attnsvm.real.verdict import P_METHOD_RANKS, mc_pvalues, statistic_pvalues, stop_reason

    nulls = [0.01, 0.02, 0.04, 0.03]
    for real in (0.0, -0.2):  # the head: below every null, p_upper 1, p_lower the rank 1/(K + 1)
        pu, pl, z, method = statistic_pvalues(real, nulls, "margin_ratio")
        assert (pu, pl, method) == (1.0, 0.2, P_METHOD_RANKS) and np.isnan(z)
    assert statistic_pvalues(0.025, [0.0] + nulls[1:], "margin_ratio")[:2] == mc_pvalues(0.025, [0.0] + nulls[1:])
    pu, pl, z, method = statistic_pvalues(0.05, nulls, "margin_ratio")  # all positive: the t on the logs
    assert method == P_METHOD_LOG and (pu, pl, z) == t_pvalues(np.log(0.05), np.log(nulls))
    assert stop_reason(-np.inf, np.log(nulls), 4) is None and stop_reason(0.0, [0.0, 0.1, -np.inf], 4) is None
    draws = [{"corr_restricted": 0.2, "margin_ratio": v, "seconds": 0.1} for v in nulls]
    row = {"layer": 0, "head": 0, "svm_status": "optimal", **null_columns(0.0, draws, statistic="margin_ratio")}
    t = add_verdict(pd.DataFrame([row]))
    assert t.loc[0, "p_upper"] == 1.0 and "no log" in t.loc[0, "p_note"] and "exact Monte Carlo" in t.loc[0, "p_note"]
    assert t.loc[0, "verdict"] == "not distinguishable" and "by a positive margin" in t.loc[0, "verdict_reason"]
    with pytest.raises(ValidationError, match="statistic"):
        null_columns(0.1, draws, statistic="corr")


def _stored(head: int, *, with_ratio: bool) -> list:
    """A head task's row and its null task's 4 rows as a stored probe keeps them (``with_ratio``: the null rows have
    ``null_margin_ratio``, as since this change; without it, as stored before)."""
    head_row = {"part": "head", "layer": 3, "head": head, "corr_restricted": 0.2 + 0.1 * head,
                "margin_ratio": 0.3 + 0.1 * head, "corr_random_restricted": 0.01, "advantage": 0.19,
                "svm_status": "optimal", "selected_all": False}
    return [head_row] + [{"part": "null", "layer": 3, "head": head, "kind": "sink", "draw": d, "null_status": "optimal",
                          "null_corr_restricted": 0.18 + 0.01 * d, "null_seconds": 0.1,
                          **({"null_margin_ratio": 0.02 + 0.005 * d} if with_ratio else {})} for d in range(4)]


@pytest.mark.parametrize("with_ratio", [True, False], ids=["stored-now", "stored-before"])
def test_stored_null_rows_with_and_without_their_margin_ratio_combine(with_ratio):
    """A stored probe's rows combine whatever the statistic: with the nulls' margin ratios the margin-ratio p-value
    is a number (the verdict's p_upper where it is the statistic); rows stored before null heads recorded one still
    combine, the corr_restricted verdict unchanged, and the margin ratio's p-value and verdict are unavailable in
    words (p_note, verdict_reason), never "nan" on the page's headline."""
    from attnsvm.real.probe_config import ProbeConfig
    from attnsvm.real.probe_tasks import combine
    from attnsvm.real.probe_view import _verdict_html

    stored = pd.DataFrame(_stored(0, with_ratio=with_ratio) + _stored(1, with_ratio=with_ratio))
    out = {}
    for stat in ("corr_restricted", "margin_ratio"):
        cfg = ProbeConfig(layers=[3], heads=[0, 1], null_draws=4, svm_sentences=8, n_sentences=16, statistic=stat,
                          null_stop=False)
        out[stat] = t = combine(cfg, stored)
        assert (t["statistic"] == stat).all()
        html = _verdict_html(t, {"statistic": stat})
        assert f"The verdict's statistic: <b>{stat}" in html and "nan" not in html.lower()
    cr, mr = out["corr_restricted"], out["margin_ratio"]
    assert np.isfinite(cr["p_upper"]).all() and cr["verdict"].tolist() == ["not distinguishable", "beyond null"]
    if with_ratio:
        assert np.isfinite(cr["p_margin_ratio"]).all() and np.allclose(mr["p_upper"], cr["p_margin_ratio"])
        assert (mr["p_method"] == P_METHOD_LOG).all() and (mr["p_note"] == "none").all()
        assert mr["verdict"].tolist() == ["beyond null", "beyond null"]  # head 0: beyond in its margin only
    else:
        assert cr["p_margin_ratio"].isna().all() and mr["p_upper"].isna().all()
        assert cr["p_note"].str.contains("no margin-ratio p-value").all()
        assert (mr["verdict"] == "not distinguishable").all()
        assert mr["verdict_reason"].str.contains("no margin-ratio p-value and no verdict on it").all()


def test_the_cli_offers_every_statistic_and_refuses_others():
    """``attnsvm probe --statistic`` offers exactly :data:`attnsvm.real.verdict.STATISTICS` (its choices are spelled
    out in the CLI, which imports nothing of attnsvm.real at start) and refuses another in one line, exit 2."""
    from click.testing import CliRunner

    from attnsvm.cli import cli
    from attnsvm.real.verdict import STATISTICS

    opt = next(p for p in cli.commands["probe"].params if p.name == "statistic")
    assert tuple(opt.type.choices) == STATISTICS
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--statistic", "corr"])
    assert r.exit_code == 2 and "'corr' is not one of" in r.output


def test_the_printed_table_shows_the_verdicts_statistic_beside_its_nulls_mean():
    """With statistic="margin_ratio" the printed table's columns put ``statistic`` and ``margin_ratio`` right before
    ``null_mean`` (the nulls' mean of the margin ratio) and corr_restricted after the verdict; the default's are as
    before."""
    from attnsvm.real.probe_config import ProbeConfig
    from attnsvm.real.probe_tasks import combine
    from attnsvm.real.probe_view import main_columns

    stored = pd.DataFrame(_stored(0, with_ratio=True) + _stored(1, with_ratio=True))
    cols = {s: main_columns(combine(ProbeConfig(layers=[3], heads=[0, 1], null_draws=4, svm_sentences=8,
                                                n_sentences=16, statistic=s, null_stop=False), stored))
            for s in ("corr_restricted", "margin_ratio")}
    assert cols["corr_restricted"] == ["layer", "head", "corr_restricted", "null_mean", "p_upper", "q_upper", "verdict",
                                       "margin_ratio", "corr_random_restricted", "svm_status"]
    assert cols["margin_ratio"] == ["layer", "head", "statistic", "margin_ratio", "null_mean", "p_upper", "q_upper",
                                    "verdict", "corr_restricted", "corr_random_restricted", "svm_status"]
