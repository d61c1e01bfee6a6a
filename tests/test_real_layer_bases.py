"""The probe layer's Gen-SVMs solved in the layer's bases P, B (real/layer.py): the same certified optimum as
the full-space solve, the bound on the rows outside the bases, the fall-back and the criterion."""

import dataclasses

import numpy as np
import pytest

from attnsvm.real.layer import SPAN_TOL, LayerInputs, span_residual
from attnsvm.svm import gen_constraints, solve


def _layer(seed=0, m=4, T=5, d=29, dup=False):
    """``(inp, selected)``: m sentences of T tokens in D = d + 1 (augmented), the query a token of its sentence,
    selections with ties (equality rows); ``dup``: sentence 1 repeats sentence 0 with another selection."""
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.standard_normal((m, T, d)), np.ones((m, T, 1))], axis=-1)
    sel = np.zeros((m, T), bool)
    sel[np.arange(m), rng.integers(0, T, m)] = True
    sel[0, :2] = True  # two ties in sentence 0
    if dup:
        X[1] = X[0]
        sel[1] = False
        sel[1, 4] = True
    cand = np.ones((m, T), bool)
    return LayerInputs.build(X, X[:, 2], cand), sel


def _full(inp, sel):
    return solve(gen_constraints(inp.X, inp.Z, sel, valid=inp.cand), "nuclear", formulation="gen")


def test_the_bases_solve_is_the_full_problems_certified_optimum():
    inp, sel = _layer()
    assert inp.Xr is not None and inp.Xr.shape == (4, 5, inp.P.shape[1]) and inp.P.shape[1] == 16  # N = 16 < D = 30
    assert 0 <= inp.span_residual < 1e-12
    sol, ref = inp.svm(sel), _full(inp, sel)
    assert sol.info["layer_bases"] == [16, 4] and "layer_bases" not in ref.info
    assert sol.status == ref.status == "optimal" and sol.certified
    assert sol.W.shape == (30, 30) and sol.constraints.d1 == 30 and sol.constraints.N == ref.constraints.N
    np.testing.assert_array_equal(sol.constraints.U, ref.constraints.U)
    # the mapped-back W on the full rows: feasible, its nuclear norm the optimum
    cs = sol.constraints
    marg = cs.evaluate(sol.W)
    assert np.all(marg[~cs.is_equality] >= cs.rhs[~cs.is_equality] - 1e-9)
    assert np.max(np.abs(marg[cs.is_equality])) < 1e-9
    nuc = np.linalg.svd(sol.W, compute_uv=False).sum()
    np.testing.assert_allclose([nuc, sol.norm_value], ref.norm_value, rtol=1e-8)
    # the multipliers are dual feasible for the full rows and close the gap
    S = cs.combine(sol.duals)
    assert np.linalg.norm(S, 2) <= 1 + 1e-8 and abs(cs.rhs @ sol.duals - nuc) <= 1e-8 * nuc
    cos = np.sum(sol.W * ref.W) / (np.linalg.norm(sol.W) * np.linalg.norm(ref.W))
    assert cos > 1 - 1e-6
    np.testing.assert_array_equal(sol.support_tokens(), ref.support_tokens())


def test_span_residual_bounds_the_multipliers_matrix_outside_the_bases():
    inp, sel = _layer(1)
    m = inp.m
    first = np.argmax(inp.cand, axis=1)
    diffs = (inp.X - inp.X[np.arange(m), first][:, None, :])[inp.cand]
    assert span_residual(diffs, inp.P, inp.Z, inp.B) == inp.span_residual
    # bases that miss a direction of each side: the residual sees it and bounds the error of P S_M B^T
    P, B = inp.P[:, 1:], inp.B[:, 1:]
    res = span_residual(diffs, P, inp.Z, inp.B)
    rho = np.linalg.norm(diffs - diffs @ P @ P.T, axis=1).max()
    assert rho > 0.1 and res >= 2 * rho * np.linalg.norm(inp.Z, axis=1).max() * (1 - 1e-12)
    cs = gen_constraints(inp.X, inp.Z, sel, valid=inp.cand)
    lam = np.random.default_rng(2).standard_normal(cs.N)
    for P_, B_ in ((P, inp.B), (inp.P, B), (P, B)):
        r = span_residual(diffs, P_, inp.Z, B_)
        Ur, Vr = cs.U @ P_ @ P_.T, cs.V @ B_ @ B_.T
        err = np.linalg.norm(cs.combine(lam) - (Ur * lam[:, None]).T @ Vr, 2)
        assert 0 < err <= np.abs(lam).sum() * r


def test_the_bound_is_added_to_the_gap_and_a_large_one_solves_in_full():
    inp, sel = _layer(3)
    sol = inp.svm(sel)
    assert sol.info["span_bound"] == pytest.approx(np.abs(sol.duals).sum() * inp.span_residual, rel=1e-12)
    assert sol.info["span_bound"] <= SPAN_TOL
    # the lift raises the gap by the bound: a bound above the certificate's 1e-6 makes it uncertified
    cs = gen_constraints(inp.X, inp.Z, sel, valid=inp.cand)
    red = solve(inp.reduced(cs), "nuclear", formulation="gen")
    lifted = inp._lift(red, cs, 2e-6)
    assert lifted.certificate.duality_gap == red.certificate.duality_gap + 2e-6
    assert red.status == "optimal" and lifted.status == "optimal_inaccurate" and not lifted.certified
    # rows far outside the bases (a basis missing a direction): the bound exceeds SPAN_TOL, solved in full
    first = np.argmax(inp.cand, axis=1)
    diffs = (inp.X - inp.X[np.arange(inp.m), first][:, None, :])[inp.cand]
    P = inp.P[:, 1:]
    bad = dataclasses.replace(inp, P=P, Xr=inp.X @ P, span_residual=span_residual(diffs, P, inp.Z, inp.B))
    full = bad.svm(sel)
    assert "layer_bases" not in full.info and full.certified
    np.testing.assert_allclose(full.norm_value, sol.norm_value, rtol=1e-8)


def test_the_full_space_when_the_layer_has_as_many_rows_as_dimensions():
    inp, sel = _layer(4, m=6, T=5, d=23)  # N = 24 = D
    assert inp.Xr is None and inp.Zr is None
    sol = inp.svm(sel)
    assert "layer_bases" not in sol.info and sol.certified
    small, _ = _layer(4, m=6, T=5, d=24)  # N = 24 < D = 25
    assert small.Xr is not None


def test_an_infeasible_layer_keeps_its_farkas_certificate_for_the_full_rows():
    inp, sel = _layer(5, dup=True)  # sentence 1 repeats sentence 0's tokens and query with another selection
    sol, ref = inp.svm(sel), _full(inp, sel)
    assert sol.status == ref.status == "infeasible" and sol.W is None
    assert sol.info["layer_bases"][0] == inp.P.shape[1] and sol.constraints.d1 == inp.X.shape[2]
    f = sol.certificate.farkas
    cs = sol.constraints
    assert cs.rhs @ f > 0 and np.linalg.norm(cs.combine(f)) <= 1e-9 * np.abs(f).sum()
