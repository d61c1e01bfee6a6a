"""Frobenius solvers: agreement with the full-variable reference, KKT, batch, infeasibility, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attnsvm.generators import random_problem
from attnsvm.svm import (
    solve_gen_svm, solve_seq_svm, solve_svm, solve_svm_batch, solve_v_svm, solve_p_svm,
)
from attnsvm.svm import att_constraints
from attnsvm.svm.analysis import matrix_rank
from attnsvm.svm.frobenius import solve_frobenius
from svm_reference import reference_att_svm, reference_gen_svm, reference_seq_svm, reference_vector_svm


def kkt_ok(sol, tol=1e-9):
    c = sol.certificate
    cs = sol.constraints
    assert sol.status == "optimal"
    assert c.max_violation <= tol
    assert c.dual_infeasibility <= tol
    # lam_k * (margin_k - rhs_k): the margins carry rounding of order eps * ||W||, so judge per unit of multiplier mass
    assert c.complementarity <= 1e-9 * max(1.0, float(np.abs(sol.duals).sum()))
    assert c.duality_gap <= 1e-9
    # stationarity, checked independently: W = sum lam u w^T
    S = sum(sol.duals[k] * np.outer(cs.U[k], cs.V[k]) for k in range(cs.N))
    W = sol.W if sol.W is not None else sol.solution[:, None]
    assert np.linalg.norm(W - S) <= 1e-9 * max(1, np.linalg.norm(W))


@pytest.mark.parametrize("n,T,d,seed,mode", [(3, 4, 5, 0, "cross"), (6, 8, 10, 1, "cross"), (5, 5, 7, 2, "self"),
                                             (4, 6, 3, 3, "cross")])
def test_att_svm_matches_reference(n, T, d, seed, mode):
    pr = random_problem(n, T, d, seed, mode=mode)
    sel = pr.optimal_tokens().index
    sol = solve_svm(pr)
    Wr = reference_att_svm(pr.X, pr.queries, sel)
    if Wr is None:
        assert sol.status == "infeasible"
        return
    kkt_ok(sol)
    ref = np.linalg.norm(Wr)
    assert abs(sol.norm_value - ref) <= 1e-8 * ref
    assert sol.min_margin >= 1 - 1e-9
    assert np.linalg.norm(sol.W - Wr) <= 1e-4 * ref


def test_both_methods_agree_and_local_svm():
    pr = random_problem(5, 6, 8, seed=7)
    rng = np.random.default_rng(0)
    for _ in range(3):
        sel = rng.integers(0, 6, size=5)
        cs = att_constraints(pr.X, pr.queries, sel)
        a = solve_frobenius(cs, method="pdas")
        b = solve_frobenius(cs, method="goldfarb-idnani")
        assert abs(a.norm_value - b.norm_value) <= 1e-12 * a.norm_value
        Wr = reference_att_svm(pr.X, pr.queries, sel)
        assert abs(a.norm_value - np.linalg.norm(Wr)) <= 1e-8 * a.norm_value


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 5), T=st.integers(2, 6), d=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_property_optimal_or_certified(n, T, d, seed):
    pr = random_problem(n, T, d, seed)
    sel = np.random.default_rng(seed).integers(0, T, size=n)
    sol = solve_svm(pr, sel)
    if sol.status == "optimal":
        kkt_ok(sol, tol=1e-8)
        assert matrix_rank(sol.W) <= min(n, d)
    else:
        f = sol.certificate.farkas
        assert np.all(f >= -1e-12)
        assert abs(f.sum() - 1) <= 1e-9
        cs = sol.constraints
        assert np.linalg.norm(cs.combine(f)) <= 1e-7 * max(1.0, np.abs(f).max())
        assert sol.W is None and sol.certificate.offending


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), T=st.integers(2, 6), seed=st.integers(0, 10_000))
def test_feasible_for_every_selection_when_overparameterized(n, T, seed):
    d = max(T - 1, n, 2)  # d = 1 unit-norm tokens are +-1: duplicates, not general position
    pr = random_problem(n, T, d, seed)
    sel = np.random.default_rng(seed).integers(0, T, size=n)
    assert solve_svm(pr, sel).status == "optimal"


def test_infeasible_rd_instances_have_certificates():
    found = 0
    for seed in range(10):
        pr = random_problem(5, 5, 1, seed)  # d = 1: measured P(feasible) = 0
        sol = solve_svm(pr)
        assert sol.status == "infeasible"
        assert reference_att_svm(pr.X, pr.queries, pr.optimal_tokens().index) is None
        f = sol.certificate.farkas
        assert np.all(f >= -1e-12) and abs(f.sum() - 1) < 1e-9
        assert np.linalg.norm(sol.constraints.combine(f)) < 1e-9
        found += 1
    assert found == 10


def test_duplicate_tokens_infeasible_names_the_constraint():
    pr = random_problem(3, 4, 5, seed=1)
    X = pr.X.copy()
    X[1, 3] = X[1, 0]
    pr = pr.replace(X=X)
    sol = solve_svm(pr, np.array([1, 0, 2]))
    assert sol.status == "infeasible"
    cs = sol.constraints
    assert len(sol.certificate.offending) == 1
    k = sol.certificate.offending[0]
    assert (cs.sample[k], cs.token[k], cs.other[k]) == (1, 0, 3)
    assert np.allclose(cs.U[k], 0)
    assert "sample 1: token 0 vs token 3" in sol.certificate.offending_labels[0]
    assert sol.to_dict()["status"] == "infeasible"


def test_gen_singleton_equals_att_and_gen_matches_reference():
    pr = random_problem(4, 6, 7, seed=5)
    sel = pr.optimal_tokens().index
    O = np.zeros((4, 6), bool)
    O[np.arange(4), sel] = True
    a, g = solve_svm(pr), solve_gen_svm(pr, O)
    assert np.allclose(a.W, g.W, atol=1e-12 * a.norm_value)
    O[0, (sel[0] + 1) % 6] = True
    O[2, :3] = True
    g = solve_gen_svm(pr, O)
    Wr = reference_gen_svm(pr.X, pr.queries, O)
    assert abs(g.norm_value - np.linalg.norm(Wr)) <= 1e-8 * g.norm_value
    eq = g.constraints.is_equality
    assert np.max(np.abs(g.margins[eq])) < 1e-10


@pytest.mark.parametrize("causal", [False, True])
def test_seq_svm_matches_reference(causal):
    X = random_problem(2, 4, 6, seed=2).X
    rng = np.random.default_rng(1)
    sel = np.array([[rng.integers(0, (k + 1) if causal else 4) for k in range(4)] for _ in range(2)])
    sol = solve_seq_svm(X, sel, causal=causal)
    Wr = reference_seq_svm(X, sel, causal)
    assert sol.status == "optimal"
    kkt_ok(sol)
    assert abs(sol.norm_value - np.linalg.norm(Wr)) <= 1e-8 * sol.norm_value
    if causal:
        assert sol.constraints.N == 2 * (0 + 1 + 2 + 3)
        assert not np.any(sol.constraints.query == 0)


def test_batch_matches_single():
    probs = [random_problem(6, 8, 10, seed=k) for k in range(30)] + [random_problem(6, 8, 2, seed=k) for k in range(5)]
    X = np.stack([p.X for p in probs[:30]])
    Z = np.stack([p.queries for p in probs[:30]])
    sel = np.stack([p.optimal_tokens().index for p in probs[:30]])
    b = solve_svm_batch(X, Z, sel)
    for r in range(30):
        s = solve_svm(probs[r])
        assert abs(b.norm_value[r] - s.norm_value) <= 1e-10 * s.norm_value
        assert b.margins[r].min() >= 1 - 1e-9
    small = [random_problem(5, 5, 1, seed=k) for k in range(4)]
    bs = solve_svm_batch(small)
    assert list(bs.status) == ["infeasible"] * 4


def test_vector_svms_match_reference():
    pr = random_problem(4, 3, 6, seed=9)  # N = 8 rows in d = 6: may or may not be feasible
    sel = pr.optimal_tokens().index
    W = np.random.default_rng(0).standard_normal((6, 6))
    p = solve_p_svm(pr.X, W, sel)
    K = pr.X @ W
    U = np.concatenate([K[i, sel[i]] - np.delete(K[i], sel[i], axis=0) for i in range(4)])
    pr_ref = reference_vector_svm(U, np.ones(len(U)))
    assert (pr_ref is None) == (p.status == "infeasible")
    if pr_ref is not None:
        assert abs(p.norm_value - np.linalg.norm(pr_ref)) <= 1e-8 * p.norm_value
    v = solve_v_svm(pr.X, pr.Y, sel)
    Uv = pr.Y[:, None] * pr.X[np.arange(4), sel]
    assert abs(v.norm_value - np.linalg.norm(reference_vector_svm(Uv, np.ones(4)))) <= 1e-8 * v.norm_value
    assert v.v.shape == (6,) and v.W is None


def test_bad_input_raises_value_error_naming_argument():
    pr = random_problem(6, 4, 5, seed=0)
    with pytest.raises(ValueError, match=r"select must have shape \(n,\) = \(6,\)"):
        solve_svm(pr, np.zeros(5, int))
    with pytest.raises(ValueError, match="select holds token index 4"):
        solve_svm(pr, np.full(6, 4))
    with pytest.raises(ValueError, match="norm"):
        solve_svm(pr, norm="l1")
    with pytest.raises(ValueError, match="selected"):
        solve_gen_svm(pr, np.zeros((6, 4), bool))
    with pytest.raises(ValueError, match="X must be finite"):
        solve_seq_svm(np.full((2, 3, 2), np.nan), np.zeros((2, 3), int))
    with pytest.raises(ValueError, match="causal"):
        solve_seq_svm(pr.X, np.full((6, 4), 2), causal=True)
    with pytest.raises(ValueError, match="W must have shape"):
        solve_p_svm(pr.X, np.eye(3), np.zeros(6, int))
    with pytest.raises(ValueError, match="Y must"):
        solve_v_svm(pr.X, np.full(6, 2.0), np.zeros(6, int))
    with pytest.raises(ValueError, match="problem must be a TokenProblem"):
        solve_svm(pr.X)


def test_solution_save_roundtrip(tmp_path):
    pr = random_problem(3, 4, 5, seed=0)
    sol = solve_svm(pr)
    sol.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz", allow_pickle=False) as z:
        assert np.allclose(z["W"], sol.W)
        assert str(z["status"]) == "optimal"
    import json
    assert json.loads(sol.to_json())["status"] == "optimal"


def test_solution_save_is_atomic_and_names_the_file(tmp_path, monkeypatch):
    sol = solve_svm(random_problem(3, 4, 5, seed=0))
    target = tmp_path / "s.npz"
    sol.save(target)
    before = target.read_bytes()

    def die(*args, **kwargs):  # a writer that fails midway (full disk)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", die)
    with pytest.raises(ValueError, match="cannot write solution file .*No space left"):
        sol.save(target)
    assert target.read_bytes() == before                      # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.npz"]  # no temporary file left
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        sol.save(tmp_path / "f" / "x.npz")
