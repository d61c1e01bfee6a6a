"""Hostile inputs for the training layer (train, train_sequence, regularization_path, models, losses, metrics).

Issue 12 "Nothing silently wrong": every case must end in a correct result or a one-line
error (an :class:`attnsvm.errors.AttnSVMError`) that names the argument, the run or the step;
never a traceback, a hang or a NaN that looks like a result.

``CASES`` is a table of hostile calls, each with the outcome it must have:

* ``error``  -- raises AttnSVMError whose message contains ``mentions``;
* ``result`` -- returns, and the case's own mathematical check of the result holds;
* ``either`` -- a correct result or a clear error (the input is at the limit of float64).

:func:`classify` runs one case and names what happened: "correct", "clear error", "vague error"
(an AttnSVMError not naming what was wrong), "traceback" (any other exception), "hang" (over
60 s) or "silent wrong" (returned where an error was due, or a result failing its check, e.g. a
NaN). Run this file as a script to print the table and the counts (the survey of the issue):

    OMP_NUM_THREADS=1 .venv/bin/python tests/test_hostile_training.py

The property tests (hypothesis) at the end draw hostile parameters and data and check that no
NaN ever leaves ``train`` or the metrics without an error.
"""

from __future__ import annotations

import math
import signal
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnsvm import errors
from attnsvm.generators import random_problem
from attnsvm.metrics import (
    convergence_type, correlation, one_minus_correlation, read_selection, selected_mass, softmax_of, token_margins,
)
from attnsvm.training.models import AttentionModel, LambdaHead, LinearHead, MatrixHead, ReLUHead, closed_form_step
from attnsvm.problem import TokenProblem
from attnsvm.training.train import regularization_path, train, train_sequence

AttnSVMError = errors.AttnSVMError
NonFiniteError = getattr(errors, "NonFiniteError", errors.AttnSVMError)  # the survey also runs on older code
NAN, INF = float("nan"), float("inf")
D = torch.float64


# ------------------------------------------------------------------ case table


@dataclass
class Case:
    name: str
    fn: Callable
    expect: str  # "error" | "result" | "either"
    mentions: tuple = ()


CASES: list[Case] = []


def case(expect, *mentions):
    def deco(fn):
        CASES.append(Case(fn.__name__.removeprefix("c_"), fn, expect, tuple(m.lower() for m in mentions)))
        return fn
    return deco


class _Timeout(Exception):
    pass


def classify(c: Case, timeout: int = 60) -> tuple[str, str]:
    """Run a case; returns (outcome, detail)."""
    def alarm(*_):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    try:
        ok = c.fn()
    except _Timeout:
        return "hang", f"over {timeout} s"
    except AttnSVMError as e:
        msg = str(e)
        if all(m in msg.lower() for m in c.mentions):
            return "clear error", msg.splitlines()[0][:160]
        return "vague error", msg.splitlines()[0][:160]
    except Exception as e:  # noqa: BLE001 - the point is to classify everything else as a traceback
        return "traceback", f"{type(e).__name__}: {str(e).splitlines()[0][:140] if str(e) else ''}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if c.expect == "error":
        return "silent wrong", "returned instead of raising"
    if isinstance(ok, (bool, np.bool_)) and bool(ok):
        return "correct", ""
    return "silent wrong", "the result fails its check (e.g. NaN)"


def _prob(seed=0, n=3, T=4, d=5, mode="cross"):
    return random_problem(n, T, d, seed=seed, mode=mode)


def _prompt(seed=0, n=3, T=4, d=5):
    p = _prob(seed, n, T, d)
    return TokenProblem(p.X, Y=p.Y, v=p.v)


def _finite_result(res) -> bool:
    """Parameters and maps finite; loss and grad_norm never NaN (+inf = beyond float64)."""
    arrays = [res.softmax] + [x for x in (res.W, res.K, res.Q, res.p, res.v) if x is not None]
    return (all(np.all(np.isfinite(a)) for a in arrays)
            and not np.any(np.isnan(res.loss)) and not np.any(np.isnan(res.grad_norm)))


def _tr(**kw):
    """train() on a small problem with short defaults."""
    kw.setdefault("steps", 20)
    prob = kw.pop("problem", None) or _prob()
    return train(prob, **kw)


def _shifted(c, n=4, T=5, d=6, seed=3):
    """Two problems whose margins differ by the constant c: P0 (margins of order 1) and P1 = P0 with
    every token shifted by b = c e_1 (v_1 = 1, Y = +1, so v^T b = c and u -> u + c).

    The shift adds b^T W z_i to every logit of sample i (softmax unchanged) and b z_i^T sum_t c_it = 0
    to the gradient, and multiplies e^{-u} by e^{-c}: normalized GD on the exponential loss follows the
    same trajectory on both (the step is scale-free). Token first coordinates are built so that
    ``X1 = X0 + b`` holds exactly in float64.
    """
    g = np.random.default_rng(seed)
    X = g.standard_normal((n, T, d))
    Z = g.standard_normal((n, d))
    v = g.standard_normal(d)
    v[0] = 1.0
    X1 = X.copy()
    X1[..., 0] += c
    X0 = X1.copy()
    X0[..., 0] -= c
    assert np.array_equal(X0[..., 0] + c, X1[..., 0])
    Y = np.ones(n)
    return TokenProblem(X0, Z, Y=Y, v=v), TokenProblem(X1, Z, Y=Y, v=v)


EPS = float(np.finfo(np.float64).eps)


