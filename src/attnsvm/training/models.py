"""One-layer attention models, batched over a leading runs axis R (PyTorch, float64).

Shapes (R = runs, n = samples, T = tokens, d = dimension, m = hidden width):

=========  ==============  ===============================================
name       shape           meaning
=========  ==============  ===============================================
X          (R, n, T, d)    tokens
queries    (R, n, d)       query z_i of each sample (cross / self attention)
keys       (R, n, T, d)    keys ``X_i W`` of the prompt model (W fixed)
mask       (R|1, n, T)     optional bool: token t may be attended (causal)
W          (R, d, d)       combined key-query weights
K, Q       (R, d, m)       factorized weights, ``W = K Q^T``
p          (R, d)          trainable prompt (prompt model)
v          (R, d)          linear head
s          (R, n, T)       attention ``softmax(X_i W z_i)`` (or ``softmax(K_i p)``)
=========  ==============  ===============================================

The attention logit of token t is ``x_t^T W z`` (paper convention; the research
code's ``nn.Linear`` weight is ``W^T``). The output is ``f = h(X^T s)`` for a head h.

Two ways to get gradients:

* :func:`~attnsvm.training.kernel.closed_form_step` (in :mod:`attnsvm.training.kernel`) computes loss,
  softmax and the gradients of the
  linear-head model in closed form with batched tensor operations, using the
  pairwise form of the softmax Jacobian (max-margin spec section 2) so that the
  gradient keeps its direction when the attention is saturated;
* :class:`AttentionModel` is an ``nn.Module`` for autograd with any head.

Nonlinear heads reuse the closed form: for ``f_i = h(a_i)``, ``a_i = X_i^T s_i``,
``df_i/dW = X_i^T (diag(s_i) - s_i s_i^T) X_i g_i z_i^T`` with ``g_i = grad h(a_i)``, i.e.
the linear-head formula with per-sample, per-step token scores ``q_it = g_i^T x_it``.
A :class:`TokenForm` (see :func:`token_form`) maps the attention ``s`` to the outputs
``f`` and these scores.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from attnsvm.errors import ValidationError
from attnsvm.training.kernel import closed_form_step, pair_weights
from attnsvm.training.losses import sample_losses
from attnsvm.training.ops import (
    DTYPE, fixed_dot, attend, attention_logits, causal_mask, combine, fsum, prompt_logits, softmax, token_scores,
)

#: public names, with the operations and the closed form re-exported from ops / kernel
__all__ = [
    "DTYPE", "finite_tensor", "LinearHead", "ReLUHead", "LambdaHead", "MatrixHead", "TokenForm", "token_form",
    "has_token_form", "as_head", "AttentionModel", "linear_head_loss", "closed_form_step", "pair_weights",
    "attention_logits", "prompt_logits", "token_scores", "attend", "combine", "softmax", "causal_mask", "fsum",
]


def finite_tensor(x, name: str, ndims: tuple, shape_doc: str) -> torch.Tensor:
    """``x`` as a float64 tensor with ``ndim`` in ``ndims`` and only finite entries (public-boundary check).

    Tensors keep their autograd graph; anything else goes through numpy. Raises
    :class:`ValidationError` naming ``name`` and ``shape_doc``.
    """
    if isinstance(x, torch.Tensor):
        t = x.to(DTYPE)
    else:
        try:
            arr = np.array(x, dtype=np.float64)  # a copy: the tensor must not alias (or warn about) a read-only array
        except (TypeError, ValueError):
            raise ValidationError(f"{name} must be a real array of shape {shape_doc}, got {type(x).__name__}") from None
        t = torch.as_tensor(arr, dtype=DTYPE)
    if t.ndim not in ndims:
        raise ValidationError(f"{name} must have shape {shape_doc}, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t.detach()).all()):
        raise ValidationError(f"{name} must be finite (no NaN or inf)")
    return t


# ------------------------------------------------------------------------ heads


class LinearHead:
    """``h(a) = v^T a`` with v (R, d) or (d,) (broadcast over runs)."""

    def __init__(self, v):
        self.v = finite_tensor(v, "v", (1, 2), "(d,) or (R, d)")

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        v = self.v if self.v.ndim == 2 else self.v.expand(a.shape[0], -1)
        return torch.einsum("r...d,rd->r...", a, v)

    def token_form(self, X, bitwise=False):
        return _LinearTokens(X, self.v, bitwise)


class ReLUHead:
    """``h(a) = 1^T ReLU(V^T a)`` (multi-token experiment); V (d, k) or (R, d, k)."""

    def __init__(self, V):
        self.V = finite_tensor(V, "V", (2, 3), "(d, k) or (R, d, k)")

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        V = self.V if self.V.ndim == 3 else self.V.expand(a.shape[0], -1, -1)
        return torch.relu(torch.einsum("r...d,rdk->r...k", a, V)).sum(-1)

    def token_form(self, X, bitwise=False):
        return _ReLUTokens(X, self.V, bitwise)


class LambdaHead:
    """``h(a) = v^T a - lam ||a||^2``; v (d,) or (R, d)."""

    def __init__(self, v, lam: float):
        self.v = finite_tensor(v, "v", (1, 2), "(d,) or (R, d)")
        try:
            lam_f = None if isinstance(lam, (bool, np.bool_, str, bytes)) else float(lam)
        except (TypeError, ValueError):
            lam_f = None
        if lam_f is None or not (np.isfinite(lam_f) and lam_f >= 0):
            raise ValidationError(f"lam must be a finite number >= 0, got {lam!r}")
        self.lam = lam_f

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        v = self.v if self.v.ndim == 2 else self.v.expand(a.shape[0], -1)
        return torch.einsum("r...d,rd->r...", a, v) - self.lam * (a * a).sum(-1)

    def token_form(self, X, bitwise=False):
        return _LambdaTokens(X, self.v, self.lam, bitwise)


class MatrixHead:
    """Vector output ``H^T a`` (next-token logits), H (d, V) or (R, d, V)."""

    def __init__(self, H):
        self.H = finite_tensor(H, "H", (2, 3), "(d, V) or (R, d, V)")

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        H = self.H if self.H.ndim == 3 else self.H.expand(a.shape[0], -1, -1)
        return torch.einsum("r...d,rdk->r...k", a, H)


# ----------------------------------------------------------------- token forms


class TokenForm:
    """A head seen through the tokens of each sample, for the closed-form gradients.

    ``form(s)`` maps the attention ``s`` (R, n, T) to ``(f, q)``: the outputs
    ``f_i = h(X_i^T s_i)`` (R, n) and the token scores ``q_it = grad h(X_i^T s_i)^T x_it``
    (R, n, T). ``fixed`` holds q when it does not depend on s (linear head), else None.
    Built by :func:`token_form`; the data of the samples is bound at construction.
    """

    fixed: torch.Tensor | None = None

    def __call__(self, s: torch.Tensor):
        raise NotImplementedError


def _bmv(A: torch.Tensor, x: torch.Tensor, bitwise: bool) -> torch.Tensor:
    """Batched matrix-vector products ``A[..., :, :] @ x[..., :]``: A (B..., p, k), x (B..., k) -> (B..., p)."""
    if bitwise:
        return fixed_dot(A, x.unsqueeze(-2))
    lead = A.shape[:-2]
    p, k = A.shape[-2:]
    return torch.bmm(A.reshape(-1, p, k), x.reshape(-1, k, 1)).reshape(*lead, p)


class _LinearTokens(TokenForm):
    """``h(a) = v^T a``: q_it = v^T x_it does not depend on s."""

    def __init__(self, X, v, bitwise):
        v = v if v.ndim == 2 else v.expand(X.shape[0], -1)
        if bitwise:
            self.fixed = fixed_dot(X, v[:, None, None, :])
        else:
            self.fixed = _bmv(X.reshape(X.shape[0], -1, X.shape[-1]), v, False).reshape(X.shape[:-1])
        self.bitwise = bitwise

    def __call__(self, s):
        f = fsum(s * self.fixed) if self.bitwise else (s * self.fixed).sum(-1)
        return f, self.fixed


class _ReLUTokens(TokenForm):
    """``h(a) = 1^T ReLU(V^T a)`` from the projections ``P_it = V^T x_it`` (R, n, T, k):
    ``V^T a_i = P_i^T s_i``, ``q_it = P_it^T 1[V^T a_i > 0]``."""

    def __init__(self, X, V, bitwise):
        R, n, T, d = X.shape
        V = V if V.ndim == 3 else V.expand(R, -1, -1)
        if V.shape[0] != R or V.shape[1] != d:
            raise ValidationError(f"ReLUHead V has shape {tuple(V.shape)}; the data needs ({R}, {d}, k) or ({d}, k)")
        self.bitwise = bitwise
        if bitwise:
            self.P = fixed_dot(X.unsqueeze(-2), V.transpose(1, 2)[:, None, None])  # (R, n, T, k)
        else:
            self.P = torch.bmm(X.reshape(R, n * T, d), V).reshape(R, n, T, -1)
        self.PT = self.P.transpose(-1, -2).contiguous()  # (R, n, k, T)

    def __call__(self, s):
        pre = _bmv(self.PT, s, self.bitwise)  # (R, n, k) = V^T a_i
        act = torch.empty_like(pre)
        torch.gt(pre, 0, out=act)  # 1[V^T a_i > 0], torch's ReLU derivative (0 at the kink)
        pos = pre * act
        f = fsum(pos) if self.bitwise else pos.sum(-1)
        return f, _bmv(self.P, act, self.bitwise)


class _LambdaTokens(TokenForm):
    """``h(a) = v^T a - lam ||a||^2`` from ``X_i v`` and the Gram matrices ``X_i X_i^T``:
    ``f_i = s_i^T X_i v - lam s_i^T X_i X_i^T s_i``, ``q_i = X_i v - 2 lam X_i X_i^T s_i``."""

    def __init__(self, X, v, lam, bitwise):
        v = v if v.ndim == 2 else v.expand(X.shape[0], -1)
        self.bitwise, self.lam = bitwise, lam
        self.q0 = _LinearTokens(X, v, bitwise).fixed
        if bitwise:
            self.gram = fixed_dot(X.unsqueeze(-2), X.unsqueeze(-3))  # (R, n, T, T)
        else:
            self.gram = torch.matmul(X, X.transpose(-1, -2))

    def __call__(self, s):
        Gs = _bmv(self.gram, s, self.bitwise)  # X_i X_i^T s_i = X_i a_i
        lin = s * (self.q0 - self.lam * Gs)
        f = fsum(lin) if self.bitwise else lin.sum(-1)
        return f, self.q0 - (2.0 * self.lam) * Gs


class _AutogradTokens(TokenForm):
    """Any per-sample head: ``a = X^T s``, then ``h`` and its gradient by autograd on the head alone.

    Valid when output i depends on ``a_i`` only (the gradient of ``sum(h(a))`` is used).
    """

    def __init__(self, X, head, bitwise):
        self.X, self.head, self.bitwise = X, head, bitwise
        self.XT = X.transpose(-1, -2).contiguous()

    def __call__(self, s):
        a = _bmv(self.XT, s, self.bitwise)  # (R, n, d) = X_i^T s_i
        with torch.enable_grad():
            a = a.detach().requires_grad_(True)
            f = self.head(a)
            if f.shape != a.shape[:-1]:
                raise ValidationError(f"the head must map (R, n, d) to (R, n); got {tuple(f.shape)}")
            g = torch.autograd.grad(f.sum(), a, allow_unused=True)[0] if f.requires_grad else None
        g = torch.zeros_like(a) if g is None else g
        return f.detach(), _bmv(self.X, g, self.bitwise)


def has_token_form(head) -> bool:
    """True for the heads with a closed-form token form (None = linear head, LinearHead, ReLUHead, LambdaHead, or
    any object with a ``token_form(X, bitwise)`` method)."""
    return head is None or hasattr(head, "token_form")


def token_form(head, X: torch.Tensor, v: torch.Tensor | None = None, bitwise: bool = False) -> TokenForm:
    """The :class:`TokenForm` of a head on tokens X (R, n, T, d).

    ``head=None`` is the linear head v (R, d); heads with a ``token_form`` method use it;
    any other callable gets the gradient of the head by autograd on the head alone
    (cheap: the head acts on (R, n, d)), which needs output i to depend on ``a_i`` only.
    ``bitwise``: contractions as elementwise products with fixed-order sums.
    """
    if head is None:
        if v is None:
            raise ValidationError("the linear head needs v")
        return _LinearTokens(X, v, bitwise)
    if hasattr(head, "token_form"):
        return head.token_form(X, bitwise)
    return _AutogradTokens(X, as_head(head), bitwise)


def as_head(head) -> Callable[[torch.Tensor], torch.Tensor]:
    """A head object or any torch callable mapping attended vectors (R, ..., d) to outputs (R, ...)."""
    if head is None or not callable(head):
        raise ValidationError("head must be a callable mapping a tensor (R, n, d) to (R, n)")
    return head


# ------------------------------------------------------------------------ module


class AttentionModel(torch.nn.Module):
    """Batched single-query attention ``f = h(X^T softmax(logits))`` for autograd.

    Parameters
    ----------
    param : "W" | "KQ" | "p"
    W : (R, d, d) for param "W"; K, Q : (R, d, m) for "KQ"; p : (R, d) for "p"
    v : (R, d) or None -- linear head; trainable when ``train_v``
    head : callable or None -- replaces the linear head (ignores v)
    train_v : bool

    ``forward(X, queries=None, keys=None, mask=None)`` returns ``f`` (R, n) (or
    (R, n, V) for a matrix head) and stores the attention in ``self.softmax``.
    For sequence problems pass the flattened samples (see :func:`attnsvm.training.train.train_sequence`).
    """

    def __init__(self, param: str, *, W=None, K=None, Q=None, p=None, v=None, head=None, train_v: bool = False):
        super().__init__()
        if param not in ("W", "KQ", "p"):
            raise ValidationError(f"param must be 'W', 'KQ' or 'p', got {param!r}")
        self.param = param
        P = torch.nn.Parameter
        if param == "W":
            self.W = P(finite_tensor(W, "W", (3,), "(R, d, d)").detach().clone())
        elif param == "KQ":
            self.K = P(finite_tensor(K, "K", (3,), "(R, d, m)").detach().clone())
            self.Q = P(finite_tensor(Q, "Q", (3,), "(R, d, m)").detach().clone())
        else:
            self.p = P(finite_tensor(p, "p", (2,), "(R, d)").detach().clone())
        if v is not None:
            v = finite_tensor(v, "v", (2,), "(R, d)").detach().clone()
            if train_v:
                self.v = P(v)
            else:
                self.register_buffer("v", v)
        else:
            self.v = None
        if head is None and self.v is None:
            raise ValidationError("the model needs a linear head v or a head callable")
        self.head = head
        self.softmax = None
        self.last_W = None

    def combined(self) -> torch.Tensor:
        """W (R, d, d) = K Q^T for (K, Q)."""
        if self.param == "KQ":
            return combine(self.K, self.Q)
        if self.param == "W":
            return self.W
        raise ValidationError("the prompt model has no trainable W")

    def forward(self, X, queries=None, keys=None, mask=None):
        if self.param == "p":
            a = prompt_logits(keys, self.p, mask)
        else:
            W = self.combined()
            if self.param == "KQ" and W.requires_grad:
                W.retain_grad()  # exposes the W-gradient G (grad_K = G Q, grad_Q = G^T K)
            self.last_W = W
            a = attention_logits(X, queries, W, mask)
        s = softmax(a)
        self.softmax = s
        att = attend(s, X)
        if self.head is not None:
            return self.head(att)
        return fixed_dot(att, self.v.unsqueeze(1))


# ------------------------------------------------------------- autograd reference


def linear_head_loss(X, Y, v, *, param, W=None, K=None, Q=None, p=None, queries=None, keys=None, mask=None,
                     loss="logistic"):
    """Per-run mean loss (R,) of the linear-head model, built from differentiable torch ops (for autograd checks).

    X (R, n, T, d), Y (R, n), v (R, d); W (R, d, d) / K, Q (R, d, m) / p (R, d) with keys (R, n, T, d).
    """
    W = combine(K, Q) if param == "KQ" else W
    model_s = softmax(prompt_logits(keys, p, mask) if param == "p" else attention_logits(X, queries, W, mask))
    f = fixed_dot(attend(model_s, X), v.unsqueeze(1))
    return sample_losses(f, Y, loss).mean(-1)
