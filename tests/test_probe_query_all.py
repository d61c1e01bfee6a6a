"""``probe_heads(query="all")``: every word token of every sentence is a query.

Checked on MiniLM (8 sentences, one layer, two heads, SVMs on 4): the shapes of the selections and the
query mask (no [CLS]/[SEP] query, nothing selected outside a query's candidates, no selection at a
non-query position), every SVM certified or its status reported, the sequence Gen-SVM rows equal a slow
reference built per (sentence, query) with ``gen_constraints`` and concatenated (same row multiset, same
optimum), and the random baselines have the sizes of the head's selections per query. On a tiny
GPT-2 no query selects a token after it. ``run_probe`` writes the page for query="all".
"""

import os

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real.minilm import load_minilm  # noqa: E402
from attnsvm.real.pretrained import augment  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_steps import QUERIES, head_seq_svm, random_like  # noqa: E402
from attnsvm.real.sentences import corpus_sentences  # noqa: E402
from attnsvm.svm import ConstraintSet, gen_constraints, seq_constraints, solve  # noqa: E402

LAYER, HEADS, M = 5, [0, 3], 4


@pytest.fixture(scope="module")
def run():
    sentences = corpus_sentences(8, 0)
    res = probe_heads(sentences, layers=[LAYER], heads=HEADS, svm_sentences=M, query="all")
    fw = load_minilm().forward(sentences, attentions=True)
    return res, fw


def test_shapes_and_query_mask(run):
    res, fw = run
    n, T = fw.mask.shape
    assert "all" in QUERIES and res.config["query"] == "all"
    assert res.queries.shape == (n, T) and res.queries.dtype == bool
    lengths = fw.mask.sum(axis=1)
    assert not res.queries[:, 0].any() and not res.queries[np.arange(n), lengths - 1].any()  # no [CLS] / [SEP]
    assert np.array_equal(res.queries, fw.mask & ~fw.special)
    for h in HEADS:
        sel = res.selected[(LAYER, h)]
        assert sel.shape == (n, T, T) and sel.dtype == bool
        assert np.array_equal(sel.any(axis=-1), res.queries)  # one set per query, nothing elsewhere
        assert not np.any(sel & ~fw.mask[:, None, :])  # only real tokens
        assert res.attention[(LAYER, h)].shape == (4, T) and res.support[(LAYER, h)].shape == (M, T)
    assert res.candidates.shape == (4, T)
    row = res.table.iloc[0]
    pairs = int(res.queries.sum())
    assert row["mean_selected"] == pytest.approx(res.selected[(LAYER, HEADS[0])].sum() / pairs)
    for c in ("frac_cls", "frac_sep", "frac_self", "frac_prev", "frac_next"):
        assert 0.0 <= row[c] <= 1.0 and np.isclose(row[c] * pairs, round(row[c] * pairs))  # a fraction of the pairs


def test_every_svm_certified_or_reported(run):
    res, _ = run
    for _, r in res.table.iterrows():
        assert r["svm_status"] in ("optimal", "optimal_inaccurate", "infeasible")
        if r["svm_status"] == "optimal":
            assert np.isfinite(r["corr_restricted"]) and r["svm_gap"] <= 1e-6
        else:
            assert np.isnan(r["corr"])
        assert all(s in ("optimal", "optimal_inaccurate", "infeasible") for s in r["random_status"].split(","))


def _sorted_rows(U, V, rhs, eq):
    M_ = np.concatenate([U, V, rhs[:, None], eq[:, None].astype(float)], axis=1)
    return M_[np.lexsort(M_.T[::-1])]


def test_rows_equal_the_per_query_reference(run):
    res, fw = run
    X = augment(fw.layer_input(LAYER)) * fw.mask[:, :, None]
    Xs, valid, queries = X[:M], fw.mask[:M], res.queries[:M]
    sel = res.selected[(LAYER, HEADS[0])][:M]
    cs = seq_constraints(Xs, sel, False, valid=valid, queries=queries)
    parts = [gen_constraints(Xs[i:i + 1], Xs[i, k][None], sel[i, k][None], valid=valid[i:i + 1])
             for i, k in zip(*np.nonzero(queries))]  # one query at a time
    U = np.concatenate([p.U for p in parts])
    V = np.concatenate([p.V for p in parts])
    rhs = np.concatenate([p.rhs for p in parts])
    eq = np.concatenate([p.is_equality for p in parts])
    assert cs.N == U.shape[0] > 0
    np.testing.assert_array_equal(_sorted_rows(cs.U, cs.V, cs.rhs, cs.is_equality), _sorted_rows(U, V, rhs, eq))
    ours = head_seq_svm(Xs, valid, queries, sel)
    lab = {name: np.concatenate([np.full(p.N, v) for p, v in zip(parts, vals)])
           for name, vals in (("sample", np.nonzero(queries)[0]), ("query", np.nonzero(queries)[1]))}
    token, other = np.concatenate([p.token for p in parts]), np.concatenate([p.other for p in parts])
    ref = solve(ConstraintSet(U, V, rhs, eq, lab["sample"], lab["query"], token, other, "seq", cs.shape), "nuclear")
    assert ours.certified and ref.certified
    assert float(ours.norm_value) == pytest.approx(float(ref.norm_value), rel=1e-8)
    assert res.table.iloc[0]["svm_nuclear"] == pytest.approx(float(ours.norm_value), rel=1e-8)


def test_random_baseline_sizes_per_query(run):
    res, fw = run
    sel = res.selected[(LAYER, HEADS[0])]
    cand = fw.mask[:, None, :] & res.queries[:, :, None]
    rand = random_like(sel, cand, np.random.default_rng(0))
    assert np.array_equal(rand.sum(axis=-1), sel.sum(axis=-1)) and not np.any(rand & ~cand)


def test_causal_decoder_selects_nothing_after_its_query(tmp_path):
    from test_real_any_model import SENTENCES, _tiny

    path = _tiny("gpt2", tmp_path / "gpt2")
    res = probe_heads(SENTENCES, model=path, layers=[1], heads=[0, 1], svm_sentences=2, query="all", threshold=0.2)
    T = res.queries.shape[1]
    assert res.queries.any() and not res.queries[:, 0].any()
    later = np.triu(np.ones((T, T), bool), k=1)
    for sel in res.selected.values():
        assert sel.shape == (len(SENTENCES), T, T)
        assert not np.any(sel & later[None])
        assert np.array_equal(sel.any(axis=-1), res.queries)
    assert set(res.table["svm_status"]) <= {"optimal", "optimal_inaccurate", "infeasible"}
    with pytest.raises(ValidationError, match="cls"):
        probe_heads(SENTENCES, model=path, layers=[1], heads=[0], svm_sentences=0, query="cls")


def test_unknown_query_names_all():
    with pytest.raises(ValidationError, match="all"):
        probe_heads(["A sentence."], query="every")


def test_run_probe_writes_the_page(tmp_path):
    from attnsvm.cli.probe import run_probe

    text = run_probe(layers=[LAYER], heads=[0], n_sentences=6, svm_sentences=2, out=str(tmp_path), query="all",
                     view_sentences=2)
    assert "probe.html" in text
    page = open(os.path.join(str(tmp_path), "probe.html"), encoding="utf-8").read()
    assert "query = all" in page and page.count("class='sent'") == 2
