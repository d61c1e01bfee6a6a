"""The causal language modeling experiments: quick presets, the synthetic language, SVMs and training."""

import numpy as np
import pytest
import torch

from attnsvm.errors import ValidationError
from attnsvm.experiments import build_config, registry
from attnsvm.experiments.lm.common import build_runs
from attnsvm.language import make_lm_data, markov_language
from attnsvm.training.language_model import (LOSSES, lipschitz_estimates, lm_loss_grad, paper_lipschitz_bound,
                                          token_basis, train_lm, train_runs)
from attnsvm.svm import lm_constraints, soft_margin_svm
from attnsvm.svm.language import gen_svm_fit, optimal_prefix_tokens, prefix_scores, prefix_softmax

# The quick presets, their checks and the findings are tested in tests/test_checks_lm.py.


# ------------------------------------------------------------------ the synthetic language


def test_language_is_seeded_and_deterministic():
    a = markov_language(7, 16, successors=3, seed=4)
    b = markov_language(7, 16, successors=3, seed=4)
    c = markov_language(7, 16, successors=3, seed=5)
    for f in ("start", "trans1", "E"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.trans1, c.trans1)
    np.testing.assert_array_equal(a.sample(6, 9, seed=1), b.sample(6, 9, seed=1))
    assert not np.array_equal(a.sample(6, 9, seed=1), a.sample(6, 9, seed=2))


def test_language_structure_and_sampling_frequencies():
    lang = markov_language(6, 10, successors=2, seed=0)
    assert np.allclose(lang.trans1.sum(1), 1) and np.allclose(lang.start.sum(), 1)
    assert np.all((lang.trans1 > 0).sum(1) == 2)
    assert np.allclose(np.linalg.norm(lang.E, axis=1), 1)
    seqs = lang.sample(20000, 2, seed=0)
    # empirical first transitions match the chain
    for a in range(6):
        nxt = seqs[seqs[:, 0] == a, 1]
        if nxt.size > 500:
            freq = np.bincount(nxt, minlength=6) / nxt.size
            assert np.max(np.abs(freq - lang.trans1[a])) < 0.05
    assert np.isfinite(lang.log_prob(seqs[:50]))
    two = markov_language(5, 8, successors=2, order=2, seed=1)
    s2 = two.sample(50, 6, seed=3)
    assert s2.shape == (50, 6) and np.isfinite(two.log_prob(s2))
    with pytest.raises(ValidationError):
        markov_language(1, 4)
    with pytest.raises(ValidationError):
        markov_language(4, 4, successors=5)


def test_scores_and_constraints():
    lang = markov_language(5, 300, successors=2, seed=2)
    data = make_lm_data(lang, 8, 6, seed=0)
    gamma = prefix_scores(data, "logistic")
    m, n = data.tokens.shape
    assert gamma.shape == (m, n, n)
    assert np.all(np.isinf(gamma[:, -1]))  # the last position has no target
    assert np.all(np.isinf(gamma[:, 2, 3:])) and np.all(np.isfinite(gamma[:, 2, :3]))
    sel = optimal_prefix_tokens(gamma)
    # nearly orthogonal embeddings: a token of the target type is optimal whenever the prefix has one
    for seq in range(m):
        for k in range(n - 1):
            present = np.flatnonzero(data.tokens[seq, :k + 1] == data.targets[seq, k])
            if present.size:
                assert data.tokens[seq, sel[seq, k]] == data.targets[seq, k]
    cs = lm_constraints(data, "logistic")
    assert cs.kind == "causal" and cs.N > 0
    A = data.A
    np.testing.assert_allclose(cs.U, A[cs.sample, cs.token] - A[cs.sample, cs.other])
    np.testing.assert_allclose(cs.V, A[cs.sample, cs.query])
    assert np.all(cs.other <= cs.query) and np.all(cs.query <= n - 2)
    assert np.all(data.tokens[cs.sample, cs.token] != data.tokens[cs.sample, cs.other])


