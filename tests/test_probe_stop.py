"""Sequential stopping of a head's null draws (real/verdict.py ``reachable_pvalues``, ``stop_reason``;
real/probe_steps.py ``null_task(real=...)``): the bound is a bound, the stopped verdicts are the full ones."""

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.real.layer import LayerInputs
from attnsvm.real.verdict import LEVEL, add_verdict, null_columns, reachable_pvalues, stop_reason, t_pvalues


def _final(real, seen, future):
    return t_pvalues(real, np.concatenate([seen, future]))[:2]


def test_reachable_pvalues_bound_every_future_and_are_attained():
    """Whatever the remaining draws are (spread, equal, outlying, dropped), the final p-values are never
    below the bound; and r equal values at the best v (or v -> -+inf) reach it (the bound is tight)."""
    from scipy.optimize import minimize_scalar

    rng = np.random.default_rng(0)
    tight = cases = 0
    for _ in range(60):
        k, left = int(rng.integers(1, 7)), int(rng.integers(0, 6))
        seen = rng.normal(0.08, 0.01, k)
        real = 0.08 + rng.normal(0, 0.02)
        bound = reachable_pvalues(real, seen, left)
        for _ in range(60):
            r = int(rng.integers(0, left + 1))
            kind = rng.integers(4)
            fut = (rng.normal(0.08, 0.01, r) if kind == 0 else np.full(r, rng.normal(0.08, 0.03)) if kind == 1
                   else real + rng.normal(0, 0.05, r) if kind == 2 else rng.normal(0.08, 0.3, r))
            p = _final(real, seen, fut)
            if np.isfinite(p[0]):
                assert p[0] >= bound[0] - 1e-12 and p[1] >= bound[1] - 1e-12
        if k + left < 3:
            assert bound == (1.0, 1.0)  # no outcome has a p-value
            continue
        if k == 1:  # futures near the one value seen: sd -> 0 and p -> 0, so no bound holds
            assert bound == (0.0, 0.0) and min(_final(real, seen, seen[0] + 1e-9 * np.arange(1, 3))) < 1e-6
            continue
        cases += 1
        ok = True
        for tail in (0, 1):
            best = 1.0
            for r in range(max(0, 3 - k), left + 1):
                f = lambda v: _final(real, seen, np.full(r, v))[tail]  # noqa: E731
                best = min(best, minimize_scalar(f, bounds=(-5, 5), method="bounded",
                                                 options={"xatol": 1e-12}).fun, f(-1e7), f(1e7))
            ok &= abs(best - bound[tail]) <= 1e-9 + 1e-4 * bound[tail]
        tight += ok
    assert cases >= 30 and tight == cases
    with pytest.raises(ValidationError, match="remaining"):
        reachable_pvalues(0.1, [0.1, 0.2], -1)
    assert reachable_pvalues(0.1, [0.2, 0.2, 0.2], 2) == (0.0, 0.0)  # equal values so far: nothing bounds t


def _verdicts(reals, draws, stop: bool):
    """Verdicts of heads (one real value and K draws each), drawing all K or stopping by :func:`stop_reason`."""
    import pandas as pd

    rows = []
    for k, (real, d) in enumerate(zip(reals, draws)):
        used = []
        for j in range(len(d)):
            if stop and stop_reason(real, used, len(d) - j) is not None:
                break
            used.append(d[j])
        cols = null_columns(real, [{"corr_restricted": v, "seconds": 0.0} for v in used],
                            planned=len(d) if stop else None)
        rows.append({"layer": 0, "head": k, "corr_restricted": real, "svm_status": "optimal", **cols})
    return add_verdict(pd.DataFrame(rows))


@pytest.mark.parametrize("seed", range(6))
def test_stopped_verdicts_equal_the_full_ones_and_p_below_the_level_is_unchanged(seed):
    """72 heads, K = 8 normal nulls each, some heads planted above or below their nulls, some NaN draws:
    every verdict with stopping equals the full-K verdict; a head's p-value is <= the level with stopping iff
    it is without, and then the same (so its law below the level, the calibration, is unchanged)."""
    rng = np.random.default_rng(seed)
    m, K = 72, 8
    shift = np.zeros(m)
    shift[:10] = rng.uniform(2, 8, 10)
    shift[10:13] = -rng.uniform(3, 8, 3)
    draws = rng.normal(0.08, 0.01, (m, K))
    draws[rng.random((m, K)) < 0.05] = np.nan  # uncertified null SVMs: dropped
    reals = 0.08 + 0.01 * (rng.standard_normal(m) + shift)
    full, stopped = _verdicts(reals, draws, False), _verdicts(reals, draws, True)
    assert list(full["verdict"]) == list(stopped["verdict"])
    assert (stopped["null_stop"] != "all drawn").sum() >= 10  # the rule stops many heads at these settings
    assert (stopped["n_null"] + stopped["n_null_dropped"] < K).sum() >= 10
    for tail in ("p_upper", "p_lower"):
        low_full, low_stop = full[tail] <= LEVEL, stopped[tail] <= LEVEL
        assert (low_full == low_stop).all()
        np.testing.assert_array_equal(full.loc[low_full, tail], stopped.loc[low_stop, tail])


