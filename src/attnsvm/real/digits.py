"""Handwritten digits as patch tokens: a small vision-transformer-style token problem.

scikit-learn ships 1797 grey images of 8x8 pixels (values 0..16) with the package,
so nothing is downloaded. :func:`patch_tokens` cuts each image into non-overlapping
``p x p`` patches (``p`` divides 8); :func:`digits_task` turns a binary task
("digit a vs digit b") into train and test :class:`~attnsvm.problem.TokenProblem`.

Choices (all configurable):

* **Tokens.** ``x_it = [pixels of patch t / 16 (p*p values in [0, 1]),
  pos_scale * e(t)]`` where the positional code ``e(t)`` is ``"onehot"`` (T values),
  ``"sinusoidal"`` (2-D sine/cosine of the patch row and column at ``n_freq``
  frequencies, ``4 n_freq`` values) or ``"none"``. Without a positional code two
  patches with equal pixels are the same token, and blank patches tie.
  ``T = (8 / p)^2`` and ``d = p^2 + len(e)``.
* **Query ([CLS]-style, nothing learned).** ``"mean"``: ``z_i = mean_t x_it``, the
  uniform-attention summary of the image (what a [CLS] token holds before any
  attention is learned); it varies with the sample, so W is not forced to rank one.
  ``"fixed"``: one constant unit vector ``z = 1 / sqrt(d)`` for every sample (then
  only ``W z`` matters and every SVM solution has rank one).
* **Head.** ``v`` is a logistic regression (no intercept, L2 penalty ``1 / C``)
  fitted on the training split to the model's output at ``W = 0``, i.e. on the
  mean token ``mean_t x_it``, so ``v^T x_it`` is the evidence of patch t for the
  label +1 (digit a). With a positional code the mean token holds a constant
  part that acts as the intercept. ``head_norm`` rescales ``v`` (``None`` keeps the
  fitted scale).
* **Labels.** ``Y = +1`` for digit a, ``-1`` for digit b; a stratified split seeded by
  ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.problem import TokenProblem
from attnsvm.real.errors import require

POSITIONAL = ("onehot", "sinusoidal", "none")
QUERIES = ("mean", "fixed")


def load_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits.

    Returns
    -------
    images : (1797, 8, 8) float64, pixel values 0..16
    target : (1797,) int, the digit 0..9
    """
    datasets = require("sklearn.datasets", "the digits task")
    data = datasets.load_digits()
    return np.asarray(data.images, dtype=np.float64), np.asarray(data.target, dtype=np.int64)


def _check_patch(patch) -> int:
    if isinstance(patch, (bool, np.bool_)) or not isinstance(patch, (int, np.integer)) or patch not in (1, 2, 4, 8):
        raise ValidationError(f"patch must be a patch size dividing 8 (1, 2, 4 or 8), got {patch!r}")
    if patch == 8:
        raise ValidationError("patch = 8 gives a single token per image: attention needs T >= 2, use 1, 2 or 4")
    return int(patch)


def positional_codes(grid: int, kind: str = "onehot", n_freq: int = 2) -> np.ndarray:
    """Positional code of each patch of a ``grid x grid`` layout (row-major order).

    Parameters
    ----------
    grid : patches per side (T = grid^2)
    kind : "onehot" (T values), "sinusoidal" (4 n_freq values) or "none" (0 values)
    n_freq : frequencies of the sinusoidal code, ``omega_k = pi * 2^k / grid``

    Returns
    -------
    codes : (T, P) float64
    """
    T = grid * grid
    if kind == "onehot":
        return np.eye(T)
    if kind == "none":
        return np.zeros((T, 0))
    if kind == "sinusoidal":
        if not isinstance(n_freq, (int, np.integer)) or n_freq < 1:
            raise ValidationError(f"n_freq must be an integer >= 1, got {n_freq!r}")
        rows, cols = np.divmod(np.arange(T), grid)
        omega = np.pi * 2.0 ** np.arange(n_freq) / grid
        parts = []
        for coord in (rows, cols):
            arg = (coord[:, None] + 0.5) * omega[None, :]
            parts += [np.sin(arg), np.cos(arg)]
        return np.concatenate(parts, axis=1)
    raise ValidationError(f"positional must be one of {POSITIONAL}, got {kind!r}")


def patch_tokens(images, patch: int = 2, positional: str = "onehot", pos_scale: float = 1.0,
                 n_freq: int = 2) -> np.ndarray:
    """Cut 8x8 images into patch tokens with a positional code.

    Parameters
    ----------
    images : array_like (n, 8, 8), pixel values 0..16
    patch : patch side p (1, 2 or 4)
    positional, pos_scale, n_freq : see :func:`positional_codes`; the code is multiplied
        by ``pos_scale``

    Returns
    -------
    X : (n, T, d) float64 with ``T = (8/p)^2``, ``d = p^2 + P``; token t covers rows
        ``(t // (8/p)) * p ...`` and columns ``(t % (8/p)) * p ...`` of the image.
    """
    p = _check_patch(patch)
    imgs = np.asarray(images, dtype=np.float64)
    if imgs.ndim != 3 or imgs.shape[1:] != (8, 8):
        raise ValidationError(f"images must have shape (n, 8, 8), got {imgs.shape}")
    n, g = imgs.shape[0], 8 // p
    pix = imgs.reshape(n, g, p, g, p).transpose(0, 1, 3, 2, 4).reshape(n, g * g, p * p) / 16.0
    codes = float(pos_scale) * positional_codes(g, positional, n_freq)
    return np.concatenate([pix, np.broadcast_to(codes, (n,) + codes.shape)], axis=2)