def _shift_tol(c, path_length):
    """Tolerance of the shift invariance in float64.

    The token scores ``v^T x_t`` of P1 are of size |c|, so they carry rounding ~eps |c|; the gradient's
    shift term ``b z^T sum_t c_t`` (zero in exact arithmetic) then keeps ~eps |c| of the per-token
    weights times |b| = |c|: a relative direction error of about eps c^2 per step (4x for the two scores
    of each pairwise difference and the top token). NGD moves W by at most ``path_length`` (sum of step
    sizes), so trajectories differ by at most ~4 eps c^2 * path_length (plus 1e-12 of ordinary rounding).
    """
    return 4.0 * EPS * c * c * path_length + 1e-12


def _same_trajectory(c, loss="exponential", **kw):
    """NGD with the given loss: P1 (margins near c) trains like P0 (for the exponential loss only: the
    step is scale-free and e^{-u-c} = e^{-c} e^{-u}); 10 steps, before the dynamics amplify rounding."""
    p0, p1 = _shifted(c)
    kw = dict(dict(loss=loss, optimizer="ngd", steps=10, record_every=5, lr=0.1), **kw)
    r0, r1 = train(p0, **kw), train(p1, **kw)
    tol = _shift_tol(c, kw["steps"] * kw["lr"])
    main = "p" if kw.get("param") == "p" else "W"
    a, b = getattr(r0, main), getattr(r1, main)
    moved = np.max(np.abs(a[:, -1] - a[:, 0])) > 0.1 * kw["steps"] * kw["lr"]  # the runs really trained
    return bool(p1.scores().max() < c / 2 and _finite_result(r1) and moved
                and (loss != "exponential" or c > -710 or (np.all(np.isinf(r1.loss)) and np.all(r1.loss > 0)))
                and np.max(np.abs(a - b)) <= tol and np.max(np.abs(r0.softmax - r1.softmax)) <= tol)


# --- train(): numeric parameters ---------------------------------------------------------------

@case("error", "lr")
def c_train_lr_nan():
    return _tr(lr=NAN)


@case("error", "lr")
def c_train_lr_inf():
    return _tr(lr=INF)


@case("error", "lr")
def c_train_lr_negative():
    return _tr(lr=-0.1)


@case("error", "lr")
def c_train_lr_zero():
    return _tr(lr=0.0)


@case("error", "lr")
def c_train_lr_string():
    return _tr(lr="0.1")


@case("error", "lr")
def c_train_lr_nan_gd():
    return _tr(lr=NAN, optimizer="gd")


@case("error", "lr")
def c_train_lr_inf_kq():
    return _tr(lr=INF, param="KQ")


@case("error", "lr")
def c_train_lr_nan_adam():
    return _tr(lr=NAN, optimizer="adam")


@case("error", "init")
def c_train_init_nan():
    W = np.zeros((5, 5))
    W[1, 2] = NAN
    return _tr(init=W)


@case("error", "init")
def c_train_init_inf():
    return _tr(init=np.full((5, 5), INF))


@case("error", "init")
def c_train_init_kq_nan():
    K = np.eye(5)
    return _tr(param="KQ", init={"K": K, "Q": K * NAN})


@case("error", "init")
def c_train_init_p_nan():
    return _tr(problem=_prompt(), param="p", init=np.full(5, NAN))


@case("error", "init")
def c_train_init_per_run_nan():
    W = np.zeros((2, 5, 5))
    W[1] = NAN
    return _tr(runs=2, init=W)


@case("error", "init")
def c_train_init_strings():
    return _tr(init=[["a"] * 5] * 5)


@case("error", "ridge")
def c_train_ridge_nan():
    return _tr(param="KQ", ridge=NAN)


@case("error", "ridge")
def c_train_ridge_inf():
    return _tr(param="KQ", ridge=INF)


@case("error", "ridge")
def c_train_ridge_negative():
    return _tr(param="KQ", ridge=-1.0)


@case("error", "ridge")
def c_train_ridge_on_w():
    return _tr(param="W", ridge=0.1)


@case("error", "eps")
def c_train_eps_nan():
    return _tr(eps=NAN)


@case("error", "eps")
def c_train_eps_zero_ngd():
    return _tr(eps=0.0)


@case("error", "eps")
def c_train_eps_nan_gd():
    return _tr(eps=NAN, optimizer="gd")


@case("error", "steps")
def c_train_steps_nan():
    return _tr(steps=NAN)


@case("error", "steps")
def c_train_steps_fraction():
    return _tr(steps=2.5)


@case("error", "steps")
def c_train_steps_negative():
    return _tr(steps=-1)


@case("error", "record_every")
def c_train_record_every_zero():
    return _tr(record_every=0)


@case("error", "checkpoints")
def c_train_checkpoints_negative():
    return _tr(checkpoints=[-1, 5])


@case("error", "checkpoints")
def c_train_checkpoints_beyond():
    return _tr(checkpoints=[0, 25])


@case("error", "checkpoints")
def c_train_checkpoints_nan():
    return _tr(checkpoints=[0, NAN])


@case("error", "checkpoints")
def c_train_checkpoints_fraction():
    return _tr(checkpoints=[0, 2.5])


@case("error", "checkpoints")
def c_train_checkpoints_empty():
    return _tr(checkpoints=[])


@case("error", "betas")
def c_train_betas_one():
    return _tr(optimizer="adam", betas=(1.0, 0.999))


@case("error", "betas")
def c_train_betas_nan():
    return _tr(optimizer="adam", betas=(NAN, 0.999))


@case("error", "betas")
def c_train_betas_short():
    return _tr(optimizer="adam", betas=(0.9,))


@case("error", "betas")
def c_train_betas_negative():
    return _tr(optimizer="adam", betas=(-0.1, 0.999))


@case("error", "adam_eps")
def c_train_adam_eps_nan():
    return _tr(optimizer="adam", adam_eps=NAN)


