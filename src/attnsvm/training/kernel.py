"""The closed-form gradient of softmax attention: one kernel for every model of the package (torch).

Every model here has logits ``a_it`` (``x_it^T W z_i``, ``k_it^T p`` or, in the causal language model,
``a_t^T W a_k`` per prefix), attention ``s_i = softmax(a_i)`` and an output built from ``o_i = X_i^T s_i``.
The chain rule then always passes through the softmax Jacobian:

    dL/da_i = (diag(s_i) - s_i s_i^T) beta_i,   beta_it = dL/ds_it = (dL/do_i)^T x_it,

and the parameter gradient is ``dL/dW = sum_i X_i^T (dL/da_i) z_i^T`` (``dL/dp = sum_it (dL/da_it) k_it``).
:func:`softmax_backward` is that Jacobian product, the one shared kernel; the head and the loss enter
only through ``beta`` (token scores ``Y_i q_it`` times the loss derivative ``l'(u_i) / n`` for the margin
models, ``E^T dL/dlogits`` for the language model). Its forms are saturation-exact: the selected token's
entry is built from score differences, never from ``beta_t - s^T beta``, so the gradient keeps its
direction when the attention is one-hot to rounding.

Callers: :func:`closed_form_step` (bitwise and BLAS forms; the generic kernel of the training loop, the prompt gradient
of :mod:`attnsvm.training.prompt`), :class:`TokenWeights` (the fused W / KQ kernels of
:mod:`attnsvm.training.fast`), :func:`attnsvm.training.language_model.lm_loss_grad`. The numpy twin
used by the lean single-run path is :func:`attnsvm.training.lean.softmax_backward_np`.
"""

from __future__ import annotations

import torch

from attnsvm.errors import ValidationError
from attnsvm.training import losses as _losses
from attnsvm.training.losses import apply_log_scale, margin_loss, margin_loss_grad, margin_loss_grad_scaled
from attnsvm.training.ops import (
    fixed_dot, attend, attention_logits, combine, fsum, ldexp, prompt_logits, softmax, softmax_fast, token_scores,
)


def softmax_backward(s: torch.Tensor, beta: torch.Tensor, *, top=None, D=None, fixed_order: bool = False):
    """The softmax Jacobian applied to per-token derivatives: ``c = (diag(s) - s s^T) beta``.

    s, beta : (..., T) attention and ``dL/ds`` (any leading axes: runs, samples, query positions).
    Returns c (..., T) = ``dL/da``, the derivative in the logits. Three evaluation orders of the same
    mathematics (each caller keeps the one its numbers were made with):

    * pairwise (default): ``c_t = s_t sum_tau s_tau (beta_t - beta_tau)`` with BLAS; ``D`` (..., T, T)
      may hold the precomputed differences ``beta_t - beta_tau``;
    * ``fixed_order=True``: the pairwise form with fixed-order sums (bitwise independent of the batch);
    * ``top`` (..., 1), the index of the largest ``s``: ``c = s (g - s^T g)`` with ``g = beta - beta_top``,
      O(T) instead of O(T^2); returns ``(c, m, beta_top)`` with ``m = s^T g`` (..., 1), so that
      ``s^T beta = beta_top + m`` comes for free. When ``s`` is exactly one-hot, c is exactly 0.
    """
    if top is not None:
        btop = beta.gather(-1, top)
        g = beta - btop
        m = (s * g).sum(-1, keepdim=True)
        return g.sub_(m).mul_(s), m, btop
    if D is None:
        D = beta.unsqueeze(-1) - beta.unsqueeze(-2)
    if fixed_order:
        return s * fixed_dot(D, s.unsqueeze(-2))
    return s * torch.matmul(D, s.unsqueeze(-1)).squeeze(-1)


