"""Calibration of the sink null (:func:`attnsvm.real.nulls.sink_null`) on random-weight BERT-like, GPT-2-like,
Llama-like (grouped-query attention) and GPT-NeoX-like (partial rotary) models (the planted max-margin heads and
the spectrum null's contrast on the BERT-like and the Llama-like one), as tests/test_probe_calibration.py does it for
the spectrum null (its helpers, model sizes and threshold).

A random head plus a planted sink ``c k mu^T`` (a query-independent key preference for position 0: k the
direction from the mean token to position 0's mean state, mu the unit mean query, c a logit advantage of 4 as
MiniLM's layer-3 heads give [CLS]) is, in law, one more draw of its sink null (``(W + c k mu^T) R = W R +
c k mu^T``), so its p-values must be uniform and it must not be called beyond null at either number of SVM
sentences m; it is *not* a draw of its spectrum null, which calls such heads beyond null (the point of issue 39).
Planted max-margin heads must stay beyond the sink null at both m.

A rotary head's sink null rotates its query tokens' states about their mean (:func:`attnsvm.real.nulls.sink_query_states`;
the module docstring of :mod:`attnsvm.real.nulls` says why not its post-rotary queries), so its planted sink sits in
its query map: ``A + c u mu^T`` (A the head's pre-rotary query map, mu the unit mean query state, u the head-space
direction whose rotated copies favour position 0's key most on average: :func:`plant_sink`), kept exactly by every
draw (``(A + c u mu^T) R = A R + c u mu^T``).
"""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

pytest.importorskip("transformers")

from attnsvm.real.layer import LayerInputs, QueryMap  # noqa: E402
from attnsvm.real.nulls import head_against_nulls, mean_query_direction, own_selection, query_split  # noqa: E402
from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_steps import layer_inputs, prepare_probe, random_like  # noqa: E402
from attnsvm.real.sentences import corpus_sentences  # noqa: E402
from attnsvm.real.nulls import NULLS  # noqa: E402
from attnsvm.real.verdict import add_verdict, stable_verdicts, verdict_summary  # noqa: E402
from test_probe_calibration import PLANTED, THRESHOLD, random_model  # noqa: E402

SENTENCES = corpus_sentences(16, 3)
MS = (8, 16)  # two numbers of SVM sentences
SINK = 4.0  # the planted sink's mean query-independent logit advantage of position 0
DRAWS = 8
#: the random models' sizes: 4 layers of 5 heads (BERT, GPT-2: width 40, head size 8), 6 query heads on 2 key-value
#: heads (Llama: width 48, head size 8), 5 heads (GPT-NeoX: width 80, head size 16, the first 4 coordinates rotated)
FAMILIES = {"bert": {}, "gpt2": {}, "llama": dict(heads=6, width=48), "neox": dict(heads=5, width=80)}


def sink_direction(inp) -> np.ndarray:
    """The planted sink's key direction k (D,): position 0's mean state minus the mean candidate's (last
    coordinate 0), scaled so that ``k mu^T`` gives position 0 a mean query-independent logit advantage of 1."""
    mu = mean_query_direction(inp.Z)
    k = np.zeros(inp.X.shape[2])
    k[:-1] = inp.X[:, 0, :-1].mean(axis=0) - inp.X[inp.cand][:, :-1].mean(axis=0)
    adv = ((inp.X[:, 0] - inp.X[inp.cand].mean(axis=0)) @ k) * (inp.Z @ mu)
    return k / adv.mean()


