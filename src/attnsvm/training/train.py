"""Batched training of attention models: many independent runs, one set of tensor ops.

:func:`train` trains R runs at once (different inits and/or different problem
instances of equal shape). Every per-step operation acts on tensors with a leading
runs axis; nothing loops over runs or samples in Python. A run's result depends only
on its own seed (run r of a call with ``seed=s`` uses seed ``s + r``; pass a list
of seeds to choose them freely) and on its own problem.

Conventions reproducing the research code (transformers-as-svms spec 1.3, 1.6):

* float64; logistic loss, mean over samples;
* default init ``U(-1/sqrt(d), 1/sqrt(d))`` entrywise (``nn.Linear`` default) for W,
  K and Q, drawn from ``torch.Generator().manual_seed(seed_r)`` in the order W, or
  K then Q; the prompt p defaults to ``0.01 * N(0, I)`` like ``PromptAttn``;
* normalized GD ``x <- x - lr * g / (||g|| + eps)`` with ``eps`` = float64 machine
  epsilon, each parameter of each run normalized separately;
* (K, Q): tiny ridge ``eps * (||K||^2 + ||Q||^2)`` added to the loss (``ridge=None``
  means on for KQ, off otherwise), hidden width ``m = d`` by default.

With a margin loss, the linear head and the heads with a token form (``ReLUHead``,
``LambdaHead``, ``LinearHead``) use closed-form gradients (pairwise softmax-Jacobian
form, exact in saturation; a nonlinear head enters through the per-step token scores
``q_it = grad h(a_i)^T x_it``, see :mod:`attnsvm.training.models`); any other head uses autograd
through :class:`attnsvm.training.models.AttentionModel` (or, with ``engine="closed"``, autograd on
the head alone). A run whose loss gradient is exactly zero is flagged ``saturated``;
with a zero total gradient it does not move (never NaN).

Fast paths (closed form, ``bitwise=False``, GD / NGD, v frozen, param W or KQ):

* W with few tokens in all (``n T`` small) runs in *token space*: since every gradient
  is ``G = sum_it c_it x_it z_i^T``, the logits move by ``-lr' H c`` with the fixed
  matrix ``H[(i,t),(j,u)] = (x_it^T x_ju)(z_i^T z_j)`` and ``||G||^2 = c^T H c``; W is
  rebuilt from the accumulated ``c`` only at the recorded steps. Same iterates as the
  W-space update up to rounding (~1e-13 relative after 2000 steps).
* KQ (and W with many tokens) updates the parameters with a few batched products per
  step (``Q^T z`` reused for ``grad_K = U^T Z Q``, no ``K Q^T`` except at records).

Nothing silently non-finite: every numeric argument is checked at the boundary (finite, in
range; :class:`~attnsvm.errors.ValidationError` naming it), and every step checks the
gradient norms the optimizer uses (in the same host sync as the saturation flag, so no extra
sync): the first non-finite one stops training with :class:`~attnsvm.errors.NonFiniteError`
naming the run, its seed and the step. The exponential loss's gradient is carried with a
per-run log-scale (:func:`attnsvm.training.losses.margin_loss_grad_scaled`), so normalized GD trains
exactly at margins far below -709 where ``e^{-u}`` overflows; GD and Adam need the true
gradient and stop with NonFiniteError once it exceeds float64. Recorded ``loss`` and
``grad_norm`` are ``+inf`` where their true value exceeds float64 (never NaN).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import math

import numpy as np
import torch

from attnsvm.errors import NonFiniteError, ValidationError
from attnsvm.training import losses as _losses
from attnsvm.training.losses import (
    MARGIN_LOSSES, apply_log_scale, check_loss, exp_shift, margin_loss, margin_loss_grad,
    margin_loss_grad_scaled, sample_losses,
)
from attnsvm.training.models import (
    DTYPE, AttentionModel, MatrixHead, causal_mask, closed_form_step, combine, finite_tensor, fsum, has_token_form,
    token_form, token_scores,
)
from attnsvm.problem import ProblemBatch, TokenProblem

EPS = float(np.finfo(np.float64).eps)  # 2.220446049250313e-16
OPTIMIZERS = ("ngd", "gd", "adam")


# ------------------------------------------------------------------------ result


@dataclass
class TrainResult:
    """Trajectories of R runs recorded at C checkpoints (numpy float64).

    Attributes
    ----------
    steps : (C,) int -- number of updates done at each checkpoint (0 = init)
    loss : (R, C) -- mean training loss (``+inf`` where it exceeds float64: exponential loss)
    softmax : (R, C, n, T) -- attention maps (sequence training: (R, C, n, T, T), [query, key])
    norm : (R, C) -- ``||W||_F`` (param W / KQ) or ``||p||`` (param p)
    grad_norm : (R, C) -- norm of the loss gradient in W (or p), ridge excluded (``+inf`` where it
        exceeds float64)
    W : (R, C, d, d) combined weights (``K Q^T`` for KQ); None for param "p"
    K, Q : (R, C, d, m) for param "KQ", else None
    p : (R, C, d) for param "p", else None
    v : (R, C, d) when v is trained, else None
    saturated : (R,) bool -- the loss gradient was exactly zero at the last step
    saturated_step : (R,) int -- first step with an exactly-zero loss gradient (-1: never)
    selection : (R, n) int -- argmax of the final attention (sequence: (R, n, T))
    seeds : (R,) int -- the per-run seeds
    problems : tuple of TokenProblem (empty for array input)
    """

    steps: np.ndarray
    loss: np.ndarray
    softmax: np.ndarray
    norm: np.ndarray
    grad_norm: np.ndarray
    saturated: np.ndarray
    saturated_step: np.ndarray
    selection: np.ndarray
    seeds: np.ndarray
    param: str
    optimizer: str
    lr: float
    W: np.ndarray | None = None
    K: np.ndarray | None = None
    Q: np.ndarray | None = None
    p: np.ndarray | None = None
    v: np.ndarray | None = None
    problems: tuple = field(default_factory=tuple)

    @property
    def runs(self) -> int:
        return self.loss.shape[0]

    @property
    def final(self) -> np.ndarray:
        """Final trained parameter: W (R, d, d), or p (R, d) for the prompt model."""
        return self.p[:, -1] if self.param == "p" else self.W[:, -1]

    def at(self, step: int) -> int:
        """Checkpoint index of a step (raises if the step was not recorded)."""
        hit = np.flatnonzero(self.steps == step)
        if hit.size == 0:
            raise ValidationError(f"step {step} was not recorded; recorded steps: {self.steps[:5]}...{self.steps[-3:]}")
        return int(hit[0])


# --------------------------------------------------------------------- helpers


def _real(x, name, expected) -> float:
    """``x`` as a float (Python / numpy / 0-d numbers; no bool, str or complex), else ValidationError."""
    try:
        f = None if isinstance(x, (bool, np.bool_, str, bytes)) else float(x)
    except (TypeError, ValueError):
        f = None
    if f is None:
        raise ValidationError(f"{name} must be {expected}, got {x!r}")
    return f


def _check_positive(x, name, why="") -> float:
    """A finite number > 0."""
    f = _real(x, name, f"a finite number > 0{why}")
    if not (np.isfinite(f) and f > 0):
        raise ValidationError(f"{name} must be a finite number > 0{why}, got {x!r}")
    return f


def _check_lr(lr) -> float:
    return _check_positive(lr, "lr", " (the step size)")


def _check_eps(eps, optimizer="ngd") -> float:
    """NGD's epsilon: finite > 0; the other optimizers do not use it (finite >= 0 accepted)."""
    if optimizer == "ngd":
        return _check_positive(eps, "eps", " (it guards normalized GD against a zero gradient)")
    f = _real(eps, "eps", "a finite number >= 0")
    if not (np.isfinite(f) and f >= 0):
        raise ValidationError(f"eps must be a finite number >= 0, got {eps!r}")
    return f