@case("error", "adam_eps")
def c_train_adam_eps_zero():
    return _tr(optimizer="adam", adam_eps=0.0)


@case("error", "seed")
def c_train_seed_negative():
    return _tr(seed=-1)


@case("error", "seed")
def c_train_seed_nan():
    return _tr(seed=NAN)


@case("error", "seed")
def c_train_seed_list_nan():
    return _tr(runs=2, seed=[0, NAN])


@case("error", "seed")
def c_train_seed_list_fraction():
    return _tr(runs=2, seed=[0, 1.5])


@case("error", "m")
def c_train_m_zero():
    return _tr(param="KQ", m=0)


@case("error", "runs")
def c_train_runs_zero():
    return _tr(runs=0)


@case("error", "optimizer")
def c_train_optimizer_unknown():
    return _tr(optimizer="sgd")


@case("error", "loss")
def c_train_loss_unknown():
    return _tr(loss="hinge")


# --- train(): state that becomes non-finite ----------------------------------------------------

@case("error", "run 0", "step 1")
def c_train_gd_huge_lr_diverges():
    """K, Q ~ 1e299 after one GD step: W = K Q^T overflows."""
    return _tr(param="KQ", optimizer="gd", lr=1e300)


@case("result")
def c_train_gd_huge_lr_saturates():
    """GD with lr 1e300 on W: one step saturates the attention exactly; the gradient is then exactly 0 and
    W stays finite (a correct, saturated run, not an error)."""
    res = _tr(optimizer="gd", lr=1e300)
    return bool(_finite_result(res) and res.saturated[0] and res.saturated_step[0] == 1)


@case("error", "run 0", "step 0")
def c_train_data_1e200_overflows():
    p = _prob()
    return train(TokenProblem(p.X * 1e200, p.Z * 1e200, Y=p.Y, v=p.v), steps=20)


def _first_step(scale_x, **kw):
    """Correlation loss (l' = -1), init zero (uniform attention): the gradient at step 0 is exactly linear in
    the scores and tokens, so scaling X by a scales it by a^2. Returns (reference run, scaled run)."""
    p = _prob()
    kw = dict(dict(loss="correlation", init="zero", steps=1, record_every=1, lr=0.1), **kw)
    return train(p, **kw), train(TokenProblem(p.X * scale_x, p.Z, Y=p.Y, v=p.v), **kw)


@case("result")
def c_train_tiny_data_gradient_not_flushed():
    """X * 1e-100: the gradient (~1e-200) is representable but its square is not; the norm must not come out
    0 (that flagged the run 'saturated', gradient exactly zero, and recorded grad_norm 0)."""
    ok = True
    for bitwise in (False, True):
        ref, tiny = _first_step(1e-100, bitwise=bitwise)
        ok &= (not tiny.saturated[0] and tiny.saturated_step[0] == -1
               and abs(tiny.grad_norm[0, 0] / (1e-200 * ref.grad_norm[0, 0]) - 1) <= 1e-12)
    return bool(ok)


@case("result")
def c_train_huge_gradient_norm_finite_step():
    """X * 1e80: the gradient (~1e160) is representable but its squared norm is not; normalized GD must take
    its step of length lr along it (the plain norm came out inf: a zero step, or an 'infinite gradient')."""
    ok = True
    for bitwise in (False, True):
        ref, big = _first_step(1e80, bitwise=bitwise)
        ok &= bool(_finite_result(big) and np.allclose(big.W[0, 1], ref.W[0, 1], rtol=1e-12, atol=1e-15)
                   and abs(big.grad_norm[0, 0] / (1e160 * ref.grad_norm[0, 0]) - 1) <= 1e-12)
    return bool(ok)


class _NaNHead:
    """Linear head whose outputs turn NaN in one run from a given call on (one call per step)."""

    def __init__(self, v, run, at):
        self.v, self.run, self.at, self.calls = torch.tensor(np.array(v), dtype=D), run, at, 0

    def __call__(self, a):
        f = (a * self.v).sum(-1)
        if self.calls >= self.at:
            f = f.clone()
            f[self.run] = NAN
        self.calls += 1
        return f


@case("error", "run 2", "step 5")
def c_train_head_nan_closed():
    p = _prob()
    return train([p] * 3, head=_NaNHead(p.v, 2, 5), engine="closed", steps=20)


@case("error", "run 1", "step 3")
def c_train_head_nan_autograd():
    p = _prob()
    return train([p] * 2, head=_NaNHead(p.v, 1, 3), engine="autograd", steps=20)


@case("error", "run", "step 0")
def c_train_head_nan_adam():
    p = _prob()
    return train(p, head=_NaNHead(p.v, 0, 0), optimizer="adam", steps=20)


# --- the exponential loss at margins where e^{-u} overflows ------------------------------------

@case("result")
def c_exp_loss_margin_1e3_ngd_w():
    return _same_trajectory(-1e3)


@case("result")
def c_exp_loss_margin_650_ngd_w():
    """Margins near -650: e^{-u} ~ 1e282 is representable but the squared gradient norm is not."""
    return _same_trajectory(-650.0)


@case("result")
def c_exp_loss_margin_1e5_ngd_w():
    return _same_trajectory(-1e5)


@case("result")
def c_exp_loss_margin_1e3_ngd_kq():
    return _same_trajectory(-1e3, param="KQ")


@case("result")
def c_exp_loss_margin_1e5_ngd_kq_bitwise():
    return _same_trajectory(-1e5, param="KQ", bitwise=True)


@case("result")
def c_exp_loss_margin_1e3_autograd():
    return _same_trajectory(-1e3, engine="autograd")


