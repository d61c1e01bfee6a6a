"""Regularization paths: approximate loss minimizers over growing balls (projected normalized GD)."""

from __future__ import annotations

import numpy as np
import torch

from attnsvm.errors import NonFiniteError, ValidationError
from attnsvm.training.checks import EPS, check_int, check_lr, run_seeds
from attnsvm.training.engine import make_grad_fn, prepare_data
from attnsvm.training.initial import init_params
from attnsvm.training.losses import check_loss
from attnsvm.training.loop import TrainConfig, run, want_mask
from attnsvm.training.ops import combine
from attnsvm.training.optim import Optimizer
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
    lr = check_lr(lr)
    with np.errstate(over="ignore"):
        first_step = lr * radii[-1]
    if not np.isfinite(first_step):
        raise ValidationError("lr * max(radii) must be finite (the first step of the largest radius), "
                              f"got {lr} * {radii[-1]}")
    steps_per_radius = check_int(steps_per_radius, "steps_per_radius", 0)
    check_loss(loss)
    batch, data = prepare_data(problems, runs, param, None, False, loss)
    R, n, T, d = data.X.shape
    seeds = run_seeds(seed, R)
    m = d if m is None else check_int(m, "m", 1)
    if isinstance(init, str) and init == "zero" and param == "KQ":
        raise ValidationError("(K, Q) = 0 is a stationary point; use init='default' or explicit (K, Q)")
    params = init_params(param, init, seeds, d, m)
    cfg = TrainConfig(param=param, steps=steps_per_radius, lr=lr, optimizer="ngd",
                      cps=np.array([steps_per_radius], dtype=np.int64), loss=loss, seeds=seeds, engine="closed")
    kernel = PathKernel(params, make_grad_fn(data, params, None, cfg), cfg)
    with torch.no_grad():
        for j, rad in enumerate(radii):
            kernel.start(j, rad)
            run(kernel, steps_per_radius)
    out = kernel.result()
    return PathResult(radii=radii, W=out["W"], loss=out["loss"],
                      norm=torch.linalg.vector_norm(torch.as_tensor(out["W"]).flatten(-2), dim=-1).numpy(),
                      K=out.get("K"), Q=out.get("Q"))


class PathKernel:
    """Kernel of :func:`attnsvm.training.loop.run` for one radius of a regularization path.

    Projected normalized GD: step ``lr * rad / sqrt(k + 1)`` then projection onto the ball of radius
    ``rad`` (:meth:`start` sets the radius and projects the warm start). The only record is the last step:
    the loss and parameters at the radius, after one finiteness check per radius (NonFiniteError).
    :meth:`result`: numpy ``W`` (R, P, d, d), ``loss`` (R, P) and, for KQ, ``K`` / ``Q`` (R, P, d, m) over
    the P radii run so far.
    """

    def __init__(self, params, grad_fn, cfg):
        self.params, self.grad_fn, self.param, self.lr = params, grad_fn, cfg.param, cfg.lr
        self.steps, self.seeds, self.R = cfg.steps, cfg.seeds, len(cfg.seeds)
        self.opt = Optimizer("ngd", cfg.lr, EPS, None, None)
        self.want = want_mask(cfg.steps, cfg.cps)
        self.out = {"W": [], "loss": []} if cfg.param == "W" else {"W": [], "loss": [], "K": [], "Q": []}

    def start(self, j, rad):
        self.j, self.rad = j, rad
        self.project()

    def project(self):
        R, rad, params = self.R, self.rad, self.params
        if self.param == "W":
            W = params["W"]
            nrm = torch.linalg.vector_norm(W.reshape(R, -1), dim=1).reshape(R, 1, 1)
            W.mul_(torch.clamp(rad / torch.clamp(nrm, min=1e-300), max=1.0))
        else:
            K, Q = params["K"], params["Q"]
            sq = (K * K).sum((1, 2)) + (Q * Q).sum((1, 2))
            f = torch.clamp(torch.sqrt(2 * rad / torch.clamp(sq, min=1e-300)), max=1.0).reshape(R, 1, 1)
            K.mul_(f)
            Q.mul_(f)

    def gradient(self, k):
        """The gradient only: a path is checked once per radius, in :meth:`record`."""
        self.res = self.grad_fn()

    def record(self):
        res, params, R, j, rad = self.res, self.params, self.R, self.j, self.rad
        flat = torch.cat([x.reshape(R, -1) for x in params.values()], 1)
        bad = ~torch.isfinite(flat).all(1) | torch.isnan(res["loss"])
        if bool(bad.any()):
            r = int(torch.nonzero(bad)[0])
            raise NonFiniteError(f"regularization path run {r} (seed {self.seeds[r]}) became non-finite at radius "
                                 f"{rad:g} (index {j}, within its {self.steps} steps); {int(bad.sum())} run(s) "
                                 "in all: rescale the data or lower lr", run=r, step=j)
        out = self.out
        out["loss"].append(res["loss"].clone())
        if self.param == "W":
            out["W"].append(params["W"].clone())
        else:
            out["K"].append(params["K"].clone())
            out["Q"].append(params["Q"].clone())
            out["W"].append(combine(params["K"], params["Q"]))

    def update(self, k):
        res = self.res
        self.opt.step(self.params, res["grads"], lr=self.lr * self.rad / np.sqrt(k + 1), log_scale=res.get("log_scale"))
        self.project()

    def result(self):
        return {k: torch.stack(x, 1).numpy() for k, x in self.out.items()}