def test_soft_margin_objective_is_the_norm_plus_slack_and_optimal():
    import cvxpy as cp

    lang = markov_language(4, 5, successors=2, seed=0)
    data = make_lm_data(lang, 4, 5, seed=1)
    cs = lm_constraints(data)
    assert cs.N >= 5
    for squared in (False, True):
        sol = soft_margin_svm(data, C=10.0, squared=squared, cs=cs)
        W = sol.W
        xi = np.maximum(0.0, 1.0 - cs.evaluate(W))
        reg = np.linalg.norm(W) ** (2 if squared else 1)
        assert sol.objective == pytest.approx(reg + 10.0 * xi.sum(), rel=1e-6, abs=1e-7)
        # brute force over the full d x d matrix
        X = cp.Variable((5, 5))
        marg = cp.hstack([cs.U[k] @ X @ cs.V[k] for k in range(cs.N)])
        r = cp.sum_squares(X) if squared else cp.norm(cp.vec(X, order="F"), 2)
        prob = cp.Problem(cp.Minimize(r + 10.0 * cp.sum(cp.pos(1 - marg))))
        prob.solve(solver="CLARABEL")
        assert sol.objective == pytest.approx(prob.value, rel=1e-5, abs=1e-6)
    # a language stuck on one type has no rows at all: a clear error, not a solver crash
    stuck = markov_language(4, 5, successors=2, seed=3)
    flat = make_lm_data(stuck, 4, 5, seed=1)
    assert np.all(flat.tokens == flat.tokens[0, 0])
    with pytest.raises(ValidationError, match="no rows"):
        soft_margin_svm(flat)


# ------------------------------------------------------------------ model and training


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("attention", ["softmax", "linear"])
def test_closed_form_gradient_matches_autograd(loss, attention):
    lang = markov_language(6, 7, seed=1)
    data = make_lm_data(lang, 3, 5, seed=2)
    A = torch.tensor(data.A[None])
    tg = torch.tensor(data.targets[None])
    E = torch.tensor(data.E[None])
    W = (0.7 * torch.randn(1, 7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))).requires_grad_()
    L, G = lm_loss_grad(W.detach(), A, tg, E, loss=loss, attention=attention)
    # autograd through a direct implementation
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    logits = torch.einsum("rltd,rde,rlke->rlkt", A, W, A)
    s = torch.softmax(logits.masked_fill(~mask, float("-inf")), -1) if attention == "softmax" else logits * mask
    Z = torch.einsum("rlkt,rltd,rvd->rlkv", s, A, E)
    valid = tg >= 0
    oh = torch.nn.functional.one_hot(torch.where(valid, tg, 0), 6).double()
    if loss == "logistic":
        per = torch.nn.functional.softplus(-(2 * oh - 1) * Z).sum(-1)
    elif loss == "cross_entropy":
        per = torch.logsumexp(Z, -1) - (Z * oh).sum(-1)
    else:
        per = ((Z - oh) ** 2).sum(-1)
    ref = (per * valid).sum() / valid.sum()
    (g,) = torch.autograd.grad(ref, W)
    assert float(L[0]) == pytest.approx(float(ref.detach()), rel=1e-12)
    torch.testing.assert_close(G, g, rtol=1e-9, atol=1e-12)


def test_training_matches_engine_train_sequence_for_cross_entropy():
    from attnsvm.training.train import train_sequence

    lang = markov_language(5, 9, seed=0)
    data = make_lm_data(lang, 4, 5, seed=1)
    W0 = 0.01 * np.random.default_rng(0).standard_normal((9, 9))
    own = train_lm(data.A[None], data.targets[None], data.E[None], W0[None], steps=40, lr=3.0,
                   loss="cross_entropy", checkpoints=[0, 40])
    eng = train_sequence(data.A, data.targets, H=data.E.T, causal=True, loss="cross_entropy", optimizer="gd",
                         lr=3.0, steps=40, init=W0, checkpoints=[0, 40])
    np.testing.assert_allclose(own["W"][0], eng.W[0], atol=1e-12)
    np.testing.assert_allclose(own["loss"][0], eng.loss[0], rtol=1e-12)


