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


def _check_path(param, radii, who: str) -> np.ndarray:
    """``radii`` as a (P,) float64 array, after checking ``param`` ("W" or "KQ") and that the radii are a non-empty
    increasing list of finite positive numbers (ValidationError naming ``who`` otherwise)."""
    if param not in ("W", "KQ"):
        raise ValidationError(f"{who} supports param 'W' or 'KQ', got {param!r}")
    try:
        radii = np.asarray(radii, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError("radii must be a non-empty increasing list of finite positive numbers") from None
    if radii.ndim != 1 or radii.size == 0 or not np.all(np.isfinite(radii)) or np.any(radii <= 0) \
            or np.any(np.diff(radii) <= 0):
        raise ValidationError(f"radii must be a non-empty increasing list of finite positive numbers, got {radii!r}")
    return radii


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
    head=None,
) -> PathResult:
    """Minimize the loss over ``||W||_F <= R`` (param "W") or ``||K||^2 + ||Q||^2 <= 2R``
    (param "KQ") for an increasing list of radii, each warm-started from the previous one.

    Projected normalized GD with step ``lr * R / sqrt(j + 1)`` at inner step j for W, and ``lr * sqrt(R) /
    sqrt(j + 1)`` for each of K and Q (each parameter normalized separately; on the budget's boundary a
    balanced factor has norm ``sqrt(R)``, so both steps are the fraction ``lr`` of the parameter's scale),
    projecting onto the ball after every step.
    The minimizers are approximate (first-order method); for large ``R * margin``
    (beyond ~35 in float64) the loss underflows and the path loses meaning.

    ``head``: None for the linear head ``v`` of the problems, or a head with a closed token form
    (:class:`~attnsvm.training.models.LambdaHead`, :class:`~attnsvm.training.models.ReLUHead`, ...; its arrays
    without a runs axis, or with one of the runs' length) for the model ``f = h(X^T softmax(X W z))``.

    Raises ValidationError for bad arguments (radii not finite/positive/increasing, lr, init,
    steps_per_radius) and NonFiniteError (naming the run and radius) if a run becomes non-finite.

    Returns
    -------
    PathResult
    """
    radii = _check_path(param, radii, "regularization_path")
    lr = check_lr(lr)
    with np.errstate(over="ignore"):
        first_step = lr * radii[-1]
    if not np.isfinite(first_step):
        raise ValidationError("lr * max(radii) must be finite (the first step of the largest radius), "
                              f"got {lr} * {radii[-1]}")
    steps_per_radius = check_int(steps_per_radius, "steps_per_radius", 0)
    check_loss(loss)
    batch, data = prepare_data(problems, runs, param, head, False, loss)
    R, n, T, d = data.X.shape
    seeds = run_seeds(seed, R)
    m = d if m is None else check_int(m, "m", 1)
    if isinstance(init, str) and init == "zero" and param == "KQ":
        raise ValidationError("(K, Q) = 0 is a stationary point; use init='default' or explicit (K, Q)")
    params = init_params(param, init, seeds, d, m)
    cfg = TrainConfig(param=param, steps=steps_per_radius, lr=lr, optimizer="ngd",
                      cps=np.array([steps_per_radius], dtype=np.int64), loss=loss, seeds=seeds, engine="closed")
    kernel = PathKernel(params, make_grad_fn(data, params, head, cfg), cfg)
    with torch.no_grad():
        for j, rad in enumerate(radii):
            kernel.start(j, rad)
            run(kernel, steps_per_radius)
    out = kernel.result()
    return PathResult(radii=radii, W=out["W"], loss=out["loss"],
                      norm=torch.linalg.vector_norm(torch.as_tensor(out["W"]).flatten(-2), dim=-1).numpy(),
                      K=out.get("K"), Q=out.get("Q"))


