"""probe.html states its answer (issue 42, item 9): words, never "nan", for a verdict that is not one in the
verdict map; attention that is not a number reaches the explorer as "no value", not as a huge negative integer;
each head's verdicts (the stable one first at several m) and its [CLS] / position-0 shares are data the page shows.
No model and no browser: small hand-made rows and results."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd

from attnsvm.real.probe_view import _explorer_data, _verdict_grid

NOT_A_NUMBER = re.compile(r"(?i)(?<![\w-])(nan|inf|-inf|infinity)(?![\w-])")


def _rows(**over):
    base = {"layer": [2, 2], "head": [0, 1], "verdict": ["beyond null", "not distinguishable"],
            "verdict_reason": ["q_upper 0.01 <= 0.05", "p between"], "p_upper": [0.001, 0.4], "q_upper": [0.01, 0.5],
            "q_lower": [1.0, 0.9], "corr_restricted": [0.2, 0.1], "null_mean": [0.05, 0.09], "null_sd": [0.01, 0.02],
            "advantage": [0.1, 0.02]}
    base.update(over)
    return pd.DataFrame(base)


def test_verdict_map_words_for_a_verdict_that_is_not_one():
    # a NaN verdict (and a NaN reason) in a head's row, with and without a number
    table = _rows(verdict=[math.nan, math.nan], verdict_reason=[math.nan, math.nan],
                  corr_restricted=[0.2, math.nan], advantage=[0.1, math.nan])
    page = _verdict_grid(table, [2], [0, 1])
    assert not NOT_A_NUMBER.search(page), NOT_A_NUMBER.findall(page)
    assert "data-verdict='no verdict'" in page and "data-verdict='no SVM'" in page
    # the words of a real verdict stay as they are
    assert "data-verdict='beyond null'" in _verdict_grid(_rows(), [2], [0, 1])


def _result(att):
    """A one-head, one-sentence result whose attention matrix is ``att (3, 3)``."""
    table = _rows().iloc[:1]
    return SimpleNamespace(config={"threshold": 0.1, "svm_sentences": 1}, matrices={(2, 0): np.asarray([att])},
                           tokens=[["[CLS]", "a", "[SEP]"]], queries=np.array([1]), sentences=["a"],
                           support={(2, 0): np.array([[True, False, False]])}, table=table)


def test_explorer_shows_no_value_for_attention_that_is_not_a_number():
    att = [[0.5, 0.25, 0.25], [math.nan, 0.9, 0.1], [0.0, math.inf, 1.0]]
    data = _explorer_data(_result(att), 1)
    assert data["att"]["2-0"] == [[[500, 250, 250], [None, 900, 100], [0, None, 1000]]]
    text = json.dumps(data, allow_nan=False)  # no NaN or Infinity token in the page's JSON
    assert not NOT_A_NUMBER.search(text)
    # the page's script shows such a cell as "no value" (and grey), and leaves it out of the colour scale
    from attnsvm.real.probe_view import _SCRIPT
    assert "a === null ? 'no value'" in _SCRIPT and ".filter(a => a !== null)" in _SCRIPT


def test_head_verdicts_one_and_several_m():
    from attnsvm.real.probe_view import head_verdicts

    row = {"verdict": "beyond null", "corr_restricted": 0.2, "advantage": 0.1}
    assert head_verdicts(row) == [("beyond null", "beyond null")]
    several = {**row, "m": 48, "stable_verdict": "depends on sample size"}
    assert head_verdicts(several) == [("depends on sample size", "stable: depends on sample size"),
                                      ("beyond null", "m = 48: beyond null")]
    assert head_verdicts({**several, "stable_verdict": "below"})[0] == ("below null", "stable: below")
    assert head_verdicts({"corr_restricted": 0.2}) == []  # no SVMs: nothing to say


def test_share_items_labels_and_words():
    from attnsvm.real.probe_view import share_items

    row = {"sel_first": 0.9166, "sel_last": 0.0, "qi_share": math.nan}
    assert share_items(row) == [
        ("selects [CLS]", "0.92", share_items(row)[0][2]), ("selects [SEP]", "0.00", share_items(row)[1][2]),
        ("query-indep. share", "no value", share_items(row)[2][2])]
    assert [x[0] for x in share_items(row, "gpt2")] == ["selects pos 0", "selects last", "query-indep. share"]
    assert share_items({"sel_first": 0.5}) == [("selects [CLS]", "0.50", share_items({"sel_first": 0.5})[0][2])]
    assert share_items({}) == []
