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


def test_training_estimate_counts_the_checkpoint_buffers():
    """The estimate holds at least the checkpoint buffers a multi-run result keeps twice (checkpoint-major
    and run-major), and grows with what grows the state (KQ's products, Adam's moments). Measured peaks
    against the estimates: benchmarks/memory_estimates.py."""
    from attnsvm.training.checks import training_bytes

    C, R, n, T, d = 11, 4, 6, 8, 30
    buffers = C * R * 8 * (2 + n * T + d * d)              # loss, grad norm, attention, W at each checkpoint
    assert training_bytes(R, n, T, d, "W", d, C, 100, "ngd") >= 2 * buffers
    assert training_bytes(R, n, T, d, "KQ", d, C, 100, "ngd") > training_bytes(R, n, T, d, "W", d, C, 100, "ngd")
    assert training_bytes(R, n, T, d, "W", d, C, 100, "adam") > training_bytes(R, n, T, d, "W", d, C, 100, "ngd")


# ------------------------------------------------------------------ a bounded runner
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import cloudpickle  # noqa: E402
import pandas as pd  # noqa: E402
from pydantic import PositiveInt  # noqa: E402

from attnsvm.experiments import Experiment, ExperimentConfig, Task, check  # noqa: E402
from attnsvm.runner import SchedulerError, max_workers, run_experiment  # noqa: E402


class GuardConfig(ExperimentConfig):
    seeds: list[PositiveInt] = [1, 2, 3, 4]
    sleep: float = 0.0


class GuardToy(Experiment):
    name = "guard-toy"
    title = "runner guard toy"
    Config = GuardConfig

    def tasks(self, config):
        return [Task(f"seed-{s:03d}", 1, {"seed": s}) for s in config.seeds]

    def run_task(self, config, task):
        time.sleep(config.sleep)
        return pd.DataFrame([{"seed": task.params["seed"], "value": float(task.params["seed"]) ** 2}])

    def checks(self, config, table):
        return [check("runs stored", len(table), "==", len(config.seeds), source="test", reason="every run")]


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_workers_are_capped_with_a_clear_error(tmp_path):
    toy = GuardToy()
    cap = max_workers()
    assert cap == 4 * (os.cpu_count() or 1)
    with pytest.raises(ValidationError, match=f"--workers must be at most {cap} .*--scheduler"):
        run_experiment(toy, toy.Config(), str(tmp_path / "out"), progress=False, workers=cap + 1)
    with pytest.raises(ValidationError, match="--workers must be at most"):
        run_experiment(toy, toy.Config(), str(tmp_path / "out"), progress=False, workers=1000000)
    assert not (tmp_path / "out").exists()                      # refused before anything was written


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "5", True])
def test_worker_timeout_is_validated(tmp_path, value):
    toy = GuardToy()
    with pytest.raises(ValidationError, match="--worker-timeout"):
        run_experiment(toy, toy.Config(), str(tmp_path), progress=False, worker_timeout=value)


def test_scheduler_without_workers_fails_after_the_worker_timeout(tmp_path):
    from dask.distributed import LocalCluster

    toy = GuardToy()
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        t0 = time.time()
        with pytest.raises(SchedulerError, match="has no worker after --worker-timeout 1 s") as info:
            run_experiment(toy, toy.Config(), str(tmp_path / "out"), progress=False, scheduler=address,
                           worker_timeout=1.0, connect_timeout=10)
        elapsed = time.time() - t0
    assert address in str(info.value) and "\n" not in str(info.value)
    assert elapsed < 1.0 + 10.0, elapsed                        # the stated wait plus slack; never forever


_SCHEDULER = """
import sys, time
from dask.distributed import LocalCluster
cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                       protocol="tcp://", host="127.0.0.1")
print(cluster.scheduler_address, flush=True)
time.sleep(600)
"""


def test_lost_scheduler_is_one_clear_error_that_keeps_the_shards(tmp_path, capfd):
    here = os.path.dirname(os.path.abspath(__file__))       # the scheduler unpickles this module's toy
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", _SCHEDULER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    try:
        address = proc.stdout.readline().strip()
        assert address.startswith("tcp://"), address
        toy = GuardToy()
        cfg = toy.Config(sleep=0.5)
        out = tmp_path / "out"

        def kill_scheduler(key):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)        # scheduler and worker die after the first stored shard

        with pytest.raises(SchedulerError) as info:
            run_experiment(toy, cfg, str(out), progress=False, scheduler=address, task_hook=kill_scheduler,
                           connect_timeout=10, worker_timeout=30)
        msg = str(info.value)
        assert msg.startswith(f"lost the Dask scheduler at {address!r}") and "run the same command to resume" in msg
        assert "1 finished task(s) are kept" in msg and "\n" not in msg
        shards = list(out.glob("guard-toy/shards/*/*.parquet"))
        assert len(shards) == 1                          # the finished shard is kept
        time.sleep(1.0)                                  # give distributed's reconnect loop time to log, if it would
        err = capfd.readouterr().err
        assert "Traceback" not in err, err[-2000:]
        resumed = run_experiment(toy, cfg, str(out), progress=False)       # resume: the stored shard is reused
        assert resumed.resumed == 1 and resumed.computed == 3 and resumed.ok
    finally:
        proc.kill()
        proc.wait(10)


def test_empty_design_is_refused_before_anything_is_written(tmp_path):
    toy = GuardToy()
    with pytest.raises(ValidationError, match="nothing to run"):
        run_experiment(toy, toy.Config(seeds=[]), str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sets, match", [
    (["instances=true"], "instances expects int, got True"),
    (["instances=false"], "instances expects int, got False"),
    (["ds=[2, true]"], r"ds expects list\[int\], got \[2, True\]"),
    (["rng=true"], "rng expects Literal"),
])
def test_set_values_are_type_checked_strictly(sets, match):
    from attnsvm.experiments import build_config, parse_assignments, registry

    exp = registry()["tf-feasibility"]
    with pytest.raises(ValidationError, match=match):
        build_config(exp, quick=True, overrides=parse_assignments(sets))
    assert build_config(exp, quick=True, overrides=parse_assignments(["instances=3"])).instances == 3


@pytest.mark.parametrize("args, match", [
    (["--set", "instances=true"], "instances expects int, got True"),
    (["--set", "ds=[]"], "nothing to run"),
    (["--workers", "1000000"], "--workers must be at most"),
])
def test_cli_run_refuses_in_one_line(tmp_path, args, match):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    res = CliRunner().invoke(cli, ["run", "tf-feasibility", "--quick", "--out", str(tmp_path / "o"), *args])
    assert res.exit_code == 2 and res.exception is None or isinstance(res.exception, SystemExit), res.output
    text = res.output.strip()
    assert text.startswith("attnsvm: error:") and "\n" not in text and match in text, text
    assert not (tmp_path / "o").exists()
