"""Token analysis: scores, optimal tokens with tie detection, nonlinear-head scores.

Vocabulary (shapes): ``X (n, T, d)`` tokens, ``Y (n,)`` labels, ``v (d,)`` head,
``gamma (n, T)`` scores ``gamma[i, t] = Y_i v^T x_it``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnsvm._validate import as_float_array, check_number
from attnsvm.errors import ValidationError


def _is_problem(obj) -> bool:
    """A :class:`attnsvm.problem.TokenProblem` (or anything with its X, Y, v): tokens sit below problems."""
    return not isinstance(obj, np.ndarray) and all(hasattr(obj, k) for k in ("X", "Y", "v"))


def _resolve(problem_or_X, Y, v):
    if _is_problem(problem_or_X):
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
    with np.errstate(over="ignore", invalid="ignore"):
        gamma = Y[:, None] * (X @ v)
    if not np.all(np.isfinite(gamma)):
        raise ValidationError(
            f"the scores Y_i v^T x_it overflow float64 (largest |x| = {float(np.abs(X).max()):.3g}, "
            f"largest |v| = {float(np.abs(v).max()):.3g}): rescale X or v (optimal_tokens compares the "
            "scores in a scaled space and still works)")
    return gamma


#: rows whose largest |score| is below this are recomputed in a scaled space (subnormal range)
_TINY_SCORE = float(np.ldexp(1.0, -960))


def _scaled_rows(X: np.ndarray, Y: np.ndarray, v: np.ndarray, rows: np.ndarray):
    """Scores of ``rows`` computed with power-of-two scalings (exact, no overflow or underflow).

    Returns ``gamma_s (k, T)`` and the integer exponents ``e (k,)`` with
    ``gamma[rows] = gamma_s * 2**e`` in exact arithmetic.
    """
    Xr = X[rows]
    _, ex = np.frexp(np.abs(Xr).max(axis=(1, 2)))
    _, ev = np.frexp(np.abs(v).max())
    Xs = np.ldexp(Xr, -ex[:, None, None])
    vs = np.ldexp(v, -ev)
    return Y[rows, None] * (Xs @ vs), ex.astype(np.int64) + int(ev)


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
        (``inf`` if every token is tied, or if the gap exceeds the float64 range).
        Positive whenever the maximum is unique.
    tol : float
        The tolerance used: t is tied when ``gamma_max - gamma_t <= tol * max(1, |gamma_max|)``
        (an absolute tolerance for scores below 1 in magnitude).

    Scores that overflow float64 (or underflow to the subnormal range) are compared in a
    scaled space ``gamma_i / 2**e_i`` (power-of-two scaling, exact), with the same rule.
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
    tol = check_number(tol, "tol", low=0.0)
    if _is_problem(problem_or_gamma):
        X, Y, v = _resolve(problem_or_gamma, None, None)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            gamma = Y[:, None] * (X @ v)
        # rows whose scores overflow, or underflow towards the subnormal range, are compared
        # in a scaled space: gamma_i = gamma_s_i * 2**e_i (power-of-two scaling is exact)
        big = np.abs(gamma).max(axis=1)
        redo = np.flatnonzero(~np.isfinite(big) | ((big < _TINY_SCORE) & (np.abs(X).max(axis=(1, 2)) > 0)
                                                   & (np.abs(v).max() > 0)))
    else:
        gamma = as_float_array(problem_or_gamma, "gamma", 2, "(n, T)")
        if gamma.shape[1] < 1:
            raise ValidationError("gamma must have at least one token: shape (n, T) with T >= 1")
        redo = np.zeros(0, np.int64)
    unit = np.ones(gamma.shape[0])          # 2**-e_i: the documented floor 1 in scaled units
    expo = np.zeros(gamma.shape[0], np.int64)
    if redo.size:
        gamma = gamma.copy()
        gamma[redo], expo[redo] = _scaled_rows(X, Y, v, redo)
        with np.errstate(over="ignore"):
            unit[redo] = np.ldexp(1.0, -expo[redo])
    best = gamma.max(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        slack = tol * np.maximum(unit, np.abs(best)) if tol > 0 else np.zeros_like(best)   # 0 * inf is not 0
    tied = (best[:, None] - gamma) <= slack[:, None]
    index = np.argmax(gamma, axis=1)
    rest = np.where(tied, -np.inf, gamma).max(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        gap = np.ldexp(best - rest, expo)   # an overflowing gap is +inf (IEEE rounding)
    gap = np.where(np.isinf(rest), np.inf, gap)
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
    if not callable(h):
        raise ValidationError(f"h must be a callable mapping an array (N, d) to (N,), got {type(h).__name__}")
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            out = np.asarray(h(X.reshape(n * T, d)), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"h must map an array (N, d) to (N,) real values: {exc}") from None
    if out.shape not in ((n * T,), (n * T, 1)):
        raise ValidationError(f"h must map an array (N, d) to (N,), got output shape {out.shape} for N = {n * T}")
    if not np.all(np.isfinite(out)):
        raise ValidationError("h returned NaN or inf for some tokens (overflow?): rescale X or the head")
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
    lam = check_number(lam, "lam", low=0.0)

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
    try:
        y = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError("y must be a real array of shape (..., T)") from None
    if y.ndim < 1 or y.shape[-1] < 1:
        raise ValidationError("y must have shape (..., T) with T >= 1")
    if not np.all(np.isfinite(y)):
        raise ValidationError("y must be finite")
    # the projection is invariant to shifting a row: subtract the row maximum; entries more
    # than 1 below it are never in the support (theta >= max - 1), so clipping them to -2
    # changes nothing and keeps every sum finite whatever the magnitudes
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.maximum(y - y.max(axis=-1, keepdims=True), -2.0)
    u = -np.sort(-y, axis=-1)
    css = np.cumsum(u, axis=-1) - 1.0
    k = np.arange(1, y.shape[-1] + 1)
    cond = u - css / k > 0
    rho = cond.shape[-1] - 1 - np.argmax(cond[..., ::-1], axis=-1)
    theta = np.take_along_axis(css, rho[..., None], axis=-1) / (rho[..., None] + 1)
    return np.maximum(y - theta, 0.0)
