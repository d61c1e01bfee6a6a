"""The nuclear IPM's Schur complement formed by blocks of rows (svm.barrier ``schur_block`` and
``_factor_schur``): every block equals the block of the definition ``M_kl = <A_k, X A_l Z^{-1}>``, on the
distinct queries and without them; the Newton solver formed block by block into one triangle solves
``(M + diag) y = r`` like the dense solve, including its shifted retry and its eigenvalue fallback."""

import numpy as np
import pytest

from attnsvm.svm.ipm import driver as ipm_driver
from attnsvm.svm.ipm import linalg as ipm_linalg
from attnsvm.svm.ipm import newton as ipm_newton
from attnsvm.svm.ipm import problem as ipm_problem


def _case(grouped: bool, seed: int = 3, N: int = 60):
    """A reduced problem of N rows (12 queries, mixed) at an interior iterate: ``(pb, x, du, M_def)`` with
    ``M_def (N, N)`` the Schur complement from the full block matrices ``X`` and ``Z^{-1}``."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((N, 7))
    V = np.repeat(rng.standard_normal((12, 5)), N // 12, axis=0)[rng.permutation(N)]
    red = ipm_problem.reduce_problem(U, V, np.ones(N), np.zeros(N, bool), {})
    pb = red.pb if grouped else ipm_problem.Problem(red.pb.A, red.pb.Bm, red.pb.rhs, red.pb.eq)
    assert (pb.qidx is not None) == grouped
    # X12 != 0: every term counts
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, rng.standard_normal((pb.r1, pb.r2))))
    assert np.abs(x.X12).min() > 0
    du = ipm_problem.Dual(pb.A, pb.Bm, x.lam)
    r1, r2 = pb.r1, pb.r2
    X = np.block([[x.X11, x.X12], [x.X12.T, x.X22]])
    Zi = 2.0 * np.block([[np.eye(r1) + du.C @ du.G.T, du.C], [du.C.T, du.Si]])
    Ak = [0.5 * np.block([[np.zeros((r1, r1)), np.outer(a, b)], [np.outer(b, a), np.zeros((r2, r2))]])
          for a, b in zip(pb.A, pb.Bm)]
    M_def = np.array([[np.sum(Ak[k] * (X @ Ak[m] @ Zi)) for m in range(N)] for k in range(N)])
    return pb, x, du, M_def


@pytest.fixture
def grouped_rows(monkeypatch):
    monkeypatch.setattr(ipm_problem, "GROUPED_MIN_ROWS", 60)
    monkeypatch.setattr(ipm_problem, "GROUPED_MAPS_MIN_ROWS", 60)


@pytest.mark.parametrize("grouped", [True, False])
def test_every_block_is_the_block_of_the_definition(grouped, grouped_rows):
    pb, x, du, M_def = _case(grouped)
    tol = 1e-12 * np.abs(M_def).max()
    parts = pb.schur_parts(x.X11, x.X12, x.X22, du)
    for I, J in [(slice(0, 7), slice(0, 7)), (slice(7, 30), slice(0, 30)), (slice(50, 60), slice(3, 41)),
                 (slice(None), slice(None))]:
        np.testing.assert_allclose(pb.schur_block(parts, I, J), M_def[I, J], rtol=0, atol=tol)
    np.testing.assert_allclose(pb.schur(x.X11, x.X12, x.X22, du), M_def, rtol=0, atol=tol)


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("rows", [1, 7, 128])
def test_newton_solver_by_blocks_solves_the_system(grouped, rows, grouped_rows, monkeypatch):
    """Blocks of 1, 7 and 128 rows (one block): the same solution as a dense solve of (M + diag) y = r."""
    monkeypatch.setattr(ipm_linalg, "SCHUR_BLOCK_ROWS", rows)
    pb, x, du, M_def = _case(grouped)
    rng = np.random.default_rng(1)
    diag = rng.uniform(0.0, 0.1, pb.N)
    r = rng.standard_normal(pb.N)
    y = pb.newton_solver(x, du, diag)(r)
    ref = np.linalg.solve(M_def + np.diag(diag), r)
    assert np.linalg.norm(y - ref) <= 1e-9 * np.linalg.norm(ref)


def test_newton_solver_forms_the_triangle_again_before_shifting(grouped_rows, monkeypatch):
    """A failed factorization destroys the triangle; the retry forms it again (plus the small shift): with
    the first two attempts forced to fail, the answer still equals the dense solve."""
    monkeypatch.setattr(ipm_linalg, "SCHUR_BLOCK_ROWS", 16)
    pb, x, du, M_def = _case(True, seed=4)
    real = ipm_linalg.sla.lapack.dpotrf
    calls = []

    def flaky(a, **kw):
        calls.append(1)
        out, info = real(a, **kw)
        return (out, 3) if len(calls) <= 2 else (out, info)

    monkeypatch.setattr(ipm_linalg.sla.lapack, "dpotrf", flaky)
    diag = np.full(pb.N, 0.1)
    r = np.random.default_rng(2).standard_normal(pb.N)
    y = pb.newton_solver(x, du, diag)(r)
    assert len(calls) == 3
    ref = np.linalg.solve(M_def + np.diag(diag), r)
    assert np.linalg.norm(y - ref) <= 1e-7 * np.linalg.norm(ref)


def test_newton_solver_falls_back_to_the_eigenvalue_solve(grouped_rows, monkeypatch):
    """Every factorization failing: the eigenvalue solve of the whole (mirrored) matrix."""
    monkeypatch.setattr(ipm_linalg, "SCHUR_BLOCK_ROWS", 16)
    pb, x, du, M_def = _case(True, seed=5)
    monkeypatch.setattr(ipm_linalg.sla.lapack, "dpotrf", lambda a, **kw: (a, 1))
    diag = np.full(pb.N, 0.1)
    r = np.random.default_rng(3).standard_normal(pb.N)
    y = pb.newton_solver(x, du, diag)(r)
    ref = np.linalg.solve(M_def + np.diag(diag), r)
    assert np.linalg.norm(y - ref) <= 1e-7 * np.linalg.norm(ref)


def test_successive_newton_solvers_share_the_triangle_and_each_solves_its_system(grouped_rows, monkeypatch):
    """The triangle's memory is kept for the next system of the same problem; the next system (another
    diagonal here) is formed and solved in it exactly."""
    monkeypatch.setattr(ipm_linalg, "SCHUR_BLOCK_ROWS", 16)
    pb, x, du, M_def = _case(True, seed=6)
    r = np.random.default_rng(4).standard_normal(pb.N)
    for shift in (0.5, 0.01):
        diag = np.full(pb.N, shift)
        y = pb.newton_solver(x, du, diag)(r)
        if shift == 0.5:
            buf = pb._schur_buf
        ref = np.linalg.solve(M_def + np.diag(diag), r)
        assert np.linalg.norm(y - ref) <= 1e-9 * np.linalg.norm(ref)
    assert pb._schur_buf is buf


def test_grouped_parts_and_the_newton_vector_never_form_A_C(grouped_rows):
    """On the distinct queries the Schur complement's parts and the Newton system's ``A(Z^{-1})`` are formed
    without ``A C`` (N x r2, two N x r x r products): the dual never forms it, and the system is still the
    definition's (the blocks test above) with ``g_k = 2 a_k^T C b_k``."""
    pb, x, du, M_def = _case(True, seed=7)
    assert pb.E is not None
    nw = ipm_newton.NewtonSystem(pb, x, du)
    assert "AC" not in vars(du)
    np.testing.assert_allclose(pb.schur(x.X11, x.X12, x.X22, du), M_def, rtol=0, atol=1e-12 * np.abs(M_def).max())
    g_def = 2.0 * np.array([a @ du.C @ b for a, b in zip(pb.A, pb.Bm)])
    np.testing.assert_allclose(nw.g, g_def, rtol=1e-12, atol=1e-12 * np.abs(g_def).max())
    # without the distinct queries A C is formed on demand, as (A G) S^{-1}
    pb2, x2, du2, _ = _case(False, seed=7)
    nw2 = ipm_newton.NewtonSystem(pb2, x2, du2)
    np.testing.assert_allclose(du2.AC, pb2.A @ du2.C, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(nw2.g, 2.0 * np.array([a @ du2.C @ b for a, b in zip(pb2.A, pb2.Bm)]), rtol=1e-12,
                               atol=1e-12)


def _near_case(seed: int):
    """A reduced problem of 60 rows (35 = r1 r2 unknowns) and a primal point M violating its first 12 rows by at
    most 1e-9 and satisfying the others with a slack of 1 (the clean-up's rows: the first 12)."""
    pb, x, du, _ = _case(True, seed=seed)
    M = x.X12.copy()
    pb.rhs = pb.amap(M) - 1.0
    pb.rhs[:12] += 1.0 + np.random.default_rng(seed).uniform(1e-10, 1e-9, 12)
    return pb, M, x.lam


def test_clean_up_reuses_the_factor_of_the_same_near_rows_only(grouped_rows, monkeypatch):
    """The clean-up's Gram factor is formed once for the same near rows (the answer bit for bit that of a fresh
    factor) and formed again when they change; the correction is the least-norm one either way."""
    pb, M, lam = _near_case(8)
    calls = []
    real = ipm_linalg.factor_lower

    def counted(*a, **kw):
        calls.append(a[1])
        return real(*a, **kw)

    monkeypatch.setattr(ipm_problem, "factor_lower", counted)
    out1 = ipm_driver.clean_primal(pb, M, lam, 1e-10)
    M2 = M + 1e-12 * np.random.default_rng(1).standard_normal(M.shape)     # same near rows, another point
    out2 = ipm_driver.clean_primal(pb, M2, lam, 1e-10)
    assert calls == [12]
    pb._clean_factor = None
    fresh = ipm_driver.clean_primal(pb, M2, lam, 1e-10)
    assert calls == [12, 12]
    np.testing.assert_array_equal(out2[0], fresh[0])
    for out, Mi in ((out1, M), (out2, M2)):
        assert out[1] <= 1e-13                                      # violations of ~1e-9 removed to rounding
        D = out[0] - Mi                                             # the least-norm correction: in the near rows' span
        coef = np.linalg.lstsq(np.stack([np.outer(a, b).ravel() for a, b in zip(pb.A[:12], pb.Bm[:12])], 1),
                               D.ravel(), rcond=None)[0]
        in_span = sum(c * np.outer(a, b).ravel() for c, a, b in zip(coef, pb.A[:12], pb.Bm[:12]))
        assert np.linalg.norm(D.ravel() - in_span) <= 1e-4 * np.linalg.norm(D)     # D = out - M: M's rounding
    # other near rows (the first three now clearly slack): a new factor, of those rows
    pb.rhs = pb.rhs.copy()
    pb.rhs[:3] -= 1.0
    out3 = ipm_driver.clean_primal(pb, M2, lam, 1e-10)
    assert calls == [12, 12, 9]
    assert out3[1] <= 1e-13
