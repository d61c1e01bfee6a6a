"""Hostile and careless inputs to the probe's model loading (issue 26): weights that are not the model's,
broken weight files, absurd configs, huge sentences, short-context models. Every case is a clear error
(or a correct result), never a table computed from random or NaN weights, never a raw traceback.

Tiny models are built from configs with random weights and saved with ``save_pretrained`` beside
MiniLM's WordPiece tokenizer files, as in tests/test_real_any_model.py."""

import json
import os
import pickle
import shutil
import warnings

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnsvm.errors import NonFiniteError, ResourceLimitError, ValidationError  # noqa: E402
from attnsvm.real.minilm import load_model, model_path  # noqa: E402
from attnsvm.real.pretrained import ModelFilesError, PretrainedTransformer  # noqa: E402

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SENTENCES = ["The cat sat on the mat.", "Margins decide which token wins.", "A short one here."]


def _save(model, path):
    model.save_pretrained(str(path))
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(model_path(), f), str(path))
    return str(path)


def _bert(path, layers=2, positions=128, masked_lm=False, **extra):
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=positions, **extra)
    return _save((BertForMaskedLM if masked_lm else BertModel)(cfg), path)


def _gpt2(path, positions=128):
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=30522, n_embd=16, n_layer=2, n_head=2, n_positions=positions, bos_token_id=101,
                     eos_token_id=102)
    return _save(GPT2Model(cfg), path)


def _edit_weights(path, edit):
    """Rewrite model.safetensors of ``path`` with ``edit(state_dict)`` applied (a valid file, other tensors)."""
    from safetensors.torch import load_file, save_file

    f = os.path.join(path, "model.safetensors")
    sd = load_file(f)
    edit(sd)
    save_file(sd, f, metadata={"format": "pt"})
    return path


def _edit_config(path, **changes):
    f = os.path.join(path, "config.json")
    cfg = json.load(open(f))
    cfg.update(changes)
    json.dump(cfg, open(f, "w"))
    return path


# ---------------------------------------------------------------- weights that are not the model's
def test_a_bert_directory_declared_gpt2_is_refused_naming_the_missing_tensors(tmp_path):
    """All GPT-2 tensors are missing: refused before building, naming GPT-2's query/key weights."""
    path = _edit_config(_bert(tmp_path / "m"), model_type="gpt2")
    with pytest.raises(ModelFilesError, match=r"2 missing \(h\.0\.attn\.c_attn\.weight, h\.1\.attn\.c_attn\.weight\)"):
        load_model(path)


def test_deleted_layer0_query_weights_are_refused(tmp_path):
    path = _edit_weights(_bert(tmp_path / "m"), lambda sd: sd.pop("encoder.layer.0.attention.self.query.weight"))
    with pytest.raises(ModelFilesError, match=r"1 missing \(encoder\.layer\.0\.attention\.self\.query\.weight\)"):
        load_model(path)
    from attnsvm.real.probe import probe_heads

    with pytest.raises(ModelFilesError, match="query"):
        probe_heads(SENTENCES, model=path, svm_sentences=0)


def test_missing_and_unexpected_tensors_from_the_loading_report(tmp_path):
    """Tensors outside the query/key pre-check: transformers' loading report is read, not silenced."""
    value = _edit_weights(_bert(tmp_path / "v"), lambda sd: sd.pop("encoder.layer.1.attention.self.value.weight"))
    with pytest.raises(ModelFilesError, match=r"1 missing \(encoder\.layer\.1\.attention\.self\.value\.weight\)"):
        load_model(value)
    # weights of 3 layers under a config declaring 2: layer 2's tensors are unexpected
    three = _bert(tmp_path / "three", layers=3)
    extra = _edit_config(three, num_hidden_layers=2)
    with pytest.raises(ModelFilesError, match=r"16 unexpected \(encoder\.layer\.2\.attention\.self\.key\.bias, "
                                               r"encoder\.layer\.2\.attention\.self\.key\.weight"):
        load_model(extra)
    # pickle weights (no safetensors header to pre-check): the loading report still refuses
    import torch
    from transformers import BertModel

    binary = tmp_path / "bin"
    m = BertModel.from_pretrained(_bert(tmp_path / "b"))
    sd = {k: v for k, v in m.state_dict().items() if k != "encoder.layer.0.attention.self.key.weight"}
    os.makedirs(binary)
    torch.save(sd, binary / "pytorch_model.bin")
    m.config.save_pretrained(str(binary))
    for f in TOKENIZER_FILES:
        shutil.copy(os.path.join(model_path(), f), str(binary))
    with pytest.raises(ModelFilesError, match=r"1 missing \(encoder\.layer\.0\.attention\.self\.key\.weight\)"):
        load_model(binary)


