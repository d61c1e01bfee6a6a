"""Hostile cases of issue 26: hand-built constraint sets, ``feasible`` only from a certificate, limits
that count everything, a bounded runner.

Before: NaN/inf in U or V of a hand-built ``ConstraintSet`` returned "infeasible" with a Farkas
certificate, NaN/inf in rhs "optimal_inaccurate" (Frobenius) or a cvxpy traceback (nuclear),
mismatched lengths, complex, 3-D and list fields raw numpy/cvxpy tracebacks; ``feasible`` was
True when the working set stopped at ``max_rounds`` / ``time_limit`` on an infeasible problem;
``max_memory`` ignored the d x d solution; ``train(runs=10**7)`` and huge ``steps`` ran into the
machine's memory; ``--workers 1000000`` grew without starting a task; a scheduler without workers
waited forever; ``--set instances=true`` ran with 1 instance and ``--set ds=[]`` ran nothing, exit 0.
"""

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.svm import solve
from attnsvm.svm.constraints import ConstraintSet, att_constraints

rng = np.random.default_rng(26)
U0 = rng.standard_normal((6, 4))
V0 = rng.standard_normal((6, 3))
R0 = np.ones(6)


def _with(U=U0, V=V0, rhs=R0, **kw):
    return dict(U=U, V=V, rhs=rhs, **kw)


def _poke(a, value, where=(1, 1)):
    a = np.array(a, dtype=float)
    a[where[: a.ndim]] = value
    return a


# ------------------------------------------------------------------ constraint sets
BAD_SETS = {
    "nan in U": (_with(U=_poke(U0, np.nan)), "ConstraintSet.U must be finite"),
    "inf in U": (_with(U=_poke(U0, np.inf)), "ConstraintSet.U must be finite"),
    "nan in V": (_with(V=_poke(V0, np.nan)), "ConstraintSet.V must be finite"),
    "-inf in V": (_with(V=_poke(V0, -np.inf)), "ConstraintSet.V must be finite"),
    "nan in rhs": (_with(rhs=_poke(R0, np.nan, (2,))), "ConstraintSet.rhs must be finite"),
    "inf in rhs": (_with(rhs=_poke(R0, np.inf, (2,))), "ConstraintSet.rhs must be finite"),
    "V shorter": (_with(V=V0[:5]), "ConstraintSet.V must have N = 6 rows"),
    "rhs shorter": (_with(rhs=R0[:4]), r"ConstraintSet.rhs must have shape \(N,\) = \(6,\)"),
    "rhs 2-D": (_with(rhs=R0[:, None]), "ConstraintSet.rhs must have shape"),
    "complex U": (_with(U=U0 + 1j), "ConstraintSet.U must be real"),
    "complex rhs": (_with(rhs=R0 * (1 + 0j)), "ConstraintSet.rhs must be real"),
    "3-D U": (_with(U=U0[None]), r"ConstraintSet.U must have shape \(N, d1\)"),
    "1-D V": (_with(V=V0[:, 0]), "ConstraintSet.V must have shape"),
    "text U": (_with(U=[["a"] * 4] * 6), "ConstraintSet.U must be a numeric array"),
    "ragged list U": (_with(U=[[1.0, 2.0], [3.0]]), "ConstraintSet.U must be an array"),
    "object U": (_with(U=np.array([[None] * 4] * 6, dtype=object)), "ConstraintSet.U must be a numeric array"),
    "is_equality length": (_with(is_equality=np.zeros(5, bool)), "ConstraintSet.is_equality must have shape"),
    "is_equality values": (_with(is_equality=np.full(6, 0.5)), "ConstraintSet.is_equality must be a boolean"),
    "float labels": (_with(sample=np.zeros(6)), "ConstraintSet.sample must hold integer labels"),
    "label length": (_with(token=np.zeros(3, int)), "ConstraintSet.token must have shape"),
    "label below -1": (_with(other=np.full(6, -2)), "ConstraintSet.other must hold labels >= -1"),
    "label outside shape": (_with(sample=np.arange(6), shape=(3, 2)), "ConstraintSet.sample holds sample 5"),
    "bad shape": (_with(shape=(3,)), "ConstraintSet.shape must be a pair"),
    "bad kind": (_with(kind=3), "ConstraintSet.kind must be a non-empty string"),
}


@pytest.mark.parametrize("case", list(BAD_SETS))
def test_bad_hand_built_set_is_a_clear_error_naming_the_field(case):
    kwargs, match = BAD_SETS[case]
    with pytest.raises(ValidationError, match=match):
        ConstraintSet(**kwargs)


