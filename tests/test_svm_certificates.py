"""Certificates that can fail: the Frobenius stationarity residual is computed from the returned W
and multipliers, and a W (or multipliers) that do not belong together fails the certificate."""

import numpy as np
import pytest

from attnsvm.problem import TokenProblem
from attnsvm.svm import (CERTIFIED_GAP, CERTIFIED_STATIONARITY, CERTIFIED_VIOLATION, certificate_passes, certify,
                         solve, solve_svm, solve_svm_batch)
from attnsvm.errors import ValidationError


def _solved(seed=0, n=5, T=4, d=6, **options):
    rng = np.random.default_rng(seed)
    X, Z = rng.standard_normal((n, T, d)), rng.standard_normal((n, d))
    sol = solve_svm(TokenProblem(X, Z), np.zeros(n, int), **options)
    assert sol.status == "optimal" and sol.certified
    return sol


def _orthogonal_direction(cs, seed=1):
    """A unit matrix E (d1, d2) with <E, u_k w_k^T> = 0 for every row: margins do not see it."""
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((cs.d1, cs.d2))
    c = np.linalg.lstsq(cs.gram(), cs.evaluate(R), rcond=None)[0]
    E = R - cs.combine(c)
    assert np.abs(cs.evaluate(E)).max() < 1e-12 * np.linalg.norm(E)
    return E / np.linalg.norm(E)


def test_certify_reproduces_the_solvers_certificate():
    sol = _solved()
    cert = certify(sol.constraints, sol.W, sol.duals, "fro")
    assert cert.stationarity_residual <= 1e-14
    assert cert.duality_gap == pytest.approx(sol.certificate.duality_gap, abs=1e-15)
    assert certificate_passes(cert, "fro")


def test_corrupted_W_fails_by_the_residual_alone():
    sol = _solved()
    cs = sol.constraints
    # move W off the multipliers' combination, inside the null space of the rows: margins unchanged and the
    # objective changes only to second order, so violation and gap still pass; stationarity must not
    W_bad = sol.W + 1e-5 * np.linalg.norm(sol.W) * _orthogonal_direction(cs)
    cert = certify(cs, W_bad, sol.duals, "fro")
    assert cert.max_violation <= CERTIFIED_VIOLATION
    assert cert.duality_gap <= CERTIFIED_GAP["fro"]
    assert cert.stationarity_residual == pytest.approx(1e-5, rel=1e-3)
    assert cert.stationarity_residual > CERTIFIED_STATIONARITY["fro"]
    assert not certificate_passes(cert, "fro")


def test_corrupted_multipliers_fail():
    sol = _solved()
    lam = sol.duals.copy()
    k = int(np.argmax(lam))
    lam[k] *= 1 + 1e-4
    cert = certify(sol.constraints, sol.W, lam, "fro")
    assert cert.stationarity_residual > 1e-6
    assert not certificate_passes(cert, "fro")


def test_residual_is_relative_and_scale_free():
    sol = _solved()
    cs = sol.constraints
    E = _orthogonal_direction(cs)
    for c in (1e-150, 1.0, 1e150):
        cs_c = type(cs)(cs.U * c, cs.V, cs.rhs, cs.is_equality, cs.sample, cs.query, cs.token, cs.other, cs.kind,
                        cs.shape)
        sol_c = solve(cs_c)
        assert sol_c.certified
        W_bad = sol_c.W + 1e-5 * np.linalg.norm(sol_c.W) * E
        assert certify(cs_c, W_bad, sol_c.duals).stationarity_residual == pytest.approx(1e-5, rel=1e-3)


