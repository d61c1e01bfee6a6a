"""Calibration of the probe's verdict on random-weight BERT-like and GPT-2-like models.

An untouched random head (weights *and* query bias Gaussian, so its key-query matrix is invariant in
law under rotations of both sides) is exactly one more draw of its own spectrum null: its p-values
must be uniform. Structured (data-aligned, not margin-fitted) heads must not be called "beyond null"
more often than the level allows, and planted max-margin heads must all be "beyond null".
``benchmarks/planted_heads.py`` runs the same at a larger size and prints a detection curve.
"""

import os
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import stats

pytest.importorskip("transformers")

from attnsvm.real.minilm import load_model, model_path  # noqa: E402
from attnsvm.real.pretrained import augment  # noqa: E402
from attnsvm.real.nulls import head_against_nulls, null_rng, principal_bases, structured_null  # noqa: E402
from attnsvm.real.nulls import head_spectrum  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_steps import layer_inputs, prepare_probe, random_like  # noqa: E402
from attnsvm.real.sentences import corpus_sentences  # noqa: E402
from attnsvm.real.verdict import LEVEL, add_verdict  # noqa: E402
from attnsvm.svm import solve, gen_constraints  # noqa: E402
from test_real_any_model import _plant  # noqa: E402

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
INIT = 0.3  # initializer range: attention far from uniform (BERT's default 0.02 gives max attention ~0.15)
THRESHOLD = 0.1


def random_model(kind: str, path, *, seed: int = 0, layers: int = 4, heads: int = 5, width: int = 40,
                 init: float = INIT, kv_heads: int | None = None, rotary_pct: float = 0.25) -> str:
    """A random-weight BERT-like ("bert"), GPT-2-like ("gpt2"), Llama-like ("llama": grouped-query attention,
    ``kv_heads`` key-value heads, default ``heads // 2``) or GPT-NeoX-like ("neox": partial rotary, ``rotary_pct``)
    model saved in ``path`` with MiniLM's tokenizer files. BERT and GPT-2: the query biases are drawn like the
    weights (N(0, init^2)), so each head's bias-augmented W_h is bi-rotation-invariant in law (the spectrum null's
    law given its spectrum). Llama and GPT-NeoX: query and key weights N(0, init^2), query biases zero (Llama has
    none), so each head's pre-rotary query map ``[W_Q^T | b_Q]`` is invariant in law under rotations of the states it
    reads that fix the constant coordinate (the rotary sink null's law, :func:`attnsvm.real.nulls.sink_query_states`)."""
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    torch.manual_seed(seed)
    if kind == "llama":
        from transformers import LlamaConfig, LlamaModel

        m = LlamaModel(LlamaConfig(vocab_size=30522, hidden_size=width, intermediate_size=2 * width,
                                   num_hidden_layers=layers, num_attention_heads=heads,
                                   num_key_value_heads=kv_heads or max(heads // 2, 1), max_position_embeddings=128,
                                   bos_token_id=101, eos_token_id=102, initializer_range=init))
    elif kind == "neox":
        from transformers import GPTNeoXConfig, GPTNeoXModel

        m = GPTNeoXModel(GPTNeoXConfig(vocab_size=30522, hidden_size=width, intermediate_size=2 * width,
                                       num_hidden_layers=layers, num_attention_heads=heads, rotary_pct=rotary_pct,
                                       max_position_embeddings=128, bos_token_id=101, eos_token_id=102,
                                       initializer_range=init))
    elif kind == "bert":
        m = BertModel(BertConfig(vocab_size=30522, hidden_size=width, num_hidden_layers=layers,
                                 num_attention_heads=heads, intermediate_size=2 * width, max_position_embeddings=128,
                                 initializer_range=init))
        with torch.no_grad():
            for layer in m.encoder.layer:
                layer.attention.self.query.bias.normal_(0, init)
    else:
        m = GPT2Model(GPT2Config(vocab_size=30522, n_embd=width, n_layer=layers, n_head=heads, n_positions=128,
                                 bos_token_id=101, eos_token_id=102, initializer_range=init))
        with torch.no_grad():
            for block in m.h:
                block.attn.c_attn.bias[:width].normal_(0, init)
    m.save_pretrained(str(path))
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(model_path(), f), str(path))
    return str(path)


# a planted head: alpha * W written into one head's query/key weights (the any-model tests' helper)
plant = _plant


def planted_model(kind: str, base, planted_heads, *, sentences, seed: int = 0, alpha: float = 40.0, **kw):
    """A random model with ``planted_heads`` of layer 0 replaced by the nuclear SVMs of random one-token
    selections (one per sentence, among its candidates) scaled by ``alpha``; returns (directory, the SVMs)."""
    src = random_model(kind, os.path.join(str(base), "random"), seed=seed, **kw)
    m = load_model(src)
    setup = prepare_probe(sentences, model=m, layers=[0], max_length=24)
    n = len(setup.sentences)
    X = augment(setup.fw.layer_input(0)) * setup.fw.mask[:, :, None]
    svms = {}
    for h in planted_heads:
        chosen = random_like(np.eye(X.shape[1], dtype=bool)[np.zeros(n, int)], setup.cand,
                             np.random.default_rng([seed, h]))
        sol = solve(gen_constraints(X, X[np.arange(n), setup.q], chosen, valid=setup.cand), "nuclear")
        assert sol.status == "optimal"
        plant(m, 0, h, sol.W, alpha)
        svms[h] = sol.W
    out = os.path.join(str(base), "planted")
    m.model.save_pretrained(out)
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(src, f), out)
    return out, svms


