"""Losses of the attention models, written so that nothing overflows.

Margin losses are functions of the signed output ``u = Y * f`` (shape (R, n) or any
shape) and come with their derivative ``l'(u)``, which the closed-form gradients
of :mod:`attnsvm.training.models` use:

===============  ===========================  ===========================
name             l(u)                         l'(u)
===============  ===========================  ===========================
``logistic``     log(1 + e^{-u}) = softplus(-u)  -sigmoid(-u)
``exponential``  e^{-u}                        -e^{-u}
``correlation``  -u                            -1
``squared``      (1 - u)^2 = (f - Y)^2         -2 (1 - u)
===============  ===========================  ===========================

``cross_entropy`` is the softmax cross-entropy of next-token prediction, written
with log-sum-exp.

Overflow. Only the exponential loss can overflow: ``e^{-u}`` exceeds the float64 range
once ``u < -709.78``. Its value is then ``+inf`` (the IEEE answer for a number beyond
the range, never NaN). Its derivative is available overflow-free through
:func:`margin_loss_grad_scaled`, which returns ``l'(u)`` as a scaled row and a per-row
log-scale: ``l'(u) = lp * exp(log_scale)``. Normalized GD only needs the direction, so it
trains exactly at any margin; :func:`apply_log_scale` recovers the true derivative
(``+-inf`` where it does not fit float64).
"""

from __future__ import annotations

import torch

from attnsvm.errors import ValidationError

MARGIN_LOSSES = ("logistic", "exponential", "correlation", "squared")
LOSSES = MARGIN_LOSSES + ("cross_entropy",)

#: the exponential loss's derivative is moved to log space once ``max(-u)`` of a row exceeds this
#: exponent: ``e^600 ~ 4e260`` leaves a factor ~1e47 of headroom for the products that build a gradient
#: from it (score differences, tokens, queries); rows above it are computed exactly as the plain formula
EXP_SHIFT_AT = 600.0


def check_loss(kind: str) -> str:
    """Validate a loss name; returns it."""
    if kind not in LOSSES:
        raise ValidationError(f"loss must be one of {', '.join(LOSSES)}, got {kind!r}")
    return kind


def _lanes(fn, u: torch.Tensor) -> torch.Tensor:
    """Apply an elementwise transcendental ``fn`` so that every entry takes the vectorized path.

    PyTorch's CPU kernels compute the tail of a tensor (its size modulo the SIMD
    block) with a scalar routine that can differ from the vector one in the last
    bit; padding to a multiple of 64 entries makes each entry's value independent of
    the tensor size (and hence of the number of runs batched together).
    """
    flat = u.reshape(-1)
    pad = (-flat.numel()) % 64
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return fn(flat)[: u.numel()].reshape(u.shape)


def margin_loss(u: torch.Tensor, kind: str = "logistic", exact: bool = False) -> torch.Tensor:
    """Elementwise ``l(u)`` of a margin loss (same shape as ``u``).

    The exponential loss is ``+inf`` where ``-u > 709.78`` (its value exceeds float64).

    ``exact=True`` makes each entry independent of the tensor's size (see :func:`_lanes`).
    """
    lanes = _lanes if exact else (lambda fn, x: fn(x))
    if kind == "logistic":
        return lanes(torch.nn.functional.softplus, -u)
    if kind == "exponential":
        return lanes(torch.exp, -u)
    if kind == "correlation":
        return -u
    if kind == "squared":
        return (1.0 - u) ** 2
    raise ValidationError(f"margin loss must be one of {', '.join(MARGIN_LOSSES)}, got {kind!r}")


