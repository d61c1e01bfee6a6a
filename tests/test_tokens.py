import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attnsvm import TokenProblem, ValidationError, nonlinear_scores, optimal_tokens, random_problem, scores
from attnsvm.tokens import lambda_head, relu_head


def loop_scores(X, Y, v):
    n, T, _ = X.shape
    out = np.empty((n, T))
    for i in range(n):
        for t in range(T):
            out[i, t] = Y[i] * sum(v[k] * X[i, t, k] for k in range(X.shape[2]))
    return out


@given(n=st.integers(1, 5), T=st.integers(2, 6), d=st.integers(1, 5), seed=st.integers(0, 10_000))
@settings(max_examples=40, deadline=None)
def test_scores_and_optimal_tokens_match_loop(n, T, d, seed):
    p = random_problem(n, T, d, seed)
    gamma = loop_scores(p.X, p.Y, p.v)
    np.testing.assert_allclose(scores(p), gamma, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(scores(p.X, p.Y, p.v), gamma, rtol=1e-13, atol=1e-14)
    opt = optimal_tokens(p)
    for i in range(n):
        best = max(range(T), key=lambda t: gamma[i, t])
        assert gamma[i, opt.index[i]] == gamma[i, best]
        tied = [t for t in range(T) if gamma[i, best] - gamma[i, t] <= 1e-9 * max(1.0, abs(gamma[i, best]))]
        assert np.flatnonzero(opt.tied[i]).tolist() == tied
        assert opt.has_tie[i] == (len(tied) > 1)
        others = [gamma[i, t] for t in range(T) if t not in tied]
        expected_gap = gamma[i, best] - max(others) if others else np.inf
        assert opt.gap[i] == pytest.approx(expected_gap, rel=1e-9, abs=1e-12)
    if d >= 2:
        assert not opt.any_tie  # continuous random data has no ties (d = 1 has exact ones: tokens are +-1)


def test_tie_detection_and_tolerance():
    X = np.zeros((3, 4, 2))
    X[0, :, 0] = [1.0, 3.0, 3.0, 2.0]          # exact tie between tokens 1 and 2
    X[1, :, 0] = [1.0, 3.0, 3.0 - 1e-12, 0.0]  # tie within default tolerance
    X[2, :, 0] = [1.0, 3.0, 2.9, 0.0]          # clear winner
    p = TokenProblem(X, np.ones((3, 2)), Y=np.ones(3), v=np.array([1.0, 0.0]))
    opt = optimal_tokens(p)
    assert opt.has_tie.tolist() == [True, True, False]
    assert opt.tied[0].tolist() == [False, True, True, False]
    assert opt.index.tolist() == [1, 1, 1]
    assert opt.gap[0] == pytest.approx(1.0) and opt.gap[2] == pytest.approx(0.1)
    assert opt.tied_samples.tolist() == [0, 1]
    strict = optimal_tokens(p, tol=0.0)
    assert strict.has_tie.tolist() == [True, False, False]
    loose = optimal_tokens(p, tol=0.05)
    assert loose.has_tie.tolist() == [True, True, True]
    all_tied = optimal_tokens(np.ones((1, 3)))
    assert all_tied.has_tie[0] and np.isinf(all_tied.gap[0])


def test_scores_need_labels_and_head():
    p = random_problem(2, 3, 4, 0)
    with pytest.raises(ValidationError, match="no Y"):
        scores(p.replace(Y=None))
    with pytest.raises(ValidationError, match="no Y and v"):
        scores(p.replace(Y=None, v=None))
    with pytest.raises(ValidationError, match="v must have shape"):
        scores(p.X, p.Y, np.ones(3))
    with pytest.raises(ValidationError, match="tol"):
        optimal_tokens(p, tol=-1)


def test_nonlinear_scores_linear_relu_lambda():
    p = random_problem(4, 5, 3, 1)
    lin = nonlinear_scores(p.X, p.Y, lambda A: A @ p.v)
    np.testing.assert_allclose(lin, scores(p), rtol=1e-14)
    V = np.random.default_rng(0).standard_normal((3, 3))
    relu = nonlinear_scores(p.X, p.Y, relu_head(V))
    expected = np.array([[p.Y[i] * np.maximum(V.T @ p.X[i, t], 0).sum() for t in range(5)] for i in range(4)])
    np.testing.assert_allclose(relu, expected, rtol=1e-13)
    lam = nonlinear_scores(p.X, p.Y, lambda_head(p.v, 0.5))
    expected = p.Y[:, None] * (p.X @ p.v - 0.5 * (p.X**2).sum(-1))
    np.testing.assert_allclose(lam, expected, rtol=1e-13)
    with pytest.raises(ValidationError, match="h must map"):
        nonlinear_scores(p.X, p.Y, lambda A: A)
