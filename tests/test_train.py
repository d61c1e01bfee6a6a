"""Batched training engine: invariants, batching, saturation and the papers' small instances."""

import sys

import cvxpy as cp
import numpy as np
import pytest
import torch

from attnsvm import generators as G
from attnsvm.generators import random_problem
from attnsvm.metrics import correlation, matrix_rank
from attnsvm.training.models import LambdaHead, ReLUHead
from attnsvm.training.train import regularization_path, train, train_sequence


def svm(problem, select, nuclear=False):
    """Tiny cvxpy Att-SVM reference (test helper): min ||W|| s.t. (x_sel - x_t)^T W z_i >= 1."""
    X, Z = problem.X, problem.queries
    n, T, d = X.shape
    Wv = cp.Variable((d, d))
    cons = [(X[i, select[i]] - X[i, t]) @ Wv @ Z[i] >= 1 for i in range(n) for t in range(T) if t != select[i]]
    obj = cp.normNuc(Wv) if nuclear else cp.norm(Wv, "fro")
    cp.Problem(cp.Minimize(obj), cons).solve(solver=cp.CLARABEL)
    return Wv.value


def _probs(R, n=6, T=8, d=10):
    return [random_problem(n, T, d, seed=s, rng="torch") for s in range(R)]


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_batched_equals_one_by_one_bitwise(param):
    probs = _probs(4)
    full = train(probs, param=param, steps=150, record_every=50, bitwise=True)
    for r in (0, 3):
        one = train(probs[r], param=param, steps=150, record_every=50, seed=r, bitwise=True)
        assert np.array_equal(full.W[r], one.W[0])
        assert np.array_equal(full.softmax[r], one.softmax[0])
        assert np.array_equal(full.loss[r], one.loss[0])


def test_batched_equals_one_by_one_fast_engine_and_prompt():
    probs = _probs(3)
    full = train(probs, param="W", steps=150, record_every=50)
    one = train(probs[2], param="W", steps=150, record_every=50, seed=2)
    assert np.max(np.abs(full.W[2] - one.W[0])) <= 1e-12 * max(1.0, np.abs(one.W).max())
    p = G.mm_multi_input()
    inits = np.array([[1.0, 0, 0], [-1.0, 0, 0], [0.5, 0, 0]])
    fullp = train([p] * 3, param="p", init=inits, steps=100, bitwise=True)
    onep = train(p, param="p", init=inits[1], steps=100, bitwise=True)
    assert np.array_equal(fullp.p[1], onep.p[0])


def test_seed_scheme_and_default_init():
    p = _probs(1)[0]
    r = train(p, param="W", runs=3, steps=0, seed=5)
    assert list(r.seeds) == [5, 6, 7]
    assert np.all(np.abs(r.W[:, 0]) <= 1 / np.sqrt(10))
    r2 = train(p, param="W", steps=0, seed=6)
    assert np.array_equal(r.W[1], r2.W[0])
    assert not np.array_equal(r.W[0], r.W[1])


@pytest.mark.parametrize("optimizer", ["gd", "ngd"])
def test_gd_keeps_component_outside_query_span_and_rank(optimizer):
    p = random_problem(3, 4, 6, seed=1)
    Z = p.Z
    P = Z.T @ np.linalg.pinv(Z.T)  # projector onto span{z_i} (d x d)
    r = train(p, param="W", steps=300, lr=0.5 if optimizer == "gd" else 0.1, optimizer=optimizer, record_every=100, seed=3)
    off = r.W[0] @ (np.eye(6) - P)
    assert np.max(np.abs(off - off[0])) <= 1e-12
    r0 = train(p, param="W", init="zero", steps=300, optimizer=optimizer, record_every=100)
    assert np.all(matrix_rank(r0.W[0], rtol=1e-9) <= p.n)
    assert np.max(np.abs(r0.W[0] @ (np.eye(6) - P))) <= 1e-12