@case("result")
def c_exp_loss_margin_1e3_head_form():
    p0, _ = _shifted(-1e3)
    return _same_trajectory(-1e3, head=LinearHead(p0.v))


@case("result")
def c_exp_loss_margin_1e5_prompt():
    p0, p1 = _shifted(-1e5)
    kw = dict(param="p", loss="exponential", steps=10, record_every=5, lr=0.1)
    r0 = train(TokenProblem(p0.X, Y=p0.Y, v=p0.v), **kw)
    r1 = train(TokenProblem(p1.X, Y=p1.Y, v=p1.v), **kw)
    return bool(_finite_result(r1) and np.max(np.abs(r0.p - r1.p)) <= _shift_tol(-1e5, 1.0))


def _reference_ngd_sequence(X, Y, v, W0, steps, lr):
    """Independent reference for causal sequence NGD on the exponential loss: autograd of the weighted sum
    ``sum_(i,k) w_ik (-u_ik)`` with detached weights ``w = exp(-u - max(-u))`` (the gradient's direction),
    then ``W <- W - lr G / ||G||``. X (n, T, d), Y (n, T), v (d,), W0 (d, d) -> W after each step."""
    X, Y, v = (torch.as_tensor(np.array(a), dtype=D) for a in (X, Y, v))
    n, T, d = X.shape
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    W = torch.as_tensor(W0, dtype=D).clone()
    out = [W.clone()]
    for _ in range(steps):
        Wg = W.clone().requires_grad_(True)
        logits = torch.einsum("itd,de,ike->ikt", X, Wg, X).masked_fill(~mask, -INF)  # [i, query k, key t]
        s = torch.softmax(logits, -1)
        u = Y * torch.einsum("ikt,itd,d->ik", s, X, v)
        w = torch.exp(-u - (-u).max()).detach()
        (-(w * u).sum()).backward()
        G = Wg.grad
        W = W - lr * G / G.norm()
        out.append(W.clone())
    return np.stack([w.numpy() for w in out])


@case("result")
def c_exp_loss_margin_1e3_sequence():
    """Causal sequence training (self-attention: the shift also moves the queries, so no invariance): NGD at
    margins near -1e3 equals an independent autograd reference of the scaled gradient direction. lr = 1e-3
    keeps the maps unsaturated (queries of size 1e3 make logits ~1e6 |W|), where autograd's softmax
    Jacobian, the reference, is accurate."""
    _, p1 = _shifted(-1e3)
    Y = np.ones(p1.X.shape[:2])
    res = train_sequence(p1.X, Y, p1.v, loss="exponential", steps=10, record_every=1, lr=1e-3, init="zero")
    ref = _reference_ngd_sequence(p1.X, Y, p1.v, np.zeros((p1.d, p1.d)), 10, 1e-3)
    return bool(_finite_result(res) and np.all(np.isinf(res.loss)) and np.abs(ref[-1] - ref[0]).max() > 1e-3
                and np.max(np.abs(res.W[0] - ref)) <= _shift_tol(-1e3, 10 * 1e-3))


@case("result")
def c_exp_loss_margin_1e3_sequence_long():
    """Long causal run at margins near -1e3: the attention saturates, the scaled gradient becomes tiny
    (subnormal) while the true one stays beyond float64 (e^1000 times it), so every NGD step has length
    exactly lr (``lr ||G|| / (||G|| + eps)`` with ``||G|| >> eps``): no 0/0, no false saturation."""
    _, p1 = _shifted(-1e3)
    res = train_sequence(p1.X, np.ones(p1.X.shape[:2]), p1.v, loss="exponential", steps=60, record_every=1, lr=0.1)
    dW = np.linalg.norm(np.diff(res.W[0], axis=0).reshape(60, -1), axis=1)
    return bool(_finite_result(res) and not res.saturated[0] and np.allclose(dW, 0.1, rtol=1e-9, atol=0))


@case("result")
def c_exp_loss_margin_1e3_path():
    p0, p1 = _shifted(-1e3)
    radii = [1.0, 2.0]
    r0 = regularization_path(p0, radii, loss="exponential", steps_per_radius=10)
    r1 = regularization_path(p1, radii, loss="exponential", steps_per_radius=10)
    path_length = sum(0.1 * r * np.sum(1 / np.sqrt(np.arange(1, 11))) for r in radii)
    return bool(np.all(np.isfinite(r1.W)) and np.max(np.abs(r0.W - r1.W)) <= _shift_tol(-1e3, path_length))


@case("error", "run 0", "step 0", "infinite")
def c_exp_loss_margin_1e3_gd():
    _, p1 = _shifted(-1e3)
    return train(p1, loss="exponential", optimizer="gd", steps=20)


@case("error", "run 0", "step 0", "infinite")
def c_exp_loss_margin_1e3_adam():
    _, p1 = _shifted(-1e3)
    return train(p1, loss="exponential", optimizer="adam", steps=20)


@case("result")
def c_exp_loss_closed_form_true_gradient_no_nan():
    """closed_form_step at margins near -1e3: the true gradient is +-inf (beyond float64) or exactly 0, never NaN,
    with the signs of the scaled (exact-direction) gradient."""
    _, p1 = _shifted(-1e3)
    t = lambda a: torch.as_tensor(np.array(a), dtype=D).unsqueeze(0)  # noqa: E731
    W = t(np.eye(p1.d) * 0.3)
    args = (t(p1.X), t(p1.Y), t(p1.v))
    kw = dict(param="W", W=W, queries=t(p1.Z), loss="exponential", want_v=True)
    true = closed_form_step(*args, **kw)
    sc = closed_form_step(*args, scaled=True, **kw)
    G, Gs = true["G"].numpy(), sc["G"].numpy()
    return bool(not np.any(np.isnan(G)) and np.all(np.isfinite(Gs)) and np.array_equal(np.sign(G), np.sign(Gs))
                and np.all(np.isinf(G[Gs != 0])) and float(sc["log_scale"][0]) > 900)