def test_linear_attention_diverges_past_two_over_L():
    lang = markov_language(5, 6, seed=0)
    data = make_lm_data(lang, 3, 4, seed=0)
    L, _ = lipschitz_estimates(data, loss="l2", attention="linear", radius=1.0, centers=2, power_iters=30, pairs=2)
    # exact Hessian of the quadratic objective (36 parameters)
    A = torch.tensor(data.A[None])
    tg = torch.tensor(data.targets[None])
    E = torch.tensor(data.E[None])

    H = torch.autograd.functional.hessian(lambda w: _autograd_l2(w, A, tg, E), torch.zeros(36, dtype=torch.float64))
    lam = float(torch.linalg.eigvalsh(H).max())
    assert L == pytest.approx(lam, rel=1e-3)
    B = 2
    res = train_lm(np.repeat(data.A[None], B, 0), np.repeat(data.targets[None], B, 0), np.repeat(data.E[None], B, 0),
                   np.zeros((B, 6, 6)), steps=60, lr=np.array([1.8 / lam, 2.2 / lam]), loss="l2", attention="linear")
    assert res["loss"][0, -1] < res["loss"][0, 0]
    assert not res["finite"][1] or res["loss"][1, -1] > 10 * res["loss"][1, 0]


def _autograd_l2(w, A, tg, E):
    W = w.reshape(1, 6, 6)
    n = A.shape[2]
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    s = torch.einsum("rltd,rde,rlke->rlkt", A, W, A) * mask
    Z = torch.einsum("rlkt,rltd,rvd->rlkv", s, A, E)
    valid = tg >= 0
    oh = torch.nn.functional.one_hot(torch.where(valid, tg, 0), E.shape[1]).double()
    return ((((Z - oh) ** 2).sum(-1)) * valid).sum() / valid.sum()


def test_train_runs_uses_the_engine_for_cross_entropy():
    cfg = build_config(registry()["lm-cosine"], overrides={"loss": "cross_entropy", "steps": 20, "d": 12, "cycle_runs": 0})
    datas, W0 = build_runs(cfg, 4, 5, 12, 1)
    res = train_runs(cfg, datas, W0, [0, 20])
    own = train_lm(datas[0].A[None], datas[0].targets[None], datas[0].E[None], W0, steps=20, lr=cfg.lr,
                   loss="cross_entropy", checkpoints=[0, 20])
    np.testing.assert_allclose(res["W"], own["W"], atol=1e-12)


# ------------------------------------------------------------------ reduced coordinates, bounds, Gen-SVM fit, step search


@pytest.mark.parametrize("attention,loss", [("softmax", "logistic"), ("linear", "l2"), ("softmax", "cross_entropy")])
def test_gd_in_token_span_coordinates_equals_full_gd(attention, loss):
    """GD in the coordinates P^T W P of the token span is exactly GD on the d x d matrix."""
    datas, W0 = build_runs(build_config(registry()["lm-cosine"]), 6, 5, 30, 2)
    A, tg, E = (np.stack([getattr(x, f) for x in datas]) for f in ("A", "targets", "E"))
    P = token_basis(A)
    r = P.shape[-1]
    assert P.shape[:2] == (2, 30) and r <= 8  # at most V = 8 types span the tokens
    np.testing.assert_allclose(np.transpose(P, (0, 2, 1)) @ P, np.broadcast_to(np.eye(r), (2, r, r)), atol=1e-12)
    np.testing.assert_allclose(A @ (P @ np.transpose(P, (0, 2, 1)))[:, None], A, atol=1e-12)
    lr = 5.0 if attention == "softmax" else 1e-2
    kw = dict(steps=40, lr=lr, loss=loss, attention=attention, checkpoints=[0, 7, 40], track_lipschitz=True)
    red = train_lm(A, tg, E, W0, **kw)
    full = train_lm(A, tg, E, W0, basis=np.broadcast_to(np.eye(30), (2, 30, 30)), **kw)  # r = d: no reduction
    np.testing.assert_allclose(red["W"], full["W"], atol=1e-12)
    np.testing.assert_allclose(red["loss"], full["loss"], rtol=1e-12)
    np.testing.assert_allclose(red["lip_traj"], full["lip_traj"], rtol=1e-9)
    with pytest.raises(ValidationError, match="basis"):
        train_lm(A, tg, E, W0, basis=P[:1], **kw)


