"""The nuclear interior-point method's per-iteration kernels (svm.barrier), each against its definition:
the HKM product sym(X Y) from Z^{-1} / 2, the Jacobi-scaled factorization of the Schur matrix formed by
blocks of rows (including its form-again-and-shift path), the LP and PSD step bounds, and the Cholesky factor of X that
a step carries to the next iterate."""

import numpy as np
import pytest

from attnsvm.generators import random_problem
from attnsvm.svm.ipm import driver as ipm_driver
from attnsvm.svm.ipm import linalg as ipm_linalg
from attnsvm.svm.ipm import newton as ipm_newton
from attnsvm.svm.ipm import problem as ipm_problem
from attnsvm.svm.ipm import steps as ipm_steps
from attnsvm.svm.constraints import att_constraints


def _dual(rng, N=14, r1=5, r2=3, norm=0.8):
    A, Bm = rng.standard_normal((N, r1)), rng.standard_normal((N, r2))
    pb = ipm_problem.Problem(A, Bm, np.ones(N), np.zeros(N, bool))
    lam = rng.random(N)
    lam *= norm / np.linalg.norm(pb.Gmap(lam), 2)
    return pb, ipm_problem.Dual(A, Bm, lam)


def _spd(rng, n, shift=0.1):
    R = rng.standard_normal((n, n))
    return R @ R.T / n + shift * np.eye(n)


def test_z_half_is_half_the_inverse_of_the_dual_matrix():
    """``Zh = Z^{-1} / 2`` with ``Z = 1/2 [[I, -G], [-G^T, I]]``, exactly symmetric; a stack gives each matrix's."""
    rng = np.random.default_rng(0)
    pb, du = _dual(rng)
    r1, r2 = pb.r1, pb.r2
    Z = 0.5 * np.block([[np.eye(r1), -du.G], [-du.G.T, np.eye(r2)]])
    np.testing.assert_allclose(du.Zh, 0.5 * np.linalg.inv(Z), rtol=1e-12, atol=1e-12)
    assert np.array_equal(du.Zh, du.Zh.T)
    duals = [_dual(rng)[1] for _ in range(3)]
    stack = ipm_linalg.z_half(*(np.stack([getattr(d, k) for d in duals]) for k in ("G", "C", "Si")))
    for k, d in enumerate(duals):
        assert np.array_equal(stack[k], d.Zh)