def plant_sink(inp: LayerInputs, W: np.ndarray, c: float, bilinear: bool = False) -> tuple[LayerInputs, np.ndarray]:
    """A head ``W (D, D)`` on ``inp`` plus a planted sink of mean logit advantage ``c`` for position 0, kept exactly
    by its sink null: ``W + c k mu^T`` (:func:`sink_direction`) on the same inputs; for a rotary head
    (``inp.query_map``) the same W on the queries of the query map ``A + c u mu^T`` (mu the unit mean query state,
    u the mean over queries of ``s_i R_i^T g_i``, g_i = W's key-side image of position 0's key minus the mean
    candidate's, s_i = mu^T S_i, scaled to a mean advantage of 1). ``bilinear``: ``W + c k mu^T`` for a rotary head
    too (in its post-rotary space, mu its unit mean post-rotary query: a sink its W, the identity, cannot have)."""
    qm = inp.query_map
    if qm is None or bilinear:
        return inp, W + c * np.outer(sink_direction(inp), mean_query_direction(inp.Z))
    mu = mean_query_direction(qm.S)
    s = qm.S @ mu  # (m,) each query state's component along the mean
    g = ((inp.X[:, 0] - inp.X[inp.cand].mean(axis=0)) @ W)[:, :-1]  # (m, h): position 0's lead, query side
    back = np.einsum("nab,na->nb", qm.R, g) * s[:, None]  # (m, h): s_i R_i^T g_i, the advantage per unit u
    u = back.mean(axis=0)
    u /= (back @ u).mean()
    sunk = QueryMap(qm.S, qm.A + c * np.outer(u, mu), qm.R)
    return LayerInputs.build(inp.X, sunk.queries(), inp.cand, sunk), W


def judge(setup, positions, kind: str, sink: float = 0.0, planted: dict | None = None,
          bilinear: bool = False, statistic: str = "corr_restricted") -> pd.DataFrame:
    """Each head at ``positions`` (its W ``planted[(m, l, h)]`` where given, else the model's; plus ``sink`` times the
    planted sink, :func:`plant_sink` with ``bilinear``) against ``DRAWS`` nulls of ``kind`` at each m of :data:`MS`,
    selecting by its own attention; BY over the heads at each m, the verdict on ``statistic``. ``sink_logit``: the
    mean over queries of position 0's score minus the mean candidate's, less the unplanted head's (the planted sink's
    advantage)."""
    tables = []
    for m in MS:
        rows = []
        for l, h in positions:
            inp = layer_inputs(setup, l, m, head=h)
            W = (planted or {}).get((m, l, h), setup.model.head_weights(l, h))
            lead = _lead(inp, W)
            if sink:
                inp, W = plant_sink(inp, W, sink, bilinear)
            sel = own_selection(inp.scores(W), inp.cand, THRESHOLD)
            r = head_against_nulls(inp, W, np.ones(m, int), seed=0, layer=l, head=h, draws=DRAWS,
                                   threshold=THRESHOLD, kind=kind, statistic=statistic)
            rows.append({"m": m, "layer": l, "head": h, "selects_first": float(sel[:, 0].mean()),
                         "sink_logit": _lead(inp, W) - lead, **query_split(W, inp.X, inp.Z, inp.cand), **r})
        tables.append(add_verdict(pd.DataFrame(rows)))
    return pd.concat(tables, ignore_index=True)


def _lead(inp, W) -> float:
    """The mean over queries of position 0's score minus the mean of the candidates' (pooled, as :func:`plant_sink`)."""
    return float(((inp.X[:, 0] - inp.X[inp.cand].mean(axis=0)) @ W * inp.Z).sum(axis=1).mean())


def _setup(tmp_path_factory, family):
    path = random_model(family, tmp_path_factory.mktemp(family) / "random", **FAMILIES[family])
    return prepare_probe(SENTENCES, model=path, max_length=24, threshold=THRESHOLD, seed=0)


@pytest.fixture(scope="module")
def random_setup(tmp_path_factory):
    """``random_setup(family)``: the family's random model (:data:`FAMILIES`) prepared on :data:`SENTENCES`, built
    once per module."""
    built = {}

    def get(family):
        if family not in built:
            built[family] = _setup(tmp_path_factory, family)
        return built[family]

    return get


def positions(setup) -> list:
    """Every (layer, head) of the model."""
    return [(l, h) for l in range(setup.model.n_layers) for h in range(setup.model.n_heads)]


