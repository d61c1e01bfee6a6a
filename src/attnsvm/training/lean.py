"""The lean path: kernels that train one small run with plain numpy float64 (no torch per step).

On tiny tensors a torch step is dominated by per-call overhead; :class:`LeanTokenKernel` and
:class:`LeanKQKernel` run the same iterates with numpy on the arrays of the one run (driven by
:func:`attnsvm.training.loop.run`), for the settings they cover:

* one run (R = 1), no mask, the linear head (``head=None``, frozen v), closed-form engine;
* GD or normalized GD; param W (token-space kernel, ``n T <= LEAN_MAX_TOKENS``) or KQ (direct kernel,
  ``n T <= LEAN_MAX_TOKENS_KQ``, ``d, m <= LEAN_MAX_DIM``);
* a margin loss whose derivative needs no log-scale (the exponential loss only while every score
  ``-gamma`` stays below :data:`attnsvm.training.losses.EXP_SHIFT_AT`).

Everything else goes to the torch kernels. The iterates equal those of the torch kernels
(:mod:`attnsvm.training.fast`) up to rounding (BLAS and vectorized ``exp`` round differently; the
tests bound the difference). A run whose gradient norm becomes 0 (saturation) or non-finite is not
handled here: :func:`lean_loop` then returns None and the caller reruns it in torch, so saturation
flags and NonFiniteError come from the torch kernels unchanged.

Shapes (one run): X (n, T, d), Y (n,), v (d,), Z (n, d) queries, W (d, d), K and Q (d, m).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnsvm.training import losses as _losses
from attnsvm.training.checks import resolve_engine
from attnsvm.training.loop import run, want_mask

#: the lean kernels' size limits (tokens n T in all, dimensions d and m)
LEAN_MAX_TOKENS = 64
LEAN_MAX_TOKENS_KQ = 256
LEAN_MAX_DIM = 64

_LOSSES = ("logistic", "exponential", "correlation", "squared")


class _Abandon(Exception):
    """The run left the lean path's common case (zero or non-finite gradient norm): rerun in torch."""


def softmax_backward_np(s: np.ndarray, beta: np.ndarray, top: np.ndarray):
    """numpy twin of :func:`attnsvm.training.kernel.softmax_backward` (its ``top`` form).

    s, beta : (n, T); top : (n,) index of the largest s per row. Returns ``(c, m, beta_top)``:
    ``c = (diag(s) - s s^T) beta`` (n, T) as ``s (g - s^T g)`` with ``g = beta - beta_top``,
    ``m = s^T g`` (n,), ``beta_top`` (n,).
    """
    btop = beta[np.arange(beta.shape[0]), top]
    c = np.empty_like(s)
    m = _centered_backward(s, beta - btop[:, None], c, np.ones(s.shape[1]))
    return c, m, btop


def _centered_backward(s: np.ndarray, g: np.ndarray, out: np.ndarray, ones: np.ndarray) -> np.ndarray:
    """The kernel's core on scores already shifted by the most attended token's: ``g = beta - beta_top``.

    Writes ``c = s (g - s^T g)`` (n, T) into ``out`` and returns ``m = s^T g`` (n,); ``ones`` = ``np.ones(T)``
    (row sums as a matrix-vector product: one numpy call).
    """
    m = (s * g) @ ones
    np.subtract(g, m[:, None], out=out)
    out *= s
    return m


def _loss_grad(u: np.ndarray, loss: str, n: int) -> np.ndarray:
    """``l'(u) / n`` (n,) of a margin loss (plain form: the callers exclude the log-scaled regime)."""
    if loss == "logistic":
        return (1.0 / (1.0 + np.exp(u))) * (-1.0 / n)  # -sigmoid(-u) / n
    if loss == "exponential":
        return -np.exp(-u) / n
    if loss == "correlation":
        return np.full_like(u, -1.0) / n
    return -2.0 * (1.0 - u) / n


def _loss_mean(u: np.ndarray, loss: str) -> float:
    """Mean margin loss of the run (the value recorded at checkpoints)."""
    if loss == "logistic":
        x = -u
        per = np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))  # torch's softplus (threshold 20)
    elif loss == "exponential":
        per = np.exp(-u)
    elif loss == "correlation":
        per = -u
    else:
        per = (1.0 - u) ** 2
    return float(per.mean())


def lean_applies(data, param, head, loss, train_v, engine, optimizer, bitwise, R) -> bool:
    """True when the lean numpy kernels cover this training call (see the module docstring)."""
    if R != 1 or bitwise or train_v or head is not None or optimizer not in ("gd", "ngd") or loss not in _LOSSES:
        return False
    if data.queries is None or data.mask is not None or data.v is None:
        return False
    if resolve_engine(engine, head, loss, train_v) != "closed":
        return False
    _, N, T, d = data.X.shape
    if param == "W":
        return N * T <= LEAN_MAX_TOKENS and d <= LEAN_MAX_DIM
    return param == "KQ" and N * T <= LEAN_MAX_TOKENS_KQ and d <= LEAN_MAX_DIM