@pytest.mark.parametrize("shape", [(5, 3), (3, 6), (1, 1), (70, 3), (3, 70)])
def test_xy_is_the_hkm_product_by_definition(shape):
    """``pb.XY(X, dG, du) = sym(X Y)`` with ``Y = -dZ Z^{-1}``, ``dZ = -1/2 [[0, dG], [dG^T, 0]]``: equal to the
    explicit block product to 1e-12, exactly symmetric, and the stacked call gives each problem's."""
    rng = np.random.default_rng(1)
    r1, r2 = shape
    pb, du = _dual(rng, r1=r1, r2=r2)
    Z = 0.5 * np.block([[np.eye(r1), -du.G], [-du.G.T, np.eye(r2)]])
    for _ in range(3):
        X = _spd(rng, r1 + r2)
        dG = rng.standard_normal((r1, r2))
        dZ = -0.5 * np.block([[np.zeros((r1, r1)), dG], [dG.T, np.zeros((r2, r2))]])
        XY = X @ (-dZ @ np.linalg.inv(Z))
        ref = 0.5 * (XY + XY.T)
        T = pb.XY(X, dG, du)
        np.testing.assert_allclose(T, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
        assert np.array_equal(T, T.T)
        np.testing.assert_allclose(pb.Y(dG, du), -dZ @ np.linalg.inv(Z), rtol=1e-12, atol=1e-12)
        assert np.array_equal(pb.XY(X, dG, du, pb.Y(dG, du)), T)     # a Y computed before: the same product
    Xs, dGs = np.stack([_spd(rng, r1 + r2) for _ in range(2)]), rng.standard_normal((2, r1, r2))
    dus = type("D", (), {"Zh": np.stack([du.Zh, du.Zh])})
    Ts = pb.XY(Xs, dGs, dus)
    for k in range(2):
        np.testing.assert_allclose(Ts[k], pb.XY(Xs[k], dGs[k], du), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("shape", [(7, 2), (2, 7), (4, 4)])
def test_xy_factors_are_a_rank_2k_factorization_of_x_y(shape):
    """``XY_factors(X, dG, du) = (F, Vt)`` with ``F Vt = X Y`` (Y = -dZ Z^{-1}) to 1e-12, ``2 min(r1, r2)`` columns
    (the low-rank products of both orientations), the same with a Y computed before."""
    rng = np.random.default_rng(5)
    r1, r2 = shape
    pb, du = _dual(rng, r1=r1, r2=r2)
    X, dG = _spd(rng, r1 + r2), rng.standard_normal((r1, r2))
    F, Vt = pb.XY_factors(X, dG, du)
    assert F.shape == (r1 + r2, 2 * min(r1, r2)) and Vt.shape == (2 * min(r1, r2), r1 + r2)
    ref = X @ pb.Y(dG, du)
    np.testing.assert_allclose(F @ Vt, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    F2, Vt2 = pb.XY_factors(X, dG, du, pb.Y(dG, du))
    assert np.array_equal(F, F2) and np.array_equal(Vt, Vt2)


def test_blocks_of_matrices_and_stacks():
    rng = np.random.default_rng(2)
    X11, X12, X22 = rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 2, 2))
    S = ipm_linalg.blocks(X11, X12, X22)
    for k in range(2):
        assert np.array_equal(S[k], np.block([[X11[k], X12[k]], [X12[k].T, X22[k]]]))
        assert np.array_equal(ipm_linalg.blocks(X11[k], X12[k], X22[k]), S[k])


def _blocks_of(M):
    """``form(I, J)`` of :func:`ipm_linalg.factor_lower` for a given matrix (fresh copies: the factorization may not
    change M)."""
    return lambda I, J: M[I, J].copy()


@pytest.mark.parametrize("rank", [40, 25, 1])
def test_schur_factorization_solves_including_the_shifted_path(rank, monkeypatch):
    """``_factor_lower`` solves ``M x = b`` from M's lower triangle formed in blocks of rows: a positive definite
    M directly; a singular one (the first Cholesky fails, the triangle is formed again and shifted) on its
    range."""
    monkeypatch.setattr(ipm_linalg, "SCHUR_BLOCK_ROWS", 9)
    rng = np.random.default_rng(rank)
    N = 40
    F = rng.standard_normal((N, rank)) * rng.uniform(0.1, 10.0, rank)
    M0 = F @ F.T
    if rank == N:
        M0 += 1e-3 * np.eye(N)
    M0 *= np.outer(d := rng.uniform(0.5, 50.0, N), d)        # badly scaled rows: the Jacobi scaling matters
    b = M0 @ rng.standard_normal(N)                          # in the range of M0

    def no_eigh(*a, **k):
        raise AssertionError("the shifted Cholesky factorization should have solved it")

    monkeypatch.setattr(np.linalg, "eigh", no_eigh)       # not the last resort
    x = ipm_linalg.factor_lower(_blocks_of(M0), N, np.zeros(N))(b)
    assert np.linalg.norm(M0 @ x - b) <= 1e-7 * np.linalg.norm(b)


def test_schur_factorization_forms_the_matrix_again_before_shifting(monkeypatch):
    """A failed factorization destroys the triangle; the retry must see the original matrix plus the
    shift: with a first attempt forced to fail, the answer equals the direct one."""
    rng = np.random.default_rng(5)
    M0 = _spd(rng, 30)
    b = rng.standard_normal(30)
    ref = np.linalg.solve(M0, b)
    real = ipm_linalg.sla.lapack.dpotrf
    calls = []

    def flaky(a, **kw):
        calls.append(1)
        out, info = real(a, **kw)
        return (out, 3) if len(calls) == 1 else (out, info)   # the first one "fails" after overwriting

    monkeypatch.setattr(ipm_linalg.sla.lapack, "dpotrf", flaky)
    x = ipm_linalg.factor_lower(_blocks_of(M0), 30, np.zeros(30))(b)
    assert len(calls) == 2
    np.testing.assert_allclose(x, ref, rtol=1e-9)


def _lp_by_definition(x, dx, cap):
    neg = dx < 0
    return min(cap, float(np.min(-x[neg] / dx[neg]))) if neg.any() else cap


def test_lp_step_by_definition():
    rng = np.random.default_rng(6)
    for _ in range(200):
        n = int(rng.integers(1, 8))
        x = rng.uniform(0.01, 2.0, n)
        dx = rng.standard_normal(n) * rng.uniform(0.01, 5.0)
        cap = float(rng.choice([1.0, 0.3]))
        assert ipm_steps.lp_step(x, dx, cap) == pytest.approx(_lp_by_definition(x, dx, cap), rel=1e-14)
    assert ipm_steps.lp_step(np.ones(3), np.ones(3), 1.0) == 1.0
    assert ipm_steps.lp_step(np.zeros(0), np.zeros(0), 0.5) == 0.5
    with pytest.raises(np.linalg.LinAlgError):
        ipm_steps.lp_step(np.ones(2), np.array([np.nan, -1.0]), 1.0)


@pytest.mark.parametrize("n", [7, 90, 300, 420])
def test_psd_step_is_the_distance_to_the_cone(n):
    """``_psd_step(L, dX, cap)``: X + a dX stays positive semidefinite up to a and leaves the cone just
    beyond (through the one-call congruence, both the full and the subset eigenvalue solver, and ARPACK's
    Lanczos beyond ``_PSD_STEP_DENSE_MAX``, by products with L^{-1} and, beyond 400, by triangular solves)."""
    rng = np.random.default_rng(n)
    hit = 0
    for _ in range(10):
        X = _spd(rng, n)
        L = ipm_linalg.chol(X)
        D = rng.standard_normal((n, n))
        D = (D + D.T) * rng.uniform(0.05, 2.0)
        a = ipm_steps.psd_step(L, D, 1.0)
        assert np.linalg.eigvalsh(X + 0.999 * a * D)[0] > 0
        if a < 1.0:
            hit += 1
            assert np.linalg.eigvalsh(X + 1.001 * a * D)[0] < 0
        # the congruence by products with a given inverse factor (the small-X path) gives the same bound
        assert ipm_steps.psd_step(L, D, 1.0, ipm_linalg.tri_inv(L)) == pytest.approx(a, rel=1e-10)
    assert hit >= 5


@pytest.mark.parametrize("n, m", [(9, 2), (40, 6), (80, 3)])
def test_low_rank_psd_step_is_the_distance_to_the_cone(n, m):
    """``_psd_step_low_rank(L, F, Vt, cap)`` for the predictor's ``dX = sym(F Vt) - X``: X + a dX stays positive
    semidefinite up to a and leaves the cone just beyond; equal to the dense bound ``_psd_step`` to 1e-9, capped."""
    rng = np.random.default_rng(n + m)
    for scale in (0.01, 1.0, 30.0):
        X = _spd(rng, n)
        L = ipm_linalg.chol(X)
        F, Vt = scale * rng.standard_normal((n, m)), rng.standard_normal((m, n))
        T = F @ Vt
        dX = 0.5 * (T + T.T) - X
        a = ipm_steps.psd_step_low_rank(L, F, Vt, 1.0)
        assert 0 < a <= 1.0
        assert a == pytest.approx(ipm_steps.psd_step(L, dX, 1.0), rel=1e-9)
        assert np.linalg.eigvalsh(X + 0.999 * a * dX)[0] > 0
        if a < 1.0:
            assert np.linalg.eigvalsh(X + 1.001 * a * dX)[0] < 0
        assert ipm_steps.psd_step_low_rank(L, F, Vt, 0.5 * a) == 0.5 * a


def test_the_predictors_primal_step_is_the_low_rank_bound_and_the_dense_one(monkeypatch):
    """Beyond 64 (X's inverse factor not formed) the predictor's primal step bound comes from
    ``_psd_step_low_rank`` and equals the dense bound of its ``dX`` to 1e-9; the corrector's is the dense one."""
    rng = np.random.default_rng(21)
    N, r1, r2 = 120, 70, 4
    pb = ipm_problem.Problem(rng.standard_normal((N, r1)), rng.standard_normal((N, r2)), np.ones(N), np.zeros(N, bool))
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, None))
    du = ipm_problem.Dual(pb.A, pb.Bm, x.lam)
    _, _, mu, _ = ipm_driver.measure(pb, x, du, None, 1e-9, 1e-10)
    calls = []
    real = ipm_steps.psd_step_low_rank
    monkeypatch.setattr(ipm_newton, "psd_step_low_rank", lambda *a: calls.append(1) or real(*a))
    nw = ipm_newton.NewtonSystem(pb, x, du)
    da = nw.direction(pb.rhs.copy(), 0.0, None)
    ap = nw.max_steps(da)[0]
    assert calls == [1] and nw.LXi is None
    assert ap == pytest.approx(ipm_steps.psd_step(nw.LX, da[2], ipm_steps.lp_step(x.s, da[3], 1.0)), rel=1e-9)
    d = nw.direction(pb.rhs.copy(), 0.1 * mu, None)
    nw.max_steps(d)
    assert calls == [1]


