"""Numeric facts of the specs, nuclear norm, soft margin and the analysis helpers."""

import numpy as np
import pytest

from attnsvm.generators import mm_joint, mm_loss, mm_multi_input, mm_single_input, random_problem
from attnsvm.svm import solve_fin, solve_gen_svm, solve_p_svm, solve_soft_svm, solve_svm, solve_v_svm, svm_equivalence
from attnsvm.svm.analysis import (all_support_vectors, enumerate_locally_optimal, is_locally_optimal, matrix_rank,
                                  separation_delta, support_indices)
from attnsvm.cli.solve import run_solve
from svm_reference import reference_att_svm, reference_soft_svm


# ---- max-margin spec section 9 -------------------------------------------------------------
def test_mm_single_input_facts():
    g, loc = mm_single_input("global"), mm_single_input("local")
    s0 = solve_svm(g, [0])
    assert np.allclose(s0.p, [-0.0990099, 0.9900990, 0], atol=1e-7)
    assert abs(s0.norm_value - 0.9950372) < 1e-7
    assert abs(1 / s0.norm_value - 1.0049876) < 1e-7
    assert abs(0.5 * s0.norm_value**2 - 0.4950495) < 1e-7
    s1 = solve_svm(g, [1])
    assert np.allclose(s1.p, [1, 0, 0], atol=1e-12)
    assert np.array_equal(np.flatnonzero(support_indices(g, [1])[0]), [2])
    s2 = solve_svm(g, [2])
    assert np.allclose(s2.p, [-1, -1.1, 0], atol=1e-12) and abs(s2.norm_value - 1.4866) < 1e-4
    assert np.array_equal(np.flatnonzero(support_indices(g, [2])[0]), [0, 1])
    assert enumerate_locally_optimal(g).tolist() == [[0]]
    assert enumerate_locally_optimal(loc).tolist() == [[0], [1]]


def test_mm_multi_input_facts():
    pr = mm_multi_input()
    s = solve_svm(pr)
    # spec value from float32 data, 5 digits
    assert np.allclose(s.p, [0.8446, 0.1711, 0], atol=1e-4) and abs(s.norm_value - 0.86176) < 1e-4
    sup = support_indices(pr)
    assert [np.flatnonzero(r).tolist() for r in sup] == [[6], [5], []]
    s_id = solve_p_svm(pr.X, None, pr.optimal_tokens().index)
    assert np.allclose(s_id.p, [0.7124, 0.1443, 0.3132], atol=1e-4)
    assert abs(0.5 * s_id.norm_value**2 - 0.31319) < 1e-5


def test_mm_joint_facts():
    t, r = mm_joint("tight"), mm_joint("relaxed")
    sel = np.array([1, 1, 1])
    p = solve_p_svm(t.X, t.W, sel)
    assert np.allclose(p.p, [4 / 3, 1 / 3], atol=1e-12) and abs(0.5 * p.norm_value**2 - 17 / 18) < 1e-12
    v = solve_v_svm(t.X, t.Y, sel)
    assert np.allclose(v.v / np.linalg.norm(v.v), [0, 1], atol=1e-12) and v.support.all()
    assert np.allclose(solve_p_svm(t.X, t.W, sel, relaxed=True, Y=t.Y).p, p.p)
    assert np.allclose(solve_p_svm(r.X, r.W, sel).p, [1.25, 0.25], atol=1e-12)
    vr = solve_v_svm(r.X, r.Y, sel)
    assert vr.support.tolist() == [True, True, False]
    assert np.allclose(solve_p_svm(r.X, r.W, sel, relaxed=True, Y=r.Y).p, [1, 0], atol=1e-12)
    assert np.allclose(solve_p_svm(r.X, r.W, sel, relaxed=[2]).p, [1, 0], atol=1e-12)


@pytest.mark.parametrize("C", [0.5, 1.0, 3.0])
def test_mm_loss_facts(C):
    pr = mm_loss(C)
    assert np.allclose(solve_svm(pr).p, [1, 0, 0], atol=1e-12)
    assert enumerate_locally_optimal(pr).tolist() == [[1, 1]]


# ---- transformers spec 7.1 -------------------------------------------------------------------
def test_fact5_feasible_every_selection_and_constructive_w():
    n, T, d = 4, 5, 6
    pr = random_problem(n, T, d, seed=3)
    rng = np.random.default_rng(3)
    for _ in range(5):
        sel = rng.integers(0, T, n)
        assert solve_svm(pr, sel).status == "optimal"
    # constructive W of section 3.7: all margins exactly 1
    Zq = pr.queries
    ws = []
    for i in range(n):
        D = np.stack([pr.X[i, sel[i]] - pr.X[i, t] for t in range(T) if t != sel[i]])
        ws.append(D.T @ np.linalg.solve(D @ D.T, np.ones(T - 1)))
    Wc = np.stack(ws, 1) @ np.linalg.solve(Zq @ Zq.T, Zq)
    sol = solve_svm(pr, sel)
    assert np.allclose(sol.constraints.evaluate(Wc), 1)
    assert sol.norm_value <= np.linalg.norm(Wc) + 1e-12


