"""Vector SVMs (the case d2 = 1): p-SVM, relaxed p-SVM and v-SVM.

* p-SVM: ``min ||p|| s.t. p^T (k_{i,a_i} - k_{it}) >= 1`` with keys ``k = W^T x`` (``X @ W``).
* relaxed p-SVM: the right-hand side is 0 for the inputs that are not support
  vectors of the head (the official code's ``zero_ids``).
* v-SVM: ``min ||v|| s.t. Y_i v^T x_{i,a_i} >= 1`` (hard margin, no bias), solved
  exactly (not approximated through a large C).

The rows come from :func:`~attnsvm.svm.constraints.prompt_rows` and
:func:`~attnsvm.svm.constraints._v_rows` (``V = 1``, shape (N, 1)); this module solves them
with the exact Frobenius solver and returns the vector instead of the (d, 1) matrix.
"""

from __future__ import annotations

from attnsvm.svm.constraints import ConstraintSet
from attnsvm.svm.frobenius import solve_frobenius
from attnsvm.svm.options import FrobeniusOptions, VectorOptions
from attnsvm.svm.solution import SVMSolution

__all__ = ["solve_vector_svm"]

_VECTORS = ("p", "v")


def solve_vector_svm(cs: ConstraintSet, vector: str, formulation: str, *, options: VectorOptions | None = None,
                     **kw) -> SVMSolution:
    """Solve ``min ||x|| s.t. u_k^T x >= rhs_k`` for the rows of a vector problem.

    Parameters
    ----------
    cs : ConstraintSet with ``U (N, d)`` and ``V = 1 (N, 1)``
    vector : "p" (prompt) or "v" (head): the SVMSolution attribute that receives the solution
    formulation : label stored in the solution ("prompt", "prompt-relaxed" or "v")
    options : :class:`~attnsvm.svm.options.VectorOptions`, or its settings as keywords (``feas_tol``,
        ``support_tol``, ``time_limit``, ``max_memory``: see :func:`~attnsvm.svm.frobenius.solve_frobenius`)

    Returns
    -------
    SVMSolution with ``p (d,)`` or ``v (d,)`` and ``W = None``.
    """
    assert vector in _VECTORS, vector
    o = VectorOptions.resolve(options, kw, "solve_vector_svm")
    sol = solve_frobenius(cs, formulation=formulation, options=FrobeniusOptions(settings=o.settings))
    if sol.W is not None:
        setattr(sol, vector, sol.W[:, 0].copy())
        sol.W = None
    return sol
