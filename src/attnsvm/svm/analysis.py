"""Support indices, local optimality and related tests built on the SVM solvers (a public module).

The tests take a :class:`~attnsvm.problem.TokenProblem` and a selection ``select (n,)``; prompt
problems use the p-SVM, the others the Att-SVM. Also :func:`matrix_rank` and :func:`row_basis`
(an orthonormal basis of the row space of ``A (N, d)``).
"""

from __future__ import annotations

import itertools

import numpy as np

from attnsvm._validate import check_number
from attnsvm.errors import ValidationError
from attnsvm.problem import TokenProblem
from attnsvm.svm.api import default_select, solve_svm
from attnsvm.svm.nuclear import row_basis
from attnsvm.svm.solution import SVMSolution

__all__ = [
    "support_indices", "is_locally_optimal", "locally_optimal_rows", "all_support_vectors",
    "enumerate_locally_optimal", "separation_delta", "matrix_rank", "row_basis",
]


def _solution(problem: TokenProblem, select, norm: str = "fro", solution: SVMSolution | None = None) -> SVMSolution:
    if solution is not None:
        return solution
    return solve_svm(problem, select, norm=norm)


def support_indices(problem: TokenProblem, select=None, *, norm: str = "fro", tol: float = 1e-6,
                    solution: SVMSolution | None = None) -> np.ndarray | None:
    """Support tokens ``T_i(a)``: tokens whose margin constraint is active at the SVM solution.

    Parameters
    ----------
    problem : TokenProblem
    select : (n,) int or None (optimal tokens)
    tol : relative tolerance ``|margin - 1| <= tol``
    solution : a precomputed SVMSolution for this selection (optional)

    Returns
    -------
    (n, T) bool mask (the selected tokens are never support tokens), or None when
    the selection is infeasible.
    """
    tol = check_number(tol, "tol", low=0.0, high=1.0, high_open=True)
    sol = _solution(problem, select, norm, solution)
    if not sol.feasible:
        return None
    cs = sol.constraints
    n, T = cs.shape
    rows = (np.abs(sol.margins - cs.rhs) <= tol * np.maximum(1.0, np.abs(cs.rhs))) & ~cs.is_equality
    out = np.zeros((n, T), bool)
    out[cs.sample[rows], cs.other[rows]] = True
    return out


def _scores(problem: TokenProblem) -> np.ndarray:
    if problem.Y is None or problem.v is None:
        raise ValidationError("local optimality compares token scores: the problem needs labels Y and a head v")
    return problem.scores()


def is_locally_optimal(problem: TokenProblem, select, *, norm: str = "fro", tol: float = 1e-6,
                       solution: SVMSolution | None = None) -> bool:
    """Whether the selection is locally optimal.

    True iff the SVM of the selection is feasible and every selected token has a
    strictly higher score than each of its support tokens.

    Parameters
    ----------
    problem : TokenProblem with Y (n,) and v (d,)
    select : (n,) int
    """
    gamma = _scores(problem)
    sel = default_select(problem, select)
    sup = support_indices(problem, sel, norm=norm, tol=tol, solution=solution)
    if sup is None:
        return False
    best = gamma[np.arange(problem.n), sel]
    return locally_optimal_rows(sup.ravel(), np.repeat(best, problem.T), gamma.ravel())


def locally_optimal_rows(support, score_selected, score_other) -> bool:
    """Local optimality (the paper's definition) on the margin rows of a feasible selection's SVM.

    True iff on every support row (an active margin constraint, :func:`support_indices`) the
    sample's selected token scores strictly higher than the row's other token. For callers that
    hold the rows (e.g. stored in a table) rather than a problem; :func:`is_locally_optimal` is
    this on the SVM it solves.

    Parameters
    ----------
    support : (N,) bool, whether row k is active
    score_selected : (N,) float, score of the selected token of row k's sample
    score_other : (N,) float, score of row k's other token
    """
    support = np.asarray(support, dtype=bool)
    beats = np.asarray(score_selected, dtype=np.float64) > np.asarray(score_other, dtype=np.float64)
    if support.shape != beats.shape:
        raise ValidationError(f"support, score_selected and score_other must have one shape (N,), got "
                              f"{support.shape} and {beats.shape}")
    return bool(np.all(~support | beats))


