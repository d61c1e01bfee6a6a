"""Checkpoint recording and per-step health checks of a training loop (saturation, non-finite states)."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnsvm.errors import NonFiniteError
from attnsvm.training.ops import DTYPE
from attnsvm.training.optim import true_norms


class Recorder:
    """Preallocated checkpoint buffers and the saturation bookkeeping of a training loop.

    Buffers are checkpoint-major (C, R, ...) so that recording is a contiguous copy;
    :meth:`result` returns them run-major (R, C, ...).
    """

    def __init__(self, steps, cps, R, N, T, params, record_v, seeds=None, what="training run"):
        C = len(cps)
        self.cps, self.seeds, self.what = cps, seeds, what
        self.want = np.zeros(steps + 1, dtype=bool)
        self.want[cps] = True
        self.rec = {
            "loss": torch.empty(C, R, dtype=DTYPE),
            "softmax": torch.empty(C, R, N, T, dtype=DTYPE),
            "grad_norm": torch.empty(C, R, dtype=DTYPE),
        }
        for k, x in params.items():
            if k != "v" or record_v:
                self.rec[k] = torch.empty((C, R) + tuple(x.shape[1:]), dtype=DTYPE)
        self.sat_step = torch.full((R,), -1, dtype=torch.int64)
        self.nonzero = torch.ones(R, dtype=torch.bool)
        self.R = R
        self.c = 0

    def check(self, k, nrm, loss=None, log_scale=None, exact=None):
        """Step k's gradient norms ``nrm`` (R,) or (P, R) (P parameter groups); returns them, corrected.

        Flags exactly-zero loss gradients (saturation) and raises :class:`NonFiniteError` at the first
        non-finite norm (NaN/inf parameters, head outputs or data reach the gradient; an overflowing
        gradient) or NaN ``loss`` (R,) when given. ``log_scale`` (R,): judge the true norms
        ``nrm * exp(log_scale)`` (GD and Adam step with the true gradient; NGD passes None: its step is
        scale-free). ``exact``: callable recomputing ``nrm`` free of overflow/underflow (see
        :func:`robust_norm`), called only when a norm came out 0, inf or NaN, so that a gradient of
        1e-200 is not taken for exactly zero nor one of 1e200 for infinite; the corrected norms are
        returned.

        One host sync per step, the one the saturation flag needed anyway: the common case (every norm
        in (0, inf), no NaN loss) is one reduction, ``sum(log(nrm))`` finite (each log is then within
        [-745, 710], so the sum cannot overflow).
        """
        judged = true_norms(nrm, log_scale)
        quick = judged.log().sum()
        if loss is not None:
            quick = quick + loss.sum()  # a NaN (or an inf loss: checked precisely below) makes it non-finite
        if math.isfinite(quick.item()):
            self.nonzero = None  # every run moving
            return nrm
        if exact is not None and not bool(((nrm > 0) & (nrm < math.inf)).all()):
            nrm = exact()  # 0, inf or NaN (e.g. inf - inf in a quadratic form) may be an overflow/underflow
            judged = true_norms(nrm, log_scale)
        if judged.ndim == 2:
            nonzero, finite = (judged != 0).any(0), torch.isfinite(judged).all(0)
        else:
            nonzero, finite = judged != 0, torch.isfinite(judged)
        if loss is not None:
            finite = finite & ~torch.isnan(loss)
        self.nonzero = nonzero
        if bool((nonzero & finite).all()):
            return nrm
        if not bool(finite.all()):
            bad = torch.nonzero(~finite).flatten().tolist()
            r = bad[0]
            col = judged.reshape(-1, judged.shape[-1])[:, r]
            if bool(torch.isfinite(col).all()):
                detail = "its loss is NaN"
            elif bool(torch.isnan(col).any()):
                detail = "its loss gradient is NaN"
            else:
                detail = "its loss gradient exceeds float64 (infinite norm)"
            raise _diverged(self.what, r, k, self.seeds, detail, len(bad))
        zero_now = ~nonzero
        self.sat_step = torch.where((self.sat_step < 0) & zero_now, torch.full_like(self.sat_step, k), self.sat_step)
        return nrm

    def put(self, loss, s, grad_norm, params):
        c = self.c
        self.rec["loss"][c] = loss
        self.rec["softmax"][c] = s
        self.rec["grad_norm"][c] = grad_norm
        for name, x in params.items():
            if name in self.rec:
                self.rec[name][c] = x
        self.c += 1

    def result(self):
        # backstop (the per-step check normally fires first): recorded parameters and maps must be finite,
        # the loss and gradient norm must not be NaN (+inf marks a value beyond float64)
        for name, x in self.rec.items():
            total = x.sum().item()  # one cheap pass; a finite (or, for loss / grad_norm, non-NaN) sum clears all
            if math.isfinite(total) or (name in ("loss", "grad_norm") and not math.isnan(total)):
                continue
            bad = torch.isnan(x) if name in ("loss", "grad_norm") else ~torch.isfinite(x)
            if bool(bad.any()):
                per = bad.reshape(bad.shape[0], bad.shape[1], -1).any(-1)  # (C, R)
                c, r = (int(i) for i in torch.nonzero(per)[0])
                raise _diverged(self.what, r, int(self.cps[c]), self.seeds, f"its recorded {name} is non-finite",
                                int(per.any(0).sum()), first=False)
        out = {k: x.transpose(0, 1).contiguous() for k, x in self.rec.items()}
        out["saturated"] = torch.zeros(self.R, dtype=torch.bool) if self.nonzero is None else ~self.nonzero
        out["saturated_step"] = self.sat_step
        return out


def _diverged(what, run, step, seeds, detail, count=1, first=True) -> NonFiniteError:
    """The error of a run whose state became non-finite at ``step`` (number of updates done).

    ``first``: ``step`` is the first non-finite step (per-step check); else the first recorded one.
    """
    seed = f" (seed {seeds[run]})" if seeds is not None else ""
    others = f"; {count - 1} other run(s) too" if count > 1 else ""
    where = f"at step {step}" if first else f"by recorded step {step}"
    if step == 0:
        hint = ("at the initial state: the data's logits or scores overflow float64, or the head returns NaN/inf; "
                "rescale the data")
    else:
        hint = ((f"after {step} updates, finite before" if first else "first seen at a checkpoint")
                + ": lower lr, rescale the data, use optimizer='ngd' (the exponential loss's gradient can exceed "
                "float64 while its direction stays exact), or check the head")
    return NonFiniteError(f"{what} {run}{seed} became non-finite {where}: {detail}{others} ({hint})",
                          run=run, step=step)