def test_triangular_inverse_and_s_inverse_by_definition():
    """``_tri_inv(L)`` is ``L^{-1}`` (lower triangular); ``_Dual``'s ``Li`` is the inverse of the factor of
    ``S = I - G^T G`` and its ``Si = Li^T Li`` is ``S^{-1}``, exactly symmetric."""
    rng = np.random.default_rng(12)
    for n in (1, 3, 16):
        L = ipm_linalg.chol(_spd(rng, n))
        Li = ipm_linalg.tri_inv(L)
        np.testing.assert_allclose(Li @ L, np.eye(n), atol=1e-12)
        assert np.array_equal(Li, np.tril(Li))
    assert ipm_linalg.tri_inv(np.zeros((0, 0))).shape == (0, 0)
    for r1, r2 in ((5, 3), (3, 6)):
        pb, du = _dual(rng, r1=r1, r2=r2)
        S = np.eye(r2) - du.G.T @ du.G
        np.testing.assert_allclose(du.Li @ du.L, np.eye(r2), atol=1e-12)
        np.testing.assert_allclose(du.Si, np.linalg.inv(S), rtol=1e-12, atol=1e-12)
        assert np.array_equal(du.Si, du.Si.T)


@pytest.mark.parametrize("cap", [1.0, 0.4, 0.05])
def test_dual_step_with_a_cap_below_one(cap):
    """The dual step under the LP cap: the full-step Cholesky test and the eigenvalue bound agree with
    the distance to the spectral-norm ball."""
    rng = np.random.default_rng(7)
    for _ in range(30):
        G = rng.standard_normal((4, 3))
        G *= rng.uniform(0.1, 0.95) / np.linalg.norm(G, 2)
        dG = rng.standard_normal((4, 3)) * rng.uniform(0.05, 4.0)
        a = ipm_steps.lmi_step(G, dG, cap)
        assert a <= cap and np.linalg.norm(G + 0.999 * a * dG, 2) < 1
        if a < cap:
            assert np.linalg.norm(G + 1.001 * a * dG, 2) > 1
        L = ipm_linalg.chol_S(G)              # the congruence by the inverse factor (as the iteration passes it)
        assert ipm_steps.lmi_step(G, dG, cap, L=L, Li=ipm_linalg.tri_inv(L)) == pytest.approx(a, rel=1e-10)


