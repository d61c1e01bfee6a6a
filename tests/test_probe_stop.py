"""Sequential stopping of a head's null draws (real/verdict.py ``reachable_pvalues``, ``stop_reason``;
real/probe_steps.py ``null_task(real=...)``): the bound is a bound, the stopped verdicts are the full ones."""

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.real.layer import LayerInputs
from attnsvm.real.verdict import (LEVEL, add_verdict, by_adjust, harmonic, null_columns, reachable_pvalues, stop_level,
                                  stop_reason, stop_undetermined, t_pvalues)


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


def _verdicts(reals, draws, stop: bool, tested=None, level=None):
    """Verdicts of heads (one real value and K draws each), drawing all K or stopping by :func:`stop_reason` at
    ``level`` (default :func:`stop_level` ``(tested)``; ``tested`` None: the old level 0.05). A NaN real value is
    a head without a certified SVM ("no SVM", no p-value)."""
    import pandas as pd

    level = stop_level(tested) if level is None else level
    rows = []
    for k, (real, d) in enumerate(zip(reals, draws)):
        used = []
        for j in range(len(d)):
            if stop and stop_reason(real, used, len(d) - j, level) is not None:
                break
            used.append(d[j])
        cols = null_columns(real, [{"corr_restricted": v, "seconds": 0.0} for v in used],
                            planned=len(d) if stop else None, tested=tested)
        rows.append({"layer": 0, "head": k, "corr_restricted": real,
                     "svm_status": "optimal" if np.isfinite(real) else "infeasible", **cols})
    return add_verdict(pd.DataFrame(rows))


def _most_beyond(seed, m=72, K=8):
    """72 heads like the default probe's: most far or just above their nulls (p spread over BY's thresholds up to
    0.05 / c(m)), some below, the rest null; 5 % of the null draws dropped."""
    rng = np.random.default_rng(seed)
    shift = rng.standard_normal(m)
    shift[:50] = rng.uniform(2.5, 9, 50)
    shift[50:53] = -rng.uniform(3, 8, 3)
    draws = rng.normal(0.08, 0.01, (m, K))
    draws[rng.random((m, K)) < 0.05] = np.nan
    return 0.08 + 0.01 * shift, draws


@pytest.mark.parametrize("seed", range(20))
def test_the_sharper_level_stops_more_and_leaves_every_verdict_as_the_full_draws(seed):
    """Stopping at 0.05 / c(m) (m = 72 heads, all with p-values): the verdicts equal the full-K verdicts, in heads
    where BY rejects down to near 0.05 / c(m); every stop is proven on the table (``null_stop_proven``); the
    heads' p-values at or below the level are those of the full draws; it stops at least as many heads as 0.05.
    Stopping below 0.05 / c(m) (half of it) changes verdicts in some seeds: see the next test."""
    m = 72
    reals, draws = _most_beyond(seed, m)
    full = _verdicts(reals, draws, False)
    sharp, old = _verdicts(reals, draws, True, tested=m), _verdicts(reals, draws, True)
    assert list(full["verdict"]) == list(sharp["verdict"])
    assert sharp["null_stop_proven"].all()
    stopped = sharp["null_stop"] != "all drawn"
    assert stopped.sum() >= (old["null_stop"] != "all drawn").sum()
    assert (sharp["n_null"] + sharp["n_null_dropped"]).sum() <= (old["n_null"] + old["n_null_dropped"]).sum()
    lvl = stop_level(m)
    for tail in ("p_upper", "p_lower"):
        assert (sharp.loc[stopped, tail] > lvl).all()
        np.testing.assert_array_equal(full.loc[~stopped, tail], sharp.loc[~stopped, tail])


def test_stopping_below_the_sharper_level_changes_verdicts_and_the_check_sees_it():
    """The deliberate break: stopping at half of 0.05 / c(m) stops heads BY would reject after all K draws, so over
    the seeds some verdict differs from the full draws, and :func:`stop_undetermined` flags those heads
    (``null_stop_proven`` False) instead of letting the changed verdict pass as proven."""
    m, changed, flagged = 72, 0, 0
    for seed in range(20):
        reals, draws = _most_beyond(seed, m)
        full = _verdicts(reals, draws, False)
        broken = _verdicts(reals, draws, True, tested=m, level=stop_level(m) / 2)
        diff = np.array(full["verdict"]) != np.array(broken["verdict"])
        changed += diff.sum()
        flagged += (~broken["null_stop_proven"]).sum()
        assert not diff[broken["null_stop_proven"].to_numpy(bool)].any()  # a changed verdict is never "proven"
    assert changed >= 1 and flagged >= changed


def test_stop_level_is_the_largest_by_threshold():
    """0.05 / c(m) is BY's threshold for the m-th smallest p (m c(m) p / m <= 0.05): a head at that p is rejected
    exactly when every head is at or below it, and just above it never."""
    assert stop_level(None) == LEVEL and stop_level(1) == LEVEL
    assert harmonic(72) == pytest.approx(sum(1 / k for k in range(1, 73)))
    lvl = stop_level(72)
    assert lvl == pytest.approx(0.05 / harmonic(72)) and 0.0102 < lvl < 0.0104
    assert by_adjust(np.full(72, lvl))[0] == pytest.approx(LEVEL)
    p = np.full(72, 1e-6)
    p[0] = lvl * (1 + 1e-9)
    assert by_adjust(p)[0] > LEVEL and (by_adjust(p)[1:] <= LEVEL).all()
    with pytest.raises(ValidationError, match="m must"):
        harmonic(-1)