def _show(t, label):
    for m, g in t.groupby("m"):
        ks = stats.kstest(g["p_upper"].dropna(), "uniform")
        print(f"\n{label}, m = {m}: {len(g)} heads, KS p {ks.pvalue:.3f}, beyond {int((g.verdict == 'beyond null').sum())},"
              f" below {int((g.verdict == 'below null').sum())}, corr_restricted {g.corr_restricted.mean():.3f} vs null "
              f"{g.null_mean.mean():.3f}, selects position 0 {g.selects_first.mean():.2f}, qi_share "
              f"{g.qi_share.mean():.2f}, qi_first_logit {g.qi_first_logit.mean():.2f}")


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("sink", [0.0, SINK], ids=["random", "random+sink"])
def test_sink_null_p_values_are_uniform_with_and_without_a_planted_sink(random_setup, family, sink):
    setup = random_setup(family)
    t = judge(setup, positions(setup), "sink", sink)
    _show(t, f"{family}: sink null, planted sink {sink}")
    assert (t["n_null"] >= DRAWS - 1).all() and (t["null_kind"] == "sink").all()
    if sink:  # the planted sink is a sink: position 0 selected far more often, its logit advantage as planted
        assert t["selects_first"].mean() > 0.3 and t["sink_logit"].mean() == pytest.approx(SINK, rel=1e-9)
        assert t["qi_first_logit"].mean() > 0.5 * SINK  # the probe's own query split sees it
    for m, g in t.groupby("m"):
        p = g["p_upper"].to_numpy(float)
        assert np.isfinite(p).all()
        assert stats.kstest(p, "uniform").pvalue > 0.01, m
        assert (g["verdict"] == "beyond null").sum() <= 1, m  # FDR 0.05: at most a stray false call
    # the curve test (issue 39): the stable verdict (the two largest m agree) of these heads is "not distinguishable"
    # for at least 80% of them
    stable = stable_verdicts(t).drop_duplicates(["layer", "head"])["stable_verdict"]
    print(f"{family}, planted sink {sink}: stable verdicts {stable.value_counts().to_dict()}")
    assert (stable == "not distinguishable").mean() >= 0.8, stable.value_counts().to_dict()


@pytest.mark.parametrize("sink", [0.0, SINK], ids=["random", "random+sink"])
def test_margin_ratio_verdict_is_calibrated_with_and_without_a_planted_sink(random_setup, sink):
    """statistic="margin_ratio" (the predictive t on log(margin_ratio)) against the sink null: on the random heads and
    the sink-plus-random heads (both one more draw of their sink null) the p-values are uniform at both m and at most
    one head per m is called beyond null (a stray false call at FDR 0.05)."""
    from attnsvm.real.verdict import P_METHOD_LOG

    setup = random_setup("bert")
    t = judge(setup, positions(setup), "sink", sink, statistic="margin_ratio")
    for m, g in t.groupby("m"):
        p = g["p_upper"].to_numpy(float)
        ks = stats.kstest(p, "uniform").pvalue
        print(f"\nmargin_ratio, planted sink {sink}, m = {m}: KS p {ks:.3f}, beyond "
              f"{int((g.verdict == 'beyond null').sum())}, margin_ratio {g.margin_ratio.mean():.4f} vs null "
              f"{g.null_mean.mean():.4f}")
        assert (g["statistic"] == "margin_ratio").all() and (g["p_method"] == P_METHOD_LOG).all()
        assert np.isfinite(p).all() and np.array_equal(p, g["p_margin_ratio"].to_numpy(float))
        assert ks > 0.01, m
        assert (g["verdict"] == "beyond null").sum() <= 1, m


def test_spectrum_null_flags_sink_plus_random_heads(random_setup):
    """The same sink-plus-random heads against their spectrum nulls: not uniform, and called beyond null."""
    setup = random_setup("bert")
    t = judge(setup, positions(setup), "spectrum", SINK)
    _show(t, "bert: spectrum null, planted sink")
    g = t[t["m"] == MS[0]]
    assert stats.kstest(g["p_upper"], "uniform").pvalue < 0.01
    assert (g["verdict"] == "beyond null").sum() >= 1