def _check_ridge(ridge, param) -> float:
    """None -> machine epsilon for KQ, 0 otherwise; else a finite number >= 0 (only KQ may be nonzero)."""
    if ridge is None:
        return EPS if param == "KQ" else 0.0
    f = _real(ridge, "ridge", "None or a finite number >= 0")
    if not (np.isfinite(f) and f >= 0):
        raise ValidationError(f"ridge must be None or a finite number >= 0, got {ridge!r}")
    if f and param != "KQ":
        raise ValidationError("ridge applies to the (K, Q) parameterization only")
    return f


def _check_betas(betas) -> tuple:
    """Adam's (beta1, beta2), each a number in [0, 1)."""
    if isinstance(betas, (str, bytes)) or not hasattr(betas, "__len__") or len(betas) != 2:
        raise ValidationError(f"betas must be a pair (beta1, beta2) of numbers in [0, 1), got {betas!r}")
    out = []
    for i, b in enumerate(betas):
        f = _real(b, f"betas[{i}]", "a number in [0, 1)")
        if not (0.0 <= f < 1.0):
            raise ValidationError(f"betas[{i}] must be a number in [0, 1) (Adam's moment decay), got {b!r}")
        out.append(f)
    return tuple(out)


def _check_int(x, name, minimum):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < minimum:
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def _integral(x, name, minimum) -> int:
    """An integer >= minimum; integral floats (3.0) are accepted, 2.5 / NaN / inf / bool are not."""
    if isinstance(x, (bool, np.bool_)):
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {x!r}")
    if isinstance(x, (int, np.integer)):
        return _check_int(x, name, minimum)
    f = _real(x, name, f"an integer >= {minimum}")
    if not (np.isfinite(f) and f == np.floor(f) and f >= minimum):
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(f)


def _seeds(seed, R):
    if isinstance(seed, (list, tuple, np.ndarray)):
        seeds = [_integral(s, f"seed[{i}]", 0) for i, s in enumerate(np.asarray(seed, dtype=object).ravel())]
        if np.ndim(seed) != 1 or len(seeds) != R:
            raise ValidationError(f"seed list must give one seed per run ({R}), got shape {np.shape(seed)}")
        return seeds
    return [_check_int(seed, "seed", 0) + r for r in range(R)]


def _checkpoints(steps, record_every, checkpoints):
    if checkpoints is not None:
        if isinstance(checkpoints, (str, bytes)) or not hasattr(checkpoints, "__iter__"):
            raise ValidationError(f"checkpoints must be a list of integer steps in [0, steps={steps}], got {checkpoints!r}")
        cps = sorted({_integral(c, f"checkpoints[{i}]", 0) for i, c in enumerate(checkpoints)})
        if not cps or cps[-1] > steps:
            raise ValidationError(f"checkpoints must be a non-empty list of steps in [0, steps={steps}], got {list(checkpoints)!r}")
        return np.array(cps, dtype=np.int64)
    every = _check_int(record_every, "record_every", 1)
    cps = list(range(0, steps + 1, every))
    if cps[-1] != steps:
        cps.append(steps)
    return np.array(cps, dtype=np.int64)


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


def _init_params(param, init, seeds, d, m):
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
    return torch.ldexp(torch.linalg.vector_norm(torch.ldexp(f, -e.unsqueeze(-1)), dim=-1), e)


def _norm_at_record(x: torch.Tensor, nrm: torch.Tensor, lead: int = 1) -> torch.Tensor:
    """The plain norms ``nrm`` of x, or :func:`robust_norm` when one came out 0, inf or NaN (records only)."""
    if math.isfinite(nrm.log().sum().item()):
        return nrm
    return robust_norm(x, lead)


