"""Metrics: correlation, selection, margins, rank, convergence type."""

from types import SimpleNamespace

import cvxpy as cp
import numpy as np
from hypothesis import given, settings, strategies as st

from attnsvm import generators as G
from attnsvm.metrics import (
    convergence_type, correlation, is_locally_optimal, margins, one_minus_correlation, rank, read_selection,
    selected_mass, softmax_of,
)
from attnsvm.train import train


def _svm(problem, select, norm="fro"):
    X, Z = problem.X, problem.queries
    n, T, d = X.shape
    Wv = cp.Variable((d, d))
    cons = [(X[i, select[i]] - X[i, t]) @ Wv @ Z[i] >= 1 for i in range(n) for t in range(T) if t != select[i]]
    pr = cp.Problem(cp.Minimize(cp.norm(Wv, "fro") if norm == "fro" else cp.normNuc(Wv)), cons)
    pr.solve(solver=cp.CLARABEL)
    ok = pr.status == "optimal"
    return SimpleNamespace(W=Wv.value if ok else None, status="optimal" if ok else "infeasible")


def test_correlation_batched_and_edge_cases():
    g = np.random.default_rng(0)
    A = g.standard_normal((3, 4, 5, 5))
    B = g.standard_normal((5, 5))
    c = correlation(A, B)
    assert c.shape == (3, 4)
    ref = np.sum(A[1, 2] * B) / (np.linalg.norm(A[1, 2]) * np.linalg.norm(B))
    assert np.isclose(c[1, 2], ref, atol=1e-15)
    assert correlation(np.zeros((5, 5)), B) == 0.0
    assert np.isclose(correlation(2 * B, B), 1.0)
    assert np.isclose(correlation(-B, B), -1.0)
    v = g.standard_normal((3, 7, 4))
    assert correlation(v, v[0, 0], ndim=1).shape == (3, 7)
    tiny = B + 1e-9 * g.standard_normal((5, 5))
    assert 0 < one_minus_correlation(tiny, B) < 1e-15


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_one_minus_correlation_consistent(seed):
    g = np.random.default_rng(seed)
    A, B = g.standard_normal((2, 3, 3))
    assert np.isclose(one_minus_correlation(A, B), 1 - correlation(A, B), atol=1e-12)


def test_selection_mass_and_margins():
    p = G.tf_visualization1()
    opt = p.optimal_tokens().index
    sol = _svm(p, opt)
    m = margins(sol.W, p.X, p.Z, opt)
    assert m.shape == (2, 3) and np.all(np.isinf(m[np.arange(2), opt]))
    assert abs(np.min(m) - 1.0) <= 1e-6
    S = softmax_of(50 * sol.W, p.X, p.Z)
    assert np.array_equal(read_selection(S), opt)
    assert selected_mass(S, opt) > 0.99
    sets = read_selection(S, threshold=1e-3)
    assert sets.dtype == bool and np.all(sets.sum(-1) >= 1)
    assert np.isclose(selected_mass(S, sets), S[sets].sum() / 2)
    stacked = np.stack([sol.W, 2 * sol.W])
    assert margins(stacked, p.X, p.Z, opt).shape == (2, 2, 3)


def test_rank():
    g = np.random.default_rng(1)
    u, v = g.standard_normal((2, 6, 2))
    W = u @ v.T
    assert rank(W) == 2
    assert list(rank(np.stack([W, np.zeros((6, 6)), np.eye(6)]))) == [2, 0, 6]


def test_convergence_type_global_and_local():
    p = G.random_problem(4, 5, 8, seed=2)
    r = train(p, param="W", runs=6, steps=1500, record_every=1500)
    kinds = [convergence_type(p, r.W[k, -1], solver=_svm) for k in range(6)]
    opt = p.optimal_tokens().index
    for k, kind in enumerate(kinds):
        assert kind in ("global", "local", "neither")
        if kind == "global":
            assert np.array_equal(r.selection[k], opt)
    assert convergence_type(p, np.zeros((8, 8)), solver=_svm) == "neither"  # uniform attention: not saturated
    sol = _svm(p, opt)
    assert is_locally_optimal(p, opt, sol.W)
    assert convergence_type(p, 100 * sol.W, solver=_svm) == "global"
