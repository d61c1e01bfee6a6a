"""Token analysis: scores, optimal tokens with tie detection, nonlinear-head scores.

Vocabulary (shapes): ``X (n, T, d)`` tokens, ``Y (n,)`` labels, ``v (d,)`` head,
``gamma (n, T)`` scores ``gamma[i, t] = Y_i v^T x_it``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ._validate import as_float_array
from .errors import ValidationError
from .problem import TokenProblem


def _resolve(problem_or_X, Y, v):
    if isinstance(problem_or_X, TokenProblem):
        p = problem_or_X
        if p.Y is None or p.v is None:
            missing = " and ".join(k for k in ("Y", "v") if getattr(p, k) is None)
            raise ValidationError(f"token scores need labels Y and a head v; the problem has no {missing}")
        return p.X, p.Y, p.v
    X = as_float_array(problem_or_X, "X", 3, "(n, T, d)")
    n, _, d = X.shape
    if Y is None or v is None:
        raise ValidationError("scores(X, Y, v) needs Y (n,) and v (d,)")
    Y = as_float_array(Y, "Y", 1, f"(n,) = ({n},)")
    v = as_float_array(v, "v", 1, f"(d,) = ({d},)")
    if Y.shape != (n,):
        raise ValidationError(f"Y must have shape (n,) = ({n},), got {Y.shape}")
    if v.shape != (d,):
        raise ValidationError(f"v must have shape (d,) = ({d},), got {v.shape}")
    return X, Y, v


def scores(problem_or_X, Y=None, v=None) -> np.ndarray:
    """Token scores ``gamma[i, t] = Y_i v^T x_it``.

    Parameters
    ----------
    problem_or_X : TokenProblem or array_like (n, T, d)
    Y : array_like (n,), needed when X is given
    v : array_like (d,), needed when X is given

    Returns
    -------
    gamma : ndarray (n, T), float64
    """
    X, Y, v = _resolve(problem_or_X, Y, v)
    return Y[:, None] * (X @ v)


@dataclass(frozen=True)
class OptimalTokens:
    """The optimal token of each sample and how clear-cut it is.

    Attributes
    ----------
    index : (n,) int
        ``argmax_t gamma[i, t]`` (the first maximizer when tied).
    tied : (n, T) bool
        Tokens whose score is within the tolerance of the maximum (includes ``index``).
    has_tie : (n,) bool
        Whether more than one token is (numerically) optimal.
    gap : (n,) float
        Best score minus the best score among the non-tied tokens
        (``inf`` if every token is tied). Positive whenever the maximum is unique.
    tol : float
        The tolerance used: t is tied when ``gamma_max - gamma_t <= tol * max(1, |gamma_max|)``.
    """

    index: np.ndarray
    tied: np.ndarray
    has_tie: np.ndarray
    gap: np.ndarray
    tol: float

    @property
    def any_tie(self) -> bool:
        return bool(self.has_tie.any())

    @property
    def tied_samples(self) -> np.ndarray:
        """Indices of the samples with a tie, shape (k,)."""
        return np.flatnonzero(self.has_tie)


def optimal_tokens(problem_or_gamma, tol: float = 1e-9) -> OptimalTokens:
    """Optimal token per sample, with ties reported.

    Parameters
    ----------
    problem_or_gamma : TokenProblem or array_like (n, T)
        A problem with labels and head, or precomputed scores.
    tol : float, >= 0
        Relative tolerance for ties (see :class:`OptimalTokens`).
    """
    if not (isinstance(tol, (int, float, np.floating)) and np.isfinite(tol) and tol >= 0):
        raise ValidationError(f"tol must be a finite number >= 0, got {tol!r}")
    if isinstance(problem_or_gamma, TokenProblem):
        gamma = scores(problem_or_gamma)
    else:
        gamma = as_float_array(problem_or_gamma, "gamma", 2, "(n, T)")
        if gamma.shape[1] < 1:
            raise ValidationError("gamma must have at least one token: shape (n, T) with T >= 1")
    best = gamma.max(axis=1)
    slack = tol * np.maximum(1.0, np.abs(best))
    tied = (best[:, None] - gamma) <= slack[:, None]
    index = np.argmax(gamma, axis=1)
    rest = np.where(tied, -np.inf, gamma).max(axis=1)
    gap = best - rest
    return OptimalTokens(index=index, tied=tied, has_tie=tied.sum(axis=1) > 1, gap=gap, tol=float(tol))


def nonlinear_scores(X, Y, h: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Scores for a nonlinear head: ``Y_i h(x_it)`` (all attention on token t).

    Parameters
    ----------
    X : array_like (n, T, d)
    Y : array_like (n,)
    h : callable mapping an array (N, d) to (N,) (vectorized over rows)

    Returns
    -------
    (n, T) float64
    """
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    Y = as_float_array(Y, "Y", 1, f"(n,) = ({n},)")
    if Y.shape != (n,):
        raise ValidationError(f"Y must have shape (n,) = ({n},), got {Y.shape}")
    out = np.asarray(h(X.reshape(n * T, d)), dtype=np.float64)
    if out.shape not in ((n * T,), (n * T, 1)):
        raise ValidationError(f"h must map an array (N, d) to (N,), got output shape {out.shape} for N = {n * T}")
    return Y[:, None] * out.reshape(n, T)


def relu_head(V) -> Callable[[np.ndarray], np.ndarray]:
    """The ReLU head ``h(a) = 1^T ReLU(V^T a)`` of the multi-token experiment; V: (d, k)."""
    V = as_float_array(V, "V", 2, "(d, k)")

    def h(A):
        return np.maximum(A @ V, 0.0).sum(axis=-1)

    return h


def lambda_head(v, lam: float) -> Callable[[np.ndarray], np.ndarray]:
    """The lambda head ``h(a) = v^T a - lam ||a||^2``; v: (d,)."""
    v = as_float_array(v, "v", 1, "(d,)")
    if not (np.isfinite(lam) and lam >= 0):
        raise ValidationError(f"lam must be a finite number >= 0, got {lam!r}")

    def h(A):
        return A @ v - lam * np.einsum("...d,...d->...", A, A)

    return h


def simplex_projection(y) -> np.ndarray:
    """Euclidean projection of each row onto the probability simplex (sparsemax).

    Parameters
    ----------
    y : array_like (..., T)

    Returns
    -------
    (..., T) float64, rows non-negative and summing to 1.

    With orthonormal tokens the lambda head gives ``h(X^T s) = gamma^T s - lam ||s||^2``,
    whose maximizer over the simplex is ``simplex_projection(gamma / (2 lam))``.
    """
    y = np.asarray(y, dtype=np.float64)
    if y.ndim < 1 or y.shape[-1] < 1:
        raise ValidationError("y must have shape (..., T) with T >= 1")
    if not np.all(np.isfinite(y)):
        raise ValidationError("y must be finite")
    u = -np.sort(-y, axis=-1)
    css = np.cumsum(u, axis=-1) - 1.0
    k = np.arange(1, y.shape[-1] + 1)
    cond = u - css / k > 0
    rho = cond.shape[-1] - 1 - np.argmax(cond[..., ::-1], axis=-1)
    theta = np.take_along_axis(css, rho[..., None], axis=-1) / (rho[..., None] + 1)
    return np.maximum(y - theta, 0.0)
