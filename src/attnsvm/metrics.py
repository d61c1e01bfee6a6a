"""Metrics comparing trained attention with the SVMs of the theory (numpy, batched).

Shapes follow the package vocabulary: W (..., d, d), X (n, T, d), Z (n, d),
softmax (..., n, T), select (..., n) int, selected (..., n, T) bool. Leading axes
(runs, checkpoints) broadcast.

No NaN leaves these functions as a result: inputs must be finite (a NaN or inf raises
:class:`~attnsvm.errors.ValidationError` naming the argument); correlations are computed
from exactly rescaled objects (powers of two), so data near the float64 limits (1e-300,
1e300) gives the same values as data of order 1; the two conventions for a zero object
are documented below (correlation 0, one-minus-correlation 1).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.problem import TokenProblem
from attnsvm.svm import SVMSolution
from attnsvm.svm.analysis import is_locally_optimal, matrix_rank  # noqa: F401  (matrix_rank: served here too)


def _np(x, name: str = "input") -> np.ndarray:
    """``x`` (numpy, torch or nested lists) as a finite float64 array; ValidationError naming ``name`` otherwise."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a real numeric array, got {type(x).__name__}") from None
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"{name} must be finite (no NaN or inf)")
    return arr


def _ndim(ndim, A, B) -> int:
    if ndim is None:
        return 1 if min(A.ndim, B.ndim) == 1 else 2
    if isinstance(ndim, (bool, np.bool_)) or not isinstance(ndim, (int, np.integer)) or ndim < 1:
        raise ValidationError(f"ndim must be an integer >= 1 (trailing axes forming one object), got {ndim!r}")
    return int(ndim)


def _pair(A, B, ndim, what):
    """Validated (A, B, ndim, axes) of a pair of batched objects."""
    A, B = _np(A, "A"), _np(B, "B")
    ndim = _ndim(ndim, A, B)
    if A.ndim < ndim or B.ndim < ndim or A.shape[A.ndim - ndim:] != B.shape[B.ndim - ndim:]:
        raise ValidationError(f"{what}: trailing {ndim} axes must match, got shapes {A.shape} and {B.shape}")
    try:
        np.broadcast_shapes(A.shape[:A.ndim - ndim], B.shape[:B.ndim - ndim])
    except ValueError:
        raise ValidationError(f"{what}: leading axes must broadcast, got shapes {A.shape} and {B.shape}") from None
    return A, B, ndim, tuple(range(-ndim, 0))