def test_stop_reason_needs_three_kept_draws_and_stops_heads_without_svm():
    assert stop_reason(float("nan"), [], 8).startswith("no certified head SVM")
    assert min(reachable_pvalues(0.0805, [0.08, 0.081], 6)) > LEVEL  # the bound alone would stop, but
    assert stop_reason(0.0805, [0.08, 0.081], 6) is None  # 2 kept: no p-value yet, it would leave the BY step
    assert stop_reason(0.08, [0.08, 0.081, np.nan, 0.079], 4) is not None  # real in the middle of its nulls
    assert stop_reason(0.5, [0.08, 0.081, 0.079], 5) is None  # far above: it must draw on
    assert stop_reason(0.08, [0.08, 0.081, 0.079], 0) is None  # nothing left to save


def _inputs(rng, n=8, T=6, d=4):
    X = np.concatenate([rng.standard_normal((n, T, d)), np.ones((n, T, 1))], axis=-1)
    return LayerInputs.build(X, X[:, 0], np.ones((n, T), bool))


def _one_head(seed):
    """``(inputs, setup, selections)`` of one random bilinear head on 8 sentences; the first token selected."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    inp = _inputs(rng)
    W = np.zeros((5, 5))
    W[:4] = rng.standard_normal((4, 5))
    setup = SimpleNamespace(threshold=0.3, seed=0, model=SimpleNamespace(head_weights=lambda l, h: W))
    sel = np.zeros((inp.m, inp.cand.shape[1]), bool)
    sel[:, 0] = True
    return inp, setup, sel


def test_null_task_stops_on_a_prefix_of_the_full_draws():
    """Stopped draws are the first draws of the full run (same values); none for a head without an SVM."""
    from attnsvm.real.probe_steps import null_task

    inp, setup, sel = _one_head(3)
    full = null_task(setup, inp, 0, 0, sel, null_draws=8)
    vals = [d["corr_restricted"] for d in full]
    real = float(np.nanmean(vals))  # a head in the middle of its nulls: it stops
    part = null_task(setup, inp, 0, 0, sel, null_draws=8, real=real)
    assert 3 <= len(part) < 8 and [d["corr_restricted"] for d in part] == vals[:len(part)]
    assert stop_reason(real, vals[:len(part)], 8 - len(part)) is not None
    assert stop_reason(real, vals[:len(part) - 1], 9 - len(part)) is None  # it stopped at the first chance
    assert null_task(setup, inp, 0, 0, sel, null_draws=8, real=float("nan")) == []
    far = null_task(setup, inp, 0, 0, sel, null_draws=8, real=0.99)
    assert [d["corr_restricted"] for d in far] == vals  # far above its nulls: all K drawn
    cols = null_columns(real, part, planned=8)
    assert cols["null_planned"] == 8 and cols["null_stop"].startswith(f"stopped after {len(part)} of 8")
    assert null_columns(0.99, far, planned=8)["null_stop"] == "all drawn"


def test_stored_probe_combines_stopped_null_tasks():
    """``combine`` of a stored probe: a stopped head's reason recomputed from its draws in order, a head without
    an SVM (no null rows by design) is "no SVM" and not a failed null task, a full head "all drawn"."""
    import pandas as pd

    from attnsvm.experiments.real.probe_run import ProbeConfig, combine

    cfg = ProbeConfig(layers=[0], heads=[0, 1, 2], null_draws=8)
    mid = [0.08, 0.081, 0.079]
    rng = np.random.default_rng(1)
    full = list(rng.normal(0.08, 0.01, 8))
    heads = [{"part": "head", "layer": 0, "head": h, "corr_restricted": c, "svm_status": s, "selected_all": False}
             for h, c, s in ((0, 0.0802, "optimal"), (1, float("nan"), "infeasible"), (2, 0.2, "optimal"))]
    nulls = [{"part": "null", "layer": 0, "head": h, "kind": "spectrum", "draw": j, "null_status": "optimal",
              "null_corr_restricted": v, "null_seconds": 1.0}
             for h, vals in ((0, mid), (2, full)) for j, v in reversed(list(enumerate(vals)))]  # any row order
    t = combine(cfg, pd.DataFrame(heads + nulls)).set_index("head")
    assert stop_reason(0.0802, mid[:2], 6) is None  # the null task stopped at its first chance, after 3
    assert t.loc[0, "null_stop"] == stop_reason(0.0802, mid, 5) and t.loc[0, "null_stop"].startswith("stopped after 3")
    assert t.loc[0, "verdict"] == "not distinguishable" and t.loc[0, "n_null"] == 3
    assert t.loc[1, "verdict"] == "no SVM" and t.loc[1, "null_stop"].startswith("no certified head SVM")
    assert t.loc[2, "null_stop"] == "all drawn" and t.loc[2, "verdict"] == "beyond null"
    assert (t["null_planned"] == 8).all()


def test_a_null_task_apart_from_its_head_gets_the_heads_statistic():
    """``head_statistic`` (a null task in another process solves the head's SVM again) equals the statistic of
    the head task's row, bit for bit, and is NaN for a head whose every candidate is selected."""
    from attnsvm.real.probe_steps import head_statistic, head_task, row_statistic

    inp, setup, sel = _one_head(5)
    sel[::2, 1] = True
    row, _ = head_task(setup, inp, 0, 0, sel)
    assert row["svm_status"] == "optimal" and np.isfinite(row["corr_restricted"])
    assert head_statistic(setup, inp, 0, 0, sel) == row_statistic(row) == row["corr_restricted"]
    assert np.isnan(head_statistic(setup, inp, 0, 0, inp.cand.copy()))
    assert np.isnan(row_statistic({**row, "svm_status": "infeasible"}))
    assert np.isnan(row_statistic({**row, "selected_all": True}))
    assert row_statistic({**row, "selected_all": float("nan")}) == row["corr_restricted"]  # unknown: not all