def test_a_step_carries_the_cholesky_factor_of_the_next_x():
    """The iterate after a step holds X's Cholesky factor from the step guard (the next Newton system's)."""
    pr = random_problem(6, 8, 10, seed=3)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index)
    red = ipm_problem.reduce_problem(cs.U, cs.V, cs.rhs, cs.is_equality, {})
    pb = red.pb
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, None))
    assert x.LX is None
    for _ in range(3):
        du = ipm_problem.Dual(pb.A, pb.Bm, x.lam)
        _, _, mu, _ = ipm_driver.measure(pb, x, du, None, 1e-9, 1e-10)
        x = ipm_newton.ipm_step(pb, x, du, mu, 0.95, False)[0]
        np.testing.assert_allclose(x.LX @ x.LX.T, x.X, rtol=1e-12, atol=1e-13 * np.abs(x.X).max())
        assert np.array_equal(x.X12, x.X[: pb.r1, pb.r1:]) and np.array_equal(x.X, x.X.T)


def test_distinct_rows_is_numpys_unique_over_rows():
    """Same distinct rows, order and inverse as ``np.unique(V, axis=0, return_inverse=True)``, with repeats,
    signed zeros, one row and none."""
    rng = np.random.default_rng(8)
    base = rng.integers(-2, 3, (9, 4)).astype(float)
    base[0] = 0.0
    V = base[rng.integers(0, 9, 60)]
    V[5], V[6] = -0.0, 0.0                                  # equal by value: one distinct row
    for W in (V, V[:1], V[:0], rng.standard_normal((7, 3)), np.repeat(V[:3], 4, axis=0)):
        Vq, inv = ipm_linalg.distinct_rows(W)
        ref, ref_inv = np.unique(W, axis=0, return_inverse=True)
        assert np.array_equal(Vq, ref) and np.array_equal(inv, np.asarray(ref_inv).ravel())
        assert np.array_equal(Vq[inv], W)