# --- train_sequence() ------------------------------------------------------------------------------

def _seq(**kw):
    p = _prob(n=2, T=4, d=5)
    Y = np.where(np.arange(8).reshape(2, 4) % 2 == 0, 1.0, -1.0)
    args = dict(X=p.X, Y=Y, v=p.v, steps=10)
    args.update(kw)
    return train_sequence(**args)


@case("error", "lr")
def c_seq_lr_nan():
    return _seq(lr=NAN)


@case("error", "x")
def c_seq_x_nan():
    p = _prob(n=2, T=4, d=5)
    X = p.X.copy()
    X[0, 0, 0] = NAN
    return _seq(X=X)


@case("error", "v")
def c_seq_v_nan():
    return _seq(v=np.full(5, NAN))


@case("error", "h")
def c_seq_h_inf():
    H = np.ones((5, 7))
    H[0, 0] = INF
    return _seq(H=H, Y=np.zeros((2, 4), dtype=np.int64), v=None)


@case("error", "y", "[0, v=7)")
def c_seq_targets_out_of_range():
    return _seq(H=np.ones((5, 7)), Y=np.full((2, 4), 7), v=None)


@case("error", "y")
def c_seq_targets_fraction():
    return _seq(H=np.ones((5, 7)), Y=np.full((2, 4), 1.5), v=None)


@case("error", "ridge")
def c_seq_ridge_nan():
    return _seq(param="KQ", ridge=NAN)


@case("error", "init")
def c_seq_init_nan():
    return _seq(init=np.full((5, 5), NAN))


@case("error", "eps")
def c_seq_eps_nan():
    return _seq(eps=NAN)


@case("error", "runs")
def c_seq_runs_zero():
    return _seq(runs=0)


@case("error", "y")
def c_seq_labels_zero():
    return _seq(Y=np.zeros((2, 4)))


@case("error", "steps")
def c_seq_steps_inf():
    return _seq(steps=INF)


# --- regularization_path() -----------------------------------------------------------------------

@case("error", "radii")
def c_path_radii_nan():
    return regularization_path(_prob(), [NAN], steps_per_radius=5)


@case("error", "radii")
def c_path_radii_inf():
    return regularization_path(_prob(), [1.0, INF], steps_per_radius=5)


@case("error", "radii")
def c_path_radii_decreasing():
    return regularization_path(_prob(), [2.0, 1.0], steps_per_radius=5)


@case("error", "lr")
def c_path_lr_nan():
    return regularization_path(_prob(), [1.0], lr=NAN, steps_per_radius=5)


@case("error", "lr")
def c_path_lr_times_radius_overflows():
    return regularization_path(_prob(), [1.0, 1e308], lr=10.0, steps_per_radius=5)


@case("error", "steps_per_radius")
def c_path_steps_negative():
    return regularization_path(_prob(), [1.0], steps_per_radius=-1)


@case("error", "steps_per_radius")
def c_path_steps_fraction():
    return regularization_path(_prob(), [1.0], steps_per_radius=2.5)


@case("error", "init")
def c_path_init_nan():
    return regularization_path(_prob(), [1.0], init=np.full((5, 5), NAN), steps_per_radius=5)


@case("error", "run 0", "radius")
def c_path_data_overflow():
    p = _prob()
    return regularization_path(TokenProblem(p.X * 1e200, p.Z * 1e200, Y=p.Y, v=p.v), [1.0],
                               init="default", steps_per_radius=5)


# --- models ------------------------------------------------------------------------------------------

@case("error", "v")
def c_model_linear_head_nan():
    return LinearHead(np.full(5, NAN))


@case("error", "v")
def c_model_relu_head_nan():
    V = np.eye(5)
    V[0, 0] = NAN
    return ReLUHead(V)


@case("error", "lam")
def c_model_lambda_head_lam_nan():
    return LambdaHead(np.ones(5), NAN)


@case("error", "lam")
def c_model_lambda_head_lam_inf():
    return LambdaHead(np.ones(5), INF)


@case("error", "v")
def c_model_lambda_head_v_inf():
    return LambdaHead(np.full(5, INF), 0.1)


@case("error", "h")
def c_model_matrix_head_nan():
    return MatrixHead(np.full((5, 3), NAN))


@case("error", "w")
def c_model_attention_w_nan():
    return AttentionModel("W", W=torch.full((1, 5, 5), NAN), v=torch.ones(1, 5))


@case("error", "v")
def c_model_attention_v_inf():
    return AttentionModel("W", W=torch.zeros(1, 5, 5), v=torch.full((1, 5), INF))


@case("error", "w")
def c_model_attention_w_strings():
    return AttentionModel("W", W="abc", v=torch.ones(1, 5))


# --- metrics -----------------------------------------------------------------------------------------

_G = np.random.default_rng(7)
_A = _G.standard_normal((5, 5))
_B = _G.standard_normal((5, 5))


@case("result")
def c_metric_correlation_zero_convention():
    return bool(correlation(np.zeros((5, 5)), _A) == 0.0 and one_minus_correlation(np.zeros((5, 5)), _A) == 1.0)


@case("error", "a", "finite")
def c_metric_correlation_nan():
    return correlation(_A * NAN, _B)


@case("error", "b", "finite")
def c_metric_correlation_inf():
    return correlation(_A, _B * INF)


