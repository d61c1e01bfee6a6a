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
from attnsvm.training.losses import apply_log_scale, margin_loss, margin_loss_grad_scaled, sample_losses

DTYPE = torch.float64


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


def softmax_fast(a: torch.Tensor) -> torch.Tensor:
    """Same as :func:`softmax` (``exp(a - max) / sum``) from elementwise ops into a new tensor.

    For the short rows of these models (T of 2 to ~50) this measured several times
    faster than ``torch.softmax`` on CPU (torch 2.13, float64). The vectorized
    ``exp`` may round a tensor's tail differently, so this is not used in bitwise mode.
    """
    e = a - a.amax(-1, keepdim=True)
    e.exp_()
    return e.div_(e.sum(-1, keepdim=True))


def causal_mask(T: int, causal: bool = True) -> torch.Tensor:
    """(T, T) bool mask, row k = query position k: ``t <= k`` if causal, all True otherwise."""
    full = torch.ones(T, T, dtype=torch.bool)
    return torch.tril(full) if causal else full


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
        return _dot(A, x.unsqueeze(-2))
    lead = A.shape[:-2]
    p, k = A.shape[-2:]
    return torch.bmm(A.reshape(-1, p, k), x.reshape(-1, k, 1)).reshape(*lead, p)


class _LinearTokens(TokenForm):
    """``h(a) = v^T a``: q_it = v^T x_it does not depend on s."""

    def __init__(self, X, v, bitwise):
        v = v if v.ndim == 2 else v.expand(X.shape[0], -1)
        self.fixed = _dot(X, v[:, None, None, :]) if bitwise else _bmv(X.reshape(X.shape[0], -1, X.shape[-1]), v, False).reshape(X.shape[:-1])
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
            self.P = _dot(X.unsqueeze(-2), V.transpose(1, 2)[:, None, None])  # (R, n, T, k)
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
            self.gram = _dot(X.unsqueeze(-2), X.unsqueeze(-3))  # (R, n, T, T)
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
    For sequence problems pass the flattened samples (see :mod:`attnsvm.training.train`).
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
    form: TokenForm | None = None,
    scaled: bool = False,
):
    """Loss, softmax and gradients of the linear-head model in closed form.

    ``L_r = (1/n) sum_i l(Y_i f_i)``, ``f_i = v^T X_i^T s_i`` (or ``f_i = h(X_i^T s_i)`` with ``form``).

    Parameters
    ----------
    X : (R, n, T, d); Y : (R, n); v : (R, d) (may be None with ``form``)
    param : "W" (give W (R,d,d)), "KQ" (K, Q (R,d,m)), "p" (p (R,d) and keys (R,n,T,d))
    queries : (R, n, d) for "W" / "KQ"
    mask : (R|1, n, T) bool or None
    gamma, D : optional precomputed scores ``Y_i X_i v`` (R,n,T) and differences (R,n,T,T)
    Xt, Zt, keysT : optional precomputed contiguous transposes (R,n,d,T), (R,d,n), (R,d,n*T)
    bitwise : True: contractions as elementwise products with fixed-order sums, so each
        run's numbers are bitwise independent of R; False: BLAS (bmm), about 2x faster,
        results depend on R at the rounding level (~1e-16 relative per step)
    want_v : also return the gradient in v (linear head only)
    form : optional :class:`TokenForm` of a nonlinear head (from :func:`token_form` with the same
        ``bitwise``); the token scores ``gamma = Y q`` are then recomputed from ``s`` at each call
        (``gamma`` / ``D`` must not be given)
    scaled : the exponential loss only (other losses ignore it). False (default): the gradients are
        the true ones (``+-inf`` in a run whose gradient exceeds float64, margins below about -709;
        never NaN). True: each run's gradients are divided by ``exp(log_scale)`` (see
        :func:`attnsvm.training.losses.margin_loss_grad_scaled`) so that they cannot overflow, and the dict
        has ``log_scale`` (R,); their direction is exact.

    Inputs are not validated (this is the inner step of training); pass finite tensors.

    Returns
    -------
    dict with ``loss`` (R,) (``+inf`` where the exponential loss exceeds float64), ``s`` (R,n,T),
    ``G`` (R,d,d) gradient in W (for "W"/"KQ"), ``gK``, ``gQ`` (R,d,m) for "KQ", ``gp`` (R,d) for
    "p", ``gv`` (R,d) if ``want_v``; ``log_scale`` (R,) with ``scaled`` and the exponential loss.
    """
    R, n, T, d = X.shape
    if form is not None and (want_v or gamma is not None or D is not None):
        raise ValidationError("closed_form_step with a head form takes no gamma / D and has no v-gradient")
    if not bitwise:
        out = _closed_form_blas(X, Y, v, param, W, K, Q, p, queries, keys, mask, loss, gamma, D, want_v, form)
        return _scale_out(out, scaled)
    if gamma is None and form is None:
        gamma = token_scores(X, Y, v)
    if param == "p":
        a = prompt_logits(keys, p, mask)
    else:
        if param == "KQ":
            W = combine(K, Q)
        a = attention_logits(X, queries, W, mask)
    s = softmax(a)
    if form is None:
        if mask is not None:
            gamma = gamma.masked_fill(~mask, 0.0)
        u = fsum(s * gamma)
    else:
        f, q = form(s)
        u = Y * f
        gamma = Y.unsqueeze(-1) * q
        if mask is not None:
            gamma = gamma.masked_fill(~mask, 0.0)
    out = {"s": s, "loss": fsum(margin_loss(u, loss, exact=True)) / n}
    lp, log_scale = margin_loss_grad_scaled(u, loss, exact=True)
    lp = lp / n  # (R, n), true l'(u)/n = lp * exp(log_scale)
    out["log_scale"] = log_scale
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
    return _scale_out(out, scaled)


def _scale_out(out: dict, scaled: bool) -> dict:
    """Drop ``log_scale`` when it is None; unless ``scaled``, multiply the gradients back (true values)."""
    log_scale = out.pop("log_scale")
    if log_scale is None:
        return out
    if scaled:
        out["log_scale"] = log_scale
        return out
    for k in ("G", "gK", "gQ", "gp", "gv"):
        if k in out:
            out[k] = apply_log_scale(out[k], log_scale)
    return out


def _closed_form_blas(X, Y, v, param, W, K, Q, p, queries, keys, mask, loss, gamma, D, want_v, form=None):
    """Same as :func:`closed_form_step` with BLAS contractions (fast; rounding may depend on R)."""
    R, n, T, d = X.shape
    if gamma is None and form is None:
        gamma = Y.unsqueeze(-1) * torch.bmm(X.reshape(R, n * T, d), v.unsqueeze(-1)).reshape(R, n, T)
    if mask is not None and gamma is not None:
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
    s = softmax_fast(a)
    if form is None:
        u = (s * gamma).sum(-1)
    else:
        f, q = form(s)
        u = Y * f
        gamma = Y.unsqueeze(-1) * q
        if mask is not None:
            gamma = gamma.masked_fill(~mask, 0.0)
    out = {"s": s, "loss": margin_loss(u, loss).mean(-1)}
    lp, log_scale = margin_loss_grad_scaled(u, loss)
    lp = lp / n
    out["log_scale"] = log_scale
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
