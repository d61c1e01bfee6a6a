"""Gondzio's centrality correctors of the nuclear IPM's grown round (svm/barrier.py ``_centrality_correctors``): the
target, the corrector's effect on the trial point, the acceptance test, and the answers with and without them."""

import logging

import numpy as np
import pytest
import scipy.linalg as sla

import attnsvm.svm.barrier as b
from attnsvm.generators import planted_problem
from attnsvm.svm import att_constraints
from attnsvm.svm.barrier_grow import nuclear_ipm_grow
from attnsvm.svm.nuclear import nuclear_certificate


def _case(seed=2, n=40, T=16, d=6):
    pr, sel, _ = planted_problem(n, T, d, seed=seed)
    return att_constraints(pr.X, pr.Z, sel)


def test_the_target_projects_onto_the_band_and_caps_the_decrease():
    v = np.array([-3.0, 0.0, 0.05, 0.1, 1.0, 10.0, 15.0, 100.0])
    t = b._centrality_target(v, 0.1, 10.0)
    # below the band: up to its lower end; inside: nothing; above: down to its upper end, by at most hi
    np.testing.assert_array_equal(t, [3.1, 0.1, 0.05, 0.0, 0.0, 0.0, -5.0, -10.0])


class _Seen:
    """Calls of ``_centrality_correctors``: Mehrotra's direction's bounds, the kept direction's, whether it is
    Mehrotra's, and the counts; and the terms of each corrector with its trial point."""

    def __init__(self, monkeypatch):
        self.calls, self.terms = [], []
        real, real_one = b._centrality_correctors, b._centrality_corrector

        def spy(nw, d, rvec, corr, smu, k):
            before = nw.max_steps(d)
            out = real(nw, d, rvec, corr, smu, k)
            self.calls.append((before, nw.known[1], out is d, nw.cc_kept, nw.cc_tried))
            return out

        def spy_one(nw, d, steps):
            out = real_one(nw, d, steps)
            self.terms.append((nw, d, steps, out))
            return out

        monkeypatch.setattr(b, "_centrality_correctors", spy)
        monkeypatch.setattr(b, "_centrality_corrector", spy_one)


def _grow(cs, frac=5, **kw):
    cs_n, sc = cs.normalized()
    start = np.zeros(cs.N, bool)
    start[: cs.N // frac] = True
    res, subset = nuclear_ipm_grow(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality, start, tol=1e-9, **kw)
    return res, sc.W(res.W), sc.lam(res.lam, "norm")


@pytest.mark.parametrize("seed", [2, 5])
def test_a_corrector_is_kept_only_when_it_lengthens_the_steps(monkeypatch, seed):
    seen = _Seen(monkeypatch)
    res, _, _ = _grow(_case(seed))
    assert res.status == "optimal"
    kept = [c for c in seen.calls if c[3] > 0]
    dropped = [c for c in seen.calls if c[4] > 0 and c[3] == 0]
    assert kept and dropped                             # both outcomes occur on this path
    for before, after, same, n_kept, n_tried in seen.calls:
        assert n_kept <= n_tried <= b._CENTRALITY_CORRECTORS
        if n_kept:
            assert not same and after[0] + after[1] > before[0] + before[1]
        else:                                           # rejected (or none tried): Mehrotra's direction, its bounds
            assert same and after == before


def test_the_corrector_moves_the_trial_products_onto_the_band(monkeypatch):
    seen = _Seen(monkeypatch)
    _grow(_case(2))
    checked = 0
    for nw, d, steps, out in seen.terms:
        if out is None:
            continue
        cX, cs = out
        pb, x, du, I = nw.pb, nw.x, nw.du, nw.pb.I
        dlam, dG, dX, ds = d
        ap_t, ad_t = min(1.0, steps[0] + b._CC_DELTA), min(1.0, steps[1] + b._CC_DELTA)
        G_t = du.G + ad_t * dG
        if b._chol_S(G_t) is None:
            continue
        r1, n = pb.r1, x.X.shape[0]
        Z_t = 0.5 * np.block([[np.eye(r1), -G_t], [-G_t.T, np.eye(n - r1)]])
        X_t = x.X + ap_t * dX
        v_lp = (x.s + ap_t * ds) * (x.lam[I] + ad_t * dlam[I])
        mu_t = (np.trace(X_t @ Z_t) + v_lp.sum()) / pb.n_tot
        lo, hi = b._CC_BETA[0] * mu_t, b._CC_BETA[1] * mu_t
        # the eigenvalues of X_t Z_t (real: similar to a symmetric matrix) and of (X_t + cX) Z_t: those below lo move
        # up to lo, the others stay
        before = np.sort(sla.eigvals(X_t @ Z_t).real)
        after = np.sort(sla.eigvals((X_t + cX) @ Z_t).real)
        scale = np.abs(before).max()
        np.testing.assert_allclose(after, np.sort(np.maximum(before, lo)), rtol=0, atol=1e-9 * scale)
        # the slacks: s_t lam_t + lam cs (the linearization's change) on the band, a large decrease capped at hi
        np.testing.assert_allclose(v_lp + x.lam[I] * cs, v_lp + b._centrality_target(v_lp, lo, hi), rtol=1e-12)
        assert np.allclose(cX, cX.T, rtol=0, atol=0)
        checked += (before < lo).any()
    assert checked >= 3


def test_the_answers_with_and_without_correctors_are_the_same_certified_optimum(monkeypatch):
    cs = _case(5)
    res1, W1, lam1 = _grow(cs)
    monkeypatch.setattr(b, "_CENTRALITY_CORRECTORS", 0)
    res0, W0, lam0 = _grow(cs)
    for res, W, lam in ((res1, W1, lam1), (res0, W0, lam0)):
        assert res.status == "optimal"
        cert, _ = nuclear_certificate(cs, W, lam)       # all N rows hold, the gap closes: the optimum
        assert cert.max_violation <= 1e-9
        assert cert.duality_gap <= 1e-8 and cert.stationarity_residual <= 1e-8
    n1, n0 = np.linalg.norm(W1, "nuc"), np.linalg.norm(W0, "nuc")
    assert abs(n1 - n0) <= 1e-7 * n0


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


def test_correctors_run_in_the_grown_round_on_large_systems_only(trace, monkeypatch):
    cs = _case(2)
    _grow(cs)
    cc = [r["cc"] for r in trace if r["kind"] == "step"]
    assert sum(k for k, _ in cc) > 0                    # the grown round (N >= 3 (r1 + r2) here) takes them
    del trace[:]
    # below the size bar none is tried
    monkeypatch.setattr(b, "_CC_MIN_ROWS_PER_DIM", 10 ** 6)
    _grow(cs)
    assert all(r["cc"] == (0, 0) for r in trace if r["kind"] == "step")
    del trace[:]
    # nor in a plain nuclear_ipm run
    monkeypatch.setattr(b, "_CC_MIN_ROWS_PER_DIM", 3)
    cs_n, _ = cs.normalized()
    b.nuclear_ipm(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality)
    steps = [r for r in trace if r["kind"] == "step"]
    assert steps and all(r["cc"] == (0, 0) for r in steps)
