"""A pretrained transformer read from a local directory: token states and the key-query matrix of each head.

:class:`PretrainedTransformer` loads any local BERT-like encoder, GPT-2-like or rotary (Llama, GPT-NeoX) decoder directory
(families in :mod:`attnsvm.real.adapters`) with ``transformers`` offline; :mod:`attnsvm.real.minilm`
is the shipped MiniLM-L6 (d = 384, 12 heads of size m = 32), the default model, whose numbers
the sections below use. Weights are cast to float64 so the numbers compared with SVMs are float64
end to end.

Layer numbering
---------------
``token_states(sentences, layer)`` with ``layer`` in 0..6 returns
``hidden_states[layer]``: 0 is the embedding output, l the output of encoder layer l.
Attention layer ``l`` (0..5, :func:`head_weights`) reads ``token_states(l)``: the
hidden states *entering* it, on which its query and key projections act directly
(BERT applies no normalization before self-attention).

Key-query convention
--------------------
Head h of layer l computes, for query token s and key token t,

    score(s, t) = (W_K^T x_t + b_K) . (W_Q^T x_s + b_Q) / sqrt(m)

with ``W_K = key.weight[h*m:(h+1)*m].T`` and ``W_Q = query.weight[h*m:(h+1)*m].T``
(both (d, m)). Written as ``x_s^T (W_Q W_K^T) x_t`` (the issue's "W_h = W_Q W_K^T")
the query is on the left. attnsvm's TokenProblem puts the **key on the left**: the
logit of token t for query z is ``x_t^T W z`` and margins read
``(x_sel - x_t)^T W z``. :func:`head_weights` therefore returns

    W_h = W_K W_Q^T / sqrt(m)   (= (W_Q W_K^T)^T / sqrt(m)),   shape (d, d), rank <= m,

so that ``x_t^T W_h x_s`` is the model's score up to the bias terms below, and
``softmax_t`` of it is the model's attention (``scaled=False`` drops the 1/sqrt(m)).

Biases
------
Expanding the score gives ``x_t^T W_K W_Q^T x_s + x_t^T W_K b_Q + b_K^T W_Q^T x_s +
b_K . b_Q`` (all divided by sqrt(m)). The last two terms do not depend on the key
token t, so they cancel in the softmax over t. The second is a query-independent
preference for key t and does change the attention. ``bias="augment"`` (default)
keeps it exactly: tokens and queries get a constant last coordinate 1
(:func:`augment`, d + 1 = 385) and

    W_h = [[W_K W_Q^T, W_K b_Q], [0, 0]] / sqrt(m)   (shape (385, 385), rank <= m + 1)

whose last row (the t-independent terms ``b_K^T W_Q^T x_s + b_K . b_Q``) is set to
zero because it can never change which tokens are selected (token differences have
last coordinate 0, so no SVM can see it either). Then ``softmax_t(x~_t^T W_h x~_s)``
equals the model's attention exactly. ``bias="drop"`` returns the (d, d) block
``W_K W_Q^T / sqrt(m)`` alone (attention then differs by the key-bias term).

Rotary heads (llama, gpt_neox)
------------------------------
Query s and key t are rotated by their positions: ``score(s, t) = (R_s q_s) . (R_t k_t) / sqrt(m)`` with
``q_s = W_Q^T x_s + b_Q``, ``k_t = W_K^T x_t + b_K`` and R_p the rotation of position p (on the first r
coordinates of the head; GPT-NeoX rotates r = m * rotary_pct of them). No fixed (d+1, d+1) matrix of the states
gives this score, so a rotary head is read in its **post-rotary query-key space**: :meth:`PretrainedTransformer.
rotary_states` returns ``k~_t = R_t k_t`` and ``q~_s = R_s q_s`` (m coordinates each, biases and rotation
included), the probe's tokens and queries are these, bias-augmented (:func:`augment`, m + 1 coordinates), and
:meth:`PretrainedTransformer.head_weights` is ``W_h = diag(1, ..., 1, 0) / sqrt(m)`` ((m + 1, m + 1)), so that
``augment(k~_t)^T W_h augment(q~_s)`` is the model's score exactly (key on the left, last row zero as above).
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from attnsvm._files import nesting_depth
from attnsvm.errors import NonFiniteError, ValidationError
from attnsvm.memory import require_memory
from attnsvm.real.adapters import family_of
from attnsvm.real.errors import require

BIAS_MODES = ("augment", "drop")
#: memory that building one transformer layer takes beyond its parameters (torch modules and their Python
#: objects), budgeted above the sizes measured for BERT and GPT-2 layers (the measurement:
#: docs/guide/performance.md, "Design decisions outside svm/ and their measurements")
MODULE_BYTES_PER_LAYER = 64 * 2**10
#: the largest config.json read (real ones are a few KB) and the deepest nesting of its values
MAX_CONFIG_BYTES = 16 * 2**20
MAX_CONFIG_DEPTH = 32
#: safetensors headers longer than this are refused (the safetensors library's own limit)
MAX_SAFETENSORS_HEADER = 100_000_000
SAFETENSORS_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
                      "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
#: the probe's default token limit per sentence: the smaller of this and the model's position limit
DEFAULT_MAX_LENGTH = 128
#: characters of a sentence kept per token of the length limit (longer text is cut before tokenization)
CHARS_PER_TOKEN = 100
#: peak bytes the tokenizer holds per character of text (fast tokenizers keep ids, offsets and strings per token)
TOKENIZER_BYTES_PER_CHAR = 256
#: vocabulary files of the tokenizers transformers loads offline (at least one must be in a model directory)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")


class ModelFilesError(ValidationError):
    """A model directory's weight files are broken, hostile or do not hold the weights its config declares."""