@case("result")
def c_metric_correlation_1e200():
    ref = float(correlation(_A, _B))
    return bool(correlation(_A * 2.0**660, _B) == ref and abs(correlation(_A * 1e200, _B * 1e150) - ref) <= 1e-14)


@case("result")
def c_metric_correlation_1e_minus_200():
    ref = float(correlation(_A, _B))
    return bool(correlation(_A * 2.0**-660, _B) == ref and abs(correlation(_A * 1e-200, _B * 1e-300) - ref) <= 1e-14)


@case("result")
def c_metric_one_minus_correlation_extreme_scales():
    ref = float(one_minus_correlation(_A, _B))
    return bool(abs(one_minus_correlation(_A * 1e300, _B * 1e-300) - ref) <= 1e-14 * max(ref, 1.0)
                and one_minus_correlation(_A * 1e-300, _A * 1e300) <= 1e-15)


@case("error", "a", "finite")
def c_metric_one_minus_correlation_nan():
    return one_minus_correlation(_A * NAN, _B)


@case("error", "trailing")
def c_metric_one_minus_correlation_shapes():
    return one_minus_correlation(np.ones((3, 4)), np.ones((4, 3)))


@case("error", "ndim")
def c_metric_correlation_ndim_zero():
    return correlation(_A, _B, ndim=0)


@case("error", "softmax", "finite")
def c_metric_selected_mass_nan():
    return selected_mass(np.full((3, 4), NAN), np.zeros(3, dtype=int))


@case("error", "select")
def c_metric_selected_mass_index_range():
    return selected_mass(np.full((3, 4), 0.25), np.array([0, 1, 9]))


@case("error", "softmax", "finite")
def c_metric_read_selection_nan():
    return read_selection(np.full((3, 4), NAN))


@case("error", "threshold")
def c_metric_read_selection_threshold_nan():
    return read_selection(np.full((3, 4), 0.25), threshold=NAN)


@case("result")
def c_metric_softmax_of_1e300():
    p = _prob()
    big, ref = softmax_of(_A * 1e300, p.X, p.Z), softmax_of(_A * 1e12, p.X, p.Z)
    return bool(np.all(np.isfinite(big)) and np.array_equal(big, ref) and np.all((ref == 0) | (ref == 1)))


@case("error", "w", "finite")
def c_metric_softmax_of_nan():
    p = _prob()
    return softmax_of(_A * NAN, p.X, p.Z)


@case("error", "w", "finite")
def c_metric_margins_nan():
    p = _prob()
    return token_margins(_A * NAN, p.X, p.Z, np.zeros(3, dtype=int))


@case("error", "float64")
def c_metric_margins_overflow():
    p = _prob()
    return token_margins(np.full((5, 5), 1e308), p.X * 10, p.Z * 10, np.zeros(3, dtype=int))


@case("error", "select")
def c_metric_margins_select_range():
    p = _prob()
    return token_margins(_A, p.X, p.Z, np.array([0, 1, 7]))


@case("error", "softmax", "finite")
def c_metric_convergence_type_softmax_nan():
    return convergence_type(_prob(), softmax=np.full((3, 4), NAN))


@case("error", "saturation")
def c_metric_convergence_type_saturation_nan():
    return convergence_type(_prob(), softmax=np.full((3, 4), 0.25), saturation=NAN)


@case("error", "norm")
def c_metric_convergence_type_norm_unknown():
    return convergence_type(_prob(), softmax=np.full((3, 4), 0.25), norm="l1")


@case("error", "tol")
def c_metric_convergence_type_tol_negative():
    return convergence_type(_prob(), softmax=np.full((3, 4), 0.25), tol=-1.0)


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_hostile_case(c):
    outcome, detail = classify(c)
    want = {"error": ("clear error",), "result": ("correct",), "either": ("correct", "clear error")}[c.expect]
    assert outcome in want, f"{c.name}: {outcome} ({detail})"


# ------------------------------------------------------------------ focused checks


def test_shift_invariance_check_can_fail():
    """The invariance used for the exponential loss does not hold for the logistic loss: the same check fails."""
    assert not _same_trajectory(-10.0, loss="logistic")
    assert _same_trajectory(-10.0)


def test_nonfinite_error_names_run_seed_and_first_step():
    p = _prob()
    with pytest.raises(NonFiniteError) as info:
        train([p] * 3, head=_NaNHead(p.v, 2, 7), engine="closed", steps=30, seed=[11, 12, 13], record_every=10)
    e = info.value
    assert (e.run, e.step) == (2, 7)
    assert "run 2 (seed 13)" in str(e) and "step 7" in str(e)
    # the same run with NaN only from step 31 on (never reached) trains normally
    res = train([p] * 3, head=_NaNHead(p.v, 2, 31), engine="closed", steps=30, seed=[11, 12, 13])
    assert _finite_result(res)


def test_exponential_gradient_scaled_is_exact_where_representable():
    """Margins near -705 (log-scale active, e^705 ~ 1e306 still representable): the true gradient from
    the scaled form equals the plain formula l'(u) = -e^{-u} to rounding; rows whose margins stay above
    -EXP_SHIFT_AT (-600) are bitwise unchanged."""
    from attnsvm.training.losses import EXP_SHIFT_AT, apply_log_scale, margin_loss_grad, margin_loss_grad_scaled

    assert EXP_SHIFT_AT == 600.0
    u = torch.tensor([[-705.0, -703.5, -1.0, 3.0], [-2.0, 0.5, 10.0, -599.0]], dtype=D)
    lp, ls = margin_loss_grad_scaled(u, "exponential")
    assert float(ls[0]) == 705.0 and float(ls[1]) == 0.0
    assert torch.equal(lp[1], margin_loss_grad(u[1], "exponential"))  # unshifted row: bitwise
    ref = margin_loss_grad(u, "exponential")
    assert torch.allclose(apply_log_scale(lp, ls), ref, rtol=1e-12, atol=0)
    # beyond the range: the true derivative is -inf, the scaled one finite and exact (largest entry -1)
    lp2, ls2 = margin_loss_grad_scaled(torch.tensor([[-1e5, -1e5 + 1.0, 0.0]], dtype=D), "exponential")
    assert torch.allclose(lp2, torch.tensor([[-1.0, -math.exp(-1.0), 0.0]], dtype=D), rtol=1e-12, atol=0)
    assert float(ls2[0]) == 1e5
    assert torch.isinf(margin_loss_grad(torch.tensor([-1e5], dtype=D), "exponential")).all()


