"""Losses of the attention models, written so that nothing overflows.

Margin losses are functions of the signed output ``u = Y * f`` (shape (R, n) or any
shape) and come with their derivative ``l'(u)``, which the closed-form gradients
of :mod:`attnsvm.models` use:

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
"""

from __future__ import annotations

import torch

from .errors import ValidationError

MARGIN_LOSSES = ("logistic", "exponential", "correlation", "squared")
LOSSES = MARGIN_LOSSES + ("cross_entropy",)


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
    """Elementwise derivative ``l'(u)`` (same shape as ``u``)."""
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
