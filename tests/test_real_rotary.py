"""Rotary heads (Llama-like with grouped-query attention, GPT-NeoX-like with partial rotary): tiny random-weight
models saved to disk, their scores reproduced from the post-rotary query-key formulation against the model's own
attention logits, probed end to end, and the rotary variants the probe does not read refused in one line."""

import json
import types

import numpy as np
import pytest

pytest.importorskip("transformers")

from test_real_any_model import SENTENCES, _tiny  # noqa: E402

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real.adapters import UnsupportedModelError, family_of  # noqa: E402
from attnsvm.real.minilm import augment, load_model  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402

ROTARY_KINDS = ["llama", "llama-bias-linear", "llama-llama3", "neox", "neox50"]


def _model_logits(m, sentences, monkeypatch):
    """The model's own attention logits ``(L, n, H, T, T)``, recorded inside its eager attention (the query and
    the key-value-repeated keys it multiplies, times its scaling), and the model's forward pass."""
    import transformers.models.gpt_neox.modeling_gpt_neox as neox
    import transformers.models.llama.modeling_llama as llama

    mod = llama if m.family.name == "llama" else neox
    orig, logits = mod.eager_attention_forward, []

    def record(module, query, key, value, attention_mask, scaling, **kw):
        keys = llama.repeat_kv(key, getattr(module, "num_key_value_groups", 1))
        logits.append((query @ keys.transpose(2, 3) * scaling).detach().double().numpy())
        return orig(module, query, key, value, attention_mask, scaling=scaling, **kw)

    monkeypatch.setattr(mod, "eager_attention_forward", record)
    fw = m.forward(sentences)
    monkeypatch.setattr(mod, "eager_attention_forward", orig)
    T = fw.mask.shape[1]
    return np.stack([x[..., :T, :T] for x in logits]), fw


def _scores(m, fw, layer, head):
    """(n, T, T) ``[sample, query s, key t]`` scores of the post-rotary formulation:
    ``augment(k~_t)^T W_h augment(q~_s)``."""
    K, Q = m.rotary_states(fw.layer_input(layer), layer, head)
    return np.einsum("ntd,de,nse->nst", augment(K), m.head_weights(layer, head), augment(Q))


@pytest.mark.parametrize("kind", ROTARY_KINDS)
def test_rotary_scores_reproduce_the_model_logits(tmp_path, kind, monkeypatch):
    """Every head's score of every (query, key it sees) pair, from the post-rotary keys and queries and
    W_h = diag(1, ..., 1, 0) / sqrt(m), equals the model's own logit to 1e-10 relative; softmax of them is its
    attention (the model's softmax runs in float32: 1e-6)."""
    m = load_model(_tiny(kind, tmp_path / kind))
    assert m.family.rotary and m.family.causal and m.head_dim == 8 * (1 + kind.startswith("neox"))
    logits, fw = _model_logits(m, SENTENCES[:3], monkeypatch)
    assert logits.shape[:3] == (m.n_layers, 3, m.n_heads)
    T = fw.mask.shape[1]
    seen = fw.mask[:, :, None] & fw.mask[:, None, :] & np.tril(np.ones((T, T), bool))[None]
    for l in range(m.n_layers):
        for h in range(m.n_heads):
            S, ref = _scores(m, fw, l, h), logits[l][:, h]
            assert np.abs(S - ref)[seen].max() <= 1e-10 * np.abs(ref[seen]).max(), (kind, l, h)
            Sm = np.where(seen, S, -1e300)  # finite: padding queries see no key
            P = np.exp(Sm - Sm.max(axis=-1, keepdims=True))
            P /= P.sum(axis=-1, keepdims=True)
            real = fw.mask[:, :, None] & fw.mask[:, None, :]
            np.testing.assert_allclose(P[real], fw.attentions[l][:, h][real], atol=1e-6)


def test_partial_rotary_leaves_the_other_coordinates(tmp_path):
    """GPT-NeoX with rotary_pct 0.25: only the first 4 of each head's 16 coordinates move with the position."""
    m = load_model(_tiny("neox", tmp_path / "neox"))
    fw = m.forward(SENTENCES[:2], attentions=False)
    X = fw.layer_input(1)
    K, Q = m.rotary_states(X, 1, 0)
    WK, WQ, bK, bQ = m.key_query(1, 0)
    np.testing.assert_allclose(K[..., 4:], (X @ WK + bK)[..., 4:], rtol=0, atol=1e-14)
    np.testing.assert_allclose(Q[..., 4:], (X @ WQ + bQ)[..., 4:], rtol=0, atol=1e-14)
    assert np.abs(K[:, 1:, :4] - (X @ WK + bK)[:, 1:, :4]).max() > 1e-3  # rotated beyond position 0
    np.testing.assert_allclose(K[:, 0], (X @ WK + bK)[:, 0], atol=1e-14)  # position 0: no rotation


