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


# ------------------------------------------------------------------ limits that count everything
def _wide_set(d=20000, N=5):
    r = np.random.default_rng(5)
    return ConstraintSet(r.standard_normal((N, d)), r.standard_normal((N, d)), np.ones(N))


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_max_memory_counts_the_d_by_d_solution(norm):
    from attnsvm.errors import ResourceLimitError

    cs = _wide_set()                           # N = 5: the N x N work is nothing, W alone is 3.2 GB
    with pytest.raises(ResourceLimitError, match=r"the 20000 x 20000 solution W .* more than the memory limit"):
        solve(cs, norm, max_memory="100M")
    with pytest.raises(ResourceLimitError, match="20000 x 20000 solution W"):
        solve(cs, norm, C=1.0, max_memory="100M")        # the soft margin too


def test_max_memory_counts_the_solution_of_the_problem_solvers():
    from attnsvm import TokenProblem
    from attnsvm.errors import ResourceLimitError
    from attnsvm.svm import solve_gen_svm, solve_soft_svm, solve_svm, solve_svm_batch

    r = np.random.default_rng(6)
    p = TokenProblem(r.standard_normal((1, 5, 20000)), r.standard_normal((1, 20000)))
    for call in (lambda: solve_svm(p, [0], max_memory="100M"),
                 lambda: solve_gen_svm(p, np.eye(5, dtype=bool)[:1], max_memory="100M"),
                 lambda: solve_soft_svm(p, [0], 1.0, max_memory="100M"),
                 lambda: solve_svm_batch([p, p], select=[[0], [0]], max_memory="100M")):
        with pytest.raises(ResourceLimitError, match="20000 x 20000 solution W"):
            call()
    small = TokenProblem(r.standard_normal((3, 4, 8)), r.standard_normal((3, 8)))
    assert solve_svm(small, [0, 1, 2], max_memory="100M").status == "optimal"      # no false refusal


def test_cli_solve_of_a_small_file_with_a_huge_d_is_refused_not_killed(tmp_path):
    import os
    import subprocess
    import sys

    from attnsvm import TokenProblem

    r = np.random.default_rng(7)
    path = tmp_path / "wide.npz"
    TokenProblem(r.standard_normal((1, 5, 20000)), r.standard_normal((1, 20000)), Y=[1.0],
                 v=r.standard_normal(20000)).save(path)
    assert os.path.getsize(path) < 1.2e6                   # a ~1 MB file (X 800 KB, Z and v 160 KB each)
    env = dict(os.environ, ATTNSVM_MAX_MEMORY="1G", PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "-m", "attnsvm", "solve", str(path)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("attnsvm: error: ") and "20000 x 20000 solution W" in out.stderr
    assert "ATTNSVM_MAX_MEMORY" in out.stderr


def test_training_counts_its_run_buffers(monkeypatch):
    from attnsvm.errors import ResourceLimitError
    from attnsvm.generators import random_problem
    from attnsvm.training import train, train_sequence

    monkeypatch.setenv("ATTNSVM_MAX_MEMORY", "8G")
    p = random_problem(6, 8, 10, seed=0)
    with pytest.raises(ResourceLimitError, match=r"10000000 run\(s\)"):
        train(p, runs=10**7)                                 # refused before the runs are stacked
    with pytest.raises(ResourceLimitError, match="100000001 checkpoints"):
        train(p, steps=10**8, record_every=1)
    with pytest.raises(ResourceLimitError, match=f"{2**63} steps"):
        train(p, steps=2**63)
    wide = random_problem(6, 8, 3000, seed=0)
    with pytest.raises(ResourceLimitError, match=r"param KQ\) needs about .* more than the memory limit 2.0 GiB"):
        train(wide, param="KQ", max_memory="2G")
    X = np.random.default_rng(0).standard_normal((4, 8, 5))
    with pytest.raises(ResourceLimitError, match="sequence training"):
        train_sequence(X, np.ones((4, 8)), np.ones(5), steps=10**8, record_every=1)
    assert train(p, steps=20, max_memory="100M").W.shape == (1, 3, 10, 10)       # no false refusal


def test_training_estimate_is_above_the_measured_peak():
    """The estimate bounds what a run really holds: its checkpoint buffers alone (allocated, measured
    exactly) fit under it, and it grows with what grows them."""
    from attnsvm.training.checks import training_bytes

    C, R, n, T, d = 11, 4, 6, 8, 30
    buffers = C * R * 8 * (2 + n * T + d * d)              # loss, grad norm, attention, W at each checkpoint
    assert training_bytes(R, n, T, d, "W", d, C, 100, "ngd") >= 2 * buffers
    assert training_bytes(R, n, T, d, "KQ", d, C, 100, "ngd") > training_bytes(R, n, T, d, "W", d, C, 100, "ngd")
    assert training_bytes(R, n, T, d, "W", d, C, 100, "adam") > training_bytes(R, n, T, d, "W", d, C, 100, "ngd")