def test_saturation_flag_no_nan_at_large_norm():
    p = G.tf_visualization1()
    opt = p.optimal_tokens().index
    Wmm = svm(p, opt)
    W0 = 1e4 * Wmm / np.linalg.norm(Wmm)
    r = train(p, param="W", init=W0, steps=20, record_every=10)
    assert r.saturated.all() and r.saturated_step[0] == 0
    assert np.array_equal(r.W[0, -1], r.W[0, 0])  # does not move
    assert np.all(np.isfinite(r.loss)) and np.all(np.isfinite(r.W))
    K0 = np.linalg.svd(W0)[0] * np.sqrt(np.linalg.svd(W0)[1])
    Q0 = np.linalg.svd(W0)[2].T * np.sqrt(np.linalg.svd(W0)[1])
    for opt_name in ("ngd", "gd", "adam"):
        rk = train(p, param="KQ", init=(K0, Q0), steps=20, optimizer=opt_name, record_every=10)
        assert np.all(np.isfinite(rk.W)) and np.all(np.isfinite(rk.loss))
        assert rk.saturated.all()


@pytest.mark.parametrize("make", [G.tf_visualization1, G.tf_visualization2])
def test_e1_directional_convergence(make):
    p = make()
    opt = p.optimal_tokens().index
    Wf, Wn = svm(p, opt), svm(p, opt, nuclear=True)
    rw = train(p, param="W", init="zero", steps=2000, checkpoints=[2000])
    assert correlation(rw.W[0, -1], Wf) >= 0.999
    K0 = 0.1 * torch.randn(2, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64).numpy()
    rk = train(p, param="KQ", init=(K0, np.zeros((2, 2))), steps=2000, checkpoints=[2000])
    assert correlation(rk.W[0, -1], Wn) >= 0.999
    assert correlation(rk.W[0, -1], Wf) < correlation(rk.W[0, -1], Wn)


def test_prompt_single_input_global_and_local():
    inits = np.array([[0, y, 0] for y in (1, 0.5, 0, -0.5, -1, -1.5)], dtype=float)
    g = train([G.mm_single_input("global")] * 6, param="p", init=inits, steps=1000, checkpoints=[500, 1000])
    pmm = np.array([-0.0990099, 0.9900990, 0.0])
    c = correlation(g.p[:, :, :], pmm, ndim=1)
    assert np.all(c[:, -1] >= 0.995) and np.all(c[:, -1] > c[:, 0])
    loc = train([G.mm_single_input("local")] * 6, param="p", init=inits, steps=1000, checkpoints=[1000])
    cl = correlation(loc.p[:, -1], np.array([1.0, 0, 0]), ndim=1)
    assert np.all(cl[4:] >= 0.999)  # y = -1, -1.5 stay at the local direction in float64
    assert np.all(correlation(loc.p[:4, -1], pmm, ndim=1) >= 0.99)


def test_prompt_joint_training_tight_and_ngd_norm_growth():
    r = train(G.mm_joint("tight"), param="p", init=np.array([0.0, -1.0]), train_v=True, steps=199, checkpoints=[199])
    assert correlation(r.p[0, -1], np.array([4 / 3, 1 / 3])) >= 0.999
    assert correlation(r.v[0, -1], np.array([0.0, 1.0])) >= 0.999
    m = train(G.mm_multi_input(), param="p", init="zero", steps=200, checkpoints=[50, 100, 200])
    assert np.allclose(m.norm[0], 0.1 * np.array([50, 100, 200]), rtol=0.03)  # ||p(t)|| ~ eta t
    gd = train(G.mm_multi_input(), param="p", init="zero", steps=200, lr=1.0, optimizer="gd", checkpoints=[50, 200])
    assert abs(gd.norm[0, -1] - 3.85) < 0.05 and abs(gd.softmax[0, 0, :, 0].mean() - 0.8177) < 2e-3


def test_autograd_engine_matches_closed_form_and_nonlinear_head():
    probs = _probs(2, n=4, T=5, d=6)
    for param in ("W", "KQ"):
        a = train(probs, param=param, steps=60, record_every=30, engine="autograd")
        b = train(probs, param=param, steps=60, record_every=30, engine="closed")
        assert np.max(np.abs(a.W - b.W)) <= 1e-12
        assert np.allclose(a.grad_norm, b.grad_norm, rtol=1e-10)
    V = np.eye(6) / np.sqrt(6)
    h = train(probs, param="W", head=ReLUHead(V), steps=100, optimizer="adam", lr=0.05, record_every=50)
    assert np.all(np.isfinite(h.W)) and h.loss[:, -1].mean() < h.loss[:, 0].mean()


