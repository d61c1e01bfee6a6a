"""The token-selection problem: tokens, queries, labels and a linear head.

A :class:`TokenProblem` holds the data of the papers' one-layer attention model
``f(X_i) = h(X_i^T softmax(X_i W z_i))``:

========  ===========  ==========================================================
name      shape        meaning
========  ===========  ==========================================================
X         (n, T, d)    tokens; sample i has T tokens of dimension d
Z         (n, d)       queries for cross-attention (``mode == "cross"``)
query     int          self-attention: z_i = X[i, query_index] (``mode == "self"``)
Y         (n,)         labels in {-1, +1} (optional)
v         (d,)         linear prediction head (optional)
W         (d, d)       fixed key-query weights of a prompt problem (optional)
========  ===========  ==========================================================

With neither ``Z`` nor ``query_index`` the problem is a *prompt* problem
(``mode == "prompt"``): the query is a trainable prompt ``p`` shared by all samples
and the attention logits are ``X_i W p`` with the fixed ``W`` (identity if absent).

Everything is stored as float64. Files are ``.npz`` archives read with
``allow_pickle=False``: loading never executes code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from attnsvm._validate import as_float_array
from attnsvm.errors import ProblemFileError, ValidationError
from attnsvm.npzfile import input_file, read_npz, write_npz

FILE_FORMAT = "attnsvm.TokenProblem"
FILE_VERSION = 1


class TokenProblem:
    """A token-selection problem (validated, float64, immutable).

    The problem keeps its own read-only float64 copies of the arrays it is given: the
    caller's arrays are left as they were (still writable), and changing them (or a view
    of them) later does not change the problem.

    Parameters
    ----------
    X : array_like, shape (n, T, d)
        Tokens. ``n >= 1`` samples, ``T >= 2`` tokens each.
    Z : array_like, shape (n, d), optional
        Cross-attention queries, one per sample.
    query_index : int, optional
        Self-attention: the query of sample i is its token ``X[i, query_index]``
        (negative values count from the end). Mutually exclusive with ``Z``.
    Y : array_like, shape (n,), optional
        Labels, each exactly -1 or +1.
    v : array_like, shape (d,), optional
        Linear prediction head.
    W : array_like, shape (d, d), optional
        Fixed key-query matrix of a prompt problem (keys are ``X_i W``).
    name : str
        Free-form label kept in files and shown by ``attnsvm info``.

    Raises
    ------
    ValueError
        (:class:`attnsvm.errors.ValidationError`) naming the offending argument
        and the expected shape.
    """

    def __init__(self, X, Z=None, *, query_index=None, Y=None, v=None, W=None, name: str = ""):
        X = as_float_array(X, "X", 3, "(n, T, d)")
        n, T, d = X.shape
        if n < 1:
            raise ValidationError("X must hold at least one sample: expected shape (n, T, d) with n >= 1")
        if T < 2:
            raise ValidationError("X must hold at least two tokens per sample: expected shape (n, T, d) with T >= 2, "
                                  f"got T = {T}")
        if d < 1:
            raise ValidationError("X must have token dimension d >= 1: expected shape (n, T, d)")
        if Z is not None and query_index is not None:
            raise ValidationError("give either Z (cross-attention) or query_index (self-attention), not both")
        if Z is not None:
            Z = as_float_array(Z, "Z", 2, f"(n, d) = ({n}, {d})")
            if Z.shape != (n, d):
                raise ValidationError(f"Z must have shape (n, d) = ({n}, {d}), got {Z.shape}")
        if query_index is not None:
            if isinstance(query_index, (bool, np.bool_)) or not isinstance(query_index, (int, np.integer)):
                raise ValidationError(f"query_index must be an integer token index in [-{T}, {T}), got {query_index!r}")
            query_index = int(query_index)
            if not -T <= query_index < T:
                raise ValidationError(f"query_index must lie in [-{T}, {T}) for T = {T}, got {query_index}")
            query_index %= T
        if Y is not None:
            Y = as_float_array(Y, "Y", 1, f"(n,) = ({n},)")
            if Y.shape != (n,):
                raise ValidationError(f"Y must have shape (n,) = ({n},), got {Y.shape}")
            if not np.all(np.abs(Y) == 1.0):
                raise ValidationError("Y must hold labels in {-1, +1} only")
        if v is not None:
            v = as_float_array(v, "v", 1, f"(d,) = ({d},)")
            if v.shape != (d,):
                raise ValidationError(f"v must have shape (d,) = ({d},), got {v.shape}")
        if W is not None:
            W = as_float_array(W, "W", 2, f"(d, d) = ({d}, {d})")
            if W.shape != (d, d):
                raise ValidationError(f"W must have shape (d, d) = ({d}, {d}), got {W.shape}")
        if not isinstance(name, str):
            raise ValidationError(f"name must be a string, got {type(name).__name__}")
        # own read-only copies: the caller's arrays (and any view of them) stay writable and
        # can change afterwards without changing the problem
        X, Z, Y, v, W = (None if arr is None else _frozen_copy(arr) for arr in (X, Z, Y, v, W))
        self.X, self.Z, self.query_index, self.Y, self.v, self.W, self.name = X, Z, query_index, Y, v, W, name

    # ------------------------------------------------------------------ shapes
    @property
    def n(self) -> int:
        """Number of samples."""
        return self.X.shape[0]

    @property
    def T(self) -> int:
        """Tokens per sample."""
        return self.X.shape[1]

    @property
    def d(self) -> int:
        """Token dimension."""
        return self.X.shape[2]

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(n, T, d)``."""
        return self.X.shape

    @property
    def mode(self) -> str:
        """``"cross"`` (queries Z), ``"self"`` (query_index) or ``"prompt"`` (trainable p)."""
        if self.Z is not None:
            return "cross"
        if self.query_index is not None:
            return "self"
        return "prompt"

    @property
    def queries(self) -> np.ndarray:
        """The query of each sample, shape (n, d). Not defined for prompt problems."""
        if self.Z is not None:
            return self.Z
        if self.query_index is not None:
            return self.X[:, self.query_index]
        raise ValidationError("a prompt problem has no fixed queries: its query is the trainable prompt p")

    @property
    def keys(self) -> np.ndarray:
        """Keys ``X_i W`` of a prompt problem, shape (n, T, d) (W = identity if unset)."""
        return self.X if self.W is None else self.X @ self.W

    @property
    def overparameterized(self) -> bool:
        """Whether ``d >= max(T - 1, n)``: every selection is then separable (generic data)."""
        return self.d >= max(self.T - 1, self.n)

    # ------------------------------------------------------------- analysis
    def scores(self) -> np.ndarray:
        """Token scores ``gamma[i, t] = Y_i v^T x_it``, shape (n, T)."""
        from attnsvm.tokens import scores

        return scores(self)

    def optimal_tokens(self, tol: float = 1e-9):
        """Optimal tokens with tie detection, see :func:`attnsvm.tokens.optimal_tokens`."""
        from attnsvm.tokens import optimal_tokens

        return optimal_tokens(self, tol=tol)

    # --------------------------------------------------------------- helpers
    def replace(self, **changes) -> "TokenProblem":
        """A copy with some fields replaced (validated again)."""
        fields = dict(X=self.X, Z=self.Z, query_index=self.query_index, Y=self.Y, v=self.v, W=self.W, name=self.name)
        unknown = set(changes) - set(fields)
        if unknown:
            raise ValidationError(f"unknown TokenProblem field(s): {', '.join(sorted(unknown))}")
        fields.update(changes)
        X = fields.pop("X")
        return TokenProblem(X, **fields)

    def __repr__(self) -> str:
        parts = [f"n={self.n}", f"T={self.T}", f"d={self.d}", f"mode={self.mode!r}"]
        if self.mode == "self":
            parts.append(f"query_index={self.query_index}")
        parts.append(f"labels={'yes' if self.Y is not None else 'no'}")
        parts.append(f"head={'yes' if self.v is not None else 'no'}")
        if self.name:
            parts.append(f"name={self.name!r}")
        return f"TokenProblem({', '.join(parts)})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, TokenProblem):
            return NotImplemented

        def same(a, b):
            return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))

        return (
            same(self.X, other.X) and same(self.Z, other.Z) and self.query_index == other.query_index
            and same(self.Y, other.Y) and same(self.v, other.v) and same(self.W, other.W) and self.name == other.name
        )

    __hash__ = None  # mutable numpy payload: not hashable

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike) -> None:
        """Write the problem to a ``.npz`` file (no pickled objects)."""
        arrays = {
            "format": np.array(FILE_FORMAT),
            "version": np.array(FILE_VERSION, dtype=np.int64),
            "X": self.X,
            "name": np.array(self.name),
        }
        for key in ("Z", "Y", "v", "W"):
            value = getattr(self, key)
            if value is not None:
                arrays[key] = value
        if self.query_index is not None:
            arrays["query_index"] = np.array(self.query_index, dtype=np.int64)
        write_npz(path, arrays, "problem file")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TokenProblem":
        """Read a problem written by :meth:`save`.

        Raises :class:`attnsvm.errors.ProblemFileError` (a ``ValueError``) if the file
        is missing, not an ``.npz`` archive, truncated, holds pickled objects, or
        does not describe a valid problem. Never unpickles anything.
        """
        path = input_file(path)
        data = _read_npz(path)
        fmt = data.get("format")
        if fmt is None or fmt.shape != () or str(fmt) != FILE_FORMAT:
            raise ProblemFileError(f"{path!r} is not an attnsvm problem file (missing format tag {FILE_FORMAT!r})")
        version = data.get("version")
        if version is None or version.shape != () or not np.issubdtype(version.dtype, np.integer) or int(version) > FILE_VERSION:
            raise ProblemFileError(f"{path!r} has an unsupported problem file version")
        known = {"format", "version", "X", "Z", "Y", "v", "W", "query_index", "name"}
        extra = set(data) - known
        if extra:
            raise ProblemFileError(f"{path!r} holds unexpected entries: {', '.join(sorted(extra))}")
        if "X" not in data:
            raise ProblemFileError(f"{path!r} has no token array X")
        qi = data.get("query_index")
        if qi is not None:
            if qi.shape != () or not np.issubdtype(qi.dtype, np.integer):
                raise ProblemFileError(f"{path!r}: query_index must be a scalar integer")
            qi = int(qi)
        name = data.get("name")
        name = "" if name is None else str(name)
        try:
            return cls(data["X"], data.get("Z"), query_index=qi, Y=data.get("Y"), v=data.get("v"), W=data.get("W"), name=name)
        except ValidationError as exc:
            raise ProblemFileError(f"{path!r} does not hold a valid problem: {exc}") from None

    # -------------------------------------------------------------- batching
    @staticmethod
    def stack(problems: Sequence["TokenProblem"]) -> "ProblemBatch":
        """Batch problems of equal shape and mode for training and sweeps.

        Returns a :class:`ProblemBatch` whose arrays carry a leading runs axis R.
        """
        return ProblemBatch.from_problems(problems)


