"""Nuclear-norm SVMs: the structured interior-point solver against the full-variable reference.

Checked: agreement with tests/svm_reference.py (cvxpy + Clarabel over the full d x d
variable) to 1e-6 relative for Att-SVM (cross and self attention), Gen-SVM with
equality rows and W_fin; KKT and duality gap from an independent recomputation;
rank(W_nuc) <= rank(W_fro) <= n; infeasible selections; the Schur-complement formula
of the interior-point method; degenerate and badly scaled inputs.
"""

import cvxpy as cp
import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.generators import random_problem
from attnsvm.svm import solve_fin, solve_gen_svm, solve_seq_svm, solve_svm
from attnsvm.svm.analysis import matrix_rank
from attnsvm.svm.ipm import Dual, Problem, nuclear_ipm
from attnsvm.svm import att_constraints, gen_constraints
from attnsvm.svm.nuclear import solve_nuclear
from svm_reference import reference_att_svm, reference_gen_svm


def nuc(W):
    return float(np.linalg.svd(W, compute_uv=False).sum())


def check_kkt(sol, tol=1e-8):
    """Independent optimality check: feasibility, ||sum lam_k u_k w_k^T||_2 <= 1, zero gap."""
    assert sol.status == "optimal" and sol.norm == "nuclear"
    cs, lam, W = sol.constraints, sol.duals, sol.W
    m = np.array([cs.U[k] @ W @ cs.V[k] for k in range(cs.N)])
    eq = cs.is_equality
    assert np.all(m[~eq] >= cs.rhs[~eq] - 1e-9)
    assert np.allclose(m[eq], cs.rhs[eq], atol=1e-9, rtol=0)
    assert np.all(lam[~eq] >= 0)
    S = sum(lam[k] * np.outer(cs.U[k], cs.V[k]) for k in range(cs.N))
    assert np.linalg.norm(S, 2) <= 1 + 1e-9
    primal, dual = nuc(W), float(cs.rhs @ lam)
    assert primal - dual <= tol * max(1.0, primal)
    assert primal >= dual - 1e-9 * max(1.0, primal)  # weak duality: the pair is consistent
    c = sol.certificate
    assert c.max_violation <= 1e-9 and c.duality_gap <= tol and c.stationarity_residual <= tol
    assert sol.info["solver"] == "ipm" and sol.info["solver_status"] == "optimal"


@pytest.mark.parametrize("n,T,d,seed,mode", [(3, 4, 5, 0, "cross"), (5, 6, 8, 1, "cross"), (4, 5, 7, 2, "self"),
                                             (6, 4, 6, 3, "self"), (2, 6, 9, 4, "cross")])
def test_att_svm_matches_reference(n, T, d, seed, mode):
    pr = random_problem(n, T, d, seed, mode=mode)
    sel = pr.optimal_tokens().index
    sol = solve_svm(pr, norm="nuclear")
    Wr = reference_att_svm(pr.X, pr.queries, sel, norm="nuclear", solver="CLARABEL")
    if Wr is None:
        assert sol.status == "infeasible"
        return
    ref = nuc(Wr)
    assert abs(sol.norm_value - ref) <= 1e-6 * ref
    check_kkt(sol)


@pytest.mark.parametrize("seed,mode", [(0, "cross"), (1, "self"), (2, "cross")])
def test_gen_svm_with_ties_matches_reference(seed, mode):
    pr = random_problem(4, 6, 8, seed, mode=mode)
    rng = np.random.default_rng(seed)
    O = np.zeros((4, 6), bool)
    O[np.arange(4), pr.optimal_tokens().index] = True
    O[rng.integers(0, 4, 3), rng.integers(0, 6, 3)] = True
    sol = solve_gen_svm(pr, O, norm="nuclear")
    Wr = reference_gen_svm(pr.X, pr.queries, O, norm="nuclear")
    if Wr is None:
        assert sol.status == "infeasible"
        return
    assert sol.constraints.is_equality.any()
    assert abs(sol.norm_value - nuc(Wr)) <= 1e-6 * nuc(Wr)
    check_kkt(sol)