def test_gqa_query_heads_read_their_key_value_head(tmp_path, monkeypatch):
    """4 query heads on 2 key-value heads: heads 0, 1 read kv head 0 and heads 2, 3 kv head 1 (HF's repeat_kv); the
    other pairing (h % 2) does not reproduce the model's logits."""
    m = load_model(_tiny("llama", tmp_path / "llama"))
    assert [m.family.kv_head(m.model.config, h) for h in range(4)] == [0, 0, 1, 1]
    att = m.model.layers[1].self_attn
    for h in range(4):
        WK = m.key_query(1, h)[0]
        g = h // 2
        np.testing.assert_array_equal(WK, att.k_proj.weight[8 * g:8 * (g + 1)].T.detach().double().numpy())
    logits, fw = _model_logits(m, SENTENCES[:2], monkeypatch)
    T = fw.mask.shape[1]
    seen = fw.mask[:, :, None] & fw.mask[:, None, :] & np.tril(np.ones((T, T), bool))[None]
    monkeypatch.setattr(type(m.family), "kv_head", lambda self, config, head: head % 2)
    S = _scores(m, fw, 1, 1)  # head 1 paired with kv head 1 instead of 0
    assert np.abs(S - logits[1][:, 1])[seen].max() > 1e-3 * np.abs(logits[1][:, 1][seen]).max()


@pytest.mark.parametrize("kind", ["llama", "neox"])
def test_rotary_probe_end_to_end(tmp_path, kind):
    """The probe on a rotary model from disk: certified SVMs in each head's post-rotary space (m + 1 coordinates),
    sink nulls drawn in the same space, a verdict per head."""
    m = load_model(_tiny(kind, tmp_path / kind))
    res = probe_heads(SENTENCES, model=m, layers=[1], svm_sentences=6, null_draws=3, threshold=0.5)
    t = res.table
    assert list(t["head"]) == list(range(m.n_heads)) and (t["layer"] == 1).all()
    assert t["svm_status"].eq("optimal").all(), t
    assert t["verdict"].isin(["beyond null", "below null", "not distinguishable"]).all(), t["verdict"]
    assert t["corr_restricted"].between(-1, 1).all() and t["null_mean"].notna().all()
    assert res.config["family"] == m.family.name and res.config["null_kind"] == "sink"
    assert m.head_weights(1, 0).shape == (m.head_dim + 1, m.head_dim + 1)


