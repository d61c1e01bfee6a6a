"""The model view's mark of a head (attnsvm.real.probe_view.head_mark): the verdict when there is one, else the
comparison with random selections, words for a head without an SVM, nothing where there is no value."""

from __future__ import annotations

import math

from attnsvm.real.probe_view import HEAD_MARKS, head_mark
from attnsvm.real.verdict import VERDICTS


def test_every_verdict_has_a_mark():
    assert set(VERDICTS) <= set(HEAD_MARKS)
    for v in VERDICTS:
        assert head_mark({"verdict": v, "corr_restricted": 0.1, "advantage": 0.05}) == v


def test_without_nulls_the_mark_is_the_random_baseline():
    assert head_mark({"corr_restricted": 0.2, "advantage": 0.05}) == "above baseline"
    assert head_mark({"corr_restricted": 0.2, "advantage": -0.01}) == "not above baseline"
    assert head_mark({"corr_restricted": 0.2, "advantage": 0.0}) == "not above baseline"
    assert head_mark({"corr_restricted": math.nan, "advantage": math.nan, "svm_status": "infeasible"}) == "no SVM"
    # a verdict that is not a word (a NaN cell) falls back to the comparison
    assert head_mark({"verdict": math.nan, "corr_restricted": 0.2, "advantage": 0.05}) == "above baseline"


def test_no_mark_without_a_value():
    assert head_mark({"corr_restricted": 0.2, "advantage": math.nan}) == ""  # not "not above baseline"
    assert head_mark({"corr_restricted": 0.2}) == ""  # no SVMs solved: selections only
    assert head_mark({}) == ""