def test_rotary_calibration_fails_for_a_null_that_drops_the_sink(random_setup):
    """The rotary calibration can fail: Llama-like random heads plus a sink in their post-rotary bilinear form
    (``W + c k mu^T``, :func:`plant_sink` with ``bilinear``) against their spectrum nulls, which scatter it, give
    p-values far from uniform at both m (the heads above their nulls). A sink in the query map (the form a rotary
    head can carry) does not fool the spectrum null there (printed by the uniformity test's family runs; probe
    guide, rotary section)."""
    setup = random_setup("llama")
    t = judge(setup, positions(setup), "spectrum", SINK, bilinear=True)
    _show(t, "llama: spectrum null, planted bilinear sink")
    for m, g in t.groupby("m"):
        assert stats.kstest(g["p_upper"], "uniform").pvalue < 0.01, m
        assert g["z_null"].mean() > 0.5, m


@pytest.mark.parametrize("family", ["bert", "llama", "neox"])
def test_planted_max_margin_heads_are_beyond_the_sink_null_at_both_m(random_setup, family):
    """Max-margin heads: at each m, 40 times the nuclear Gen-SVM of random one-token selections on the first m
    sentences of layer 1 (as planted_model does for its sentences; bilinear heads on the random model's states, as
    planting them into the model's 8-dimensional heads would cut their rank; a rotary head's: on its post-rotary keys
    and queries, its sink null rotating its query states), each selecting by its own attention."""
    setup = random_setup(family)
    planted = {}
    for m in MS:
        for h in PLANTED:
            inp = layer_inputs(setup, 1, m, head=h)
            first = np.eye(inp.X.shape[1], dtype=bool)[np.zeros(inp.m, int)]
            chosen = random_like(first, inp.cand, np.random.default_rng([m, h]))
            sol = inp.svm(chosen)
            assert sol.status == "optimal"
            planted[(m, 1, h)] = 40.0 * sol.W
    t = judge(setup, [(1, h) for h in PLANTED], "sink", planted=planted)
    _show(t, f"{family}: planted max-margin heads, sink null")
    print(t[["m", "head", "corr_restricted", "null_mean", "p_upper", "q_upper", "verdict"]].to_string(index=False))
    assert set(t["m"]) == set(MS) and len(t) == len(MS) * len(PLANTED)
    assert (t["verdict"] == "beyond null").all()
    assert (stable_verdicts(t)["stable_verdict"] == "beyond").all()  # beyond at both m: a stable "beyond"


