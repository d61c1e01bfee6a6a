"""Metrics comparing trained attention with the SVMs of the theory (numpy, batched).

Shapes follow the package vocabulary: W (..., d, d), X (n, T, d), Z (n, d),
softmax (..., n, T), select (..., n) int, selected (..., n, T) bool. Leading axes
(runs, checkpoints) broadcast.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import ValidationError
from .problem import TokenProblem
from .svm import SVMSolution, is_locally_optimal, matrix_rank


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def correlation(A, B, ndim: int | None = None) -> np.ndarray:
    """Correlation coefficient ``<A, B> / (||A|| ||B||)`` over the trailing ``ndim`` axes.

    Parameters
    ----------
    A, B : array_like, broadcastable in their leading axes, e.g. a trajectory
        (runs, checkpoints, d, d) and an SVM solution (d, d) or (runs, 1, d, d).
    ndim : number of trailing axes forming one object; default 1 if either input is
        1-D, else 2 (matrices). Pass ``ndim=1`` for batched vectors (e.g. p (R, C, d)).

    Returns
    -------
    ndarray of the broadcast leading shape (a 0-d array for two single objects);
    0 where either norm is 0 (never NaN).
    """
    A, B = _np(A), _np(B)
    if ndim is None:
        ndim = 1 if min(A.ndim, B.ndim) == 1 else 2
    if A.ndim < ndim or B.ndim < ndim or A.shape[A.ndim - ndim:] != B.shape[B.ndim - ndim:]:
        raise ValidationError(f"correlation: trailing {ndim} axes must match, got shapes {A.shape} and {B.shape}")
    axes = tuple(range(-ndim, 0))
    inner = np.sum(A * B, axis=axes)
    na = np.sqrt(np.sum(A * A, axis=axes))
    nb = np.sqrt(np.sum(B * B, axis=axes))
    denom = na * nb
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(denom > 0, inner / np.where(denom > 0, denom, 1.0), 0.0)
    return np.clip(out, -1.0, 1.0)


def one_minus_correlation(A, B, ndim: int | None = None) -> np.ndarray:
    """``1 - correlation(A, B)``, computed as ``||a - b||^2 / 2`` of the unit objects (accurate near 0)."""
    A, B = _np(A), _np(B)
    if ndim is None:
        ndim = 1 if min(A.ndim, B.ndim) == 1 else 2
    axes = tuple(range(-ndim, 0))
    na = np.sqrt(np.sum(A * A, axis=axes, keepdims=True))
    nb = np.sqrt(np.sum(B * B, axis=axes, keepdims=True))
    ok = (na > 0) & (nb > 0)
    a = np.where(ok, A / np.where(na > 0, na, 1.0), 0.0)
    b = np.where(ok, B / np.where(nb > 0, nb, 1.0), 0.0)
    out = 0.5 * np.sum((a - b) ** 2, axis=axes)
    return np.where(np.squeeze(ok, axis=axes), out, 1.0)


def selected_mass(softmax, select) -> np.ndarray:
    """Mean over samples of the softmax mass on the selected tokens.

    softmax : (..., n, T); select : (..., n) int (one token each) or (..., n, T) bool (token sets).
    Returns (...).
    """
    S = _np(softmax)
    sel = np.asarray(select)
    if sel.dtype == bool:
        mass = np.sum(np.where(sel, S, 0.0), axis=-1)
    else:
        sel = np.broadcast_to(sel.astype(np.int64), S.shape[:-1])
        mass = np.take_along_axis(S, sel[..., None], axis=-1)[..., 0]
    return mass.mean(axis=-1)


def read_selection(softmax, threshold: float | None = None) -> np.ndarray:
    """The tokens a trained model selects.

    softmax : (..., n, T). ``threshold=None``: argmax per sample, int (..., n);
    otherwise the set ``{t : s_t > threshold}``, bool (..., n, T) (e.g. 1e-3 for
    multi-token selection).
    """
    S = _np(softmax)
    if threshold is None:
        return np.argmax(S, axis=-1)
    return S > float(threshold)


def softmax_of(W, X, Z) -> np.ndarray:
    """Attention maps ``softmax(X_i W z_i)``: W (..., d, d), X (n, T, d), Z (n, d) -> (..., n, T)."""
    W, X, Z = _np(W), _np(X), _np(Z)
    a = np.einsum("itd,...de,ie->...it", X, W, Z)
    a = a - a.max(axis=-1, keepdims=True)
    e = np.exp(a)
    return e / e.sum(axis=-1, keepdims=True)


def margins(W, X, Z, select) -> np.ndarray:
    """Margins ``(x_{i,a_i} - x_{it})^T W z_i`` of W for a selection a.

    W : (..., d, d); X : (n, T, d); Z : (n, d); select : (n,) int.
    Returns (..., n, T) with ``+inf`` at the selected tokens (so ``min`` over the last
    axis is each sample's binding margin). A W solving Att-SVM(a) has all finite
    entries >= 1.
    """
    W, X, Z = _np(W), _np(X), _np(Z)
    sel = np.asarray(select, dtype=np.int64)
    n, T, _ = X.shape
    a = np.einsum("itd,...de,ie->...it", X, W, Z)
    a_sel = np.take_along_axis(a, np.broadcast_to(sel[:, None], a.shape[:-1] + (1,)), axis=-1)
    out = a_sel - a
    is_sel = np.arange(T)[None, :] == sel[:, None]
    return np.where(is_sel, np.inf, out)


#: Numerical rank with a relative threshold (batched), see :func:`attnsvm.svm.matrix_rank`.
rank = matrix_rank


def _default_solver(problem: TokenProblem, select, norm):
    from .svm import solve_svm

    return solve_svm(problem, select=select, norm=norm)


def convergence_type(
    problem: TokenProblem,
    W=None,
    *,
    softmax=None,
    norm: str = "fro",
    saturation: float = 0.99,
    tol: float = 1e-3,
    solver: Callable | None = None,
) -> str:
    """Classify a trained run as ``"global"``, ``"local"`` or ``"neither"``.

    Protocol of the transformers-as-svms spec (E4): the run is *saturated* if every
    sample's largest attention probability exceeds ``saturation``; its selection a is
    the argmax. **global**: saturated and a = opt. **local**: saturated, a != opt,
    Att-SVM(a) feasible and a locally optimal (support tolerance ``tol``).
    **neither**: otherwise.

    Parameters
    ----------
    problem : TokenProblem (cross or self attention, with Y and v)
    W : (d, d) final trained weights (or give ``softmax`` (n, T) directly)
    norm : "fro" or "nuclear" -- which SVM defines the support tokens
    solver : callable ``(problem, select, norm) -> solution`` with ``.status`` and ``.W``;
        default ``attnsvm.svm.solve_svm``.
    """
    if softmax is None:
        if W is None:
            raise ValidationError("convergence_type needs W or softmax")
        softmax = softmax_of(W, problem.X, problem.queries)
    S = _np(softmax)
    if S.shape != (problem.n, problem.T):
        raise ValidationError(f"softmax must have shape (n, T) = ({problem.n}, {problem.T}), got {S.shape}")
    if not np.all(S.max(axis=-1) > saturation):
        return "neither"
    select = S.argmax(axis=-1)
    opt = problem.optimal_tokens().index
    if np.array_equal(select, opt):
        return "global"
    sol = (solver or _default_solver)(problem, select, norm)
    if getattr(sol, "status", "optimal") != "optimal" or getattr(sol, "W", None) is None:
        return "neither"
    if not isinstance(sol, SVMSolution):  # a custom solver: judge its W directly
        marg = margins(sol.W, problem.X, problem.queries, select)
        support = np.abs(marg - 1.0) <= tol
        gamma = problem.scores()
        best = gamma[np.arange(problem.n), select][:, None]
        return "local" if bool(np.all(~support | (best > gamma))) else "neither"
    return "local" if is_locally_optimal(problem, select, norm=norm, tol=tol, solution=sol) else "neither"