def lean_loop(data, params, cfg):
    """Train the one run in numpy; returns the recorder dict of the torch kernels, or None to hand it back.

    ``params``: {"W": (1, d, d)} or {"K", "Q": (1, d, m)} torch tensors (updated in place at the end);
    ``cfg``: the :class:`~attnsvm.training.loop.TrainConfig` (param, steps, lr, optimizer, eps, ridge, cps, loss).
    Returns a dict of torch tensors: ``loss`` (1, C), ``softmax`` (1, C, n, T), ``grad_norm`` (1, C),
    ``W`` or ``K``, ``Q`` (1, C, ...), ``saturated`` (1,) and ``saturated_step`` (1,); None when the run
    meets a zero or non-finite gradient norm or a non-finite record (a torch kernel then reruns it).
    """
    X = data.X[0].numpy().astype(np.float64, copy=False)
    Y = data.Y[0].numpy().astype(np.float64, copy=False)
    v = data.v[0].numpy().astype(np.float64, copy=False)
    Z = data.queries[0].numpy().astype(np.float64, copy=False)
    gamma = Y[:, None] * (X @ v)  # (N, T) token scores Y_i v^T x_it
    if cfg.loss == "exponential" and float((-gamma).max()) > _losses.EXP_SHIFT_AT:
        return None  # the log-scaled exponential loss stays in torch
    try:
        with np.errstate(all="ignore"):
            kernel = (LeanTokenKernel if cfg.param == "W" else LeanKQKernel)(X, Z, gamma, params, cfg)
            rec = run(kernel, cfg.steps)
    except _Abandon:
        return None
    if not all(np.all(np.isfinite(x)) for x in rec.values()):
        return None  # a non-finite record: a torch kernel reports it
    out = {k: torch.as_tensor(x).unsqueeze(0) for k, x in rec.items()}
    out["saturated"] = torch.zeros(1, dtype=torch.bool)
    out["saturated_step"] = torch.full((1,), -1, dtype=torch.int64)
    for name in params:
        params[name].copy_(out[name][:, -1])
    return out


def _check(nrm: float) -> float:
    """The gradient norm if in (0, inf); else the run leaves the lean path."""
    if not (0.0 < nrm < math.inf):
        raise _Abandon
    return nrm


class _Weights:
    """Per-token step weights of one run with few numpy calls (the kernel's top form, :func:`_centered_backward`).

    ``ga`` (2, n T) holds ``[gamma, a]`` (the fixed token scores and the logits, written by the loop) so that
    one gather and one subtraction shift both by the most attended token. :meth:`__call__` fills ``c``
    (n T,) with ``c = l'(u)/n (diag(s) - s s^T) gamma`` and returns ``(s (n, T), u (n,))``. ``ga`` and
    ``c`` may be views into the caller's buffers.
    """

    def __init__(self, gamma, loss, ga=None, c=None):
        N, T = gamma.shape
        self.ga = np.empty((2, N * T)) if ga is None else ga
        self.ga[0] = gamma.reshape(N * T)
        self.ga3 = self.ga.reshape(2, N, T)
        self.a = self.ga3[1]
        self.offs = np.arange(N) * T
        self.ones = np.ones(T)
        self.loss, self.N, self.negn, self.logistic = loss, N, -1.0 / N, loss == "logistic"
        self.c = np.empty(N * T) if c is None else c
        self.c2 = self.c.reshape(N, T)

    def __call__(self):
        N = self.N
        idx = self.a.argmax(1) + self.offs
        tops = self.ga[:, idx]  # (2, n): gamma_top, a_top
        diff = self.ga3 - tops.reshape(2, N, 1)  # [g = gamma - gamma_top, a - a_top]
        s = np.exp(diff[1])
        s /= (s @ self.ones)[:, None]
        g, c2 = diff[0], self.c2  # c = s (g - s^T g), m = s^T g (:func:`_centered_backward`, inlined)
        m = (s * g) @ self.ones
        np.subtract(g, m[:, None], out=c2)
        c2 *= s
        u = tops[0] + m  # s^T gamma
        c2 *= (self.negn / (1.0 + np.exp(u)) if self.logistic else _loss_grad(u, self.loss, N))[:, None]
        return s, u


