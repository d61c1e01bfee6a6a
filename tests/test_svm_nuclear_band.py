"""The nuclear IPM's trace (svm/barrier.py, DEBUG level) and the nearly active rows that join the growing subset with
the violated ones (svm/barrier_grow.py ``join_with_band``)."""

import logging

import numpy as np
import pytest

import attnsvm.svm.barrier_grow as bg
from attnsvm.generators import planted_problem
from attnsvm.svm import att_constraints
from attnsvm.svm.ipm import RowSet, nuclear_ipm
from attnsvm.svm.nuclear import nuclear_certificate, solve_nuclear
from attnsvm.svm.settings import SolverSettings


def _case(seed=2, n=40, T=16, d=6):
    pr, sel, _ = planted_problem(n, T, d, seed=seed)
    return att_constraints(pr.X, pr.Z, sel)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record.ipm)


@pytest.fixture
def trace():
    lg = logging.getLogger("attnsvm.svm.barrier")
    h, level = _Records(), lg.level
    lg.addHandler(h)
    lg.setLevel(logging.DEBUG)
    yield h.records
    lg.removeHandler(h)
    lg.setLevel(level)


def test_the_trace_is_silent_by_default():
    assert not logging.getLogger("attnsvm.svm.barrier").isEnabledFor(logging.DEBUG)


@pytest.mark.parametrize("seed", [2, 7])
def test_trace_steps_and_the_primal_residual_shrink_by_one_minus_the_step(trace, seed):
    # the Newton direction solves the linearized primal equations exactly (predictor and corrector alike), so the
    # residual r = A(X12) - s - rhs of the next iterate is (1 - ap) r, row by row: its largest entry too (up to the
    # Newton solves' rounding, ~1e-11 of the first residual here; checked while r is well above it)
    cs, _ = _case(seed).normalized()
    res = nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality)
    assert res.status == "optimal"
    its = [r for r in trace if r["kind"] == "iterate"]
    steps = [r for r in trace if r["kind"] == "step"]
    assert len(its) == res.info["iterations"] and len(steps) == len(its) - 1
    for r in steps:
        assert 0.0 <= r["sigma"] <= 1.0
        assert 0.0 < r["ap"] <= r["ap_max"] <= 1.0 and 0.0 < r["ad"] <= 1.0
        assert r["ap_max"] <= r["ap_lp"]
    checked, r0 = 0, its[0]["rp"]
    for a, st, b in zip(its, steps, its[1:]):
        if a["rp"] > 1e-6 * r0:
            assert b["rp"] == pytest.approx((1.0 - st["ap"]) * a["rp"], rel=1e-9, abs=1e-9 * r0)
            checked += 1
    assert checked >= 10 and its[-1]["rp"] < 1e-6 * r0
    # the run stops at a gap 10x below tol or one iteration after its best (_stopping_test): the best iterate, whose
    # gap is below tol = 1e-9, is the last or the one before it
    assert min(abs(r["gap"]) for r in its[-2:]) <= 1e-9 and its[0]["mu"] > its[-1]["mu"]


def _all_rows(seed=2, n=40):
    cs, _ = _case(seed, n=n).normalized()
    allr = RowSet(cs.U, cs.V, cs.rhs, cs.is_equality)
    rng = np.random.default_rng(seed)
    # an iterate that violates some rows and nearly meets others: the scaled optimum, shrunk
    res = nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality)
    W = res.W * cs.rhs.max() / (allr.su * allr.sv)
    X12 = (allr.P.T @ W if allr.P is not None else W) @ allr.B * 0.97
    in_set = rng.random(cs.N) < 0.3
    return allr, X12, in_set


def test_band_rows_are_the_least_slack_outside_rows_up_to_the_share_and_the_room():
    allr, X12, in_set = _all_rows()
    vscale = 1.0 + float(np.max(np.abs(allr.rhs)))
    new, v = bg.rows_outside(allr, X12, in_set, 0.0)
    new = new[: max(1, new.size // 4)]
    assert new.size
    band, _ = bg.rows_outside(allr, X12, in_set, -bg.JOIN_BAND * vscale)
    extra_pool = np.setdiff1d(band, new)
    assert extra_pool.size > bg.JOIN_BAND_SHARE * new.size    # the share, not the band, limits here
    out = bg.join_with_band(allr, X12, in_set, new, vscale, room=10**6)
    assert np.all(np.diff(out) > 0) and np.all(np.isin(new, out))
    extra = np.setdiff1d(out, new)
    assert extra.size == int(bg.JOIN_BAND_SHARE * new.size)
    assert not in_set[extra].any() and allr.live[extra].all()
    assert np.all(v[extra] > -bg.JOIN_BAND * vscale)
    # the least slack first: no row left out is closer to violation than a row taken
    left = np.setdiff1d(extra_pool, extra)
    assert v[left].max() <= v[extra].min()
    # the room caps the count; no room or no violated row: nothing is added
    assert np.setdiff1d(bg.join_with_band(allr, X12, in_set, new, vscale, room=2), new).size == 2
    assert np.array_equal(bg.join_with_band(allr, X12, in_set, new, vscale, room=0), new)
    assert bg.join_with_band(allr, X12, in_set, new[:0], vscale, room=100).size == 0


@pytest.mark.parametrize("seed", [2, 5])
def test_band_joins_fewer_times_to_the_same_certified_optimum(monkeypatch, seed):
    cs = _case(seed)
    dense = solve_nuclear(cs)
    cs_n, sc = cs.normalized()
    start = np.zeros(cs.N, bool)
    start[: cs.N // 5] = True

    def grow():
        res, subset = bg.nuclear_ipm_grow(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality, start,
                                          settings=SolverSettings(gap_tol=1e-9))
        W, lam = sc.W(res.W), sc.lam(res.lam, "norm")
        cert, _ = nuclear_certificate(cs, W, lam)
        assert res.status == "optimal" and cert.max_violation <= 1e-9 and cert.duality_gap <= 1e-8
        nuc = float(np.linalg.svd(W, compute_uv=False).sum())
        assert abs(nuc - dense.norm_value) <= 1e-8 * dense.norm_value
        return [j for j in res.info["joined"] if j]

    with_band = grow()
    monkeypatch.setattr(bg, "JOIN_BAND_SHARE", 0.0)
    without = grow()
    assert with_band[0] > without[0]            # the first join took nearly active rows in too
    assert len(with_band) < len(without)