def test_sequence_and_causal_training():
    g = np.random.default_rng(0)
    X = g.standard_normal((3, 5, 4))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    Y = np.where(g.standard_normal((3, 5)) > 0, 1.0, -1.0)
    v = g.standard_normal(4)
    r = train_sequence(X, Y, v, causal=True, steps=100, record_every=50, runs=2)
    assert r.softmax.shape == (2, 3, 3, 5, 5)
    upper = np.triu(np.ones((5, 5), bool), 1)
    assert np.all(r.softmax[..., upper] == 0)
    assert r.loss[0, -1] < r.loss[0, 0]
    a = train_sequence(X, Y, v, causal=True, steps=30, record_every=30, engine="autograd")
    b = train_sequence(X, Y, v, causal=True, steps=30, record_every=30, engine="closed")
    assert np.max(np.abs(a.W - b.W)) <= 1e-12
    E = g.standard_normal((7, 4))
    tgt = g.integers(0, 7, (3, 5))
    tgt[:, -1] = -1
    lm = train_sequence(X, tgt, H=E.T, causal=True, steps=100, optimizer="gd", lr=0.5, record_every=100)
    assert np.all(np.isfinite(lm.loss)) and lm.loss[0, -1] < lm.loss[0, 0]


def test_regularization_path():
    p = G.tf_visualization1()
    opt = p.optimal_tokens().index
    path = regularization_path(p, [1.0, 4.0, 16.0], param="W", steps_per_radius=300)
    assert np.all(path.norm[0] <= np.array([1.0, 4.0, 16.0]) + 1e-9)
    assert np.all(np.diff(path.loss[0]) < 0)
    assert correlation(path.W[0, -1], svm(p, opt)) >= 0.95
    kq = regularization_path(p, [1.0, 4.0], param="KQ", init="default", steps_per_radius=200)
    sq = np.sum(kq.K[0] ** 2, axis=(-2, -1)) + np.sum(kq.Q[0] ** 2, axis=(-2, -1))
    assert np.all(sq <= 2 * np.array([1.0, 4.0]) + 1e-9)


def _relu_probs(R, n=3, T=4, d=6):
    pairs = [G.relu_head_instance(n, T, d, s) for s in range(1, R + 1)]
    return [p for p, _ in pairs], np.stack([v for _, v in pairs])


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _tanh_head(a):
    return torch.tanh(a).sum(-1) - 0.3 * a[..., 0] ** 2


@pytest.mark.parametrize("param,optimizer", [("W", "ngd"), ("W", "gd"), ("KQ", "ngd"), ("KQ", "gd"), ("W", "adam")])
def test_head_closed_form_engine_matches_autograd(param, optimizer):
    """ReLU / lambda heads train with closed-form gradients by default (token-space W loop, direct KQ loop,
    generic loop for Adam); the trajectories equal the autograd engine's to rounding."""
    probs, V = _relu_probs(3)
    lam_probs = _probs(3, n=4, T=5, d=6)
    cases = [(probs, ReLUHead(V)), (lam_probs, LambdaHead(np.stack([p.v for p in lam_probs]), 0.3))]
    for ps, head in cases:
        kw = dict(param=param, head=head, steps=60, record_every=20, optimizer=optimizer, lr=0.05 if optimizer == "adam" else 0.1)
        a = train(ps, engine="autograd", **kw)
        b = train(ps, **kw)
        assert _rel(b.W, a.W) <= 1e-10
        assert _rel(b.softmax, a.softmax) <= 1e-10
        assert np.allclose(b.loss, a.loss, rtol=1e-10, atol=0)
        assert np.allclose(b.grad_norm, a.grad_norm, rtol=1e-10, atol=0)
        assert not b.saturated.any()


def test_token_space_direct_and_generic_loops_agree(monkeypatch):
    """The token-space W loop (logits moved by H c, W rebuilt at records) equals the W-space loops."""
    fast_mod, engine_mod = sys.modules["attnsvm.training.fast"], sys.modules["attnsvm.training.engine"]
    probs, V = _relu_probs(4)
    lin = _probs(4)
    runs = {}
    for name, patch in (("tokens", None), ("direct", (fast_mod, "TOKEN_SPACE_MAX_TOKENS", 0)),
                        ("generic", (engine_mod, "fast_kind", lambda *a: None))):
        if patch is not None:
            monkeypatch.setattr(*patch)
        runs[name] = (train(probs, param="W", head=ReLUHead(V), steps=300, record_every=100),
                      train(lin, param="W", steps=300, record_every=100))
        monkeypatch.undo()
    for k in range(2):
        ref = runs["generic"][k]
        for name in ("tokens", "direct"):
            r = runs[name][k]
            assert _rel(r.W, ref.W) <= 1e-12 and _rel(r.softmax, ref.softmax) <= 1e-12
            assert np.allclose(r.grad_norm, ref.grad_norm, rtol=1e-10, atol=0)
            assert np.array_equal(r.saturated_step, ref.saturated_step)