def test_log_scale_path_is_exact_where_representable(monkeypatch):
    """With the shift threshold lowered to 5 (so the log-scale path runs at margins near -60, where e^{-u}
    and every product are representable), the closed-form gradient multiplied back equals autograd of the
    plain e^{-u}, and NGD / GD trajectories equal those of the unshifted computation (1e-12: rounding)."""
    import attnsvm.training.losses as losses
    from attnsvm.training.models import linear_head_loss

    _, p = _shifted(-60.0)
    t = lambda a: torch.as_tensor(np.array(a), dtype=D).unsqueeze(0)  # noqa: E731
    W = t(np.eye(p.d) * 0.2).requires_grad_(True)
    L = linear_head_loss(t(p.X), t(p.Y), t(p.v), param="W", W=W, queries=t(p.Z), loss="exponential")
    L.sum().backward()
    runs = {}
    for at in (600.0, 5.0):
        monkeypatch.setattr(losses, "EXP_SHIFT_AT", at)
        for bitwise in (True, False):
            cf = closed_form_step(t(p.X), t(p.Y), t(p.v), param="W", W=W.detach(), queries=t(p.Z), loss="exponential",
                                  bitwise=bitwise)
            assert float(W.grad.abs().max()) > 1e20
            assert torch.allclose(cf["G"], W.grad, rtol=1e-9, atol=0)
        runs[at] = [train(p, loss="exponential", optimizer=o, lr=lr, steps=15, param=prm)
                    for o, lr, prm in (("ngd", 0.1, "W"), ("gd", 1e-30, "W"), ("ngd", 0.1, "KQ"), ("adam", 0.01, "W"))]
    for plain, shifted in zip(runs[600.0], runs[5.0]):
        assert np.max(np.abs(plain.W - shifted.W)) <= 1e-12 * np.max(np.abs(plain.W))
        assert np.allclose(plain.loss, shifted.loss, rtol=1e-12, atol=0)
        assert np.allclose(plain.grad_norm, shifted.grad_norm, rtol=1e-12, atol=0)


def test_normal_runs_unchanged_by_log_scale():
    """The exponential loss at ordinary margins: closed_form_step(scaled=True) has log_scale 0 and equals
    the default output bitwise (the scaled path changes nothing where e^{-u} is representable)."""
    p = _prob(n=4, T=5, d=6)
    t = lambda a: torch.as_tensor(np.array(a), dtype=D).unsqueeze(0)  # noqa: E731
    kw = dict(param="W", W=t(np.eye(6)), queries=t(p.Z), loss="exponential", want_v=True)
    for bitwise in (True, False):
        a = closed_form_step(t(p.X), t(p.Y), t(p.v), bitwise=bitwise, **kw)
        b = closed_form_step(t(p.X), t(p.Y), t(p.v), bitwise=bitwise, scaled=True, **kw)
        assert float(b["log_scale"][0]) == 0.0
        for k in ("G", "gv", "loss", "s"):
            assert torch.equal(a[k], b[k])


def test_correlation_power_of_two_scaling_is_bitwise():
    for k in (-1000, -600, -3, 5, 900):
        assert correlation(_A * 2.0**k, _B) == correlation(_A, _B)
        assert one_minus_correlation(_A, _B * 2.0**k) == one_minus_correlation(_A, _B)


# ------------------------------------------------------------------ property tests

_hostile_float = st.one_of(
    st.sampled_from([NAN, INF, -INF, 0.0, -0.0, -1.0, 1e-300, 5e-324, 1e300, 1.7e308, 0.1, 1.0]),
    st.floats(allow_nan=True, allow_infinity=True),
)


def _train_draw(lr, eps, ridge, hostile, init_scale, data_scale, shift, loss, optimizer, param, bitwise) -> str:
    """One draw of the property below: "error" (an AttnSVMError) or "result" (asserted free of NaN)."""
    kw = dict(lr=lr, eps=eps, ridge=ridge if param == "KQ" else None)
    if hostile is not None:
        kw[hostile[0]] = hostile[1]
    p0, p1 = _shifted(shift, n=3, T=4, d=4, seed=1) if shift else (_prob(n=3, T=4, d=4), None)
    p = p1 or p0
    with np.errstate(all="ignore"):
        init = {"K": np.eye(4) * init_scale, "Q": np.eye(4)} if param == "KQ" else np.eye(4) * init_scale
        X = p.X * data_scale
    try:
        prob = TokenProblem(X, p.Z, Y=p.Y, v=p.v)
        res = train(prob, param=param, init=init, loss=loss, optimizer=optimizer, steps=6, record_every=3,
                    bitwise=bitwise, **kw)
    except AttnSVMError:
        return "error"
    assert _finite_result(res)
    return "result"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lr=st.sampled_from([1e-3, 0.1, 1.0, 1e10, 1e300]),
    eps=st.sampled_from([EPS, 1e-300, 1.0]),
    ridge=st.sampled_from([None, 0.0, 1e-3, 1e300]),
    hostile=st.one_of(st.none(), st.tuples(st.sampled_from(["lr", "eps", "ridge"]), _hostile_float)),
    init_scale=st.sampled_from([NAN, INF, 0.0, 1e-300, 1.0, 1e150, 1e300]),
    data_scale=st.sampled_from([1e-300, 1e-5, 1.0, 1e5, 1e150, 1e300]),
    shift=st.sampled_from([0.0, -50.0, -800.0, -1e5, 1e5]),
    loss=st.sampled_from(["logistic", "exponential", "correlation", "squared"]),
    optimizer=st.sampled_from(["ngd", "gd", "adam"]),
    param=st.sampled_from(["W", "KQ"]),
    bitwise=st.booleans(),
)
def test_property_train_never_returns_nan(**draw):
    """Whatever the parameters and data scale: an AttnSVMError, or a result without NaN (W, softmax finite)."""
    _train_draw(**draw)