def test_unused_tensors_are_accepted(tmp_path):
    """A masked-LM checkpoint (task head cls.*, no pooler) is the same encoder: it loads and reproduces it."""
    mlm = load_model(_bert(tmp_path / "mlm", masked_lm=True))
    assert mlm.n_layers == 2 and np.isfinite(mlm.head_weights(1, 1)).all()
    assert load_model(_bert(tmp_path / "plain")).forward(SENTENCES).hidden.shape[0] == 3


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_non_finite_query_weights_are_refused(tmp_path, kind):
    """All-NaN query weights once gave a table of NaN beside svm_status optimal."""
    if kind == "bert":
        name, path = "encoder.layer.0.attention.self.query.weight", _bert(tmp_path / "m")
        fill = lambda sd: sd[name].fill_(float("nan"))  # noqa: E731
    else:
        name, path = "h.1.attn.c_attn.weight", _gpt2(tmp_path / "m")
        fill = lambda sd: sd[name][:, :16].fill_(float("inf"))  # noqa: E731
    _edit_weights(path, fill)
    with pytest.raises(ModelFilesError, match=rf"non-finite .* in 1 tensor\(s\): {name}"):
        load_model(path)


def test_non_finite_token_states_are_refused(tmp_path):
    """Finite weights whose forward pass overflows still never hand NaN to an SVM."""
    m = load_model(_bert(tmp_path / "m"))
    import torch

    with torch.no_grad():
        m.model.encoder.layer[0].output.dense.weight.fill_(1e308)
    with pytest.raises(NonFiniteError, match="non-finite .* token states at hidden layer 1"):
        m.forward(SENTENCES)


# ---------------------------------------------------------------- broken files, absurd configs
def _header(n: int) -> bytes:
    return n.to_bytes(8, "little")


@pytest.mark.parametrize("case, match", [
    ("empty", "0 bytes, fewer than the 8"),
    ("truncated", r"claims bytes .*\(truncated or inconsistent\)"),
    ("random", "header claims|not JSON"),
    ("4TB", r"header claims 4398046511104 bytes"),
    ("2^62", r"header claims 4611686018427387904 bytes"),
    ("bad json", "header is not JSON"),
    ("padded", "tensors cover"),
])
def test_broken_safetensors_are_clear_errors(tmp_path, case, match):
    path = _bert(tmp_path / "m")
    f = os.path.join(path, "model.safetensors")
    data = open(f, "rb").read()
    rng = np.random.default_rng(0)
    body = {"empty": b"", "truncated": data[: len(data) // 2], "random": rng.bytes(4096),
            "4TB": _header(2**42) + data[8:], "2^62": _header(2**62) + data[8:],
            "bad json": _header(5) + b"{oops" + b"\0" * 64, "padded": data + b"\0" * 16}[case]
    open(f, "wb").write(body)
    with pytest.raises(ModelFilesError, match=match):
        load_model(path)


def test_broken_weights_through_the_cli_are_one_line(tmp_path):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    path = _bert(tmp_path / "m")
    open(os.path.join(path, "model.safetensors"), "wb").write(_header(2**62) + b"\0" * 32)
    (tmp_path / "s.txt").write_text("\n".join(SENTENCES))
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", path, "--sentences", str(tmp_path / "s.txt")])
    assert r.exit_code == 2 and "not a valid safetensors file" in r.output and "Traceback" not in r.output, r.output


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['ATTNSVM_TEST_MARKER']}",))


def test_pickle_weights_with_code_are_refused_and_never_run(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("ATTNSVM_TEST_MARKER", str(marker))
    path = _bert(tmp_path / "m")
    os.remove(os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "pytorch_model.bin"), "wb") as fh:
        pickle.dump({"encoder.layer.0.attention.self.query.weight": _Evil()}, fh)
    with pytest.raises(ModelFilesError, match=r"objects other than tensors, which are refused"):
        load_model(path)
    assert not marker.exists()


