"""The nuclear SVM in spectral subspaces (attnsvm.svm.subspace): restriction, full-space certificate, growth."""

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.svm.constraints import ConstraintSet
from attnsvm.svm.nuclear import solve_nuclear
from attnsvm.svm.subspace import restrict, solve_nuclear_colgen, solve_nuclear_subspace


def _low_rank_set(seed=0, N=70, d=10, r=2):
    """Rows of a planted rank-r bilinear score: u_k^T W* w_k >= 1 with margins spread above 1 (feasible)."""
    rng = np.random.default_rng(seed)
    Wstar = rng.standard_normal((d, r)) @ rng.standard_normal((r, d))
    U, V = rng.standard_normal((N, d)), rng.standard_normal((N, d))
    m = np.einsum("kd,kd->k", U @ Wstar, V)
    U[m < 0] *= -1                       # every row scored positive by W*
    return ConstraintSet(U, V, np.ones(N))


def _ortho(rng, d, k):
    return np.linalg.qr(rng.standard_normal((d, k)))[0]


def test_restricted_margins_are_the_full_margins():
    cs = _low_rank_set()
    rng = np.random.default_rng(1)
    P, Q = _ortho(rng, 10, 4), _ortho(rng, 10, 3)
    M = rng.standard_normal((4, 3))
    sub = restrict(cs, P, Q)
    assert sub.U.shape == (cs.N, 4) and sub.V.shape == (cs.N, 3)
    np.testing.assert_allclose(sub.evaluate(M), cs.evaluate(P @ M @ Q.T), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(sub.rhs, cs.rhs)


def test_full_subspace_gives_the_full_optimum():
    cs = _low_rank_set()
    ref = solve_nuclear(cs)
    assert ref.status == "optimal"
    sol = solve_nuclear_subspace(cs, np.eye(10), np.eye(10))
    assert sol.status == "optimal"
    assert abs(sol.norm_value - ref.norm_value) <= 1e-7 * ref.norm_value
    assert sol.duals.shape == (cs.N,) and sol.W.shape == (10, 10)


def test_small_subspace_is_not_called_optimal():
    """A subspace missing the optimum's directions: the restricted optimum is feasible but worse, and the full
    certificate (not the restricted one, which passes) must say so."""
    cs = _low_rank_set()
    ref = solve_nuclear(cs)
    rng = np.random.default_rng(2)
    sol = solve_nuclear_subspace(cs, _ortho(rng, 10, 6), _ortho(rng, 10, 6))
    assert sol is not None
    assert sol.info["restricted"]["status"] == "optimal"
    assert sol.norm_value > ref.norm_value * (1 + 1e-4)
    assert sol.status == "optimal_inaccurate"
    assert sol.certificate.duality_gap > 1e-4
    assert np.all(sol.margins >= cs.rhs * (1 - 1e-9))   # feasible for the full problem all the same


def test_infeasible_subspace_returns_none():
    cs = _low_rank_set()
    e = np.zeros((10, 1))
    e[0] = 1.0
    # one direction each: W = c e e^T scores u_k0 w_k0 c, of both signs over the rows: no c satisfies all
    assert solve_nuclear_subspace(cs, e, e) is None


@pytest.mark.parametrize("seed", [0, 3])
def test_colgen_reaches_the_certified_optimum(seed):
    cs = _low_rank_set(seed)
    ref = solve_nuclear(cs)
    sol = solve_nuclear_colgen(cs, k0=2, add=2, max_rounds=20)
    assert sol.status == "optimal"
    assert abs(sol.norm_value - ref.norm_value) <= 1e-7 * ref.norm_value
    assert sol.info["rounds"] >= 2                         # k0 = 2 is not enough: the growth was needed
    assert sol.info["gaps"][-1] <= 1e-6 and all(g is None or g > 1e-6 for g in sol.info["gaps"][:-1])


def test_colgen_stopped_early_is_inaccurate():
    cs = _low_rank_set()
    sol = solve_nuclear_colgen(cs, k0=1, add=1, max_rounds=1)
    assert sol.status == "optimal_inaccurate"
    assert sol.info["rounds"] == 1


def test_colgen_infeasible_rows():
    U = np.array([[1.0, 0.0], [1.0, 0.0]])
    V = np.array([[1.0, 0.0], [-1.0, 0.0]])
    cs = ConstraintSet(U, V, np.ones(2))
    assert solve_nuclear_colgen(cs).status == "infeasible"


def test_validation():
    cs = _low_rank_set()
    with pytest.raises(ValidationError, match="P must"):
        restrict(cs, np.ones((10, 2)), np.eye(10))
    with pytest.raises(ValidationError, match="orthonormal"):
        restrict(cs, np.eye(10) * (1 + 1e-6), np.eye(10))
    with pytest.raises(ValidationError, match="Q must"):
        restrict(cs, np.eye(10), np.eye(9))
    for bad in (0, 1.5, True):
        with pytest.raises(ValidationError, match="k0"):
            solve_nuclear_colgen(cs, k0=bad)
    with pytest.raises(ValidationError, match="add"):
        solve_nuclear_colgen(cs, add=0)
