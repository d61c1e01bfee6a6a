"""Optimizers (GD, normalized GD, Adam) acting in place on (R, ...) tensors, and the per-run norms they use."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnsvm.errors import ValidationError
from attnsvm.training.checks import OPTIMIZERS, check_lr
from attnsvm.training.losses import apply_log_scale
from attnsvm.training.ops import DTYPE, fsum, ldexp


def run_norm(x: torch.Tensor) -> torch.Tensor:
    """Euclidean/Frobenius norm of each run's tensor: (R, ...) -> (R,), batch-independent rounding."""
    f = x.reshape(x.shape[0], -1)
    return torch.sqrt(fsum(f * f))


def robust_norm(x: torch.Tensor, lead: int = 1) -> torch.Tensor:
    """Euclidean norm over all but the ``lead`` leading axes, free of overflow and underflow.

    x : (*L, ...) -> (*L,). Each object is scaled by the exact power of two that brings its largest
    entry into [0.5, 1) before squaring (so entries near 1e+-200 keep their norm); equal to the plain
    norm wherever that does not overflow or underflow. Used when a plain norm came out 0 or inf.
    """
    f = x.reshape(*x.shape[:lead], -1)
    e = torch.frexp(f.abs().amax(-1)).exponent
    return ldexp(torch.linalg.vector_norm(ldexp(f, -e.unsqueeze(-1)), dim=-1), e)


def norm_at_record(x: torch.Tensor, nrm: torch.Tensor, lead: int = 1) -> torch.Tensor:
    """The plain norms ``nrm`` of x, or :func:`robust_norm` when one came out 0, inf or NaN (records only)."""
    if math.isfinite(nrm.log().sum().item()):
        return nrm
    return robust_norm(x, lead)


def true_norms(nrm: torch.Tensor, log_scale) -> torch.Tensor:
    """Norms (R,) or (P, R) of scaled gradients times ``exp(log_scale)`` (R,) (zeros stay 0; +inf beyond float64)."""
    if log_scale is None:
        return nrm
    return torch.where(nrm == 0, nrm, nrm * torch.exp(log_scale))


class Optimizer:
    """GD / normalized GD / Adam acting in place on (R, ...) tensors, per run and per parameter."""

    def __init__(self, kind, lr, eps, betas, adam_eps, bitwise=False):
        if kind not in OPTIMIZERS:
            raise ValidationError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {kind!r}")
        lr = check_lr(lr)
        self.kind, self.lr, self.eps, self.betas, self.adam_eps = kind, float(lr), float(eps), betas, adam_eps
        self.state = {}
        self.t = 0
        self.norm = run_norm if bitwise else (lambda g: torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1))

    def _run_norm(self, g):
        return self._per_run(self.norm(g), g)

    @staticmethod
    def _per_run(x, g):
        """(R,) -> (R, 1, ...) broadcasting against g (R, ...)."""
        return x.reshape((-1,) + (1,) * (g.ndim - 1))

    def step(self, params, grads, lr=None, norms=None, log_scale=None):
        """One update. ``log_scale`` (R,) or None: the true gradients are ``grads * exp(log_scale)``
        (scaled exponential-loss gradients); NGD uses the direction, GD and Adam the true values.
        ``norms`` {name: (R,)}: NGD's gradient norms if already computed."""
        lr = self.lr if lr is None else lr
        self.t += 1
        for name, g in grads.items():
            x = params[name]
            if self.kind == "gd":
                x.sub_(lr * apply_log_scale(g, log_scale))
            elif self.kind == "ngd":
                eps = self.eps if log_scale is None else self._per_run(ngd_eps(self.eps, log_scale), g)
                nrm = self._run_norm(g) if norms is None else self._per_run(norms[name], g)
                x.sub_(g * (lr / (nrm + eps)))
            else:
                g = apply_log_scale(g, log_scale)
                b1, b2 = self.betas
                if name not in self.state:
                    self.state[name] = (torch.zeros_like(x), torch.zeros_like(x))
                m1, m2 = self.state[name]
                m1.mul_(b1).add_(g, alpha=1 - b1)
                m2.mul_(b2).addcmul_(g, g, value=1 - b2)
                upd = (m1 / (1 - b1 ** self.t)) / ((m2 / (1 - b2 ** self.t)).sqrt() + self.adam_eps)
                moving = (self._run_norm(g) > 0).to(DTYPE)
                x.sub_(lr * upd * moving)


#: smallest positive normal float64: the floor of NGD's scaled epsilon (an underflow to 0 would make 0 / 0)
TINY = float(np.finfo(np.float64).tiny)


def ngd_eps(eps, log_scale):
    """NGD's denominator epsilon for scaled gradients: ``eps * exp(-log_scale)`` (R,), or eps itself.

    Floored at :data:`TINY` so that an exactly-zero (saturated) gradient still gives a zero step.
    """
    return eps if log_scale is None else (eps * torch.exp(-log_scale)).clamp_(min=TINY)
