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

Every call runs the one training loop (:func:`attnsvm.training.loop.run`) with a kernel chosen by
:func:`attnsvm.training.engine.select_kernel`: a single small run with the linear head, GD / NGD and
param W or KQ in the lean numpy kernels (:mod:`attnsvm.training.lean`, same iterates up to rounding);
GD / NGD with closed-form gradients in the fused torch kernels (:mod:`attnsvm.training.fast`); anything
else in the generic kernel with any optimizer. The gradient is the one softmax kernel of
:mod:`attnsvm.training.kernel`.

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

from typing import Sequence

import numpy as np
import torch

from attnsvm.errors import ValidationError
from attnsvm.training.checks import (EPS, check_common, check_eps, check_int, check_ridge, checkpoint_count,
                                     checkpoint_steps, problem_shape, require_training_memory, run_seeds)
from attnsvm.training.engine import TrainData, to_result, prepare_data, train_loop
from attnsvm.training.initial import init_params
from attnsvm.training.loop import TrainConfig
from attnsvm.training.losses import check_loss
from attnsvm.training.models import MatrixHead, finite_tensor
from attnsvm.training.ops import DTYPE, causal_mask
from attnsvm.training.regpath import regularization_path
from attnsvm.training.results import PathResult, TrainResult
from attnsvm.training.threads import check_threads, torch_threads

#: the public names (``regularization_path`` and the results are re-exported for older imports)
__all__ = ["train", "train_sequence", "regularization_path", "TrainResult", "PathResult"]


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
    threads: int | None = None,
    max_memory=None,
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
        with (slower: elementwise products instead of BLAS). False (default): BLAS contractions
        (and, for W with GD / NGD, the token-space kernel); batched and one-by-one runs then agree
        to rounding, not bitwise.
    eps : NGD denominator epsilon (finite, > 0); betas : Adam's (beta1, beta2) in [0, 1);
        adam_eps : Adam's denominator epsilon (finite, > 0)
    threads : None (torch's current setting) or the number of torch threads to use during this call
        only (the previous count is restored on return)
    max_memory : bytes or a size string ("2G"): refuse (ResourceLimitError) before anything is allocated
        when the runs' checkpoint buffers, state and data need more (estimate:
        ``attnsvm.training.checks.training_bytes``); default ``$ATTNSVM_MAX_MEMORY``, else 80 % of
        available memory

    Returns
    -------
    TrainResult

    Raises
    ------
    ValidationError
        a bad argument (named, with what was expected): e.g. ``lr`` NaN/inf/<= 0, a non-finite
        ``init``, ``ridge`` NaN or < 0, ``steps`` not an integer >= 0, checkpoints outside [0, steps].
    ResourceLimitError
        (a MemoryError) the run needs more memory than the limit: e.g. ``runs=10**7``, ``steps=10**8`` with
        ``record_every=1``, ``steps=2**63`` (its per-step flags alone) or a d = 3000 KQ run recorded every 10 steps.
    NonFiniteError
        a run's state became non-finite (names the run, its seed and the first such step).
    """
    check_loss(loss)
    lr, steps, adam_eps, betas, optimizer = check_common(lr, steps, optimizer, betas, adam_eps)
    eps = check_eps(eps, optimizer)
    check_threads(threads)
    _refuse_too_big(problems, runs, param, m, steps, record_every, checkpoints, optimizer, train_v, max_memory)
    batch, data = prepare_data(problems, runs, param, head, train_v, loss)
    R, n, T, d = data.X.shape
    seeds = run_seeds(seed, R)
    m = d if m is None else check_int(m, "m", 1)
    ridge = check_ridge(ridge, param)
    cps = checkpoint_steps(steps, record_every, checkpoints)
    params = _initial_params(param, init, seeds, d, m, data, train_v)
    cfg = TrainConfig(param=param, steps=steps, lr=lr, optimizer=optimizer, cps=cps, loss=loss, eps=eps, betas=betas,
                      adam_eps=adam_eps, ridge=ridge, seeds=seeds, engine=engine, bitwise=bitwise, train_v=train_v)
    with torch_threads(threads):
        rec = train_loop(data, params, head, cfg)
    return to_result(rec, cps, seeds, param, optimizer, lr, batch.problems, bitwise=bitwise)


def _refuse_too_big(problems, runs, param: str, m, steps: int, record_every: int, checkpoints, optimizer: str,
                    train_v: bool, max_memory) -> None:
    """Refuse (ResourceLimitError) a :func:`train` call whose runs need more memory than ``max_memory``, before
    the runs are stacked (``runs=10**7``); calls whose shape is not known yet are checked later."""
    shape = problem_shape(problems, runs)
    if shape is not None and param in ("W", "KQ", "p"):
        R, n, T, d = shape
        m = d if m is None else check_int(m, "m", 1)
        require_training_memory(R, n, T, d, param, m, checkpoint_count(steps, record_every, checkpoints), steps,
                                 optimizer, train_v, max_memory)


def _initial_params(param: str, init, seeds, d: int, m: int, data: TrainData, train_v: bool) -> dict:
    """The runs' starting parameters (:func:`~attnsvm.training.initial.init_params`), with the head v (R, d)
    copied from the problems when ``train_v``."""
    params = init_params(param, init, seeds, d, m)
    if train_v:
        params["v"] = data.v.clone()
    return params


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
    threads: int | None = None,
    max_memory=None,
) -> TrainResult:
    """Sequence / causal attention: every token is a query with its own label.

    Output k of sequence i is ``h(X_i^T softmax(X_i W x_{ik}))``; with ``causal`` the
    query k attends to tokens ``t <= k`` only. The loss is the mean over all (i, k)
    (cross-entropy: over the positions that have a target). The arguments not listed
    below are those of :func:`train`.

    Parameters
    ----------
    X : (n, T, d) or (R, n, T, d) tokens (R instances, one run each)
    Y : (n, T) or (R, n, T): labels in {-1, +1} (margin losses) or, with ``H``, int64
        next-token targets in [0, V) (-1 = ignored position) for the cross-entropy
    v : (d,) or (R, d) linear head (margin losses)
    H : (d, V) output embedding for next-token prediction (logits ``H^T o``)
    loss : default "logistic", or "cross_entropy" when H is given
    threads : None or the number of torch threads during this call only (restored on return)
    max_memory : as :func:`train` (the (n T, T, d) tokens each query sees are counted per run)

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
    lr, steps, _, _, optimizer = check_common(lr, steps, optimizer)
    eps = check_eps(eps, optimizer)
    ridge = check_ridge(ridge, param)
    check_threads(threads)
    Xt = _sequence_tokens(X, runs)
    R, n, T, d = Xt.shape
    m_ = d if m is None else check_int(m, "m", 1)
    require_training_memory(R, n * T, T, d, param, m_, checkpoint_count(steps, record_every, checkpoints), steps,
                             optimizer, train_v, max_memory, what="sequence training")
    Yt, head = _sequence_labels(Y, H, head, loss, (R, n, T, d))
    vt = _sequence_head_v(v, head, R, d)
    data = _sequence_data(Xt, Yt, vt, causal)
    seeds = run_seeds(seed, R)
    m = d if m is None else check_int(m, "m", 1)
    cps = checkpoint_steps(steps, record_every, checkpoints)
    params = init_params(param, init, seeds, d, m)
    if train_v:
        if data.v is None:
            raise ValidationError("train_v=True needs a head v")
        params["v"] = data.v.clone()
    cfg = TrainConfig(param=param, steps=steps, lr=lr, optimizer=optimizer, cps=cps, loss=loss, eps=eps, ridge=ridge,
                      seeds=seeds, engine=engine, bitwise=bitwise, train_v=train_v)
    with torch_threads(threads):
        rec = train_loop(data, params, head, cfg, allow_lean=False)
    return to_result(rec, cps, seeds, param, optimizer, lr, (), seq_shape=(n, T, T), bitwise=bitwise)


