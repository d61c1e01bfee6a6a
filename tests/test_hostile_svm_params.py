"""Hostile cases, parameters (issue 12): every numeric solver parameter is validated at the
public boundary, ``relaxed`` means the same for every integer width, memory is bounded
before allocation, and no NaN (or inf) leaves a public function without an error.

Before the fix ``tol=nan`` returned "optimal" with W = 0, ``tol=-1`` a wrong W, unknown
options a TypeError traceback, an int32 ``relaxed`` was read as a mask and an int64 one as
indices, and the dense solver at n = 20000, T = 51 died with numpy's MemoryError.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from attnsvm import TokenProblem, ValidationError
from attnsvm.errors import ResourceLimitError
from attnsvm.svm import (solve_gen_svm, solve_p_svm, solve_seq_svm, solve_soft_svm, solve_svm, solve_svm_batch,
                         solve_v_svm)
from attnsvm.svm.analysis import enumerate_locally_optimal, matrix_rank, separation_delta, support_indices
from attnsvm.svm.ipm import nuclear_ipm
from attnsvm.svm.constraints import att_constraints
from attnsvm.svm.frobenius import solve_frobenius
from attnsvm.svm.nuclear import solve_nuclear
from attnsvm.svm.qp import goldfarb_idnani, pdas, solve_gram_qp
from attnsvm.tokens import (lambda_head, nonlinear_scores, optimal_tokens, relu_head, scores,
                            simplex_projection)

rng = np.random.default_rng(0)
n, T, d = 4, 5, 8
X0 = rng.standard_normal((n, T, d))
Z0 = rng.standard_normal((n, d))
Y0 = np.array([1.0, -1.0, 1.0, -1.0])
v0 = rng.standard_normal(d)
SEL = np.zeros(n, int)
P0 = TokenProblem(X0, Z0)
BAD_TOL = [float("nan"), -1.0, 0.0, float("inf"), 1.5, "1e-10", True, None]


# --------------------------------------------------------------- validation
@pytest.mark.parametrize("name", ["feas_tol", "tol"])          # tol: the name of feas_tol removed in 0.3
@pytest.mark.parametrize("val", BAD_TOL)
def test_feas_tol_is_validated(val, name):
    for norm in ("fro", "nuclear"):
        with pytest.raises(ValidationError, match="feas_tol"):
            solve_svm(P0, SEL, norm=norm, **{name: val})
    with pytest.raises(ValidationError, match="feas_tol"):
        solve_p_svm(X0, None, SEL, **{name: val})
    with pytest.raises(ValidationError, match="feas_tol"):
        solve_v_svm(X0, Y0, SEL, **{name: val})
    with pytest.raises(ValidationError, match="feas_tol"):
        solve_svm_batch(X0[None], Z0[None], SEL[None], **{name: val})


@pytest.mark.parametrize("val", [float("nan"), -1.0, float("inf"), 1.0, "x"])
def test_support_tol_is_validated(val):
    for norm in ("fro", "nuclear"):
        with pytest.raises(ValidationError, match="support_tol"):
            solve_svm(P0, SEL, norm=norm, support_tol=val)
    with pytest.raises(ValidationError, match="support_tol"):
        solve_soft_svm(P0, SEL, C=1.0, support_tol=val)


@pytest.mark.parametrize("val", [float("nan"), -1.0, 0.0, float("inf"), "1"])
def test_time_limit_is_validated(val):
    for norm in ("fro", "nuclear"):
        with pytest.raises(ValidationError, match="time_limit"):
            solve_svm(P0, SEL, norm=norm, time_limit=val)


@pytest.mark.parametrize("val", [float("nan"), float("inf"), 0.0, -1.0, True, "1", None])
def test_soft_margin_C_is_validated(val):
    with pytest.raises(ValidationError, match="C must"):
        solve_soft_svm(P0, SEL, C=val)


def test_choices_and_unknown_options_are_named():
    with pytest.raises(ValidationError, match="solver"):
        solve_svm(P0, SEL, norm="nuclear", solver="bogus")
    with pytest.raises(ValidationError, match="method"):
        solve_svm(P0, SEL, method="bogus")
    with pytest.raises(ValidationError, match="'gap_tol'"):
        solve_svm(P0, SEL, gap_tol=1e-9)                    # a setting the Frobenius solvers have not
    with pytest.raises(ValidationError, match="'foo'"):
        solve_svm(P0, SEL, foo=1)
    with pytest.raises(ValidationError, match="squared"):
        solve_soft_svm(P0, SEL, C=1.0, squared="yes")
    with pytest.raises(ValidationError, match="query_index"):
        solve_svm_batch(X0[None], None, SEL[None], query_index=99)
    with pytest.raises(ValidationError, match="query_index"):
        solve_svm_batch(X0[None], None, SEL[None], query_index=1.5)
    with pytest.raises(ValidationError, match="max_memory"):
        solve_svm(P0, SEL, max_memory="lots")


def test_lower_level_and_analysis_parameters_are_validated():
    G, b, eq = np.eye(3), np.ones(3), np.zeros(3, bool)
    for f in (goldfarb_idnani, pdas):
        with pytest.raises(ValidationError, match="tol"):
            f(G, b, eq, tol=float("nan"))       # returned "optimal" with lam = 0 before
    with pytest.raises(ValidationError, match="method"):
        solve_gram_qp(G, b, eq, method="bogus")
    cs = att_constraints(X0, Z0, SEL)
    for kw in ({"gap_tol": float("nan")}, {"feas_tol": -1.0}, {"max_iter": 0}, {"time_limit": float("nan")}):
        with pytest.raises(ValidationError, match=next(iter(kw))):
            nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, **kw)
    p = TokenProblem(X0, Z0, Y=Y0, v=v0)
    with pytest.raises(ValidationError, match="tol"):
        support_indices(p, SEL, tol=float("nan"))
    with pytest.raises(ValidationError, match="tol"):
        separation_delta(p, SEL, tol=float("nan"))
    with pytest.raises(ValidationError, match="rtol"):
        matrix_rank(np.eye(3), rtol=float("nan"))
    with pytest.raises(ValidationError, match="max_selections"):
        enumerate_locally_optimal(TokenProblem(X0[:2, :2], Z0[:2], Y=Y0[:2], v=v0), max_selections=-1)
    for val in (float("nan"), float("inf"), "x"):
        with pytest.raises(ValidationError, match="tol"):
            optimal_tokens(p, tol=val)
    for val in (float("nan"), "x", -1.0):
        with pytest.raises(ValidationError, match="lam"):
            lambda_head(v0, val)


# --------------------------------------------------------------- relaxed
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64])
def test_relaxed_integer_arrays_are_indices_whatever_the_width(dtype):
    s = solve_p_svm(X0, None, SEL, relaxed=np.array([1, 0, 0, 1], dtype))
    assert s.info["relaxed_samples"] == [0, 1]
    ref = solve_p_svm(X0, None, SEL, relaxed=[0, 1])
    assert s.status == ref.status
    if s.feasible:
        np.testing.assert_array_equal(s.p, ref.p)


def test_relaxed_masks_and_edge_values():
    assert solve_p_svm(X0, None, SEL, relaxed=np.array([True, False, False, True])).info["relaxed_samples"] == [0, 3]
    assert solve_p_svm(X0, None, SEL, relaxed=[True, False, False, True]).info["relaxed_samples"] == [0, 3]
    empty = solve_p_svm(X0, None, SEL, relaxed=[])
    plain = solve_p_svm(X0, None, SEL)
    assert empty.status == plain.status and empty.info["relaxed_samples"] == []
    assert solve_p_svm(X0, None, SEL, relaxed=np.False_).formulation == "prompt"
    with pytest.raises(ValidationError, match="Y"):
        solve_p_svm(X0, None, SEL, relaxed=np.True_)           # like relaxed=True: needs the labels
    with pytest.raises(ValidationError, match="relaxed"):
        solve_p_svm(X0, None, SEL, relaxed=[0.5])
    with pytest.raises(ValidationError, match="relaxed"):
        solve_p_svm(X0, None, SEL, relaxed=[7])
    with pytest.raises(ValidationError, match="relaxed"):
        solve_p_svm(X0, None, SEL, relaxed=[[0, 1]])
    with pytest.raises(ValidationError, match="relaxed"):
        solve_p_svm(X0, None, SEL, relaxed=np.array([True, False]))


def test_unsigned_selection_out_of_range_is_not_wrapped():
    """uint64 2**64 - 1 was cast to int64 -1 and silently selected the last token."""
    with pytest.raises(ValidationError, match="select"):
        solve_svm(P0, np.array([2 ** 64 - 1, 0, 0, 0], np.uint64))
    ok = solve_svm(P0, np.zeros(n, np.uint8))
    assert ok.norm_value == solve_svm(P0, SEL).norm_value


# --------------------------------------------------------------- memory
def test_dense_solver_refuses_a_quadratic_gram_before_allocating():
    """n = 20000, T = 51: N = 1e6 rows, the Gram matrices need ~29 TiB (numpy MemoryError before)."""
    Xm = np.random.default_rng(1).standard_normal((20000, 51, 4))
    cs = att_constraints(Xm, Xm[:, 0], np.zeros(20000, int))
    with pytest.raises(ResourceLimitError, match="N x N"):
        solve_frobenius(cs)
    with pytest.raises(ResourceLimitError):
        solve_nuclear(cs)


def test_max_memory_option_passes_through_every_dense_solver(monkeypatch):
    Xm = np.random.default_rng(1).standard_normal((40, 41, 4))       # N = 1600: ~82 MB dense
    cs = att_constraints(Xm, Xm[:, 0], np.zeros(40, int))
    with pytest.raises(ResourceLimitError, match="max_memory"):
        solve_frobenius(cs, max_memory="1M")
    with pytest.raises(ResourceLimitError, match="max_memory"):
        solve_nuclear(cs, max_memory="1M")
    with pytest.raises(ResourceLimitError, match="max_memory"):
        solve_svm_batch(Xm[None], Xm[None, :, 0], np.zeros((1, 40), int), max_memory="1M")
    with pytest.raises(ResourceLimitError, match="max_memory"):
        solve_p_svm(Xm, None, np.zeros(40, int), max_memory="1M")
    monkeypatch.setenv("ATTNSVM_MAX_MEMORY", "1M")
    with pytest.raises(ResourceLimitError, match="ATTNSVM_MAX_MEMORY"):
        solve_frobenius(cs)
    monkeypatch.delenv("ATTNSVM_MAX_MEMORY")
    # a generous limit changes nothing
    assert solve_svm(P0, SEL, max_memory="1G").norm_value == solve_svm(P0, SEL).norm_value


# --------------------------------------------------------------- no NaN leaves
FINITE = ("norm_value", "objective")
CERT = ("max_violation", "stationarity_residual", "duality_gap", "dual_infeasibility", "complementarity")


def check_solution(s):
    """Every number a solution carries is finite; sentinels only where documented (infeasible)."""
    assert s.status in ("optimal", "optimal_inaccurate", "infeasible")
    if s.status == "infeasible":
        assert s.solution is None and np.all(np.isfinite(s.certificate.farkas))
        assert np.isfinite(s.certificate.stationarity_residual)
        return
    for arr in (s.solution, s.margins, s.duals):
        assert np.all(np.isfinite(arr))
    for k in FINITE:
        assert np.isfinite(getattr(s, k))
    for k in CERT:
        v = getattr(s.certificate, k)
        assert np.isfinite(v) or (k == "stationarity_residual" and s.slack is not None and v != v and s.norm != "fro")
    if s.status == "optimal":
        # the returned margins satisfy the rows up to the certified backward error 1e-8
        # (violation relative to |rhs_k| + ||u_k|| ||w_k|| ||W||_F, svm/solution.py)
        cs = s.constraints
        viol = np.where(cs.is_equality, abs(s.margins - cs.rhs), np.maximum(cs.rhs - s.margins, 0))
        if s.slack is not None:
            viol = np.maximum(cs.rhs - s.slack - s.margins, 0)
        W = s.solution if s.solution.ndim == 2 else s.solution[:, None]
        top = np.abs(W).max()
        nW = np.linalg.norm(W / top) * top if top > 0 else 0.0
        size = np.linalg.norm(cs.U, axis=1) * np.linalg.norm(cs.V, axis=1) * nW
        assert np.all(viol <= 1e-8 * (np.abs(cs.rhs) + size) * (1 + 1e-9))


def wild(seed, shape, lo, hi):
    """Gaussian data with a magnitude 10^k drawn per sample (mixed scales inside one problem)."""
    r = np.random.default_rng(seed)
    k = r.uniform(lo, hi, size=(shape[0],) + (1,) * (len(shape) - 1))
    return r.standard_normal(shape) * 10.0 ** k


def solve_or_refuse(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except ValidationError as exc:
        assert "float64" in str(exc) or "overflow" in str(exc), str(exc)
        return None


@given(seed=st.integers(0, 10_000), n=st.integers(1, 4), T=st.integers(2, 5), d=st.integers(1, 5),
       lo=st.floats(-40, 0), span=st.floats(0, 40))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_no_nan_from_hard_margin_solvers(seed, n, T, d, lo, span):
    X = wild(seed, (n, T, d), lo, lo + span)
    Z = wild(seed + 1, (n, d), lo, lo + span)
    r = np.random.default_rng(seed)
    sel = r.integers(0, T, n)
    Y = np.where(r.random(n) < 0.5, -1.0, 1.0)
    O = r.random((n, T)) < 0.4
    O[np.arange(n), sel] = True
    for s in (solve_or_refuse(solve_svm, TokenProblem(X, Z), sel),
              solve_or_refuse(solve_svm, TokenProblem(X, query_index=0), sel),
              solve_or_refuse(solve_gen_svm, TokenProblem(X, Z), O),
              solve_or_refuse(solve_seq_svm, X, r.integers(0, T, (n, T))),
              solve_or_refuse(solve_p_svm, X, None, sel),
              solve_or_refuse(solve_v_svm, X, Y, sel)):
        if s is not None:
            check_solution(s)
    b = solve_or_refuse(solve_svm_batch, X[None], Z[None], sel[None])
    if b is not None:
        feas = b.status != "infeasible"
        assert np.all(np.isfinite(b.W[feas])) and np.all(np.isfinite(b.duals)) and np.all(np.isfinite(b.margins[feas]))


@given(seed=st.integers(0, 10_000), n=st.integers(1, 3), T=st.integers(2, 4), d=st.integers(1, 4),
       lo=st.floats(-30, 0), span=st.floats(0, 30), C=st.floats(1e-3, 1e12))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_no_nan_from_nuclear_and_soft_solvers(seed, n, T, d, lo, span, C):
    X = wild(seed, (n, T, d), lo, lo + span)
    Z = wild(seed + 1, (n, d), lo, lo + span)
    sel = np.random.default_rng(seed).integers(0, T, n)
    s = solve_or_refuse(solve_svm, TokenProblem(X, Z), sel, norm="nuclear")
    if s is not None:
        check_solution(s)
    s = solve_or_refuse(solve_soft_svm, TokenProblem(X / np.abs(X).max(), Z / np.abs(Z).max()), sel, C=C)
    if s is not None:
        check_solution(s)


@given(seed=st.integers(0, 10_000), n=st.integers(1, 4), T=st.integers(1, 6), d=st.integers(1, 5),
       kx=st.floats(-300, 300), kv=st.floats(-300, 300), tol=st.floats(0, 1e-3))
@settings(max_examples=60, deadline=None)
def test_property_no_nan_from_token_functions(seed, n, T, d, kx, kv, tol):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, T, d)) * 10.0 ** kx
    v = r.standard_normal(d) * 10.0 ** kv
    Y = np.where(r.random(n) < 0.5, -1.0, 1.0)
    try:
        g = scores(X, Y, v)
        assert np.all(np.isfinite(g))
    except ValidationError as exc:
        assert "overflow" in str(exc)
    if T >= 2:
        o = optimal_tokens(TokenProblem(X, Y=Y, v=v), tol=tol)
        assert o.index.shape == (n,) and np.all((0 <= o.index) & (o.index < T))
        assert not np.any(np.isnan(o.gap)) and np.all(o.gap >= 0)
        assert np.all(o.tied[np.arange(n), o.index])
        ref = optimal_tokens(TokenProblem(X / np.abs(X).max(), Y=Y, v=v / np.abs(v).max()), tol=0.0)
        clear = ~ref.has_tie
        assert np.array_equal(o.index[clear], ref.index[clear])    # argmax is scale-invariant
    try:
        h = nonlinear_scores(X, Y, relu_head(r.standard_normal((d, 2))))
        assert np.all(np.isfinite(h))
    except ValidationError as exc:
        assert "nan or inf" in str(exc).lower()
    y = r.standard_normal((n, T)) * 10.0 ** kx
    p = simplex_projection(y)
    assert np.all(np.isfinite(p)) and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, atol=1e-12 * T)
    assert np.all(p[np.arange(n), np.argmax(y, axis=1)] > 0)
    assert np.isfinite(float(matrix_rank(r.standard_normal((d, d)) * 10.0 ** kx)))