def test_fact7_8_ranks_and_norm_orderings():
    pr = random_problem(4, 5, 7, seed=11)
    fro, nuc = solve_svm(pr), solve_svm(pr, norm="nuclear")
    assert fro.min_margin >= 1 - 1e-9 and nuc.min_margin >= 1 - 1e-7
    P = pr.queries.T @ np.linalg.pinv(pr.queries.T)  # projector on span z_i
    assert np.allclose(fro.W @ P, fro.W, atol=1e-12)
    assert matrix_rank(nuc.W) <= matrix_rank(fro.W) <= pr.n
    sv = lambda W: np.linalg.svd(W, compute_uv=False).sum()  # noqa: E731
    assert fro.norm_value <= np.linalg.norm(nuc.W) + 1e-9
    assert nuc.norm_value <= sv(fro.W) + 1e-7


@pytest.mark.parametrize("n,T,d,seed", [(3, 4, 5, 0), (4, 5, 6, 1), (5, 4, 8, 2)])
def test_nuclear_matches_reference(n, T, d, seed):
    pr = random_problem(n, T, d, seed)
    sel = pr.optimal_tokens().index
    sol = solve_svm(pr, norm="nuclear")
    Wr = reference_att_svm(pr.X, pr.queries, sel, norm="nuclear", solver="CLARABEL")
    ref = np.linalg.svd(Wr, compute_uv=False).sum()
    assert abs(sol.norm_value - ref) <= 1e-6 * ref
    c = sol.certificate
    assert c.max_violation <= 1e-7 and c.duality_gap <= 1e-6 and c.stationarity_residual <= 1e-6
    assert matrix_rank(sol.W) <= matrix_rank(solve_svm(pr).W) <= n


def test_nuclear_infeasible_has_certificate():
    sol = solve_svm(random_problem(5, 5, 1, seed=0), norm="nuclear")
    assert sol.status == "infeasible" and sol.norm == "nuclear" and sol.certificate.farkas is not None


def test_fact9_gen_fin_orthogonal_and_reproduces_ratios():
    pr = random_problem(4, 5, 8, seed=4)
    O = np.zeros((4, 5), bool)
    O[:, 0] = True
    O[0, 2] = O[1, 3] = O[3, 1] = O[3, 4] = True
    rng = np.random.default_rng(0)
    s = rng.random((4, 5)) + 0.1
    s /= s.sum(1, keepdims=True)
    fin, svm = solve_fin(pr, O, s), solve_gen_svm(pr, O)
    assert abs(np.sum(fin.W * svm.W)) <= 1e-10 * np.linalg.norm(fin.W) * np.linalg.norm(svm.W)
    for i in range(4):
        sel = np.flatnonzero(O[i])
        for a in sel:
            for b in sel:
                lhs = (pr.X[i, a] - pr.X[i, b]) @ fin.W @ pr.queries[i]
                assert abs(lhs - np.log(s[i, a] / s[i, b])) < 1e-10
    Wg = fin.W + 7.5 * svm.W
    eqv = svm_equivalence(pr, O, s, Wg)
    assert abs(eqv.R - 7.5) < 1e-9 and eqv.residual < 1e-9


def test_fact10_local_optimality_and_all_support_vectors():
    pr = random_problem(3, 3, 2, seed=1)
    opt = pr.optimal_tokens().index
    if solve_svm(pr).feasible:
        assert is_locally_optimal(pr, opt)
    big = random_problem(2, 3, 40, seed=0)
    if all_support_vectors(big):
        assert enumerate_locally_optimal(big).tolist() == [big.optimal_tokens().index.tolist()]
    for seed in range(6):
        p = random_problem(2, 3, 3, seed=seed)
        loc = enumerate_locally_optimal(p)
        assert p.optimal_tokens().index.tolist() in loc.tolist() or not solve_svm(p).feasible


def test_separation_delta_identity():
    pr = random_problem(4, 6, 5, seed=2)
    sol = solve_svm(pr)
    delta = separation_delta(pr, solution=sol)
    m = sol.margins[~sol.support]
    assert delta > 0 and abs(delta - 0.5 * (m.min() - 1)) < 1e-12


@pytest.mark.parametrize("squared", [False, True])
def test_soft_margin_matches_reference(squared):
    pr = random_problem(4, 4, 2, seed=3)
    sel = pr.optimal_tokens().index
    sol = solve_soft_svm(pr, sel, C=2.0, squared=squared)
    _, val = reference_soft_svm(pr.X, pr.queries, sel, 2.0, squared=squared)
    assert abs(sol.objective - val) <= 1e-6 * max(1, val)
    assert sol.slack.shape == (sol.constraints.N,)


def test_cli_support(tmp_path):
    pr = random_problem(3, 4, 5, seed=0)
    pr.save(tmp_path / "p.npz")
    txt = run_solve(tmp_path / "p.npz", "opt", "fro", tmp_path / "s.npz", False)
    assert "optimal" in txt and (tmp_path / "s.npz").exists()
    np.save(tmp_path / "sel.npy", np.array([0, 1, 2]))
    import json
    out = json.loads(run_solve(tmp_path / "p.npz", str(tmp_path / "sel.npy"), "nuclear", None, True))
    assert out["status"] == "optimal" and out["norm"] == "nuclear"
    np.save(tmp_path / "bad.npy", np.array([0, 1]))
    with pytest.raises(ValueError, match="select"):
        run_solve(tmp_path / "p.npz", str(tmp_path / "bad.npy"), "fro", None, False)
    with pytest.raises(ValueError):
        run_solve(tmp_path / "missing.npz", "opt", "fro", None, False)
