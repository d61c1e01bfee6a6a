"""The nuclear-norm interior-point method's former module: its public names, now in :mod:`attnsvm.svm.ipm`.

Kept so that ``from attnsvm.svm.barrier import nuclear_ipm`` (and the other public names it served) keeps
working; new code imports from :mod:`attnsvm.svm.ipm`.
"""

from __future__ import annotations

from attnsvm.svm.ipm import (IPMResult, distinct_rows, ipm_arrays, ipm_step, next_step, nuclear_ipm, query_basis,
                             row_space_basis, singular_values, spectral_norm)

__all__ = ["IPMResult", "distinct_rows", "ipm_arrays", "ipm_step", "next_step", "nuclear_ipm", "query_basis",
           "row_space_basis", "singular_values", "spectral_norm"]