def test_fin_matches_reference_and_reproduces_ratios():
    n, T, d = 4, 5, 7
    pr = random_problem(n, T, d, seed=4)
    O = np.zeros((n, T), bool)
    O[:, 0] = True
    O[0, 2] = O[1, 3] = O[3, 1] = O[3, 4] = True
    rng = np.random.default_rng(1)
    s = rng.random((n, T)) + 0.1
    s /= s.sum(1, keepdims=True)
    sol = solve_fin(pr, O, s, norm="nuclear")
    check_kkt(sol)
    Z = pr.queries
    W = cp.Variable((d, d))
    cons = []
    for i in range(n):
        sel = np.flatnonzero(O[i])
        for a in sel:
            for b in sel:
                lhs = (pr.X[i, a] - pr.X[i, b]) @ sol.W @ Z[i]
                assert abs(lhs - np.log(s[i, a] / s[i, b])) < 1e-9
                if a < b:
                    cons.append((pr.X[i, a] - pr.X[i, b]) @ W @ Z[i] == np.log(s[i, a] / s[i, b]))
    cp.Problem(cp.Minimize(cp.normNuc(W)), cons).solve(solver="CLARABEL")
    assert abs(sol.norm_value - nuc(W.value)) <= 1e-6 * nuc(W.value)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rank_nuclear_below_frobenius_below_n(seed):
    pr = random_problem(6, 5, 12, seed)
    fro, nu = solve_svm(pr), solve_svm(pr, norm="nuclear")
    assert matrix_rank(nu.W) <= matrix_rank(fro.W) <= pr.n
    assert nu.norm_value <= nuc(fro.W) + 1e-9
    assert np.linalg.norm(fro.W) <= np.linalg.norm(nu.W) + 1e-9
    # the interior-point solution carries no spurious singular values
    sv = np.linalg.svd(nu.W, compute_uv=False)
    r = matrix_rank(nu.W)
    assert r == sv.size or sv[r] <= 1e-8 * sv[0]


def test_infeasible_returns_farkas_certificate():
    sol = solve_svm(random_problem(5, 5, 1, seed=0), norm="nuclear")
    assert sol.status == "infeasible" and sol.norm == "nuclear" and sol.W is None
    f = sol.certificate.farkas
    cs = sol.constraints
    assert f is not None and np.all(f[~cs.is_equality] >= -1e-12)
    assert np.linalg.norm(cs.combine(f)) <= 1e-8 and abs(cs.rhs @ f - 1) < 1e-8
    pr = random_problem(3, 4, 5, seed=1)
    X = pr.X.copy()
    X[1, 3] = X[1, 0]
    bad = solve_svm(pr.replace(X=X), np.array([1, 0, 2]), norm="nuclear")
    assert bad.status == "infeasible" and len(bad.certificate.offending) == 1


def test_solvers_agree_and_bad_solver_name():
    pr = random_problem(4, 5, 6, seed=6)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index)
    a = solve_nuclear(cs)
    b = solve_nuclear(cs, solver="cvxpy")
    assert b.info["solver"] == "CLARABEL"
    assert abs(a.norm_value - b.norm_value) <= 1e-7 * b.norm_value
    with pytest.raises(ValidationError, match="solver"):
        solve_nuclear(cs, solver="mosek")


@pytest.mark.parametrize("causal", [False, True])
def test_seq_svm_matches_conic_path(causal):
    X = random_problem(2, 4, 6, seed=2).X
    rng = np.random.default_rng(3)
    sel = rng.integers(0, 4, (2, 4))
    if causal:
        sel = np.minimum(sel, np.arange(4)[None, :])
    sol = solve_seq_svm(X, sel, causal=causal, norm="nuclear")
    if sol.status != "optimal":
        return
    ref = solve_nuclear(sol.constraints, solver="CLARABEL")
    assert abs(sol.norm_value - ref.norm_value) <= 1e-6 * ref.norm_value
    check_kkt(sol)


