"""Initial parameters of the training runs: seeded default draws, zeros or explicit arrays."""

from __future__ import annotations

import numpy as np
import torch

from attnsvm.errors import ValidationError
from attnsvm.training.ops import DTYPE


def _per_run(arr, R, shape, name):
    """Explicit initial array: ``shape`` (shared by all runs) or ``(R, *shape)``, finite."""
    try:
        a = np.asarray(arr.detach().cpu() if isinstance(arr, torch.Tensor) else arr, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a real array of shape {tuple(shape)} or {(R, *shape)}") from None
    if not np.all(np.isfinite(a)):
        raise ValidationError(f"{name} must be finite (no NaN or inf)")
    t = torch.as_tensor(a, dtype=DTYPE)
    if tuple(t.shape) == tuple(shape):
        return t.unsqueeze(0).expand(R, *shape).clone()
    if tuple(t.shape) == (R, *shape):
        return t.clone()
    raise ValidationError(f"{name} must have shape {tuple(shape)} or {(R, *shape)}, got {tuple(t.shape)}")


def init_params(param, init, seeds, d, m):
    """Initial parameters, each (R, ...) float64."""
    R = len(seeds)
    shapes = {"W": {"W": (d, d)}, "KQ": {"K": (d, m), "Q": (d, m)}, "p": {"p": (d,)}}[param]
    if isinstance(init, str):
        if init == "zero":
            return {k: torch.zeros((R, *s), dtype=DTYPE) for k, s in shapes.items()}
        if init != "default":
            raise ValidationError(f"init must be 'default', 'zero', an array or a dict of arrays, got {init!r}")
        out = {k: torch.empty((R, *s), dtype=DTYPE) for k, s in shapes.items()}
        bound = 1.0 / np.sqrt(d)
        for r, sd in enumerate(seeds):
            g = torch.Generator()
            g.manual_seed(sd)
            for k, s in shapes.items():
                if param == "p":
                    out[k][r] = 0.01 * torch.randn(s, generator=g, dtype=DTYPE)
                else:
                    out[k][r] = (torch.rand(s, generator=g, dtype=DTYPE) * 2.0 - 1.0) * bound
        return out
    if isinstance(init, dict):
        if set(init) != set(shapes):
            raise ValidationError(f"init dict for param {param!r} needs keys {sorted(shapes)}, got {sorted(init)}")
        return {k: _per_run(init[k], R, s, f"init[{k!r}]") for k, s in shapes.items()}
    if isinstance(init, (tuple, list)) and param == "KQ" and len(init) == 2:
        return {"K": _per_run(init[0], R, shapes["K"], "init K"), "Q": _per_run(init[1], R, shapes["Q"], "init Q")}
    if param == "KQ":
        raise ValidationError("init for param 'KQ' must be 'default', 'zero', a (K, Q) pair or {'K':..., 'Q':...}")
    (k, s), = shapes.items()
    return {k: _per_run(init, R, s, "init")}
