"""Regressions found on real data."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attnsvm.svm.qp import _cholesky_delete


@given(s=st.integers(1, 7), k=st.integers(0, 6), seed=st.integers(0, 1000))
@settings(max_examples=60, deadline=None)
def test_cholesky_delete_gives_the_factor_of_the_reduced_gram(s, k, seed):
    k = k % s
    A = np.random.default_rng(seed).standard_normal((s, s + 2))
    G = A @ A.T
    L = _cholesky_delete(np.linalg.cholesky(G), k)
    reduced = np.delete(np.delete(G, k, 0), k, 1)
    assert L.shape == (s - 1, s - 1)
    assert np.allclose(np.triu(L, 1), 0) and np.all(np.diag(L) >= 0)
    np.testing.assert_allclose(L @ L.T, reduced, atol=1e-12 * max(1.0, np.abs(G).max()))


def test_gen_svm_with_nearly_dependent_ties_on_digits_returns_a_result():
    # the Goldfarb-Idnani active set once refactored a nearly dependent Gram matrix from scratch
    # and crashed ("not positive definite") on this instance; it must return a certified result
    pytest.importorskip("sklearn")
    from attnsvm import solve_gen_svm, train
    from attnsvm.real.digits import digits_task

    dt = digits_task((3, 8), 2, "onehot", "mean", max_train=100, C=100.0, seed=0)
    res = train(dt.train, param="W", steps=2000, lr=0.1, seed=0, checkpoints=[2000])
    O = res.softmax[0, -1] >= 1e-3
    sol = solve_gen_svm(dt.train, O, "fro")
    if sol.status == "infeasible":
        cs = sol.constraints
        f = sol.certificate.farkas
        assert np.all(f[~cs.is_equality] >= -1e-12)
        assert np.linalg.norm(cs.combine(f)) <= 1e-9 * max(1.0, np.abs(f).sum())
        assert float(cs.rhs @ f) == pytest.approx(1.0)
    else:
        assert sol.certificate.max_violation <= 1e-8
