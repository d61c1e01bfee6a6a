"""Probing any local model: tiny BERT / GPT-2 built from configs (random weights, MiniLM's WordPiece
tokenizer files beside them), a planted max-margin head the probe must recognize, and clear refusals."""

import json
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from attnsvm.errors import ResourceLimitError, ValidationError  # noqa: E402
from attnsvm.real.adapters import UnsupportedModelError  # noqa: E402
from attnsvm.real.minilm import load_model, model_path  # noqa: E402
from attnsvm.real.pretrained import augment  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_steps import random_like  # noqa: E402
from attnsvm.svm import gen_constraints, solve  # noqa: E402

SENTENCES = ["The cat sat on the mat.", "Margins decide which token wins.", "A short one here.",
             "Every head reads its own tokens.", "Small models learn fast.", "Attention picks a word."]
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _gen_svm(X, Z, mask, selected):
    """The probe's nuclear Gen-SVM of one head's selections: the rows of the real tokens (``mask``) only."""
    return solve(gen_constraints(X, Z, selected, valid=mask), "nuclear", formulation="gen")


def _tiny(kind, path, tokenizer=True, seed=0):
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, RobertaConfig, RobertaModel

    torch.manual_seed(seed)
    if kind == "bert":
        model = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128))
    elif kind == "roberta":  # RoBERTa: BERT's layers, positions counted from padding_idx + 1
        model = RobertaModel(RobertaConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                           intermediate_size=64, max_position_embeddings=130, pad_token_id=0))
    elif kind.startswith("llama"):  # grouped-query attention: 4 query heads sharing 2 key-value heads
        from transformers import LlamaConfig, LlamaModel

        extra = {"llama-bias-linear": dict(attention_bias=True, rope_parameters={
                     "rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}),
                 "llama-llama3": dict(rope_parameters={"rope_type": "llama3", "factor": 8.0, "rope_theta": 1e4,
                                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 16})}.get(kind, {})
        model = LlamaModel(LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                       bos_token_id=101, eos_token_id=102, **extra))
    elif kind.startswith("neox"):  # partial rotary: the first rotary_pct of each head's 16 coordinates rotated
        from transformers import GPTNeoXConfig, GPTNeoXModel

        model = GPTNeoXModel(GPTNeoXConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, rotary_pct={"neox": 0.25, "neox50": 0.5}[kind],
                                           max_position_embeddings=128, bos_token_id=101, eos_token_id=102))
    else:
        model = GPT2Model(GPT2Config(vocab_size=30522, n_embd=32, n_layer=2, n_head=2, n_positions=128,
                                     bos_token_id=101, eos_token_id=102))
    model.save_pretrained(str(path))
    if tokenizer:
        for f in TOKENIZER_FILES:
            shutil.copy(os.path.join(model_path(), f), str(path))
    return str(path)


@pytest.mark.parametrize("kind", ["bert", "roberta", "gpt2"])
def test_head_weights_reproduce_the_attention(tmp_path, kind):
    """softmax_t(x~_t^T W_h x~_s) over the tokens the query sees == the model's attention, every head."""
    m = load_model(_tiny(kind, tmp_path / kind))
    assert m.family.name == {"roberta": "bert"}.get(kind, kind) and m.family.causal == (kind == "gpt2")
    fw = m.forward(SENTENCES[:3])
    n, T = fw.mask.shape
    causal = np.tril(np.ones((T, T), bool)) if m.family.causal else np.ones((T, T), bool)
    for l in range(m.n_layers):
        X = augment(fw.layer_input(l))
        for h in range(m.n_heads):
            S = np.einsum("ntd,de,nse->nst", X, m.head_weights(l, h), X)  # [sample, query s, key t]
            ok = fw.mask[:, None, :] & causal[None]
            S = np.where(ok, S, -np.inf)
            P = np.exp(S - S.max(axis=-1, keepdims=True))
            P /= P.sum(axis=-1, keepdims=True)
            real = fw.mask[:, :, None] & fw.mask[:, None, :]
            np.testing.assert_allclose(P[real], fw.attentions[l][:, h][real], atol=1e-10)


