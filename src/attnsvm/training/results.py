"""Results of training: :class:`TrainResult` (trajectories) and :class:`PathResult` (regularization paths)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnsvm.errors import ValidationError


def _range(x) -> str:
    """``min..max`` of an array's finite entries (``-`` when there is none)."""
    a = np.asarray(x, dtype=np.float64).ravel()
    a = a[np.isfinite(a)]
    if a.size == 0:
        return "-"
    lo, hi = float(a.min()), float(a.max())
    return f"{lo:.4g}" if lo == hi else f"{lo:.4g}..{hi:.4g}"


def _shape(x) -> str:
    return "None" if x is None else "x".join(str(k) for k in np.shape(x))


@dataclass
class TrainResult:
    """Trajectories of R runs recorded at C checkpoints (numpy float64).

    Attributes
    ----------
    steps : (C,) int -- number of updates done at each checkpoint (0 = init)
    loss : (R, C) -- mean training loss (``+inf`` where it exceeds float64: exponential loss)
    softmax : (R, C, n, T) -- attention maps (sequence training: (R, C, n, T, T), [query, token])
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

    def __repr__(self) -> str:
        R, C = np.shape(self.loss)
        last = int(self.steps[-1]) if len(self.steps) else 0
        arrays = ", ".join(f"{k}={_shape(getattr(self, k))}" for k in ("W", "K", "Q", "p", "v", "softmax")
                           if getattr(self, k) is not None)
        sat = int(np.count_nonzero(self.saturated))
        return (f"TrainResult(runs={R}, param={self.param!r}, optimizer={self.optimizer!r}, lr={self.lr:g}, "
                f"steps 0..{last} recorded at {C} checkpoints, {arrays}; final norm {_range(self.norm[:, -1])}, "
                f"final loss {_range(self.loss[:, -1])}, saturated {sat}/{R})")

    def at(self, step: int) -> int:
        """Checkpoint index of a step (raises if the step was not recorded)."""
        hit = np.flatnonzero(self.steps == step)
        if hit.size == 0:
            raise ValidationError(f"step {step} was not recorded; recorded steps: {self.steps[:5]}...{self.steps[-3:]}")
        return int(hit[0])


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

    def __repr__(self) -> str:
        R, P = np.shape(self.loss)
        arrays = ", ".join(f"{k}={_shape(getattr(self, k))}" for k in ("W", "K", "Q") if getattr(self, k) is not None)
        return (f"PathResult(runs={R}, radii {P} from {_range(self.radii[:1])} to {_range(self.radii[-1:])}, {arrays}; "
                f"final norm {_range(self.norm[:, -1])}, final loss {_range(self.loss[:, -1])})")
