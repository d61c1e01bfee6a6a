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

* :func:`closed_form_step` computes loss, softmax and the gradients of the
  linear-head model in closed form with batched tensor operations, using the
  pairwise form of the softmax Jacobian (max-margin spec section 2) so that the
  gradient keeps its direction when the attention is saturated;
* :class:`AttentionModel` is an ``nn.Module`` for autograd with any head.
"""

from __future__ import annotations

from typing import Callable

import torch

from .errors import ValidationError
from .losses import margin_loss, margin_loss_grad, sample_losses

DTYPE = torch.float64

# ----------------------------------------------------------------------- logits


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(a * b).sum(-1)`` with broadcasting.

    All contractions of this module are written this way (the contracted axis last)
    instead of matmul/bmm: BLAS picks different kernels (and summation orders) for
    different batch sizes, whereas an elementwise product reduced over the last axis
    gives every run bitwise the same numbers whatever batch it is in.
    """
    return fsum(a * b)


def fsum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis in a fixed pairwise order made of elementwise adds.

    ``Tensor.sum`` picks its summation order from the whole tensor's shape, so a
    run's sum could change with the number of runs; elementwise adds cannot.
    """
    k = x.shape[-1]
    if k == 0:
        return x.sum(-1)
    while k > 1:
        h = k // 2
        if k % 2 == 0:
            x = x[..., :h] + x[..., h:]
        else:
            x = torch.cat([x[..., :h] + x[..., h : 2 * h], x[..., 2 * h :]], dim=-1)
        k = x.shape[-1]
    return x[..., 0]


def attention_logits(X: torch.Tensor, queries: torch.Tensor, W: torch.Tensor, mask=None) -> torch.Tensor:
    """Logits ``a[r, i, t] = x_{it}^T W_r z_i``.

    X (R, n, T, d), queries (R, n, d), W (R, d, d), mask (R|1, n, T) bool or None -> (R, n, T).
    Masked tokens get ``-inf``.
    """
    Wz = _dot(W.unsqueeze(1), queries.unsqueeze(2))  # (R, n, d): row i = W z_i
    a = _dot(X, Wz.unsqueeze(2))
    if mask is not None:
        a = a.masked_fill(~mask, float("-inf"))
    return a


def prompt_logits(keys: torch.Tensor, p: torch.Tensor, mask=None) -> torch.Tensor:
    """Logits ``a[r, i, t] = k_{it}^T p_r`` of the prompt model. keys (R, n, T, d), p (R, d) -> (R, n, T)."""
    a = _dot(keys, p[:, None, None, :])
    if mask is not None:
        a = a.masked_fill(~mask, float("-inf"))
    return a


def token_scores(X: torch.Tensor, Y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Scores ``gamma[r, i, t] = Y_ri v_r^T x_rit``; X (R, n, T, d), Y (R, n), v (R, d) -> (R, n, T)."""
    return Y.unsqueeze(-1) * _dot(X, v[:, None, None, :])


def attend(s: torch.Tensor, X: torch.Tensor, Xt: torch.Tensor | None = None) -> torch.Tensor:
    """Attended vectors ``X_i^T s_i``: s (R, n, T), X (R, n, T, d) -> (R, n, d).

    ``Xt`` = ``X.transpose(-1, -2).contiguous()`` (R, n, d, T) may be passed precomputed.
    """
    if Xt is None:
        Xt = X.transpose(-1, -2)
    return _dot(Xt, s.unsqueeze(2))