class LeanTokenKernel:
    """Token-space W kernel of one run (as :class:`attnsvm.training.fast.TokenSpaceKernel`), GD / NGD.

    One buffer ``B`` (3, n T) = ``[gamma, a, -acc]``: the weights read ``B[0:2]``, the state is ``B[1:3]``
    (the logits and minus the accumulated step weights), moved by one multiply-subtract along ``[H c, c]``.
    ``W = W0 - sum_it acc_it x_it z_i^T`` is rebuilt at the records only.
    """

    def __init__(self, X, Z, gamma, params, cfg):
        N, T, d = X.shape
        NT = N * T
        self.X, self.Z, self.loss = X, Z, cfg.loss
        self.lr, self.ngd, self.eps = cfg.lr, cfg.ngd, cfg.eps
        Xf = X.reshape(NT, d)
        self.H = ((Xf @ Xf.T).reshape(N, T, N, T) * (Z @ Z.T).reshape(N, 1, N, 1)).reshape(NT, NT)
        self.W0 = W0 = params["W"][0].numpy().copy()
        B = np.zeros((3, NT))
        self.direction = np.empty((2, NT))
        self.Hc, self.c = self.direction[0], self.direction[1]
        self.weights = _Weights(gamma, cfg.loss, ga=B[0:2], c=self.c)
        B[1] = np.einsum("itd,id->it", X, Z @ W0.T).reshape(NT)  # a_it = x_it^T W0 z_i
        self.St, self.accn = B[1:3], B[2].reshape(N, T)
        self.want = want_mask(cfg.steps, cfg.cps)
        C = len(cfg.cps)
        self.rec = {"loss": np.empty(C), "softmax": np.empty((C, N, T)), "grad_norm": np.empty(C),
                    "W": np.empty((C, d, d))}
        self.c_ = 0

    def gradient(self, k):
        self.s, self.u = self.weights()
        np.dot(self.H, self.c, out=self.Hc)
        q = float(self.c @ self.Hc)
        self.nrm = nrm = math.sqrt(q) if q > 0.0 else 0.0
        if not (0.0 < nrm < math.inf):  # saturated or non-finite: hand the run back to torch
            raise _Abandon

    def record(self):
        c_, rec = self.c_, self.rec
        Un = np.einsum("itd,it->id", self.X, self.accn)  # -U, U_i = X_i^T acc_i
        rec["loss"][c_], rec["softmax"][c_], rec["grad_norm"][c_] = _loss_mean(self.u, self.loss), self.s, self.nrm
        rec["W"][c_] = self.W0 + Un.T @ self.Z
        self.c_ += 1

    def update(self, k):
        self.direction *= self.lr / (self.nrm + self.eps) if self.ngd else self.lr
        self.St -= self.direction

    def result(self):
        return self.rec


class LeanKQKernel:
    """Direct (K, Q) kernel of one run (as :class:`attnsvm.training.fast.DirectKQKernel`), GD / NGD."""

    def __init__(self, X, Z, gamma, params, cfg):
        N, T, d = X.shape
        self.X, self.Z, self.N, self.loss = X, Z, N, cfg.loss
        self.lr, self.ngd, self.eps, self.ridge = cfg.lr, cfg.ngd, cfg.eps, cfg.ridge
        self.Xt = np.ascontiguousarray(X.transpose(0, 2, 1))  # (N, d, T)
        self.K, self.Q = params["K"][0].numpy().copy(), params["Q"][0].numpy().copy()
        m_ = self.K.shape[1]
        self.weights = _Weights(gamma, cfg.loss)
        self.c3 = self.weights.c.reshape(N, T, 1)
        self.a3 = self.weights.a[:, :, None]
        self.want = want_mask(cfg.steps, cfg.cps)
        C = len(cfg.cps)
        self.rec = {"loss": np.empty(C), "softmax": np.empty((C, N, T)), "grad_norm": np.empty(C),
                    "K": np.empty((C, d, m_)), "Q": np.empty((C, d, m_))}
        self.c_ = 0

    def gradient(self, k):
        K, Q, Z = self.K, self.Q, self.Z
        ZQ = Z @ Q  # rows Q^T z_i
        np.matmul(self.X, (ZQ @ K.T)[:, :, None], out=self.a3)  # a_it = x_it^T K Q^T z_i
        self.s, self.u = self.weights()
        self.U = U = np.matmul(self.Xt, self.c3)[:, :, 0]  # (N, d): X_i^T c_i
        self.gK = gK = U.T @ ZQ  # G Q
        self.gQ = gQ = Z.T @ (U @ K)  # G^T K
        self.nK = nK = math.sqrt(float(np.vdot(gK, gK)))
        self.nQ = nQ = math.sqrt(float(np.vdot(gQ, gQ)))
        if not (0.0 < nK < math.inf and 0.0 < nQ < math.inf):  # saturated or non-finite: back to torch
            raise _Abandon

    def record(self):
        c_, rec = self.c_, self.rec
        GW = self.U.T @ self.Z
        rec["loss"][c_], rec["softmax"][c_] = _loss_mean(self.u, self.loss), self.s
        rec["grad_norm"][c_] = _check(math.sqrt(float(np.vdot(GW, GW))))
        rec["K"][c_], rec["Q"][c_] = self.K, self.Q
        self.c_ += 1

    def update(self, k):
        K, Q, gK, gQ, nK, nQ, lr = self.K, self.Q, self.gK, self.gQ, self.nK, self.nQ, self.lr
        if self.ridge:
            gK = gK + (2.0 * self.ridge) * K
            gQ = gQ + (2.0 * self.ridge) * Q
            if self.ngd:
                nK = math.sqrt(float(np.vdot(gK, gK)))
                nQ = math.sqrt(float(np.vdot(gQ, gQ)))
        if self.ngd:
            self.K = K - gK * (lr / (nK + self.eps))
            self.Q = Q - gQ * (lr / (nQ + self.eps))
        else:
            self.K = K - lr * gK
            self.Q = Q - lr * gQ

    def result(self):
        return self.rec