def test_paper_bound_formula():
    """log10(V * 3 n^3 R^7 exp(13 R^2)) with R = max(4, norms of the Kronecker blocks and value vectors)."""
    lang = markov_language(5, 12, seed=0)
    data = make_lm_data(lang, 3, 4, seed=0)  # unit tokens: block norm ||a_k|| ||A_<=k||_2 <= sqrt(3)
    b, R = paper_lipschitz_bound(data, 1.0)
    assert R == 4.0
    assert b == pytest.approx(np.log10(3 * 5 * 4 ** 3 * 4.0 ** 7) + 13 * 16 / np.log(10))
    big = make_lm_data(lang, 3, 4, seed=0, scale=5.0)
    b2, R2 = paper_lipschitz_bound(big, 2.0)
    k = 2  # the longest prefix with a target
    pre = big.A[:, :k + 1]
    block = max(float(np.linalg.norm(big.A[q, j]) * np.linalg.norm(big.A[q, :j + 1], 2))
                for q in range(3) for j in range(3))
    assert R2 == pytest.approx(max(2 * block, float(np.linalg.norm(pre @ big.E.T, axis=1).max())))
    assert b2 > b


def test_linear_l2_stable_step_is_two_over_L():
    """The bisected largest stable step of a quadratic loss is 2 / lambda_max (within the bracket)."""
    from attnsvm.experiments.lm.stability import stable_step_search

    exp = registry()["lm-stability"]
    cfg = build_config(exp, quick=True, overrides={"d": 6, "m": 3, "n": 4, "runs": 1, "sweep_steps": 60})
    datas, W0 = build_runs(cfg, 3, 4, 6, 1)
    A = torch.tensor(datas[0].A[None])
    tg = torch.tensor(datas[0].targets[None])
    E = torch.tensor(datas[0].E[None])
    H = torch.autograd.functional.hessian(lambda w: _autograd_l2(w, A, tg, E), torch.zeros(36, dtype=torch.float64))
    lam = float(torch.linalg.eigvalsh(H).max())
    _, lo, hi, _ = stable_step_search(cfg, datas, W0, "linear", "l2")
    assert np.log10(hi[0] / lo[0]) <= cfg.bisect_tol + 1e-12
    assert lo[0] * lam / 2 == pytest.approx(1.0, abs=0.05)


def test_gen_svm_fit_recovers_an_exact_gen_svm_form():
    """W = W_fin + R W_svm of its own selection is fitted exactly; W_fin is W's projection onto the tie rows."""
    lang = markov_language(6, 20, seed=1)
    data = make_lm_data(lang, 4, 5, seed=2)
    # tiny W: every prefix token is selected, so the Gen-SVM has no margin rows
    assert gen_svm_fit(data, 1e-3 * np.eye(20))["status"] == "no_margin_rows"
    # W = 10 I selects the query's own type in every prefix: a consistent selection, W_fin = 0
    fit = gen_svm_fit(data, 10.0 * np.eye(20))
    assert fit["status"] == "ok" and fit["gen"].certified and fit["dim"] >= 1
    W2 = fit["W_fin"] + 7.5 * fit["W_svm"]
    fit2 = gen_svm_fit(data, W2)
    assert fit2["status"] == "ok"
    np.testing.assert_allclose(fit2["W_svm"], fit["W_svm"], atol=1e-9)
    assert fit2["R"] == pytest.approx(7.5, rel=1e-9)
    np.testing.assert_allclose(fit2["W_eq"], W2, atol=1e-8)
    # random W with ties between types: W_fin is the projection of W onto the tie rows, W_svm orthogonal to them
    g = np.random.default_rng(0)
    fits = [gen_svm_fit(data, 4.0 * g.standard_normal((20, 20)), seed=k) for k in range(20)]
    ok = [f for f in fits if f["status"] == "ok" and f["fin"].constraints.N]
    assert ok, [f["status"] for f in fits]
    for f in ok[:3]:
        tie = f["fin"].constraints
        W = f["W_fin"] + f["R"] * f["W_svm"]
        np.testing.assert_allclose(tie.evaluate(f["W_svm"]), 0.0, atol=1e-9)
        np.testing.assert_allclose(tie.evaluate(W), tie.rhs, atol=1e-8)  # reproduces the log-ratios on the ties
        assert f["W_rand_eq"].shape == (16, 20, 20)
    s = prefix_softmax(data, 10.0 * np.eye(20))
    assert np.allclose(s.sum(1), 1.0) and np.all(s[:, -1] == 0)  # the last position is never a key of a target prefix
