"""Regularization paths: approximate loss minimizers over growing balls (projected normalized GD)."""

from __future__ import annotations

import numpy as np
import torch

from attnsvm.errors import NonFiniteError, ValidationError
from attnsvm.training.checks import EPS, _check_int, _check_lr, _seeds
from attnsvm.training.engine import _make_grad_fn, _prepare
from attnsvm.training.initial import _init_params
from attnsvm.training.losses import check_loss
from attnsvm.training.ops import DTYPE, combine
from attnsvm.training.optim import _Optimizer
from attnsvm.training.results import PathResult


def regularization_path(
    problems,
    radii,
    param: str = "W",
    *,
    steps_per_radius: int = 500,
    lr: float = 0.1,
    seed=0,
    runs: int | None = None,
    init="zero",
    m: int | None = None,
    loss: str = "logistic",
) -> PathResult:
    """Minimize the loss over ``||W||_F <= R`` (param "W") or ``||K||^2 + ||Q||^2 <= 2R``
    (param "KQ") for an increasing list of radii, each warm-started from the previous one.

    Projected normalized GD with step ``lr * R / sqrt(j + 1)`` at inner step j (each
    parameter normalized separately), projecting onto the ball after every step.
    The minimizers are approximate (first-order method); for large ``R * margin``
    (beyond ~35 in float64) the loss underflows and the path loses meaning.

    Raises ValidationError for bad arguments (radii not finite/positive/increasing, lr, init,
    steps_per_radius) and NonFiniteError (naming the run and radius) if a run becomes non-finite.

    Returns
    -------
    PathResult
    """
    if param not in ("W", "KQ"):
        raise ValidationError(f"regularization_path supports param 'W' or 'KQ', got {param!r}")
    try:
        radii = np.asarray(radii, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError("radii must be a non-empty increasing list of finite positive numbers") from None
    if radii.ndim != 1 or radii.size == 0 or not np.all(np.isfinite(radii)) or np.any(radii <= 0) \
            or np.any(np.diff(radii) <= 0):
        raise ValidationError(f"radii must be a non-empty increasing list of finite positive numbers, got {radii!r}")
    lr = _check_lr(lr)
    with np.errstate(over="ignore"):
        first_step = lr * radii[-1]
    if not np.isfinite(first_step):
        raise ValidationError("lr * max(radii) must be finite (the first step of the largest radius), "
                              f"got {lr} * {radii[-1]}")
    steps_per_radius = _check_int(steps_per_radius, "steps_per_radius", 0)
    check_loss(loss)
    batch, data = _prepare(problems, runs, param, None, False, loss)
    R, n, T, d = data.X.shape
    seeds = _seeds(seed, R)
    m = d if m is None else _check_int(m, "m", 1)
    if isinstance(init, str) and init == "zero" and param == "KQ":
        raise ValidationError("(K, Q) = 0 is a stationary point; use init='default' or explicit (K, Q)")
    params = _init_params(param, init, seeds, d, m)
    grad_fn, _ = _make_grad_fn(data, param, None, loss, False, "closed", params)
    opt = _Optimizer("ngd", lr, EPS, None, None)
    P = len(radii)
    outW = torch.empty(R, P, d, d, dtype=DTYPE)
    outK = torch.empty(R, P, d, m, dtype=DTYPE) if param == "KQ" else None
    outQ = torch.empty(R, P, d, m, dtype=DTYPE) if param == "KQ" else None
    outL = torch.empty(R, P, dtype=DTYPE)

    def project(rad):
        if param == "W":
            W = params["W"]
            nrm = torch.linalg.vector_norm(W.reshape(R, -1), dim=1).reshape(R, 1, 1)
            W.mul_(torch.clamp(rad / torch.clamp(nrm, min=1e-300), max=1.0))
        else:
            K, Q = params["K"], params["Q"]
            sq = (K * K).sum((1, 2)) + (Q * Q).sum((1, 2))
            f = torch.clamp(torch.sqrt(2 * rad / torch.clamp(sq, min=1e-300)), max=1.0).reshape(R, 1, 1)
            K.mul_(f)
            Q.mul_(f)

    with torch.no_grad():
        for j, rad in enumerate(radii):
            project(rad)
            for k in range(steps_per_radius):
                res = grad_fn()
                opt.step(params, res["grads"], lr=lr * rad / np.sqrt(k + 1), log_scale=res.get("log_scale"))
                project(rad)
            res = grad_fn()
            flat = torch.cat([x.reshape(R, -1) for x in params.values()], 1)
            bad = ~torch.isfinite(flat).all(1) | torch.isnan(res["loss"])
            if bool(bad.any()):  # one check per radius
                r = int(torch.nonzero(bad)[0])
                raise NonFiniteError(f"regularization path run {r} (seed {seeds[r]}) became non-finite at radius "
                                     f"{rad:g} (index {j}, within its {steps_per_radius} steps); "
                                     f"{int(bad.sum())} run(s) "
                                     "in all: rescale the data or lower lr", run=r, step=j)
            outL[:, j] = res["loss"]
            if param == "W":
                outW[:, j] = params["W"]
            else:
                outK[:, j], outQ[:, j] = params["K"], params["Q"]
                outW[:, j] = combine(params["K"], params["Q"])

    def npy(x):
        return None if x is None else x.numpy()

    return PathResult(radii=radii, W=npy(outW), loss=npy(outL),
                      norm=npy(torch.linalg.vector_norm(outW.flatten(-2), dim=-1)), K=npy(outK), Q=npy(outQ))
