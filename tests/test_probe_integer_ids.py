"""A stored probe's layer and head are integers whatever its heads' SVMs (issue 42, item 1)."""

from __future__ import annotations

import pandas as pd

from attnsvm.real.probe_config import ProbeConfig
from attnsvm.real.probe_tasks import combine
from attnsvm.real.probe import format_table


def _head_row(head: int, svm: bool) -> pd.DataFrame:
    nan = float("nan")
    row = {"part": "head", "layer": 3, "head": head, "mean_selected": 2.0, "frac_cls": 0.5,
           "corr": 0.2 if svm else nan, "corr_restricted": 0.2 if svm else nan,
           "corr_random_restricted": 0.01, "advantage": 0.19 if svm else nan,
           "svm_status": "optimal" if svm else "infeasible", "svm_gap": 1e-10,
           "svm_nuclear": 3.0 if svm else float("inf"), "selected_all": False,
           "view_support": "[]", "seconds_svm": 0.5}
    return pd.DataFrame([row])


def _null_rows(head: int, k: int) -> pd.DataFrame:
    return pd.DataFrame([{"part": "null", "layer": 3, "head": head, "kind": "spectrum", "draw": d,
                          "null_status": "optimal", "null_corr_restricted": 0.05 + 0.01 * d, "null_seconds": 0.1}
                         for d in range(k)])


def test_layer_and_head_stay_integers_when_a_head_has_no_svm():
    """A head without an SVM draws no null heads: its null task stores a zero-row shard (column ``task``
    only, as the runner keeps it). The runner's concatenation made layer and head float; the stored probe's
    table, its text table and its CSV show integers as for heads that all have SVMs."""
    shards = [_head_row(0, svm=False), pd.DataFrame({"task": pd.Series([], dtype=str)}),
              _head_row(1, svm=True), _null_rows(1, 4)]
    stored = pd.concat(shards, ignore_index=True)  # what runner.collect does with the shards
    cfg = ProbeConfig(layers=[3], heads=[0, 1], null_draws=4, svm_sentences=8, n_sentences=16, null_kind="spectrum")
    table = combine(cfg, stored)
    assert str(table["layer"].dtype) == "int64" and str(table["head"].dtype) == "int64"
    lines = format_table(table.drop(columns=["view_support", "seconds_svm"])).splitlines()
    assert [ln.split()[:2] for ln in lines[1:]] == [["3", "0"], ["3", "1"]], lines
    assert table.to_csv(index=False).splitlines()[1].startswith("3,0,")