def test_rotary_probe_cli(tmp_path):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    neox = _tiny("neox50", tmp_path / "neox50")
    f = tmp_path / "s.txt"
    f.write_text("\n".join(SENTENCES[:4]) + "\n")
    out = tmp_path / "out"  # the stored probe's tasks and its page
    r = CliRunner().invoke(cli, ["probe", "--out", str(out), "--model", neox, "--sentences", str(f), "--svm-sentences",
                                 "4", "--layers", "0", "--threshold", "0.5", "--null-draws", "2", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{"):])
    assert data["config"]["family"] == "gpt_neox" and len(data["heads"]) == 2
    assert (out / "probe.html").is_file() and (out / "probe.csv").is_file()
    assert all(row["svm_status"] == "optimal" and row["verdict"] for row in data["heads"]), data["heads"]
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", neox, "--sentences", str(f), "--query", "all"])
    assert r.exit_code == 2 and "query 'all' is not available for the rotary model" in r.output, r.output


def test_rotary_refusals(tmp_path):
    """What the rotary probe does not read is refused in one line naming what is missing."""
    m = load_model(_tiny("llama", tmp_path / "llama"))
    with pytest.raises(ValidationError, match="query 'all' is not available for the rotary model"):
        probe_heads(SENTENCES[:2], model=m, query="all")
    with pytest.raises(ValidationError, match="transplant_draws: the rotary model .* has no transplant null"):
        probe_heads(SENTENCES[:2], model=m, layers=[0], heads=[0], transplant_draws=1)
    with pytest.raises(ValidationError, match="no rotary position embeddings"):
        load_model(_tiny("gpt2", tmp_path / "gpt2")).rotary_states(np.zeros((1, 2, 32)), 0, 0)
    from attnsvm.real.probe_steps import layer_inputs, prepare_probe

    with pytest.raises(ValidationError, match="head: the rotary model .* is probed per head"):
        layer_inputs(prepare_probe(SENTENCES[:2], model=m, layers=[0], heads=[0]), 0, 2)
    cases = {
        "gptj": ({"model_type": "gptj", "rotary_dim": 4}, "missing: interleaved rotary pairs"),
        "stablelm": ({"model_type": "stablelm"}, "missing: an adapter for the attention of model_type 'stablelm'"),
        "mistral": ({"model_type": "mistral", "rope_theta": 1e4, "sliding_window": 4096}, "sliding-window"),
        "qwen2": ({"model_type": "qwen2", "rope_theta": 1e4}, "sliding-window"),
        "phi": ({"model_type": "phi", "partial_rotary_factor": 0.5}, "partial rotary"),
        "llama-yarn": ({"model_type": "llama", "rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
                       "rope_type 'yarn' is not one the probe reads; missing: rope types beyond"),
        "llama-window": ({"model_type": "llama", "sliding_window": 64}, "sliding-window attention"),
        "neox-dynamic": ({"model_type": "gpt_neox", "rope_scaling": {"type": "dynamic", "factor": 2.0}},
                         "rope_type 'dynamic' changes the rotation with the sequence length"),
    }
    for name, (cfg, what) in cases.items():
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(UnsupportedModelError, match=what) as err:
            load_model(d)
        assert "\n" not in str(err.value) and "not supported" in str(err.value), str(err.value)
    ok = types.SimpleNamespace(model_type="llama", num_hidden_layers=1, num_attention_heads=4, hidden_size=32,
                               max_position_embeddings=8, vocab_size=10, intermediate_size=8, num_key_value_heads=3)
    with pytest.raises(ValidationError, match="num_key_value_heads = 3; expected a positive divisor"):
        family_of(ok).dims(ok)
    ok.num_key_value_heads, ok.head_dim = 2, 0
    with pytest.raises(ValidationError, match="head_dim = 0; expected a positive integer"):
        family_of(ok).dims(ok)
    ok.head_dim = 16  # a head size apart from the width is Llama's to declare
    assert family_of(ok).dims(ok)["head_dim"] == 16 and family_of(ok).dims(ok)["kv_heads"] == 2
    with pytest.raises(ValidationError, match=r"states must have shape \(n, T, d\) with d = 32"):
        m.rotary_states(np.zeros((2, 32)), 0, 0)


def test_a_formulation_that_misses_the_model_attention_is_refused(tmp_path, monkeypatch):
    """The probe checks a rotary head's post-rotary formulation against the model's own attention before any SVM:
    keys and queries left unrotated (a layout it does not match) are refused, the model's own pass."""
    import torch

    from attnsvm.real import cache
    from attnsvm.real.pretrained import PretrainedTransformer

    m = load_model(_tiny("llama", tmp_path / "llama"))
    with torch.no_grad():  # logits of order 1, so that a wrong rotation moves the attention visibly
        m.model.layers[1].self_attn.q_proj.weight *= 100.0
    ok = probe_heads(SENTENCES, model=m, layers=[1], heads=[0], svm_sentences=6, null_draws=0, threshold=0.5)
    assert ok.table["svm_status"].eq("optimal").all()

    def unrotated(self, states, layer, head):
        WK, WQ, bK, bQ = self.key_query(layer, head)
        return states @ WK + bK, states @ WQ + bQ

    monkeypatch.setattr(PretrainedTransformer, "rotary_states", unrotated)
    cache.clear()  # the head's inputs are cached with the forward pass: build them again
    with pytest.raises(ValidationError, match=r"rotary head 1\.0 of .* give attention .* away from the model's own"):
        probe_heads(SENTENCES, model=m, layers=[1], heads=[0], svm_sentences=6, null_draws=0, threshold=0.5)


def test_rotary_model_object_probes_like_its_directory(tmp_path):
    """``attnsvm.probe`` on a GPT-NeoX causal-LM object (its base model read) gives the table of the same model
    probed from its directory."""
    import pandas as pd
    from transformers import AutoTokenizer, GPTNeoXForCausalLM

    import attnsvm

    path = _tiny("neox", tmp_path / "neox")
    obj = GPTNeoXForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    kw = dict(layers=[0], heads=[1], svm_sentences=6, null_draws=2, threshold=0.5)
    res = attnsvm.probe(obj, SENTENCES, tokenizer=tok, **kw)
    ref = attnsvm.probe(path, SENTENCES, **kw)
    assert res.config["family"] == "gpt_neox" and res.table["svm_status"].eq("optimal").all()
    lm = tmp_path / "lm"  # a causal-LM checkpoint (gpt_neox.* and its embed_out head) loads as the base model
    obj.save_pretrained(str(lm))
    tok.save_pretrained(str(lm))
    assert load_model(lm).family.name == "gpt_neox"
    from safetensors.torch import load_file, save_file

    weights = load_file(str(lm / "model.safetensors"))  # Pythia checkpoints name the LM head embed_out
    weights["embed_out.weight"] = weights.pop("lm_head.weight")
    save_file(weights, str(lm / "model.safetensors"), metadata={"format": "pt"})
    assert load_model(lm).family.name == "gpt_neox"
    cols = ["layer", "head", "corr_restricted", "null_mean", "verdict"]
    pd.testing.assert_frame_equal(res.table[cols], ref.table[cols])


def test_rotary_sink_null_rotates_the_query_states_about_their_mean(tmp_path):
    """A rotary head's inputs carry its query map (the queries it gives are the head's post-rotary queries); its
    sink null rotates the query tokens' states about their mean, the constant coordinate and each state's component
    along the mean kept, and solves each null on its own queries (not ``W_h R`` in the post-rotary space); a query
    map that does not give the layer's queries is refused."""
    from attnsvm.real.layer import LayerInputs, QueryMap
    from attnsvm.real.nulls import mean_query_direction, null_heads, null_rng, sink_query_states
    from attnsvm.real.probe_steps import layer_inputs, prepare_probe

    m = load_model(_tiny("llama", tmp_path / "llama"))
    R = m.rotations(5)
    np.testing.assert_allclose(R[0], np.eye(8), atol=1e-15)
    np.testing.assert_allclose(np.einsum("tab,tcb->tac", R, R), np.broadcast_to(np.eye(8), R.shape), atol=1e-12)
    setup = prepare_probe(SENTENCES, model=m, layers=[1], heads=[1], threshold=0.5)
    inp = layer_inputs(setup, 1, 6, head=1)
    qm = inp.query_map
    assert qm is not None and qm.S.shape == (6, m.d + 1) and qm.A.shape == (8, m.d + 1) and qm.R.shape == (6, 8, 8)
    np.testing.assert_allclose(qm.queries(), inp.Z, rtol=0, atol=1e-12 * np.abs(inp.Z).max())
    Sr = sink_query_states(qm.S, null_rng(0, 1, 1, 0, "sink"))
    mu = mean_query_direction(qm.S)
    np.testing.assert_array_equal(Sr[:, -1], qm.S[:, -1])  # the constant coordinate
    np.testing.assert_allclose(Sr @ mu, qm.S @ mu, atol=1e-12)  # each state's component along the mean
    np.testing.assert_allclose(np.linalg.norm(Sr, axis=1), np.linalg.norm(qm.S, axis=1), rtol=1e-12)
    assert np.abs(Sr - qm.S).max() > 0.1  # the rest rotated
    W = m.head_weights(1, 1)
    kw = dict(seed=0, layer=1, head=1, draws=3, kind="sink", threshold=0.5)
    rot = null_heads(inp, W, np.ones(6, int), **kw)
    post = null_heads(LayerInputs.build(inp.X, inp.Z, inp.cand), W, np.ones(6, int), **kw)  # W_h R, no query map
    assert [d["corr_restricted"] for d in rot] != [d["corr_restricted"] for d in post]
    assert [d["corr_restricted"] for d in rot] == [d["corr_restricted"] for d in null_heads(inp, W, np.ones(6, int),
                                                                                           **kw)]
    with pytest.raises(ValidationError, match="query_map: its queries .* lie"):
        LayerInputs.build(inp.X, inp.Z, inp.cand, QueryMap(qm.S, 1.01 * qm.A, qm.R))
    with pytest.raises(ValidationError, match=r"query_map must have S \(m, d \+ 1\)"):
        LayerInputs.build(inp.X, inp.Z, inp.cand, QueryMap(qm.S[:5], qm.A, qm.R))
    with pytest.raises(ValidationError, match="nonzero mean query state"):
        sink_query_states(np.c_[np.r_[qm.S[:1, :-1], -qm.S[:1, :-1]], np.ones(2)], null_rng(0, 1, 1, 0, "sink"))
    with pytest.raises(ValidationError, match="S must be a finite"):
        sink_query_states(qm.S[0], null_rng(0, 1, 1, 0, "sink"))
    with pytest.raises(ValidationError, match="T must be an integer"):
        m.rotations(0)
    with pytest.raises(ValidationError, match="no rotary position embeddings"):
        load_model(_tiny("gpt2", tmp_path / "gpt2")).rotations(3)