def pair_weights(s: torch.Tensor, gamma: torch.Tensor, D: torch.Tensor | None = None) -> torch.Tensor:
    """``c = (diag(s) - s s^T) gamma`` in the pairwise form ``c_t = s_t sum_tau s_tau (gamma_t - gamma_tau)``.

    s, gamma (..., T); D (..., T, T) the precomputed differences ``gamma_t - gamma_tau`` (optional).
    Exact to rounding even when ``s`` is saturated (the selected token's entry
    is built from the small differences, not from ``gamma_t - s^T gamma``).
    """
    return softmax_backward(s, gamma, D=D, fixed_order=True)


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
    form=None,
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
        run's numbers are bitwise independent of R; False: BLAS (bmm), faster,
        results depend on R at the rounding level (~1e-16 relative per step)
    want_v : also return the gradient in v (linear head only)
    form : optional :class:`~attnsvm.training.models.TokenForm` of a nonlinear head (from
        :func:`~attnsvm.training.models.token_form` with the same
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
    u, gamma = _margins_bitwise(s, Y, gamma, mask, form)
    out = {"s": s, "loss": fsum(margin_loss(u, loss, exact=True)) / n}
    lp, log_scale = margin_loss_grad_scaled(u, loss, exact=True)
    lp = lp / n  # (R, n), true l'(u)/n = lp * exp(log_scale)
    out["log_scale"] = log_scale
    c = pair_weights(s, gamma, D) * lp.unsqueeze(-1)  # (R, n, T)
    if param == "p":
        keysT = keys.reshape(R, n * T, d).transpose(1, 2) if keysT is None else keysT
        out["gp"] = fixed_dot(keysT, c.reshape(R, 1, n * T))
    else:
        U = attend(c, X, Xt)  # (R, n, d): u_i scaled by l'_i / n
        Zt = queries.transpose(1, 2) if Zt is None else Zt  # (R, d, n)
        G = fixed_dot(U.transpose(1, 2).unsqueeze(2), Zt.unsqueeze(1))  # (R, d, d) = sum_i u_i z_i^T
        out["G"] = G
        if param == "KQ":
            out["gK"] = fixed_dot(G.unsqueeze(2), Q.transpose(1, 2).unsqueeze(1))  # G Q
            out["gQ"] = fixed_dot(G.transpose(1, 2).unsqueeze(2), K.transpose(1, 2).unsqueeze(1))  # G^T K
    if want_v:
        att = attend(s, X, Xt)
        out["gv"] = fixed_dot(att.transpose(1, 2), (lp * Y).unsqueeze(1))
    return _scale_out(out, scaled)


def _margins_bitwise(s, Y, gamma, mask, form):
    """Margins ``u = Y f`` (R, n) and masked token scores ``gamma`` (R, n, T) from the softmax ``s`` (R, n, T):
    the linear head's ``u = s^T gamma`` in a fixed-order sum, or the head ``form``'s ``f`` with ``gamma = Y q``."""
    if form is None:
        if mask is not None:
            gamma = gamma.masked_fill(~mask, 0.0)
        return fsum(s * gamma), gamma
    f, q = form(s)
    gamma = Y.unsqueeze(-1) * q
    if mask is not None:
        gamma = gamma.masked_fill(~mask, 0.0)
    return Y * f, gamma


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
    c = softmax_backward(s, gamma, D=D) * lp.unsqueeze(-1)
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


# ------------------------------------------------------------- fused-kernel pieces


def softmax_top(a):
    """Softmax over the last axis and the index (..., 1) of the largest logit (the most attended token)."""
    top, idx = a.max(-1, keepdim=True)
    e = (a - top).exp_()
    return e.div_(e.sum(-1, keepdim=True)), idx


class TokenWeights:
    """Per-token gradient weights ``c_it = l'(u_i)/n * [(diag(s_i) - s_i s_i^T) gamma_i]_t``, saturation-exact.

    ``gamma_i = Y_i q_i`` with the token scores q of the head's :class:`TokenForm`.
    The pairwise form ``c_t = s_t sum_tau s_tau (gamma_t - gamma_tau)`` is evaluated as
    ``s_t (g_t - sum_tau s_tau g_tau)`` with ``g = gamma - gamma_top``, the differences to
    the most attended token (the same sum: ``sum_tau s_tau = 1``). The top token's weight
    is then built from the small terms only (its own term is exactly 0), as in the
    pairwise form, at O(T) instead of O(T^2) cost; when s is exactly one-hot, c is exactly 0.
    """

    def __init__(self, form, Y, mask, loss):
        self.form, self.Y, self.mask, self.loss = form, Y, mask, loss
        self.Yc = Y.unsqueeze(-1)
        self.gamma = None if form.fixed is None else self._masked(self.Yc * form.fixed)
        # the linear head's u = s^T gamma is a convex combination of fixed scores: if no -gamma exceeds the
        # shift threshold, e^{-u} never needs the log-scale and the plain derivative is used (no extra ops)
        self.scaled = loss == "exponential" and (
            self.gamma is None or bool((-self.gamma).amax() > _losses.EXP_SHIFT_AT))

    def _masked(self, gamma):
        return gamma if self.mask is None else gamma.masked_fill(~self.mask, 0.0)

    def __call__(self, s, top):
        """s (R, n, T), top (R, n, 1) index of the largest s -> (u (R, n) signed outputs, c (R, n, T), log_scale).

        ``log_scale`` (R,) or None: the true weights are ``c * exp(log_scale)`` (exponential loss, see
        :func:`attnsvm.training.losses.margin_loss_grad_scaled`).
        """
        if self.gamma is None:
            f, q = self.form(s)
            u = self.Y * f
            c, _, _ = softmax_backward(s, self._masked(self.Yc * q), top=top)
        else:
            c, m, gtop = softmax_backward(s, self.gamma, top=top)
            u = (gtop + m).squeeze(-1)  # s^T gamma (to rounding, sum(s) = 1)
        n = s.shape[1]
        log_scale = None
        if self.loss == "logistic":
            lp = torch.sigmoid(-u).mul_(-1.0 / n)
        elif self.scaled:
            lp, log_scale = margin_loss_grad_scaled(u, self.loss)
            lp = lp.div_(n)
        else:
            lp = margin_loss_grad(u, self.loss).div_(n)
        return u, c.mul_(lp.unsqueeze(-1)), log_scale


def token_logits(Xb, Wz, R, N, T, d, hidden):
    """``a_it = x_it^T (W z_i)`` from the rows ``W z_i`` (R, N, d); ``hidden`` (negated mask) tokens get -inf."""
    a = torch.bmm(Xb, Wz.reshape(R * N, d, 1)).reshape(R, N, T)
    if hidden is not None:
        a.masked_fill_(hidden, float("-inf"))
    return a


def token_norm(c, H, symmetric: bool = False):
    """``||G||_F = sqrt(c^T H c)`` per run (R,) from token weights c (R, N, T) and H (R, NT, NT), with c
    scaled by an exact power of two so that the quadratic form neither overflows nor underflows.

    ``symmetric``: H equals its transpose bit for bit and ``NT^2 < 400`` (the caller checks): ``c^T H`` is then
    formed as ``H c``, the same products summed in the same order (torch's batched product of matrices this
    small is a plain loop over the contraction), so the same bits, at about 2/3 of the cost.
    """
    R = c.shape[0]
    cf = c.reshape(R, 1, -1)
    e = torch.frexp(cf.abs().amax(-1)).exponent  # (R, 1)
    cs = ldexp(cf, -e.unsqueeze(-1))
    cT = cs.transpose(1, 2)
    cH = torch.bmm(H, cT).transpose(1, 2) if symmetric else torch.bmm(cs, H)
    q = torch.bmm(cH, cT).reshape(R).clamp_(min=0.0)
    return ldexp(q.sqrt_(), e.reshape(R))
