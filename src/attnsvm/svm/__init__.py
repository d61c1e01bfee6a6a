"""The SVMs of the theory as one problem: rank-one constraints and exact solvers.

numpy / scipy / cvxpy only (no torch). See :mod:`attnsvm.svm.api` for the entry points.
"""

from attnsvm.svm.analysis import (
    all_support_vectors,
    enumerate_locally_optimal,
    is_locally_optimal,
    matrix_rank,
    separation_delta,
    support_indices,
)
from attnsvm.svm.api import (
    BatchSolution,
    SVMEquivalence,
    solve_fin,
    solve_gen_svm,
    solve_p_svm,
    solve_seq_svm,
    solve_soft_svm,
    solve_svm,
    solve_svm_batch,
    solve_v_svm,
    svm_equivalence,
)
from attnsvm.svm.constraints import ConstraintSet
from attnsvm.svm.solution import Certificate, SVMSolution

__all__ = [
    "solve_svm", "solve_gen_svm", "solve_fin", "svm_equivalence", "SVMEquivalence", "solve_seq_svm",
    "solve_p_svm", "solve_v_svm", "solve_soft_svm", "solve_svm_batch", "BatchSolution",
    "SVMSolution", "Certificate", "ConstraintSet",
    "support_indices", "is_locally_optimal", "all_support_vectors", "enumerate_locally_optimal",
    "separation_delta", "matrix_rank",
]
