"""The nuclear-norm interior-point method's former module: its public names, now in :mod:`attnsvm.svm.ipm`.

Kept so that ``from attnsvm.svm.barrier import nuclear_ipm`` (and the other public names it served) keeps
working; new code imports from :mod:`attnsvm.svm.ipm`. ``query_basis``, which no solver used, is served here
only, with a DeprecationWarning, until 0.4.
"""

from __future__ import annotations

import warnings

import numpy as np

from attnsvm.svm.ipm import (IPMResult, distinct_rows, ipm_arrays, ipm_step, next_step, nuclear_ipm,
                             row_space_basis, singular_values, spectral_norm)

__all__ = ["IPMResult", "distinct_rows", "ipm_arrays", "ipm_step", "next_step", "nuclear_ipm",
           "row_space_basis", "singular_values", "spectral_norm"]


def _query_basis(V: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Orthonormal basis ``(d2, r)`` of the span of the rows of ``V (N, d2)`` (the SVD of its distinct rows)."""
    if V.size == 0:
        return np.zeros((V.shape[1], 0))
    return row_space_basis(distinct_rows(V)[0], rtol)


def __getattr__(name: str):
    if name == "query_basis":
        warnings.warn("attnsvm.svm.barrier.query_basis is deprecated and will be removed in 0.4: use "
                      "attnsvm.svm.ipm.row_space_basis(attnsvm.svm.ipm.distinct_rows(V)[0])", DeprecationWarning,
                      stacklevel=2)
        return _query_basis
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