def _pow2_normalized(A, axes) -> np.ndarray:
    """Each object times an exact power of two bringing its largest |entry| into [0.5, 1) (zero objects unchanged).

    Correlations are scale-invariant and power-of-two scaling is exact, so this changes no
    result of ordinary data while keeping squares of entries near 1e+-300 from overflowing or
    underflowing.
    """
    _, e = np.frexp(np.max(np.abs(A), axis=axes, keepdims=True))
    return np.ldexp(A, -e)


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
    convention: 0 where either object is exactly zero (the correlation is undefined there;
    never NaN).

    Raises
    ------
    ValidationError
        non-finite entries, trailing shapes that differ, or ``ndim`` not an integer >= 1.
    """
    A, B, ndim, axes = _pair(A, B, ndim, "correlation")
    A, B = _pow2_normalized(A, axes), _pow2_normalized(B, axes)
    inner = np.sum(A * B, axis=axes)
    na = np.sqrt(np.sum(A * A, axis=axes))
    nb = np.sqrt(np.sum(B * B, axis=axes))
    denom = na * nb
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(denom > 0, inner / np.where(denom > 0, denom, 1.0), 0.0)
    return np.clip(out, -1.0, 1.0)


def one_minus_correlation(A, B, ndim: int | None = None) -> np.ndarray:
    """``1 - correlation(A, B)``, computed as ``||a - b||^2 / 2`` of the unit objects (accurate near 0).

    Same arguments and checks as :func:`correlation`; convention: 1 where either object is
    exactly zero (``1 - 0``, never NaN).
    """
    A, B, ndim, axes = _pair(A, B, ndim, "one_minus_correlation")
    A, B = _pow2_normalized(A, axes), _pow2_normalized(B, axes)
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
    S = _np(softmax, "softmax")
    if S.ndim < 2:
        raise ValidationError(f"softmax must have shape (..., n, T), got {S.shape}")
    sel = np.asarray(select)
    if sel.dtype == bool:
        try:
            np.broadcast_shapes(sel.shape, S.shape)
        except ValueError:
            raise ValidationError(f"select (bool) must broadcast to softmax's shape {S.shape}, got {sel.shape}") from None
        mass = np.sum(np.where(sel, S, 0.0), axis=-1)
    else:
        T = S.shape[-1]
        if not np.issubdtype(sel.dtype, np.integer):
            raise ValidationError(f"select must hold integer token indices (or a bool mask), got dtype {sel.dtype}")
        if np.any((sel < 0) | (sel >= T)):
            raise ValidationError(f"select holds token indices outside [0, T={T})")
        try:
            sel = np.broadcast_to(sel.astype(np.int64), S.shape[:-1])
        except ValueError:
            raise ValidationError(f"select must broadcast to softmax's leading shape {S.shape[:-1]}, got {sel.shape}") from None
        mass = np.take_along_axis(S, sel[..., None], axis=-1)[..., 0]
    return mass.mean(axis=-1)


def read_selection(softmax, threshold: float | None = None) -> np.ndarray:
    """The tokens a trained model selects.

    softmax : (..., n, T). ``threshold=None``: argmax per sample, int (..., n);
    otherwise the set ``{t : s_t > threshold}``, bool (..., n, T) (e.g. 1e-3 for
    multi-token selection).
    """
    S = _np(softmax, "softmax")
    if S.ndim < 1 or S.shape[-1] == 0:
        raise ValidationError(f"softmax must have shape (..., n, T) with T >= 1, got {S.shape}")
    if threshold is None:
        return np.argmax(S, axis=-1)
    try:
        th = None if isinstance(threshold, (bool, np.bool_, str, bytes)) else float(threshold)
    except (TypeError, ValueError):
        th = None
    if th is None or not np.isfinite(th):
        raise ValidationError(f"threshold must be None or a finite number, got {threshold!r}")
    return S > th


def _tokens(W, X, Z):
    """Validated W (..., d, d), X (n, T, d), Z (n, d)."""
    W, X, Z = _np(W, "W"), _np(X, "X"), _np(Z, "Z")
    if X.ndim != 3:
        raise ValidationError(f"X must have shape (n, T, d), got {X.shape}")
    n, T, d = X.shape
    if Z.shape != (n, d):
        raise ValidationError(f"Z must have shape (n, d) = ({n}, {d}), got {Z.shape}")
    if W.ndim < 2 or W.shape[-2:] != (d, d):
        raise ValidationError(f"W must have shape (..., d, d) with d = {d}, got {W.shape}")
    return W, X, Z


def _logits(X, W, Z) -> np.ndarray:
    """``x_it^T W z_i``: X (n, T, d), W (..., d, d), Z (n, d) -> (..., n, T), contracted as ``X (W z)`` (BLAS;
    a three-operand einsum loops over d^2 terms per token)."""
    Wz = np.einsum("...de,ie->...id", W, Z, optimize=True)
    return np.einsum("itd,...id->...it", X, Wz, optimize=True)


def softmax_of(W, X, Z) -> np.ndarray:
    """Attention maps ``softmax(X_i W z_i)``: W (..., d, d), X (n, T, d), Z (n, d) -> (..., n, T).

    Logits beyond the float64 range (e.g. W of norm 1e300) are handled exactly: the maps are
    then computed from power-of-two rescaled logits (saturated maps, not NaN).
    """
    W, X, Z = _tokens(W, X, Z)
    with np.errstate(over="ignore", invalid="ignore"):
        a = _logits(X, W, Z)
    if np.all(np.isfinite(a)):
        a = a - a.max(axis=-1, keepdims=True)
    else:  # a = 2^k a' with a' of order 1: differences a' - max a' scaled back by ldexp (-inf, never NaN)
        _, eW = np.frexp(np.max(np.abs(W), axis=(-2, -1)))
        _, eX = np.frexp(np.max(np.abs(X)))
        _, eZ = np.frexp(np.max(np.abs(Z)))
        a = _logits(np.ldexp(X, -eX), np.ldexp(W, -eW[..., None, None]), np.ldexp(Z, -eZ))
        a = np.ldexp(a - a.max(axis=-1, keepdims=True), (eW + eX + eZ)[..., None, None])
    e = np.exp(a)
    return e / e.sum(axis=-1, keepdims=True)


def token_margins(W, X, Z, select) -> np.ndarray:
    """Margins ``(x_{i,a_i} - x_{it})^T W z_i`` of W for a selection a.

    W : (..., d, d); X : (n, T, d); Z : (n, d); select : (n,) int.
    Returns (..., n, T) with ``+inf`` at the selected tokens (so ``min`` over the last
    axis is each sample's binding margin). A W solving Att-SVM(a) has all finite
    entries >= 1.
    """
    W, X, Z = _tokens(W, X, Z)
    n, T, _ = X.shape
    sel = np.asarray(select)
    if sel.shape != (n,) or not np.issubdtype(sel.dtype, np.integer) or np.any((sel < 0) | (sel >= T)):
        raise ValidationError(f"select must be (n,) = ({n},) integer token indices in [0, T={T}), got {sel!r}")
    sel = sel.astype(np.int64)
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.einsum("itd,...de,ie->...it", X, W, Z)
        a_sel = np.take_along_axis(a, np.broadcast_to(sel[:, None], a.shape[:-1] + (1,)), axis=-1)
        out = a_sel - a
    is_sel = np.arange(T)[None, :] == sel[:, None]
    if not np.all(np.isfinite(out) | is_sel):
        raise ValidationError("margins exceed the float64 range (|x^T W z| > 1.8e308): W, X or Z is too large; "
                              "margins are linear in W, so rescale W and scale the margins back")
    return np.where(is_sel, np.inf, out)


def _default_solver(problem: TokenProblem, select, norm):
    from attnsvm.svm import solve_svm

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
    if not isinstance(problem, TokenProblem) or problem.mode == "prompt":
        raise ValidationError("problem must be a cross- or self-attention TokenProblem")
    if norm not in ("fro", "nuclear"):
        raise ValidationError(f"norm must be 'fro' or 'nuclear', got {norm!r}")
    for name, val, lo in (("saturation", saturation, 0.0), ("tol", tol, 0.0)):
        try:
            f = None if isinstance(val, (bool, np.bool_, str, bytes)) else float(val)
        except (TypeError, ValueError):
            f = None
        if f is None or not np.isfinite(f) or f < lo or (name == "saturation" and f >= 1.0):
            raise ValidationError(f"{name} must be a finite number in {'[0, 1)' if name == 'saturation' else '[0, inf)'}, "
                                  f"got {val!r}")
    if softmax is None:
        if W is None:
            raise ValidationError("convergence_type needs W or softmax")
        softmax = softmax_of(W, problem.X, problem.queries)
    S = _np(softmax, "softmax")
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
        marg = token_margins(sol.W, problem.X, problem.queries, select)
        support = np.abs(marg - 1.0) <= tol
        gamma = problem.scores()
        best = gamma[np.arange(problem.n), select][:, None]
        return "local" if bool(np.all(~support | (best > gamma))) else "neither"
    return "local" if is_locally_optimal(problem, select, norm=norm, tol=tol, solution=sol) else "neither"