def _true_norms(nrm: torch.Tensor, log_scale) -> torch.Tensor:
    """Norms (R,) or (P, R) of scaled gradients times ``exp(log_scale)`` (R,) (zeros stay 0; +inf beyond float64)."""
    if log_scale is None:
        return nrm
    return torch.where(nrm == 0, nrm, nrm * torch.exp(log_scale))


class _Optimizer:
    """GD / normalized GD / Adam acting in place on (R, ...) tensors, per run and per parameter."""

    def __init__(self, kind, lr, eps, betas, adam_eps, bitwise=False):
        if kind not in OPTIMIZERS:
            raise ValidationError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {kind!r}")
        lr = _check_lr(lr)
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
                eps = self.eps if log_scale is None else self._per_run(_ngd_eps(self.eps, log_scale), g)
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


@dataclass
class _Data:
    """Flattened training data, all (R, N, ...) float64 tensors."""

    X: torch.Tensor  # (R, N, T, d)
    Y: torch.Tensor  # (R, N) labels or int targets
    v: torch.Tensor | None  # (R, d)
    queries: torch.Tensor | None = None  # (R, N, d)
    keys: torch.Tensor | None = None  # (R, N, T, d)
    mask: torch.Tensor | None = None  # (1, N, T) bool


def _make_grad_fn(data: _Data, param, head, loss, train_v, engine, params, bitwise=False):
    """Returns (grad_fn, main_name, model): grad_fn() -> dict(loss (R,), s, grads {name: tensor}, main_grad,
    log_scale). ``log_scale`` (R,) or None: the true gradients are ``grads * exp(log_scale)`` (the
    exponential loss's gradients are returned scaled so that they cannot overflow).

    ``params`` maps names to the tensors that the optimizer updates in place.
    """
    main = "p" if param == "p" else "W"
    engine = _resolve_engine(engine, head, loss, train_v)

    if engine == "closed":
        fixed = {"Xt": data.X.transpose(-1, -2).contiguous()} if bitwise else {}
        if head is not None:
            fixed["form"] = token_form(head, data.X, bitwise=bitwise)
        if data.queries is not None and bitwise:
            fixed["Zt"] = data.queries.transpose(1, 2).contiguous()
        if data.keys is not None and bitwise:
            R_, n_, T_, d_ = data.keys.shape
            fixed["keysT"] = data.keys.reshape(R_, n_ * T_, d_).transpose(1, 2).contiguous()
        if not train_v and head is None:
            gamma = token_scores(data.X, data.Y, data.v) if bitwise else data.Y.unsqueeze(-1) * (data.X @ data.v.unsqueeze(1).unsqueeze(-1)).squeeze(-1)
            if data.mask is not None:
                gamma = gamma.masked_fill(~data.mask, 0.0)
            fixed.update(gamma=gamma, D=gamma.unsqueeze(-1) - gamma.unsqueeze(-2))

        def grad_fn():
            v = params["v"] if train_v else data.v
            out = closed_form_step(
                data.X, data.Y, v, param=param, W=params.get("W"), K=params.get("K"), Q=params.get("Q"),
                p=params.get("p"), queries=data.queries, keys=data.keys, mask=data.mask, loss=loss,
                want_v=train_v, bitwise=bitwise, scaled=True, **fixed,
            )
            grads = {}
            if param == "W":
                grads["W"] = out["G"]
            elif param == "KQ":
                grads["K"], grads["Q"] = out["gK"], out["gQ"]
            else:
                grads["p"] = out["gp"]
            if train_v:
                grads["v"] = out["gv"]
            return {"loss": out["loss"], "s": out["s"], "grads": grads, "main_grad": out.get("G", out.get("gp")),
                    "log_scale": out.get("log_scale")}

        return grad_fn, None

    model = AttentionModel(param, W=params.get("W"), K=params.get("K"), Q=params.get("Q"), p=params.get("p"),
                           v=data.v if (head is None or train_v) else None, head=head, train_v=train_v)
    # the optimizer updates the module's own storage
    for name, prm in model.named_parameters():
        params[name] = prm.data
    names = [n for n, _ in model.named_parameters()]

    def grad_fn():
        for prm in model.parameters():
            prm.grad = None
        log_scale = None
        with torch.enable_grad():
            out = model(data.X, queries=data.queries, keys=data.keys, mask=data.mask)
            if loss == "exponential":  # e^{-u - shift}: the gradients come out divided by e^{shift}
                u = data.Y * out
                log_scale = exp_shift(u.detach(), loss)
                per_pos = torch.exp(-u - log_scale.unsqueeze(-1))
            else:
                per_pos = sample_losses(out, data.Y, loss)
            if loss == "cross_entropy":  # mean over the positions that have a target (-1 = ignored)
                per_run = per_pos.sum(-1) / (data.Y != -1).sum(-1).clamp(min=1)
            else:
                per_run = per_pos.mean(-1)
            per_run.sum().backward()
        prms = dict(model.named_parameters())
        grads = {k: (prms[k].grad if prms[k].grad is not None else torch.zeros_like(prms[k])) for k in names}
        if param == "KQ":
            G = model.last_W.grad
            main_grad = G if G is not None else torch.zeros_like(model.last_W)
        else:
            main_grad = grads[main]
        return {"loss": apply_log_scale(per_run.detach(), log_scale), "s": model.softmax.detach(), "grads": grads,
                "main_grad": main_grad, "log_scale": log_scale}

    return grad_fn, model


def _resolve_engine(engine, head, loss, train_v):
    """'auto' -> 'closed' (margin loss and the linear head or a head with a token form) or 'autograd'."""
    if engine not in ("auto", "closed", "autograd"):
        raise ValidationError(f"engine must be 'auto', 'closed' or 'autograd', got {engine!r}")
    closed_ok = loss in MARGIN_LOSSES and (head is None or not train_v)
    if engine == "auto":
        return "closed" if closed_ok and has_token_form(head) else "autograd"
    if engine == "closed" and not closed_ok:
        raise ValidationError("engine='closed' needs a margin loss, and the linear head (head=None) when train_v=True")
    return engine


