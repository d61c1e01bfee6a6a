"""The reductions of attnsvm.svm.reductions as apply / invert pairs (subspace bases, row subsets) and
``result.lift_solution``, the svm-side map of a solution solved in bases back to the full rows (what the probe's
layer does in real/layer.py, bit for bit)."""

import numpy as np
import pytest

from attnsvm.real.layer import LayerInputs
from attnsvm.svm import gen_constraints, solve
from attnsvm.svm.reductions import RowSubset, SubspaceBasis
from attnsvm.svm.result import lift_solution


def _rows(seed=0, N=6, d1=9, d2=7, r2=3):
    """Rows whose w's span only ``r2`` dimensions (repeated queries), N < d1."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((N, d1))
    V = rng.standard_normal((N, r2)) @ rng.standard_normal((r2, d2))
    return U, V


def test_subspace_basis_apply_and_invert():
    U, V = _rows()
    basis = SubspaceBasis.of(U, V)
    Ua, Vb = basis.rows(U, V)
    assert Ua.shape == (6, 6) and Vb.shape == (6, 3)               # r1 = rank U = N, r2 = rank V
    M = np.random.default_rng(1).standard_normal((6, 3))
    W = basis.lift(M)
    np.testing.assert_allclose(basis.reduce(W), M, atol=1e-13)    # reduce inverts lift
    np.testing.assert_allclose(basis.lift_right(M), W, atol=1e-13)  # the same map, another rounding
    # the rows see W through the bases: the full rows' margins are the reduced ones
    np.testing.assert_allclose(np.einsum("ka,ab,kb->k", U, W, V), np.einsum("ka,ab,kb->k", Ua, M, Vb), atol=1e-12)
    # P None is the identity on the u side
    ident = SubspaceBasis(None, basis.B)
    assert ident.rows(U, V)[0] is U and np.array_equal(ident.lift(np.eye(9)[:, :3]), np.eye(9)[:, :3] @ basis.B.T)


def test_row_subset_take_and_lift():
    sub = RowSubset(np.array([1, 4]), 6)
    vals = np.arange(6.0) * 10
    assert sub.take(vals).tolist() == [10.0, 40.0]
    assert sub.lift(sub.take(vals)).tolist() == [0.0, 10.0, 0.0, 0.0, 40.0, 0.0]
    assert np.isnan(sub.lift(np.ones(2), fill=np.nan)[0])
    mask = RowSubset(np.array([True, False, True]), 3)
    assert mask.lift(np.array([2.0, 3.0])).tolist() == [2.0, 0.0, 3.0]


def _layer(seed=0, m=4, T=5, d=29):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.standard_normal((m, T, d)), np.ones((m, T, 1))], axis=-1)
    sel = np.zeros((m, T), bool)
    sel[np.arange(m), rng.integers(0, T, m)] = True
    return LayerInputs.build(X, X[:, 2], np.ones((m, T), bool)), sel


def test_lift_solution_is_the_layers_lift_bit_for_bit():
    inp, sel = _layer()
    assert inp.Xr is not None
    cs = gen_constraints(inp.X, inp.Z, sel, valid=inp.cand)
    red = solve(inp.reduced(cs), "nuclear", formulation="gen")
    bound = float(np.abs(red.duals).sum() * inp.span_residual)
    want = inp.svm(sel)
    got = lift_solution(red, cs, SubspaceBasis(inp.P, inp.B), gap_bound=bound,
                        info={"layer_bases": [int(inp.P.shape[1]), int(inp.B.shape[1])], "span_bound": bound})
    assert got.status == want.status == "optimal" and got.constraints is cs
    assert np.array_equal(got.W, want.W) and np.array_equal(got.duals, want.duals)
    assert got.certificate.duality_gap == want.certificate.duality_gap
    assert got.info["layer_bases"] == want.info["layer_bases"] and got.info["span_bound"] == want.info["span_bound"]


def test_lift_solution_downgrades_a_status_the_raised_gap_no_longer_certifies():
    inp, sel = _layer(1)
    cs = gen_constraints(inp.X, inp.Z, sel, valid=inp.cand)
    red = solve(inp.reduced(cs), "nuclear", formulation="gen")
    assert red.status == "optimal"
    assert lift_solution(red, cs, SubspaceBasis(inp.P, inp.B), gap_bound=0.0).status == "optimal"
    bad = lift_solution(red, cs, SubspaceBasis(inp.P, inp.B), gap_bound=1e-3)
    assert bad.status == "optimal_inaccurate" and not bad.certified
    assert bad.certificate.duality_gap == pytest.approx(red.certificate.duality_gap + 1e-3, rel=1e-12)
