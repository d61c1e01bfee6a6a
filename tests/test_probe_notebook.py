"""The notebook API (issue 42): ``attnsvm.probe`` on a transformers model object already loaded (with its
tokenizer), a directory or a PretrainedTransformer, and the ProbeResult's Jupyter view and pandas export."""

import os
import shutil

import numpy as np
import pytest

pytest.importorskip("transformers")

import attnsvm  # noqa: E402
from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real.adapters import UnsupportedModelError  # noqa: E402
from attnsvm.real.minilm import load_model, model_path  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402

TEXTS = ["The cat sat on the mat.", "Margins decide which token wins.", "A short one here.",
         "Every head reads its own tokens.", "Small models learn fast.", "Attention picks a word."]
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
#: the settings of every probe here: one layer, two heads, a few SVM sentences and null heads
SMALL = dict(layers=0, heads=[0, 1], svm_sentences=4, null_draws=2)


def _objects(kind="bert", seed=0):
    """A tiny random-weight transformers model object (BertModel or GPT2Model) and MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, GPT2Config, GPT2Model

    torch.manual_seed(seed)
    if kind == "bert":
        model = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128))
    else:
        model = GPT2Model(GPT2Config(vocab_size=30522, n_embd=32, n_layer=2, n_head=2, n_positions=128,
                                     bos_token_id=101, eos_token_id=102))
    return model, AutoTokenizer.from_pretrained(model_path(), local_files_only=True)


def _save(model, path) -> str:
    model.save_pretrained(str(path))
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(model_path(), f), str(path))
    return str(path)


def _numbers(table):
    """The table without its timing columns (wall times differ between two runs of the same probe)."""
    return table.drop(columns=[c for c in table.columns if "seconds" in c]).reset_index(drop=True)


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_a_model_object_probes_as_its_saved_directory(tmp_path, kind):
    """attnsvm.probe(model_object, texts, tokenizer=tok) gives the table probe_heads gives on the same model saved
    to a directory (the same adapter code reads the weights), and leaves the caller's objects as they were."""
    import pandas as pd
    import torch

    model, tok = _objects(kind)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    attn, pad = model.config._attn_implementation, tok.padding_side
    res = attnsvm.probe(model, TEXTS, tokenizer=tok, **SMALL)
    ref = probe_heads(TEXTS, model=_save(model, tmp_path / kind), **SMALL)
    assert len(res.table) == 2 and "verdict" in res.table.columns
    pd.testing.assert_frame_equal(_numbers(res.table), _numbers(ref.table))
    # the caller's model is not cast, moved to eval mode or switched to eager attention; its tokenizer keeps its padding
    assert all(p.dtype == torch.float32 and torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert model.training and model.config._attn_implementation == attn and tok.padding_side == pad
    # a loaded PretrainedTransformer and a directory reach the same table through attnsvm.probe
    pd.testing.assert_frame_equal(_numbers(attnsvm.probe(load_model(str(tmp_path / kind)), TEXTS, **SMALL).table),
                                  _numbers(ref.table))


def test_the_weights_come_from_the_same_adapter_code(tmp_path):
    """PretrainedTransformer.from_model reads each head's key-query matrix exactly as loading its directory does."""
    from attnsvm.real.pretrained import PretrainedTransformer

    model, tok = _objects("bert", seed=3)
    obj = PretrainedTransformer.from_model(model, tok)
    disk = load_model(_save(model, tmp_path / "m"))
    assert obj.path is None and obj.family is disk.family and (obj.n_layers, obj.n_heads, obj.d) == (2, 2, 32)
    np.testing.assert_array_equal(obj.all_head_weights(), disk.all_head_weights())


def test_to_pandas_and_the_notebook_view(tmp_path):
    import pandas as pd

    model, tok = _objects("bert")
    res = attnsvm.probe(model, TEXTS, tokenizer=tok, **SMALL)
    df = res.to_pandas()
    assert isinstance(df, pd.DataFrame) and df is not res.table
    pd.testing.assert_frame_equal(df, res.table)
    df.loc[0, "layer"] = 99  # a copy: the result's table is unchanged
    assert int(res.table.loc[0, "layer"]) == 0
    page = res._repr_html_()
    assert "heads</b>" in page and "<th>verdict</th>" in page and "<th>corr_restricted</th>" in page
    assert page.count("<tr>") >= 3 and "the bert model object (BertModel)" in page  # not "MiniLM"
    assert res.config["model"] == "the bert model object (BertModel)" and res.config["family"] == "bert"
    # a head without a number reads in words, never nan or inf
    res.table.loc[0, ["corr_restricted", "null_mean", "p_upper", "q_upper"]] = np.nan
    res.table.loc[0, ["verdict", "svm_status"]] = ["no SVM", "infeasible"]
    res.table.loc[1, "svm_gap"] = np.inf
    page = res._repr_html_()
    assert "nan" not in page.lower() and "inf<" not in page.lower() and "no SVM" in page and "unbounded" in page


def test_refusals_name_the_argument():
    model, tok = _objects("bert")
    with pytest.raises(ValidationError, match="tokenizer: a transformers model object needs its tokenizer"):
        attnsvm.probe(model, TEXTS, **SMALL)
    with pytest.raises(ValidationError, match="tokenizer must be a transformers tokenizer"):
        attnsvm.probe(model, TEXTS, tokenizer="vocab.txt", **SMALL)
    with pytest.raises(ValidationError, match="model must be a transformers model object"):
        attnsvm.probe(object(), TEXTS, tokenizer=tok, **SMALL)
    with pytest.raises(ValidationError, match="tokenizer is only for a transformers model object"):
        attnsvm.probe(model_path(), TEXTS, tokenizer=tok, **SMALL)
    from transformers import BertConfig, BertModel

    rel = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64, position_embedding_type="relative_key"))
    with pytest.raises(UnsupportedModelError, match="relative position"):
        attnsvm.probe(rel, TEXTS, tokenizer=tok, **SMALL)