class _Recorder:
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
        judged = _true_norms(nrm, log_scale)
        quick = judged.log().sum()
        if loss is not None:
            quick = quick + loss.sum()  # a NaN (or an inf loss: checked precisely below) makes it non-finite
        if math.isfinite(quick.item()):
            self.nonzero = None  # every run moving
            return nrm
        if exact is not None and not bool(((nrm > 0) & (nrm < math.inf)).all()):
            nrm = exact()  # 0, inf or NaN (e.g. inf - inf in a quadratic form) may be an overflow/underflow
            judged = _true_norms(nrm, log_scale)
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


def _run_loop(data, params, grad_fn, *, param, steps, lr, optimizer, eps, betas, adam_eps, ridge, cps, record_v, bitwise,
              seeds=None):
    """The generic training loop (any engine, optimizer, parameterization); returns recorded torch tensors."""
    R, N, T, _ = data.X.shape
    opt = _Optimizer(optimizer, lr, eps, betas, adam_eps, bitwise)
    rec = _Recorder(steps, cps, R, N, T, params, record_v, seeds)
    with torch.no_grad():
        for k in range(steps + 1):
            res = grad_fn()
            grads, ls = res["grads"], res.get("log_scale")
            names = list(grads)
            gn = torch.stack([opt.norm(grads[nm]) for nm in names])  # (P, R) norms per parameter group
            # NGD needs the direction only; GD and Adam the true (possibly overflowing) gradient
            gn = rec.check(k, gn, res["loss"], log_scale=None if optimizer == "ngd" else ls,
                           exact=lambda: torch.stack([robust_norm(grads[nm]) for nm in names]))
            norms = dict(zip(names, gn))
            if rec.want[k]:
                gm = _norm_at_record(res["main_grad"], opt.norm(res["main_grad"]))
                rec.put(res["loss"], res["s"], _true_norms(gm, ls), params)
            if k == steps:
                break
            if ridge:
                grads = dict(grads)
                r2 = (2.0 * ridge) if ls is None else (2.0 * ridge * torch.exp(-ls)).reshape(-1, 1, 1)
                for name in ("K", "Q"):
                    grads[name] = grads[name] + r2 * params[name]
                norms = None
            opt.step(params, grads, norms=norms, log_scale=ls)
    return rec.result()


# ------------------------------------------------------------------ fast loops

#: token-space W loop: at most this many tokens n*T in all, and R * (n T)^2 entries of H
TOKEN_SPACE_MAX_TOKENS = 64
TOKEN_SPACE_MAX_ENTRIES = 2**24


def _softmax_top(a):
    """Softmax over the last axis and the index (..., 1) of the largest logit (the most attended token)."""
    top, idx = a.max(-1, keepdim=True)
    e = (a - top).exp_()
    return e.div_(e.sum(-1, keepdim=True)), idx


class _Weights:
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
            gamma = self._masked(self.Yc * q)
            g = gamma - gamma.gather(-1, top)
            m = (s * g).sum(-1, keepdim=True)
        else:
            gtop = self.gamma.gather(-1, top)
            g = self.gamma - gtop
            m = (s * g).sum(-1, keepdim=True)
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
        return u, g.sub_(m).mul_(s).mul_(lp.unsqueeze(-1)), log_scale


def _fast_kind(data, param, head, loss, train_v, engine, optimizer, bitwise):
    """'tokens' / 'direct' when a fast loop applies, else None (generic loop)."""
    if bitwise or train_v or param not in ("W", "KQ") or optimizer not in ("gd", "ngd") or data.queries is None:
        return None
    if _resolve_engine(engine, head, loss, train_v) != "closed":
        return None
    R, N, T, _ = data.X.shape
    if param == "W" and N * T <= TOKEN_SPACE_MAX_TOKENS and R * (N * T) ** 2 <= TOKEN_SPACE_MAX_ENTRIES:
        return "tokens"
    return "direct"


def _logits(Xb, Wz, R, N, T, d, hidden):
    """``a_it = x_it^T (W z_i)`` from the rows ``W z_i`` (R, N, d); ``hidden`` (negated mask) tokens get -inf."""
    a = torch.bmm(Xb, Wz.reshape(R * N, d, 1)).reshape(R, N, T)
    if hidden is not None:
        a.masked_fill_(hidden, float("-inf"))
    return a


#: smallest positive normal float64: the floor of NGD's scaled epsilon (an underflow to 0 would make 0 / 0)
TINY = float(np.finfo(np.float64).tiny)


def _token_norm(c, H):
    """``||G||_F = sqrt(c^T H c)`` per run (R,) from token weights c (R, N, T) and H (R, NT, NT), with c
    scaled by an exact power of two so that the quadratic form neither overflows nor underflows."""
    R = c.shape[0]
    cf = c.reshape(R, 1, -1)
    e = torch.frexp(cf.abs().amax(-1)).exponent  # (R, 1)
    cs = torch.ldexp(cf, -e.unsqueeze(-1))
    q = torch.bmm(torch.bmm(cs, H), cs.transpose(1, 2)).reshape(R).clamp_(min=0.0)
    return torch.ldexp(q.sqrt_(), e.reshape(R))


def _ngd_eps(eps, log_scale):
    """NGD's denominator epsilon for scaled gradients: ``eps * exp(-log_scale)`` (R,), or eps itself.

    Floored at :data:`TINY` so that an exactly-zero (saturated) gradient still gives a zero step.
    """
    return eps if log_scale is None else (eps * torch.exp(-log_scale)).clamp_(min=TINY)


