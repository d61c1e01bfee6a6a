"""A head without a Gen-SVM says why with its own rows where two of them contradict directly (issue 39: MiniLM's
layer 0, whose states carry no context): ``svm_contradictions`` in the probe's table and the count in the reason."""

from __future__ import annotations

import math

import pytest

from attnsvm.real.verdict import no_svm_reason, verdicts


def test_the_reason_names_the_count_only_where_there_is_one():
    base = no_svm_reason("infeasible")
    assert "contradiction" not in base
    assert no_svm_reason("infeasible", contradictions=0) == base == no_svm_reason("infeasible", contradictions=math.nan)
    one = no_svm_reason("infeasible", contradictions=1)
    assert one.startswith(base) and "; 1 direct contradiction among its rows" in one
    assert "; 3 direct contradictions among its rows" in no_svm_reason("infeasible", contradictions=3)
    # a solver that did not decide, where two rows prove that no SVM exists: said so
    assert no_svm_reason("undecided", contradictions=2).startswith("SVM not certified (status undecided), and none "
                                                                     "exists; 2 direct")
    assert no_svm_reason("undecided") == "SVM not certified (status undecided)"
    v, why = verdicts([0.01, math.nan], [1.0, math.nan], ["optimal", "infeasible"], contradictions=[0, 4])
    assert v == ["beyond null", "no SVM"] and "4 direct contradictions" in why[1]


@pytest.mark.slow
def test_layer_0_heads_say_which_rows_contradict():
    pytest.importorskip("transformers")
    from attnsvm.real.probe import probe_heads

    # 48 corpus sentences, one word query each: layer 0's head 5 selects two tokens together in one sentence and
    # apart in another with the same states (measured: 1 such pair; scripts/probe_tie_contradictions.py)
    res = probe_heads(n_sentences=48, layers=[0], heads=[5], svm_sentences=48, null_draws=2, view_sentences=2)
    row = res.table.iloc[0]
    assert row["svm_status"] == "infeasible" and row["verdict"] == "no SVM"
    assert row["svm_contradictions"] >= 1
    assert f"{int(row['svm_contradictions'])} direct contradiction" in row["verdict_reason"]