def _plant(m, layer, head, W, alpha):
    """Write alpha * W ((d+1, d+1), last row 0) into one head: scale W_K [W_Q^T | b_Q] = alpha W[:d]."""
    import torch

    d, mh = m.d, m.head_dim
    U, s, Vt = np.linalg.svd(alpha * W[:d], full_matrices=False)
    r = int(np.sum(s > 1e-12 * s[0]))
    assert r <= mh, f"the SVM has rank {r} > head size {mh}"
    WK = np.zeros((d, mh))
    R = np.zeros((mh, d + 1))
    WK[:, :r] = U[:, :r] * np.sqrt(s[:r])
    R[:r] = np.sqrt(s[:r])[:, None] * Vt[:r] / m.score_scale(layer)
    WQ, bQ = R[:, :d].T, R[:, d]
    lo, hi = head * mh, (head + 1) * mh
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    with torch.no_grad():
        if m.family.name == "bert":
            att = m.model.encoder.layer[layer].attention.self
            att.query.weight[lo:hi] = t(WQ.T)
            att.query.bias[lo:hi] = t(bQ)
            att.key.weight[lo:hi] = t(WK.T)
            att.key.bias[lo:hi] = 0.0
        else:
            c = m.model.h[layer].attn.c_attn
            c.weight[:, lo:hi] = t(WQ)
            c.bias[lo:hi] = t(bQ)
            c.weight[:, d + lo:d + hi] = t(WK)
            c.bias[d + lo:d + hi] = 0.0
    np.testing.assert_allclose(m.head_weights(layer, head), alpha * W, atol=1e-9 * alpha * np.abs(W).max())


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_planted_max_margin_head_is_recognized(tmp_path, kind):
    """A head whose key-query matrix *is* the nuclear SVM of chosen selections: corr_restricted ~ 1,
    clearly above every untouched head (whose figures against random selections are printed)."""
    n = len(SENTENCES)
    src = _tiny(kind, tmp_path / "random")
    m = load_model(src)
    first = probe_heads(SENTENCES, model=m, layers=[0], heads=[0], svm_sentences=0)  # the probe's queries
    q = first.queries
    fw = m.forward(SENTENCES, max_length=128, attentions=False)
    T = fw.mask.shape[1]
    cand = fw.mask & (np.arange(T)[None, :] <= q[:, None]) if m.family.causal else fw.mask
    X = augment(fw.layer_input(0)) * fw.mask[:, :, None]
    Z = X[np.arange(n), q]
    rng = np.random.default_rng(1)
    chosen = random_like(np.eye(T, dtype=bool)[np.zeros(n, int)], cand, rng)  # one random candidate per sentence
    sol = _gen_svm(X, Z, cand, chosen)
    assert sol.status == "optimal"
    # margins >= alpha * 1 make the selected token's attention >= 1 / (1 + T e^-alpha) ~ 1 > threshold
    _plant(m, 0, 0, sol.W, alpha=40.0)
    planted = tmp_path / "planted"
    m.model.save_pretrained(str(planted))
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(src, f), str(planted))

    # threshold 0.5: the near-uniform random heads select their argmax only (at 0.1 they often select every
    # candidate of a short causal prefix, and an SVM without inequality rows is W = 0: NaN correlations)
    res = probe_heads(SENTENCES, model=str(planted), layers=[0, 1], svm_sentences=n, baseline_draws=3, threshold=0.5)
    np.testing.assert_array_equal(res.queries, q)
    np.testing.assert_array_equal(res.selected[(0, 0)], chosen)
    t = res.table.set_index(["layer", "head"])
    assert t["svm_status"].eq("optimal").all()
    assert t.loc[(0, 0), "corr_restricted"] >= 0.99 and t.loc[(0, 0), "corr"] >= 0.99

    # The untouched random-weight heads are printed with the spread of 8 random-selection SVMs, not asserted
    # to lie inside it: measured, their corr (0.06-0.12) lies above that range for 4 of 6 heads and their
    # corr_restricted (0.13-0.27) above their random baselines: a head's own selections already align its W
    # with their SVM more than random selections do (a property of the baseline, reported in the note of
    # this change). What the test asserts is that the probe tells the planted head apart from all of them.
    pm = load_model(str(planted))
    pfw = pm.forward(SENTENCES, attentions=False)
    others = t.drop(index=(0, 0))
    assert (t.loc[(0, 0), "corr_restricted"] - others["corr_restricted"] >= 0.5).all(), others
    for (l, h), row in others.iterrows():
        Xl = augment(pfw.layer_input(l)) * pfw.mask[:, :, None]
        Zl = Xl[np.arange(n), q]
        Wh = pm.head_weights(l, h)
        draws = []
        for _ in range(8):
            r = _gen_svm(Xl, Zl, cand, random_like(res.selected[(l, h)], cand, rng))
            if r.status == "optimal":
                draws.append(np.sum(Wh * r.W) / np.linalg.norm(Wh) / np.linalg.norm(r.W))
        lo_, hi_ = min(draws), max(draws)
        print(f"{kind} head ({l},{h}): corr {row['corr']:.3f} corr_restricted {row['corr_restricted']:.3f}, "
              f"random corr in [{lo_:.3f}, {hi_:.3f}]")
    print(f"{kind} planted head (0,0): corr_restricted {t.loc[(0, 0), 'corr_restricted']:.6f}, "
          f"random baseline corr_restricted {t.loc[(0, 0), 'corr_random_restricted']:.3f}")