def _fast_loop(kind, data, params, head, loss, *, param, steps, lr, optimizer, eps, ridge, cps, seeds=None):
    """GD / NGD with closed-form gradients and frozen head: token-space W loop or direct W / KQ loop.

    With the exponential loss the per-token weights come scaled by ``exp(-log_scale)`` per run: NGD
    steps along their (exact) direction, with eps scaled alike; GD multiplies them back.
    """
    X, Y, Z, mask = data.X.contiguous(), data.Y, data.queries.contiguous(), data.mask
    R, N, T, d = X.shape
    weights = _Weights(token_form(head, X, data.v), Y, mask, loss)
    Xb = X.reshape(R * N, T, d)
    XbT = Xb.transpose(1, 2).contiguous()  # (R N, d, T): U = X^T c as matrix-vector products (faster in MKL)
    hidden = None if mask is None else ~mask
    ngd = optimizer == "ngd"
    rec = _Recorder(steps, cps, R, N, T, params, False, seeds)

    def record(u, s, grad_norm, values):
        rec.put(margin_loss(u, loss).mean(-1), s, grad_norm, values)

    def run_norm_(g, shape):
        return torch.linalg.vector_norm(g.reshape(*shape, -1), dim=-1)

    with torch.no_grad():
        if kind == "tokens":
            W0 = params["W"]
            NT = N * T
            Xf = X.reshape(R, NT, d)
            H = torch.bmm(Xf, Xf.transpose(1, 2)).reshape(R, N, T, N, T)
            H = H.mul_(torch.bmm(Z, Z.transpose(1, 2)).reshape(R, N, 1, N, 1)).reshape(R, NT, NT)
            a = _logits(Xb, torch.bmm(Z, W0.transpose(1, 2)), R, N, T, d, hidden)
            acc = torch.zeros(R, N, T, dtype=DTYPE)  # sum over steps of (step size) * c: W = W0 - sum_it acc_it x_it z_i^T
            # H is symmetric: H c = (c^T H)^T; MKL's batched kernels are much faster for c^T H once NT > 16
            row = NT > 16
            for k in range(steps + 1):
                s, top = _softmax_top(a)
                u, c, ls = weights(s, top)
                if row:
                    Hc = torch.bmm(c.reshape(R, 1, NT), H).reshape(R, N, T)
                else:
                    Hc = torch.bmm(H, c.reshape(R, NT, 1)).reshape(R, N, T)
                nrm = (c * Hc).reshape(R, NT).sum(-1).clamp_(min=0.0).sqrt_()  # ||G||_F (scaled by exp(-ls))
                nrm = rec.check(k, nrm, log_scale=None if ngd else ls, exact=lambda: _token_norm(c, H))
                if rec.want[k]:
                    U = torch.bmm(XbT, acc.reshape(R * N, T, 1)).reshape(R, N, d)
                    record(u, s, _true_norms(nrm, ls), {"W": W0 - torch.bmm(U.transpose(1, 2), Z)})
                if k == steps:
                    break
                if ngd:
                    fac = (lr / (nrm + _ngd_eps(eps, ls))).reshape(R, 1, 1)
                else:  # the true gradient is finite here (checked above)
                    fac = lr if ls is None else (lr * torch.exp(ls)).reshape(R, 1, 1)
                a.sub_(Hc.mul_(fac))
                acc.add_(c.mul_(fac))
            return rec.result()

        if param == "W":
            W = params["W"]
            G = torch.empty_like(W)
            for k in range(steps + 1):
                s, top = _softmax_top(_logits(Xb, torch.bmm(Z, W.transpose(1, 2)), R, N, T, d, hidden))
                u, c, ls = weights(s, top)
                U = torch.bmm(XbT, c.reshape(R * N, T, 1)).reshape(R, N, d)
                torch.bmm(U.transpose(1, 2), Z, out=G)  # sum_i u_i z_i^T
                nrm = run_norm_(G, (R,))
                nrm = rec.check(k, nrm, log_scale=None if ngd else ls, exact=lambda: robust_norm(G))
                if rec.want[k]:
                    record(u, s, _true_norms(nrm, ls), params)
                if k == steps:
                    break
                if ngd:
                    W.addcdiv_(G, nrm.add_(_ngd_eps(eps, ls)).reshape(R, 1, 1), value=-lr)
                else:
                    W.add_(apply_log_scale(G, ls), alpha=-lr)
            return rec.result()

        # KQ: K and Q live in one (2, R, d, m) tensor so the update is one set of ops
        KQ = torch.stack([params["K"], params["Q"]])
        params["K"], params["Q"] = K, Q = KQ[0], KQ[1]
        g = torch.empty_like(KQ)
        gK, gQ = g[0], g[1]
        Zt = Z.transpose(1, 2).contiguous()
        for k in range(steps + 1):
            ZQ = torch.bmm(Z, Q)  # rows Q^T z_i
            s, top = _softmax_top(_logits(Xb, torch.bmm(ZQ, K.transpose(1, 2)), R, N, T, d, hidden))
            u, c, ls = weights(s, top)
            U = torch.bmm(XbT, c.reshape(R * N, T, 1)).reshape(R, N, d)
            torch.bmm(U.transpose(1, 2), ZQ, out=gK)  # G Q = U^T Z Q
            torch.bmm(Zt, torch.bmm(U, K), out=gQ)  # G^T K = Z^T U K
            plain = run_norm_(g, (2, R))
            # loss gradient in K or in Q nonzero; NGD uses the direction, GD the true norms
            nrm = rec.check(k, plain, log_scale=None if ngd else ls, exact=lambda: robust_norm(g, 2))
            if rec.want[k]:
                GW = torch.bmm(U.transpose(1, 2), Z)
                record(u, s, _true_norms(_norm_at_record(GW, run_norm_(GW, (R,))), ls), params)
            if k == steps:
                break
            if ridge:
                if ls is None:
                    g.add_(KQ, alpha=2.0 * ridge)
                else:  # the ridge gradient in the units of the scaled loss gradient
                    g.add_(KQ * (2.0 * ridge * torch.exp(-ls)).reshape(1, R, 1, 1))
                if ngd:  # the robust norm only where the plain one needed correcting
                    nrm = run_norm_(g, (2, R)) if nrm is plain else robust_norm(g, 2)
            if ngd:
                e = eps if ls is None else _ngd_eps(eps, ls).reshape(1, R)
                KQ.addcdiv_(g, nrm.add_(e).reshape(2, R, 1, 1), value=-lr)
            elif ls is None:
                KQ.add_(g, alpha=-lr)
            else:
                KQ.add_(apply_log_scale(g.transpose(0, 1), ls).transpose(0, 1), alpha=-lr)
        return rec.result()


