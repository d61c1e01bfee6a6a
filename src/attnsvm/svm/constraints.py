"""Builders of rank-one constraint sets: one builder per SVM formulation.

Every SVM of the theory constrains an unknown ``W (d1, d2)`` through terms
``u_k^T W w_k = <W, u_k w_k^T>``. A :class:`ConstraintSet` stores

* ``U (N, d1)``, ``V (N, d2)``: the rank-one factors, row k is constraint k;
* ``rhs (N,)``: right-hand sides (constraint ``u_k^T W w_k >= rhs_k``, or ``==``);
* ``is_equality (N,)``: which rows are equalities;
* labels naming each row: ``sample``, ``query``, ``token`` (the selected / winning
  token) and ``other`` (the token it is compared with), all int arrays of shape (N,),
  ``-1`` where a label does not apply.

Vector problems (p-SVM, v-SVM) are the case ``d2 = 1`` with ``V = 1``.
Nothing of size ``d1 * d2`` per constraint is ever built.

Padded sequences: :func:`att_constraints` and :func:`gen_constraints` take an optional
``valid (n, T) bool`` (the real tokens, e.g. a tokenizer's attention mask). A padded
token then produces no row (neither as the selected token nor as the token it is
compared with), so the rows and the solution are those of the unpadded sequences
(token indices keep their padded positions). Padded entries of X must still be finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm._validate import as_float_array, as_index_array, as_mask_array
from attnsvm.errors import ValidationError
from attnsvm.svm.reductions import RowScaling

__all__ = [
    "ConstraintSet",
    "att_constraints",
    "gen_constraints",
    "fin_constraints",
    "seq_constraints",
    "prompt_constraints",
    "v_constraints",
]


@dataclass(frozen=True)
class ConstraintSet:
    """A set of N rank-one constraints ``u_k^T W w_k >= rhs_k`` (or ``==``).

    ``ConstraintSet(U, V, rhs, ...)`` is the one validating constructor of a hand-built set: every
    array is converted (lists included) and checked (shape, real dtype, finite, one length N
    throughout) and copied read-only, so later edits of the caller's arrays never change the set;
    anything else is a :class:`~attnsvm.errors.ValidationError` naming the field. The builders
    (:func:`att_constraints`, ...) validate their own inputs and assemble the rows through an
    internal trusting path.

    Attributes
    ----------
    U : (N, d1) float64
    V : (N, d2) float64
    rhs : (N,) float64
    is_equality : (N,) bool (default: all False, every row an inequality)
    sample, query, token, other : (N,) int64 (default: all -1)
        Labels: sample i, query index k (sequence SVMs; ``-1`` otherwise), the
        selected token and the token it is compared with (``-1`` if not a token).
    kind : str
        Which formulation built the set ("att", "gen", "fin", "seq", "causal",
        "prompt", "v"; default "custom").
    shape : (n, T)
        Samples and tokens of the problem (for mapping rows back to tokens); default: the
        smallest that holds the labels, ``(N, 1)`` without labels.
    """

    U: np.ndarray
    V: np.ndarray
    rhs: np.ndarray
    is_equality: np.ndarray = None
    sample: np.ndarray = None
    query: np.ndarray = None
    token: np.ndarray = None
    other: np.ndarray = None
    kind: str = "custom"
    shape: tuple = None

    def __post_init__(self):
        for name, value in zip(_FIELDS, _validated_fields(*(getattr(self, f) for f in _FIELDS))):
            object.__setattr__(self, name, value)

    @classmethod
    def _trusted(cls, U, V, rhs, is_equality, sample, query, token, other, kind, shape) -> "ConstraintSet":
        """The set of already validated arrays, without checks or copies (the builders' internal path)."""
        obj = object.__new__(cls)
        for name, value in zip(_FIELDS, (U, V, rhs, is_equality, sample, query, token, other, kind, shape)):
            object.__setattr__(obj, name, value)
        return obj

    @property
    def N(self) -> int:
        """Number of constraints."""
        return self.U.shape[0]

    @property
    def d1(self) -> int:
        return self.U.shape[1]

    @property
    def d2(self) -> int:
        return self.V.shape[1]

    def evaluate(self, W: np.ndarray) -> np.ndarray:
        """Constraint values ``u_k^T W w_k`` for ``W (d1, d2)``: shape (N,)."""
        return np.einsum("kd,kd->k", self.U @ W, self.V)

    def gram(self) -> np.ndarray:
        """Gram matrix ``(U U^T) * (V V^T)`` of the constraint matrices, shape (N, N)."""
        return row_gram(self.U, self.V)

    def combine(self, lam: np.ndarray) -> np.ndarray:
        """``sum_k lam_k u_k w_k^T``, shape (d1, d2)."""
        return (self.U * lam[:, None]).T @ self.V

    def label(self, k: int) -> str:
        """A readable name of constraint k (used by certificates)."""
        k = int(k)
        i, q, a, b = int(self.sample[k]), int(self.query[k]), int(self.token[k]), int(self.other[k])
        rel = "==" if self.is_equality[k] else ">="
        head = f"sample {i}" + (f", query {q}" if q >= 0 else "")
        if a >= 0 and b >= 0:
            return f"{head}: token {a} vs token {b} ({rel} {self.rhs[k]:g})"
        if a >= 0:
            return f"{head}: token {a} ({rel} {self.rhs[k]:g})"
        return f"{head} ({rel} {self.rhs[k]:g})"

    def normalized(self) -> tuple["ConstraintSet", "RowScaling"]:
        """The same SVM with every row scaled to unit size: ``(cs_n, scaling)``.

        Row k becomes ``u_k 2^-a_k``, ``w_k 2^-b_k``, ``rhs_k 2^-(a_k + b_k + E)`` with
        ``2^a_k``, ``2^b_k`` the power of two just above ``max |u_k|``, ``max |w_k|`` and
        ``2^E`` that of the largest row-scaled ``|rhs|``: the rows of ``cs_n`` have
        entries below 1 and its right-hand sides at most 1, whatever the scale of the
        data (1e-200 or 1e200). Power-of-two scaling is exact in floating point. The
        solution of ``cs_n`` maps back through :class:`RowScaling`
        (:meth:`RowScaling.unit_rows`, :mod:`attnsvm.svm.reductions`).
        """
        sc = RowScaling.unit_rows(self.U, self.V, self.rhs)
        return sc.apply(self), sc

    def with_rows(self, U: np.ndarray, V: np.ndarray, rhs: np.ndarray) -> "ConstraintSet":
        """The same labelled rows with factors ``U (N, d1)``, ``V (N, d2)`` and ``rhs (N,)`` replaced
        (trusted: for the solvers' scaled copies, whose arrays they computed)."""
        return ConstraintSet._trusted(U, V, rhs, self.is_equality, self.sample, self.query, self.token, self.other,
                                      self.kind, self.shape)

    def select_rows(self, mask: np.ndarray) -> "ConstraintSet":
        """The subset of rows where ``mask`` (N,) is true."""
        out = ConstraintSet._trusted(self.U[mask], self.V[mask], self.rhs[mask], self.is_equality[mask],
                                     self.sample[mask], self.query[mask], self.token[mask], self.other[mask], self.kind,
                                     self.shape)
        return with_token_source(out, getattr(self, "_tokens", None))

    def token_differences(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(Xa, Xb)``, each ``(s, d1)``, with ``U[rows]`` bitwise equal to the float64 ``Xa - Xb``, when the set
        was built from the tokens ``X (n, T, d1)`` as differences ``X[sample, token] - X[sample, other]``
        (:func:`gen_constraints` and the other token builders, :func:`with_token_source`); else None. The
        exact differences are then the data the rows stand for (:mod:`attnsvm.svm.farkas` proves on them)."""
        X = getattr(self, "_tokens", None)
        rows = np.asarray(rows, dtype=np.int64)
        if X is None or rows.size == 0:
            return None
        i, a, b = self.sample[rows], self.token[rows], self.other[rows]
        n, T = X.shape[:2]
        if X.shape[-1] != self.d1 or np.any((i < 0) | (i >= n) | (a < 0) | (a >= T) | (b < 0) | (b >= T)):
            return None
        Xa, Xb = X[i, a], X[i, b]
        return (Xa, Xb) if np.array_equal(Xa - Xb, self.U[rows]) else None

    def with_tokens(self, X: np.ndarray) -> "ConstraintSet":
        """The same set (arrays shared) marked as built from the tokens ``X (n, T, d1)`` as differences
        ``X[sample, token] - X[sample, other]``: :meth:`token_differences` then gives the exact differences of
        the rows it confirms bitwise (an "infeasible" is proven on them, :mod:`attnsvm.svm.farkas`)."""
        out = ConstraintSet._trusted(self.U, self.V, self.rhs, self.is_equality, self.sample, self.query, self.token,
                                     self.other, self.kind, self.shape)
        return with_token_source(out, np.asarray(X, dtype=np.float64))


def with_token_source(cs: ConstraintSet, X: np.ndarray | None) -> ConstraintSet:
    """``cs`` marked as built from the tokens ``X (n, T, d1)`` (its rows differences of two of them; see
    :meth:`ConstraintSet.token_differences`, which checks every row it is asked for). Returns ``cs``."""
    if X is not None:
        object.__setattr__(cs, "_tokens", X)
    return cs


_FIELDS = ("U", "V", "rhs", "is_equality", "sample", "query", "token", "other", "kind", "shape")
_LABELS = ("sample", "query", "token", "other")


def _validated_fields(U, V, rhs, is_equality, sample, query, token, other, kind, shape) -> tuple:
    """The fields of a hand-built :class:`ConstraintSet`, converted, checked and copied read-only.

    ``U (N, d1)``, ``V (N, d2)``, ``rhs (N,)``: real, finite (float64); ``is_equality (N,)`` bool;
    labels (N,) integers >= -1 below ``shape = (n, T)``. Raises ValidationError naming the field.
    """
    U = as_float_array(U, "ConstraintSet.U", 2, "(N, d1)")
    N = U.shape[0]
    V = as_float_array(V, "ConstraintSet.V", 2, f"(N, d2) with N = {N} (the rows of U)")
    if V.shape[0] != N:
        raise ValidationError(f"ConstraintSet.V must have N = {N} rows like U, got shape {V.shape}")
    rhs = as_float_array(rhs, "ConstraintSet.rhs", 1, f"(N,) = ({N},)")
    if rhs.shape != (N,):
        raise ValidationError(f"ConstraintSet.rhs must have shape (N,) = ({N},) like the rows of U, got {rhs.shape}")
    if is_equality is None:
        eq = np.zeros(N, bool)
    else:
        if np.iscomplexobj(is_equality):
            raise ValidationError("ConstraintSet.is_equality must be a boolean mask of shape (N,), got complex values")
        eq = as_mask_array(is_equality, "ConstraintSet.is_equality", (N,), f"(N,) = ({N},)")
    labels = [_label_field(value, name, N) for name, value in zip(_LABELS, (sample, query, token, other))]
    if not isinstance(kind, str) or not kind:
        raise ValidationError(f"ConstraintSet.kind must be a non-empty string, got {kind!r}")
    shape = _shape_field(shape, labels, N)
    out = []
    for arr in (U, V, rhs, eq, *labels):
        arr = np.array(arr, copy=True)
        arr.flags.writeable = False
        out.append(arr)
    return (*out, kind, shape)


def _label_field(value, name: str, N: int) -> np.ndarray:
    """A label array (N,) of integers >= -1 (all -1 when None)."""
    if value is None:
        return np.full(N, -1, np.int64)
    arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValidationError(f"ConstraintSet.{name} must hold integer labels of shape (N,) = ({N},) (-1: none), "
                              f"got dtype {arr.dtype}")
    if arr.shape != (N,):
        raise ValidationError(f"ConstraintSet.{name} must have shape (N,) = ({N},) like the rows of U, got {arr.shape}")
    if N and (arr.min() < -1 or (arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max)):
        raise ValidationError(f"ConstraintSet.{name} must hold labels >= -1 (-1: none), got {arr.min()}")
    return arr.astype(np.int64)


def _shape_field(shape, labels, N: int) -> tuple:
    """``(n, T)`` holding every label (inferred when None: the smallest that does, ``(N, 1)`` without labels)."""
    sample, query, token, other = labels
    top_s = int(sample.max()) + 1 if N else 0
    top_t = max((int(a.max()) + 1 if N else 0) for a in (query, token, other))
    if shape is None:
        return (top_s if top_s > 0 else N, max(top_t, 1))
    ok = (isinstance(shape, (tuple, list)) and len(shape) == 2
          and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 0 for v in shape))
    if not ok:
        raise ValidationError(f"ConstraintSet.shape must be a pair (n, T) of integers >= 0, got {shape!r}")
    n, T = int(shape[0]), int(shape[1])
    if top_s > n:
        raise ValidationError(f"ConstraintSet.sample holds sample {top_s - 1}, outside shape (n, T) = ({n}, {T})")
    if top_t > T:
        raise ValidationError(f"ConstraintSet token labels (query, token, other) reach {top_t - 1}, outside "
                              f"shape (n, T) = ({n}, {T})")
    return (n, T)


def checked_set(constraints, name: str = "constraints") -> ConstraintSet:
    """``constraints`` re-verified at a public solver boundary: the same set when its arrays are float64,
    of consistent shapes and finite (one pass without temporaries), else the validating constructor's
    result (a converted copy, or a ValidationError naming the field). Catches a set whose arrays were
    changed after it was built."""
    if not isinstance(constraints, ConstraintSet):
        raise ValidationError(f"{name} must be a ConstraintSet, got {type(constraints).__name__}")
    cs = constraints
    U, V, rhs, eq = cs.U, cs.V, cs.rhs, cs.is_equality
    arrays = (U, V, rhs, eq, cs.sample, cs.query, cs.token, cs.other)
    if (all(isinstance(a, np.ndarray) for a in arrays) and U.ndim == 2 and V.ndim == 2
            and all(a.dtype == np.float64 for a in (U, V, rhs)) and eq.dtype == bool
            and all(a.dtype == np.int64 and a.shape == (U.shape[0],) for a in arrays[4:])
            and V.shape[0] == U.shape[0] and rhs.shape == eq.shape == (U.shape[0],)
            and isinstance(cs.kind, str) and isinstance(cs.shape, tuple) and len(cs.shape) == 2):
        with np.errstate(over="ignore", invalid="ignore"):
            # NaN and inf propagate through a sum; an overflow of finite values only sends the set to the full check
            if all(np.isfinite(np.sum(a)) for a in (U, V, rhs)):
                return cs
    return ConstraintSet(*(getattr(cs, f, None) for f in _FIELDS))


def row_gram(U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``<u_k w_k^T, u_l w_l^T> = (U U^T) * (V V^T)`` for ``U (..., N, d1)``, ``V (..., N, d2)``:
    ``(..., N, N)`` (one set of rows, or a stack of R sets)."""
    G = U @ U.swapaxes(-1, -2)
    G *= V @ V.swapaxes(-1, -2)
    return G


def bare_set(U, V, rhs, is_equality, kind: str) -> ConstraintSet:
    """The rows ``U (N, d1)``, ``V (N, d2)``, ``rhs``, ``is_equality (N,)`` as a ConstraintSet without
    sample, query and token labels (all -1; shape (N, 1)), as the batched solvers build them."""
    N = U.shape[0]
    return ConstraintSet._trusted(U, V, rhs, is_equality, *(np.full(N, -1),) * 4, kind, (N, 1))


def _make(U, V, rhs, eq, sample, query, token, other, kind, shape, tokens=None) -> ConstraintSet:
    as_i = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    cs = ConstraintSet._trusted(np.ascontiguousarray(U, dtype=np.float64), np.ascontiguousarray(V, dtype=np.float64),
                                np.ascontiguousarray(rhs, dtype=np.float64), np.ascontiguousarray(eq, dtype=bool),
                                as_i(sample), as_i(query), as_i(token), as_i(other), kind, tuple(shape))
    return with_token_source(cs, None if tokens is None else np.asarray(tokens, dtype=np.float64))


def _check_queries(Z, n: int, d: int, name: str = "Z") -> np.ndarray:
    Z = as_float_array(Z, name, 2, f"(n, d) = ({n}, {d})")
    if Z.shape != (n, d):
        raise ValidationError(f"{name} must have shape (n, d) = ({n}, {d}), got {Z.shape}")
    return Z


def check_valid(valid, n: int, T: int, chosen: np.ndarray, what: str) -> np.ndarray:
    """The validated real-token mask ``valid (n, T)`` bool (all True when None); the tokens
    ``chosen (n, T)`` bool must lie inside it (ValidationError naming the first that does not)."""
    if valid is None:
        return np.ones((n, T), bool)
    valid = as_mask_array(valid, "valid", (n, T), f"(n, T) = ({n}, {T})")
    bad = np.argwhere(chosen & ~valid)
    if bad.size:
        i, t = (int(v) for v in bad[0])
        raise ValidationError(f"{what} token {t} of sample {i} is padding (valid[{i}, {t}] is False)")
    return valid


def att_constraints(X, Z, select, valid=None) -> ConstraintSet:
    """Att-SVM / Local-SVM rows ``(x_{i,a_i} - x_{it})^T W z_i >= 1`` for ``t != a_i``.

    Parameters
    ----------
    X : (n, T, d) tokens
    Z : (n, d) queries
    select : (n,) int, selected token per sample
    valid : (n, T) bool, optional real tokens of padded sequences (None: all). Only valid
        tokens ``t`` get a row; every selected token must be valid.

    Returns
    -------
    ConstraintSet with ``N = n (T - 1)`` rows (``sum(valid) - n`` with ``valid``),
    ``U (N, d)``, ``V (N, d)``.
    """
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    Z = _check_queries(Z, n, d)
    sel = as_index_array(select, "select", (n,), T, f"(n,) = ({n},)")
    return att_rows(X, Z, sel, check_valid_selected(valid, sel, T))


def check_valid_selected(valid, sel: np.ndarray, T: int) -> np.ndarray:
    """The validated real-token mask ``(n, T)`` for the selection ``sel (n,)`` (all True when None)."""
    n = sel.shape[0]
    chosen = np.arange(T)[None, :] == sel[:, None]
    return check_valid(valid, n, T, chosen, "selected")


# The row builders from validated arrays (att_rows, gen_rows, fin_rows, prompt_rows): internal, shared with
# attnsvm.svm.api and attnsvm.svm.prompt, which validate once and build without a second pass.
def att_rows(X: np.ndarray, Z: np.ndarray, sel: np.ndarray, ok: np.ndarray) -> ConstraintSet:
    """The rows of :func:`att_constraints` from validated arrays (no checks, no copies of X).

    ``X (n, T, d)`` and ``Z (n, d)`` float64, ``sel (n,)`` int64 in ``[0, T)``, ``ok (n, T)``
    bool (the candidate tokens, containing the selected ones).
    """
    n, T, _ = X.shape
    others = np.arange(T)[None, :] != sel[:, None]
    ii, tt = np.nonzero(others & ok)
    U = X[ii, tt]                       # (N, d); in place below: two N x d arrays at the peak, not three
    np.subtract(X[ii, sel[ii]], U, out=U)
    V = Z[ii]
    N = ii.size
    return _make(U, V, np.ones(N), np.zeros(N, bool), ii, np.full(N, -1), sel[ii], tt, "att", (n, T), X)


def gen_constraints(X, Z, selected, valid=None) -> ConstraintSet:
    """Gen-SVM rows for selected sets ``O_i`` (bool mask ``selected (n, T)``).

    Ties inside ``O_i`` are the equalities ``(x_{i t_j} - x_{i t_{j+1}})^T W z_i = 0``
    between consecutive selected tokens (a chain: equivalent to all pairs), and every
    unselected token tau gets ``(x_{i t_1} - x_{i tau})^T W z_i >= 1`` against the
    first selected token ``t_1`` (equivalent, given the ties, to all pairs t in O_i).

    Parameters
    ----------
    X : (n, T, d)
    Z : (n, d)
    selected : (n, T) bool, at least one token per sample
    valid : (n, T) bool, optional real tokens of padded sequences (None: all). Only valid
        unselected tokens get a row; selected tokens must be valid.

    Returns
    -------
    ConstraintSet with ``U (N, d)``, ``V (N, d)``; ``N = sum(valid) - n`` (``n (T - 1)``
    without ``valid``): ``|O_i| - 1`` equalities and ``sum_t valid_it - |O_i|``
    inequalities per sample.
    """
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    Z = _check_queries(Z, n, d)
    O = check_selected_sets(selected, n, T)
    return gen_rows(X, Z, O, check_valid(valid, n, T, O, "selected"))


def check_selected_sets(selected, n: int, T: int) -> np.ndarray:
    """The validated selected sets ``O (n, T)`` bool, at least one token per sample."""
    O = as_mask_array(selected, "selected", (n, T), f"(n, T) = ({n}, {T})")
    empty = np.flatnonzero(~O.any(axis=1))
    if empty.size:
        raise ValidationError(f"selected must mark at least one token per sample; sample {int(empty[0])} has none")
    return O


def gen_rows(X: np.ndarray, Z: np.ndarray, O: np.ndarray, ok: np.ndarray) -> ConstraintSet:
    """The rows of :func:`gen_constraints` from validated arrays: ``X (n, T, d)``, ``Z (n, d)``
    float64, ``O (n, T)`` bool (non-empty sets), ``ok (n, T)`` bool (containing ``O``)."""
    n, T, _ = X.shape
    r, a, b, rhs, eq = _gen_pairs(O, ok)
    return _make(X[r, a] - X[r, b], Z[r], rhs, eq, r, np.full(r.size, -1), a, b, "gen", (n, T), X)


def _gen_pairs(O: np.ndarray, ok: np.ndarray):
    """The Gen-SVM rows of m selections, vectorized.

    ``O (m, T)`` bool: the selected set of each selection (at least one token); ``ok (m, T)``
    bool: its candidate tokens. Per selection, in this order: the ties between consecutive
    selected tokens (rhs 0, equality), then every candidate outside the set against the first
    selected token (rhs 1).

    Returns ``(r, a, b, rhs, eq)``, each (N,): the row's selection, its tokens ``a`` (selected)
    and ``b`` (the other), right-hand side and equality flag; the row is
    ``(x_a - x_b)^T W z >= rhs`` (``==`` for ties).
    """
    ri, ti = np.nonzero(O)                                 # row-major: by selection, then token
    chain = ri[1:] == ri[:-1]
    er, ea, eb = ri[:-1][chain], ti[:-1][chain], ti[1:][chain]
    ur, ub = np.nonzero(ok & ~O)
    ua = O.argmax(axis=1)[ur]                              # the first selected token
    eq = np.concatenate([np.ones(er.size, bool), np.zeros(ur.size, bool)])
    r, a, b = np.concatenate([er, ur]), np.concatenate([ea, ua]), np.concatenate([eb, ub])
    order = np.lexsort((np.concatenate([ea, ub]), ~eq, r))  # by selection, ties first, then by token
    r, a, b, eq = r[order].astype(np.int64), a[order].astype(np.int64), b[order].astype(np.int64), eq[order]
    return r, a, b, np.where(eq, 0.0, 1.0), eq


def fin_constraints(X, Z, selected, probs) -> ConstraintSet:
    """Rows of the finite component ``W_fin`` (equalities only).

    ``(x_{i t_1} - x_{i t})^T W z_i = log(s_{i t_1} / s_{i t})`` for every other
    selected token t of ``O_i`` (t_1 the first selected token; all other pairs follow).

    Parameters
    ----------
    X : (n, T, d)
    Z : (n, d)
    selected : (n, T) bool
    probs : (n, T) softmax probabilities, > 0 on the selected tokens
    """
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    Z = _check_queries(Z, n, d)
    return fin_rows(X, Z, *check_fin_inputs(selected, probs, n, T))


def check_fin_inputs(selected, probs, n: int, T: int) -> tuple[np.ndarray, np.ndarray]:
    """The validated ``(O (n, T) bool, s (n, T) float64)`` of :func:`fin_constraints` (``s > 0`` on ``O``)."""
    O = as_mask_array(selected, "selected", (n, T), f"(n, T) = ({n}, {T})")
    return O, check_probs(probs, O)


def check_probs(probs, O: np.ndarray) -> np.ndarray:
    """The validated softmax probabilities ``s (n, T)`` float64, > 0 on the selected tokens ``O (n, T)``."""
    n, T = O.shape
    s = as_float_array(probs, "probs", 2, f"(n, T) = ({n}, {T})")
    if s.shape != (n, T):
        raise ValidationError(f"probs must have shape (n, T) = ({n}, {T}), got {s.shape}")
    if np.any(s[O] <= 0):
        raise ValidationError("probs must be > 0 on every selected token")
    return s


def fin_rows(X: np.ndarray, Z: np.ndarray, O: np.ndarray, s: np.ndarray) -> ConstraintSet:
    """The rows of :func:`fin_constraints` from validated arrays: ``X (n, T, d)``, ``Z (n, d)``,
    ``O (n, T)`` bool, ``s (n, T)`` float64 (> 0 on ``O``). Rows by sample, then token."""
    n, T, _ = X.shape
    i, t = np.nonzero(O)                                    # row-major: by sample, then token
    first = O.argmax(axis=1)
    keep = t != first[i]                                    # every selected token but the first
    i, b = i[keep].astype(np.int64), t[keep].astype(np.int64)
    a = first[i].astype(np.int64)
    rhs = np.log(s[i, a] / s[i, b])
    N = i.size
    return _make(X[i, a] - X[i, b], Z[i], rhs, np.ones(N, bool), i, np.full(N, -1), a, b, "fin", (n, T), X)


def seq_constraints(X, select, causal: bool = False, valid=None, queries=None) -> ConstraintSet:
    """Sequence / causal SVM rows: every (real) token ``x_{ik}`` is a query.

    Single selections (``select (n, T)`` int): ``(x_{i, a_{ik}} - x_{it})^T W x_{ik} >= 1``
    for every candidate ``t != a_{ik}`` of query k. Selected *sets* (``select (n, T, T)``
    bool, the Gen-SVM form of self-attention): per query the rows of :func:`gen_constraints`
    (ties between the selected tokens, every other candidate at margin 1 from them).
    Candidates of query k: the valid tokens (full attention) or the valid tokens
    ``t <= k`` (causal; query 0 then has a single candidate and no row).

    Parameters
    ----------
    X : (n, T, d)
    select : (n, T) int, ``select[i, k]`` the token selected by query k of sample i; or
        (n, T, T) bool, ``select[i, k, t]`` whether query k selects token t (a non-empty set
        of candidates for every valid query; rows of padded queries are ignored)
    causal : bool
    valid : (n, T) bool, optional real tokens of padded sequences (None: all). A padded
        token is neither a query nor a candidate.
    queries : (n, T) bool, optional: the tokens that are queries (default ``valid``: every real
        token). Only these queries get rows (``select`` is ignored at the others); the candidates
        stay the valid tokens (``t <= k`` if causal). Every query must be a valid token.

    Returns
    -------
    ConstraintSet of kind "seq" or "causal" with ``U (N, d)``, ``V (N, d)`` (``V`` rows are
    the queries ``x_{ik}``); rows labelled by (sample, query, token, other).
    """
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    kind = "causal" if causal else "seq"
    ok = np.ones((n, T), bool) if valid is None else as_mask_array(valid, "valid", (n, T), f"(n, T) = ({n}, {T})")
    cand = np.broadcast_to(ok[:, None, :], (n, T, T))     # [sample, query, token]
    if causal:
        cand = cand & np.tri(T, dtype=bool)[None]
    if queries is None:
        qok = ok
    else:
        qok = as_mask_array(queries, "queries", (n, T), f"(n, T) = ({n}, {T})")
        pad = np.argwhere(qok & ~ok)
        if pad.size:
            i, k = (int(v) for v in pad[0])
            raise ValidationError(f"queries[{i}, {k}] marks token {k} of sample {i}, which is padding (valid is False)")
    qi, qk = np.nonzero(qok)                                # the real queries
    if np.asarray(select).ndim == 3:
        O = as_mask_array(select, "select", (n, T, T), f"(n, T, T) = ({n}, {T}, {T})")[qi, qk]
        C = cand[qi, qk]
        empty = np.flatnonzero(~O.any(axis=1))
        if empty.size:
            i, k = int(qi[empty[0]]), int(qk[empty[0]])
            raise ValidationError(f"select[{i}, {k}] must mark at least one token: query {k} of sample {i} "
                                  "selects nothing")
        bad = np.argwhere(O & ~C)
        if bad.size:
            j, t = (int(v) for v in bad[0])
            i, k = int(qi[j]), int(qk[j])
            why = "padding" if not ok[i, t] else f"after the query (causal: tokens 0..{k})"
            raise ValidationError(f"select[{i}, {k}, {t}] selects token {t}, which is {why}")
        r, a, b, rhs, eq = _gen_pairs(O, C)
        i, k = qi[r], qk[r]
        return _make(X[i, a] - X[i, b], X[i, k], rhs, eq, i, k, a, b, kind, (n, T), X)
    sel = as_index_array(select, "select", (n, T), T, f"(n, T) = ({n}, {T}) or (n, T, T) bool sets")
    a_q = sel[qi, qk]
    bad = np.flatnonzero(~cand[qi, qk, a_q])
    if bad.size:
        i, k, t = int(qi[bad[0]]), int(qk[bad[0]]), int(a_q[bad[0]])
        if causal and t > k:
            raise ValidationError(f"select[{i}, {k}] = {t} is not a causal candidate: query {k} can only select "
                                  f"tokens 0..{k}")
        raise ValidationError(f"select[{i}, {k}] = {t} is padding (valid[{i}, {t}] is False)")
    O = np.zeros((qi.size, T), bool)
    O[np.arange(qi.size), a_q] = True
    r, a, b, rhs, eq = _gen_pairs(O, cand[qi, qk])
    i, k = qi[r], qk[r]
    return _make(X[i, a] - X[i, b], X[i, k], rhs, eq, i, k, a, b, kind, (n, T), X)


def prompt_constraints(K, select, zero_rows=None) -> ConstraintSet:
    """p-SVM rows ``p^T (k_{i,a_i} - k_{it}) >= 1`` (``>= 0`` for samples in ``zero_rows``).

    Parameters
    ----------
    K : (n, T, d) keys ``k_it = W^T x_it`` (``X @ W``)
    select : (n,) int
    zero_rows : (n,) bool or None, samples whose rows get right-hand side 0
        (the relaxed p-SVM: samples that are not support vectors of the head)

    Returns
    -------
    ConstraintSet with ``U (N, d)`` and ``V = 1 (N, 1)``.
    """
    K = as_float_array(K, "keys", 3, "(n, T, d)")
    n, T, d = K.shape
    sel = as_index_array(select, "select", (n,), T, f"(n,) = ({n},)")
    return prompt_rows(K, sel, None if zero_rows is None else np.asarray(zero_rows, bool))


def prompt_rows(K: np.ndarray, sel: np.ndarray, zero_rows: np.ndarray | None = None) -> ConstraintSet:
    """The rows of :func:`prompt_constraints` from validated arrays: ``K (n, T, d)`` float64,
    ``sel (n,)`` int64, ``zero_rows (n,)`` bool or None."""
    n, T, d = K.shape
    ii, tt = np.nonzero(np.arange(T)[None, :] != sel[:, None])
    rhs = np.ones(ii.size)
    if zero_rows is not None:
        rhs[zero_rows[ii]] = 0.0
    N = ii.size
    return _make(K[ii, sel[ii]] - K[ii, tt], np.ones((N, 1)), rhs, np.zeros(N, bool), ii, np.full(N, -1), sel[ii], tt,
                 "prompt", (n, T))


def v_constraints(X, Y, select) -> ConstraintSet:
    """v-SVM rows ``Y_i v^T x_{i,a_i} >= 1`` (hard margin, no bias).

    Parameters
    ----------
    X : (n, T, d)
    Y : (n,) labels in {-1, +1}
    select : (n,) int

    Returns
    -------
    ConstraintSet with N = n rows, ``U (n, d)``, ``V = 1 (n, 1)``.
    """
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    Y = as_float_array(Y, "Y", 1, f"(n,) = ({n},)")
    if Y.shape != (n,):
        raise ValidationError(f"Y must have shape (n,) = ({n},), got {Y.shape}")
    if not np.all(np.abs(Y) == 1.0):
        raise ValidationError("Y must hold labels in {-1, +1} only")
    sel = as_index_array(select, "select", (n,), T, f"(n,) = ({n},)")
    return _v_rows(X, Y, sel)


def _v_rows(X: np.ndarray, Y: np.ndarray, sel: np.ndarray) -> ConstraintSet:
    """The rows of :func:`v_constraints` from validated arrays: ``X (n, T, d)``, ``Y (n,)`` float64
    in {-1, +1}, ``sel (n,)`` int64."""
    n, T, _ = X.shape
    i = np.arange(n)
    return _make(Y[:, None] * X[i, sel], np.ones((n, 1)), np.ones(n), np.zeros(n, bool), i, np.full(n, -1), sel,
                 np.full(n, -1), "v", (n, T))
