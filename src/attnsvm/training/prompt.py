"""The prompt model ``f(X) = v^T X^T softmax(X W p)`` (trainable prompt p, optionally v): gradient and training.

Shapes: a prompt problem has tokens X (n, T, d), labels Y (n,), head v (d,) and a fixed W (d, d) (keys
``k_it = W^T x_it``, stored as ``problem.keys`` (n, T, d)); prompts are p (d,) or R of them (R, d).

* :func:`prompt_grad`: the closed-form gradient in p (the shared softmax kernel);
* :func:`engine_train`: R batched runs of :func:`attnsvm.training.train.train` with ``param="p"``;
* :func:`notebook_replay` / :func:`notebook_float32`: the research notebooks' protocol (autograd,
  one run, float32 or float64), kept to reproduce their figures, including their loss of accuracy
  once the attention saturates.
"""

from __future__ import annotations

import numpy as np
import torch

from attnsvm.problem import TokenProblem
from attnsvm.training.kernel import closed_form_step
from attnsvm.training.train import train

__all__ = ["prompt_grad", "engine_train", "notebook_replay", "notebook_float32"]


def prompt_grad(problem: TokenProblem, P, loss: str = "logistic") -> np.ndarray:
    """Mean-loss gradients in p at the prompts ``P`` (R, d) or (d,): returns (R, d) float64.

    ``problem``: a prompt problem (X (n, T, d), Y (n,), v (d,), W (d, d) or None, keys ``X W``).
    The gradient is the closed form of the softmax kernel (pairwise form, fixed-order sums:
    :func:`attnsvm.training.kernel.closed_form_step`), ``sum_it c_it k_it`` with
    ``c_i = l'(Y_i f_i) / n (diag(s_i) - s_i s_i^T) Y_i X_i v``.
    """
    P = np.atleast_2d(np.asarray(P, dtype=np.float64))
    R = P.shape[0]

    def t(a):
        return torch.as_tensor(np.array(a, dtype=np.float64)).unsqueeze(0).expand(R, *np.shape(a)).contiguous()

    out = closed_form_step(t(problem.X), t(problem.Y), t(problem.v), param="p", p=torch.as_tensor(P),
                           keys=t(problem.keys), loss=loss)
    return out["gp"].numpy()


def engine_train(problem, init, *, steps, lr, optimizer, eps, checkpoints, loss="logistic", train_v=False):
    """Train R prompt runs (one per row of ``init`` (R, d)) with :func:`attnsvm.training.train.train`, param "p".

    ``problem``: one prompt TokenProblem (all R runs on it) or a list of R problems of equal shape
    (one run each, batched). ``steps``, ``lr``, ``optimizer``, ``eps``, ``checkpoints``, ``loss``,
    ``train_v`` are those of ``train``. Returns its TrainResult (``p`` (R, C, d)).
    """
    init = np.atleast_2d(np.asarray(init, dtype=np.float64))
    runs = None if isinstance(problem, (list, tuple)) else init.shape[0]
    return train(list(problem) if runs is None else problem, param="p", runs=runs, steps=int(steps), lr=float(lr),
                 optimizer=optimizer, init=init, checkpoints=checkpoints, eps=float(eps), loss=loss, train_v=train_v)


def notebook_replay(problem: TokenProblem, p0, *, steps: int, lr: float, eps: float, optimizer: str = "ngd",
                    loss: str = "logistic", train_v: bool = False, v0=None, eps_v: float = 1e-9,
                    dtype: torch.dtype = torch.float32):
    """Replay the research notebooks' protocol: autograd, (normalized) SGD, one run, in ``dtype``.

    ``dtype=torch.float32`` is the notebooks' precision; ``torch.float64`` is the same protocol
    (autograd, separate epsilons for p and v) in double precision, which is how the spec's
    float64 [RUN] figures of E3 were made.

    ``p <- p - lr g / (||g|| + eps)`` (``optimizer="ngd"``) or ``p <- p - lr g`` ("gd") on the
    mean loss of the prompt model; with ``train_v`` the head is updated the same way with
    its own ``eps_v``. The softmax Jacobian is applied in the naive form ``u = s^T gamma``
    of autograd, which is what loses the selected token's gradient once attention saturates.

    ``problem``: a prompt problem (X (n, T, d), Y (n,), v (d,), W (d, d) or None = identity);
    ``p0`` (d,) the initial prompt, ``v0`` (d,) the initial head (default the problem's v).

    Returns
    -------
    dict with float64 arrays ``p (steps+1, d)``, ``v (steps+1, d)``, ``s (steps+1, n, T)``.
    """
    ft = dtype
    X = torch.tensor(problem.X, dtype=ft)
    W = torch.tensor(problem.W if problem.W is not None else np.eye(problem.d), dtype=ft)
    Y = torch.tensor(problem.Y, dtype=ft)
    K = X @ W
    p = torch.tensor(np.asarray(p0, dtype=np.float64), dtype=ft).requires_grad_(True)
    v = torch.tensor(np.asarray(problem.v if v0 is None else v0, dtype=np.float64), dtype=ft)
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


def notebook_float32(problem: TokenProblem, p0, **kw):
    """:func:`notebook_replay` in float32 (the notebooks' precision); same arguments and result."""
    return notebook_replay(problem, p0, dtype=torch.float32, **kw)