def test_maps_on_distinct_queries_equal_the_row_by_row_maps():
    """From ``_GROUPED_MAPS_MIN_ROWS`` rows sharing queries on, ``Gmap`` and ``amap`` work on the distinct
    queries (a sparse sum per query): the same G and margins as the row-by-row products, to 1e-12."""
    rng = np.random.default_rng(9)
    N = 2 * ipm_problem.GROUPED_MAPS_MIN_ROWS
    U = rng.standard_normal((N, 9))
    V = rng.standard_normal((40, 6))[rng.integers(0, 40, N)]
    pb = ipm_problem.reduce_problem(U, V, np.ones(N), np.zeros(N, bool), {}).pb
    assert pb.E is not None and pb.E.shape == (pb.Bq.shape[0], N)
    plain = ipm_problem.Problem(pb.A, pb.Bm, pb.rhs, pb.eq)
    assert plain.E is None
    for _ in range(3):
        lam = rng.standard_normal(N)
        G = pb.Gmap(lam)
        ref = plain.Gmap(lam)
        np.testing.assert_allclose(G, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
        T = rng.standard_normal((pb.r1, pb.r2))
        m, mref = pb.amap(T), plain.amap(T)
        np.testing.assert_allclose(m, mref, rtol=1e-12, atol=1e-12 * np.abs(mref).max())
    n = ipm_problem.GROUPED_MIN_ROWS + 72
    small = ipm_problem.reduce_problem(U[:n], V[:n], np.ones(n), np.zeros(n, bool), {}).pb
    assert small.qidx is not None and small.E is None      # few rows: grouped Schur complement, plain maps
    n = ipm_problem.GROUPED_MIN_ROWS - 1
    tiny = ipm_problem.reduce_problem(U[:n], V[:n], np.ones(n), np.zeros(n, bool), {}).pb
    assert tiny.qidx is None and tiny.E is None            # fewer still: plain products throughout


def test_eig_min_is_the_smallest_eigenvalue_of_the_lower_triangle():
    """``_eig_min`` (LAPACK syevr, the first eigenvalue only) equals numpy's smallest eigenvalue and reads
    only the lower triangle (the step bounds fill nothing else)."""
    rng = np.random.default_rng(11)
    for n in (1, 2, 7, 16, 40):
        S = rng.standard_normal((n, n))
        S = S + S.T
        K = np.tril(S) + np.triu(rng.standard_normal((n, n)), 1) * 1e3     # garbage above the diagonal
        assert ipm_linalg.eig_min(np.asfortranarray(K)) == pytest.approx(np.linalg.eigvalsh(S)[0], rel=1e-12,
                                                                         abs=1e-12 * np.abs(S).max())


def test_cholesky_diagonal_test_refuses_nan_and_inf():
    """``_finite_positive`` on the diagonal of a factor that potrf accepted: positive finite entries pass, a
    NaN or an inf anywhere fails (they reach the diagonal; potrf refuses pivots <= 0 itself)."""
    assert ipm_linalg.finite_positive(np.array([1.0, 2.0, 1e-300]))
    for bad in (np.nan, np.inf):
        d = np.array([1.0, 2.0, 3.0])
        d[1] = bad
        assert not ipm_linalg.finite_positive(d)
    X = np.eye(3)
    X[2, 1] = X[1, 2] = np.nan
    assert ipm_linalg.chol(X) is None


def test_the_step_carries_g_bit_for_bit_as_the_dual_computes_it():
    """The iterate after a step holds ``G(lam)`` from the dual step guard; it is exactly the G that
    :class:`_Dual` computes from the new multipliers (so the next iteration may skip that product)."""
    pr = random_problem(6, 8, 10, seed=5)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index)
    pb = ipm_problem.reduce_problem(cs.U, cs.V, cs.rhs, cs.is_equality, {}).pb
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, None))
    assert x.G is None
    L = None
    for _ in range(4):
        du = ipm_problem.Dual(pb.A, pb.Bm, x.lam, L, x.G)
        _, _, mu, _ = ipm_driver.measure(pb, x, du, None, 1e-9, 1e-10)
        x, L, _ = ipm_newton.ipm_step(pb, x, du, mu, 0.95, False)
        assert x.G is not None and np.array_equal(x.G, ipm_problem.Dual(pb.A, pb.Bm, x.lam).G)
        np.testing.assert_allclose(L @ L.T, np.eye(pb.r2) - x.G.T @ x.G, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dead", [False, True])
def test_reduce_keeps_the_live_rows_and_their_queries(dead):
    """``_reduce``: rows with ``u_k w_k^T = 0`` leave; the reduced rows are the scaled live rows in the bases
    (``A = U``, ``Bm = V B / sv``), grouped by their distinct queries (``Bm == Bq[qidx]``, every query used),
    with or without dead rows (a dead query leaves too)."""
    rng = np.random.default_rng(12)
    N = 150
    U = rng.standard_normal((N, 6))
    Vq = rng.standard_normal((10, 4))
    qi = rng.integers(0, 10, N)
    qi[:10] = np.arange(10)
    if dead:
        U[3] = 0.0                                          # a dead row
        Vq[7] = 0.0                                         # a dead query: all its rows are dead
    V = Vq[qi]
    red = ipm_problem.reduce_problem(U, V, np.ones(N), np.zeros(N, bool), {})
    pb = red.pb
    live = (np.abs(U).sum(1) > 0) & (np.abs(V).sum(1) > 0)
    assert np.array_equal(red.live, live)
    np.testing.assert_allclose(pb.A, U[live] / red.su, rtol=1e-15)
    np.testing.assert_allclose(pb.Bm, V[live] @ red.B / red.sv, rtol=1e-12, atol=1e-14)
    assert red.su == pytest.approx(np.linalg.norm(U[live], axis=1).max(), rel=1e-15)
    assert red.sv == pytest.approx(np.linalg.norm(V[live] @ red.B, axis=1).max(), rel=1e-15)
    assert pb.qidx is not None and np.array_equal(pb.Bq[pb.qidx], pb.Bm)
    assert np.array_equal(np.unique(pb.qidx), np.arange(pb.Bq.shape[0]))
    assert pb.Bq.shape[0] == len(np.unique(qi[live]))


def test_cached_identity_is_read_only():
    """``_eye(n)`` is the identity, shared between calls: it refuses writes (an in-place update would corrupt
    every later use)."""
    E = ipm_linalg.eye(5)
    assert np.array_equal(E, np.eye(5)) and ipm_linalg.eye(5) is E
    with pytest.raises(ValueError):
        E[0, 0] = 2.0


@pytest.mark.parametrize("sig_mu", [0.0, 0.3])
def test_slack_direction_linearizes_the_centered_complementarity(sig_mu):
    """The slack part of a Newton direction solves ``lam ds + s dlam = sig_mu - s lam`` (the linearized
    ``s lam = sig_mu``), with and without centering, and the corrector's ``cs`` is added as it is."""
    pr = random_problem(6, 8, 10, seed=2)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index)
    pb = ipm_problem.reduce_problem(cs.U, cs.V, cs.rhs, cs.is_equality, {}).pb
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, None))
    nw = ipm_newton.NewtonSystem(pb, x, ipm_problem.Dual(pb.A, pb.Bm, x.lam))
    rng = np.random.default_rng(1)
    lam, s = x.lam[pb.I], x.s
    for corr in (None, (np.zeros_like(x.X), rng.standard_normal(s.size))):
        dlam, _, _, ds = nw.direction(rng.standard_normal(pb.N), sig_mu, corr)
        extra = 0.0 if corr is None else lam * corr[1]
        np.testing.assert_allclose(lam * ds + s * dlam[pb.I], sig_mu - s * lam + extra, rtol=1e-12, atol=1e-12)


