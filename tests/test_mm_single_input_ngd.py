"""E1 of Max-Margin Token Selection measured a second way: plain numpy NGD, independent of the training engine.

mm-single-input checks "every init converges in direction to p^mm_global" at cos >= 0.999 on pure normalized
GD (epsilon 1e-300); with the notebook's epsilon 1e-9 the motion stops near ||p|| = 21.5 (spec pitfalls 1 and 4).
This file re-derives both facts with its own gradient (log-domain softmax), so the experiment's pass does not
rest on one implementation.
"""

from __future__ import annotations

import numpy as np
import pytest

#: E1 global data: tokens (x, y, score); W = diag(1, 1, 0), v = e_3, Y = 1
TOKENS = np.array([[-0.1, 1.0, 1.0], [1.0, 0.0, 0.9], [0.0, 0.0, 0.9]])
P_MM = np.array([-0.0990099, 0.9900990, 0.0])  # fact 1 of the spec
INITS = np.array([[0.0, y, 0.0] for y in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)])


def _ngd(eps: float, steps: int = 1000, lr: float = 0.1) -> np.ndarray:
    """``p (R, 3)`` after ``steps`` of ``p <- p - lr g / (||g|| + eps)`` on the logistic loss, R = 6 inits."""
    K = TOKENS * np.array([1.0, 1.0, 0.0])           # keys W x_t (T, 3)
    gamma = TOKENS[:, 2]                             # scores x_t^T v (T,)
    p = INITS.copy()
    for _ in range(steps):
        logits = p @ K.T                             # (R, T)
        logs = logits - logits.max(axis=1, keepdims=True)
        logs -= np.log(np.exp(logs).sum(axis=1, keepdims=True))
        s = np.exp(logs)                             # softmax, log-domain
        top = gamma.argmax()
        # f - gamma_top without cancellation: sum_u s_u (gamma_u - gamma_top)
        f_minus_top = s @ (gamma - gamma[top])
        f = gamma[top] + f_minus_top
        # d f / d p = sum_t s_t (gamma_t - f) k_t; loss log(1 + exp(-f)): dL/df = -sigmoid(-f)
        coef = s * ((gamma - gamma[top])[None, :] - f_minus_top[:, None])
        g = -(1.0 / (1.0 + np.exp(f)))[:, None] * (coef @ K)
        p = p - lr * g / (np.linalg.norm(g, axis=1, keepdims=True) + eps)
    return p


def _cos(p: np.ndarray) -> np.ndarray:
    return p @ P_MM / (np.linalg.norm(p, axis=1) * np.linalg.norm(P_MM))


def test_pure_ngd_converges_in_direction_at_the_0999_bar():
    p = _ngd(1e-300)
    assert np.linalg.norm(p, axis=1) == pytest.approx(100.0, abs=2.0)  # ||p(t)|| ~ lr t (spec fact 15's law)
    assert _cos(p).min() >= 0.999


def test_the_notebooks_epsilon_stalls_the_motion_below_the_bar():
    p = _ngd(1e-9)
    norms = np.linalg.norm(p, axis=1)
    assert norms.max() < 25.0, "the epsilon caps growth once ||g|| <~ epsilon (spec pitfall 4)"
    assert _cos(p).min() < 0.999 and _cos(p).min() > 0.99  # identified, not converged at 0.999
