"""The nuclear IPM's mixed-precision Newton solves (svm/barrier.py ``_Problem.schur_matvec``, ``_mixed_solver``):
the float64 matvec from the Schur complement's low-rank parts equals the dense matrix's product, the float32 factor
with conjugate-gradient refinement gives the float64 direct solve's direction, a failed float32 factorization or an
unconverged refinement falls back to the float64 solve, a solve on the mixed path is certified with the float64
path's objective, and below the row threshold the float64 path is the only one taken."""

import numpy as np
import pytest

import attnsvm.svm.barrier as b
from attnsvm.generators import planted_problem
from attnsvm.svm import att_constraints
from attnsvm.svm.nuclear import nuclear_certificate


def _iterate(grouped: bool, seed: int = 3, N: int = 240, q: int = 30):
    """A reduced problem of N rows (q queries) at an interior iterate with X12 != 0: ``(pb, x, du, parts)``."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((N, 20))
    V = np.repeat(rng.standard_normal((q, 16)), N // q, axis=0)[rng.permutation(N)]
    red = b._reduce(U, V, np.ones(N), np.zeros(N, bool), {})
    pb = red.pb if grouped else b._Problem(red.pb.A, red.pb.Bm, red.pb.rhs, red.pb.eq)
    assert (pb.qidx is not None) == grouped
    x = b._Iterate(*b._start(pb, None, rng.standard_normal((pb.r1, pb.r2))))
    du = b._Dual(pb.A, pb.Bm, x.lam)
    return pb, x, du, pb.schur_parts(x.X11, x.X12, x.X22, du)


@pytest.mark.parametrize("grouped", [True, False])
def test_the_low_rank_matvec_is_the_dense_schur_complements_product(grouped):
    pb, x, du, parts = _iterate(grouped)
    M = pb.schur(x.X11, x.X12, x.X22, du)
    V = np.random.default_rng(0).standard_normal((pb.N, 3))
    for v in V.T:
        ref = M @ v
        got = pb.schur_matvec(parts, v)
        assert got.shape == (pb.N,) and got.dtype == np.float64
        assert np.linalg.norm(got - ref) <= 1e-12 * np.linalg.norm(ref)


def _rhs(pb, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(1e-3, 1e-1, pb.N), rng.standard_normal(pb.N)


@pytest.mark.parametrize("grouped", [True, False])
def test_the_mixed_direction_is_the_float64_direct_solves(grouped, monkeypatch):
    monkeypatch.setattr(b, "_MIXED_MIN_ROWS", 200)
    monkeypatch.setattr(b, "_MIXED_ROWS_PER_CG", 10)      # these small systems' break-even is not the probe's
    pb, x, du, parts = _iterate(grouped)
    diag, r = _rhs(pb)
    y = pb.newton_solver(x, du, diag)(r)
    assert pb._schur_buf32 is not None and getattr(pb, "_mixed_fails", 0) == 0   # the mixed path, no fallback
    ref = pb._float64_solver(parts, diag)(r)
    assert np.linalg.norm(y - ref) <= 1e-10 * np.linalg.norm(ref)
    M = pb.schur(x.X11, x.X12, x.X22, du) + np.diag(diag)
    assert np.linalg.norm(M @ y - r) <= 1e-12 * np.linalg.norm(r)


def test_a_failed_float32_factorization_falls_back_to_float64(monkeypatch):
    """spotrf failing (as on a nearly singular M): the float64 factor solves the system, and the problem keeps the
    float64 path from then on."""
    monkeypatch.setattr(b, "_MIXED_MIN_ROWS", 200)
    monkeypatch.setattr(b, "_MIXED_ROWS_PER_CG", 10)      # these small systems' break-even is not the probe's
    pb, x, du, parts = _iterate(True, seed=4)
    monkeypatch.setattr(b.sla.lapack, "spotrf", lambda a, **kw: (a, 5))
    diag, r = _rhs(pb, 2)
    y = pb.newton_solver(x, du, diag)(r)
    assert pb._mixed_fails >= b._MIXED_MAX_FAILS and pb._schur_buf is not None
    M = pb.schur(x.X11, x.X12, x.X22, du) + np.diag(diag)
    ref = np.linalg.solve(M, r)
    assert np.linalg.norm(y - ref) <= 1e-10 * np.linalg.norm(ref)


def test_a_nearly_singular_system_the_refinement_cannot_meet_falls_back_to_float64(monkeypatch):
    """Two rows made equal up to 1e-4 and no diagonal: M is nearly singular (the float32 factor still exists);
    with a refinement budget of one iteration the answer is not float64-accurate, so the solve falls back (counted)
    and its answer is the float64 solve's."""
    monkeypatch.setattr(b, "_MIXED_MIN_ROWS", 200)
    monkeypatch.setattr(b, "_MIXED_ROWS_PER_CG", 10)      # these small systems' break-even is not the probe's
    monkeypatch.setattr(b, "_MIXED_MAX_CG", 1)
    pb, x, du, _ = _iterate(False, seed=5)
    pb.A[1] = pb.A[0] + 1e-4
    pb.Bm[1] = pb.Bm[0]
    du = b._Dual(pb.A, pb.Bm, x.lam)
    parts = pb.schur_parts(x.X11, x.X12, x.X22, du)
    diag, r = np.zeros(pb.N), np.random.default_rng(3).standard_normal(pb.N)
    y = pb.newton_solver(x, du, diag)(r)
    assert pb._mixed_fails == 1 and pb._schur_buf32 is None
    ref = pb._float64_solver(parts, diag)(r)
    assert np.array_equal(y, ref)


