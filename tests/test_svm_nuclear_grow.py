"""The nuclear interior-point run whose row subset grows and shrinks (svm/barrier_grow.py) and the
working set's first round through it (solve_nuclear_grown): the answers are the dense solver's."""

import numpy as np
import pytest

from attnsvm.generators import planted_problem
from attnsvm.svm import att_constraints
from attnsvm.svm.barrier_grow import GrowthLimits, nuclear_ipm_grow
from attnsvm.svm.nuclear import nuclear_certificate, solve_nuclear, solve_nuclear_grown
from attnsvm.svm.settings import SolverSettings
from attnsvm.svm.working_set import solve_nuclear_ws

#: what the nuclear working set gives its grown round: its settings (default) and no device
WS = dict(formulation=None, settings=SolverSettings().resolved("nuclear", "working_set"), device=None)


def _rel(a, b):
    return abs(a - b) / max(abs(a), abs(b))


def _case(seed=2, n=40, T=16, d=6):
    pr, sel, _ = planted_problem(n, T, d, seed=seed)
    return att_constraints(pr.X, pr.Z, sel)


def _grow(cs, start, **kw):
    cs_n, sc = cs.normalized()
    res, subset = nuclear_ipm_grow(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality, start,
                                   settings=SolverSettings(gap_tol=1e-9), **kw)
    return res, subset, sc.W(res.W), sc.lam(res.lam, "norm")


