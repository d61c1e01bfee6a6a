"""The probe as a pipeline of steps (attnsvm.real.probe_steps) on tiny random models: one cache for models
and the forward pass, the head and null tasks, the transplant null (descriptive, outside the verdict),
``device`` for the solves, the stored probe without a second probe pass, and the verdict heat maps."""

import os

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("transformers")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real import cache  # noqa: E402
from attnsvm.real.minilm import load_model  # noqa: E402
from attnsvm.real.nulls import transplant_heads  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_steps import (  # noqa: E402
    NullDraws, head_task, layer_inputs, layer_selections, null_task, prepare_probe, transplant_sources,
)
from attnsvm.real.sentences import corpus_sentences  # noqa: E402
from attnsvm.real.verdict import transplant_columns  # noqa: E402
from test_probe_calibration import random_model  # noqa: E402

SENTENCES = corpus_sentences(12, 3)
KW = dict(max_length=32, threshold=0.1, seed=2)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("pipe")
    return {kind: random_model(kind, base / kind, seed=5, layers=2, heads=3, width=18) for kind in ("bert", "gpt2")}


def test_one_cache_loads_a_directory_once_and_again_after_its_files_change(models, tmp_path):
    import shutil

    d = shutil.copytree(models["bert"], tmp_path / "copy")
    a = load_model(str(d))
    assert load_model(str(d)) is a  # the same unchanged directory: the cached object
    cfg = d / "config.json"
    cfg.write_text(cfg.read_text() + "\n")  # same model, other file size: loaded again
    b = load_model(str(d))
    assert b is not a and load_model(str(d)) is b


def test_the_forward_pass_runs_once_for_every_step(models, monkeypatch):
    m = load_model(models["bert"])
    cache.clear()  # no cached forward pass: the probe below runs one
    calls = []
    orig = type(m).forward
    monkeypatch.setattr(type(m), "forward", lambda self, *a, **k: calls.append(1) or orig(self, *a, **k))
    probe_heads(SENTENCES, model=m, layers=[0, 1], svm_sentences=4, null_draws=3, **KW)
    s = prepare_probe(SENTENCES, model=m, layers=[1], heads=[0], **KW)
    assert len(calls) == 1 and s.cached


def test_the_stored_probes_tasks_of_a_layer_share_its_svm_inputs_while_the_forward_pass_is_cached(models):
    from attnsvm.real.probe_config import ProbeConfig
    from attnsvm.real.probe_tasks import setup_of, svm_inputs

    def _setup(cfg, layer, head):  # what a stored task builds: its setup and its layer's SVM inputs
        s = setup_of(cfg, layers=[layer], heads=[head])
        m = min(cfg.svm_sentences, len(s.sentences))
        return s, None, svm_inputs(s, layer, m), m

    cache.clear()
    cfg = ProbeConfig(sentences=SENTENCES, model=str(models["gpt2"]), layers=[0, 1], heads=[0, 1, 2], svm_sentences=5,
                      **KW)
    s0, _, a, m = _setup(cfg, 1, 0)
    s1, _, b, _ = _setup(cfg, 1, 2)  # another head (or its null task) of the layer: the same object
    assert b is a and m == 5 and s1.fw is s0.fw
    fresh = layer_inputs(s0, 1, 5)
    for name in ("X", "Z", "cand", "P", "B"):
        np.testing.assert_array_equal(getattr(a, name), getattr(fresh, name))
    _, _, c, _ = _setup(cfg, 0, 0)  # another layer: its own inputs
    assert c is not a and c.X.shape == a.X.shape and not np.array_equal(c.X, a.X)
    other = cfg.model_copy(update={"seed": 3})  # other queries: not the cached inputs
    assert not np.array_equal(_setup(other, 1, 0)[2].Z, a.Z)
    _setup(cfg.model_copy(update={"sentences": SENTENCES[:8]}), 1, 0)  # other sentences: another forward pass
    assert cache.last_forward() is not s0.fw and len(cache._DERIVED) == 1  # the old pass's inputs are dropped
    built = []
    assert cache.derived(s0.fw, "k", lambda: built.append(1) or 7) == 7  # s0.fw is no longer the cached pass
    assert cache.derived(s0.fw, "k", lambda: built.append(1) or 7) == 7 and len(built) == 2
    fw = cache.last_forward()
    assert cache.derived(fw, "k", lambda: built.append(1) or [8]) is cache.derived(fw, "k", lambda: [9])
    assert len(built) == 3
    cache.clear()
    assert cache.derived(fw, "k", lambda: [9]) == [9]