def _steps_by_definition(x, du, d, pb):
    """The largest primal and the largest dual step in (0, 1] by the definition: ``X + a dX >= 0`` and
    ``s + a ds >= 0``; ``||G + a dG||_2 <= 1`` and ``lam + a dlam >= 0`` (bisection on eigenvalues)."""
    dlam, dG, dX, ds = d

    def primal_ok(a):
        return np.linalg.eigvalsh(x.X + a * dX)[0] >= 0 and np.all(x.s + a * ds >= 0)

    def dual_ok(a):
        return np.linalg.norm(du.G + a * dG, 2) <= 1 and np.all(x.lam[pb.I] + a * dlam[pb.I] >= 0)

    out = []
    for ok in (primal_ok, dual_ok):
        if ok(1.0):
            out.append(1.0)
            continue
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        out.append(lo)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_steps_are_the_smaller_of_the_largest_primal_and_dual_steps(seed):
    """With ``equal_steps`` both step lengths are ``min(largest primal step, largest dual step)`` (by the
    definition, to 1e-9); without, each is its own largest step. Along a few iterations of a small problem."""
    pr = random_problem(6, 8, 10, seed=seed)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index)
    pb = ipm_problem.reduce_problem(cs.U, cs.V, cs.rhs, cs.is_equality, {}).pb
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, None))
    for _ in range(4):
        du = ipm_problem.Dual(pb.A, pb.Bm, x.lam)
        _, _, mu, _ = ipm_driver.measure(pb, x, du, None, 1e-9, 1e-10)
        d = ipm_newton.NewtonSystem(pb, x, du).direction(pb.rhs.copy(), 0.0, None)
        ap_ref, ad_ref = _steps_by_definition(x, du, d, pb)
        ap, ad = ipm_newton.NewtonSystem(pb, x, du).max_steps(d)
        np.testing.assert_allclose([ap, ad], [ap_ref, ad_ref], rtol=1e-9, atol=1e-12)
        a1, a2 = ipm_newton.NewtonSystem(pb, x, du, equal_steps=True).max_steps(d)
        assert a1 == a2
        np.testing.assert_allclose(a1, min(ap_ref, ad_ref), rtol=1e-9, atol=1e-12)
        x = ipm_newton.ipm_step(pb, x, du, mu, 0.95, False, equal_steps=True)[0]