def test_absurd_configs_are_clear_errors(tmp_path):
    path = _bert(tmp_path / "m")
    cfg = json.load(open(os.path.join(path, "config.json")))
    for field, value in (("num_attention_heads", 0), ("num_hidden_layers", -1), ("hidden_size", 2.5),
                         ("max_position_embeddings", True)):
        _edit_config(path, **{**cfg, field: value})
        # ours ("hidden_size = 2.5; expected a positive integer") or transformers' own type check, naming the field
        with pytest.raises(ValidationError, match=rf"{field}'? (= {value!r}; )?expected (a positive )?int"):
            load_model(path)
    _edit_config(path, **{**cfg, "hidden_size": 15})
    with pytest.raises(ValidationError, match="hidden_size 15 is not a multiple of num_attention_heads 2"):
        load_model(path)
    _edit_config(path, **cfg)
    f = os.path.join(path, "config.json")
    for depth in (40, 100_000):  # nested deeper than configs go; deeper than Python's recursion limit
        nested = '{"model_type": "bert", "x": ' + "[" * depth + "]" * depth + "}"
        open(f, "w").write(nested)
        with pytest.raises(ValidationError, match="nested too deeply|nests values more than 32 levels"):
            load_model(path)
    open(f, "w").write(" " * (17 * 2**20))
    with pytest.raises(ValidationError, match="has 17825792 bytes; a config.json has a few KB"):
        load_model(path)


@pytest.mark.parametrize("layers", [10**5, 10**6])
def test_a_config_declaring_huge_layer_counts_is_refused_before_building(tmp_path, layers):
    """The memory check uses the model as its config declares it (layers x width), not the weight files;
    under a limit it does fit, the weight files' missing layers refuse it, still before building."""
    path = _edit_config(_bert(tmp_path / "m"), num_hidden_layers=layers)
    with pytest.raises(ResourceLimitError, match=rf"needs about .* as its config declares it \({layers} layers of width 16\)"):
        load_model(path, max_memory="2G")
    with pytest.raises(ModelFilesError, match=rf"{layers} layers\): {2 * layers - 4} missing "
                                              r"\(encoder\.layer\.2\.attention\.self\.query\.weight"):
        load_model(path, max_memory="1T")


def test_a_config_declaring_a_huge_width_is_sized_as_declared(tmp_path):
    """Tiny weight files, a config declaring width 2048: ~96M parameters, refused under 256M before building."""
    path = _edit_config(_bert(tmp_path / "m"), hidden_size=2048)
    with pytest.raises(ResourceLimitError, match=r"needs about 1\.\d GiB, .* \(2 layers of width 2048\)"):
        load_model(path, max_memory="256M")


def test_probe_seed_must_be_non_negative(tmp_path):
    from click.testing import CliRunner

    from attnsvm.cli import cli
    from attnsvm.real.probe import probe_heads
    from attnsvm.real.sentences import corpus_sentences

    path = _bert(tmp_path / "m")
    for sentences in (None, str(tmp_path / "s.txt")):
        (tmp_path / "s.txt").write_text("\n".join(SENTENCES))
        args = ["probe", "--no-store", "--model", path, "--seed", "-1"] + (["--sentences", sentences] if sentences else [])
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and "seed must be an integer >= 0, got -1" in r.output, r.output
    with pytest.raises(ValidationError, match="seed must be an integer >= 0"):
        probe_heads(SENTENCES, model=path, seed=-1, svm_sentences=0)
    with pytest.raises(ValidationError, match="seed must be an integer >= 0"):
        corpus_sentences(3, seed=-5)


# ---------------------------------------------------------------- limits
def test_a_huge_sentence_line_is_refused_and_a_huge_sentence_is_cut(tmp_path):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    path = _bert(tmp_path / "m")
    f = tmp_path / "one_line.txt"
    f.write_text("word " * 200_000 + "\n")  # 1 MB on one line (the case had 100 MB)
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", path, "--sentences", str(f), "--max-memory", "2G"])
    assert r.exit_code == 2 and "line 1 of" in r.output and "has 999999 characters" in r.output, r.output
    m = load_model(path)
    with pytest.warns(UserWarning, match=r"1 sentence\(s\) longer than 12800 characters .* were cut"):
        fw = m.forward(["word " * 200_000, "short one"], max_length=128, attentions=False)
    assert fw.truncated.tolist() == [True, False] and fw.mask.sum(axis=1).tolist() == [128, 4]


def test_tokenization_counts_against_max_memory(tmp_path):
    m = load_model(_bert(tmp_path / "m"))
    with pytest.raises(ResourceLimitError, match="tokenizing 50 sentences needs about"):
        m.encode(["many words in this sentence " * 20] * 50, max_memory="100K")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.encode(SENTENCES, max_memory="100K")


