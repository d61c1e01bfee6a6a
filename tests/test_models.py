"""Attention models, heads and losses: closed-form gradients vs autograd, spec formulas and finite differences."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from attnsvm.generators import random_problem
from attnsvm.training.losses import MARGIN_LOSSES, cross_entropy, margin_loss, margin_loss_grad, sample_losses
from attnsvm.training.models import (
    AttentionModel, LambdaHead, LinearHead, ReLUHead, attention_logits, causal_mask, closed_form_step,
    linear_head_loss, pair_weights, softmax, token_form, token_scores,
)
from attnsvm.tokens import lambda_head, relu_head

D = torch.float64


def _batch(R=3, n=4, T=5, d=6, seed=0, scale=1.0):
    probs = [random_problem(n, T, d, seed=seed + r) for r in range(R)]
    g = torch.Generator().manual_seed(seed)
    def t(a):
        return torch.tensor(np.stack(a))

    X, Z, Y, v = t([p.X for p in probs]), t([p.Z for p in probs]), t([p.Y for p in probs]), t([p.v for p in probs])
    W = scale * torch.randn(R, d, d, generator=g, dtype=D)
    K = scale * torch.randn(R, d, 4, generator=g, dtype=D)
    Q = scale * torch.randn(R, d, 4, generator=g, dtype=D)
    p = scale * torch.randn(R, d, generator=g, dtype=D)
    Wp = torch.randn(R, d, d, generator=g, dtype=D)
    keys = torch.matmul(X, Wp.unsqueeze(1))
    return dict(X=X, Z=Z, Y=Y, v=v, W=W, K=K, Q=Q, p=p, keys=keys)


def _rel(a, b):
    return float((a - b).norm() / max(b.norm(), 1e-300))


def _autograd(b, param, loss, wrt):
    leaves = {k: b[k].clone().requires_grad_(True) for k in wrt}
    kw = {k: leaves.get(k, b[k]) for k in ("W", "K", "Q", "p", "v")}
    L = linear_head_loss(b["X"], b["Y"], kw.pop("v"), param=param, queries=b["Z"], keys=b["keys"], loss=loss, **kw)
    grads = torch.autograd.grad(L.sum(), [leaves[k] for k in wrt])
    return L.detach(), dict(zip(wrt, grads))


@pytest.mark.parametrize("loss", MARGIN_LOSSES)
@pytest.mark.parametrize("param", ["W", "KQ", "p"])
def test_closed_form_matches_autograd(param, loss):
    b = _batch()
    wrt = {"W": ["W", "v"], "KQ": ["K", "Q", "v"], "p": ["p", "v"]}[param]
    L, ag = _autograd(b, param, loss, wrt)
    cf = closed_form_step(b["X"], b["Y"], b["v"], param=param, W=b["W"], K=b["K"], Q=b["Q"], p=b["p"],
                          queries=b["Z"], keys=b["keys"], loss=loss, want_v=True)
    names = {"W": "G", "K": "gK", "Q": "gQ", "p": "gp", "v": "gv"}
    assert torch.allclose(cf["loss"], L, rtol=1e-13, atol=0)
    for k in wrt:
        assert _rel(cf[names[k]], ag[k]) <= 1e-10, k


def test_gradient_matches_spec_formula_and_kq_chain_rule():
    """(1/n) sum_i l'(Y_i f_i) X_i^T (diag(s_i) - s_i s_i^T) gamma_i z_i^T, and grad_K = G Q, grad_Q = G^T K."""
    b = _batch(R=2, n=5, T=4, d=3, seed=7)
    X, Z, Y, v, W = (b[k].numpy() for k in ("X", "Z", "Y", "v", "W"))
    cf = closed_form_step(b["X"], b["Y"], b["v"], param="W", W=b["W"], queries=b["Z"])
    for r in range(2):
        G = np.zeros((3, 3))
        for i in range(5):
            a = X[r, i] @ W[r] @ Z[r, i]
            s = np.exp(a - a.max())
            s /= s.sum()
            gam = Y[r, i] * X[r, i] @ v[r]
            u = s @ gam
            lp = -1.0 / (1.0 + np.exp(u))
            G += lp * np.outer(X[r, i].T @ ((np.diag(s) - np.outer(s, s)) @ gam), Z[r, i]) / 5
        assert np.linalg.norm(cf["G"][r].numpy() - G) <= 1e-12 * np.linalg.norm(G)
    kq = closed_form_step(b["X"], b["Y"], b["v"], param="KQ", K=b["K"], Q=b["Q"], queries=b["Z"])
    assert _rel(kq["gK"], torch.bmm(kq["G"], b["Q"])) <= 1e-12
    assert _rel(kq["gQ"], torch.bmm(kq["G"].transpose(1, 2), b["K"])) <= 1e-12


