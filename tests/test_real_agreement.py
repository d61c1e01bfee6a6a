"""The agreement curve of the probe (corr_restricted vs the number of sentences): one implementation with
probe_heads, NaN only where an SVM is not certified, the figure, and the validation of ``sizes``."""

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real.agreement import COLUMNS, agreement_curve, agreement_figure  # noqa: E402
from attnsvm.real.minilm import load_minilm  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_config import ProbeConfig  # noqa: E402
from attnsvm.real.sentences import corpus_sentences  # noqa: E402

LAYER, HEADS = 2, [0, 5]


@pytest.fixture(scope="module")
def curve():
    sentences = corpus_sentences(40, 0)
    model = load_minilm()
    res = agreement_curve(model, sentences, ProbeConfig(layers=[LAYER], heads=HEADS), sizes=(8, 16, None))
    return model, sentences, res


def test_table_shape_and_columns(curve):
    _, sentences, res = curve
    t = res.table
    assert list(t.columns) == list(COLUMNS)
    assert res.sizes == [8, 16, len(sentences)]
    assert len(t) == len(HEADS) * 3
    assert sorted(t["m"].unique()) == [8, 16, 40]
    assert set(t["layer"]) == {LAYER} and sorted(t["head"].unique()) == HEADS
    assert (t["seconds"] > 0).all()
    assert np.allclose(t["advantage"], t["corr_restricted"] - t["corr_random_restricted"], equal_nan=True)


def test_largest_size_is_probe_heads(curve):
    model, sentences, res = curve
    # the columns compared do not depend on null heads: none drawn (they cost most of a probe's time)
    ref = probe_heads(sentences, layers=[LAYER], heads=HEADS, svm_sentences=len(sentences), model=model,
                      null_draws=0).table
    got = res.table[res.table["m"] == len(sentences)].reset_index(drop=True)
    for col in ("corr", "corr_restricted", "corr_random_restricted", "advantage", "svm_gap"):
        np.testing.assert_allclose(got[col].to_numpy(float), ref[col].to_numpy(float), rtol=0, atol=1e-12,
                                   equal_nan=True, err_msg=col)
    assert list(got["svm_status"]) == list(ref["svm_status"])
    assert list(got["random_status"]) == list(ref["random_status"])


def test_nan_only_without_certificate(curve):
    t = curve[2].table
    nan = t["corr_restricted"].isna()
    assert (t.loc[nan, "svm_status"] != "optimal").all()
    assert (t.loc[~nan, "svm_status"] == "optimal").all()
    assert (t.loc[~nan, "svm_gap"] <= 1e-6).all()
    base_nan = t["corr_random_restricted"].isna()
    assert t.loc[base_nan, "random_status"].map(lambda s: any(x != "optimal" for x in s.split(","))).all()


def test_figure(curve, tmp_path):
    paths = agreement_figure(curve[2].table, str(tmp_path))
    assert [p.rsplit(".", 1)[1] for p in paths] == ["png", "pdf"]
    for p in paths:
        assert (tmp_path / p.rsplit("/", 1)[1]).stat().st_size > 0


@pytest.mark.parametrize("sizes", [(0,), (8, -1), (8.0,), ("8",), (True,), (41,), ()])
def test_bad_sizes(sizes):
    with pytest.raises(ValidationError, match="sizes"):
        agreement_curve("unused", corpus_sentences(40, 0), sizes=sizes)


def test_infeasible_baseline_is_nan_with_its_status():
    """Repeated sentences share tokens and queries, so random selections of them conflict: no W separates them."""
    sentences = ["the cat sat on the mat ."] * 8 + ["Margins decide which token wins.", "A short one here."]
    t = agreement_curve(None, sentences, ProbeConfig(layers=[1], heads=[0]), sizes=(None,)).table
    assert t["random_status"].tolist() == ["infeasible"] and t["svm_status"].tolist() == ["optimal"]
    assert np.isnan(t["corr_random_restricted"]).all() and np.isnan(t["advantage"]).all()
    assert np.isfinite(t["corr_restricted"]).all()


@pytest.mark.parametrize("name, value", [("layers", [LAYER]), ("heads", HEADS), ("query", "cls"), ("threshold", 0.2),
                                         ("baseline_draws", 1), ("seed", 1), ("max_length", 32), ("n_sentences", 8)])
def test_the_keyword_settings_are_removed(name, value):
    """The form before 0.3 (the probe's settings as keywords, deprecated) is refused as any unknown keyword
    is, before any work; the settings go in ``config`` (the fixture's call)."""
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        agreement_curve("unused", corpus_sentences(40, 0), sizes=(8,), **{name: value})


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="svm_sentences"):
        agreement_curve("unused", corpus_sentences(40, 0), svm_sentences=8)


def test_config_n_sentences_and_seed_pick_the_corpus(monkeypatch):
    """Without sentences: the config's n_sentences when it sets one (else 1000) and its seed."""
    import attnsvm.real.agreement as agreement

    seen = []
    monkeypatch.setattr(agreement, "corpus_sentences", lambda n, seed: seen.append((n, seed)) or ["a b c ."] * 3)
    monkeypatch.setattr(agreement, "resolve_model", lambda *a: (_ for _ in ()).throw(RuntimeError("stop")))
    for config, want in ((None, (agreement.N_SENTENCES, 0)), (ProbeConfig(n_sentences=7, seed=3), (7, 3))):
        with pytest.raises(RuntimeError, match="stop"):
            agreement_curve(None, None, config, sizes=(None,))
        assert seen.pop() == want