@pytest.mark.parametrize("limit, equal", [(256, True), (41, False)])
def test_the_ipm_takes_equal_steps_on_small_row_sets_only(monkeypatch, limit, equal):
    """:func:`nuclear_ipm` asks for equal primal and dual steps up to ``_EQUAL_STEPS_MAX_ROWS`` live rows and
    for separate ones beyond (a limit below the problem's 42 rows shows the other side)."""
    pr = random_problem(6, 8, 10, seed=0)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index)
    assert cs.N == 42
    monkeypatch.setattr(ipm_driver, "EQUAL_STEPS_MAX_ROWS", limit)
    seen = []
    real = ipm_newton.next_step

    def spy(*args):
        seen.append(args[7])                 # equal_steps (the backend follows)
        return real(*args)

    monkeypatch.setattr(ipm_driver, "next_step", spy)
    res = ipm_driver.nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality)
    assert res.status == "optimal" and seen and all(e is equal for e in seen)


@pytest.mark.parametrize("large", [False, True])
def test_corrector_with_the_predictors_y_is_the_direction_with_y_recomputed(monkeypatch, large):
    """The corrector's second-order term reuses the predictor's ``Y``: the Mehrotra direction is bit for bit
    the one whose every ``sym(X Y)`` forms ``Y`` from its own ``dG`` (up to 64 as ``X Y``, beyond from the
    factors of ``XY_factors``)."""
    if large:
        rng = np.random.default_rng(21)
        N, r1, r2 = 120, 70, 4
        pb = ipm_problem.Problem(rng.standard_normal((N, r1)), rng.standard_normal((N, r2)), np.ones(N), np.zeros(N, bool))
    else:
        pr = random_problem(6, 8, 10, seed=4)
        cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index)
        pb = ipm_problem.reduce_problem(cs.U, cs.V, cs.rhs, cs.is_equality, {}).pb
    assert (pb.r1 + pb.r2 > ipm_problem.XY_DENSE_MAX) == large
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, None))
    du = ipm_problem.Dual(pb.A, pb.Bm, x.lam)
    _, _, mu, _ = ipm_driver.measure(pb, x, du, None, 1e-9, 1e-10)
    d1, sigma1 = ipm_newton.mehrotra_direction(ipm_newton.NewtonSystem(pb, x, du, True), mu)
    real_xy, real_f = ipm_problem.Problem.XY, ipm_problem.Problem.XY_factors
    monkeypatch.setattr(ipm_problem.Problem, "XY", lambda self, X, dG, du, Y=None, factors=None: real_xy(self, X, dG, du,
                                                                                                         None, factors))
    monkeypatch.setattr(ipm_problem.Problem, "XY_factors", lambda self, X, dG, du, Y=None: real_f(self, X, dG, du))
    d2, sigma2 = ipm_newton.mehrotra_direction(ipm_newton.NewtonSystem(pb, x, du, True), mu)
    assert sigma1 == sigma2
    for a, b in zip(d1, d2):
        assert np.array_equal(a, b)