@pytest.mark.parametrize("seed", [2, 5])
def test_rows_outside_a_poor_start_join_and_the_answer_is_the_dense_one(seed):
    cs = _case(seed)
    dense = solve_nuclear(cs)
    assert dense.certified
    start = np.zeros(cs.N, bool)
    start[: cs.N // 5] = True                      # the first fifth: most rows of the optimum are missing
    res, subset, W, lam = _grow(cs, start)
    assert res.status == "optimal"
    assert sum(res.info["joined"]) > 0             # rows joined during the run
    cert, margins = nuclear_certificate(cs, W, lam)
    # every one of the N rows holds (not only the subset's), the multipliers are dual feasible and close the gap
    assert cert.max_violation <= 1e-9
    assert cert.duality_gap <= 1e-8 and cert.stationarity_residual <= 1e-8
    assert np.all(lam[~subset] == 0)
    assert _rel(float(np.linalg.svd(W, compute_uv=False).sum()), dense.norm_value) <= 1e-8
    # the rows the optimum rests on are in the final subset
    assert np.all(subset[dense.duals > 1e-6 * dense.duals.max()])


def test_inactive_rows_leave_and_the_answer_stays_optimal():
    cs = _case(3, n=60)
    dense = solve_nuclear(cs)
    res, subset, W, lam = _grow(cs, np.ones(cs.N, bool))   # start from all rows: most of them are inactive
    assert res.status == "optimal"
    assert sum(res.info["dropped"]) > 0 and subset.sum() < cs.N
    cert, _ = nuclear_certificate(cs, W, lam)
    assert cert.max_violation <= 1e-9 and cert.duality_gap <= 1e-8
    assert _rel(float(np.linalg.svd(W, compute_uv=False).sum()), dense.norm_value) <= 1e-8


def test_working_set_first_round_is_grown_and_certified():
    cs = _case(2)
    dense = solve_nuclear(cs)
    ws = solve_nuclear_ws(cs)
    assert ws.info["grown_first_round"] is True
    assert ws.certified and ws.status == "optimal"
    assert _rel(ws.norm_value, dense.norm_value) <= 1e-8
    assert ws.certificate.max_violation <= 1e-9


def test_solve_nuclear_grown_returns_the_subset_solution():
    cs = _case(5)
    fro_support = np.zeros(cs.N, bool)
    fro_support[::3] = True
    out = solve_nuclear_grown(cs, fro_support, np.zeros(cs.N), **WS)
    assert out is not None
    sol, subset = out
    assert sol.constraints.N == int(subset.sum()) and sol.certified
    assert sol.info["solver"] == "ipm" and sol.info["iterations"] > 0


def test_a_failed_grown_run_falls_back_to_rounds(monkeypatch):
    cs = _case(2)
    dense = solve_nuclear(cs)

    def broken(*a, **k):
        raise np.linalg.LinAlgError("simulated breakdown")

    monkeypatch.setattr("attnsvm.svm.barrier_grow.nuclear_ipm_grow", broken)
    assert solve_nuclear_grown(cs, np.ones(cs.N, bool), np.zeros(cs.N), **WS) is None
    ws = solve_nuclear_ws(cs)
    assert ws.info["grown_first_round"] is False
    assert ws.certified and _rel(ws.norm_value, dense.norm_value) <= 1e-6


def test_device_cpu_grown_run_equals_numpy():
    pytest.importorskip("torch")
    cs = _case(5)
    a = solve_nuclear_ws(cs)
    b = solve_nuclear_ws(cs, device="cpu")
    assert a.info["grown_first_round"] and b.info["grown_first_round"]
    assert a.certified and b.certified
    assert _rel(a.norm_value, b.norm_value) <= 1e-8


def test_an_empty_start_is_left_to_the_rounds():
    cs = _case(2)
    assert solve_nuclear_grown(cs, np.zeros(cs.N, bool), np.zeros(cs.N), **WS) is None


def test_a_run_stopped_at_the_rounding_floor_is_kept_and_a_poor_one_is_not(monkeypatch):
    # a run that stalls at a relative gap of 2e-8 (above gap_tol, as on some MiniLM heads) is as good as an
    # ordinary round's: it is kept and certified; one stopped far from the optimum is refused
    import attnsvm.svm.barrier_grow as bg

    cs = _case(2)
    real = bg.nuclear_ipm_grow

    def stalled(*a, **k):
        res, subset = real(*a, **k)
        res.status, res.info["rel_gap"] = "inaccurate", 2e-8
        return res, subset

    monkeypatch.setattr(bg, "nuclear_ipm_grow", stalled)
    out = solve_nuclear_grown(cs, np.ones(cs.N, bool), np.zeros(cs.N), **WS)
    assert out is not None and out[0].certified

    def poor(*a, **k):
        res, subset = real(*a, **k)
        res.status, res.info["rel_gap"] = "inaccurate", 1e-3
        return res, subset

    monkeypatch.setattr(bg, "nuclear_ipm_grow", poor)
    assert solve_nuclear_grown(cs, np.ones(cs.N, bool), np.zeros(cs.N), **WS) is None


def test_rows_violated_late_join_once_instead_of_a_further_round(monkeypatch):
    # on this start the iterate violates a row only once the gap is below 1e-4 (a "late" row) when nearly active rows
    # do not join early (the band of join_with_band, which takes that row in before it is violated: off here)
    monkeypatch.setattr("attnsvm.svm.barrier_grow.JOIN_BAND_SHARE", 0.0)
    cs = _case(0)
    start = np.zeros(cs.N, bool)
    start[: cs.N // 5] = True
    dense = solve_nuclear(cs)
    left, subset0, _, _ = _grow(cs, start, limits=GrowthLimits(late_joins=0))
    assert left.info["stopped"] == "rows left to join" and left.info["late_joins"] == 0
    res, subset, W, lam = _grow(cs, start)                 # default: one late join
    assert res.status == "optimal" and "stopped" not in res.info
    assert res.info["late_joins"] == 1 and subset.sum() > subset0.sum()
    cert, _ = nuclear_certificate(cs, W, lam)
    # the run now holds for all N rows: no further round is needed
    assert cert.max_violation <= 1e-9 and cert.duality_gap <= 1e-8
    assert _rel(float(np.linalg.svd(W, compute_uv=False).sum()), dense.norm_value) <= 1e-8


@pytest.mark.parametrize("case_seed, perturbations", [(3, range(8)), (4, range(1))])
def test_the_all_rows_start_converges_under_rounding_level_perturbations(case_seed, perturbations):
    # started from all rows without a primal start, the iterate violates every row by 1/2 for a dozen iterations; a
    # relative change of 1e-14 in the rows must not decide whether the run converges (it stalled at a gap of ~0.3 on
    # some of these when the merit came from the clean-up's regularized solve over hundreds of violated rows)
    cs = _case(case_seed, n=40)
    dense = solve_nuclear(cs)
    cs_n, sc = cs.normalized()
    for p in perturbations:
        rng = np.random.default_rng(p)
        U = cs_n.U * (1.0 + 1e-14 * rng.standard_normal(cs_n.U.shape)) if p else cs_n.U
        res, subset = nuclear_ipm_grow(U, cs_n.V, cs_n.rhs, cs_n.is_equality, np.ones(cs.N, bool),
                                       settings=SolverSettings(gap_tol=1e-9))
        assert res.status == "optimal", (p, res.info.get("stopped"), res.info["rel_gap"])
        W = sc.W(res.W)
        cert, _ = nuclear_certificate(cs, W, sc.lam(res.lam, "norm"))
        assert cert.max_violation <= 1e-9 and cert.duality_gap <= 1e-8
        assert _rel(float(np.linalg.svd(W, compute_uv=False).sum()), dense.norm_value) <= 1e-8


def test_the_merit_of_a_far_infeasible_iterate_is_its_own_not_a_clean_up(monkeypatch):
    # the least-norm clean-up repairs rounding-level violations near the end (|gap| <= 10 tol); at the all-rows start
    # (M = 0: every row violated by 1/2, the gap far below -10 tol) the merit is the iterate's violation itself
    from attnsvm.svm.ipm import driver as ipm_driver
    from attnsvm.svm.ipm import problem as ipm_problem

    cs = _case(3, n=40)
    cs_n, _ = cs.normalized()
    red = ipm_problem.reduce_problem(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality, {})
    pb = red.pb
    x = ipm_problem.Iterate(*ipm_problem.start_point(pb, None, None))
    du = ipm_problem.Dual(pb.A, pb.Bm, x.lam)
    calls = []
    real = ipm_driver.clean_primal
    monkeypatch.setattr(ipm_driver, "clean_primal", lambda *a: calls.append(1) or real(*a))
    best, merit, mu, (nuc, dobj, gap, viol) = ipm_driver.measure(pb, x, du, None, 1e-9, 1e-10)
    assert gap < -1.0 and not calls
    assert viol == pytest.approx(0.5, rel=1e-12) and merit == viol == best[0]
    # within 10 tol of a zero gap the clean-up runs (tol = 1 here puts this iterate's gap inside)
    ipm_driver.measure(pb, x, du, None, 1.0, 1e-10)
    assert calls
