"""gen_contradictions: pairs of Gen-SVM rows that no W satisfies together (same query and key states, conflicting
relations). Checked against a brute-force reference over all pairs of relations, and against the solver: a
problem with a direct contradiction is proven infeasible."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.svm.api import solve
from attnsvm.svm.constraints import gen_constraints
from attnsvm.svm.gen_ties import gen_contradictions


def _relations(X, Z, O, V):
    """Brute force: {(query state, key state a, key state b): set of relations}, states as bytes, a <= b."""
    out = {}
    n, T, _ = X.shape
    for i in range(n):
        for a, b in itertools.permutations(range(T), 2):
            if not (O[i, a] and V[i, b]) or (O[i, b] and b <= a):
                continue
            rel = 0 if O[i, b] else 1
            ka, kb = (X[i, a] + 0.0).tobytes(), (X[i, b] + 0.0).tobytes()
            if ka > kb:
                ka, kb, rel = kb, ka, -rel
            out.setdefault(((Z[i] + 0.0).tobytes(), ka, kb), set()).add(rel)
    return out


def _brute_count(X, Z, O, V):
    return sum(len(r) > 1 or (k[1] == k[2] and r != {0}) for k, r in _relations(X, Z, O, V).items())


def _duplicated_problem(rng, n=12, T=5, d=3, vocab=4, queries=2):
    """Tokens and queries drawn from small vocabularies (many bitwise-equal states), random selections."""
    words = rng.standard_normal((vocab, d))
    X = words[rng.integers(0, vocab, (n, T))]
    Z = rng.standard_normal((queries, d))[rng.integers(0, queries, n)]
    V = np.ones((n, T), dtype=bool)
    V[:, -1] = rng.random(n) < 0.7
    O = (rng.random((n, T)) < 0.35) & V
    O[np.arange(n), 0] |= ~O.any(axis=1)
    return X, Z, O, V


def test_a_tie_against_a_margin_is_found_and_the_solver_proves_it():
    X = np.array([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]] * 2)
    Z = np.array([[1.0, 2.0]] * 2)
    O = np.array([[True, True, False], [True, False, False]])  # sample 0 ties tokens 0, 1; sample 1 separates them
    w = gen_contradictions(X, Z, O)
    assert len(w) == 1 and {w[0, 0], w[0, 3]} == {0, 1}  # the two samples, each naming tokens 0 and 1
    assert {w[0, 1], w[0, 2]} == {w[0, 4], w[0, 5]} == {0, 1}
    assert solve(gen_constraints(X, Z, O), "fro", formulation="gen").status == "infeasible"
    # another query in sample 1: no direct contradiction, and the problem is feasible
    Z2 = np.array([[1.0, 2.0], [2.0, -1.0]])
    assert gen_contradictions(X, Z2, O).shape == (0, 6)
    assert solve(gen_constraints(X, Z2, O), "fro", formulation="gen").status == "optimal"


def test_opposite_margins_and_a_state_on_both_sides():
    X = np.array([[[1.0, 0.0], [0.0, 1.0]]] * 2)
    Z = np.array([[1.0, 1.0]] * 2)
    O = np.array([[True, False], [False, True]])  # token 0 above token 1, then token 1 above token 0
    assert len(gen_contradictions(X, Z, O)) == 1
    # one sample whose selected and unselected tokens share a state: 0 >= 1
    X1 = np.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    w = gen_contradictions(X1, Z[:1], np.array([[True, False, False]]))
    assert len(w) == 1 and w[0, 0] == w[0, 3] == 0
    assert solve(gen_constraints(X1, Z[:1], np.array([[True, False, False]])), "fro",
                 formulation="gen").status == "infeasible"


@pytest.mark.parametrize("seed", range(8))
def test_matches_the_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    X, Z, O, V = _duplicated_problem(rng)
    w = gen_contradictions(X, Z, O, valid=V)
    assert len(w) == _brute_count(X, Z, O, V)
    rels = _relations(X, Z, O, V)
    for i, ai, bi, j, aj, bj in w:  # every witness: the same states and query, two relations that conflict
        assert (Z[i] == Z[j]).all()
        assert {X[i, ai].tobytes(), X[i, bi].tobytes()} == {X[j, aj].tobytes(), X[j, bj].tobytes()}
        assert O[i, ai] or O[i, bi]
        assert O[j, aj] or O[j, bj]
        a, b = sorted([(X[i, ai] + 0.0).tobytes(), (X[i, bi] + 0.0).tobytes()])
        asked = rels[((Z[i] + 0.0).tobytes(), a, b)]
        assert len(asked) > 1 or (a == b and asked != {0})


@pytest.mark.parametrize("seed", range(6))
def test_a_direct_contradiction_means_the_solver_proves_infeasibility(seed):
    rng = np.random.default_rng(100 + seed)
    X, Z, O, V = _duplicated_problem(rng, n=8, T=4, vocab=5)
    assert len(gen_contradictions(X, Z, O, valid=V))  # these small vocabularies always have one
    assert solve(gen_constraints(X, Z, O, valid=V), "fro", formulation="gen").status == "infeasible"


def test_distinct_states_have_none():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((20, 6, 4))
    Z = rng.standard_normal((20, 4))
    O = rng.random((20, 6)) < 0.3
    O[:, 0] = True
    assert gen_contradictions(X, Z, O).shape == (0, 6)


def test_bad_input_is_named():
    X = np.zeros((2, 3, 2))
    with pytest.raises(ValidationError, match="Z"):
        gen_contradictions(X, np.zeros((3, 2)), np.ones((2, 3), bool))
    with pytest.raises(ValidationError, match="selected"):
        gen_contradictions(X, np.zeros((2, 2)), np.zeros((2, 3), bool))
    with pytest.raises(ValidationError, match="inside valid"):
        gen_contradictions(X, np.zeros((2, 2)), np.ones((2, 3), bool), valid=np.eye(2, 3, dtype=bool))
