"""Vector SVMs (the case d2 = 1): p-SVM, relaxed p-SVM and v-SVM.

* p-SVM: ``min ||p|| s.t. p^T (k_{i,a_i} - k_{it}) >= 1`` with keys ``k = W^T x`` (``X @ W``).
* relaxed p-SVM: the right-hand side is 0 for the inputs that are not support
  vectors of the head (the official code's ``zero_ids``).
* v-SVM: ``min ||v|| s.t. Y_i v^T x_{i,a_i} >= 1`` (hard margin, no bias), solved
  exactly (not approximated through a large C).
"""

from __future__ import annotations

import numpy as np

from attnsvm._validate import as_float_array
from attnsvm.errors import ValidationError
from attnsvm.svm.constraints import prompt_constraints, v_constraints
from attnsvm.svm.frobenius import solve_frobenius
from attnsvm.svm.solution import SVMSolution

__all__ = ["p_svm", "v_svm"]


def _as_vector_solution(sol: SVMSolution, attr: str) -> SVMSolution:
    if sol.W is not None:
        setattr(sol, attr, sol.W[:, 0].copy())
        sol.W = None
    return sol


def p_svm(X, W, select, zero_rows=None, *, tol: float = 1e-10, support_tol: float = 1e-6,
          max_memory=None) -> SVMSolution:
    """Solve the (relaxed) p-SVM.

    Parameters
    ----------
    X : (n, T, d) tokens
    W : (d, d) fixed key-query matrix, or None for the identity
    select : (n,) int
    zero_rows : (n,) bool or None, inputs whose rows get right-hand side 0
    tol, support_tol, max_memory : see :func:`~attnsvm.svm.frobenius.solve_frobenius`

    Returns
    -------
    SVMSolution with ``p (d,)``.
    """
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    if W is not None:
        W = as_float_array(W, "W", 2, f"(d, d) = ({d}, {d})")
        if W.shape != (d, d):
            raise ValidationError(f"W must have shape (d, d) = ({d}, {d}), got {W.shape}")
        K = X @ W
    else:
        K = X
    cs = prompt_constraints(K, select, zero_rows)
    form = "prompt" if zero_rows is None or not np.any(zero_rows) else "prompt-relaxed"
    return _as_vector_solution(solve_frobenius(cs, formulation=form, tol=tol, support_tol=support_tol,
                                               max_memory=max_memory), "p")


def v_svm(X, Y, select, *, tol: float = 1e-10, support_tol: float = 1e-6, max_memory=None) -> SVMSolution:
    """Solve the v-SVM ``min ||v|| s.t. Y_i v^T x_{i,a_i} >= 1``.

    Parameters
    ----------
    X : (n, T, d), Y : (n,), select : (n,) int
    tol, support_tol, max_memory : see :func:`~attnsvm.svm.frobenius.solve_frobenius`

    Returns
    -------
    SVMSolution with ``v (d,)``; ``support`` (n,) marks the support vectors (inputs).
    """
    cs = v_constraints(X, Y, select)
    return _as_vector_solution(solve_frobenius(cs, formulation="v", tol=tol, support_tol=support_tol,
                                               max_memory=max_memory), "v")