def margin_loss_grad(u: torch.Tensor, kind: str = "logistic", exact: bool = False) -> torch.Tensor:
    """Elementwise derivative ``l'(u)`` (same shape as ``u``).

    The exponential loss's derivative is ``-inf`` where ``-u > 709.78``; use
    :func:`margin_loss_grad_scaled` for a form that cannot overflow.
    """
    lanes = _lanes if exact else (lambda fn, x: fn(x))
    if kind == "logistic":
        return -lanes(torch.sigmoid, -u)
    if kind == "exponential":
        return -lanes(torch.exp, -u)
    if kind == "correlation":
        return -torch.ones_like(u)
    if kind == "squared":
        return -2.0 * (1.0 - u)
    raise ValidationError(f"margin loss must be one of {', '.join(MARGIN_LOSSES)}, got {kind!r}")


def exp_shift(u: torch.Tensor, kind: str) -> torch.Tensor | None:
    """Per-row log-scale of the exponential loss, or None for the losses whose derivative is bounded.

    u : (..., n) signed outputs; returns (...,) float64: ``max_i(-u_i)`` for the rows where it
    exceeds :data:`EXP_SHIFT_AT` (there ``e^{-u}`` would overflow or nearly), else exactly 0, so that
    ``exp(-u - shift) <= 1`` in the shifted rows and the other rows are computed exactly as before.
    """
    if kind != "exponential":
        return None
    top = u.amin(-1).neg_()
    return top.masked_fill_(top <= EXP_SHIFT_AT, 0.0)  # NaN stays NaN (and is reported by the caller)


def margin_loss_grad_scaled(u: torch.Tensor, kind: str = "logistic", exact: bool = False):
    """Overflow-free derivative: ``(lp, log_scale)`` with ``l'(u) = lp * exp(log_scale[..., None])``.

    u : (..., n). ``log_scale`` (...,) comes from :func:`exp_shift` (None, meaning 0, for every
    loss but the exponential). Where ``log_scale`` is 0 (every row whose margins are above
    ``-EXP_SHIFT_AT`` = -600), ``lp`` is bitwise :func:`margin_loss_grad`; in a shifted row the largest
    entry of ``|lp|`` is exactly 1. The scale is shared by the row (one training run), so the
    direction of any gradient built linearly from ``lp`` is exact.
    """
    shift = exp_shift(u, kind)
    if shift is None:
        return margin_loss_grad(u, kind, exact), None
    lanes = _lanes if exact else (lambda fn, x: fn(x))
    return -lanes(torch.exp, (-u) - shift.unsqueeze(-1)), shift


def apply_log_scale(x: torch.Tensor, log_scale: torch.Tensor | None) -> torch.Tensor:
    """``x * exp(log_scale)`` per leading index, keeping exact zeros zero (never ``0 * inf = NaN``).

    x : (R, ...); log_scale : (R,) or None (returns x itself). Entries whose true value exceeds
    the float64 range become ``+-inf``.
    """
    if log_scale is None:
        return x
    f = torch.exp(log_scale).reshape(log_scale.shape + (1,) * (x.ndim - log_scale.ndim))
    return torch.where(x == 0, x, x * f)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -1) -> torch.Tensor:
    """Softmax cross-entropy per position, ``logsumexp(logits) - logits[target]``.

    Parameters
    ----------
    logits : (..., V)
    targets : (...) int64; entries equal to ``ignore_index`` give loss 0.

    Returns
    -------
    (...) per-position losses.
    """
    keep = targets != ignore_index
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    picked = torch.gather(logits, -1, safe.unsqueeze(-1)).squeeze(-1)
    out = torch.logsumexp(logits, dim=-1) - picked
    return torch.where(keep, out, torch.zeros_like(out))


def sample_losses(out: torch.Tensor, Y: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-sample loss of model outputs.

    Parameters
    ----------
    out : (R, N) outputs f (margin losses) or (R, N, V) logits (cross-entropy)
    Y : (R, N) labels in {-1, +1} (margin losses) or int64 targets (cross-entropy)

    Returns
    -------
    (R, N)
    """
    if kind == "cross_entropy":
        return cross_entropy(out, Y)
    return margin_loss(Y * out, kind)
