"""Batched nuclear-norm solves (svm.barrier_batch, solve_nuclear_batch, solve_svm_batch(norm="nuclear")):
the same certified optima as one call each, per-problem fallbacks, and the stacked step bounds."""

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.generators import random_problem
from attnsvm.svm import gen_constraints, solve_svm, solve_svm_batch
from attnsvm.svm.ipm import blocks as _block
from attnsvm.svm.barrier_batch import _lmi_steps, _psd_steps
from attnsvm.svm.constraints import att_constraints
from attnsvm.svm.nuclear import solve_nuclear, solve_nuclear_batch


def _att(p):
    return att_constraints(p.X, p.queries, p.optimal_tokens().index)


def _infeasible():
    """Two copies of one sample selecting different tokens: no W separates both."""
    p = random_problem(3, 5, 4, seed=7)
    X = np.concatenate([p.X, p.X[:1]])
    Z = np.concatenate([p.queries, p.queries[:1]])
    sel = np.concatenate([p.optimal_tokens().index, [(p.optimal_tokens().index[0] + 1) % 5]])
    return att_constraints(X, Z, sel)


def _tied():
    """A Gen-SVM with two selected tokens in a sample: equality rows (solved alone)."""
    p = random_problem(4, 6, 5, seed=3)
    S = np.zeros((4, 6), bool)
    S[np.arange(4), p.optimal_tokens().index] = True
    S[0, (p.optimal_tokens().index[0] + 1) % 6] = True
    return gen_constraints(p.X, p.queries, S)


def test_batch_equals_one_call_each_and_falls_back_per_problem():
    sets = [_att(random_problem(6, 8, 10, seed=s)) for s in range(8)]          # one stack
    sets += [_att(random_problem(5, 7, 10, seed=s)) for s in range(3)]         # another shape
    sets += [_att(random_problem(4, 9, 6, seed=1)), _infeasible(), _tied()]   # alone, infeasible, equalities
    batch = solve_nuclear_batch(sets)
    single = [solve_nuclear(cs) for cs in sets]
    assert [b.status for b in batch] == [s.status for s in single]
    assert batch[-2].status == "infeasible" and batch[-2].certificate.stationarity_residual <= 1e-9  # Farkas residual
    assert [b.info.get("batch") for b in batch[:11]] == [8] * 8 + [3] * 3
    assert batch[11].info["batch"] == 1 and batch[13].info["batch"] == 1
    for b, s in zip(batch, single):
        if s.status != "optimal":
            continue
        assert b.certificate.duality_gap <= 1e-8 and b.certificate.max_violation <= 1e-9
        assert b.norm_value == pytest.approx(s.norm_value, rel=1e-8)
        # the dual value certifies the optimum: ||W||_* >= rhs^T lam >= (1 - 1e-8) ||W||_*
        assert float(b.constraints.rhs @ b.duals) >= (1 - 1e-8) * b.norm_value


def test_solve_svm_batch_nuclear_matches_solve_svm():
    probs = [random_problem(6, 8, 10, seed=s) for s in range(10)]
    b = solve_svm_batch(probs, norm="nuclear")
    assert b.W.shape == (10, 10, 10) and list(b.status) == ["optimal"] * 10
    for p, W, v, m in zip(probs, b.W, b.norm_value, b.margins):
        s = solve_svm(p, norm="nuclear")
        assert v == pytest.approx(s.norm_value, rel=1e-8)
        assert np.linalg.svd(W, compute_uv=False).sum() == pytest.approx(v, rel=1e-10)
        assert m.min() >= 1 - 1e-9
    with pytest.raises(ValidationError, match="norm"):
        solve_svm_batch(probs, norm="spectral")


def test_stacked_step_bounds_reach_the_boundary():
    rng = np.random.default_rng(0)
    R, r1, r2 = 6, 4, 3
    G = rng.standard_normal((R, r1, r2))
    G *= 0.5 / np.linalg.norm(G, 2, axis=(1, 2))[:, None, None]
    dG = rng.standard_normal((R, r1, r2))
    dG[0] *= 1e-3                                       # a step that stays inside: alpha = 1
    I1, I2 = np.broadcast_to(np.eye(r1), (R, r1, r1)), np.broadcast_to(np.eye(r2), (R, r2, r2))
    LZi = np.linalg.inv(np.linalg.cholesky(_block(I1, G, I2)))
    a = _lmi_steps(LZi, dG)
    assert a[0] == 1.0
    norms = np.linalg.norm(G + a[:, None, None] * dG, 2, axis=(1, 2))
    np.testing.assert_allclose(norms[1:], 1.0, rtol=1e-10)       # on the spectral-norm ball's boundary
    X = rng.standard_normal((R, 5, 5))
    X = X @ X.swapaxes(1, 2) + 0.1 * np.eye(5)
    dX = rng.standard_normal((R, 5, 5))
    dX = dX + dX.swapaxes(1, 2)
    b = _psd_steps(np.linalg.inv(np.linalg.cholesky(X)), dX)
    lmin = np.linalg.eigvalsh(X + b[:, None, None] * dX)[:, 0]
    assert np.all(lmin >= -1e-10) and np.all((b == 1.0) | (np.abs(lmin) <= 1e-9))