def patch_box(t: int, patch: int) -> tuple[int, int]:
    """Top-left pixel ``(row, col)`` of token t for patch side ``patch``."""
    g = 8 // patch
    r, c = divmod(int(t), g)
    return r * patch, c * patch


@dataclass(frozen=True)
class DigitsTask:
    """Train and test problems of a binary digits task.

    Attributes
    ----------
    train, test : TokenProblem
        with X (n, T, d), Z (n, d), Y (n,), v (d,)
    images_train, images_test : (n, 8, 8) raw pixels (for drawing)
    digits : (a, b), label +1 is digit a
    patch : patch side p; ``grid = 8 // p`` patches per side
    positional, query : the choices made (see the module docstring)
    head_train_accuracy, head_test_accuracy : accuracy of the head alone at W = 0
        (uniform attention, ``sign(v^T mean_t x_it)``)
    """

    train: TokenProblem
    test: TokenProblem
    images_train: np.ndarray
    images_test: np.ndarray
    digits: tuple
    patch: int
    positional: str
    query: str
    head_train_accuracy: float
    head_test_accuracy: float

    @property
    def grid(self) -> int:
        return 8 // self.patch


def _queries(X: np.ndarray, query: str) -> np.ndarray:
    if query == "mean":
        return X.mean(axis=1)
    if query == "fixed":
        n, _, d = X.shape
        return np.full((n, d), 1.0 / np.sqrt(d))
    raise ValidationError(f"query must be one of {QUERIES}, got {query!r}")


def fit_head(X, Y, C: float = 1.0, seed: int = 0) -> np.ndarray:
    """Logistic-regression head on the mean token (the model at W = 0).

    Parameters
    ----------
    X : (n, T, d) tokens, Y : (n,) labels in {-1, +1}
    C : inverse L2 penalty of scikit-learn's ``LogisticRegression``

    Returns
    -------
    v : (d,) float64
    """
    lm = require("sklearn.linear_model", "the logistic-regression head")
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if len(np.unique(Y)) < 2:
        raise ValidationError("fitting a head needs both labels in the training split")
    clf = lm.LogisticRegression(C=float(C), fit_intercept=False, max_iter=5000, tol=1e-10, random_state=seed)
    clf.fit(X.mean(axis=1), Y)
    return np.asarray(clf.coef_[0], dtype=np.float64)


def digits_task(digits=(3, 8), patch: int = 2, positional: str = "onehot", query: str = "mean", *,
                train_size: int | float = 0.5, max_train: int | None = None, pos_scale: float = 1.0,
                n_freq: int = 2, C: float = 1.0, head_norm: float | None = None, seed: int = 0) -> DigitsTask:
    """Binary digits task as token problems (see the module docstring for the choices).

    Parameters
    ----------
    digits : pair of distinct digits (a, b); Y = +1 for a, -1 for b
    patch : patch side p (1, 2 or 4)
    positional : "onehot" | "sinusoidal" | "none"
    query : "mean" | "fixed"
    train_size : fraction (0 < f < 1) or number of images in the training split
    max_train : keep at most this many training images (after the split; stratified)
    pos_scale, n_freq : positional code scale and sinusoidal frequencies
    C : inverse regularization of the logistic head
    head_norm : rescale v to this norm (None: keep the fitted scale)
    seed : split seed

    Returns
    -------
    DigitsTask
    """
    ms = require("sklearn.model_selection", "the digits task")
    try:
        a, b = (int(x) for x in digits)
    except (TypeError, ValueError):
        raise ValidationError(f"digits must be a pair of digits (a, b), got {digits!r}") from None
    if a == b or not (0 <= a <= 9 and 0 <= b <= 9):
        raise ValidationError(f"digits must be two distinct digits in 0..9, got {digits!r}")
    if query not in QUERIES:
        raise ValidationError(f"query must be one of {QUERIES}, got {query!r}")
    images, target = load_images()
    keep = (target == a) | (target == b)
    images, target = images[keep], target[keep]
    Y = np.where(target == a, 1.0, -1.0)
    idx = np.arange(Y.size)
    try:
        tr, te = ms.train_test_split(idx, train_size=train_size, stratify=Y, random_state=seed)
    except ValueError as exc:
        raise ValidationError(f"cannot split the digits task with train_size={train_size!r}: {exc}") from None
    if max_train is not None and max_train < tr.size:
        if max_train < 2:
            raise ValidationError(f"max_train must be >= 2, got {max_train}")
        tr, _ = ms.train_test_split(tr, train_size=int(max_train), stratify=Y[tr], random_state=seed)
    tr, te = np.sort(tr), np.sort(te)
    X = patch_tokens(images, patch, positional, pos_scale, n_freq)
    v = fit_head(X[tr], Y[tr], C=C, seed=seed)
    if head_norm is not None:
        v = v * (float(head_norm) / np.linalg.norm(v))
    acc = lambda ids: float(np.mean(np.sign(X[ids].mean(axis=1) @ v) == Y[ids]))  # noqa: E731
    tag = f"digits {a} vs {b}, patch {patch}, {positional}, query {query}"
    train = TokenProblem(X[tr], _queries(X[tr], query), Y=Y[tr], v=v, name=f"{tag} (train)")
    test = TokenProblem(X[te], _queries(X[te], query), Y=Y[te], v=v, name=f"{tag} (test)")
    return DigitsTask(train, test, images[tr], images[te], (a, b), int(patch), positional, query, acc(tr), acc(te))