@pytest.mark.parametrize("draw", [
    dict(lr=1e300, loss="logistic", optimizer="gd", param="W", data_scale=1.0, shift=0.0),
    dict(lr=1e10, loss="exponential", optimizer="ngd", param="KQ", data_scale=1e5, shift=-1e5),
    dict(lr=0.1, loss="squared", optimizer="adam", param="W", data_scale=1e-300, shift=-800.0),
    dict(lr=1.0, loss="correlation", optimizer="ngd", param="W", data_scale=1e150, shift=0.0),
])
def test_property_draws_that_must_train(draw):
    """Draws of the property at extreme but representable settings train to a result (the property is not
    passed vacuously by errors)."""
    base = dict(eps=EPS, ridge=None, hostile=None, init_scale=1.0, bitwise=False)
    assert _train_draw(**dict(base, **draw)) == "result"


_arr = st.lists(_hostile_float, min_size=12, max_size=12).map(lambda xs: np.array(xs).reshape(3, 4))
_scale = st.sampled_from([1.0, 1e-300, 1e-200, 1e200, 1e300, 2.0**1000])


@settings(max_examples=80, deadline=None)
@given(a=_arr, b=_arr, sa=_scale, sb=_scale)
def test_property_metrics_never_return_nan(a, b, sa, sb):
    """correlation / one_minus_correlation / read_selection / selected_mass: an error or values in range."""
    with np.errstate(all="ignore"):
        a, b = a * sa, b * sb
    for fn, lo, hi in ((correlation, -1.0, 1.0), (one_minus_correlation, 0.0, 2.0)):
        try:
            out = fn(a, b)
        except AttnSVMError:
            continue
        assert np.all(np.isfinite(out)) and np.all((out >= lo) & (out <= hi))
    try:
        sel = read_selection(a)
    except AttnSVMError:
        return
    assert sel.shape == (3,) and np.all((sel >= 0) & (sel < 4))
    with np.errstate(all="ignore"):
        S = np.abs(a) / np.abs(a).sum(-1, keepdims=True)
    try:
        m = selected_mass(S, sel)
    except AttnSVMError:
        return
    assert np.isfinite(m)


@settings(max_examples=50, deadline=None)
@given(scale=st.sampled_from([NAN, INF, 0.0, 1e-300, 1.0, 1e100, 1e200, 1e300, 1.7e308]), seed=st.integers(0, 50))
def test_property_softmax_and_margins(scale, seed):
    """softmax_of: an error or a stochastic matrix; margins: an error or finite off the selected token."""
    p = _prob(seed=seed)
    with np.errstate(all="ignore"):
        W = np.random.default_rng(seed).standard_normal((5, 5)) * scale
    try:
        S = softmax_of(W, p.X, p.Z)
    except AttnSVMError:
        S = None
    if S is not None:
        assert np.all(np.isfinite(S)) and np.all(S >= 0) and np.allclose(S.sum(-1), 1.0, atol=1e-12)
    try:
        M = token_margins(W, p.X, p.Z, np.zeros(3, dtype=int))
    except AttnSVMError:
        return
    assert np.all(np.isfinite(M[:, 1:])) and np.all(M[:, 0] == np.inf)


# ------------------------------------------------------------------ survey


def survey(out=sys.stdout):
    """Print each case's outcome and the counts per outcome."""
    counts = {}
    for c in CASES:
        outcome, detail = classify(c)
        counts[outcome] = counts.get(outcome, 0) + 1
        print(f"{c.name:48s} {c.expect:7s} {outcome:13s} {detail}", file=out)
    print(f"\n{len(CASES)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=out)
    return counts


if __name__ == "__main__":
    torch.set_num_threads(1)
    survey()


def test_recorder_backstop_reports_first_recorded_step():
    """The end-of-training backstop (behind the per-step check) names the run and the first checkpoint
    whose recorded parameters are non-finite."""
    from attnsvm.training.recorder import Recorder

    params = {"W": torch.zeros(3, 2, 2, dtype=D)}
    rec = Recorder(4, np.array([0, 2, 4]), 3, 1, 2, params, False, seeds=[5, 6, 7])
    for c in range(3):
        W = torch.zeros(3, 2, 2, dtype=D)
        if c >= 1:
            W[1, 0, 0] = INF
        rec.put(torch.zeros(3, dtype=D), torch.full((3, 1, 2), 0.5, dtype=D), torch.ones(3, dtype=D), {"W": W})
    with pytest.raises(NonFiniteError, match=r"run 1 \(seed 6\) became non-finite by recorded step 2") as info:
        rec.result()
    assert (info.value.run, info.value.step) == (1, 2)
