"""The training loop: one loop for every model of the package, its configuration and its kernel protocol.

Every trainer here (:func:`attnsvm.training.train.train`, ``train_sequence``, the regularization paths,
the prompt model's notebook replay, the causal language model's GD) runs :func:`run` below. What differs
between them lives in a *kernel*: an object holding the state being trained that knows how to take its
gradient (and judge it), record it and update the state. The loop itself only orders those calls::

    for k in range(steps + 1):
        kernel.gradient(k)         # the gradient at the current state and its health check
        if kernel.want[k]:
            kernel.record()        # write checkpoint values
        if k == steps:
            break
        kernel.update(k)           # one optimizer step
    return kernel.result()

The health check of step k (saturation flags, :class:`~attnsvm.errors.NonFiniteError` naming the run
and step; :meth:`attnsvm.training.recorder.Recorder.check`) belongs to ``gradient(k)`` because it
judges the norms the gradient step computed, and the update may use its corrected norms.

Kernels (a kernel implements the gradient and the optimizer step of its state):

* :class:`attnsvm.training.engine.GradientKernel` -- any closed-form or autograd gradient function
  (:func:`attnsvm.training.engine.make_grad_fn`) with a pluggable optimizer
  (:class:`attnsvm.training.optim.Optimizer`: GD, normalized GD, Adam); any parameterization;
* :mod:`attnsvm.training.fast` -- closed-form GD / NGD fused with their state: ``TokenSpaceKernel``
  (W in token space), ``DirectWKernel``, ``DirectKQKernel`` (torch, R runs batched);
* :mod:`attnsvm.training.lean` -- ``LeanTokenKernel``, ``LeanKQKernel``: one small run in numpy;
* ``PathKernel`` (:mod:`attnsvm.training.regpath`), ``LMKernel`` (:mod:`attnsvm.training.language_model`),
  ``NotebookKernel`` (:mod:`attnsvm.training.prompt`).

:class:`TrainConfig` carries the settings of one training call (validated by the public fronts); the
kernels read what they need from it. :func:`attnsvm.training.engine.train_loop` picks the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TrainConfig", "run", "want_mask"]


@dataclass(frozen=True)
class TrainConfig:
    """The settings of one training call (already validated by the public front that builds it).

    ``cps`` (C,) int64: the recorded steps (sorted, in [0, steps]); ``seeds``: one per run (named in
    errors); ``ridge``: coefficient of ``ridge (||K||^2 + ||Q||^2)`` (0 = none); ``eps``: NGD's
    denominator epsilon; ``betas`` / ``adam_eps``: Adam's; ``engine``: "auto" | "closed" | "autograd";
    ``bitwise``: fixed-order contractions (run results independent of the batch).
    """

    param: str
    steps: int
    lr: float
    optimizer: str
    cps: np.ndarray
    loss: str = "logistic"
    eps: float = float(np.finfo(np.float64).eps)
    betas: tuple = (0.9, 0.999)
    adam_eps: float = 1e-8
    ridge: float = 0.0
    seeds: tuple | list | None = None
    engine: str = "auto"
    bitwise: bool = False
    train_v: bool = False

    @property
    def ngd(self) -> bool:
        return self.optimizer == "ngd"


def want_mask(steps: int, cps) -> np.ndarray:
    """(steps + 1,) bool: True at the recorded steps ``cps``."""
    want = np.zeros(steps + 1, dtype=bool)
    want[cps] = True
    return want


def run(kernel, steps: int):
    """Train ``kernel``'s state for ``steps`` updates; returns ``kernel.result()``.

    ``kernel`` has ``want`` ((steps + 1,) bool: record at step k), ``gradient(k)``, ``record()``,
    ``update(k)`` and ``result()`` (see the module docstring). Step k's gradient is taken at the state
    after k updates; the last one (k = steps) is checked and recorded but not applied.
    """
    gradient, record, update, want = kernel.gradient, kernel.record, kernel.update, kernel.want
    for k in range(steps + 1):
        gradient(k)
        if want[k]:
            record()
        if k == steps:
            break
        update(k)
    return kernel.result()