@pytest.mark.parametrize("param", ["W", "KQ", "p"])
def test_finite_differences(param):
    b = _batch(R=1, n=3, T=4, d=3, seed=3)
    cf = closed_form_step(b["X"], b["Y"], b["v"], param=param, W=b["W"], K=b["K"], Q=b["Q"], p=b["p"],
                          queries=b["Z"], keys=b["keys"], want_v=True)
    names = {"W": "G", "K": "gK", "Q": "gQ", "p": "gp", "v": "gv"}
    rng = np.random.default_rng(0)
    h = 1e-6
    for k in {"W": ["W", "v"], "KQ": ["K", "Q"], "p": ["p", "v"]}[param]:
        for _ in range(3):
            direction = torch.tensor(rng.standard_normal(tuple(b[k].shape)))

            def L(eps):
                kw = {q: b[q] for q in ("W", "K", "Q", "p", "v")}
                kw[k] = kw[k] + eps * direction
                vv = kw.pop("v")
                return float(linear_head_loss(b["X"], b["Y"], vv, param=param, queries=b["Z"], keys=b["keys"], **kw)[0])

            fd = (L(h) - L(-h)) / (2 * h)
            an = float((cf[names[k]] * direction).sum())
            assert abs(fd - an) <= 1e-6 * max(1.0, abs(an))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.0, 60.0))
def test_pairwise_weights_equal_jacobian_product(seed, temp):
    g = np.random.default_rng(seed)
    a = temp * g.standard_normal(6)
    gam = g.standard_normal(6)
    s = np.exp(a - a.max())
    s /= s.sum()
    ref = (np.diag(s) - np.outer(s, s)) @ gam
    got = pair_weights(torch.tensor(s), torch.tensor(gam)).numpy()
    assert np.allclose(got, ref, atol=1e-14)
    assert abs(got.sum()) <= 1e-14  # the weights always sum to 0


def test_saturated_gradient_keeps_selected_component():
    """At large logits the naive form loses x_opt's share; the pairwise form keeps sum(c) = 0 exactly-ish."""
    s = torch.tensor([1 - 2e-18, 1e-18, 1e-18], dtype=D)
    gam = torch.tensor([1.0, 0.5, 0.2], dtype=D)
    c = pair_weights(s, gam)
    assert c[1] < 0 and c[2] < 0 and c[0] > 0
    assert torch.isclose(c[0], -(c[1] + c[2]), rtol=1e-12)


def test_large_weights_no_overflow():
    b = _batch(scale=1e4)
    for param in ("W", "KQ", "p"):
        cf = closed_form_step(b["X"], b["Y"], b["v"], param=param, W=b["W"], K=b["K"], Q=b["Q"], p=b["p"],
                              queries=b["Z"], keys=b["keys"], want_v=True)
        for val in cf.values():
            assert torch.isfinite(val).all()
    u = torch.tensor([-1e4, -50.0, 0.0, 50.0, 1e4], dtype=D)
    for kind in ("logistic", "correlation", "squared"):
        assert torch.isfinite(margin_loss(u, kind)).all() and torch.isfinite(margin_loss_grad(u, kind)).all()
    assert torch.allclose(margin_loss(u, "logistic")[:2], -u[:2])


