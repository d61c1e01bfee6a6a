"""Argument checks at the public boundary of training (ValidationError naming the argument).

Numbers (finite, in range), integers, seeds, checkpoints, optimizer names and the choice of
gradient engine. Nothing here computes a gradient.
"""

from __future__ import annotations

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.training.losses import MARGIN_LOSSES
from attnsvm.training.models import has_token_form

EPS = float(np.finfo(np.float64).eps)  # 2.220446049250313e-16
OPTIMIZERS = ("ngd", "gd", "adam")


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


def check_lr(lr) -> float:
    return _check_positive(lr, "lr", " (the step size)")


def check_eps(eps, optimizer="ngd") -> float:
    """NGD's epsilon: finite > 0; the other optimizers do not use it (finite >= 0 accepted)."""
    if optimizer == "ngd":
        return _check_positive(eps, "eps", " (it guards normalized GD against a zero gradient)")
    f = _real(eps, "eps", "a finite number >= 0")
    if not (np.isfinite(f) and f >= 0):
        raise ValidationError(f"eps must be a finite number >= 0, got {eps!r}")
    return f


def check_ridge(ridge, param) -> float:
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


def check_int(x, name, minimum):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < minimum:
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def _integral(x, name, minimum) -> int:
    """An integer >= minimum; integral floats (3.0) are accepted, 2.5 / NaN / inf / bool are not."""
    if isinstance(x, (bool, np.bool_)):
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {x!r}")
    if isinstance(x, (int, np.integer)):
        return check_int(x, name, minimum)
    f = _real(x, name, f"an integer >= {minimum}")
    if not (np.isfinite(f) and f == np.floor(f) and f >= minimum):
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(f)


def run_seeds(seed, R):
    if isinstance(seed, (list, tuple, np.ndarray)):
        seeds = [_integral(s, f"seed[{i}]", 0) for i, s in enumerate(np.asarray(seed, dtype=object).ravel())]
        if np.ndim(seed) != 1 or len(seeds) != R:
            raise ValidationError(f"seed list must give one seed per run ({R}), got shape {np.shape(seed)}")
        return seeds
    return [check_int(seed, "seed", 0) + r for r in range(R)]


def checkpoint_steps(steps, record_every, checkpoints):
    if checkpoints is not None:
        if isinstance(checkpoints, (str, bytes)) or not hasattr(checkpoints, "__iter__"):
            raise ValidationError(f"checkpoints must be a list of integer steps in [0, steps={steps}], "
                                  f"got {checkpoints!r}")
        cps = sorted({_integral(c, f"checkpoints[{i}]", 0) for i, c in enumerate(checkpoints)})
        if not cps or cps[-1] > steps:
            raise ValidationError(f"checkpoints must be a non-empty list of steps in [0, steps={steps}], "
                                  f"got {list(checkpoints)!r}")
        return np.array(cps, dtype=np.int64)
    every = check_int(record_every, "record_every", 1)
    cps = np.arange(0, steps + 1, every, dtype=np.int64)
    return cps if cps[-1] == steps else np.append(cps, np.int64(steps))


def checkpoint_count(steps: int, record_every, checkpoints) -> int:
    """How many checkpoints :func:`checkpoint_steps` returns, computed without building them (at most; the
    arguments are validated there)."""
    if checkpoints is not None:
        return len(checkpoints) if hasattr(checkpoints, "__len__") else 1
    every = check_int(record_every, "record_every", 1)
    return steps // every + 1 + (1 if steps % every else 0)


def problem_shape(problems, runs) -> tuple | None:
    """``(R, n, T, d)`` of :func:`~attnsvm.training.train`'s problems without stacking them (None when
    they are not problems: the engine then says why)."""
    from attnsvm.problem import ProblemBatch, TokenProblem

    if isinstance(problems, ProblemBatch):
        return tuple(problems.X.shape)
    if isinstance(problems, TokenProblem):
        return (1 if runs is None else check_int(runs, "runs", 1), *problems.shape)
    if isinstance(problems, (list, tuple)) and problems and isinstance(problems[0], TokenProblem):
        return (len(problems), *problems[0].shape)
    return None