def test_probe_heads_with_the_sink_null_reports_the_spectrum_null_and_the_sink(tmp_path):
    """``probe_heads(null_kind="sink")``: the verdict's columns come from the sink nulls (``null_kind`` "sink"),
    the spectrum nulls are reported beside them, and every head has its sink statistics; it is the default, and
    ``null_kind="spectrum"`` gives the spectrum verdict."""
    path = random_model("bert", tmp_path / "bert", layers=1, heads=2)
    kw = dict(model=path, svm_sentences=6, threshold=THRESHOLD, max_length=24, null_draws=3, null_stop=False)
    sink = probe_heads(SENTENCES[:6], null_kind="sink", **kw)
    t = sink.table
    assert (t["null_kind"] == "sink").all() and sink.config["null_kind"] == "sink"
    assert (t["n_spectrum"] == 3).all() and t["spectrum_mean"].notna().all() and t["verdict"].notna().all()
    for c in ("qi_share", "qi_first_logit", "sel_first", "sel_last"):
        assert t[c].notna().all(), c
    ok = t["svm_status"] == "optimal"  # the margin ratio beside the verdict: a number exactly where the SVM is certified
    assert t.loc[ok, "margin_ratio"].gt(0).all() and t.loc[~ok, "margin_ratio"].isna().all()
    assert ((t["qi_share"] >= 0) & (t["qi_share"] <= 1)).all()
    default = probe_heads(SENTENCES[:6], **kw).table  # the sink null is the default
    pd.testing.assert_frame_equal(default.drop(columns=["svm_seconds", "random_seconds", "null_seconds"]),
                                  t.drop(columns=["svm_seconds", "random_seconds", "null_seconds"]))
    spec = probe_heads(SENTENCES[:6], null_kind="spectrum", **kw).table
    assert (spec["null_kind"] == "spectrum").all() and "spectrum_mean" not in spec.columns
    # the spectrum columns beside the sink verdict are those of the spectrum verdict's nulls (same draws)
    np.testing.assert_allclose(t["spectrum_mean"], spec["null_mean"], rtol=1e-9)
    np.testing.assert_allclose(t["sel_first"], spec["sel_first"])
    with pytest.raises(ValidationError, match="null_kind"):
        probe_heads(SENTENCES[:6], null_kind="rotation", **kw)
    # the stored probe (--out: runner tasks, then combine) gives the same sink verdict columns
    from attnsvm.cli.probe import run_probe

    kw.pop("threshold"), kw.pop("null_stop")
    text = run_probe(sentences=SENTENCES[:6], out=str(tmp_path / "out"), as_json=True, threshold=THRESHOLD,
                     null_kind="sink", null_stop=False, **kw)
    stored = pd.DataFrame(json.loads(text)["heads"])
    assert (stored["null_kind"] == "sink").all()
    np.testing.assert_allclose(stored["null_mean"], t["null_mean"], rtol=1e-9)
    np.testing.assert_allclose(stored["spectrum_mean"], t["spectrum_mean"], rtol=1e-9)
    # the printed summary names the verdict's null (the same command again: every task resumed)
    text = run_probe(sentences=SENTENCES[:6], out=str(tmp_path / "out"), threshold=THRESHOLD, null_kind="sink",
                     null_stop=False, **kw)
    assert "vs sink nulls" in text and "(spectrum nulls " in text and NULLS["sink"].legend in text
    assert "vs spectrum nulls" in verdict_summary(spec) and "sink" not in verdict_summary(spec)


def test_cli_null_kind_choice(tmp_path):
    """``attnsvm probe --null-kind`` offers spectrum and sink and refuses anything else (exit 2, before any work);
    the stored probe's config carries the kind."""
    from click.testing import CliRunner

    from attnsvm.cli import cli
    from attnsvm.real.probe_config import ProbeConfig

    r = CliRunner().invoke(cli, ["probe", "--help"])
    assert r.exit_code == 0 and "--null-kind [spectrum|sink]" in r.output
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--null-kind", "rotation"])
    assert r.exit_code == 2 and "rotation" in r.output
    assert ProbeConfig().null_kind == "sink" and ProbeConfig(null_kind="spectrum").null_kind == "spectrum"
    with pytest.raises(ValueError):
        ProbeConfig(null_kind="rotation")


