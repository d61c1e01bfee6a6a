"""What the nuclear working set reports about its rounds (issue 28's measurements read these fields):
per-round subset sizes and interior-point iterations, the first set and how much of the final support it held."""

import numpy as np
import pytest

from attnsvm.generators import planted_problem
from attnsvm.svm import att_constraints
from attnsvm.svm.working_set import solve_frobenius_ws, solve_nuclear_ws


def _case(seed, n=40, T=16, d=6):
    pr, sel, _ = planted_problem(n, T, d, seed=seed)
    return att_constraints(pr.X, pr.Z, sel)


def _check_fields(cs, sol):
    info = sol.info
    assert sol.certified
    assert len(info["round_sizes"]) == len(info["round_iterations"]) == info["rounds"] >= 1
    assert sum(info["round_iterations"]) == info["ipm_iterations"] and min(info["round_iterations"]) > 0
    assert info["round_sizes"][-1] == info["working_set"] <= info["max_working_set"]
    # the first set, recomputed: the Frobenius support and the equality rows
    fro = solve_frobenius_ws(cs)
    first = (fro.duals != 0) | cs.is_equality
    assert info["first_set"] == int(first.sum())
    # the support, recomputed from the returned multipliers (zero outside the final subset)
    lam = np.abs(sol.duals)
    sup = lam > 1e-9 * lam.max()
    assert info["support"] == int(sup.sum()) > 0
    assert info["support_in_first_set"] == int((sup & first).sum())


@pytest.mark.parametrize("seed", [2, 5])
def test_grown_first_round_reports_its_round(seed):
    cs = _case(seed)
    sol = solve_nuclear_ws(cs)
    assert sol.info["grown_first_round"] is True
    _check_fields(cs, sol)


def test_ordinary_rounds_report_each_round(monkeypatch):
    cs = _case(3, n=60)
    monkeypatch.setattr("attnsvm.svm.nuclear.solve_nuclear_grown", lambda *a, **k: None)
    sol = solve_nuclear_ws(cs, batch=4)           # few rows per round: several rounds
    assert sol.info["grown_first_round"] is False and sol.info["rounds"] >= 2
    _check_fields(cs, sol)