#: live d x d-sized arrays per run (parameters, gradients, normalized steps, temporaries; Adam's moments) and
#: n x T x d-sized ones (the stacked data and the kernel's products), budgeted above the peak resident size
#: measured at d = 20..3000, R = 1..2000 (W and KQ, NGD, GD and Adam; ``python benchmarks/memory_estimates.py``
#: prints measured peak and estimate per case); see :func:`training_bytes`
_STATE_ARRAYS = {"ngd": 6, "gd": 6, "adam": 8}
_DATA_ARRAYS = 5
_OVERHEAD = 32 * 2**20


def training_bytes(R: int, N: int, T: int, d: int, param: str, m: int, C: int, steps: int, optimizer: str,
                   train_v: bool = False) -> float:
    """Peak bytes of training R runs of ``steps`` steps on N samples of T tokens of dimension d, recorded
    at C checkpoints: the checkpoint buffers (loss, gradient norm, the (N, T) attention and the parameters,
    plus ``W = K Q^T`` for KQ; twice when R > 1, for the run-major copy of the result), the live state
    (parameters, gradients and the optimizer's arrays; KQ's d x d products), the data (N, T, d) per run, the
    per-step flags (steps + 1 bytes) and a fixed overhead."""
    P = {"W": d * d, "KQ": 2 * d * m, "p": d}[param] + (d if train_v else 0)
    square = d * d if param == "KQ" else 0
    rec = float(C) * R * 8.0 * (2 + N * T + P + square) * (2 if R > 1 else 1)
    live = float(R) * 8.0 * (_STATE_ARRAYS.get(optimizer, 8) * P + 2 * square + _DATA_ARRAYS * N * T * d)
    return rec + live + 2.0 * (steps + 1) + _OVERHEAD


def require_training_memory(R, N, T, d, param, m, C, steps, optimizer, train_v, max_memory, what="training") -> None:
    """Refuse (ResourceLimitError) before anything is allocated when :func:`training_bytes` exceeds the memory
    limit (``max_memory``, else ``$ATTNSVM_MAX_MEMORY``, else 80 % of available memory; needs below 64 MiB
    are not checked without an explicit limit)."""
    import os

    from attnsvm.memory import ENV_VAR, require_memory

    nbytes = training_bytes(R, N, T, d, param, m, C, steps, optimizer, train_v)
    if max_memory is None and not os.environ.get(ENV_VAR) and nbytes < 2**26:
        return
    require_memory(nbytes, f"{what} of {R} run(s) x {steps} steps recorded at {C} checkpoints ((samples, T, d) = "
                   f"({N}, {T}, {d}), param {param})", max_memory,
                   hint="fewer runs, a larger record_every or a few explicit checkpoints, fewer steps or a smaller d")


def check_common(lr, steps, optimizer, betas=(0.9, 0.999), adam_eps=1e-8):
    """Boundary checks shared by train() and train_sequence()."""
    if optimizer not in OPTIMIZERS:
        raise ValidationError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    adam_eps = _check_positive(adam_eps, "adam_eps", " (Adam's denominator epsilon)")
    return check_lr(lr), check_int(steps, "steps", 0), adam_eps, _check_betas(betas), optimizer


def resolve_engine(engine, head, loss, train_v):
    """'auto' -> 'closed' (margin loss and the linear head or a head with a token form) or 'autograd'."""
    if engine not in ("auto", "closed", "autograd"):
        raise ValidationError(f"engine must be 'auto', 'closed' or 'autograd', got {engine!r}")
    closed_ok = loss in MARGIN_LOSSES and (head is None or not train_v)
    if engine == "auto":
        return "closed" if closed_ok and has_token_form(head) else "autograd"
    if engine == "closed" and not closed_ok:
        raise ValidationError("engine='closed' needs a margin loss, and the linear head (head=None) when train_v=True")
    return engine
