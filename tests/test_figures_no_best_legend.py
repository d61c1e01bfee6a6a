"""mm-multi-input's legends sit at fixed corners (issue 42, item 6): matplotlib's ``loc="best"`` searched every
vertex of the long NGD/GD paths (0.3-0.4 s per legend idle, over its 1 s UserWarning "Creating legend with
loc="best" can be slow" during reproduce)."""

from __future__ import annotations

import warnings

import matplotlib.legend
import pandas as pd
import pytest

from attnsvm.experiments import registry


def test_mm_multi_input_places_no_legend_by_search(tmp_path, monkeypatch):
    exp = registry()["mm-multi-input"]
    cfg = exp.Config(steps=60, ngd_long_steps=60, gd_long_steps=80, plot_steps=50, lemma_trials=2, w_steps=20,
                     float32_steps=50, float32_replica=False, inits=[0.0, 1.0])
    table = pd.concat([exp.run_task(cfg, t) for t in exp.tasks(cfg)], ignore_index=True)

    def searched(self, *args, **kwargs):
        pytest.fail("a legend of mm-multi-input is placed by loc='best' (a search over every plotted vertex)")

    monkeypatch.setattr(matplotlib.legend.Legend, "_find_best_position", searched)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no warning of any kind while drawing
        paths = exp.plot(cfg, table, str(tmp_path))
    assert paths and all(p.endswith((".png", ".pdf")) for p in paths)