def test_head_runs_depend_only_on_their_seed():
    probs, V = _relu_probs(4)
    for param in ("W", "KQ"):
        full = train(probs, param=param, head=ReLUHead(V), seed=[7, 8, 9, 10], steps=300, record_every=100)
        one = train(probs[2], param=param, head=ReLUHead(V[2]), seed=9, steps=300, record_every=100)
        assert _rel(full.W[2], one.W[0]) <= 1e-12
        fullb = train(probs, param=param, head=ReLUHead(V), seed=[7, 8, 9, 10], steps=100, record_every=100, bitwise=True)
        oneb = train(probs[2], param=param, head=ReLUHead(V[2]), seed=9, steps=100, record_every=100, bitwise=True)
        assert np.array_equal(fullb.W[2], oneb.W[0]) and np.array_equal(fullb.softmax[2], oneb.softmax[0])
        assert _rel(fullb.W, full.W[:, :2]) <= 1e-12


def test_head_saturation_flag_and_zero_gradient():
    probs, V = _relu_probs(2)
    g = np.random.default_rng(0)
    W0 = 1e5 * g.standard_normal((2, 6, 6))
    for optimizer in ("ngd", "gd"):
        r = train(probs, param="W", head=ReLUHead(V), init=W0, steps=20, record_every=10, optimizer=optimizer)
        assert r.saturated.all() and np.all(r.saturated_step == 0)
        assert np.array_equal(r.W[:, -1], r.W[:, 0]) and np.all(r.grad_norm == 0)
        assert np.all(np.isfinite(r.loss))
    K0 = 300 * g.standard_normal((2, 6, 6))
    rk = train(probs, param="KQ", head=ReLUHead(V), init={"K": K0, "Q": K0[:, ::-1].copy()}, steps=20, record_every=10)
    assert rk.saturated.all() and np.all(np.isfinite(rk.W))


def test_head_sequence_training_and_callable_head():
    g = np.random.default_rng(1)
    X = g.standard_normal((3, 5, 4))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    Y = np.where(g.standard_normal((3, 5)) > 0, 1.0, -1.0)
    head = ReLUHead(g.standard_normal((4, 4)) / 4)
    for param in ("W", "KQ"):
        a = train_sequence(X, Y, head=head, param=param, causal=True, steps=50, record_every=25, engine="autograd")
        b = train_sequence(X, Y, head=head, param=param, causal=True, steps=50, record_every=25)
        assert _rel(b.W, a.W) <= 1e-10 and np.all(b.softmax[..., np.triu(np.ones((5, 5), bool), 1)] == 0)
    probs = _probs(2, n=4, T=5, d=6)
    a = train(probs, head=_tanh_head, steps=50, record_every=25)  # auto: full autograd for an unknown callable
    b = train(probs, head=_tanh_head, steps=50, record_every=25, engine="closed")  # autograd on the head alone
    assert _rel(b.W, a.W) <= 1e-10


def test_eps_must_be_positive_and_ignored_positions_do_not_dilute_the_loss():
    import pytest as _pytest

    from attnsvm.errors import ValidationError as _VE
    from attnsvm.generators import random_problem as _rp
    from attnsvm.training.train import train as _train, train_sequence as _train_seq

    with _pytest.raises(_VE, match="eps"):
        _train(_rp(2, 3, 4, 0), steps=1, eps=0.0)
    g = np.random.default_rng(0)
    X = g.standard_normal((2, 4, 3))
    H = g.standard_normal((3, 5))
    targets = g.integers(0, 5, size=(2, 4))
    targets[:, 0] = -1  # the first position has no target
    res = _train_seq(X, targets, H=H, causal=True, steps=0, init="zero", seed=0)
    # by hand: W = 0 gives uniform causal attention, o_k = mean of x_t for t <= k
    losses = []
    for i in range(2):
        for k in range(1, 4):
            logits = H.T @ X[i, : k + 1].mean(axis=0)
            losses.append(np.log(np.exp(logits - logits.max()).sum()) + logits.max() - logits[targets[i, k]])
    np.testing.assert_allclose(res.loss[0, 0], np.mean(losses), rtol=1e-12)