def test_pcg_reports_an_unconverged_solve():
    """``_pcg`` with a useless preconditioner and too few iterations says so (never accepted silently)."""
    rng = np.random.default_rng(6)
    Q = np.linalg.qr(rng.standard_normal((50, 50)))[0]
    M = Q @ np.diag(np.logspace(0, 3, 50)) @ Q.T
    b_ = rng.standard_normal(50)
    y, rel, it, ok = b._pcg(lambda v: M @ v, lambda v: v, b_, 25)
    assert not ok and rel > b._MIXED_RTOL
    y, rel, it, ok = b._pcg(lambda v: M @ v, lambda v: np.linalg.solve(M, v), b_, 25)
    assert ok and np.linalg.norm(M @ y - b_) <= 1e-12 * np.linalg.norm(b_)


def _planted():
    pr, sel, _ = planted_problem(20, 16, 24, seed=2)     # 300 rows, r1 r2 = 480 > N as on the probe
    return att_constraints(pr.X, pr.Z, sel)


def test_a_solve_on_the_mixed_path_is_certified_with_the_float64_objective(monkeypatch):
    cs = _planted()
    cs_n, sc = cs.normalized()
    ref = b.nuclear_ipm(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality)
    calls = []
    real = b._Problem._mixed_solver

    def spy(self, parts, diag):
        out = real(self, parts, diag)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(b._Problem, "_mixed_solver", spy)
    monkeypatch.setattr(b, "_MIXED_MIN_ROWS", 200)
    monkeypatch.setattr(b, "_MIXED_ROWS_PER_CG", 10)      # these small systems' break-even is not the probe's
    res = b.nuclear_ipm(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality)
    assert sum(calls) >= 5                                       # the mixed path solved most systems
    assert res.status == ref.status == "optimal"
    n_ref, n_mix = b._nuclear_norm(ref.W), b._nuclear_norm(res.W)
    assert abs(n_mix - n_ref) <= 1e-8 * n_ref
    cert, _ = nuclear_certificate(cs, sc.W(res.W), sc.lam(res.lam, "norm"))
    assert cert.max_violation <= 1e-9 and cert.duality_gap <= 1e-8


def test_below_the_threshold_only_the_float64_path_is_taken(monkeypatch):
    """The small solves keep their arithmetic: below ``_MIXED_MIN_ROWS`` the mixed path is never entered."""
    def boom(self, parts, diag):
        raise AssertionError("mixed path below the threshold")

    monkeypatch.setattr(b._Problem, "_mixed_solver", boom)
    cs = _planted()
    cs_n, _ = cs.normalized()
    assert cs.N < b._MIXED_MIN_ROWS
    assert b.nuclear_ipm(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality).status == "optimal"


def test_a_problem_whose_schur_complement_is_singular_by_rank_keeps_float64(monkeypatch):
    """``r1 r2 < N``: M has rank <= r1 r2 and only the diagonal keeps the system definite; such a problem is not
    given to the float32 factor, whatever its rows."""
    def boom(self, parts, diag):
        raise AssertionError("mixed path for a rank-deficient M")

    monkeypatch.setattr(b, "_MIXED_MIN_ROWS", 200)
    pb, x, du, parts = _iterate(True)
    monkeypatch.setattr(pb, "r2", pb.N // pb.r1 - 1)          # as if r1 r2 < N
    monkeypatch.setattr(b._Problem, "_mixed_solver", boom)
    diag, r = _rhs(pb)
    y = pb.newton_solver(x, du, diag)(r)
    assert np.array_equal(y, pb._float64_solver(parts, diag)(r))
