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
from attnsvm.training.loop import TrainConfig, run, want_mask
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
    cfg = TrainConfig(param="p", steps=steps, lr=lr, optimizer=optimizer, cps=np.arange(steps + 1), loss=loss, eps=eps,
                      train_v=train_v)
    return run(NotebookKernel(problem, p0, v0, cfg, eps_v=eps_v, dtype=dtype), steps)


class NotebookKernel:
    """Kernel of :func:`attnsvm.training.loop.run` replaying the notebooks: autograd in ``dtype``, the
    update ``x <- x - lr g / (||g|| + eps)`` (NGD) or ``x <- x - lr g`` (GD) of p (and of v with ``eps_v``).
    Records p, v and the attention at every step."""

    def __init__(self, problem, p0, v0, cfg, *, eps_v, dtype):
        ft = dtype
        X = torch.tensor(problem.X, dtype=ft)
        W = torch.tensor(problem.W if problem.W is not None else np.eye(problem.d), dtype=ft)
        self.X, self.Y, self.K = X, torch.tensor(problem.Y, dtype=ft), X @ W
        self.p = torch.tensor(np.asarray(p0, dtype=np.float64), dtype=ft).requires_grad_(True)
        self.v = torch.tensor(np.asarray(problem.v if v0 is None else v0, dtype=np.float64), dtype=ft)
        self.v.requires_grad_(cfg.train_v)
        self.lr, self.eps, self.eps_v, self.ngd = cfg.lr, cfg.eps, eps_v, cfg.ngd
        self.loss, self.train_v = cfg.loss, cfg.train_v
        self.want = want_mask(cfg.steps, cfg.cps)
        self.ps, self.vs, self.ss = [], [], []

    def gradient(self, k):
        """The forward pass (the backward pass runs in :meth:`update`, after the record); no health check
        (the notebooks had none)."""
        self.s = s = torch.softmax(self.K @ self.p, dim=-1)
        f = (s.unsqueeze(1) @ self.X).squeeze(1) @ self.v
        u = self.Y * f
        if self.loss == "logistic":
            self.L = torch.nn.functional.softplus(-u).mean()
        elif self.loss == "exponential":
            self.L = torch.exp(-u).mean()
        else:
            self.L = (-u).mean()

    def record(self):
        self.ps.append(self.p.detach().numpy().copy())
        self.vs.append(self.v.detach().numpy().copy())
        self.ss.append(self.s.detach().numpy().copy())

    def update(self, k):
        self.L.backward()
        lr, p, v = self.lr, self.p, self.v
        with torch.no_grad():
            g = p.grad
            p -= lr * g / (g.norm() + self.eps) if self.ngd else lr * g
            p.grad = None
            if self.train_v:
                g = v.grad
                v -= lr * g / (g.norm() + self.eps_v) if self.ngd else lr * g
                v.grad = None

    def result(self):
        return {"p": np.array(self.ps, dtype=np.float64), "v": np.array(self.vs, dtype=np.float64),
                "s": np.array(self.ss, dtype=np.float64)}


def notebook_float32(problem: TokenProblem, p0, **kw):
    """:func:`notebook_replay` in float32 (the notebooks' precision); same arguments and result."""
    return notebook_replay(problem, p0, dtype=torch.float32, **kw)
