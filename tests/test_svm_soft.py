import numpy as np
import pytest

import attnsvm as a
from attnsvm.svm import seq_constraints
from attnsvm.svm.soft import solve_soft


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
@pytest.mark.parametrize("squared", [False, True])
def test_soft_margin_certificate(norm, squared):
    # d = 2: most instances cannot be separated; take the first infeasible one
    p = next(q for q in (a.random_problem(6, 8, 2, seed=s) for s in range(50)) if not a.solve_svm(q).feasible)
    s = a.solve_soft_svm(p, p.optimal_tokens().index, C=10, norm=norm, squared=squared)
    assert s.status == "optimal"
    assert s.certificate.max_violation <= 1e-8
    assert 0 <= s.certificate.duality_gap <= 1e-6 * max(1.0, s.objective)
    assert np.all(s.slack >= 0) and np.all(s.margins >= 1 - s.slack - 1e-8)


def test_soft_margin_with_large_C_is_the_hard_margin_svm():
    p = a.random_problem(4, 5, 8, seed=1)
    hard = a.solve_svm(p)
    C = 10 * float(hard.duals.max()) + 1.0   # beyond the largest hard-margin multiplier: no slack pays off
    soft = a.solve_soft_svm(p, p.optimal_tokens().index, C=C)
    assert np.allclose(soft.slack, 0, atol=1e-7)
    np.testing.assert_allclose(soft.W, hard.W, atol=1e-6 * np.abs(hard.W).max())


def test_soft_margin_without_constraints_is_zero():
    X = np.random.default_rng(0).standard_normal((2, 1, 3))
    cs = seq_constraints(X, np.zeros((2, 1), int), causal=True)  # one token per sequence: nothing competes
    assert cs.N == 0
    s = solve_soft(cs, C=10)
    assert s.status == "optimal" and s.objective == 0 and not s.W.any()