# ---------------------------------------------------------------- short-context models
@pytest.mark.parametrize("kind", ["gpt2", "roberta"])
def test_short_context_models_default_to_their_position_limit(tmp_path, kind):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    if kind == "gpt2":
        path = _gpt2(tmp_path / "m", positions=64)
    else:  # RoBERTa counts positions from pad_token_id + 1: 66 embeddings, padding index 1 -> 64 tokens
        import torch
        from transformers import RobertaConfig, RobertaModel

        torch.manual_seed(0)
        path = _save(RobertaModel(RobertaConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=32,
                                                max_position_embeddings=66, pad_token_id=1)), tmp_path / "m")
    m = load_model(path)
    assert m.max_length == 64 and m.probe_max_length() == 64 and m.probe_max_length(10) == 10
    long_ = " ".join(["attention"] * 100) + "."
    f = tmp_path / "s.txt"
    f.write_text("\n".join(SENTENCES + [long_]) + "\n")
    with pytest.warns(UserWarning, match=r"1 sentence\(s\) longer than the limit of 64 tokens .* were truncated"):
        r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", path, "--sentences", str(f), "--svm-sentences", "4",
                                     "--layers", "1", "--threshold", "0.5"])
    assert r.exit_code == 0, r.output
    assert "max_length 64 tokens per sentence (default: the smaller of 128 and the model's position limit 64)" \
        in r.output
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--model", path, "--sentences", str(f), "--max-length", "100"])
    assert r.exit_code == 2 and "max_length must be an integer in [" in r.output and ", 64]" in r.output, r.output
    assert "got 100" in r.output


def test_the_default_max_length_is_128_below_the_limit(tmp_path):
    m = load_model(_bert(tmp_path / "m", positions=512))
    assert m.max_length == 512 and m.probe_max_length() == 128
    for bad in (0, 513, 2.0, True, "64"):
        with pytest.raises(ValidationError, match=r"max_length must be an integer in \[3, 512\]"):
            m.probe_max_length(bad)


def test_a_loaded_model_is_a_pretrained_transformer_under_both_import_paths(tmp_path):
    from attnsvm.real import minilm, pretrained

    assert minilm.PretrainedTransformer is pretrained.PretrainedTransformer is PretrainedTransformer
    assert minilm.augment is pretrained.augment and minilm.Forward is pretrained.Forward


def test_the_loading_report_rule():
    """Only the pooler, task heads and GPT-2's mask buffers may be missing or unexpected; every weight a head
    or a state depends on may not (``c_attn.bias`` is GPT-2's query/key/value bias, not a mask buffer)."""
    from attnsvm.real.pretrained import check_loading_report

    check_loading_report({"missing_keys": {"pooler.dense.weight"}, "unexpected_keys": {
        "cls.predictions.bias", "lm_head.weight", "h.0.attn.bias", "h.3.attn.masked_bias",
        "embeddings.position_ids"}, "mismatched_keys": set(), "error_msgs": []}, "DIR")
    for report, match in (({"missing_keys": {"h.0.attn.c_attn.bias"}}, r"1 missing \(h\.0\.attn\.c_attn\.bias\)"),
                          ({"unexpected_keys": {"encoder.layer.0.output.dense.weight", "h.0.attn.c_attn.weight"}},
                           r"2 unexpected \(h\.0\.attn\.c_attn\.weight, encoder\.layer\.0\.output\.dense\.weight\)"),
                          ({"mismatched_keys": [("wte.weight", (3, 4), (5, 4))]}, r"1 of the wrong shape \(wte"),
                          ({"error_msgs": ["size mismatch"]}, "loading errors: size mismatch")):
        with pytest.raises(ModelFilesError, match=match):
            check_loading_report(report, "DIR")


def test_weights_rewritten_in_place_with_the_mtime_set_back_are_loaded_again(tmp_path):
    """Issue 43: the model cache was keyed by size and mtime; now by a digest of the files' content, hashed
    again only when a file's stat (inode, ctime included) changed."""
    from safetensors.torch import load_file, save

    from attnsvm.real import cache

    path = _bert(tmp_path / "m")
    f = os.path.join(path, "model.safetensors")
    first = load_model(path)
    assert load_model(path) is first                        # unchanged: the cached object
    st = os.stat(f)
    sd = load_file(f)
    sd["encoder.layer.0.attention.self.query.weight"] *= -1.0
    raw = save(sd, metadata={"format": "pt"})
    assert len(raw) == st.st_size
    with open(f, "r+b") as fh:                               # in place: same inode, same size
        fh.write(raw)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))        # the modification time set back
    after = os.stat(f)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)
    second = load_model(path)
    assert second is not first
    a = first.forward(SENTENCES[:1], max_length=16).hidden
    b = second.forward(SENTENCES[:1], max_length=16).hidden
    assert not np.allclose(np.asarray(a[2]), np.asarray(b[2]))
    os.utime(f)                                             # touched, same bytes: hashed again, same model
    assert load_model(path) is second
    cache.clear()