def test_head_task_is_the_probes_row(models):
    """Composing the steps by hand gives the row probe_heads reports (the same numbers, one layer input)."""
    res = probe_heads(SENTENCES, model=models["gpt2"], layers=[1], heads=[2], svm_sentences=6, null_draws=3,
                      null_stop=False, **KW)
    setup = prepare_probe(SENTENCES, model=models["gpt2"], layers=[1], heads=[2], **KW)
    ls = layer_selections(setup, 1)
    inp = layer_inputs(setup, 1, 6)
    row, support = head_task(setup, inp, 1, 2, ls.sel[0, :6])
    got = res.table.iloc[0]
    for k, v in row.items():
        if "seconds" not in k:
            assert got[k] == v or (isinstance(v, float) and np.isnan(v) and np.isnan(got[k])), k
    np.testing.assert_array_equal(support, res.support[(1, 2)])
    draws = null_task(setup, inp, 1, 2, ls.sel[0, :6], NullDraws(3, "sink"))  # the default probe's verdict nulls
    assert [d["draw"] for d in draws] == [0, 1, 2] and {d["kind"] for d in draws} == {"sink"}
    assert np.isclose(np.nanmean([d["corr_restricted"] for d in draws]), got["null_mean"], rtol=1e-12)


def test_transplant_sources_are_other_heads_in_a_fixed_order(models):
    m = load_model(models["bert"])
    src = transplant_sources(m, 1, 2, 5, seed=0)  # 2 x 3 heads: 5 others
    assert len(set(src)) == 5 and (1, 2) not in src
    assert transplant_sources(m, 1, 2, 2, seed=0) == src[:2]  # more draws extend the list
    assert transplant_sources(m, 1, 2, 5, seed=1) != src or transplant_sources(m, 1, 2, 5, seed=3) != src


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_a_head_transplanted_onto_its_own_layer_is_the_head(models, kind):
    """The transplant applies W_{l',h'} to *this* layer's states (GPT-2: this layer's ln_1 output), selecting
    by the head's rule: transplanting a head onto its own layer reproduces its selections and its score, and
    a head of another layer reads this layer's states (its selections differ from its own layer's)."""
    setup = prepare_probe(SENTENCES, model=models[kind], layers=[1], heads=[0], **KW)
    ls = layer_selections(setup, 1)
    inp = layer_inputs(setup, 1, 8)
    row, _ = head_task(setup, inp, 1, 0, ls.sel[0, :8])
    W = setup.model.head_weights(1, 0)
    (d,) = transplant_heads(inp, [("L1-H0", W)], ls.sel[0, :8].sum(axis=1), threshold=setup.threshold)
    assert d["kind"] == "transplant" and d["source"] == "L1-H0"
    assert np.isclose(d["corr_restricted"], row["corr_restricted"], rtol=1e-9)
    assert np.isclose(d["mean_selected"], ls.sel[0, :8].sum(axis=1).mean())
    with pytest.raises(ValidationError, match="transplanted head"):
        transplant_heads(inp, [("bad", np.eye(3))], ls.sel[0, :8].sum(axis=1), threshold=0.1)


def test_transplant_columns_never_change_the_verdict(models):
    base = probe_heads(SENTENCES, model=models["bert"], layers=[1], svm_sentences=6, null_draws=4, **KW)
    with_t = probe_heads(SENTENCES, model=models["bert"], layers=[1], svm_sentences=6, null_draws=4,
                         transplant_draws=2, **KW)
    t = with_t.table
    cols = [c for c in base.table.columns if "seconds" not in c]
    pd.testing.assert_frame_equal(t[cols], base.table[cols])
    assert {"transplant_mean", "transplant_sd", "transplant_above", "n_transplant", "transplant_sources"} <= set(t)
    assert (t["n_transplant"] + t["n_transplant_dropped"] == 2).all()
    assert with_t.config["transplant_draws"] == 2
    # the columns are those of transplant_columns over the draws
    c = transplant_columns(0.3, [{"corr_restricted": 0.1, "seconds": 1.0, "source": "L0-H1"},
                                 {"corr_restricted": 0.5, "seconds": 2.0, "source": "L0-H2"},
                                 {"corr_restricted": float("nan"), "seconds": 1.0, "source": "L1-H1"}])
    assert c["transplant_mean"] == pytest.approx(0.3) and c["transplant_above"] == 0.5
    assert c["n_transplant"] == 2 and c["n_transplant_dropped"] == 1 and c["transplant_sources"] == "L0-H1,L0-H2,L1-H1"
    # transplant alone (no spectrum nulls): descriptive columns, no verdict
    only = probe_heads(SENTENCES, model=models["bert"], layers=[1], heads=[0], svm_sentences=6, null_draws=0,
                       transplant_draws=1, **KW)
    assert "verdict" not in only.table and "transplant_mean" in only.table


