"""The lean numpy path of single small runs agrees with the torch loops; routing and fallbacks."""

import numpy as np
import pytest
import torch

import attnsvm.training.engine as engine
from attnsvm.generators import random_problem
from attnsvm.training import train
from attnsvm.training.lean import lean_applies, softmax_backward_np
from attnsvm.training.kernel import softmax_backward
from attnsvm.training.models import ReLUHead


def _rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def _both(monkeypatch, *args, **kw):
    """(torch loops forced, automatic choice) results of the same call."""
    monkeypatch.setattr(engine, "LEAN_PATH", False)
    ref = train(*args, **kw)
    monkeypatch.setattr(engine, "LEAN_PATH", True)
    return ref, train(*args, **kw)


@pytest.mark.parametrize("param", ["W", "KQ"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_lean_agrees_with_torch(monkeypatch, param, seed):
    P = random_problem(6, 8, 10, seed=seed)
    for optimizer, loss in (("ngd", "logistic"), ("gd", "logistic"), ("ngd", "exponential"), ("ngd", "squared")):
        ref, lean = _both(monkeypatch, P, param=param, optimizer=optimizer, loss=loss, steps=2000, seed=seed)
        assert _rel(lean.W, ref.W) <= 1e-9
        assert _rel(lean.softmax, ref.softmax) <= 1e-9
        assert np.allclose(lean.loss, ref.loss, rtol=1e-9, atol=0)
        assert np.allclose(lean.grad_norm, ref.grad_norm, rtol=1e-9, atol=0)
        a, b = lean.W[0, -1].ravel(), ref.W[0, -1].ravel()
        cos = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))  # the correlation of the final W
        assert abs(1.0 - cos) <= 1e-12
        if param == "KQ":
            assert _rel(lean.K, ref.K) <= 1e-9 and _rel(lean.Q, ref.Q) <= 1e-9
        assert np.array_equal(lean.steps, ref.steps) and np.array_equal(lean.selection, ref.selection)
        assert not lean.saturated.any() and np.all(lean.saturated_step == -1)


def test_lean_routing():
    P = random_problem(6, 8, 10, seed=0)
    from attnsvm.training.engine import prepare_data

    _, data = prepare_data(P, None, "W", None, False, "logistic")
    assert lean_applies(data, "W", None, "logistic", False, "auto", "ngd", False, 1)
    assert not lean_applies(data, "W", None, "logistic", False, "auto", "adam", False, 1)  # Adam: torch
    assert not lean_applies(data, "W", None, "logistic", False, "auto", "ngd", True, 1)  # bitwise: torch
    assert not lean_applies(data, "W", None, "logistic", True, "auto", "ngd", False, 1)  # train_v: torch
    assert not lean_applies(data, "W", ReLUHead(np.ones((10, 2))), "logistic", False, "auto", "ngd", False, 1)
    assert not lean_applies(data, "W", None, "logistic", False, "autograd", "ngd", False, 1)
    _, data2 = prepare_data([P, P], None, "W", None, False, "logistic")
    assert not lean_applies(data2, "W", None, "logistic", False, "auto", "ngd", False, 2)  # batched: torch


def test_saturated_run_falls_back_to_torch_exactly(monkeypatch):
    """A run whose gradient becomes exactly zero is rerun by the torch loop: same flags, bitwise same numbers."""
    P = random_problem(6, 8, 10, seed=0)
    W0 = 1e5 * np.random.default_rng(0).standard_normal((10, 10))
    ref, lean = _both(monkeypatch, P, init=W0, steps=20, record_every=10)
    assert ref.saturated.all() and np.array_equal(lean.saturated_step, ref.saturated_step)
    assert np.array_equal(lean.W, ref.W) and np.array_equal(lean.grad_norm, ref.grad_norm)


def test_numpy_and_torch_kernels_agree():
    g = np.random.default_rng(3)
    a = 5 * g.standard_normal((4, 7))
    beta = g.standard_normal((4, 7))
    s = np.exp(a - a.max(1, keepdims=True))
    s /= s.sum(1, keepdims=True)
    exact = s * (beta - (s * beta).sum(1, keepdims=True))  # (diag(s) - s s^T) beta, naive form
    top = s.argmax(1)
    c_np, m, btop = softmax_backward_np(s, beta, top)
    st, bt = torch.as_tensor(s), torch.as_tensor(beta)
    c_top, m_t, btop_t = softmax_backward(st, bt.clone(), top=torch.as_tensor(top).unsqueeze(-1))
    forms = (c_np, c_top.numpy(), softmax_backward(st, bt).numpy(), softmax_backward(st, bt, fixed_order=True).numpy())
    for c in forms:
        np.testing.assert_allclose(c, exact, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(btop + m, (s * beta).sum(1), rtol=1e-13)
    np.testing.assert_allclose(m_t.squeeze(-1).numpy(), m, rtol=1e-13)


def test_kernel_is_saturation_exact():
    """One-hot attention gives exactly zero weights; a nearly one-hot one keeps tiny weights exact."""
    s = torch.tensor([[1.0, 0.0, 0.0], [1.0 - 1e-30, 1e-30, 0.0]], dtype=torch.float64)
    beta = torch.tensor([[2.0, 1.0, 0.5], [2.0, 1.0, 0.5]], dtype=torch.float64)
    for c in (softmax_backward(s, beta), softmax_backward(s, beta, top=torch.zeros(2, 1, dtype=torch.int64))[0]):
        assert torch.all(c[0] == 0)
        assert c[1, 1].item() == pytest.approx(-1e-30, rel=1e-12)
        assert c[1, 0].item() == pytest.approx(1e-30, rel=1e-12)
