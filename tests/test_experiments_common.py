"""The experiments' shared plumbing: SVM certificate columns, the certified check, preset deviations,
panel labels, and local optimality from stored rows (the library's rule)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from attnsvm.errors import ValidationError
from attnsvm.experiments.common import certified_check, config_deviations, svm_record, uncertified
from attnsvm.experiments.mm.common import constraint_rows, locally_optimal_from_rows, p_svm
from attnsvm.generators import mm_loss, mm_single_input
from attnsvm.svm import CERTIFIED_GAP, CERTIFIED_VIOLATION
from attnsvm.svm.analysis import is_locally_optimal, locally_optimal_rows


@pytest.fixture(scope="module")
def sol():
    s = p_svm(mm_single_input("global"), [0])
    assert s.certified
    return s


def _spoiled(sol, **cert):
    bad = copy.deepcopy(sol)
    for k, v in cert.items():
        setattr(bad.certificate, k, v)
    return bad


def test_svm_record_columns_are_the_certificate(sol):
    rec = svm_record(sol, "fro")
    assert rec == {"fro_status": "optimal", "fro_violation": float(sol.certificate.max_violation),
                   "fro_gap": float(sol.certificate.duality_gap), "fro_certified": True}
    worse = _spoiled(sol, duality_gap=1e-3)
    both = svm_record([sol, worse], "gen")  # several solves: the worst of them, certified only if all are
    assert both["gen_gap"] == 1e-3 and both["gen_certified"] is False
    assert both["gen_status"] == ",".join(sorted({"optimal", str(worse.status)}))
    none = svm_record(None, "proj")
    assert none["proj_certified"] is False and np.isnan(none["proj_violation"]) and none["proj_status"] == ""


def test_uncertified_reads_every_column(sol):
    good = svm_record(sol)
    table = pd.DataFrame([good] * 7)
    assert not uncertified(table).any()
    table.loc[1, "svm_certified"] = False
    table.loc[2, "svm_status"] = "optimal_inaccurate"
    table.loc[3, "svm_violation"] = 10 * CERTIFIED_VIOLATION
    table.loc[4, "svm_gap"] = -1e-12  # a negative relative gap is not a certificate
    table.loc[5, "svm_gap"] = np.nan
    table.loc[6, "svm_status"] = "optimal,infeasible"
    assert uncertified(table).tolist() == [False] + [True] * 6
    # the gap bar of the solve's norm: 1e-7 passes the nuclear bar, not the Frobenius one
    t = pd.DataFrame([{**good, "svm_gap": 1e-7}])
    assert 1e-7 <= CERTIFIED_GAP["nuclear"] and uncertified(t, "svm", "nuclear").tolist() == [False]
    assert uncertified(t).tolist() == [True]
    # a missing column fails every row; a row whose solve is not used is not judged
    assert uncertified(table.drop(columns="svm_certified").iloc[:1]).tolist() == [True]
    used = table.assign(svm_used=[True] * 6 + [False])
    assert uncertified(used).tolist() == [False] + [True] * 5 + [False]


def test_certified_check_fails_on_any_missing_or_uncertified_solve(sol):
    table = pd.DataFrame([{**svm_record(sol, "fro"), **svm_record(sol, "nuc")}] * 3)
    ok = certified_check(table, ("fro", "nuc"), "three instances")
    assert ok.passed and ok.value == 0 and ok.kind == "integrity" and ok.name == "every SVM used is certified"
    assert not certified_check(table.assign(nuc_certified=[True, False, True]), ("fro", "nuc")).passed
    assert certified_check(table.assign(nuc_certified=[True, False, True]), ("fro", "nuc")).value == 1
    assert not certified_check(table.iloc[:0], ("fro",)).passed  # nothing was compared
    short = certified_check(table, ("fro",), expected=5)  # two of the five solves missing
    assert not short.passed and short.value == 2
    assert certified_check(table, ("fro",), expected=3).passed
    nuc_gap = table.assign(nuc_gap=1e-7)
    assert not certified_check(nuc_gap, ("fro", "nuc")).passed
    assert certified_check(nuc_gap, ("fro", "nuc"), norms={"nuc": "nuclear"}).passed
    named = certified_check(table, ("fro",), name="C9: every SVM", reason="why")
    assert named.name == "C9: every SVM" and named.threshold_reason == "why"


def test_config_deviations_lists_only_changed_fields():
    from attnsvm.experiments import registry

    exp = registry()["tf-trajectories"]
    notes = {"steps": ("2000 steps", "why steps"), "record_every": ("every step", "why record")}
    assert config_deviations(exp.Config(), notes) == []
    rows = config_deviations(exp.Config(record_every=50), notes)
    assert rows == [{"spec": "every step", "here": "record_every = 50 (full preset: 10)", "reason": "why record"}]


def test_locally_optimal_rows_rule():
    # row 0 active, selected beats it; row 1 inactive, selected loses: locally optimal
    assert locally_optimal_rows([True, False], [1.0, 1.0], [0.5, 2.0])
    # an active row whose other token scores as high as the selected one: not locally optimal
    assert not locally_optimal_rows([True, False], [1.0, 1.0], [1.0, 0.0])
    with pytest.raises(ValidationError, match="one shape"):
        locally_optimal_rows([True], [1.0, 1.0], [0.0, 0.0])


def test_mm_rows_agree_with_the_library_on_every_selection():
    """mm's local optimality read from stored constraint rows equals svm.analysis.is_locally_optimal."""
    import itertools

    for C in (2.0, 10.0):
        prob = mm_loss(C)
        gamma = prob.scores()
        found = []
        for alpha in itertools.product(range(prob.T), repeat=prob.n):
            s = p_svm(prob, alpha)
            assert s.certified
            rows = pd.DataFrame(constraint_rows(s, gamma, alpha))
            lib = is_locally_optimal(prob, np.asarray(alpha), solution=s)
            assert locally_optimal_from_rows(rows) == float(lib)
            found.append(lib)
        assert any(found) and not all(found)  # both answers occur: the comparison is not vacuous


def test_label_axes_sets_what_it_is_given():
    from attnsvm.plotting import label_axes, subplots

    fig, axes = subplots(1, 2)
    a, b = axes[0]
    a.plot([0, 1], [0, 1], label="line")
    label_axes(a, "x", "y", "t", legend=7, grid="both", loc="lower right")
    assert (a.get_xlabel(), a.get_ylabel(), a.get_title()) == ("x", "y", "t")
    assert a.get_legend() is not None and a.get_legend().get_texts()[0].get_fontsize() == 7
    assert a.xaxis.get_gridlines()[0].get_visible()
    label_axes(b, ylabel="only y")
    assert (b.get_xlabel(), b.get_ylabel(), b.get_title(), b.get_legend()) == ("", "only y", "", None)
    assert not b.xaxis.get_gridlines()[0].get_visible()
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.parametrize("name, home", [("run_experiment", "attnsvm.runner"), ("RunSummary", "attnsvm.runner"),
                                        ("write_report", "attnsvm.report")])
def test_the_moved_names_are_gone_and_served_by_their_home(name, home):
    """attnsvm.experiments.<name> (0.1, deprecated in 0.2) is removed in 0.3: AttributeError / ImportError;
    the runner / report serves the object."""
    import importlib

    import attnsvm.experiments as experiments

    with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
        getattr(experiments, name)
    with pytest.raises(ImportError):
        exec(f"from attnsvm.experiments import {name}", {})
    assert callable(getattr(importlib.import_module(home), name))
    assert name not in experiments.__all__
