"""A pretrained transformer read from a local directory: token states and the key-query matrix of each head.

:class:`PretrainedTransformer` loads any local BERT-like encoder or GPT-2-like decoder directory
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
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.memory import require_memory
from attnsvm.real.adapters import family_of
from attnsvm.real.errors import require

BIAS_MODES = ("augment", "drop")
#: vocabulary files of the tokenizers transformers loads offline (at least one must be in a model directory)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")


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
    (:mod:`attnsvm.real.adapters`: BERT-like encoders, GPT-2-like decoders) decides which states
    each head acts on and where its query/key projections are; other families are refused with
    :class:`attnsvm.real.adapters.UnsupportedModelError` saying why. Use :func:`load_model`
    (any directory) or :func:`load_minilm` (the shipped MiniLM).

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
        torch = require("torch", "the MiniLM model" if name == "MiniLM" else "probing a pretrained model")
        self.path = path
        # the weights on disk, loaded once and converted once to ``dtype`` (both copies alive at the peak)
        files = [f for f in os.listdir(self.path) if f.endswith((".safetensors", ".bin"))]
        if not files:
            raise ValidationError(f"model directory {path!r} holds no weights (*.safetensors or *.bin); "
                                  "save the model with save_pretrained(DIR)")
        weights = sum(os.path.getsize(os.path.join(self.path, f)) for f in files)
        if not any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES):
            raise ValidationError(f"no tokenizer could be loaded from the model directory {path!r}: none of "
                                  f"{', '.join(TOKENIZER_FILES)} is there; save the tokenizer beside the model with "
                                  "tokenizer.save_pretrained(DIR)")
        require_memory(weights * (1 + {"float64": 2, "float32": 1}.get(dtype, 2)), f"loading {self.name} ({dtype})",
                       max_memory, hint="raise --max-memory or ATTNSVM_MAX_MEMORY")
        hf_logging = transformers.utils.logging
        bar = hf_logging.is_progress_bar_enabled()
        verbosity = hf_logging.get_verbosity()
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        try:
            try:
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.path, local_files_only=True)
            except Exception as exc:  # transformers raises OSError, ValueError, TypeError ... for missing files
                raise ValidationError(f"no tokenizer could be loaded from the model directory {path!r} ({exc}); save "
                                      "the tokenizer beside the model with tokenizer.save_pretrained(DIR)") from None
            if not getattr(self.tokenizer, "is_fast", False) and not hasattr(self.tokenizer, "convert_ids_to_tokens"):
                raise ValidationError(f"the tokenizer of {path!r} cannot map ids back to tokens")
            try:
                self.model = transformers.AutoModel.from_pretrained(self.path, local_files_only=True,
                                                                    attn_implementation="eager")
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise ValidationError(f"transformers cannot load the model in {path!r}: {exc}") from None
        finally:
            hf_logging.set_verbosity(verbosity)
            if bar:
                hf_logging.enable_progress_bar()
        if self.tokenizer.pad_token is None:  # GPT-2 tokenizers have none; padding is masked anyway
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
            if self.tokenizer.pad_token is None:
                raise ValidationError(f"the tokenizer of {path!r} has no pad, eos or unk token to pad with")
        self.tokenizer.padding_side = "right"
        self.model.eval()
        self.torch_dtype = {"float64": torch.float64, "float32": torch.float32}[dtype]
        self.model.to(self.torch_dtype)
        cfg = self.model.config
        self.n_layers, self.n_heads, self.d = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size
        self.head_dim = self.d // self.n_heads
        self.max_length = int(min(self.tokenizer.model_max_length, cfg.max_position_embeddings))
        self.n_special = int(self.tokenizer.num_special_tokens_to_add(pair=False))

    # ------------------------------------------------------------ tokenization
    def encode(self, sentences, max_length: int | None = None):
        """Tokenize with the tokenizer's special tokens (MiniLM: ``[CLS] ... [SEP]``), padding to the longest
        (on the right), truncating with a warning.

        Returns
        -------
        batch : dict of torch tensors ``input_ids``, ``attention_mask`` (n, T)
        tokens : list of n lists of str
        truncated : (n,) bool
        """
        sentences = check_sentences(sentences)
        limit = self.max_length if max_length is None else int(max_length)
        if not self.n_special + 1 <= limit <= self.max_length:
            raise ValidationError(f"max_length must lie in [{self.n_special + 1}, {self.max_length}], got {max_length}")
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
        batch, tokens, truncated = self.encode(sentences, max_length)
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
        """
        if bias not in BIAS_MODES:
            raise ValidationError(f"bias must be one of {BIAS_MODES}, got {bias!r}")
        WK, WQ, bK, bQ = self.key_query(layer, head)
        scale = self.score_scale(layer) if scaled else 1.0
        core = scale * (WK @ WQ.T)
        if bias == "drop":
            return core
        W = np.zeros((self.d + 1, self.d + 1))
        W[: self.d, : self.d] = core
        W[: self.d, self.d] = scale * (WK @ bQ)
        return W

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
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(f"cannot read the model config {cfg_path!r}: {exc}") from None
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise ValidationError(f"the model config {cfg_path!r} has no model_type")
    return cfg


def augment(X: np.ndarray) -> np.ndarray:
    """Append a constant 1 coordinate to tokens: (..., d) -> (..., d + 1)."""
    X = np.asarray(X, dtype=np.float64)
    return np.concatenate([X, np.ones(X.shape[:-1] + (1,))], axis=-1)
