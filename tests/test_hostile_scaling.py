"""Hostile cases, scaling (issue 12): the SVM's answer is scale-covariant.

Multiplying tokens and queries by c multiplies every margin ``u^T W w`` by c^2 for a fixed
W, so the hard-margin solution is ``W(cX) = W(X) / c^2`` (same direction), an infeasible
selection stays infeasible, and the soft margin keeps its solution when C is divided by
c^2 (norm objective) or c^4 (squared). Before the fix, data at 1e100 or 1e-100 was
reported "infeasible" (the Gram matrix of the raw rows over/underflowed); now it is
solved on row-normalized data, and where float64 cannot hold W or the multipliers the
solver refuses with a ValidationError naming the float64 range.

Tolerances are derived from the certificates, not from measured values: for
``min 1/2 ||W||_F^2`` (1-strongly convex) a returned W with relative violation eps and
relative gap g lies within ``||W|| (eps + sqrt(g + 2 eps))`` of the optimum (scale W by
1/(1 - eps) to make it feasible, then strong convexity bounds the distance by the gap).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from attnsvm import TokenProblem, ValidationError
from attnsvm.svm import (solve_fin, solve_gen_svm, solve_p_svm, solve_seq_svm, solve_soft_svm, solve_svm,
                         solve_svm_batch, solve_v_svm)
from attnsvm.tokens import optimal_tokens, scores

rng = np.random.default_rng(0)
n, T, d = 4, 5, 8
X0 = rng.standard_normal((n, T, d))
Z0 = rng.standard_normal((n, d))
Y0 = np.array([1.0, -1.0, 1.0, -1.0])
v0 = rng.standard_normal(d)
SEL = np.zeros(n, int)
XI = rng.standard_normal((30, 6, 2))     # 150 rows in d = 2: not separable
ZI = rng.standard_normal((30, 2))


def unit(W):
    W = W / np.abs(W).max()              # np.linalg.norm itself overflows at 1e200
    return W / np.linalg.norm(W)


def fro_bound(*sols):
    """Certified distance bound (relative) between Frobenius solutions of the same SVM."""
    return sum(s.certificate.max_violation + np.sqrt(s.certificate.duality_gap + 2 * s.certificate.max_violation)
               for s in sols) + 1e-12


def assert_same_fro(s, ref):
    assert s.status == ref.status == "optimal"
    assert np.linalg.norm(unit(s.W) - unit(ref.W)) <= fro_bound(s, ref)


# --------------------------------------------------------------- fixed cases
@pytest.mark.parametrize("c", [1e-70, 1e-30, 3.7e-5, 1e30, 1e70])
def test_frobenius_svm_is_scale_covariant(c):
    ref = solve_svm(TokenProblem(X0, Z0), SEL)
    s = solve_svm(TokenProblem(X0 * c, Z0 * c), SEL)
    assert_same_fro(s, ref)
    assert s.norm_value * c * c == pytest.approx(ref.norm_value, rel=2 * fro_bound(s, ref))
    # the certificate is relative: the same numbers at any scale
    assert s.certificate.max_violation <= 1e-8 and s.certificate.duality_gap <= 1e-8
    assert np.all(np.isfinite(s.duals)) and np.all(np.isfinite(s.margins))


@pytest.mark.parametrize("c", [1e-150, 1e-100, 1e100, 1e150])
def test_nuclear_svm_is_scale_covariant_where_frobenius_multipliers_do_not_fit(c):
    """The nuclear multipliers scale as 1/c^2 (the Frobenius ones as 1/c^4): solvable up to ~1e150."""
    ref = solve_svm(TokenProblem(X0, Z0), SEL, norm="nuclear")
    s = solve_svm(TokenProblem(X0 * c, Z0 * c), SEL, norm="nuclear")
    assert s.status == ref.status == "optimal"
    gaps = s.certificate.duality_gap + ref.certificate.duality_gap
    assert s.norm_value * c * c == pytest.approx(ref.norm_value, rel=gaps + 1e-12)
    # nuclear minimizers need not be unique: c^2 W(cX) must be optimal for the unscaled SVM
    Wc = unit(s.W) * ref.norm_value / np.linalg.svd(unit(s.W), compute_uv=False).sum()
    m = ref.constraints.evaluate(Wc)
    assert m.min() >= 1 - (s.certificate.max_violation + gaps + 1e-12)


@pytest.mark.parametrize("c", [1e-200, 1e200])
@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_unrepresentable_solution_is_refused_not_called_infeasible(c, norm):
    """W ~ 1e-400 or 1e400 cannot be held by float64: a clear error (it was "infeasible")."""
    with pytest.raises(ValidationError, match="float64 range"):
        solve_svm(TokenProblem(X0 * c, Z0 * c), SEL, norm=norm)


@pytest.mark.parametrize("c", [1e-150, 1e150])
def test_frobenius_multipliers_out_of_range_are_refused(c):
    """W ~ 1e-300 fits but the multipliers ~ 1e-600 do not: refused (they came back as 0)."""
    with pytest.raises(ValidationError, match="multipliers"):
        solve_svm(TokenProblem(X0 * c, Z0 * c), SEL)


@pytest.mark.parametrize("c", [1e-200, 1e-100, 1e100, 1e200])
@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_infeasibility_is_unchanged_at_any_scale(c, norm):
    s = solve_svm(TokenProblem(XI * c, ZI * c), np.zeros(30, int), norm=norm)
    assert s.status == "infeasible" and s.W is None
    f = s.certificate.farkas
    assert np.all(np.isfinite(f)) and abs(f.sum() - 1) <= 1e-8
    assert np.all(f >= -1e-12 * np.abs(f).max())
    # Farkas: sum_k f_k u_k w_k^T = 0 relative to sum |f_k| |u_k| |w_k| (computed at scale 1)
    cs1 = solve_svm(TokenProblem(XI, ZI), np.zeros(30, int)).constraints
    size = np.linalg.norm(cs1.U, axis=1) * np.linalg.norm(cs1.V, axis=1)
    assert np.linalg.norm(cs1.combine(f)) <= 1e-9 * (np.abs(f) @ size)


def test_optimal_tokens_when_scores_overflow_or_underflow():
    ref = optimal_tokens(TokenProblem(X0, Z0, Y=Y0, v=v0))
    for Xs, vs in ((X0 * 1e300, v0 * 1e10), (X0 * 1e-200, v0 * 1e-200), (X0 * 1e307, v0 * 1e5)):
        got = optimal_tokens(TokenProblem(Xs, Z0, Y=Y0, v=vs))
        assert np.array_equal(got.index, ref.index)
        assert not np.any(np.isnan(got.gap)) and np.all(got.gap > 0)
    X = X0.copy()
    X[1] *= 1e305                                     # one sample far larger than the others
    got = optimal_tokens(TokenProblem(X, Z0, Y=Y0, v=v0 * 100))
    assert np.array_equal(got.index, ref.index)
    # ties are still found in the scaled space
    Xt = X0.copy()
    Xt[0, 3] = Xt[0, ref.index[0]]
    tie = optimal_tokens(TokenProblem(Xt * 1e300, Z0, Y=Y0, v=v0 * 1e10))
    assert tie.has_tie[0] and tie.tied[0, 3] and tie.tied[0, ref.index[0]]


def test_scores_that_overflow_raise_and_select_none_still_solves():
    p = TokenProblem(X0 * 1e300, Z0 * 1e-300, Y=Y0, v=v0 * 1e10)
    with pytest.raises(ValidationError, match="overflow"):
        scores(p)
    ref = solve_svm(TokenProblem(X0, Z0, Y=Y0, v=v0))
    s = solve_svm(p)
    assert_same_fro(s, ref)


@pytest.mark.parametrize("c", [1e-100, 1e100])
def test_vector_svms_are_scale_covariant(c):
    p_ref, p_s = solve_p_svm(X0, None, SEL), solve_p_svm(X0 * c, None, SEL)
    assert p_ref.status == p_s.status
    if p_ref.feasible:
        assert np.linalg.norm(unit(p_s.p) - unit(p_ref.p)) <= fro_bound(p_s, p_ref)
    v_ref, v_s = solve_v_svm(X0, Y0, SEL), solve_v_svm(X0 * c, Y0, SEL)
    assert v_ref.status == v_s.status == "optimal"
    assert np.linalg.norm(unit(v_s.v) - unit(v_ref.v)) <= fro_bound(v_s, v_ref)
    assert v_s.norm_value * c == pytest.approx(v_ref.norm_value, rel=2 * fro_bound(v_s, v_ref))


@pytest.mark.parametrize("causal", [False, True])
def test_sequence_svms_are_scale_covariant(causal):
    Xs = np.random.default_rng(3).standard_normal((2, 4, 10))
    sel = np.tile(np.arange(4), (2, 1))
    ref = solve_seq_svm(Xs, sel, causal=causal)
    s = solve_seq_svm(Xs * 1e60, sel, causal=causal)
    assert_same_fro(s, ref)


def test_gen_svm_and_w_fin_are_scale_covariant():
    O = np.zeros((n, T), bool)
    O[:, :2] = True
    probs = np.full((n, T), 0.2)
    probs[:, 0] = 0.3
    assert_same_fro(solve_gen_svm(TokenProblem(X0 * 1e50, Z0 * 1e50), O), solve_gen_svm(TokenProblem(X0, Z0), O))
    assert_same_fro(solve_fin(TokenProblem(X0 * 1e50, Z0 * 1e50), O, probs), solve_fin(TokenProblem(X0, Z0), O, probs))


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_soft_margin_is_covariant_with_C_rescaled(norm):
    c = 1e30
    for C, squared, power in ((0.1, False, 2), (0.1, True, 4)):
        ref = solve_soft_svm(TokenProblem(X0, Z0), SEL, C=C, norm=norm, squared=squared)
        s = solve_soft_svm(TokenProblem(X0 * c, Z0 * c), SEL, C=C / c ** power, norm=norm, squared=squared)
        assert s.status == ref.status == "optimal"
        obj = s.objective * (c ** power)
        gaps = s.certificate.duality_gap + ref.certificate.duality_gap
        assert obj == pytest.approx(ref.objective, rel=gaps + 1e-12)
        if squared:  # ||W||^2 is 2-strongly convex: ||W - W*||_F^2 <= gap * objective
            bound = np.sqrt(gaps * ref.objective) + 1e-12
            assert np.linalg.norm(s.W * c * c - ref.W) <= bound


@pytest.mark.parametrize("c", [1e30, 1e100])
def test_batch_solver_scale(c):
    Xb = np.stack([X0, X0 * 0.5, XI[:4, :5, :2].repeat(4, axis=2)])
    Zb = np.stack([Z0, Z0, ZI[:4].repeat(4, axis=1)])
    sel = np.zeros((3, n), int)
    ref = solve_svm_batch(Xb, Zb, sel)
    if c == 1e100:   # W ~ 1e-200 fits, the multipliers ~ 1e-400 do not
        with pytest.raises(ValidationError, match="float64 range"):
            solve_svm_batch(Xb * c, Zb * c, sel)
        return
    s = solve_svm_batch(Xb * c, Zb * c, sel)
    assert list(s.status) == list(ref.status)
    ok = ref.status == "optimal"
    assert ok[:2].all()
    np.testing.assert_allclose(s.norm_value[ok] * c * c, ref.norm_value[ok], rtol=1e-9)
    single = solve_svm(TokenProblem(X0 * c, Z0 * c), SEL)
    assert s.norm_value[0] == pytest.approx(single.norm_value, rel=1e-9)


# --------------------------------------------------------------- property tests
def _data(seed, n, T, d):
    r = np.random.default_rng(seed)
    return r.standard_normal((n, T, d)), r.standard_normal((n, d)), r.integers(0, T, n)


@given(seed=st.integers(0, 10_000), n=st.integers(1, 4), T=st.integers(2, 5), d=st.integers(1, 6),
       k=st.floats(-60, 60), mant=st.floats(1.0, 9.9))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_frobenius_scale_covariance(seed, n, T, d, k, mant):
    X, Z, sel = _data(seed, n, T, d)
    c = mant * 10.0 ** k
    ref = solve_svm(TokenProblem(X, Z), sel)
    s = solve_svm(TokenProblem(X * c, Z * c), sel)
    assert s.status == ref.status                       # infeasibility unchanged
    if ref.feasible:
        assert np.linalg.norm(unit(s.W) - unit(ref.W)) <= fro_bound(s, ref)


@given(seed=st.integers(0, 10_000), n=st.integers(1, 3), T=st.integers(2, 4), d=st.integers(2, 4),
       k=st.floats(-60, 60))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_nuclear_scale_covariance(seed, n, T, d, k):
    X, Z, sel = _data(seed, n, T, d)
    c = 3.0 * 10.0 ** k
    ref = solve_svm(TokenProblem(X, Z), sel, norm="nuclear")
    s = solve_svm(TokenProblem(X * c, Z * c), sel, norm="nuclear")
    assert s.status in ("infeasible", "optimal", "optimal_inaccurate")
    assert (s.status == "infeasible") == (ref.status == "infeasible")
    if ref.status == s.status == "optimal":
        gaps = s.certificate.duality_gap + ref.certificate.duality_gap
        assert s.norm_value * c * c == pytest.approx(ref.norm_value, rel=gaps + 1e-12)


@given(seed=st.integers(0, 10_000), n=st.integers(1, 4), T=st.integers(2, 5), d=st.integers(1, 5),
       k=st.floats(-60, 60), causal=st.booleans())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_other_hard_margin_solvers_scale_covariance(seed, n, T, d, k, causal):
    X, Z, sel = _data(seed, n, T, d)
    c = 7.0 * 10.0 ** k
    r = np.random.default_rng(seed + 1)
    Y = np.where(r.random(n) < 0.5, -1.0, 1.0)
    O = r.random((n, T)) < 0.4
    O[np.arange(n), sel] = True
    seq_sel = np.minimum(r.integers(0, T, (n, T)), np.arange(T)) if causal else r.integers(0, T, (n, T))
    pairs = [
        (solve_gen_svm(TokenProblem(X, Z), O), solve_gen_svm(TokenProblem(X * c, Z * c), O), "W"),
        (solve_seq_svm(X, seq_sel, causal=causal), solve_seq_svm(X * c, seq_sel, causal=causal), "W"),
        (solve_p_svm(X, None, sel), solve_p_svm(X * c, None, sel), "p"),
        (solve_v_svm(X, Y, sel), solve_v_svm(X * c, Y, sel), "v"),
    ]
    for ref, s, attr in pairs:
        assert s.status == ref.status
        if ref.feasible:
            a, b = getattr(s, attr), getattr(ref, attr)
            if np.abs(b).max() == 0:
                assert np.abs(a).max() == 0
            else:
                assert np.linalg.norm(unit(a) - unit(b)) <= fro_bound(s, ref)


@given(seed=st.integers(0, 10_000), n=st.integers(2, 4), T=st.integers(2, 5), d=st.integers(1, 6))
@settings(max_examples=30, deadline=None)
def test_property_permutation_of_samples_and_tokens(seed, n, T, d):
    X, Z, sel = _data(seed, n, T, d)
    r = np.random.default_rng(seed + 7)
    ref = solve_svm(TokenProblem(X, Z), sel)
    perm = r.permutation(n)
    s = solve_svm(TokenProblem(X[perm], Z[perm]), sel[perm])
    assert s.status == ref.status
    if ref.feasible:
        assert np.linalg.norm(unit(s.W) - unit(ref.W)) <= fro_bound(s, ref)
        assert s.norm_value == pytest.approx(ref.norm_value, rel=2 * fro_bound(s, ref))
    # tokens: permute each sample's tokens and map the selection along
    sig = np.stack([r.permutation(T) for _ in range(n)])
    Xp = np.take_along_axis(X, sig[:, :, None], axis=1)
    inv = np.argsort(sig, axis=1)
    selp = inv[np.arange(n), sel]
    assert np.array_equal(Xp[np.arange(n), selp], X[np.arange(n), sel])
    t = solve_svm(TokenProblem(Xp, Z), selp)
    assert t.status == ref.status
    if ref.feasible:
        assert np.linalg.norm(unit(t.W) - unit(ref.W)) <= fro_bound(t, ref)
    # optimal tokens follow the permutation
    Y = np.where(r.random(n) < 0.5, -1.0, 1.0)
    v = r.standard_normal(d)
    o = optimal_tokens(TokenProblem(X, Z, Y=Y, v=v))
    op = optimal_tokens(TokenProblem(Xp, Z, Y=Y, v=v))
    assert np.array_equal(sig[np.arange(n), op.index][~o.has_tie], o.index[~o.has_tie])
