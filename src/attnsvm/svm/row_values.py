"""Streaming margins of rank-one constraint sets: all N values in O(q d1 d2 + N d) per W.

The rows of a :class:`~attnsvm.svm.constraints.ConstraintSet` share few distinct
queries ``w`` (one per sample, or per (sample, query) pair of a sequence SVM). With
the distinct queries ``Q (q, d2)`` and ``group (N,)`` (``w_k = Q[group[k]]``) the
margins are ``u_k^T W w_k = u_k . (W Q^T)[:, group[k]]``: ``W Q^T`` is formed once
(``O(q d1 d2)``) and each row costs ``O(d1)``. Rows are processed in chunks whose
temporaries stay within a fixed byte budget, so nothing of size ``N x d`` beyond
the constraint set itself is allocated.

numpy only (the svm layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm.svm.constraints import ConstraintSet

__all__ = ["QueryGroups", "query_groups", "chunk_rows", "constraint_values", "row_norms", "row_scales"]

#: bytes of temporaries per chunk (the chunk of U and the gathered queries)
CHUNK_BYTES = 32 * 2**20


def chunk_rows(N: int, width: int, budget: int = CHUNK_BYTES) -> int:
    """Rows per chunk so that a ``(rows, width)`` float64 temporary stays within ``budget`` bytes."""
    return int(max(256, min(max(N, 1), budget // (8 * max(width, 1)))))


@dataclass(frozen=True)
class QueryGroups:
    """Rows grouped by a shared right factor: ``V[k] == Q[group[k]]`` exactly.

    Attributes
    ----------
    Q : (q, d2) distinct right factors (queries)
    group : (N,) int64, the query of each row
    block : c when the rows are q consecutive blocks of c rows each (``group == arange(N) // c``), as
        the builders emit them for equal-size samples; 0 otherwise. Margins then need no gather
        (:func:`constraint_values` reads ``U`` as ``(q, c, d1)``).
    """

    Q: np.ndarray
    group: np.ndarray
    block: int = 0

    @property
    def q(self) -> int:
        return self.Q.shape[0]


def query_groups(cs: ConstraintSet) -> QueryGroups | None:
    """Group the rows of ``cs`` by their labels (sample, query) and verify ``V`` is shared.

    Rows with equal ``(sample, query)`` labels have equal ``w`` for every builder of
    :mod:`~attnsvm.svm.constraints` (``w = z_i`` or ``x_ik``); this is checked exactly,
    chunk by chunk (``O(N d2)``). Returns None when a set does not have that structure
    (hand-built rows, unlabelled rows, or fewer than two rows per distinct query on
    average), and callers then use the rows' own ``w``.
    """
    N = cs.N
    if N == 0 or np.any(cs.sample < 0):
        return None
    qmax = int(cs.query.max()) + 2
    key = cs.sample * qmax + (cs.query + 1)
    if np.all(key[1:] >= key[:-1]):            # builders emit rows sorted by sample (and query)
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        group = np.cumsum(np.r_[False, key[1:] != key[:-1]]).astype(np.int64)
    else:
        _, starts, group = np.unique(key, return_index=True, return_inverse=True)
        group = np.asarray(group, np.int64).ravel()
    if starts.size * 2 > N:
        return None
    Q = cs.V[starts]
    step = chunk_rows(N, cs.d2)
    for lo in range(0, N, step):
        hi = min(N, lo + step)
        if not np.array_equal(cs.V[lo:hi], Q[group[lo:hi]]):
            return None
    c = N // starts.size
    block = c if c * starts.size == N and np.array_equal(starts, np.arange(0, N, c)) else 0
    return QueryGroups(Q, group, block)


def constraint_values(cs: ConstraintSet, W: np.ndarray, groups: QueryGroups | None = None,
                      rows: np.ndarray | None = None) -> np.ndarray:
    """``u_k^T W w_k`` for every row (or for ``rows``): shape (N,) (or ``(len(rows),)``).

    Parameters
    ----------
    cs : ConstraintSet with ``U (N, d1)``, ``V (N, d2)``
    W : (d1, d2)
    groups : from :func:`query_groups`; None computes ``(U W) . V`` row by row
        (``O(N d1 d2)``, still chunked)
    rows : optional (m,) int row indices
    """
    N = cs.N if rows is None else int(rows.size)
    out = np.empty(N)
    if N == 0:
        return out
    if groups is not None:
        WQ = groups.Q @ W.T                       # (q, d1): W w for each distinct query
        if rows is None and groups.block and cs.U.flags.c_contiguous:   # q blocks of c rows: no gather
            c = groups.block
            U3 = cs.U.reshape(groups.q, c, cs.d1)
            step = max(1, chunk_rows(N, cs.d1) // c)
            for lo in range(0, groups.q, step):
                hi = min(groups.q, lo + step)
                out[lo * c:hi * c] = np.einsum("qcd,qd->qc", U3[lo:hi], WQ[lo:hi]).ravel()
            return out
        width = 2 * cs.d1
    else:
        width = cs.d1 + cs.d2
    step = chunk_rows(N, width)
    for lo in range(0, N, step):
        hi = min(N, lo + step)
        idx = slice(lo, hi) if rows is None else rows[lo:hi]
        Uc = cs.U[idx]
        if groups is not None:
            out[lo:hi] = np.einsum("kd,kd->k", Uc, WQ[groups.group[idx]])
        else:
            out[lo:hi] = np.einsum("kd,kd->k", Uc @ W, cs.V[idx])
    return out


def row_norms(cs: ConstraintSet, groups: QueryGroups | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(||u_k||, ||w_k||)`` for every row: two arrays of shape (N,) (computed in chunks)."""
    N = cs.N
    un, wn = np.empty(N), np.empty(N)
    if N == 0:
        return un, wn
    qn = np.linalg.norm(groups.Q, axis=1) if groups is not None else None
    step = chunk_rows(N, max(cs.d1, cs.d2))
    for lo in range(0, N, step):
        hi = min(N, lo + step)
        un[lo:hi] = np.sqrt(np.einsum("kd,kd->k", cs.U[lo:hi], cs.U[lo:hi]))
        wn[lo:hi] = qn[groups.group[lo:hi]] if groups is not None else np.linalg.norm(cs.V[lo:hi], axis=1)
    return un, wn


def row_scales(cs: ConstraintSet, groups: QueryGroups | None = None) -> np.ndarray:
    """``||u_k w_k^T||_F = ||u_k|| ||w_k||`` for every row: shape (N,)."""
    un, wn = row_norms(cs, groups)
    return un * wn
