"""attnsvm: attention as a max-margin token selector.

Describe a token-selection problem, solve the SVMs of the theory exactly, train
attention models and measure the theory against the training.
"""

__version__ = "0.1.0"

from .errors import AttnSVMError, ProblemFileError, ValidationError
from .problem import ProblemBatch, TokenProblem
from .tokens import OptimalTokens, nonlinear_scores, optimal_tokens, scores
from .generators import random_problem

__all__ = [
    "__version__",
    "AttnSVMError",
    "ValidationError",
    "ProblemFileError",
    "TokenProblem",
    "ProblemBatch",
    "OptimalTokens",
    "scores",
    "optimal_tokens",
    "nonlinear_scores",
    "random_problem",
]