def _train_loop(data, params, head, loss, train_v, engine, bitwise, *, param, steps, lr, optimizer, eps, betas,
                adam_eps, ridge, cps, seeds=None):
    """Picks the fast loop when it applies, else the generic grad_fn loop."""
    kind = _fast_kind(data, param, head, loss, train_v, engine, optimizer, bitwise)
    if kind is not None:
        return _fast_loop(kind, data, params, head, loss, param=param, steps=steps, lr=lr, optimizer=optimizer,
                          eps=eps, ridge=ridge, cps=cps, seeds=seeds)
    grad_fn, _ = _make_grad_fn(data, param, head, loss, train_v, engine, params, bitwise)
    return _run_loop(data, params, grad_fn, param=param, steps=steps, lr=lr, optimizer=optimizer, eps=eps,
                     betas=betas, adam_eps=adam_eps, ridge=ridge, cps=cps, record_v=train_v, bitwise=bitwise,
                     seeds=seeds)


def _prepare(problems, runs, param, head, train_v, loss):
    if isinstance(problems, ProblemBatch):
        batch = problems
    else:
        if isinstance(problems, TokenProblem):
            problems = [problems] * (1 if runs is None else _check_int(runs, "runs", 1))
        elif runs is not None and runs != len(problems):
            raise ValidationError(f"runs={runs} does not match the {len(problems)} problems given")
        batch = TokenProblem.stack(problems)
    if param not in ("W", "KQ", "p"):
        raise ValidationError(f"param must be 'W', 'KQ' or 'p', got {param!r}")
    if batch.mode == "prompt" and param != "p":
        raise ValidationError("a prompt problem (no Z, no query_index) trains the prompt: use param='p'")
    if batch.mode != "prompt" and param == "p":
        raise ValidationError(f"param='p' needs a prompt problem (no Z / query_index); this problem is {batch.mode!r}")
    if batch.Y is None:
        raise ValidationError("training needs labels Y")
    if (head is None or train_v) and batch.v is None:
        raise ValidationError("training with the linear head (or train_v=True) needs a head v in the problem")
    if loss == "cross_entropy":
        raise ValidationError("cross_entropy is for next-token prediction: use train_sequence(..., H=...)")
    t = lambda a: None if a is None else torch.as_tensor(a, dtype=DTYPE)
    X = t(batch.X)
    data = _Data(X=X, Y=t(batch.Y), v=t(batch.v), queries=t(batch.queries))
    if param == "p":
        data.keys = X if batch.W is None else torch.matmul(X, t(batch.W).unsqueeze(1))
    return batch, data


def _finish(rec, cps, seeds, param, optimizer, lr, problems, seq_shape=None, bitwise=False):
    npy = lambda x: None if x is None else x.detach().numpy().astype(np.float64, copy=False)
    W = None
    if param == "W":
        W = rec["W"]
    elif param == "KQ":
        K, Q = rec["K"].flatten(0, 1), rec["Q"].flatten(0, 1)
        W = combine(K, Q) if bitwise else torch.bmm(K, Q.transpose(1, 2))  # fixed-order sums only when bitwise
        W = W.reshape(rec["K"].shape[:2] + (rec["K"].shape[2],) * 2)
    if param == "p":
        norm = torch.linalg.vector_norm(rec["p"], dim=-1)
    else:
        norm = torch.linalg.vector_norm(W.flatten(-2), dim=-1)
    s = rec["softmax"]
    if seq_shape is not None:
        s = s.reshape(s.shape[0], s.shape[1], *seq_shape)
    return TrainResult(
        steps=cps, loss=npy(rec["loss"]), softmax=npy(s), norm=npy(norm), grad_norm=npy(rec["grad_norm"]),
        saturated=rec["saturated"].numpy().copy(), saturated_step=rec["saturated_step"].numpy().copy(),
        selection=s[:, -1].argmax(-1).numpy(), seeds=np.array(seeds, dtype=np.int64), param=param,
        optimizer=optimizer, lr=float(lr), W=npy(W), K=npy(rec.get("K")), Q=npy(rec.get("Q")),
        p=npy(rec.get("p")), v=npy(rec.get("v")), problems=tuple(problems),
    )


# ------------------------------------------------------------------------ public