def test_cli_probe_model_gpt2_and_bert(tmp_path):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    gpt2 = _tiny("gpt2", tmp_path / "gpt2")
    f = tmp_path / "s.txt"
    f.write_text("\n".join(SENTENCES[:4]) + "\n")
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", gpt2, "--sentences", str(f), "--svm-sentences", "4", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{"):])
    assert data["config"]["family"] == "gpt2" and len(data["heads"]) == 4
    for row in data["heads"]:
        assert row["svm_status"] in ("optimal", "infeasible", "optimal_inaccurate")
        assert row["corr_restricted"] is None or abs(row["corr_restricted"]) <= 1
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", gpt2, "--sentences", str(f), "--query", "cls"])
    assert r.exit_code == 2 and "query 'cls' is not available for the causal decoder" in r.output, r.output
    bert = _tiny("bert", tmp_path / "bert")
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", bert, "--sentences", str(f), "--svm-sentences", "3",
                                 "--layers", "1", "--query", "cls"])
    assert r.exit_code == 0 and " beyond null, " in r.output, r.output
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", bert, "--sentences", str(empty)])
    assert r.exit_code == 2 and "holds no non-empty line" in r.output, r.output
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", bert, "--sentences", str(latin)])
    assert r.exit_code == 2 and "not UTF-8" in r.output, r.output


def test_decoder_queries_see_only_earlier_tokens(tmp_path):
    res = probe_heads(SENTENCES, model=_tiny("gpt2", tmp_path / "g"), layers=[1], heads=[0], svm_sentences=0)
    T = max(len(t) for t in res.tokens)
    sel = res.selected[(1, 0)]
    assert sel.shape == (len(SENTENCES), T)
    for i, qi in enumerate(res.queries):
        assert 1 <= qi < len(res.tokens[i]) - 1  # a word: not [CLS] (0) nor [SEP] (last)
        assert sel[i].any() and not sel[i, qi + 1:].any()


def test_clear_errors(tmp_path, monkeypatch):
    from transformers import LlamaConfig, LlamaModel

    with pytest.raises(ValidationError, match="does not exist"):
        load_model(tmp_path / "missing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValidationError, match="not a directory"):
        probe_heads(["a b"], model=str(tmp_path / "file.txt"))
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(ValidationError, match="no config.json"):
        load_model(tmp_path / "emptydir")
    with pytest.raises(ValidationError, match="model must be None, a model directory"):
        probe_heads(["a b"], model=3)
    llama = tmp_path / "llama"  # read since rotary support (test_real_rotary.py); a dynamic rope type is not
    LlamaModel(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=2,
                           rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
               ).save_pretrained(str(llama))
    with pytest.raises(UnsupportedModelError, match="rope_type 'dynamic' changes the rotation with the sequence length"):
        load_model(llama)
    (tmp_path / "bloom").mkdir()
    (tmp_path / "bloom" / "config.json").write_text(json.dumps({"model_type": "bloom"}))
    with pytest.raises(UnsupportedModelError, match="ALiBi"):
        load_model(tmp_path / "bloom")
    notok = _tiny("bert", tmp_path / "notok", tokenizer=False)
    with pytest.raises(ValidationError, match="no tokenizer could be loaded"):
        load_model(notok)
    gpt2 = _tiny("gpt2", tmp_path / "gpt2")
    with pytest.raises(ResourceLimitError, match=r"loading the gpt2 model at .* needs about .* more than the memory"):
        load_model(gpt2, max_memory="1K")
    monkeypatch.setenv("ATTNSVM_MAX_MEMORY", "100K")
    with pytest.raises(ResourceLimitError, match="ATTNSVM_MAX_MEMORY"):
        probe_heads(["a b"], model=gpt2)