def structured_heads(model_dir, sentences, positions, draws: int, seed: int = 0) -> pd.DataFrame:
    """Structured-null heads (the spectrum of the model's head at each (layer, head) position, singular
    vectors inside the top principal subspaces of the layer's states) judged against their spectrum
    nulls by the probe's rule; BY over them."""
    setup = prepare_probe(sentences, model=model_dir, max_length=24, threshold=THRESHOLD, seed=seed)
    rows = []
    for l, h in positions:
        inp = layer_inputs(setup, l, len(setup.sentences))
        s = head_spectrum(setup.model.head_weights(l, h))
        key, query = principal_bases(inp.X, inp.cand, inp.Z, 2 * s.size)
        W = structured_null(s, key, query, null_rng(seed + 1000, l, h, 0, "structured"))
        r = head_against_nulls(inp, W, np.ones(inp.m, int), seed=seed, layer=l, head=h, draws=draws,
                               threshold=THRESHOLD)
        rows.append({"layer": l, "head": h, **r})
    return add_verdict(pd.DataFrame(rows))


SENTENCES = corpus_sentences(8, 3)
PLANTED = (0, 1, 2, 3, 4)


@pytest.fixture(scope="module")
def untouched(tmp_path_factory):
    """Both families, 4 layers x 5 heads of random weights, every head probed with the default verdict null (8
    draws each; no descriptive spectrum nulls beside it: they do not enter the p-values tested here)."""
    tables = []
    for kind in ("bert", "gpt2"):
        path = random_model(kind, tmp_path_factory.mktemp(kind) / "random")
        res = probe_heads(SENTENCES, model=path, svm_sentences=len(SENTENCES), threshold=THRESHOLD, max_length=24,
                          null_stop=False, spectrum_draws=0)  # every draw: the p-values' law is what is tested
        tables.append(res.table.assign(family=kind))
    return pd.concat(tables, ignore_index=True)


def test_untouched_random_heads_have_uniform_p_values(untouched):
    t = untouched
    print("\n" + t.groupby("family")[["mean_selected", "max_attention"]].mean().round(3).to_string())
    assert len(t) >= 24 and (t["n_null"] >= 7).all()
    assert 1.3 < t["mean_selected"].mean() < 4.0 and t["max_attention"].mean() > 0.3  # not near-uniform
    p = t["p_upper"].to_numpy(float)
    assert np.isfinite(p).all()
    ks = stats.kstest(p, "uniform")
    print(f"untouched heads: {len(p)}, KS against U(0, 1): D = {ks.statistic:.3f}, p = {ks.pvalue:.3f}")
    assert ks.pvalue > 0.01
    assert (t["verdict"] != "beyond null").sum() >= len(t) - 1  # FDR 0.05: at most a stray false call


def test_planted_heads_are_beyond_null_in_both_families(tmp_path):
    tables = []
    for kind in ("bert", "gpt2"):
        path, _ = planted_model(kind, tmp_path / kind, PLANTED, sentences=SENTENCES)
        res = probe_heads(SENTENCES, model=path, layers=[0], svm_sentences=len(SENTENCES), threshold=THRESHOLD,
                          max_length=24, null_stop=False)
        tables.append(res.table.assign(family=kind))
    planted = add_verdict(pd.concat(tables, ignore_index=True))  # BY over the 10 planted heads
    print("\n" + planted[["family", "layer", "head", "corr_restricted", "null_mean", "p_upper", "q_upper",
                          "verdict"]].to_string(index=False))
    assert len(planted) >= 10 and set(planted["family"]) == {"bert", "gpt2"}
    assert (planted["verdict"] == "beyond null").all()


def test_structured_heads_are_not_called_beyond_null(tmp_path):
    """Data-aligned heads that are not margin-fitted: BY at 0.05 over 12 of them; under the null the
    chance of any call is <= 0.05, so a seeded run must make none (and their p-values are printed)."""
    path = random_model("bert", tmp_path / "bert", seed=1, layers=3, heads=4)
    positions = [(l, h) for l in range(3) for h in range(4)]
    t = structured_heads(path, SENTENCES, positions, draws=8)
    ks = stats.kstest(t["p_upper"].dropna(), "uniform")
    print(f"\nstructured heads: {len(t)}, beyond null {int((t['verdict'] == 'beyond null').sum())}, "
          f"KS p {ks.pvalue:.3f}")
    assert len(t) == 12 and t["p_upper"].notna().all()
    assert (t["verdict"] != "beyond null").all(), t[["layer", "head", "p_upper", "q_upper"]]
    assert LEVEL == 0.05