def test_probe_at_several_numbers_of_svm_sentences(tmp_path):
    """``probe_heads(svm_sentences=[4, 6])``: one row per head and m (those of one m equal the probe at that m
    alone), BY at each m, a stable verdict per head; ``attnsvm probe --svm-sentences 4,6`` prints them, and with
    --out stores one task per head and m whose table is the in-process one."""
    from click.testing import CliRunner

    from attnsvm.cli import cli

    path = random_model("bert", tmp_path / "bert", layers=1, heads=2)
    kw = dict(model=path, threshold=THRESHOLD, max_length=24, null_draws=3)
    t = probe_heads(SENTENCES[:6], svm_sentences=[6, 4], **kw).table
    assert sorted(zip(t["head"], t["m"])) == [(0, 4), (0, 6), (1, 4), (1, 6)]
    assert t["stable_verdict"].notna().all() and (t.groupby("head")["stable_verdict"].nunique() == 1).all()
    alone = probe_heads(SENTENCES[:6], svm_sentences=4, **kw).table
    assert "m" not in alone.columns and "stable_verdict" not in alone.columns  # one value: today's table
    four = t[t["m"] == 4].reset_index(drop=True)
    np.testing.assert_allclose(four["corr_restricted"], alone["corr_restricted"])
    np.testing.assert_allclose(four["q_upper"], alone["q_upper"])  # BY over the heads of that m only
    args = ["probe", "--model", path, "--sentences", str(_lines(tmp_path)), "--svm-sentences", "4,6", "--null-draws",
            "3", "--max-length", "24", "--null-kind", "spectrum"]
    r = CliRunner().invoke(cli, args + ["--no-store"])
    assert r.exit_code == 0, r.output
    assert "stable_verdict" in r.output and "SVMs on [4, 6]" in r.output
    r = CliRunner().invoke(cli, args + ["--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    stored = pd.read_csv(tmp_path / "o" / "probe.csv")
    shards = sorted(p.name for p in (tmp_path / "o" / "probe" / "shards").rglob("*.parquet"))
    assert "L0-H1-m4-null.parquet" in shards and "L0-H0-m6.parquet" in shards, shards
    inproc = probe_heads(SENTENCES[:6], svm_sentences=[6, 4], null_kind="spectrum", **kw).table  # the same tasks
    assert list(zip(stored["head"], stored["m"])) == list(zip(inproc["head"], inproc["m"]))
    for c in ("corr_restricted", "null_mean", "p_upper", "q_upper"):
        np.testing.assert_allclose(stored[c], inproc[c], rtol=1e-12, err_msg=c)
    assert list(stored["stable_verdict"]) == list(inproc["stable_verdict"])
    # the secondary random baseline only up to --baseline-max-m: no number (words on the page) above it
    r = CliRunner().invoke(cli, args + ["--out", str(tmp_path / "b"), "--baseline-max-m", "4"])
    assert r.exit_code == 0, r.output
    b = pd.read_csv(tmp_path / "b" / "probe.csv")
    assert b.loc[b["m"] == 4, "corr_random_restricted"].notna().all()
    assert b.loc[b["m"] == 6, "corr_random_restricted"].isna().all()
    np.testing.assert_allclose(b["corr_restricted"], stored["corr_restricted"], rtol=1e-12)
    # fewer spectrum nulls beside the sink verdict: their column has that many draws, the verdict is unchanged
    sink = [a for a in args if a not in ("--null-kind", "spectrum")]
    r = CliRunner().invoke(cli, sink + ["--no-store", "--json", "--spectrum-draws", "1"])
    assert r.exit_code == 0, r.output
    one = pd.DataFrame(json.loads(r.output[r.output.index("{"):])["heads"])
    r = CliRunner().invoke(cli, sink + ["--no-store", "--json"])
    full = pd.DataFrame(json.loads(r.output[r.output.index("{"):])["heads"])
    assert (one["n_spectrum"].dropna() == 1).all() and (full["n_spectrum"].dropna() == 3).all()
    np.testing.assert_allclose(one["null_mean"], full["null_mean"], rtol=1e-12)
    assert list(one["verdict"]) == list(full["verdict"])
    from test_probe_no_svm_words import NOT_A_NUMBER, _Visible

    page = _Visible()
    page.feed((tmp_path / "b" / "probe.html").read_text())
    assert not NOT_A_NUMBER.search(" ".join(page.parts))
    text = " ".join(page.parts)  # the headline states the stable verdict and the effect size, not a count at one m
    assert "Stable verdict" in text and "Effect size against the spectrum nulls" in text and "null sds" in text
    assert "Across sample sizes" in text


def _lines(tmp_path):
    f = tmp_path / "sentences.txt"
    f.write_text("\n".join(SENTENCES[:6]) + "\n", encoding="utf-8")
    return f
