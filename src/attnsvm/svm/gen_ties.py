"""Direct contradictions of the Gen-SVM's rows: infeasibility seen without a solver (a public module).

The Gen-SVM of selected sets ``O_i`` (:func:`attnsvm.svm.constraints.gen_constraints`) asks, for every sample i
with query ``z_i``, that its selected tokens tie and beat its other valid tokens by a margin:
``(x_a - x_b)^T W z_i = 0`` for a, b in O_i and ``>= 1`` for a in O_i, b not. When two samples share a query state
and two key states (bitwise equal vectors), they ask the same number ``x_a^T W z - x_b^T W z`` to obey both of their
relations: a tie in one and a margin in the other, or margins of opposite sign, cannot both hold, whatever W. Such
a pair is a two-row certificate of infeasibility (a Farkas certificate with two rows, or one row where a sample's
selected and unselected tokens have the same state). This arises where the states carry no context (a transformer's
layer-0 token, position and segment embeddings: the same token at the same position has the same state in every
sentence) while the selections depend on the rest of the sentence.

:func:`gen_contradictions` finds every such pair. Finding none does not prove feasibility: longer combinations of
rows can still contradict (the solver's Farkas certificate decides, :mod:`attnsvm.svm.farkas`).
"""

from __future__ import annotations

import numpy as np

from attnsvm._validate import as_float_array, as_mask_array
from attnsvm.errors import ValidationError
from attnsvm.svm.constraints import check_selected_sets

__all__ = ["gen_contradictions"]

#: the relation a sample asks between a key pair (a, b), a < b by state id: b - a below, tie, a - b above
TIE, A_ABOVE, B_ABOVE = 0, 1, -1


def _state_ids(rows: np.ndarray) -> np.ndarray:
    """``(N,)`` int: equal ids exactly for bitwise-equal rows of ``rows (N, d)`` (-0.0 and 0.0 equal)."""
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(rows + 0.0, axis=0, return_inverse=True)[1].reshape(-1)


def gen_contradictions(X, Z, selected, valid=None) -> np.ndarray:
    """Pairs of samples whose Gen-SVM rows contradict each other directly.

    Parameters
    ----------
    X : (n, T, d) the tokens (key states)
    Z : (n, d) the queries
    selected : (n, T) bool, the selected sets O_i (at least one token per sample, inside ``valid``)
    valid : (n, T) bool, optional: the real tokens (None: all)

    Returns
    -------
    (k, 6) int array, one row per query state and key-state pair whose relations conflict:
    ``(i, a_i, b_i, j, a_j, b_j)``, sample i's tokens a_i, b_i and sample j's tokens a_j, b_j have the same two
    states and ``z_i == z_j``, and sample i asks them one relation (tie, or a margin one way) and sample j another,
    or the two states are one and a sample asks a margin between them (a selected and an unselected token with the
    same state: its row is ``0 >= 1``). One witness per conflicting (query state, key pair). Empty: no direct
    contradiction (which does not prove the Gen-SVM feasible).
    """
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    Z = as_float_array(Z, "Z", 2, f"(n, d) = ({n}, {d})")
    if Z.shape != (n, d):
        raise ValidationError(f"Z must have shape (n, d) = ({n}, {d}), got {Z.shape}")
    O = check_selected_sets(selected, n, T)
    V = np.ones((n, T), dtype=bool) if valid is None else as_mask_array(valid, "valid", (n, T), f"(n, T) = ({n}, {T})")
    if (O & ~V).any():
        raise ValidationError("selected must lie inside valid (a selected token is padding)")
    key = np.full((n, T), -1, dtype=np.int64)
    key[V] = _state_ids(X[V])
    query = _state_ids(Z)
    # every relation a sample asks: (sample, token a, token b) with a selected and b a valid token after it in the
    # pair order; selected-selected: a tie, selected-unselected: a margin
    i, ta, tb = np.nonzero(O[:, :, None] & V[:, None, :] & ~(O[:, None, :] & (np.arange(T)[:, None] >= np.arange(T))))
    if i.size == 0:
        return np.zeros((0, 6), dtype=np.int64)
    rel = np.where(O[i, tb], TIE, A_ABOVE)
    ka, kb = key[i, ta], key[i, tb]
    # orient each pair by state id (a < b), flipping the margin's sign where the tokens swap
    swap = ka > kb
    ka, kb = np.where(swap, kb, ka), np.where(swap, ka, kb)
    ta, tb = np.where(swap, tb, ta), np.where(swap, ta, tb)
    rel = np.where(swap & (rel != TIE), B_ABOVE, rel)
    groups = np.stack([query[i], ka, kb], axis=1)
    _, g = np.unique(groups, axis=0, return_inverse=True)
    g = g.reshape(-1)
    order = np.lexsort((rel, g))  # by group, then relation: each group's smallest and largest relation at its ends
    first = np.ones(len(order), dtype=bool)
    first[1:] = g[order][1:] != g[order][:-1]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = first[1:]
    lo, hi = order[first], order[last]
    # two relations that differ, or a margin between two tokens of one state (0 >= 1 on its own)
    bad = (rel[lo] != rel[hi]) | ((ka[hi] == kb[hi]) & (rel[hi] != TIE))
    w = np.stack([i[lo], ta[lo], tb[lo], i[hi], ta[hi], tb[hi]], axis=1)[bad].astype(np.int64)
    return w[np.lexsort((w[:, 2], w[:, 1], w[:, 0]))]