def train(
    problems,
    param: str = "W",
    head=None,
    steps: int = 2000,
    lr: float = 0.1,
    optimizer: str = "ngd",
    seed=0,
    record_every: int = 10,
    *,
    checkpoints: Sequence[int] | None = None,
    runs: int | None = None,
    loss: str = "logistic",
    init="default",
    m: int | None = None,
    ridge: float | None = None,
    train_v: bool = False,
    engine: str = "auto",
    bitwise: bool = False,
    eps: float = EPS,
    betas: tuple = (0.9, 0.999),
    adam_eps: float = 1e-8,
) -> TrainResult:
    """Train R attention runs together.

    Parameters
    ----------
    problems : TokenProblem, list of TokenProblem of equal shape and mode, or ProblemBatch
        One run per problem; a single problem with ``runs=k`` gives k runs on it.
    param : "W" | "KQ" | "p"
        W-parameterization, (K, Q) with ``W = K Q^T``, or the prompt model (p trained, the
        problem's W fixed; needs a prompt problem).
    head : None (linear head v of the problem, frozen unless ``train_v``) or any callable
        mapping the attended vectors (R, n, d) to outputs (R, n), e.g.
        :class:`~attnsvm.training.models.ReLUHead`, :class:`~attnsvm.training.models.LambdaHead` (these two and
        :class:`~attnsvm.training.models.LinearHead` train with closed-form gradients by default).
    steps, lr, optimizer : number of updates, step size, "ngd" | "gd" | "adam"
    seed : int (run r uses ``seed + r``) or a list of per-run seeds
    record_every / checkpoints : record every k steps (plus the last), or at the given steps
    loss : "logistic" | "exponential" | "correlation" | "squared"
    init : "default" (nn.Linear-like uniform; p: 0.01 N(0,I)), "zero", an array (d,d) / (R,d,d)
        (W), (d,) / (R,d) (p), a pair (K, Q) or a dict of arrays
    m : hidden width of (K, Q) (default d)
    ridge : coefficient of ``ridge * (||K||^2 + ||Q||^2)``; None = machine epsilon for KQ, 0 otherwise
    train_v : also train the linear head v (joint (v, p) / (v, W) training); v starts at the problem's v
    engine : "auto" (closed form for margin losses with the linear head or a head with a token
        form -- ReLUHead, LambdaHead, LinearHead; autograd otherwise), "closed" (also any other
        per-sample head callable, whose gradient then comes from autograd on the head alone),
        "autograd" (autograd through the whole model; its softmax Jacobian loses accuracy once
        the attention saturates, where the closed form stays exact)
    bitwise : closed-form engine only. True: every contraction is an elementwise product with a
        fixed-order sum, so a run's trajectory is bitwise identical whatever runs it is batched
        with (about 2x slower). False (default): BLAS contractions (and, for W with GD / NGD,
        the token-space loop); batched and one-by-one runs then agree to rounding (~1e-13
        relative after 2000 steps), not bitwise.
    eps : NGD denominator epsilon (finite, > 0); betas : Adam's (beta1, beta2) in [0, 1);
        adam_eps : Adam's denominator epsilon (finite, > 0)

    Returns
    -------
    TrainResult

    Raises
    ------
    ValidationError
        a bad argument (named, with what was expected): e.g. ``lr`` NaN/inf/<= 0, a non-finite
        ``init``, ``ridge`` NaN or < 0, ``steps`` not an integer >= 0, checkpoints outside [0, steps].
    NonFiniteError
        a run's state became non-finite (names the run, its seed and the first such step).
    """
    check_loss(loss)
    lr, steps, adam_eps, betas, optimizer = _check_common(lr, steps, optimizer, betas, adam_eps)
    eps = _check_eps(eps, optimizer)
    batch, data = _prepare(problems, runs, param, head, train_v, loss)
    R, n, T, d = data.X.shape
    seeds = _seeds(seed, R)
    m = d if m is None else _check_int(m, "m", 1)
    ridge = _check_ridge(ridge, param)
    cps = _checkpoints(steps, record_every, checkpoints)
    params = _init_params(param, init, seeds, d, m)
    if train_v:
        params["v"] = data.v.clone()
    rec = _train_loop(data, params, head, loss, train_v, engine, bitwise, param=param, steps=steps, lr=lr,
                      optimizer=optimizer, eps=eps, betas=betas, adam_eps=adam_eps, ridge=ridge, cps=cps, seeds=seeds)
    return _finish(rec, cps, seeds, param, optimizer, lr, batch.problems, bitwise=bitwise)


def _check_common(lr, steps, optimizer, betas=(0.9, 0.999), adam_eps=1e-8):
    """Boundary checks shared by train() and train_sequence()."""
    if optimizer not in OPTIMIZERS:
        raise ValidationError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    adam_eps = _check_positive(adam_eps, "adam_eps", " (Adam's denominator epsilon)")
    return _check_lr(lr), _check_int(steps, "steps", 0), adam_eps, _check_betas(betas), optimizer


