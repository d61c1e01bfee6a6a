"""A real probe with one head's SVM made infeasible, as the solver reports one (NaN cosines, an infinite nuclear
norm, no support): the probe page's and terminal's words for a head without an SVM are tested on it."""

from __future__ import annotations

import numpy as np
import pytest


def probe_with_infeasible_head(sentences, infeasible: tuple[int, int], **settings):
    """:func:`attnsvm.real.probe.probe_heads` of ``sentences`` with ``settings``, head ``(layer, head) = infeasible``
    reported infeasible by its task."""
    import attnsvm.real.probe_tasks as probe_module  # the tasks call head_task
    from attnsvm.real.probe import probe_heads

    real_task = probe_module.head_task

    def task(setup, inp, layer, head, selected, **kw):
        row, sup = real_task(setup, inp, layer, head, selected, **kw)
        if (layer, head) == tuple(infeasible):
            row.update(corr=float("nan"), corr_restricted=float("nan"), advantage=float("nan"),
                       svm_status="infeasible", svm_nuclear=float("inf"), svm_rank=0, svm_support=0)
            sup = np.zeros_like(sup)
        return row, sup

    mp = pytest.MonkeyPatch()
    mp.setattr(probe_module, "head_task", task)
    try:
        return probe_heads(sentences, **settings)
    finally:
        mp.undo()