@dataclass(frozen=True)
class WeightFiles:
    """The weight files of a model directory.

    Attributes
    ----------
    files : list of file names (``*.safetensors``, ``*.bin``)
    nbytes : int, their total size
    names : set of tensor names from the safetensors headers, or None when the weights are ``*.bin`` only
    """

    files: list
    nbytes: int
    names: set | None


def safetensors_names(path) -> set:
    """The tensor names of a safetensors file after checking its layout, without reading any tensor.

    The header (an 8-byte little-endian length, then that many bytes of JSON) must fit the file and
    :data:`MAX_SAFETENSORS_HEADER`; every tensor needs a known dtype, a shape of non-negative integers and
    data offsets inside the file spanning exactly ``prod(shape) x itemsize`` bytes, and the tensors must cover
    the data exactly. Anything else is a :class:`ModelFilesError` saying what is wrong (empty, truncated,
    random bytes, a header claiming terabytes).
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    bad = f"the weight file {path!r} is not a valid safetensors file"
    if size < 8:
        raise ModelFilesError(f"{bad}: it has {size} bytes, fewer than the 8 of its header length")
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if n > min(size - 8, MAX_SAFETENSORS_HEADER):
            raise ModelFilesError(f"{bad}: its header claims {n} bytes but the file holds {size - 8} after the "
                                  f"length (and headers may have at most {MAX_SAFETENSORS_HEADER}); truncated or "
                                  "not safetensors")
        raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ModelFilesError(f"{bad}: its {n}-byte header is not JSON") from None
    if not isinstance(header, dict):
        raise ModelFilesError(f"{bad}: its header is a JSON {type(header).__name__}, expected an object")
    data, end, names = size - 8 - n, 0, set()
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        meta = meta if isinstance(meta, dict) else {}
        shape, offsets, dtype = meta.get("shape"), meta.get("data_offsets"), meta.get("dtype")
        ints = lambda v: isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)  # noqa: E731
        if dtype not in SAFETENSORS_DTYPES or not ints(shape) or not ints(offsets) or len(offsets) != 2:
            raise ModelFilesError(f"{bad}: tensor {name!r} has no valid dtype, shape and data_offsets ({meta!r:.200})")
        lo, hi = offsets
        if not lo <= hi <= data or hi - lo != math.prod(shape) * SAFETENSORS_DTYPES[dtype]:
            raise ModelFilesError(f"{bad}: tensor {name!r} ({dtype}, shape {shape}) claims bytes {lo}..{hi} of the "
                                  f"{data} data bytes the file holds (truncated or inconsistent)")
        end = max(end, hi)
        names.add(name)
    if end != data:
        raise ModelFilesError(f"{bad}: its tensors cover {end} of its {data} data bytes")
    return names


def check_weight_files(path) -> WeightFiles:
    """The weight files of a model directory, each safetensors file checked by :func:`safetensors_names`.

    Raises a ValidationError when there is none. ``*.bin`` files are left to transformers, which
    unpickles them with ``torch.load(weights_only=True)`` (anything but tensors is refused).
    """
    path = os.fspath(path)
    files = sorted(f for f in os.listdir(path) if f.endswith((".safetensors", ".bin"))
                   and os.path.isfile(os.path.join(path, f)))
    if not files:
        raise ValidationError(f"model directory {path!r} holds no weights (*.safetensors or *.bin); "
                              "save the model with save_pretrained(DIR)")
    nbytes = sum(os.path.getsize(os.path.join(path, f)) for f in files)
    safe = [f for f in files if f.endswith(".safetensors")]
    names = set().union(*(safetensors_names(os.path.join(path, f)) for f in safe)) if safe else None
    return WeightFiles(files, nbytes, names)


def _load_failure(exc: Exception) -> str:
    """Why transformers could not load a model, in one line."""
    if type(exc).__name__ == "UnpicklingError":
        return ("a pickle weight file (*.bin) holds objects other than tensors, which are refused "
                "(torch.load weights_only); save the model with save_pretrained(DIR) as safetensors")
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}{'...' if len(text) > 400 else ''}"


#: tensors a base model may lack or a checkpoint may hold beyond it without changing any head or state the
#: probe reads: BERT's pooler (after the last layer) and task heads, GPT-2's causal-mask buffers
_UNUSED = re.compile(r"^(pooler\.|cls\.|lm_head\.|embed_out\.|classifier\.|qa_outputs\.|score\.)|(^|\.)attn\.(masked_)?bias$"
                     r"|(^|\.)position_ids$")


def _query_key_first(name: str):
    """Sort key putting query/key weights (BERT ``.query.``/``.key.``, GPT-2 ``c_attn``) first."""
    return (not any(k in name for k in (".query.", ".key.", ".c_attn.", ".q_proj.", ".k_proj.", ".query_key_value.")),
            name)


def check_loading_report(info: dict, path) -> None:
    """Refuse a model whose weight files do not hold exactly the weights it is built from.

    ``info`` is transformers' loading report (``from_pretrained(..., output_loading_info=True)``): a
    missing tensor would be initialised at random, an unexpected one means the files belong to another
    architecture or layer count. Both are a :class:`ModelFilesError` naming the tensors (query/key
    weights first), except the tensors the probe never reads (:data:`_UNUSED`: pooler, task heads).
    """
    missing = sorted((t for t in info.get("missing_keys", ()) if not _UNUSED.search(t)), key=_query_key_first)
    unexpected = sorted((t for t in info.get("unexpected_keys", ()) if not _UNUSED.search(t)), key=_query_key_first)
    mismatched = [str(t[0] if isinstance(t, (tuple, list)) else t) for t in info.get("mismatched_keys", ())]
    errors = [str(e) for e in info.get("error_msgs", ())]
    if not (missing or unexpected or mismatched or errors):
        return
    show = lambda ts: ", ".join(ts[:6]) + (", ..." if len(ts) > 6 else "")  # noqa: E731
    parts = [f"{len(ts)} {what} ({show(ts)})" for what, ts in (("missing", missing), ("unexpected", unexpected),
                                                                ("of the wrong shape", mismatched)) if ts]
    parts += [f"loading errors: {show(errors)}"] if errors else []
    raise ModelFilesError(f"the weight files in {os.fspath(path)!r} do not match the model its config declares, "
                          f"tensors {'; '.join(parts)}. The probe refuses weights that are not the model's "
                          "(transformers would initialise missing ones at random and ignore unexpected ones)")


def check_finite_weights(model, path, *, where: str | None = None) -> None:
    """A :class:`ModelFilesError` naming the parameters holding NaN or infinity (query/key weights first);
    ``where`` names the model in the message instead of ``path`` (a model object has none)."""
    import torch

    bad = [n for n, p in model.named_parameters() if p.is_floating_point() and not bool(torch.isfinite(p).all())]
    if bad:
        bad.sort(key=_query_key_first)
        raise ModelFilesError(f"{where or f'the model in {os.fspath(path)!r}'} has non-finite (NaN or infinite) weights in "
                              f"{len(bad)} tensor(s): {', '.join(bad[:6])}{', ...' if len(bad) > 6 else ''}")


def position_limit(config) -> int:
    """Tokens per sequence the model's position embeddings allow (RoBERTa's start after the padding index)."""
    limit = int(config.max_position_embeddings)
    if getattr(config, "model_type", "") == "roberta":
        limit -= int(getattr(config, "pad_token_id", 1) or 0) + 1
    return limit


def check_sentences(sentences) -> list:
    """Validate input text: a non-empty list of non-empty strings (a single str is one sentence)."""
    if isinstance(sentences, str):
        sentences = [sentences]
    try:
        sentences = list(sentences)
    except TypeError:
        raise ValidationError(f"sentences must be a list of strings, got {type(sentences).__name__}") from None
    if not sentences:
        raise ValidationError("sentences is empty: give at least one non-empty sentence")
    for k, s in enumerate(sentences):
        if not isinstance(s, str):
            raise ValidationError(f"sentence {k} is a {type(s).__name__}, expected str")
        if not s.strip():
            raise ValidationError(f"sentence {k} is empty text: every sentence must contain at least one word")
    return sentences


@dataclass
class Forward:
    """One batched forward pass.

    Attributes
    ----------
    hidden : (L + 1, n, T, d) float64, ``hidden[l]`` is the residual stream entering layer l
        (for post-LN encoders such as BERT: the input of attention layer l)
    attentions : (L, n, H, T, T) float64 ``[layer, sample, head, query s, key t]`` or None
    mask : (n, T) bool, real (non-padding) tokens
    tokens : list of n lists of token strings (unpadded)
    truncated : (n,) bool, sentences cut at the length limit
    inputs : (L, n, T, d) float64 or None, the states each layer's heads act on when the family
        normalizes before attention (GPT-2: ``ln_1(hidden[l])``); None when they are ``hidden[l]``
    special : (n, T) bool or None, the tokenizer's special tokens (``[CLS]``, ``[SEP]``, ``<|endoftext|>``, ...)
    """

    hidden: np.ndarray
    attentions: np.ndarray | None
    mask: np.ndarray
    tokens: list
    truncated: np.ndarray
    inputs: np.ndarray | None = None
    special: np.ndarray | None = None

    @property
    def lengths(self) -> np.ndarray:
        return self.mask.sum(axis=1)

    def layer_input(self, layer: int) -> np.ndarray:
        """(n, T, d): the states the query/key projections of attention layer ``layer`` act on."""
        return self.hidden[layer] if self.inputs is None else self.inputs[layer]


class PretrainedTransformer:
    """A pretrained transformer read from a local directory (float64, eval mode) with its tokenizer.

    The directory must hold what ``transformers`` loads offline: ``config.json``, the weights
    (``*.safetensors`` or ``*.bin``) and the tokenizer files. The architecture family
    (:mod:`attnsvm.real.adapters`: BERT-like encoders, GPT-2-like decoders, Llama- and GPT-NeoX-like rotary
    decoders) decides which states
    each head acts on and where its query/key projections are; other families are refused with
    :class:`attnsvm.real.adapters.UnsupportedModelError` saying why. Use
    :func:`attnsvm.real.minilm.load_model` (any directory) or :func:`attnsvm.real.minilm.load_minilm`
    (the shipped MiniLM).

    Loading refuses, before building the model: a config that is too large, nested deeper than
    :data:`MAX_CONFIG_DEPTH` or declares a size that is not a positive integer; a model that would not fit
    ``max_memory`` as its config declares it (parameters x 4 bytes, its copy in ``dtype``, the weight files
    and :data:`MODULE_BYTES_PER_LAYER` per layer); safetensors files whose layout is broken
    (:func:`safetensors_names`) or that lack the query/key weights of a declared layer. After loading:
    any tensor transformers' loading report finds missing or unexpected (:func:`check_loading_report`)
    and non-finite weights (:func:`check_finite_weights`). Weight problems are a :class:`ModelFilesError`
    naming the files and tensors, config problems a ValidationError naming the field, memory a
    :class:`attnsvm.errors.ResourceLimitError`.

    Attributes
    ----------
    family : :class:`attnsvm.real.adapters.Family` (``family.causal`` for decoders)
    n_layers, n_heads, d, head_dim : ints
    name : str used in messages
    """

    def __init__(self, path, dtype: str = "float64", *, name: str | None = None, max_memory=None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        if dtype not in ("float64", "float32"):
            raise ValidationError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
        path = os.fspath(path)
        cfg_json = read_model_config(path)
        self.family = family_of(SimpleNamespace(**cfg_json), f"the model at {path!r}")
        self.name = name or f"the {cfg_json.get('model_type')} model at {path!r}"
        transformers = require("transformers", "the MiniLM model" if name == "MiniLM" else "probing a pretrained model")
        require("torch", "the MiniLM model" if name == "MiniLM" else "probing a pretrained model")
        self.path = path
        weights = check_weight_files(path)
        if not any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES):
            raise ValidationError(f"no tokenizer could be loaded from the model directory {path!r}: none of "
                                  f"{', '.join(TOKENIZER_FILES)} is there; save the tokenizer beside the model with "
                                  "tokenizer.save_pretrained(DIR)")
        hf_logging = transformers.utils.logging
        bar = hf_logging.is_progress_bar_enabled()
        verbosity = hf_logging.get_verbosity()
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()  # the loading report is read below (check_loading_report), not printed
        try:
            try:
                config = transformers.AutoConfig.from_pretrained(self.path, local_files_only=True)
            except Exception as exc:  # a config transformers rejects: ValueError, TypeError, KeyError, ...
                raise ValidationError(f"transformers cannot read the model config in {path!r}: "
                                      f"{_load_failure(exc)}") from None
            dims = self.family.dims(config, f"the model at {path!r}")
            # the model as its config declares it (layers x width), before building: the weights on disk, the
            # model built from the config, its copy in ``dtype`` (all alive at the peak) and per-layer modules
            declared = max(weights.nbytes, 4 * self.family.n_params(dims))
            require_memory(declared + weights.nbytes + declared * {"float64": 2, "float32": 1}[dtype]
                           + MODULE_BYTES_PER_LAYER * dims["layers"],
                           f"loading {self.name} ({dtype})", max_memory,
                           hint=f"counted as its config declares it ({dims['layers']} layers of width {dims['d']}); "
                                "raise --max-memory or ATTNSVM_MAX_MEMORY")
            if weights.names is not None:  # safetensors headers: every declared layer's W_Q and W_K must be there
                count, first = self.family.missing_query_key(weights.names, dims["layers"])
                if count:
                    raise ModelFilesError(
                        f"the weights in {path!r} do not hold the query/key tensors its config declares "
                        f"({cfg_json.get('model_type')}, {dims['layers']} layers): {count} missing "
                        f"({', '.join(first)}{', ...' if count > len(first) else ''}); refusing to probe weights "
                        "transformers would initialise at random")
            try:
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.path, local_files_only=True)
            except Exception as exc:  # transformers raises OSError, ValueError, TypeError ... for missing files
                raise ValidationError(f"no tokenizer could be loaded from the model directory {path!r} ({exc}); save "
                                      "the tokenizer beside the model with tokenizer.save_pretrained(DIR)") from None
            if not getattr(self.tokenizer, "is_fast", False) and not hasattr(self.tokenizer, "convert_ids_to_tokens"):
                raise ValidationError(f"the tokenizer of {path!r} cannot map ids back to tokens")
            try:
                self.model, info = transformers.AutoModel.from_pretrained(
                    self.path, config=config, local_files_only=True, attn_implementation="eager",
                    output_loading_info=True)
            except Exception as exc:  # broken or hostile files: OSError, SafetensorError, UnpicklingError, ...
                raise ModelFilesError(f"transformers cannot load the model in {path!r}: {_load_failure(exc)}") \
                    from None
        finally:
            hf_logging.set_verbosity(verbosity)
            if bar:
                hf_logging.enable_progress_bar()
        check_loading_report(info, path)
        self._adopt(self.model, self.tokenizer, dtype, repr(path), path)

    @classmethod
    def from_model(cls, model, tokenizer, dtype: str = "float64", *, name: str | None = None,
                   max_memory=None) -> "PretrainedTransformer":
        """A :class:`PretrainedTransformer` from a transformers model object already loaded and its tokenizer.

        ``model`` is a BERT-like, GPT-2-like or rotary ``transformers`` model (``BertModel``, ``RobertaModel``,
        ``GPT2Model``, ``LlamaModel``, ``GPTNeoXModel``, or one with a task head, whose ``base_model`` is read),
        ``tokenizer`` its tokenizer.
        Both are copied (the copy is cast to ``dtype``, eval mode, eager attention, right padding): the
        caller's objects are left as they were. The family, the weights and the checks are those of a model
        read from a directory (:mod:`attnsvm.real.adapters`, :func:`check_finite_weights`); ``path`` is None.
        Refused with a ValidationError naming ``model`` or ``tokenizer`` when they are not such objects, an
        :class:`attnsvm.real.adapters.UnsupportedModelError` for other architectures and a
        :class:`attnsvm.errors.ResourceLimitError` when the copy would not fit ``max_memory``.
        """
        import copy

        torch = require("torch", "probing a pretrained model")
        if dtype not in ("float64", "float32"):
            raise ValidationError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
        if not isinstance(model, torch.nn.Module) or not hasattr(getattr(model, "config", None), "model_type"):
            raise ValidationError(f"model must be a transformers model object (BertModel-, GPT2Model-, LlamaModel- or "
                                  f"GPTNeoXModel-like, with a config), a model directory or a PretrainedTransformer, "
                                  f"got {type(model).__name__}")
        if tokenizer is None:
            raise ValidationError("tokenizer: a transformers model object needs its tokenizer, e.g. "
                                  "attnsvm.probe(model, texts, tokenizer=AutoTokenizer.from_pretrained(...))")
        if not callable(tokenizer) or not all(hasattr(tokenizer, a) for a in
                                              ("tokenize", "convert_ids_to_tokens", "all_special_ids")):
            raise ValidationError(f"tokenizer must be a transformers tokenizer (callable, with tokenize and "
                                  f"convert_ids_to_tokens), got {type(tokenizer).__name__}")
        base = getattr(model, "base_model", None)
        base = base if isinstance(base, torch.nn.Module) else model
        where = f"the {base.config.model_type} model object ({type(base).__name__})"
        self = cls.__new__(cls)
        self.family = family_of(base.config, where)
        self.family.dims(base.config, where)  # sizes that are positive integers
        params = sum(p.numel() for p in base.parameters()) + sum(b.numel() for b in base.buffers())
        # the copy, then the copy in ``dtype`` (alive together while it is cast)
        require_memory(params * (4 + {"float64": 8, "float32": 4}[dtype]) + MODULE_BYTES_PER_LAYER *
                       int(base.config.num_hidden_layers), f"copying {where} ({dtype})", max_memory,
                       hint="raise max_memory or ATTNSVM_MAX_MEMORY")
        self.name = name or where
        self.path = None
        base = copy.deepcopy(base)
        if hasattr(base, "set_attn_implementation"):  # the attention maps need the eager attention
            base.set_attn_implementation("eager")
        else:  # pragma: no cover  (transformers before set_attn_implementation)
            base.config._attn_implementation = "eager"
        self._adopt(base, copy.deepcopy(tokenizer), dtype, where, None)
        return self

    def _adopt(self, model, tokenizer, dtype: str, where: str, path) -> None:
        """Take a loaded model and its tokenizer (both constructors): a pad token, right padding, eval mode,
        ``dtype``, finite weights and the sizes."""
        torch = require("torch", "probing a pretrained model")
        self.model, self.tokenizer = model, tokenizer
        if self.tokenizer.pad_token is None:  # GPT-2 tokenizers have none; padding is masked anyway
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
            if self.tokenizer.pad_token is None:
                raise ValidationError(f"the tokenizer of {where} has no pad, eos or unk token to pad with")
        self.tokenizer.padding_side = "right"
        self.model.eval()
        self.torch_dtype = {"float64": torch.float64, "float32": torch.float32}[dtype]
        self.model.to(self.torch_dtype)
        check_finite_weights(self.model, path, where=None if path is not None else where)
        cfg = self.model.config
        self.n_layers, self.n_heads, self.d = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size
        self.head_dim = int(getattr(cfg, "head_dim", None) or self.d // self.n_heads) if self.family.rotary \
            else self.d // self.n_heads
        self.max_length = int(min(self.tokenizer.model_max_length, position_limit(cfg)))
        self.n_special = int(self.tokenizer.num_special_tokens_to_add(pair=False))

    # ------------------------------------------------------------ tokenization
    def encode(self, sentences, max_length: int | None = None, *, max_memory=None):
        """Tokenize with the tokenizer's special tokens (MiniLM: ``[CLS] ... [SEP]``), padding to the longest
        (on the right), truncating with a warning.

        A sentence longer than ``CHARS_PER_TOKEN x max_length`` characters is cut to that many first (with a
        warning; it counts as truncated), and the tokenizer's memory (:data:`TOKENIZER_BYTES_PER_CHAR` per
        character) is checked against ``max_memory`` before tokenizing.

        Returns
        -------
        batch : dict of torch tensors ``input_ids``, ``attention_mask`` (n, T)
        tokens : list of n lists of str
        truncated : (n,) bool
        """
        sentences = check_sentences(sentences)
        limit = self.max_length if max_length is None else self._check_max_length(max_length)
        # text beyond CHARS_PER_TOKEN characters per token of the limit cannot fit it: cut before tokenizing
        chars = CHARS_PER_TOKEN * limit
        long_ = [k for k, s in enumerate(sentences) if len(s) > chars]
        if long_:
            warnings.warn(f"{len(long_)} sentence(s) longer than {chars} characters ({CHARS_PER_TOKEN} per token of "
                          f"the limit of {limit} tokens) were cut to their first {chars} characters before "
                          f"tokenization (first: sentence {long_[0]}, {len(sentences[long_[0]])} characters)",
                          UserWarning, stacklevel=3)
            sentences = [s[:chars] for s in sentences]
        require_memory(TOKENIZER_BYTES_PER_CHAR * sum(len(s) for s in sentences),
                       f"tokenizing {len(sentences)} sentences", max_memory,
                       hint="use fewer or shorter sentences, a smaller --max-length, or raise --max-memory")
        hf_logging = require("transformers", "the MiniLM model").utils.logging
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # we warn about truncation ourselves
        try:
            lengths = np.array([len(self.tokenizer.tokenize(s)) + self.n_special for s in sentences])
        finally:
            hf_logging.set_verbosity(verbosity)
        if np.any(lengths <= self.n_special):
            k = int(np.flatnonzero(lengths <= self.n_special)[0])
            raise ValidationError(f"sentence {k} has no tokens after tokenization: {sentences[k]!r}")
        truncated = lengths > limit
        truncated[long_] = True
        if truncated.any():
            which = np.flatnonzero(truncated)
            warnings.warn(
                f"{which.size} sentence(s) longer than the limit of {limit} tokens "
                f"({'the model limit' if limit == self.max_length else 'max_length'}) were truncated "
                f"(first: sentence {int(which[0])}, {int(lengths[which[0]])} tokens)",
                UserWarning, stacklevel=3)
        batch = self.tokenizer(sentences, padding=True, truncation=True, max_length=limit, return_tensors="pt")
        ids = batch["input_ids"].numpy()
        mask = batch["attention_mask"].numpy().astype(bool)
        tokens = [self.tokenizer.convert_ids_to_tokens(row[m].tolist()) for row, m in zip(ids, mask)]
        return batch, tokens, truncated

    # ------------------------------------------------------------ forward
    def forward(self, sentences, *, max_length: int | None = None, attentions: bool = True,
                batch_size: int = 64, max_memory=None) -> Forward:
        """One forward pass returning every layer's input states (and attention maps).

        Parameters
        ----------
        sentences : list of n str (non-empty)
        max_length : truncate longer sequences (warns); default the model limit 512
        attentions : also return the attention probabilities of every layer and head
        batch_size : sentences per model call (padding is per call, then to the global T)
        max_memory : bytes or a size such as "8G" (default: the package limit, see
            :mod:`attnsvm.memory`); the outputs are estimated first and refused with a
            ResourceLimitError before anything is allocated when they would not fit

        Returns
        -------
        Forward with ``hidden (L+1, n, T, d)``, ``attentions (L, n, H, T, T)``.
        """
        torch = require("torch", "the MiniLM model")
        batch, tokens, truncated = self.encode(sentences, max_length, max_memory=max_memory)
        ids, am = batch["input_ids"], batch["attention_mask"]
        n, T = ids.shape
        L, H, d = self.n_layers, self.n_heads, self.d
        norm = self.family.pre_norm
        per_batch = min(batch_size, n) * T * (d * 16 + H * T * 2) * 8 * (L + 1)   # one model call's activations
        need = 8.0 * ((L + 1 + (L if norm else 0)) * n * T * d + (L * n * H * T * T if attentions else 0)) + per_batch
        require_memory(need, f"{self.name} forward pass of {n} sentences x {T} tokens"
                       + (" with attention maps" if attentions else ""), max_memory,
                       hint="use fewer sentences (--n-sentences), a smaller --max-length, or raise --max-memory")
        hid = np.zeros((self.n_layers + 1, n, T, self.d))
        att = np.zeros((self.n_layers, n, self.n_heads, T, T)) if attentions else None
        inp = np.zeros((self.n_layers, n, T, self.d)) if norm else None
        with torch.no_grad():
            for lo in range(0, n, batch_size):
                sl = slice(lo, lo + batch_size)
                t_len = int(am[sl].sum(axis=1).max())
                extra = {"token_type_ids": torch.zeros_like(ids[sl, :t_len])} if self.family.token_type_ids else {}
                out = self.model(input_ids=ids[sl, :t_len], attention_mask=am[sl, :t_len], **extra,
                                 output_hidden_states=True, output_attentions=attentions)
                hid[:, sl, :t_len] = np.stack([h.to(torch.float64).numpy() for h in out.hidden_states])
                if norm:  # the layer norm each layer applies before its attention (GPT-2's ln_1)
                    inp[:, sl, :t_len] = np.stack([self.family.norm_module(self.model, l)(out.hidden_states[l])
                                                   .to(torch.float64).numpy() for l in range(L)])
                if attentions:
                    att[:, sl, :, :t_len, :t_len] = np.stack([a.to(torch.float64).numpy() for a in out.attentions])
        for l in range(L + 1):  # finite weights can still overflow (float32): no NaN reaches an SVM
            if not np.isfinite(hid[l]).all() or (norm and l < L and not np.isfinite(inp[l]).all()):
                raise NonFiniteError(f"the forward pass of {self.name} gave non-finite (NaN or infinite) token "
                                     f"states at hidden layer {l}")
        mask = am.numpy().astype(bool)
        special = np.isin(ids.numpy(), list(self.tokenizer.all_special_ids)) & mask
        return Forward(hid, att, mask, tokens, truncated, inp, special)

    def token_states(self, sentences, layer: int, *, max_length: int | None = None):
        """Token states entering attention layer ``layer`` (see the module docstring).

        Parameters
        ----------
        sentences : list of n str
        layer : 0..6 (0 = embeddings, l = output of encoder layer l)

        Returns
        -------
        X : (n, T, 384) float64, zero on padding
        mask : (n, T) bool, real tokens
        tokens : list of n lists of str
        """
        layer = self._check_layer(layer, self.n_layers + 1, "layer (hidden-state index)")
        fw = self.forward(sentences, max_length=max_length, attentions=False)
        X = fw.hidden[layer] * fw.mask[:, :, None]
        return X, fw.mask, fw.tokens

    def _check_max_length(self, max_length) -> int:
        if isinstance(max_length, (bool, np.bool_)) or not isinstance(max_length, (int, np.integer)) \
                or not self.n_special + 1 <= max_length <= self.max_length:
            raise ValidationError(f"max_length must be an integer in [{self.n_special + 1}, {self.max_length}] "
                                  f"({self.name}'s position limit), got {max_length!r}")
        return int(max_length)

    def probe_max_length(self, max_length=None) -> int:
        """The probe's token limit per sentence: ``max_length`` checked against the model's position limit,
        or (None) the smaller of :data:`DEFAULT_MAX_LENGTH` (128) and that limit."""
        if max_length is None:
            return min(DEFAULT_MAX_LENGTH, self.max_length)
        return self._check_max_length(max_length)

    # ------------------------------------------------------------ weights
    def _check_layer(self, layer, upper, what):
        if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < upper:
            raise ValidationError(f"{what} must be an integer in [0, {upper - 1}], got {layer!r}")
        return int(layer)

    def key_query(self, layer: int, head: int):
        """Key and query projections of one head, float64.

        Returns
        -------
        W_K : (d, m), W_Q : (d, m), b_K : (m,), b_Q : (m,) with ``key_t = W_K^T x_t + b_K``
        """
        layer = self._check_layer(layer, self.n_layers, "layer")
        head = self._check_layer(head, self.n_heads, "head")
        grab = lambda t: t.detach().to("cpu").double().numpy().copy()  # noqa: E731
        return tuple(grab(t) for t in self.family.projections(self.model, layer, head, self.head_dim, self.d))

    def head_weights(self, layer: int, head: int, *, bias: str = "augment", scaled: bool = True) -> np.ndarray:
        """Key-query matrix of a head in the TokenProblem convention (key on the left).

        Returns
        -------
        W_h : (385, 385) for ``bias="augment"`` (tokens via :func:`augment`), else (384, 384);
            ``x_t^T W_h z`` is the attention score of key t for query z (see module docstring).
            A rotary head (``family.rotary``) is read in its post-rotary query-key space (:meth:`rotary_states`):
            ``W_h = diag(1, ..., 1, 0) / sqrt(m)``, (m + 1, m + 1) (``bias="drop"``: ``I / sqrt(m)``, (m, m)).
        """
        if bias not in BIAS_MODES:
            raise ValidationError(f"bias must be one of {BIAS_MODES}, got {bias!r}")
        if self.family.rotary:
            self._check_layer(layer, self.n_layers, "layer")
            self._check_layer(head, self.n_heads, "head")
            m = self.head_dim
            scale = self.score_scale(layer) if scaled else 1.0
            return scale * np.diag(np.r_[np.ones(m), 0.0]) if bias == "augment" else scale * np.eye(m)
        WK, WQ, bK, bQ = self.key_query(layer, head)
        scale = self.score_scale(layer) if scaled else 1.0
        core = scale * (WK @ WQ.T)
        if bias == "drop":
            return core
        W = np.zeros((self.d + 1, self.d + 1))
        W[: self.d, : self.d] = core
        W[: self.d, self.d] = scale * (WK @ bQ)
        return W

    def rotary_states(self, states: np.ndarray, layer: int, head: int) -> tuple[np.ndarray, np.ndarray]:
        """A rotary head's post-rotary keys and queries of every token (``family.rotary`` only).

        ``k~_t = R_t (W_K^T x_t + b_K)`` and ``q~_t = R_t (W_Q^T x_t + b_Q)`` with W_K, b_K of the head's key-value
        head (:meth:`attnsvm.real.adapters.Family.kv_head`) and R_t the rotation of position t (:meth:`rotations`,
        positions 0..T-1: right padding, a sentence's tokens sit at positions 0, 1, ... as in the forward pass).
        The model's score of key t for query s is ``q~_s . k~_t * score_scale``.

        Parameters
        ----------
        states : (n, T, d) float64, the states the head acts on (:meth:`Forward.layer_input`)
        layer, head : the head

        Returns
        -------
        K : (n, T, m) float64 post-rotary keys; Q : (n, T, m) float64 post-rotary queries
        """
        if not self.family.rotary:
            raise ValidationError(f"{self.name} has no rotary position embeddings (family {self.family.name})")
        states = np.asarray(states, dtype=np.float64)
        if states.ndim != 3 or states.shape[2] != self.d:
            raise ValidationError(f"states must have shape (n, T, d) with d = {self.d}, got {states.shape}")
        WK, WQ, bK, bQ = self.key_query(layer, head)
        R = self.rotations(states.shape[1])
        return np.einsum("tab,ntb->nta", R, states @ WK + bK), np.einsum("tab,ntb->nta", R, states @ WQ + bQ)

    def rotations(self, T: int) -> np.ndarray:
        """The rotations ``R_p`` of positions p = 0..T-1 of a rotary model's heads (``family.rotary`` only):
        (T, m, m) float64, built from the model's own ``rotary_emb`` (its cos and sin at those positions) in the
        rotate-half layout on the first r coordinates (r = the width of the model's cos; GPT-NeoX: m * rotary_pct),
        the identity on the rest: HF's ``apply_rotary_pos_emb`` is ``v -> R_p v``; ``R_0`` is the identity."""
        if not self.family.rotary:
            raise ValidationError(f"{self.name} has no rotary position embeddings (family {self.family.name})")
        if isinstance(T, (bool, np.bool_)) or not isinstance(T, (int, np.integer)) or T < 1:
            raise ValidationError(f"T must be an integer >= 1, got {T!r}")
        torch = require("torch", "probing a pretrained model")
        with torch.no_grad():
            pos = torch.arange(int(T))[None]
            cos, sin = self.family.body(self.model).rotary_emb(torch.zeros(1, dtype=self.torch_dtype), pos)
        cos, sin = cos[0].to(torch.float64).numpy(), sin[0].to(torch.float64).numpy()  # (T, r)
        r, h = cos.shape[1], cos.shape[1] // 2
        R = np.broadcast_to(np.eye(self.head_dim), (int(T), self.head_dim, self.head_dim)).copy()
        a = np.arange(r)
        R[:, a, a] = cos  # v_rot cos + rotate_half(v_rot) sin, rotate_half(v)_a = -v_(a+h) (a < h), v_(a-h) (a >= h)
        R[:, a[:h], a[:h] + h] = -sin[:, :h]
        R[:, a[h:], a[h:] - h] = sin[:, h:]
        return R

    def score_scale(self, layer: int) -> float:
        """The factor the model multiplies the scores of ``layer`` by (1/sqrt(m); see the family adapter)."""
        if self.family.name == "bert":
            return 1.0 / np.sqrt(self.head_dim)
        return self.family.scale(self.model.config, layer, self.head_dim)

    def all_head_weights(self, *, bias: str = "augment", scaled: bool = True) -> np.ndarray:
        """Every head: (L, H, d', d') with d' = 385 (augment) or 384."""
        return np.stack([np.stack([self.head_weights(l, h, bias=bias, scaled=scaled) for h in range(self.n_heads)])
                         for l in range(self.n_layers)])


def read_model_config(path) -> dict:
    """The ``config.json`` of a model directory, or a ValidationError saying what the path is instead."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValidationError(f"model directory {path!r} does not exist")
    if not os.path.isdir(path):
        raise ValidationError(f"model path {path!r} is not a directory; expected a folder written by "
                              "save_pretrained (config.json, weights, tokenizer files)")
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise ValidationError(f"{path!r} is not a transformers model directory: it has no config.json")
    size = os.path.getsize(cfg_path)
    if size > MAX_CONFIG_BYTES:
        raise ValidationError(f"the model config {cfg_path!r} has {size} bytes; a config.json has a few KB "
                              f"(at most {MAX_CONFIG_BYTES} are read)")
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValidationError(f"cannot read the model config {cfg_path!r}: {exc}") from None
    except RecursionError:
        raise ValidationError(f"cannot read the model config {cfg_path!r}: its values are nested too deeply") from None
    if nesting_depth(cfg, MAX_CONFIG_DEPTH) > MAX_CONFIG_DEPTH:
        raise ValidationError(f"the model config {cfg_path!r} nests values more than {MAX_CONFIG_DEPTH} levels deep; "
                              "a config.json is a flat object of settings")
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise ValidationError(f"the model config {cfg_path!r} has no model_type")
    return cfg


def augment(X: np.ndarray) -> np.ndarray:
    """Append a constant 1 coordinate to tokens: (..., d) -> (..., d + 1)."""
    X = np.asarray(X, dtype=np.float64)
    return np.concatenate([X, np.ones(X.shape[:-1] + (1,))], axis=-1)
