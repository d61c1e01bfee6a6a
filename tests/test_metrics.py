"""Metrics: correlation, selection, margins, rank, convergence type."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attnsvm import generators as G
from attnsvm.metrics import (
    convergence_type, correlation, matrix_rank, one_minus_correlation, read_selection, selected_mass, softmax_of,
    token_margins,
)
from attnsvm.svm import solve_svm
from attnsvm.svm.analysis import enumerate_locally_optimal, is_locally_optimal
from attnsvm.training.train import train


def _svm(problem, select, norm="fro"):
    return solve_svm(problem, select=select, norm=norm)


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
    m = token_margins(sol.W, p.X, p.Z, opt)
    assert m.shape == (2, 3) and np.all(np.isinf(m[np.arange(2), opt]))
    assert abs(np.min(m) - 1.0) <= 1e-6
    S = softmax_of(50 * sol.W, p.X, p.Z)
    assert np.array_equal(read_selection(S), opt)
    assert selected_mass(S, opt) > 0.99
    sets = read_selection(S, threshold=1e-3)
    assert sets.dtype == bool and np.all(sets.sum(-1) >= 1)
    assert np.isclose(selected_mass(S, sets), S[sets].sum() / 2)
    stacked = np.stack([sol.W, 2 * sol.W])
    assert token_margins(stacked, p.X, p.Z, opt).shape == (2, 2, 3)


def test_rank():
    g = np.random.default_rng(1)
    u, v = g.standard_normal((2, 6, 2))
    W = u @ v.T
    assert matrix_rank(W) == 2
    assert list(matrix_rank(np.stack([W, np.zeros((6, 6)), np.eye(6)]))) == [2, 0, 6]


def test_convergence_type_global_and_local():
    p = G.random_problem(4, 5, 8, seed=2)
    r = train(p, param="W", runs=6, steps=1500, record_every=1500)
    opt = p.optimal_tokens().index
    for k in range(6):
        kind = convergence_type(p, r.W[k, -1])
        saturated = bool(np.all(r.softmax[k, -1].max(axis=-1) > 0.99))
        sel = r.softmax[k, -1].argmax(axis=-1)
        expected = "neither"
        if saturated and np.array_equal(sel, opt):
            expected = "global"
        elif saturated and is_locally_optimal(p, sel, tol=1e-3):
            expected = "local"
        assert kind == expected
    assert convergence_type(p, np.zeros((8, 8))) == "neither"  # uniform attention: not saturated
    sol = _svm(p, opt)
    assert is_locally_optimal(p, opt, solution=sol)
    assert convergence_type(p, 100 * sol.W) == "global"
    assert convergence_type(p, 100 * sol.W, solver=_svm) == "global"


def test_convergence_type_local_and_not_locally_optimal():
    # scan small random instances for selections of each kind and check the classification
    seen = {"global": 0, "local": 0, "neither": 0}
    for seed in range(40):
        p = G.random_problem(2, 3, 2, seed)
        local = {tuple(row) for row in enumerate_locally_optimal(p)}
        opt = tuple(p.optimal_tokens().index)
        for a0 in range(3):
            for a1 in range(3):
                a = (a0, a1)
                sol = solve_svm(p, select=list(a))
                if not sol.feasible:
                    continue
                kind = convergence_type(p, 300 * sol.W)
                expected = "global" if a == opt else ("local" if a in local else "neither")
                assert kind == expected, (seed, a)
                seen[kind] += 1
    assert all(count > 0 for count in seen.values()), seen


@pytest.mark.parametrize("old, new", [("margins", "token_margins"), ("rank", "matrix_rank")])
def test_the_0_1_aliases_are_removed_and_the_new_names_work(old, new):
    """``attnsvm.margins`` / ``attnsvm.rank`` and their attnsvm.metrics twins (deprecated in 0.2) are gone in 0.3:
    AttributeError / ImportError; ``token_margins`` / ``matrix_rank`` answer under both paths."""
    import attnsvm
    import attnsvm.metrics as metrics
    from attnsvm.svm.analysis import matrix_rank

    for module in (attnsvm, metrics):
        with pytest.raises(AttributeError, match=f"no attribute '{old}'"):
            getattr(module, old)
        with pytest.raises(ImportError):
            exec(f"from {module.__name__} import {old}", {})
        assert getattr(module, new) is (matrix_rank if new == "matrix_rank" else metrics.token_margins)
    assert old not in attnsvm.__all__ and new in attnsvm.__all__
    assert attnsvm.matrix_rank(np.diag([1.0, 2.0, 0.0])) == 2
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        metrics.not_a_name  # noqa: B018