def test_degenerate_and_scaled_inputs():
    pr = random_problem(4, 5, 6, seed=3)
    # every token selected: only ties with rhs 0, W = 0
    triv = solve_gen_svm(pr, np.ones((4, 5), bool), norm="nuclear")
    assert triv.status == "optimal" and triv.norm_value == 0 and np.all(triv.W == 0)
    # a duplicate token inside a selected set: a tie row with u = 0
    X = pr.X.copy()
    X[0, 1] = X[0, 0]
    O = np.zeros((4, 5), bool)
    O[:, 0] = True
    O[0, 1] = O[2, 3] = True
    cs = gen_constraints(X, pr.queries, O)
    assert np.any(np.all(cs.U == 0, axis=1))
    sol = solve_nuclear(cs)
    check_kkt(sol)
    # tokens in a 3-dim subspace of R^10 (rank-deficient U) and d > N (basis of the u's)
    rng = np.random.default_rng(0)
    Xl = rng.standard_normal((6, 5, 3)) @ rng.standard_normal((3, 10))
    check_kkt(solve_nuclear(att_constraints(Xl, rng.standard_normal((6, 10)), np.zeros(6, int))))
    small = random_problem(2, 3, 30, seed=1)
    check_kkt(solve_svm(small, norm="nuclear"))
    # scaling X by c scales W by 1/c (up to the tolerance)
    base = solve_svm(pr, norm="nuclear")
    for c in (1e-3, 1e3):
        sc = solve_svm(pr.replace(X=pr.X * c), pr.optimal_tokens().index, norm="nuclear")
        assert abs(sc.norm_value * c - base.norm_value) <= 1e-8 * base.norm_value
        check_kkt(sc)


def test_schur_complement_formula():
    """``M_kl = <A_k, X A_l Z^{-1}>`` with ``A_k = sym([[0, a_k b_k^T], [0, 0]])`` computed by brute force."""
    rng = np.random.default_rng(1)
    N, r1, r2 = 12, 5, 3
    A, Bm = rng.standard_normal((N, r1)), rng.standard_normal((N, r2))
    pb = Problem(A, Bm, np.ones(N), np.zeros(N, bool))
    lam = rng.random(N)
    lam *= 0.7 / np.linalg.norm(pb.Gmap(lam), 2)
    du = Dual(A, Bm, lam)
    R = rng.standard_normal((r1 + r2, r1 + r2))
    X = R @ R.T + np.eye(r1 + r2)
    M = pb.schur(X[:r1, :r1], X[:r1, r1:], X[r1:, r1:], du)
    Z = 0.5 * np.block([[np.eye(r1), -du.G], [-du.G.T, np.eye(r2)]])
    Zi = np.linalg.inv(Z)

    def Ak(k):
        T = np.zeros((r1 + r2, r1 + r2))
        T[:r1, r1:] = 0.5 * np.outer(A[k], Bm[k])
        return T + T.T

    brute = np.array([[np.sum(Ak(k) * (X @ Ak(l) @ Zi)) for l in range(N)] for k in range(N)])
    assert np.allclose(M, brute, rtol=1e-12, atol=1e-12 * np.abs(brute).max())


def test_ipm_reports_limits():
    pr = random_problem(5, 6, 8, seed=1)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index)
    res = nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, max_iter=3)
    assert res.status == "inaccurate" and res.info["stopped"] == "iteration limit"
    assert res.W.shape == (8, 8) and np.all(res.lam >= 0)
    assert np.linalg.norm(cs.combine(res.lam), 2) < 1  # the dual iterate is always feasible


