"""The training engine: data preparation, the gradient functions, the generic kernel, the kernel choice.

:func:`train_loop` runs :func:`attnsvm.training.loop.run` with the kernel :func:`select_kernel` picks:
the lean numpy kernels (:mod:`attnsvm.training.lean`) for a single small run they cover, a fused torch
kernel (:mod:`attnsvm.training.fast`) for GD / NGD with closed-form gradients, else
:class:`GradientKernel`: the gradient function of :func:`make_grad_fn` (closed form via
:func:`attnsvm.training.kernel.closed_form_step`, or autograd through
:class:`attnsvm.training.models.AttentionModel`) with any optimizer (:class:`attnsvm.training.optim.Optimizer`).
:func:`prepare_data` turns problems into :class:`TrainData`; :func:`to_result` builds the ``TrainResult``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnsvm.errors import ValidationError
from attnsvm.problem import ProblemBatch, TokenProblem
from attnsvm.training.checks import check_int, resolve_engine
from attnsvm.training.fast import fast_kind, fast_kernel
from attnsvm.training.kernel import closed_form_step
from attnsvm.training.lean import lean_applies, lean_loop
from attnsvm.training.loop import run
from attnsvm.training.losses import apply_log_scale, exp_shift, sample_losses
from attnsvm.training.models import AttentionModel, token_form
from attnsvm.training.ops import DTYPE, combine, token_scores
from attnsvm.training.optim import norm_at_record, Optimizer, true_norms, robust_norm
from attnsvm.training.recorder import Recorder
from attnsvm.training.results import TrainResult

#: route single small runs to the lean numpy kernels (:mod:`attnsvm.training.lean`); False forces the torch
#: kernels everywhere (benchmarks and the lean-vs-torch tests set it)
LEAN_PATH = True


@dataclass
class TrainData:
    """Flattened training data, all (R, N, ...) float64 tensors."""

    X: torch.Tensor  # (R, N, T, d)
    Y: torch.Tensor  # (R, N) labels or int targets
    v: torch.Tensor | None  # (R, d)
    queries: torch.Tensor | None = None  # (R, N, d)
    keys: torch.Tensor | None = None  # (R, N, T, d)
    mask: torch.Tensor | None = None  # (1, N, T) bool


def make_grad_fn(data: TrainData, params, head, cfg):
    """The gradient function of ``cfg.engine`` (resolved: "closed" or "autograd") for ``cfg.param``.

    Returns grad_fn() -> dict(loss (R,), s, grads {name: tensor}, main_grad, log_scale). ``log_scale``
    (R,) or None: the true gradients are ``grads * exp(log_scale)`` (the exponential loss's gradients are
    returned scaled so that they cannot overflow). ``params`` maps names to the tensors that the
    optimizer updates in place (the autograd engine points them at its module's storage).
    """
    if resolve_engine(cfg.engine, head, cfg.loss, cfg.train_v) == "closed":
        return _closed_grad_fn(data, params, head, cfg)
    return _autograd_grad_fn(data, params, head, cfg)


def _closed_grad_fn(data: TrainData, params, head, cfg):
    """Closed-form gradients (:func:`attnsvm.training.kernel.closed_form_step`), with the data-only terms
    (transposes, the linear head's token scores and their differences) computed once."""
    param, train_v, bitwise = cfg.param, cfg.train_v, cfg.bitwise
    fixed = {"Xt": data.X.transpose(-1, -2).contiguous()} if bitwise else {}
    if head is not None:
        fixed["form"] = token_form(head, data.X, bitwise=bitwise)
    if data.queries is not None and bitwise:
        fixed["Zt"] = data.queries.transpose(1, 2).contiguous()
    if data.keys is not None and bitwise:
        R_, n_, T_, d_ = data.keys.shape
        fixed["keysT"] = data.keys.reshape(R_, n_ * T_, d_).transpose(1, 2).contiguous()
    if not train_v and head is None:
        if bitwise:
            gamma = token_scores(data.X, data.Y, data.v)
        else:
            gamma = data.Y.unsqueeze(-1) * (data.X @ data.v.unsqueeze(1).unsqueeze(-1)).squeeze(-1)
        if data.mask is not None:
            gamma = gamma.masked_fill(~data.mask, 0.0)
        fixed.update(gamma=gamma, D=gamma.unsqueeze(-1) - gamma.unsqueeze(-2))
    names = {"W": (("W", "G"),), "KQ": (("K", "gK"), ("Q", "gQ")), "p": (("p", "gp"),)}[param]
    names += (("v", "gv"),) if train_v else ()

    def grad_fn():
        v = params["v"] if train_v else data.v
        out = closed_form_step(
            data.X, data.Y, v, param=param, W=params.get("W"), K=params.get("K"), Q=params.get("Q"),
            p=params.get("p"), queries=data.queries, keys=data.keys, mask=data.mask, loss=cfg.loss,
            want_v=train_v, bitwise=bitwise, scaled=True, **fixed,
        )
        return {"loss": out["loss"], "s": out["s"], "grads": {name: out[key] for name, key in names},
                "main_grad": out.get("G", out.get("gp")), "log_scale": out.get("log_scale")}

    return grad_fn


def _autograd_grad_fn(data: TrainData, params, head, cfg):
    """Autograd through :class:`attnsvm.training.models.AttentionModel` (any head, any loss)."""
    param, loss, train_v = cfg.param, cfg.loss, cfg.train_v
    model = AttentionModel(param, W=params.get("W"), K=params.get("K"), Q=params.get("Q"), p=params.get("p"),
                           v=data.v if (head is None or train_v) else None, head=head, train_v=train_v)
    # the optimizer updates the module's own storage
    for name, prm in model.named_parameters():
        params[name] = prm.data
    names = [n for n, _ in model.named_parameters()]
    main = "p" if param == "p" else "W"

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

    return grad_fn


class GradientKernel:
    """Kernel of :func:`attnsvm.training.loop.run` for any gradient function and optimizer.

    ``grad_fn`` from :func:`make_grad_fn` (closed form or autograd, any parameterization); the
    optimizer (:class:`attnsvm.training.optim.Optimizer`: GD, NGD or Adam) updates ``params`` in place,
    with ``cfg.ridge`` added to the K and Q gradients; v is recorded when ``cfg.train_v``.
    """

    def __init__(self, data, params, grad_fn, cfg):
        R, N, T, _ = data.X.shape
        self.params, self.grad_fn, self.ridge, self.ngd = params, grad_fn, cfg.ridge, cfg.ngd
        self.opt = Optimizer(cfg.optimizer, cfg.lr, cfg.eps, cfg.betas, cfg.adam_eps, cfg.bitwise)
        self.rec = Recorder(cfg.steps, cfg.cps, R, N, T, params, cfg.train_v, cfg.seeds)
        self.want = self.rec.want

    def gradient(self, k):
        self.res = res = self.grad_fn()
        self.grads, self.ls = grads, ls = res["grads"], res.get("log_scale")
        names = list(grads)
        gn = torch.stack([self.opt.norm(grads[nm]) for nm in names])  # (P, R) norms per parameter group
        # NGD needs the direction only; GD and Adam the true (possibly overflowing) gradient
        gn = self.rec.check(k, gn, res["loss"], log_scale=None if self.ngd else ls,
                            exact=lambda: torch.stack([robust_norm(grads[nm]) for nm in names]))
        self.norms = dict(zip(names, gn))

    def record(self):
        res = self.res
        gm = norm_at_record(res["main_grad"], self.opt.norm(res["main_grad"]))
        self.rec.put(res["loss"], res["s"], true_norms(gm, self.ls), self.params)

    def update(self, k):
        grads, norms, ls, params = self.grads, self.norms, self.ls, self.params
        if self.ridge:
            grads = dict(grads)
            r2 = (2.0 * self.ridge) if ls is None else (2.0 * self.ridge * torch.exp(-ls)).reshape(-1, 1, 1)
            for name in ("K", "Q"):
                grads[name] = grads[name] + r2 * params[name]
            norms = None
        self.opt.step(params, grads, norms=norms, log_scale=ls)

    def result(self):
        return self.rec.result()


def select_kernel(data, params, head, cfg, allow_lean=True):
    """The kernel of a training call: "lean" (numpy, one small run), a fused torch kernel, or the
    :class:`GradientKernel`; returns ``(name, kernel)`` with kernel None for "lean" (:func:`lean_loop`
    builds its own and may hand the run back)."""
    if allow_lean and LEAN_PATH and lean_applies(data, cfg.param, head, cfg.loss, cfg.train_v, cfg.engine,
                                                 cfg.optimizer, cfg.bitwise, data.X.shape[0]):
        return "lean", None
    kind = fast_kind(data, cfg.param, head, cfg.loss, cfg.train_v, cfg.engine, cfg.optimizer, cfg.bitwise)
    if kind is not None:
        return kind, fast_kernel(kind, data, params, head, cfg)
    return "generic", GradientKernel(data, params, make_grad_fn(data, params, head, cfg), cfg)


def train_loop(data, params, head, cfg, allow_lean=True):
    """Train ``params`` on ``data`` with the kernel :func:`select_kernel` picks; returns the recorded
    torch tensors (run-major: ``loss`` (R, C), ``softmax`` (R, C, N, T), ``grad_norm`` (R, C), the
    parameters (R, C, ...), ``saturated`` / ``saturated_step`` (R,)).

    ``allow_lean=False`` (sequence training) or :data:`LEAN_PATH` False keeps the run in torch.
    """
    kind, kernel = select_kernel(data, params, head, cfg, allow_lean)
    if kind == "lean":
        rec = lean_loop(data, dict(params), cfg)
        if rec is not None:
            return rec
        kind, kernel = select_kernel(data, params, head, cfg, allow_lean=False)
    with torch.no_grad():
        return run(kernel, cfg.steps)


def prepare_data(problems, runs, param, head, train_v, loss):
    if isinstance(problems, ProblemBatch):
        batch = problems
    else:
        if isinstance(problems, TokenProblem):
            problems = [problems] * (1 if runs is None else check_int(runs, "runs", 1))
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

    def t(a):
        return None if a is None else torch.as_tensor(a, dtype=DTYPE)

    X = t(batch.X)
    data = TrainData(X=X, Y=t(batch.Y), v=t(batch.v), queries=t(batch.queries))
    if param == "p":
        data.keys = X if batch.W is None else torch.matmul(X, t(batch.W).unsqueeze(1))
    return batch, data


def to_result(rec, cps, seeds, param, optimizer, lr, problems, seq_shape=None, bitwise=False):
    def npy(x):
        return None if x is None else x.detach().numpy().astype(np.float64, copy=False)

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