def test_fewer_heads_with_p_values_than_tested_is_checked_on_the_table():
    """m heads tested but some without a certified SVM (no p-value): BY then rejects up to 0.05 / c(m') with m' < m,
    above the stopping level. :func:`stop_undetermined` decides exactly: a stopped head whose reachable p lies in
    that window while BY rejects every other head is undetermined; far above it, nothing is."""
    m = 10
    p = np.full(m, 1e-4)
    p[[0, 1]] = np.nan  # two heads without p-values: BY over 8
    p[9] = 0.5
    reach = p.copy()
    reach[9] = 0.5 * (stop_level(m) + stop_level(8))  # stopped: its full p could have been this low
    assert stop_level(m) < reach[9] <= stop_level(8)
    assert list(np.flatnonzero(stop_undetermined(p, reach))) == [9]
    reach[9] = 1.01 * stop_level(8)
    assert not stop_undetermined(p, reach).any()
    with pytest.raises(ValidationError, match="reach"):
        stop_undetermined(p, reach[:3])


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
    sharp = null_task(setup, inp, 0, 0, sel, null_draws=8, real=real, tested=72)  # level 0.05 / c(72): no later
    assert 3 <= len(sharp) <= len(part) and [d["corr_restricted"] for d in sharp] == vals[:len(sharp)]
    assert stop_reason(real, vals[:len(sharp)], 8 - len(sharp), stop_level(72)) is not None
    far = null_task(setup, inp, 0, 0, sel, null_draws=8, real=0.99)
    assert [d["corr_restricted"] for d in far] == vals  # far above its nulls: all K drawn
    cols = null_columns(real, part, planned=8)
    assert cols["null_planned"] == 8 and cols["null_stop"].startswith(f"stopped after {len(part)} of 8")
    assert null_columns(0.99, far, planned=8)["null_stop"] == "all drawn"


def test_null_task_computes_the_heads_spectrum_once(monkeypatch):
    """Draws made one at a time share one SVD of the head (the same draws as without it); a given spectrum is checked."""
    import attnsvm.real.nulls as nulls
    import attnsvm.real.probe_steps as steps

    inp, setup, sel = _one_head(3)
    full = steps.null_task(setup, inp, 0, 0, sel, null_draws=5)
    calls = []
    real_fn = nulls.head_spectrum
    monkeypatch.setattr(nulls, "head_spectrum", lambda W: calls.append(1) or real_fn(W))
    monkeypatch.setattr(steps, "head_spectrum", nulls.head_spectrum)
    part = steps.null_task(setup, inp, 0, 0, sel, null_draws=5, real=0.99)  # far above: all 5, one at a time
    assert len(calls) == 1 and [d["corr_restricted"] for d in part] == [d["corr_restricted"] for d in full]
    with pytest.raises(ValidationError, match="spectrum"):
        nulls.null_heads(inp, setup.model.head_weights(0, 0), sel.sum(axis=1), seed=0, layer=0, head=0, draws=1,
                         spectrum=np.ones(9))


def test_stored_probe_combines_stopped_null_tasks():
    """``combine`` of a stored probe: a stopped head's reason recomputed from its draws in order, a head without
    an SVM (no null rows by design) is "no SVM" and not a failed null task, a full head "all drawn"."""
    import pandas as pd

    from attnsvm.real.probe_config import ProbeConfig
    from attnsvm.real.probe_tasks import combine

    cfg = ProbeConfig(layers=[0], heads=[0, 1, 2], null_draws=8, null_kind="spectrum")
    mid = [0.08, 0.081, 0.079]
    rng = np.random.default_rng(1)
    full = list(rng.normal(0.08, 0.01, 8))
    heads = [{"part": "head", "layer": 0, "head": h, "corr_restricted": c, "svm_status": s, "selected_all": False}
             for h, c, s in ((0, 0.0802, "optimal"), (1, float("nan"), "infeasible"), (2, 0.2, "optimal"))]
    nulls = [{"part": "null", "layer": 0, "head": h, "kind": "spectrum", "draw": j, "null_status": "optimal",
              "null_corr_restricted": v, "null_seconds": 1.0}
             for h, vals in ((0, mid), (2, full)) for j, v in reversed(list(enumerate(vals)))]  # any row order
    t = combine(cfg, pd.DataFrame(heads + nulls)).set_index("head")
    assert stop_reason(0.0802, mid[:2], 6, stop_level(3)) is None  # the null task stopped at its first chance
    lvl = stop_level(3)  # 3 heads probed with nulls
    assert t.loc[0, "null_stop"] == stop_reason(0.0802, mid, 5, lvl) and t.loc[0, "null_stop"].startswith("stopped after 3")
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