def test_schur_complement_on_distinct_queries_matches_its_definition(monkeypatch):
    """The IPM's N x N Schur complement M_kl = <A_k, X A_l Z^{-1}>: built on the distinct queries
    (rows sharing a query, as one query per sample gives; grouped here from 60 rows on) it equals the
    product of the full block matrices, and the path without groups gives the same matrix."""
    from attnsvm.svm.ipm import problem as ipm_problem

    monkeypatch.setattr(ipm_problem, "GROUPED_MIN_ROWS", 60)

    rng = np.random.default_rng(3)
    U = rng.standard_normal((60, 7))
    V = np.repeat(rng.standard_normal((12, 5)), 5, axis=0)[rng.permutation(60)]  # 12 queries, 5 rows each, mixed
    red = ipm_problem.reduce_problem(U, V, np.ones(60), np.zeros(60, bool), {})
    pb = red.pb
    assert pb.qidx is not None and pb.Bq.shape[0] == 12
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, None))
    du = ipm_problem.Dual(pb.A, pb.Bm, x.lam)
    M = pb.schur(x.X11, x.X12, x.X22, du)
    M_plain = ipm_problem.Problem(pb.A, pb.Bm, pb.rhs, pb.eq).schur(x.X11, x.X12, x.X22, du)
    assert ipm_problem.Problem(pb.A, pb.Bm, pb.rhs, pb.eq).qidx is None
    np.testing.assert_allclose(M, M_plain, rtol=1e-12, atol=1e-13 * np.abs(M_plain).max())
    r1, r2 = pb.r1, pb.r2
    X = np.block([[x.X11, x.X12], [x.X12.T, x.X22]])
    Zi = 2.0 * np.block([[np.eye(r1) + du.C @ du.G.T, du.C], [du.C.T, du.Si]])
    Z = 0.5 * np.block([[np.eye(r1), -du.G], [-du.G.T, np.eye(r2)]])
    np.testing.assert_allclose(Zi @ Z, np.eye(r1 + r2), atol=1e-10)

    def Ak(k):
        out = np.zeros((r1 + r2, r1 + r2))
        out[:r1, r1:] = 0.5 * np.outer(pb.A[k], pb.Bm[k])
        return out + out.T

    for k, l in [(0, 0), (0, 1), (3, 17), (59, 4), (22, 23)]:
        ref = np.trace(Ak(k) @ X @ Ak(l) @ Zi)
        assert M[k, l] == pytest.approx(ref, rel=1e-10, abs=1e-12 * np.abs(M).max())


def _lmi_step_by_definition(G, dG, cap):
    """Largest alpha <= cap with ||G + alpha dG||_2 < 1, by bisection on the spectral norm itself."""
    if np.linalg.norm(G + cap * dG, 2) < 1:
        return cap
    lo, hi = 0.0, cap
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.linalg.norm(G + mid * dG, 2) < 1 else (lo, mid)
    return lo


@pytest.mark.parametrize("eig_max", [64, 0])
def test_dual_step_bound_is_the_distance_to_the_spectral_ball(eig_max, monkeypatch):
    """The dual step of the IPM (exact from one eigenvalue for small reduced sizes, bisection on Cholesky
    tests beyond) is where ||G + alpha dG||_2 reaches 1; a wrong congruence would miss it."""
    from attnsvm.svm.ipm import steps as ipm_steps

    monkeypatch.setattr(ipm_steps, "LMI_EIG_MAX", eig_max)
    rng = np.random.default_rng(4)
    hit = 0
    for _ in range(40):
        r1, r2 = (int(v) for v in rng.integers(1, 7, 2))
        G = rng.standard_normal((r1, r2))
        G *= rng.uniform(0.1, 0.95) / np.linalg.norm(G, 2)
        dG = rng.standard_normal((r1, r2)) * rng.uniform(0.05, 4.0)
        a = ipm_steps.lmi_step(G, dG, 1.0, rtol=1e-9)
        ref = _lmi_step_by_definition(G, dG, 1.0)
        assert a == pytest.approx(ref, rel=1e-6, abs=1e-12)
        hit += a < 1.0
    assert hit >= 10          # the boundary case is exercised, not only the full step


def test_cholesky_helper_refuses_indefinite_matrices():
    from attnsvm.svm.ipm import chol

    A = np.array([[2.0, 1.0], [1.0, 2.0]])
    L = chol(A)
    assert np.allclose(L @ L.T, A) and np.allclose(np.triu(L, 1), 0)
    assert chol(np.array([[1.0, 2.0], [2.0, 1.0]])) is None
    assert chol(np.array([[1.0, 0.0], [0.0, np.nan]])) is None
