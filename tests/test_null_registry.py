"""The null registry (:data:`attnsvm.real.nulls.NULLS`, issue 41): a null kind is one registration; the probe's
settings, the draws' generators, the stored and in-process probes and ``--null-kind`` read the registry, so a kind
added in one place (here: a toy kind registered by this test only) runs end to end."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real import nulls  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_config import ProbeConfig, probe_config  # noqa: E402
from test_probe_calibration import THRESHOLD, random_model  # noqa: E402

SENTENCES = ["The cat sat on the mat while the dog slept.", "Margins decide which token wins.",
             "Every head reads its own tokens here.", "Attention selects a few tokens at a time.",
             "The solver returns multipliers for every row.", "Nuclear norms favour low rank matrices."]


@pytest.fixture
def toy(monkeypatch):
    """A toy verdict kind: the head's W with its sign flipped at random per draw (registered for this test)."""
    monkeypatch.setattr(nulls, "NULLS", dict(nulls.NULLS))
    kind = nulls.register_null(nulls.NullKind(
        "toy", 99, prepare=lambda inputs, W_h, s: np.asarray(W_h, float),
        draw=lambda W, rng: W * rng.choice([-1.0, 1.0]), verdict=True, summary="toy null heads"))
    return kind


def test_a_registered_kind_runs_in_the_probe_and_its_cli(toy, tmp_path):
    assert "toy" in nulls.verdict_null_kinds() and ProbeConfig(null_kind="toy").null_kind == "toy"
    path = random_model("bert", tmp_path / "bert", layers=1, heads=2)
    t = probe_heads(SENTENCES, model=path, svm_sentences=6, threshold=THRESHOLD, max_length=24, null_draws=3,
                    null_kind="toy", null_stop=False).table
    assert (t["null_kind"] == "toy").all() and (t["n_null"] + t["n_null_dropped"] == 3).all()
    assert t["spectrum_mean"].notna().all()  # the spectrum nulls beside any other verdict kind
    # a draw is reproducible from (seed, layer, head, draw, kind) and the toy's tag gives its own stream
    a, b = nulls.null_rng(0, 0, 0, 1, "toy").random(), nulls.null_rng(0, 0, 0, 1, "spectrum").random()
    assert a == nulls.null_rng(0, 0, 0, 1, "toy").random() and a != b
    from click.testing import CliRunner

    from attnsvm.cli import cli

    r = CliRunner().invoke(cli, ["probe", "--help"])
    assert "[spectrum|sink|toy]" in r.output


def test_the_registry_refuses_a_taken_name_or_tag_and_unknown_kinds(toy):
    with pytest.raises(ValidationError, match="already registered"):
        nulls.register_null(nulls.NullKind("sink", 98, prepare=None, draw=None, verdict=False, summary=""))
    with pytest.raises(ValidationError, match="tag 99"):
        nulls.register_null(nulls.NullKind("other", 99, prepare=None, draw=None, verdict=False, summary=""))
    with pytest.raises(ValidationError, match="null_kind"):
        probe_config(null_kind="structured")  # registered, but not a verdict's kind
    with pytest.raises(ValidationError, match="kind must be one of"):
        nulls.null_rng(0, 0, 0, 0, "rotation")


def test_one_validation_of_each_probe_setting():
    """Every setting is checked once, in ProbeConfig, and named in the error."""
    for bad, name in [({"svm_sentences": -1}, "svm_sentences"), ({"svm_sentences": [0, 4]}, "svm_sentences"),
                      ({"baseline_draws": 0}, "baseline_draws"), ({"null_draws": -2}, "null_draws"),
                      ({"threshold": 1.5}, "threshold"), ({"view_sentences": -1}, "view_sentences"),
                      ({"null_selection": "best"}, "null_selection"), ({"query": "any"}, "query"),
                      ({"svm_sentence": 4}, "svm_sentence")]:
        with pytest.raises(ValidationError, match=name):
            probe_config(**bad)
    c = probe_config(svm_sentences=[64, 16, 16], query="all", null_draws=5)
    assert c.svm_sentences == [16, 64] and c.null_draws == 0 and c.sizes_for(20) == [16, 20]
    assert probe_config(svm_sentences=[8]).svm_sentences == 8 and not probe_config(svm_sentences=8).several_m


def test_another_query_draw_keeps_the_sentences_and_moves_the_queries(tmp_path):
    """``query_seed`` (``--query-seed``): the same sentences and nulls' seeds, another draw of the queries; equal to
    ``seed`` it is the default probe."""
    path = random_model("bert", tmp_path / "bert", layers=1, heads=2)
    kw = dict(model=path, svm_sentences=6, threshold=THRESHOLD, max_length=24, null_draws=0, seed=3)
    base, same, other = (probe_heads(SENTENCES, **kw, **extra) for extra in ({}, {"query_seed": 3}, {"query_seed": 4}))
    assert same.sentences == base.sentences == other.sentences
    np.testing.assert_array_equal(same.queries, base.queries)
    assert not np.array_equal(other.queries, base.queries)
    np.testing.assert_array_equal(same.table["corr_restricted"], base.table["corr_restricted"])
    assert other.config["query_seed"] == 4 and "query_seed" not in base.config
