"""Helpers shared by the max-margin (prompt attention) experiments ``mm-*``.

The model is ``f(X) = v^T X^T softmax(X W p)`` with a trainable prompt ``p`` ("Max-Margin
Token Selection in Attention Mechanism", spec ``max-margin-token-selection.md``). Here:
the p-SVM wrapper, the engine's prompt gradient and training, the float32 replay of the
research notebooks, checkpoint grids, table lookups and the path-drawing helpers.

Convention for step numbers: "iteration t" of the spec is the iterate after t updates
(the notebooks record p before each update), so the spec's "iteration 200" is step 199
here and its "t = 1000" is step 1000.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..generators import mm_joint, mm_multi_input
from ..models import closed_form_step
from ..problem import TokenProblem
from ..svm import solve_p_svm, solve_v_svm
from ..train import train
from .common import log_steps

PAPER_MM = "Max-Margin Token Selection in Attention Mechanism (Tarzanagh et al., NeurIPS 2023)"
SINGLE_INITS = [1.0, 0.5, 0.0, -0.5, -1.0, -1.5]


# ------------------------------------------------------------------ checkpoints and table lookups


def dense_steps(total: int, dense: int = 200, every: int = 10, extra=()) -> list[int]:
    """Every step up to ``dense``, then every ``every`` steps, plus ``extra`` (all <= total)."""
    s = set(range(0, min(dense, total) + 1))
    s.update(range(0, total + 1, every))
    s.update(e for e in extra if 0 <= e <= total)
    s.add(total)
    return sorted(s)


def log_steps_per_decade(total: int, per_decade: int = 20, extra=()) -> list[int]:
    """About ``per_decade`` log-spaced steps per decade in [1, total], plus 0, total and ``extra``."""
    decades = max(1, int(np.ceil(np.log10(max(total, 2)))))
    return log_steps(total, per_decade * decades + 1, extra)


def rows_at(table: pd.DataFrame, step: int) -> pd.DataFrame:
    """Rows recorded exactly at ``step`` (empty if that step was not recorded)."""
    return table[table["step"] == step]


def max_dev(a, b) -> float:
    """Largest absolute deviation between two arrays (how a fact is compared with the spec)."""
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def support_str(mask_row) -> str:
    """Indices of a boolean mask as ``"i,j,..."`` (a table cell)."""
    idx = np.flatnonzero(np.asarray(mask_row, bool))
    return ",".join(str(int(i)) for i in idx)


# ------------------------------------------------------------------ SVMs of the prompt model


def p_svm(problem: TokenProblem, select, relaxed=None):
    """The (relaxed) p-SVM of a prompt problem for a selection (exact QP of attnsvm.svm)."""
    kw = {}
    if relaxed is True:
        kw["Y"] = problem.Y
    return solve_p_svm(problem.X, problem.W, np.asarray(select, dtype=np.int64), relaxed, **kw)


def joint_svms(kind: str):
    """E3 data ``kind`` ("tight" or "relaxed") with its v-SVM, p-SVM and relaxed p-SVM (token 1 selected)."""
    prob = mm_joint(kind)
    sel = np.ones(prob.n, dtype=np.int64)
    vs = solve_v_svm(prob.X, prob.Y, sel)
    pm = p_svm(prob, sel)
    pr = p_svm(prob, sel, relaxed=True)
    return prob, vs, pm, pr


def e2_as_cross_attention() -> tuple[TokenProblem, np.ndarray]:
    """The E2 tokens as cross-attention with the fixed query ``z = (1, 1, 1) / sqrt(3)``; returns (problem, z)."""
    prob = mm_multi_input()
    z = np.array([1.0, 1.0, 1.0]) / np.sqrt(3.0)
    return TokenProblem(prob.X, np.tile(z, (prob.n, 1)), Y=prob.Y, v=prob.v, name="e2-as-W"), z


# ------------------------------------------------------------------ training


def prompt_grad(problem: TokenProblem, P, loss: str = "logistic") -> np.ndarray:
    """Loss gradients in p at the prompts ``P (R, d)`` (the engine's pairwise closed form)."""
    P = np.atleast_2d(np.asarray(P, dtype=np.float64))
    R = P.shape[0]
    t = lambda a: torch.as_tensor(np.array(a, dtype=np.float64)).unsqueeze(0).expand(R, *np.shape(a)).contiguous()  # noqa: E731
    out = closed_form_step(t(problem.X), t(problem.Y), t(problem.v), param="p", p=torch.as_tensor(P),
                           keys=t(problem.keys), loss=loss)
    return out["gp"].numpy()


def engine_train(problem: TokenProblem, init, *, steps, lr, optimizer, eps, checkpoints, loss="logistic",
                 train_v=False):
    """Train R prompt runs (one per row of ``init``) on one problem with attnsvm.train."""
    torch.set_num_threads(1)
    init = np.atleast_2d(np.asarray(init, dtype=np.float64))
    return train(problem, param="p", runs=init.shape[0], steps=int(steps), lr=float(lr), optimizer=optimizer,
                 init=init, checkpoints=checkpoints, eps=float(eps), loss=loss, train_v=train_v)


def notebook_float32(problem: TokenProblem, p0, *, steps: int, lr: float, eps: float, optimizer: str = "ngd",
                     loss: str = "logistic", train_v: bool = False, v0=None, eps_v: float = 1e-9):
    """Replay the research notebooks' protocol: float32, autograd, (normalized) SGD, one run.

    ``p <- p - lr g / (||g|| + eps)`` (``optimizer="ngd"``) or ``p <- p - lr g`` ("gd") on the
    mean loss of the prompt model; with ``train_v`` the head is updated the same way with
    its own ``eps_v``. The softmax Jacobian is applied in the naive form ``u = s^T gamma``
    of autograd, which is what loses the selected token's gradient once attention saturates.

    Returns
    -------
    dict with float64 arrays ``p (steps+1, d)``, ``v (steps+1, d)``, ``s (steps+1, n, T)``.
    """
    f32 = torch.float32
    X = torch.tensor(problem.X, dtype=f32)
    W = torch.tensor(problem.W if problem.W is not None else np.eye(problem.d), dtype=f32)
    Y = torch.tensor(problem.Y, dtype=f32)
    K = X @ W
    p = torch.tensor(np.asarray(p0, dtype=np.float64), dtype=f32).requires_grad_(True)
    v = torch.tensor(np.asarray(problem.v if v0 is None else v0, dtype=np.float64), dtype=f32)
    v.requires_grad_(train_v)
    ps, vs, ss = [], [], []
    for it in range(steps + 1):
        s = torch.softmax(K @ p, dim=-1)
        f = (s.unsqueeze(1) @ X).squeeze(1) @ v
        u = Y * f
        if loss == "logistic":
            L = torch.nn.functional.softplus(-u).mean()
        elif loss == "exponential":
            L = torch.exp(-u).mean()
        else:
            L = (-u).mean()
        ps.append(p.detach().numpy().copy())
        vs.append(v.detach().numpy().copy())
        ss.append(s.detach().numpy().copy())
        if it == steps:
            break
        L.backward()
        with torch.no_grad():
            g = p.grad
            p -= lr * g / (g.norm() + eps) if optimizer == "ngd" else lr * g
            p.grad = None
            if train_v:
                g = v.grad
                v -= lr * g / (g.norm() + eps_v) if optimizer == "ngd" else lr * g
                v.grad = None
    return {"p": np.array(ps, dtype=np.float64), "v": np.array(vs, dtype=np.float64),
            "s": np.array(ss, dtype=np.float64)}


# ------------------------------------------------------------------ drawing


def draw_path(ax, P2, color, arrows_every=10, lw=1.0, alpha=1.0, label=None, ls="-"):
    """A 2-D iterate path ``P2 (steps, 2)`` with an arrow every ``arrows_every`` steps."""
    ax.plot(P2[:, 0], P2[:, 1], color=color, lw=lw, alpha=alpha, label=label, ls=ls)
    for j in range(0, len(P2) - 1, arrows_every):
        a, b = P2[j], P2[min(j + 1, len(P2) - 1)]
        if np.linalg.norm(b - a) > 0:
            ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="->", color=color, lw=lw, alpha=alpha))


def draw_ray(ax, direction, length, color, label, ls="--", lw=1.6):
    """The ray from 0 along the first two coordinates of ``direction``, ``length`` long."""
    u = np.asarray(direction[:2], dtype=np.float64)
    u = u / np.linalg.norm(u)
    ax.plot([0, length * u[0]], [0, length * u[1]], ls=ls, color=color, lw=lw, label=label)