@pytest.mark.parametrize("case", ["nan in U", "nan in V", "inf in rhs"])
@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_solve_never_answers_for_a_set_changed_after_it_was_built(case, norm):
    """A set whose arrays were replaced or edited after validation (object.__setattr__, writeable flag
    turned back on) is re-verified by solve: a clear error, never "infeasible" or "optimal_inaccurate"."""
    cs = ConstraintSet(U0, V0, R0)
    kwargs, match = BAD_SETS[case]
    field = match.split()[0].split(".")[1]
    object.__setattr__(cs, field, np.asarray(kwargs[field], dtype=float))
    with pytest.raises(ValidationError, match=match):
        solve(cs, norm)
    cs2 = ConstraintSet(U0, V0, R0)
    arr = getattr(cs2, field)
    arr.flags.writeable = True
    arr[(1, 1)[: arr.ndim]] = np.nan
    with pytest.raises(ValidationError, match=f"ConstraintSet.{field} must be finite"):
        solve(cs2, norm)


def test_lists_are_converted_and_solve_like_arrays():
    a = solve(ConstraintSet(U0.tolist(), V0.tolist(), R0.tolist()))
    b = solve(ConstraintSet(U0, V0, R0))
    assert a.status == b.status == "optimal"
    assert np.array_equal(a.W, b.W)
    assert ConstraintSet(U0, V0, R0).shape == (6, 1)        # no labels: one row per "sample"


def test_the_set_owns_read_only_copies():
    U = U0.copy()
    cs = ConstraintSet(U, V0, R0)
    U[:] = np.nan                                             # the caller's array: never the set's
    assert np.all(np.isfinite(cs.U)) and not cs.U.flags.writeable
    assert solve(cs).status == "optimal"


def test_the_builders_keep_their_labels_and_rebuilding_a_set_validates_it():
    X = rng.standard_normal((3, 4, 5))
    Z = rng.standard_normal((3, 5))
    cs = att_constraints(X, Z, np.zeros(3, int))
    again = ConstraintSet(cs.U, cs.V, cs.rhs, cs.is_equality, cs.sample, cs.query, cs.token, cs.other, cs.kind,
                          cs.shape)
    assert again.shape == (3, 4) and np.array_equal(again.token, cs.token)
    assert np.allclose(solve(again).W, solve(cs).W, rtol=0, atol=1e-12)
    with pytest.raises(ValidationError, match="ConstraintSet.token"):
        ConstraintSet(cs.U, cs.V, cs.rhs, cs.is_equality, cs.sample, cs.query, cs.token + 4, cs.other, cs.kind,
                      cs.shape)


@pytest.mark.parametrize("not_a_set", [None, {"U": U0}, (U0, V0, R0)])
def test_solve_refuses_what_is_not_a_set(not_a_set):
    with pytest.raises(ValidationError, match="constraints must be a ConstraintSet"):
        solve(not_a_set)


# ------------------------------------------------------------------ feasible only from a certificate
def _infeasible_late_set(N=120, d=6):
    """N feasible rows of size ~1, then a contradicting pair (u, -u, rhs 1) of size 100: a working set that
    starts from W = 0 picks the large rows last (smallest relative violation), so it meets the
    contradiction only after several rounds."""
    U = rng.standard_normal((N, d))
    V = np.tile(rng.standard_normal(d), (N, 1))
    u = 100 * rng.standard_normal(d)
    U = np.vstack([U, u, -u])
    V = np.vstack([V, 100 * V[:2]])
    return ConstraintSet(U, V, np.ones(N + 2))


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
@pytest.mark.parametrize("stop", [{"max_rounds": 1, "batch": 4}, {"time_limit": 1e-9}])
def test_working_set_stopped_on_an_infeasible_problem_is_not_feasible(norm, stop):
    cs = _infeasible_late_set()
    full = solve(cs, "fro", method="working_set")
    assert full.status == "infeasible" and full.certificate.farkas is not None     # the problem is infeasible
    sol = solve(cs, norm, method="working_set", **stop)
    assert not sol.feasible and not sol.certified, sol.status
    if norm == "nuclear" and "max_rounds" in stop:      # max_rounds bounds the nuclear rounds, not the Frobenius
        assert sol.status == "infeasible"                  # phase that decides feasibility: a Farkas certificate
        return
    assert sol.info.get("stopped") in ("round limit", "time limit")
    assert sol.status == "undecided" and sol.norm == norm and np.isnan(sol.min_margin)


def test_working_set_stopped_on_a_feasible_problem_claims_only_what_its_margins_show():
    X = rng.standard_normal((40, 6, 12))
    Z = rng.standard_normal((40, 12))
    cs = att_constraints(X, Z, np.zeros(40, int))
    stopped = solve(cs, "fro", method="working_set", max_rounds=1, batch=3)
    assert stopped.status == "undecided" and not stopped.feasible          # rows still violated: not proven
    assert stopped.certificate.max_violation > 1e-8
    done = solve(cs, "fro", method="working_set")
    assert done.status == "optimal" and done.feasible


def test_cli_prints_an_undecided_solution_without_a_farkas_line():
    from attnsvm.cli.solve import format_solution

    text = format_solution(solve(_infeasible_late_set(), "fro", method="working_set", max_rounds=1, batch=4))
    assert "status        undecided" in text and "stopped (round limit)" in text and "Farkas multipliers" not in text