def test_module_heads_match_numpy_heads():
    b = _batch(R=2, n=3, T=4, d=5)
    g = np.random.default_rng(1)
    V = g.standard_normal((5, 5))
    V /= np.linalg.norm(V)
    for head, np_head in ((ReLUHead(V), relu_head(V)), (LambdaHead(b["v"][0], 0.3), lambda_head(b["v"][0].numpy(), 0.3))):
        model = AttentionModel("W", W=b["W"], head=head)
        f = model(b["X"], queries=b["Z"]).detach().numpy()
        s = model.softmax.detach().numpy()
        att = np.einsum("rnt,rntd->rnd", s, b["X"].numpy())
        assert np.allclose(f, np_head(att.reshape(-1, 5)).reshape(2, 3), atol=1e-13)
    lin = AttentionModel("W", W=b["W"], v=b["v"])
    alt = AttentionModel("W", W=b["W"], head=LinearHead(b["v"]))
    assert torch.allclose(lin(b["X"], queries=b["Z"]), alt(b["X"], queries=b["Z"]), atol=1e-14)


def test_kq_module_is_product_and_self_attention_queries():
    b = _batch(R=2)
    model = AttentionModel("KQ", K=b["K"], Q=b["Q"], v=b["v"])
    assert torch.allclose(model.combined(), torch.bmm(b["K"], b["Q"].transpose(1, 2)), atol=1e-13)
    a = attention_logits(b["X"], b["X"][:, :, 0], b["W"])
    ref = torch.einsum("rntd,rde,rne->rnt", b["X"], b["W"], b["X"][:, :, 0])
    assert torch.allclose(a, ref, atol=1e-12)
    expected = b["Y"][..., None] * torch.einsum("rntd,rd->rnt", b["X"], b["v"])
    assert torch.allclose(token_scores(b["X"], b["Y"], b["v"]), expected, atol=1e-14)


def test_causal_mask_and_cross_entropy():
    m = causal_mask(4)
    a = torch.randn(1, 4, 4, dtype=D).masked_fill(~m, float("-inf"))
    s = softmax(a)
    assert torch.all(s[0][~m] == 0) and torch.allclose(s.sum(-1), torch.ones(1, 4, dtype=D))
    logits = torch.randn(2, 5, 7, dtype=D) * 100
    tgt = torch.randint(0, 7, (2, 5))
    tgt[0, 0] = -1
    ce = cross_entropy(logits, tgt)
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, 7), tgt.reshape(-1), ignore_index=-1,
                                            reduction="none").reshape(2, 5)
    assert torch.allclose(ce, ref, atol=1e-10) and ce[0, 0] == 0


def _tanh_head(a):
    """A per-sample head without a token form (closed engine: autograd on the head alone)."""
    return torch.tanh(a).sum(-1) - 0.3 * a[..., 0] ** 2


def _heads(b, d):
    g = np.random.default_rng(5)
    V = torch.tensor(g.standard_normal((b["X"].shape[0], d, d))) / d
    return {"relu": ReLUHead(V), "lambda": LambdaHead(b["v"], 0.4), "linear": LinearHead(b["v"]), "callable": _tanh_head}


def _head_autograd(b, param, head, loss, mask=None):
    wrt = {"W": ["W"], "KQ": ["K", "Q"], "p": ["p"]}[param]
    model = AttentionModel(param, W=b["W"], K=b["K"], Q=b["Q"], p=b["p"], head=head)
    out = model(b["X"], queries=b["Z"], keys=b["keys"], mask=mask)
    L = sample_losses(out, b["Y"], loss).mean(-1)
    grads = torch.autograd.grad(L.sum(), [getattr(model, k) for k in wrt])
    return L.detach(), dict(zip(wrt, grads)), model.softmax.detach()