def combine(K: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """``W = K Q^T``: K, Q (R, d, m) -> (R, d, d)."""
    return _dot(K.unsqueeze(2), Q.unsqueeze(1))


def softmax(a: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis (log-sum-exp stable; ``-inf`` logits get probability 0)."""
    return torch.softmax(a, dim=-1)


def causal_mask(T: int, causal: bool = True) -> torch.Tensor:
    """(T, T) bool mask, row k = query position k: ``t <= k`` if causal, all True otherwise."""
    full = torch.ones(T, T, dtype=torch.bool)
    return torch.tril(full) if causal else full


# ------------------------------------------------------------------------ heads


class LinearHead:
    """``h(a) = v^T a`` with v (R, d) or (d,) (broadcast over runs)."""

    def __init__(self, v):
        self.v = torch.as_tensor(v, dtype=DTYPE)

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        v = self.v if self.v.ndim == 2 else self.v.expand(a.shape[0], -1)
        return torch.einsum("r...d,rd->r...", a, v)


class ReLUHead:
    """``h(a) = 1^T ReLU(V^T a)`` (multi-token experiment); V (d, k) or (R, d, k)."""

    def __init__(self, V):
        self.V = torch.as_tensor(V, dtype=DTYPE)
        if self.V.ndim not in (2, 3):
            raise ValidationError(f"V must have shape (d, k) or (R, d, k), got {tuple(self.V.shape)}")

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        V = self.V if self.V.ndim == 3 else self.V.expand(a.shape[0], -1, -1)
        return torch.relu(torch.einsum("r...d,rdk->r...k", a, V)).sum(-1)


class LambdaHead:
    """``h(a) = v^T a - lam ||a||^2``; v (d,) or (R, d)."""

    def __init__(self, v, lam: float):
        self.v = torch.as_tensor(v, dtype=DTYPE)
        if not (float(lam) >= 0 and torch.isfinite(torch.tensor(float(lam)))):
            raise ValidationError(f"lam must be a finite number >= 0, got {lam!r}")
        self.lam = float(lam)

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        v = self.v if self.v.ndim == 2 else self.v.expand(a.shape[0], -1)
        return torch.einsum("r...d,rd->r...", a, v) - self.lam * (a * a).sum(-1)


class MatrixHead:
    """Vector output ``H^T a`` (next-token logits), H (d, V) or (R, d, V)."""

    def __init__(self, H):
        self.H = torch.as_tensor(H, dtype=DTYPE)

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        H = self.H if self.H.ndim == 3 else self.H.expand(a.shape[0], -1, -1)
        return torch.einsum("r...d,rdk->r...k", a, H)


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
    For sequence problems pass the flattened samples (see :mod:`attnsvm.train`).
    """

    def __init__(self, param: str, *, W=None, K=None, Q=None, p=None, v=None, head=None, train_v: bool = False):
        super().__init__()
        if param not in ("W", "KQ", "p"):
            raise ValidationError(f"param must be 'W', 'KQ' or 'p', got {param!r}")
        self.param = param
        P = torch.nn.Parameter
        if param == "W":
            self.W = P(torch.as_tensor(W, dtype=DTYPE).clone())
        elif param == "KQ":
            self.K = P(torch.as_tensor(K, dtype=DTYPE).clone())
            self.Q = P(torch.as_tensor(Q, dtype=DTYPE).clone())
        else:
            self.p = P(torch.as_tensor(p, dtype=DTYPE).clone())
        if v is not None:
            v = torch.as_tensor(v, dtype=DTYPE).clone()
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
        return _dot(att, self.v.unsqueeze(1))


# ----------------------------------------------------------- closed-form gradients


def pair_weights(s: torch.Tensor, gamma: torch.Tensor, D: torch.Tensor | None = None) -> torch.Tensor:
    """``c = (diag(s) - s s^T) gamma`` in the pairwise form ``c_t = s_t sum_tau s_tau (gamma_t - gamma_tau)``.

    s, gamma (..., T); D (..., T, T) the precomputed differences ``gamma_t - gamma_tau`` (optional).
    Exact to rounding even when ``s`` is saturated (the selected token's entry
    is built from the small differences, not from ``gamma_t - s^T gamma``).
    """
    if D is None:
        D = gamma.unsqueeze(-1) - gamma.unsqueeze(-2)
    return s * _dot(D, s.unsqueeze(-2))


def closed_form_step(
    X,
    Y,
    v,
    *,
    param: str,
    W=None,
    K=None,
    Q=None,
    p=None,
    queries=None,
    keys=None,
    mask=None,
    loss: str = "logistic",
    gamma=None,
    D=None,
    want_v: bool = False,
    Xt=None,
    Zt=None,
    keysT=None,
    bitwise: bool = True,
):
    """Loss, softmax and gradients of the linear-head model in closed form.

    ``L_r = (1/n) sum_i l(Y_i f_i)``, ``f_i = v^T X_i^T s_i``.

    Parameters
    ----------
    X : (R, n, T, d); Y : (R, n); v : (R, d)
    param : "W" (give W (R,d,d)), "KQ" (K, Q (R,d,m)), "p" (p (R,d) and keys (R,n,T,d))
    queries : (R, n, d) for "W" / "KQ"
    mask : (R|1, n, T) bool or None
    gamma, D : optional precomputed scores ``Y_i X_i v`` (R,n,T) and differences (R,n,T,T)
    Xt, Zt, keysT : optional precomputed contiguous transposes (R,n,d,T), (R,d,n), (R,d,n*T)
    bitwise : True: contractions as elementwise products with fixed-order sums, so each
        run's numbers are bitwise independent of R; False: BLAS (bmm), about 2x faster,
        results depend on R at the rounding level (~1e-16 relative per step)
    want_v : also return the gradient in v

    Returns
    -------
    dict with ``loss`` (R,), ``s`` (R,n,T), ``G`` (R,d,d) gradient in W (for "W"/"KQ"),
    ``gK``, ``gQ`` (R,d,m) for "KQ", ``gp`` (R,d) for "p", ``gv`` (R,d) if ``want_v``.
    """
    R, n, T, d = X.shape
    if not bitwise:
        return _closed_form_blas(X, Y, v, param, W, K, Q, p, queries, keys, mask, loss, gamma, D, want_v)
    if gamma is None:
        gamma = token_scores(X, Y, v)
    if mask is not None:
        gamma = gamma.masked_fill(~mask, 0.0)
    if param == "p":
        a = prompt_logits(keys, p, mask)
    else:
        if param == "KQ":
            W = combine(K, Q)
        a = attention_logits(X, queries, W, mask)
    s = softmax(a)
    u = fsum(s * gamma)
    out = {"s": s, "loss": fsum(margin_loss(u, loss, exact=True)) / n}
    lp = margin_loss_grad(u, loss, exact=True) / n  # (R, n)
    c = pair_weights(s, gamma, D) * lp.unsqueeze(-1)  # (R, n, T)
    if param == "p":
        keysT = keys.reshape(R, n * T, d).transpose(1, 2) if keysT is None else keysT
        out["gp"] = _dot(keysT, c.reshape(R, 1, n * T))
    else:
        U = attend(c, X, Xt)  # (R, n, d): u_i scaled by l'_i / n
        Zt = queries.transpose(1, 2) if Zt is None else Zt  # (R, d, n)
        G = _dot(U.transpose(1, 2).unsqueeze(2), Zt.unsqueeze(1))  # (R, d, d) = sum_i u_i z_i^T
        out["G"] = G
        if param == "KQ":
            out["gK"] = _dot(G.unsqueeze(2), Q.transpose(1, 2).unsqueeze(1))  # G Q
            out["gQ"] = _dot(G.transpose(1, 2).unsqueeze(2), K.transpose(1, 2).unsqueeze(1))  # G^T K
    if want_v:
        att = attend(s, X, Xt)
        out["gv"] = _dot(att.transpose(1, 2), (lp * Y).unsqueeze(1))
    return out


def _closed_form_blas(X, Y, v, param, W, K, Q, p, queries, keys, mask, loss, gamma, D, want_v):
    """Same as :func:`closed_form_step` with BLAS contractions (fast; rounding may depend on R)."""
    R, n, T, d = X.shape
    if gamma is None:
        gamma = Y.unsqueeze(-1) * torch.bmm(X.reshape(R, n * T, d), v.unsqueeze(-1)).reshape(R, n, T)
    if mask is not None:
        gamma = gamma.masked_fill(~mask, 0.0)
    if param == "p":
        a = torch.bmm(keys.reshape(R, n * T, d), p.unsqueeze(-1)).reshape(R, n, T)
    else:
        if param == "KQ":
            W = torch.bmm(K, Q.transpose(1, 2))
        Wz = torch.bmm(queries, W.transpose(1, 2))  # (R, n, d)
        a = torch.bmm(X.reshape(R * n, T, d), Wz.reshape(R * n, d, 1)).reshape(R, n, T)
    if mask is not None:
        a = a.masked_fill(~mask, float("-inf"))
    s = torch.softmax(a, dim=-1)
    u = (s * gamma).sum(-1)
    out = {"s": s, "loss": margin_loss(u, loss).mean(-1)}
    lp = margin_loss_grad(u, loss) / n
    if D is None:
        D = gamma.unsqueeze(-1) - gamma.unsqueeze(-2)
    c = s * torch.matmul(D, s.unsqueeze(-1)).squeeze(-1) * lp.unsqueeze(-1)
    if param == "p":
        out["gp"] = torch.bmm(c.reshape(R, 1, n * T), keys.reshape(R, n * T, d)).reshape(R, d)
    else:
        U = torch.bmm(c.reshape(R * n, 1, T), X.reshape(R * n, T, d)).reshape(R, n, d)
        G = torch.bmm(U.transpose(1, 2), queries)
        out["G"] = G
        if param == "KQ":
            out["gK"] = torch.bmm(G, Q)
            out["gQ"] = torch.bmm(G.transpose(1, 2), K)
    if want_v:
        att = torch.bmm(s.reshape(R * n, 1, T), X.reshape(R * n, T, d)).reshape(R, n, d)
        out["gv"] = torch.bmm((lp * Y).unsqueeze(1), att).reshape(R, d)
    return out


def linear_head_loss(X, Y, v, *, param, W=None, K=None, Q=None, p=None, queries=None, keys=None, mask=None, loss="logistic"):
    """Per-run mean loss (R,) of the linear-head model, built from differentiable torch ops (for autograd checks)."""
    model_s = softmax(prompt_logits(keys, p, mask) if param == "p" else attention_logits(X, queries, combine(K, Q) if param == "KQ" else W, mask))
    f = _dot(attend(model_s, X), v.unsqueeze(1))
    return sample_losses(f, Y, loss).mean(-1)