def all_support_vectors(problem: TokenProblem, select=None, *, norm: str = "fro", tol: float = 1e-6,
                        solution: SVMSolution | None = None) -> bool:
    """Whether every non-selected token is a support token (all constraints active).

    Returns False for an infeasible selection.
    """
    sel = default_select(problem, select)
    sup = support_indices(problem, sel, norm=norm, tol=tol, solution=solution)
    if sup is None:
        return False
    expect = np.ones_like(sup)
    expect[np.arange(problem.n), sel] = False
    return bool(np.array_equal(sup, expect))


def enumerate_locally_optimal(problem: TokenProblem, *, norm: str = "fro", tol: float = 1e-6,
                              max_selections: int = 100_000) -> np.ndarray:
    """All locally-optimal selections of a small problem (enumerates the T^n selections).

    Parameters
    ----------
    problem : TokenProblem with Y and v
    max_selections : refuse problems with more than this many selections

    Returns
    -------
    (K, n) int array of the locally-optimal selections, lexicographic order.
    """
    _scores(problem)
    max_selections = check_number(max_selections, "max_selections", low=1, integer=True)
    n, T = problem.n, problem.T
    if T**n > max_selections:
        raise ValidationError(f"enumerating T^n = {T}^{n} selections exceeds max_selections = {max_selections}")
    out = []
    for sel in itertools.product(range(T), repeat=n):
        sel = np.array(sel)
        if is_locally_optimal(problem, sel, norm=norm, tol=tol):
            out.append(sel)
    return np.array(out, dtype=np.int64).reshape(len(out), n)


def separation_delta(problem: TokenProblem, select=None, *, norm: str = "fro", tol: float = 1e-6,
                     solution: SVMSolution | None = None) -> float:
    """Separation between support and non-support tokens along the SVM direction.

    ``delta = 1/2 min_i min_{t in T_i, tau in Tbar_i} (x_it - x_itau)^T W z_i``,
    i.e. half the smallest excess margin ``margin - 1`` of a non-support token (over the
    samples that have non-support tokens). ``inf`` if every token is a support token,
    ``nan`` if the selection is infeasible.
    """
    tol = check_number(tol, "tol", low=0.0, high=1.0, high_open=True)
    sel = default_select(problem, select)
    sol = _solution(problem, sel, norm, solution)
    if not sol.feasible:
        return float("nan")
    cs = sol.constraints
    rows = ~cs.is_equality
    excess = sol.margins[rows] - cs.rhs[rows]
    non_support = excess > tol * np.maximum(1.0, np.abs(cs.rhs[rows]))
    if not non_support.any():
        return float("inf")
    return 0.5 * float(excess[non_support].min())


def matrix_rank(W, rtol: float = 1e-6):
    """Rank with a relative threshold ``#{k : sigma_k > rtol * sigma_1}`` (0 for W = 0).

    W : (d1, d2) -> int, or a stack (..., d1, d2) -> int array (...).
    """
    rtol = check_number(rtol, "rtol", low=0.0, high=1.0, high_open=True)
    try:
        W = np.asarray(W, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError("W must be a real array of shape (..., d1, d2)") from None
    if W.ndim < 2:
        raise ValidationError(f"W must have shape (..., d1, d2), got {W.shape}")
    if not np.all(np.isfinite(W)):
        raise ValidationError("W must be finite (no NaN or inf)")
    if W.size == 0:
        return 0 if W.ndim == 2 else np.zeros(W.shape[:-2], dtype=np.int64)
    # the rank is scale-invariant: scale each matrix by a power of two to entries below 1 (exact),
    # so that the SVD neither overflows nor underflows at any magnitude
    _, e = np.frexp(np.abs(W).max(axis=(-2, -1)))
    s = np.linalg.svd(np.ldexp(W, -e[..., None, None]), compute_uv=False)
    top = s[..., :1]
    r = np.where(top[..., 0] > 0, np.sum(s > rtol * top, axis=-1), 0)
    return int(r) if W.ndim == 2 else r.astype(np.int64)