def test_singular_values_and_norms_by_definition():
    """``singular_values`` (LAPACK gesdd directly) equals numpy's SVD, largest first; ``spectral_norm`` and the
    nuclear norm are its largest value and its sum; empty matrices give 0."""
    rng = np.random.default_rng(13)
    for shape in ((1, 1), (10, 6), (6, 10), (16, 16)):
        M = rng.standard_normal(shape)
        ref = np.linalg.svd(M, compute_uv=False)
        np.testing.assert_allclose(ipm_linalg.singular_values(M), ref, rtol=1e-13, atol=1e-14)
        assert ipm_linalg.spectral_norm(M) == pytest.approx(ref[0], rel=1e-13)
        assert ipm_linalg.nuclear_norm(M) == pytest.approx(ref.sum(), rel=1e-13)
        assert ipm_linalg.spectral_norm(M[:, :0]) == 0.0 and ipm_linalg.nuclear_norm(M[:0]) == 0.0
        assert ipm_linalg.singular_values(M[:0]).shape == (0,)
        U, sv, Vt = ipm_linalg.svd(M)                       # the thin SVD: M = U diag(s) Vt, orthonormal factors
        k = min(shape)
        assert U.shape == (shape[0], k) and Vt.shape == (k, shape[1])
        np.testing.assert_allclose((U * sv) @ Vt, M, atol=1e-13)
        np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-13)
        np.testing.assert_allclose(Vt @ Vt.T, np.eye(k), atol=1e-13)
        np.testing.assert_allclose(sv, ref, rtol=1e-13)