@pytest.mark.parametrize("bitwise", [False, True])
@pytest.mark.parametrize("loss", MARGIN_LOSSES)
@pytest.mark.parametrize("param", ["W", "KQ", "p"])
@pytest.mark.parametrize("kind", ["relu", "lambda", "linear", "callable"])
def test_head_closed_form_matches_autograd(kind, param, loss, bitwise):
    """f = h(X^T s): the closed form with token scores q_it = grad h(a_i)^T x_it equals autograd."""
    b = _batch(R=3, n=4, T=5, d=6, seed=11)
    head = _heads(b, 6)[kind]
    L, ag, s = _head_autograd(b, param, head, loss)
    form = token_form(head, b["X"], bitwise=bitwise)
    assert (form.fixed is not None) == (kind == "linear")
    cf = closed_form_step(b["X"], b["Y"], None, param=param, W=b["W"], K=b["K"], Q=b["Q"], p=b["p"], queries=b["Z"],
                          keys=b["keys"], loss=loss, bitwise=bitwise, form=form)
    assert torch.allclose(cf["loss"], L, rtol=1e-13, atol=0)
    assert torch.allclose(cf["s"], s, rtol=1e-13, atol=1e-300)
    names = {"W": "G", "K": "gK", "Q": "gQ", "p": "gp"}
    for k, g in ag.items():
        assert _rel(cf[names[k]], g) <= 1e-10, k


def test_head_closed_form_masked_and_saturated():
    b = _batch(R=2, n=4, T=5, d=6, seed=2)
    head = _heads(b, 6)["relu"]
    mask = torch.ones(1, 4, 5, dtype=torch.bool)
    mask[0, 1, 3:] = False
    mask[0, 2, 1] = False
    L, ag, s = _head_autograd(b, "W", head, "logistic", mask=mask)
    for bitwise in (False, True):
        cf = closed_form_step(b["X"], b["Y"], None, param="W", W=b["W"], queries=b["Z"], mask=mask, bitwise=bitwise,
                              form=token_form(head, b["X"], bitwise=bitwise))
        assert torch.all(cf["s"][0][~mask[0]] == 0)
        assert _rel(cf["G"], ag["W"]) <= 1e-10
    # exactly one-hot attention: the gradient is exactly zero, never NaN
    big = _batch(R=2, n=4, T=5, d=6, seed=2, scale=1e5)
    for bitwise in (False, True):
        cf = closed_form_step(big["X"], big["Y"], None, param="W", W=big["W"], queries=big["Z"], bitwise=bitwise,
                              form=token_form(head, big["X"], bitwise=bitwise))
        assert torch.all(torch.isfinite(cf["G"]))
        assert torch.all((cf["s"] == 0) | (cf["s"] == 1)) and torch.all(cf["G"] == 0)


def test_token_forms_of_the_heads():
    """q_it = grad h(a_i)^T x_it: ReLU g = V 1[V^T a > 0], lambda g = v - 2 lam a."""
    b = _batch(R=2, n=3, T=4, d=5, seed=4)
    s = softmax(torch.randn(2, 3, 4, dtype=D, generator=torch.Generator().manual_seed(1)))
    a = torch.einsum("rnt,rntd->rnd", s, b["X"])
    V = torch.randn(2, 5, 7, dtype=D, generator=torch.Generator().manual_seed(2))
    pre = torch.einsum("rnd,rdk->rnk", a, V)
    g = torch.einsum("rdk,rnk->rnd", V, (pre > 0).to(D))
    for bitwise in (False, True):
        f, q = token_form(ReLUHead(V), b["X"], bitwise=bitwise)(s)
        assert torch.allclose(f, torch.relu(pre).sum(-1), atol=1e-13)
        assert torch.allclose(q, torch.einsum("rntd,rnd->rnt", b["X"], g), atol=1e-13)
        f, q = token_form(LambdaHead(b["v"], 0.7), b["X"], bitwise=bitwise)(s)
        gl = b["v"].unsqueeze(1) - 1.4 * a
        assert torch.allclose(f, torch.einsum("rnd,rd->rn", a, b["v"]) - 0.7 * (a * a).sum(-1), atol=1e-13)
        assert torch.allclose(q, torch.einsum("rntd,rnd->rnt", b["X"], gl), atol=1e-13)
