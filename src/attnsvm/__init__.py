"""attnsvm: attention as a max-margin token selector.

Describe a token-selection problem, solve the SVMs of the theory exactly, train
attention models and measure the theory against the training.

This module re-exports the main names of the layers below it. ``import attnsvm`` loads
numpy only: the solver, metric and training names are imported on their first use (PEP 562),
and training needs torch. ``attnsvm.probe`` (:func:`attnsvm.real.probe.probe`: a pretrained model's heads
against the SVMs of their own selections, for notebooks) is imported on first use too and needs the extra
``attnsvm[real]``.
"""

#: The package version.
__version__ = "0.3.0"

from attnsvm.errors import AttnSVMError, NonFiniteError, ProblemFileError, ResourceLimitError, ValidationError
from attnsvm.problem import ProblemBatch, TokenProblem
from attnsvm.tokens import OptimalTokens, nonlinear_scores, optimal_tokens, scores
from attnsvm.generators import random_problem
# Solvers, metrics and training are imported on first use (PEP 562): ``import attnsvm`` loads
# numpy only, no scipy and no torch; ``attnsvm.solve_svm`` etc. behave as ordinary attributes.
_SVM = ("Certificate", "ConstraintSet", "SVMSolution", "solve_fin", "solve_gen_svm", "solve_p_svm",
        "solve_seq_svm", "solve_soft_svm", "solve_svm", "solve_svm_batch", "solve_v_svm", "svm_equivalence")
_SVM_ANALYSIS = ("all_support_vectors", "enumerate_locally_optimal", "is_locally_optimal", "matrix_rank",
                 "separation_delta", "support_indices")
_METRICS = ("convergence_type", "correlation", "one_minus_correlation", "read_selection", "selected_mass",
            "softmax_of", "token_margins")
_TRAINING = ("train", "train_sequence", "regularization_path", "TrainResult", "PathResult")
_REAL = ("probe",)


def __getattr__(name):
    import importlib

    if name in _SVM_ANALYSIS:
        module = importlib.import_module("attnsvm.svm.analysis")
    elif name in _SVM or name == "svm":
        module = importlib.import_module("attnsvm.svm")
    elif name in _METRICS or name == "metrics":
        module = importlib.import_module("attnsvm.metrics")
    elif name in _TRAINING or name == "training":
        module = importlib.import_module("attnsvm.training")
    elif name in _REAL:  # the notebook entry point, above this facade's layer (tests/test_layers.py ALLOWED_UPWARD)
        module = importlib.import_module("attnsvm.real.probe")
    else:
        raise AttributeError(f"module 'attnsvm' has no attribute {name!r}")
    value = module if name in ("svm", "metrics", "training") else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_SVM) | set(_SVM_ANALYSIS) | set(_METRICS) | set(_TRAINING) | set(_REAL))


__all__ = [
    "__version__",
    "AttnSVMError",
    "ValidationError",
    "ProblemFileError",
    "ResourceLimitError",
    "NonFiniteError",
    "TokenProblem",
    "ProblemBatch",
    "OptimalTokens",
    "scores",
    "optimal_tokens",
    "nonlinear_scores",
    "random_problem",
    "SVMSolution",
    "Certificate",
    "ConstraintSet",
    "solve_svm",
    "solve_gen_svm",
    "solve_seq_svm",
    "solve_p_svm",
    "solve_v_svm",
    "solve_soft_svm",
    "solve_fin",
    "svm_equivalence",
    "solve_svm_batch",
    "support_indices",
    "is_locally_optimal",
    "all_support_vectors",
    "enumerate_locally_optimal",
    "separation_delta",
    "matrix_rank",
    "correlation",
    "one_minus_correlation",
    "selected_mass",
    "read_selection",
    "token_margins",
    "softmax_of",
    "convergence_type",
    "train",
    "train_sequence",
    "regularization_path",
    "TrainResult",
    "PathResult",
    "probe",
]
