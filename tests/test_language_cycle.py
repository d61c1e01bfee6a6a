"""The cycle language meets Theorem 3.15's assumption by construction; the random Markov language does not."""

from __future__ import annotations

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.language import cycle_language, make_lm_data, markov_language
from attnsvm.svm import lm_constraints, solve
from attnsvm.svm.language import optimal_prefix_tokens, prefix_scores, score_ties


def brute_ties(data, loss="logistic"):
    """score_ties by loops: spread and gap of the non-optimal scores of every prefix."""
    g = prefix_scores(data, loss)
    sel = optimal_prefix_tokens(g)
    m, n = data.tokens.shape
    spread, gap = np.zeros((m, n - 1)), np.full((m, n - 1), np.inf)
    for l in range(m):
        for k in range(n - 1):
            o = data.tokens[l, sel[l, k]]
            other = [g[l, k, t] for t in range(k + 1) if data.tokens[l, t] != o]
            if other:
                spread[l, k], gap[l, k] = max(other) - min(other), g[l, k, sel[l, k]] - max(other)
    return spread, gap


def test_embeddings_have_the_cycle_gram_matrix_and_sequences_follow_the_cycle():
    lang = cycle_language(7, 20, rho=0.3, seed=4)
    succ = lang.trans1.argmax(1)
    assert np.allclose(lang.trans1.sum(1), 1) and np.all(lang.trans1.max(1) == 1)
    orbit = [0]
    for _ in range(6):
        orbit.append(int(succ[orbit[-1]]))
    assert sorted(orbit) == list(range(7)) and succ[orbit[-1]] == 0         # one cycle through every type
    P = lang.trans1.T
    assert np.allclose(lang.E @ lang.E.T, np.eye(7) + 0.3 * (P + P.T), atol=1e-12)
    toks = lang.sample(30, 6, seed=1)
    assert np.array_equal(toks[:, 1:], succ[toks[:, :-1]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cycle_language_meets_the_assumption_and_its_hard_svm_is_feasible(seed):
    V, n = 9, 8                                                            # n = V - 1: the longest that works
    data = make_lm_data(cycle_language(V, 30, seed=seed), 12, n, seed=seed)
    spread, gap = score_ties(data)
    s2, g2 = brute_ties(data)
    assert np.allclose(spread, s2, atol=1e-14) and np.array_equal(gap, g2)
    assert spread.max() <= 1e-12 and gap.min() > 0.1
    sel = optimal_prefix_tokens(prefix_scores(data))
    assert np.array_equal(sel[:, : n - 1], np.broadcast_to(np.arange(n - 1), (12, n - 1)))   # the query is optimal
    hard = solve(lm_constraints(data), method="dense")
    assert hard.feasible and hard.certified


def test_the_assumption_fails_where_the_construction_does_not_hold():
    # the random Markov language: non-optimal scores spread far beyond a tie
    data = make_lm_data(markov_language(8, 30, seed=0), 12, 6, seed=0)
    spread, _ = score_ties(data)
    s2, _ = brute_ties(data)
    assert np.allclose(spread, s2, atol=1e-14) and spread.max() > 1e-3
    # the cycle language past n = V - 1: a prefix holds its target type, the ties break
    long = make_lm_data(cycle_language(5, 12, seed=0), 6, 7, seed=0)
    spread, gap = score_ties(long)
    assert spread.max() > 1e-3 or gap.min() <= 0


@pytest.mark.parametrize("kw", [dict(V=2), dict(V=8, d=7), dict(rho=0.5), dict(rho=0.0)])
def test_cycle_language_rejects_sizes_that_break_the_construction(kw):
    args = {"V": 6, "d": 10, "rho": 0.4, **kw}
    with pytest.raises(ValidationError):
        cycle_language(args["V"], args["d"], rho=args["rho"])