def test_device_reaches_the_solves_and_is_checked(models):
    pytest.importorskip("torch")
    a = probe_heads(SENTENCES, model=models["bert"], layers=[1], heads=[1], svm_sentences=5, null_draws=0, **KW)
    b = probe_heads(SENTENCES, model=models["bert"], layers=[1], heads=[1], svm_sentences=5, null_draws=0,
                    device="cpu", **KW)
    assert b.table["svm_status"].iloc[0] == "optimal"
    assert np.isclose(a.table["corr_restricted"].iloc[0], b.table["corr_restricted"].iloc[0], rtol=1e-6)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ValidationError, match="CUDA"):
            probe_heads(SENTENCES, model=models["bert"], layers=[1], heads=[1], svm_sentences=5, device="cuda", **KW)
    with pytest.raises(ValidationError, match="device"):
        probe_heads(SENTENCES, model=models["bert"], layers=[1], heads=[1], svm_sentences=5, device="tpu:7", **KW)
    from click.testing import CliRunner

    from attnsvm.cli import cli

    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", models["bert"], "--device", "tpu:7"])
    assert r.exit_code != 0 and "device" in r.output and "Traceback" not in r.output


def test_stored_probe_runs_no_second_probe_and_its_page_leads_with_the_verdict(models, tmp_path, monkeypatch):
    import attnsvm.real.probe as probe_mod
    from attnsvm.cli.probe import run_probe

    monkeypatch.setattr(probe_mod, "probe_heads", lambda *a, **k: (_ for _ in ()).throw(AssertionError("called")))
    sfile = tmp_path / "s.txt"
    sfile.write_text("\n".join(SENTENCES))
    out = tmp_path / "out"
    run_probe([1], [0, 2], str(sfile), len(SENTENCES), str(out), model=models["gpt2"], svm_sentences=6, null_draws=3,
              transplant_draws=1, max_length=32, seed=2)
    table = pd.read_csv(out / "probe.csv")
    assert {"verdict", "transplant_mean"} <= set(table.columns)
    html = (out / "probe.html").read_text()
    assert "id='grid-verdict'" in html and "id='grid-null_mean'" in html
    assert html.index("id='grid-verdict'") < html.index("id='grid-advantage'")  # random selections: secondary
    for r in table.itertuples():
        assert f"data-verdict='{r.verdict}'" in html
    assert os.path.exists(out / "probe_heatmap.png")


#: the names attnsvm.real.probe re-exported under their old import path until 0.3 -> (home module, name there)
OLD_PATHS = {
    "_LAST_FORWARD": ("attnsvm.real.cache", "_FORWARD"), "_corr": ("attnsvm.real.layer", "corr"),
    "_summary": ("attnsvm.real.layer", "summary"), "LayerInputs": ("attnsvm.real.layer", "LayerInputs"),
    **{name: ("attnsvm.real.nulls", name) for name in (
        "NULL_DRAWS", "NULL_SELECTIONS", "VERDICT_NULL_KINDS", "null_heads", "select_tokens", "top_selection")},
    "_baselines": ("attnsvm.real.probe_steps", "baselines"),
    **{name: ("attnsvm.real.probe_steps", name) for name in (
        "QUERIES", "baseline_rng", "check_indices", "head_selections", "head_seq_svm", "head_task", "layer_inputs",
        "layer_selections", "layer_tokens", "null_task", "prepare_probe", "random_like", "row_statistic",
        "seq_layer_inputs")},
    "head_null_columns": ("attnsvm.real.probe_tasks", "head_null_columns"),
}


@pytest.mark.parametrize("old, home", OLD_PATHS.items(), ids=list(OLD_PATHS))
def test_the_old_import_paths_of_the_probe_steps_are_gone(old, home):
    """attnsvm.real.probe no longer re-exports the steps, nulls and layer helpers (0.3): each answers at its home."""
    import importlib

    import attnsvm.real.probe as probe_mod

    assert not hasattr(probe_mod, old)
    with pytest.raises(ImportError):
        exec(f"from attnsvm.real.probe import {old}", {})
    assert hasattr(importlib.import_module(home[0]), home[1])