def test_working_set_and_batch_paths_report_a_real_residual():
    sol = _solved(seed=3, n=30, T=5, d=12, method="working_set")
    assert sol.info["method"] == "working-set"
    assert 0.0 <= sol.certificate.stationarity_residual <= CERTIFIED_STATIONARITY["fro"]
    # the working-set residual reads the returned multipliers (N,): corrupting them is seen
    from attnsvm.svm.settings import SolverSettings
    from attnsvm.svm.working_set import _returned_residual, _Setup
    setup = _Setup(sol.constraints, SolverSettings())
    assert _returned_residual(setup, sol.duals, sol.W) <= 1e-12
    lam = sol.duals.copy()
    lam[int(np.argmax(lam))] *= 1 + 1e-4
    assert _returned_residual(setup, lam, sol.W) > 1e-6
    rng = np.random.default_rng(4)
    X, Z = rng.standard_normal((3, 6, 4, 5)), rng.standard_normal((3, 6, 5))
    b = solve_svm_batch(X, Z, np.zeros((3, 6), int))
    for status, cert in zip(b.status, b.certificates):
        if status != "infeasible":
            assert cert.stationarity_residual <= CERTIFIED_STATIONARITY["fro"]


def test_status_follows_the_residual():
    from attnsvm.svm.solution import status_from
    sol = _solved()
    W_bad = sol.W + 1e-5 * np.linalg.norm(sol.W) * _orthogonal_direction(sol.constraints)
    assert status_from(certify(sol.constraints, W_bad, sol.duals), "fro") == "optimal_inaccurate"


def test_certify_validates_at_the_boundary():
    sol = _solved()
    with pytest.raises(ValidationError, match="W must have shape"):
        certify(sol.constraints, sol.W[:-1], sol.duals)
    with pytest.raises(ValidationError, match="duals must have shape"):
        certify(sol.constraints, sol.W, sol.duals[:-1])
    with pytest.raises(ValidationError, match="constraints must be a ConstraintSet"):
        certify(None, sol.W, sol.duals)


def test_reprs_show_no_arrays():
    rng = np.random.default_rng(0)
    X, Z = 1e3 * rng.standard_normal((40, 8, 30)), rng.standard_normal((40, 30))
    sol = solve_svm(TokenProblem(X, Z), np.zeros(40, int))
    r = repr(sol)
    for part in ("status='optimal'", "W=(30, 30)", "N=280", "objective=", "violation=", "gap=", "residual=",
                 "support="):
        assert part in r
    assert "[" not in r and "array" not in r and len(r) < 400
    rc = repr(sol.certificate)
    assert "residual=" in rc and "[" not in rc and len(rc) < 300
    bad = np.zeros(40, int)
    Xi = X.copy()
    Xi[:, 1] = Xi[:, 0]                      # a duplicate of the selected token: infeasible
    inf = solve_svm(TokenProblem(Xi, Z), bad)
    assert inf.status == "infeasible"
    assert "W=None" in repr(inf) and "[" not in repr(inf.certificate)


def test_nuclear_dual_value_uses_the_clipped_multipliers_ball():
    """The nuclear certificate's dual value scales the clipped multipliers into the dual ball by their own
    spectral norm: feasible multipliers reuse ``||S||_2``, a negative inequality multiplier changes it (the
    gap then equals the one computed from the definition)."""
    from attnsvm.svm.result import nuclear_certificate

    rng = np.random.default_rng(2)
    N, d = 9, 4
    U, V = rng.standard_normal((N, d)), rng.standard_normal((N, d))
    b, eq = np.ones(N), np.zeros(N, bool)
    W = rng.standard_normal((d, d))
    slack = np.einsum("ki,ij,kj->k", U, W, V) - b
    nuc = np.linalg.svd(W, compute_uv=False).sum()
    for lam in (rng.random(N), rng.standard_normal(N)):
        lam_f = np.maximum(lam, 0.0)
        spec_f = np.linalg.norm((U * lam_f[:, None]).T @ V, 2)
        dual = (b @ lam_f) / max(1.0, spec_f)
        cert, nuc_c = nuclear_certificate(violation=0.0, U=U, V=V, b=b, eq=eq, lam=lam, slack=slack, W=W)
        assert nuc_c == pytest.approx(nuc, rel=1e-14)
        assert cert.duality_gap == pytest.approx(abs(nuc - dual) / max(abs(nuc), abs(dual)), rel=1e-9)