@dataclass(frozen=True)
class ProblemBatch:
    """R problems of equal shape stacked along a leading runs axis.

    Attributes
    ----------
    X : (R, n, T, d)
    queries : (R, n, d) or None (prompt problems)
    Y : (R, n) or None
    v : (R, d) or None
    W : (R, d, d) or None (prompt problems with a fixed W)
    mode : str
    problems : tuple of the original :class:`TokenProblem`
    """

    X: np.ndarray
    queries: np.ndarray | None
    Y: np.ndarray | None
    v: np.ndarray | None
    W: np.ndarray | None
    mode: str
    problems: tuple

    @property
    def runs(self) -> int:
        return self.X.shape[0]

    def __len__(self) -> int:
        return self.runs

    @classmethod
    def from_problems(cls, problems) -> "ProblemBatch":
        if isinstance(problems, TokenProblem):
            problems = [problems]
        problems = tuple(problems)
        if not problems:
            raise ValidationError("problems must be a non-empty list of TokenProblem")
        for k, p in enumerate(problems):
            if not isinstance(p, TokenProblem):
                raise ValidationError(f"problems[{k}] is a {type(p).__name__}, expected TokenProblem")
        first = problems[0]
        for k, p in enumerate(problems[1:], start=1):
            if p.shape != first.shape:
                raise ValidationError(f"problems must share (n, T, d): problems[0] has {first.shape}, "
                                      f"problems[{k}] has {p.shape}")
            if p.mode != first.mode:
                raise ValidationError(f"problems must share the attention mode: problems[0] is {first.mode!r}, "
                                      f"problems[{k}] is {p.mode!r}")
        for attr in ("Y", "v", "W"):
            have = [getattr(p, attr) is not None for p in problems]
            if any(have) and not all(have):
                raise ValidationError(f"either every problem or none must define {attr}")

        def stacked(attr):
            if getattr(first, attr) is None:
                return None
            return np.stack([getattr(p, attr) for p in problems])

        queries = None if first.mode == "prompt" else np.stack([p.queries for p in problems])
        return cls(np.stack([p.X for p in problems]), queries, stacked("Y"), stacked("v"), stacked("W"), first.mode, problems)


def _frozen_copy(arr: np.ndarray) -> np.ndarray:
    """A private C-contiguous copy of ``arr``, marked read-only (never a view of the caller's data)."""
    out = np.array(arr, dtype=np.float64, order="C", copy=True)
    out.setflags(write=False)
    return out


def _read_npz(path: str) -> dict:
    """Every array of a problem file (see :func:`read_npz`); 2 x the declared size must fit (the
    arrays and the problem's own float64 copies)."""
    return read_npz(path, factor=2.0, first=("format", "version"), check_first=lambda d: _check_tag(path, d))


def _check_tag(path: str, data: dict) -> None:
    fmt = data.get("format")
    if fmt is None or fmt.shape != () or str(fmt) != FILE_FORMAT:
        raise ProblemFileError(f"{path!r} is not an attnsvm problem file (missing format tag {FILE_FORMAT!r})")