def train_sequence(
    X,
    Y,
    v=None,
    *,
    causal: bool = True,
    H=None,
    head=None,
    param: str = "W",
    loss: str | None = None,
    steps: int = 2000,
    lr: float = 0.1,
    optimizer: str = "ngd",
    seed=0,
    runs: int | None = None,
    record_every: int = 10,
    checkpoints=None,
    init="default",
    m: int | None = None,
    ridge: float | None = None,
    train_v: bool = False,
    engine: str = "auto",
    bitwise: bool = False,
    eps: float = EPS,
) -> TrainResult:
    """Sequence / causal attention: every token is a query with its own label.

    Output k of sequence i is ``h(X_i^T softmax(X_i W x_{ik}))``; with ``causal`` the
    query k attends to tokens ``t <= k`` only. The loss is the mean over all (i, k)
    (cross-entropy: over the positions that have a target).

    Parameters
    ----------
    X : (n, T, d) or (R, n, T, d) tokens (R instances, one run each)
    Y : (n, T) or (R, n, T): labels in {-1, +1} (margin losses) or, with ``H``, int64
        next-token targets in [0, V) (-1 = ignored position) for the cross-entropy
    v : (d,) or (R, d) linear head (margin losses)
    H : (d, V) output embedding for next-token prediction (logits ``H^T o``)
    loss : default "logistic", or "cross_entropy" when H is given

    Returns
    -------
    TrainResult with ``softmax`` (R, C, n, T, T) (axis -2 = query position, -1 = key)
    and ``selection`` (R, n, T) (argmax key per query).
    """
    if loss is None:
        loss = "cross_entropy" if H is not None else "logistic"
    check_loss(loss)
    if param not in ("W", "KQ"):
        raise ValidationError(f"sequence training supports param 'W' or 'KQ', got {param!r}")
    lr, steps, _, _, optimizer = _check_common(lr, steps, optimizer)
    eps = _check_eps(eps, optimizer)
    ridge = _check_ridge(ridge, param)
    try:
        Xt = torch.as_tensor(np.array(X, dtype=np.float64), dtype=DTYPE)
    except (TypeError, ValueError):
        raise ValidationError("X must be a finite real array (n, T, d) or (R, n, T, d)") from None
    if Xt.ndim == 3:
        Xt = Xt.unsqueeze(0)
    if Xt.ndim != 4 or not torch.isfinite(Xt).all():
        raise ValidationError("X must be a finite array (n, T, d) or (R, n, T, d)")
    if runs is not None:
        if Xt.shape[0] != 1:
            raise ValidationError("runs= replicates a single instance; X already has a runs axis")
        Xt = Xt.expand(_check_int(runs, "runs", 1), -1, -1, -1)
    R, n, T, d = Xt.shape
    Yarr = np.asarray(Y)
    if Yarr.dtype == object or not (np.issubdtype(Yarr.dtype, np.number) or Yarr.dtype == bool):
        raise ValidationError(f"Y must be a numeric array (n, T) or (R, n, T), got dtype {Yarr.dtype}")
    if loss == "cross_entropy":
        if H is None:
            raise ValidationError("cross_entropy needs the output embedding H (d, V)")
        head = MatrixHead(H)
        if head.H.shape[-2] != d or (head.H.ndim == 3 and head.H.shape[0] != R):
            raise ValidationError(f"H must have shape (d, V) = ({d}, V) or (R, d, V), got {tuple(head.H.shape)}")
        V = head.H.shape[-1]
        Yf = Yarr.astype(np.float64)
        if not np.all((Yf == np.round(Yf)) & (Yf >= -1) & (Yf < V)):
            raise ValidationError(f"Y must hold integer next-token targets in [0, V={V}) or -1 (ignored)")
        Yt = torch.as_tensor(Yarr.astype(np.int64))
    else:
        Yt = torch.as_tensor(Yarr.astype(np.float64), dtype=DTYPE)
        if not torch.all(Yt.abs() == 1):
            raise ValidationError("Y must hold labels in {-1, +1} for margin losses")
    if Yt.ndim == 2:
        Yt = Yt.unsqueeze(0)
    Yt = Yt.expand(R, -1, -1) if Yt.shape[0] == 1 else Yt
    if tuple(Yt.shape) != (R, n, T):
        raise ValidationError(f"Y must have shape (n, T) = ({n}, {T}) or (R, n, T), got {tuple(Yarr.shape)}")
    vt = None
    if v is not None:
        vt = finite_tensor(v, "v", (1, 2), "(d,) or (R, d)").detach()
        vt = vt.expand(R, -1).clone() if vt.ndim == 1 else vt
        if tuple(vt.shape) != (R, d):
            raise ValidationError(f"v must have shape (d,) = ({d},) or (R, d)")
    elif head is None:
        raise ValidationError("give a head v, H or a head callable")
    N = n * T
    Xf = Xt.unsqueeze(2).expand(R, n, T, T, d).reshape(R, N, T, d)  # sample (i, k) sees all tokens of X_i
    queries = Xt.reshape(R, N, d)  # query of sample (i, k) is x_ik
    mask = causal_mask(T, causal).unsqueeze(0).expand(n, T, T).reshape(1, N, T)
    data = _Data(X=Xf, Y=Yt.reshape(R, N), v=vt, queries=queries, mask=mask if causal else None)
    seeds = _seeds(seed, R)
    m = d if m is None else _check_int(m, "m", 1)
    cps = _checkpoints(steps, record_every, checkpoints)
    params = _init_params(param, init, seeds, d, m)
    if train_v:
        if data.v is None:
            raise ValidationError("train_v=True needs a head v")
        params["v"] = data.v.clone()
    rec = _train_loop(data, params, head, loss, train_v, engine, bitwise, param=param, steps=steps, lr=lr,
                      optimizer=optimizer, eps=eps, betas=(0.9, 0.999), adam_eps=1e-8, ridge=ridge, cps=cps,
                      seeds=seeds)
    return _finish(rec, cps, seeds, param, optimizer, lr, (), seq_shape=(n, T, T), bitwise=bitwise)


# -------------------------------------------------------------- regularization path


@dataclass
class PathResult:
    """Regularization path: approximate minimizers of the loss over growing balls.

    radii : (P,); W : (R, P, d, d) (``K Q^T`` for KQ); loss : (R, P); norm : (R, P)
    K, Q : (R, P, d, m) for KQ
    """

    radii: np.ndarray
    W: np.ndarray
    loss: np.ndarray
    norm: np.ndarray
    K: np.ndarray | None = None
    Q: np.ndarray | None = None


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
        raise ValidationError(f"lr * max(radii) must be finite (the first step of the largest radius), got {lr} * {radii[-1]}")
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
            bad = ~torch.isfinite(torch.cat([x.reshape(R, -1) for x in params.values()], 1)).all(1) | torch.isnan(res["loss"])
            if bool(bad.any()):  # one check per radius
                r = int(torch.nonzero(bad)[0])
                raise NonFiniteError(f"regularization path run {r} (seed {seeds[r]}) became non-finite at radius "
                                     f"{rad:g} (index {j}, within its {steps_per_radius} steps); {int(bad.sum())} run(s) "
                                     "in all: rescale the data or lower lr", run=r, step=j)
            outL[:, j] = res["loss"]
            if param == "W":
                outW[:, j] = params["W"]
            else:
                outK[:, j], outQ[:, j] = params["K"], params["Q"]
                outW[:, j] = combine(params["K"], params["Q"])
    npy = lambda x: None if x is None else x.numpy()
    return PathResult(radii=radii, W=npy(outW), loss=npy(outL),
                      norm=npy(torch.linalg.vector_norm(outW.flatten(-2), dim=-1)), K=npy(outK), Q=npy(outQ))