def lowest_loss_path(
    problems,
    radii,
    param: str = "W",
    *,
    restarts: int = 8,
    steps_per_radius: int = 500,
    lr: float = 0.1,
    seed: int = 0,
    m: int | None = None,
    loss: str = "logistic",
    head=None,
) -> tuple[PathResult, np.ndarray]:
    """The regularization path of each problem as the lowest-loss point of ``restarts`` chains per radius.

    The path is the *global* minimizer of the loss over each ball (``||W||_F <= R``, or ``||K||_F^2 + ||Q||_F^2 <=
    2R``). One warm-started chain of projected GD (:func:`regularization_path`) follows the minimizer of small
    radii continuously and stays in its basin when the global minimizer jumps to another (a locally-optimal
    direction). Here, at every radius, chain 0 starts from the previous radius's kept point (warm start; zero
    for W and a default draw for (K, Q) at the first radius) and chains 1 .. restarts-1 from independent random
    points on the ball's boundary (Gaussian W scaled to ``||W||_F = R``; Gaussian K, Q scaled to ``||K||_F^2 =
    ||Q||_F^2 = R``), all run ``steps_per_radius`` steps in one batch; the chain of the smallest loss is kept (ties:
    the lowest chain index). The chains see nothing of any SVM.

    Parameters
    ----------
    problems : TokenProblem or list of N of them
    radii : (P,) increasing positive radii
    restarts : int >= 1, chains per problem and radius
    steps_per_radius, lr, m, loss : as :func:`regularization_path`
    seed : int >= 0, seeds the random starts
    head : None (the problems' linear head) or a head shared by all problems, without a runs axis (as
        :func:`regularization_path`; the chains of all problems run in one batch)

    Returns
    -------
    (PathResult with W (N, P, d, d), loss (N, P), norm (N, P) and for KQ K, Q (N, P, d, m); chain (N, P) int, the
    chain kept at each radius)
    """
    restarts = check_int(restarts, "restarts", 1)
    seed = check_int(seed, "seed", 0)
    items = list(problems) if isinstance(problems, (list, tuple)) else [problems]
    if not items:
        raise ValidationError("problems must hold at least one problem")
    radii_arr = _check_path(param, radii, "lowest_loss_path")
    N, d = len(items), int(items[0].X.shape[-1])
    m = d if m is None else check_int(m, "m", 1)
    runs = [p for p in items for _ in range(restarts)]
    gen = np.random.Generator(np.random.PCG64(seed))
    keep: list = []
    chains = []
    prev = None
    for rad in radii_arr:
        rad = float(rad)
        if param == "W":
            start = gen.standard_normal((N, restarts, d, d))
            start *= rad / np.linalg.norm(start.reshape(N, restarts, -1), axis=-1)[..., None, None]
            start[:, 0] = 0.0 if prev is None else prev.W[:, 0]
            init = start.reshape(N * restarts, d, d)
        else:
            K, Q = gen.standard_normal((2, N, restarts, d, m))
            K *= np.sqrt(rad) / np.linalg.norm(K.reshape(N, restarts, -1), axis=-1)[..., None, None]
            Q *= np.sqrt(rad) / np.linalg.norm(Q.reshape(N, restarts, -1), axis=-1)[..., None, None]
            if prev is not None:
                K[:, 0], Q[:, 0] = prev.K[:, 0], prev.Q[:, 0]
            else:
                K[:, 0], Q[:, 0] = (0.1 * K[:, 0], 0.1 * Q[:, 0])
            init = (K.reshape(N * restarts, d, m), Q.reshape(N * restarts, d, m))
        res = regularization_path(runs, [rad], param=param, steps_per_radius=steps_per_radius, lr=lr,
                                  seed=list(range(N * restarts)), init=init, m=m, loss=loss, head=head)
        best = np.argmin(res.loss[:, 0].reshape(N, restarts), axis=1)  # (N,): first chain of the smallest loss
        idx = np.arange(N) * restarts + best
        prev = PathResult(radii=res.radii, W=res.W[idx], loss=res.loss[idx], norm=res.norm[idx],
                          K=None if res.K is None else res.K[idx], Q=None if res.Q is None else res.Q[idx])
        keep.append(prev)
        chains.append(best)
    cat = (lambda name: None if getattr(keep[0], name) is None else np.concatenate([getattr(k, name) for k in keep], 1))
    out = PathResult(radii=radii_arr, W=cat("W"), loss=cat("loss"), norm=cat("norm"), K=cat("K"), Q=cat("Q"))
    return out, np.stack(chains, 1)


def path_loss(problems, W, *, loss: str = "logistic", head=None) -> np.ndarray:
    """The loss at given points ``W (N, d, d)`` (one per problem), computed exactly as :func:`regularization_path`
    computes the losses of its path (the same float64 arithmetic), so that a path's loss and the loss at a
    comparison point (e.g. an SVM direction scaled to the path's norm) compare without a rounding difference.
    ``head``: as :func:`lowest_loss_path` (None: the problems' linear head).

    Returns (N,) float64.
    """
    items = list(problems) if isinstance(problems, (list, tuple)) else [problems]
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 3 or W.shape[0] != len(items) or not np.all(np.isfinite(W)):
        raise ValidationError(f"W must be a finite array (N, d, d) with N = {len(items)} problems, got shape "
                              f"{W.shape}")
    # a radius above every norm: the points are not projected
    rad = 2.0 * max(float(np.linalg.norm(W.reshape(len(items), -1), axis=1).max()), 1.0)
    return regularization_path(items, [rad], param="W", steps_per_radius=0, init=W, loss=loss,
                               head=head).loss[:, 0]


class PathKernel:
    """Kernel of :func:`attnsvm.training.loop.run` for one radius of a regularization path.

    Projected normalized GD: step ``lr * rad / sqrt(k + 1)`` (``lr * sqrt(rad) / sqrt(k + 1)`` for K and Q) then
    projection onto the ball of radius
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
        # the step is the fraction lr of the parameter's scale: R for W, sqrt(R) for each balanced factor K, Q
        # (K and Q at R's scale overshoot the ball ||K||^2 + ||Q||^2 <= 2R by a factor sqrt(R) from R = 1 / lr^2 on)
        scale = self.rad if self.param == "W" else np.sqrt(self.rad)
        self.opt.step(self.params, res["grads"], lr=self.lr * scale / np.sqrt(k + 1), log_scale=res.get("log_scale"))
        self.project()

    def result(self):
        return {k: torch.stack(x, 1).numpy() for k, x in self.out.items()}