def _sequence_data(Xt, Yt, vt, causal) -> TrainData:
    """One sample per (sequence i, query position k): N = n T samples, each seeing the T tokens of X_i.

    Xt (R, n, T, d), Yt (R, n, T), vt (R, d) or None -> X (R, N, T, d), Y (R, N), queries ``x_ik`` (R, N, d)
    and, with ``causal``, the mask (1, N, T) of the keys ``t <= k``.
    """
    R, n, T, d = Xt.shape
    N = n * T
    Xf = Xt.unsqueeze(2).expand(R, n, T, T, d).reshape(R, N, T, d)  # sample (i, k) sees all tokens of X_i
    queries = Xt.reshape(R, N, d)  # query of sample (i, k) is x_ik
    mask = causal_mask(T, causal).unsqueeze(0).expand(n, T, T).reshape(1, N, T)
    return TrainData(X=Xf, Y=Yt.reshape(R, N), v=vt, queries=queries, mask=mask if causal else None)


def _sequence_tokens(X, runs):
    """X (n, T, d) or (R, n, T, d) as a validated (R, n, T, d) float64 tensor (``runs`` copies of one instance)."""
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
        Xt = Xt.expand(check_int(runs, "runs", 1), -1, -1, -1)
    return Xt


def _sequence_labels(Y, H, head, loss, shape):
    """Y as (R, n, T) labels (margin losses) or int64 targets (cross-entropy, with the head ``MatrixHead(H)``);
    returns ``(Yt, head)``. ``shape`` = (R, n, T, d) of the tokens."""
    R, n, T, d = shape
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
    return Yt, head


def _sequence_head_v(v, head, R, d):
    """The linear head v as (R, d) (None with a head callable or H); validates it."""
    vt = None
    if v is not None:
        vt = finite_tensor(v, "v", (1, 2), "(d,) or (R, d)").detach()
        vt = vt.expand(R, -1).clone() if vt.ndim == 1 else vt
        if tuple(vt.shape) != (R, d):
            raise ValidationError(f"v must have shape (d,) = ({d},) or (R, d)")
    elif head is None:
        raise ValidationError("give a head v, H or a head callable")
    return vt
