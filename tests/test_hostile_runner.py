"""Hostile runner: lock order, temporary names, folders behind links, tasks that end badly, a killed main process.

Each case was tried against the runner before its fix and hung, deleted a user's file, wrote into another
folder, or ended the sweep silently; the subprocess cases run under a time limit, so a hang fails the test.
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from attnsvm import _files, runner
from attnsvm.runner import run_experiment, run_experiments

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TESTS)
from test_reproduce_pool import PoolToy, PoolToyConfig  # noqa: E402


class RunnerToyConfig(PoolToyConfig):
    pass


class RunnerToy(PoolToy):
    """The pool's toy (seeded rows, three tasks of two runs) under its own name."""

    name = "runner-toy"
    title = "runner toy"
    Config = RunnerToyConfig


def _script(tmp_path, name: str, body: str):
    """A script that registers two toy experiments (lock-a, lock-b) and runs ``body`` under a __main__ guard."""
    path = tmp_path / name
    path.write_text(textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, {tests!r})
        from test_hostile_runner import RunnerToy
        from attnsvm.experiments.base import register
        from attnsvm import runner

        @register
        class A(RunnerToy):
            name = "lock-a"

        @register
        class B(RunnerToy):
            name = "lock-b"

        """).format(tests=TESTS) + textwrap.dedent(body))
    return path


def _python(script, timeout=120, **kw):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=env, **kw)


# ------------------------------------------------------------------ locks
OPPOSITE_ORDER = """
from attnsvm.runner import folders
real_open_lock = folders.open_lock

def slow_open_lock(path):  # widen the window between taking one experiment's lock and the next
    fh = real_open_lock(path)
    time.sleep(1.0)
    return fh

folders.open_lock = slow_open_lock  # where the runner opens its locks
if __name__ == "__main__":
    from attnsvm.cli import main
    while not os.path.exists({go!r}):  # both runs take their first lock at the same moment
        time.sleep(0.01)
    main(["reproduce", "--workers", "1", "--out", {out!r}, {only}])
"""


def test_two_runs_with_opposite_only_orders_do_not_deadlock(tmp_path):
    """Before: each run held its first experiment's lock and waited forever for the other's."""
    out, go = str(tmp_path / "out"), str(tmp_path / "go")
    procs = []
    for k, order in enumerate((("lock-a", "lock-b"), ("lock-b", "lock-a"))):
        only = ", ".join(f'"--only", "{n}"' for n in order)
        script = _script(tmp_path, f"run{k}.py", OPPOSITE_ORDER.format(go=go, out=out, only=only))
        env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env))
    time.sleep(0.5)
    open(go, "w").close()
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=150))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert [p.returncode for p in procs] == [0, 0], outs
    for name in ("lock-a", "lock-b"):
        assert os.path.exists(os.path.join(out, name, "checks.json"))
    # the run that took the first lock computed both experiments, the other waited and reused their shards
    text = outs[0][0] + outs[1][0]
    for name in ("lock-a", "lock-b"):
        assert text.count(f"{name}: 3 task(s) (3 computed") == 1 and text.count(f"{name}: 3 task(s) (0 computed, 3 resumed") == 1
        assert any("waiting for it to finish" in o[1] for o in outs)


def test_the_same_only_twice_runs_it_once(tmp_path):
    """Before: `--only X --only X` waited forever on its own lock."""
    out = str(tmp_path / "out")
    script = _script(tmp_path, "twice.py", f"""
        if __name__ == "__main__":
            from attnsvm.cli import main
            main(["reproduce", "--workers", "1", "--out", {out!r}, "--only", "lock-a", "--only", "lock-a"])
        """)
    r = _python(script, timeout=150)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("lock-a: 3 task(s) (3 computed") == 1, r.stdout


def test_run_experiments_refuses_one_experiment_twice(tmp_path):
    toy = RunnerToy()
    with pytest.raises(ValueError, match="'runner-toy' is listed 2 times"):
        run_experiments([(toy, toy.Config()), (toy, toy.Config(runs=4))], str(tmp_path), workers=1, progress=False)
    assert not os.path.exists(tmp_path / "runner-toy")  # refused before anything was written


HOLDER = """
import fcntl, os, sys, time
fh = open(sys.argv[1], "a+b")
fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
fh.seek(0); fh.truncate(); fh.write(str(os.getpid()).encode()); fh.flush()
print("held", flush=True)
time.sleep(120)
"""


def test_waiting_for_another_runs_lock_times_out_naming_its_pid(tmp_path):
    """Before: a run waited without limit for the lock of a run that never ends."""
    toy = RunnerToy()
    expdir = tmp_path / "runner-toy"
    expdir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(expdir / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        with pytest.raises(runner.LockError, match=rf"in use by another run \(pid {holder.pid}\).*1 s") as info:
            run_experiment(toy, toy.Config(), str(tmp_path), progress=False, lock_timeout=1.0)
        assert time.monotonic() - start < 30
        assert "\n" not in str(info.value)
        with pytest.raises(runner.LockError, match=rf"pid {holder.pid}"):
            run_experiments([(toy, toy.Config())], str(tmp_path), workers=1, progress=False, lock_timeout=0.5)
    finally:
        holder.kill()
        holder.wait()
    assert run_experiment(toy, toy.Config(), str(tmp_path), progress=False, lock_timeout=1.0).ok


def test_lock_timeout_is_validated(tmp_path):
    toy = RunnerToy()
    for bad in (0, -1.0, float("nan"), "5"):
        with pytest.raises(ValueError, match="--lock-timeout"):
            run_experiment(toy, toy.Config(), str(tmp_path), progress=False, lock_timeout=bad)


# ------------------------------------------------------- temporary files
def test_stale_temporary_cleanup_keeps_a_users_files(tmp_path):
    """Before: the clean-up removed every `*.tmp-*` name, a user's `analysis.tmp-notes.txt` included."""
    toy = RunnerToy()
    cfg = toy.Config()
    summary = run_experiment(toy, cfg, str(tmp_path), progress=False)
    sharddir = os.path.join(summary.outdir, "shards", runner.config_hash(cfg))
    users = [os.path.join(summary.outdir, "analysis.tmp-notes.txt"), os.path.join(sharddir, "notes.tmp-1"),
             os.path.join(summary.outdir, "meta.json.tmp-123-0a1b2c3d")]
    for path in users:
        open(path, "w").write("mine\n")
    stale = [_files.temp_name(os.path.join(summary.outdir, "meta.json")),
             _files.temp_name(os.path.join(sharddir, "seeds-000.parquet"))]
    for path in stale:
        open(path, "wb").write(b"half")
    assert run_experiment(toy, cfg, str(tmp_path), progress=False).ok
    assert [open(p).read() for p in users] == ["mine\n"] * len(users)
    assert not any(os.path.exists(p) for p in stale)


def test_temporary_names_carry_the_marker_and_a_random_token(tmp_path):
    a, b = (_files.temp_name(str(tmp_path / "x.parquet")) for _ in range(2))
    assert a != b and _files.is_temp_name(os.path.basename(a)) and _files.is_temp_name(os.path.basename(b))
    for name in ("analysis.tmp-notes.txt", "x.parquet.tmp-123-0a1b2c3d", "x.tmp-attnsvm-1-short"):
        assert not _files.is_temp_name(name)


# ------------------------------------------------------- folders behind links
def _snapshot(folder) -> dict:
    """Every path under ``folder`` with its bytes (folders: None)."""
    out = {}
    for d, dirs, files in os.walk(folder):
        for name in dirs:
            out[os.path.relpath(os.path.join(d, name), folder)] = None
        for name in files:
            path = os.path.join(d, name)
            out[os.path.relpath(path, folder)] = open(path, "rb").read()
    return out


def _victim(tmp_path):
    victim = tmp_path / "victim"
    (victim / "shards").mkdir(parents=True)
    for name in ("checks.json", "meta.json", "results.parquet", "notes.tmp-attnsvm-1-" + "0" * 32):
        (victim / name).write_text(f"precious {name}\n")
    return victim


@pytest.mark.parametrize("where", ["runner-toy", "runner-toy/shards", "runner-toy/shards/HASH"])
def test_a_folder_under_the_run_root_that_is_a_link_is_refused_and_the_victim_untouched(tmp_path, where):
    """Before: OUT/NAME as a link into another folder was followed: its checks.json and meta.json were replaced."""
    toy = RunnerToy()
    cfg = toy.Config()
    victim = _victim(tmp_path)
    before = _snapshot(victim)
    out = tmp_path / "out"
    link = out / where.replace("HASH", runner.config_hash(cfg))
    link.parent.mkdir(parents=True)
    os.symlink(victim, link)
    for call in (lambda: run_experiment(toy, cfg, str(out), progress=False),
                 lambda: run_experiments([(toy, cfg)], str(out), workers=1, progress=False)):
        with pytest.raises(runner.StorageError, match=rf"{link}.* is a symbolic link .*refused") as info:
            call()
        assert "\n" not in str(info.value)
        assert _snapshot(victim) == before and os.path.islink(link)


def test_the_run_root_itself_may_be_a_link(tmp_path):
    toy = RunnerToy()
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "out")
    assert run_experiment(toy, toy.Config(), str(tmp_path / "out"), progress=False).ok
    assert (tmp_path / "real" / "runner-toy" / "checks.json").exists()


def test_the_cli_refuses_an_experiment_folder_behind_a_link_in_one_line(tmp_path):
    from conftest import attnsvm_cli

    victim = _victim(tmp_path)
    before = _snapshot(victim)
    (tmp_path / "out").mkdir()
    os.symlink(victim, tmp_path / "out" / "mm-loss-functions")
    r = attnsvm_cli("run", "mm-loss-functions", "--quick", "--out", str(tmp_path / "out"), timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "symbolic link" in r.stderr, r.stderr
    assert _snapshot(victim) == before


# ------------------------------------------------------- tasks that end badly
class Tagged:
    """An object pyarrow cannot store (a column of these is not a table of numbers)."""

    def __init__(self, tag):
        self.tag = tag


class EndConfig(PoolToyConfig):
    #: how the task of seed 2 (task seeds-002) ends
    end: str = "table"


class EndToy(PoolToy):
    """The pool's toy whose task seeds-002 ends as ``config.end`` says."""

    name = "end-toy"
    title = "end toy"
    Config = EndConfig

    def run_task(self, config, task):
        if 2 in task.params["seeds"]:
            if config.end == "exit0":
                raise SystemExit(0)
            if config.end == "exit3":
                sys.exit(3)
            if config.end == "interrupt":
                raise KeyboardInterrupt
            if config.end in ("objects", "dicts"):
                values = [Tagged(s) for s in task.params["seeds"]] if config.end == "objects" else \
                    [{"tag": "run", "seed": s} for s in task.params["seeds"]]
                return pd.DataFrame({"seed": task.params["seeds"], "value": values})
        return super().run_task(config, task)


ENDS = {"exit0": "SystemExit", "exit3": "SystemExit", "interrupt": "KeyboardInterrupt", "objects": "cannot store",
        "dicts": "cannot store"}


@pytest.mark.parametrize("workers", [1, None], ids=["one-process", "pool"])
@pytest.mark.parametrize("end", sorted(ENDS))
def test_a_task_that_ends_badly_is_that_tasks_failure_and_the_others_finish(tmp_path, end, workers):
    """Before: SystemExit(0) ended the sweep (exit 0, 2 of 6 tasks stored, no failure), KeyboardInterrupt stopped it
    as a Ctrl-C, a column of objects was an ArrowInvalid traceback after the work, and a column of dicts was stored
    as a struct with "ok": true."""
    if workers is None and (os.cpu_count() or 1) < 2:
        pytest.skip("a pool needs 2 CPUs")
    toy = EndToy()
    (summary,) = run_experiments([(toy, toy.Config(end=end))], str(tmp_path), workers=workers, progress=False)
    assert [f["key"] for f in summary.failed] == ["seeds-002"], summary.failed
    assert ENDS[end] in summary.failed[0]["error"]
    assert summary.computed == 2 and not summary.ok
    table = pd.read_parquet(tmp_path / "end-toy" / "results.parquet")
    assert sorted(table["seed"]) == [0, 1, 4, 5]
    failures = json.load(open(tmp_path / "end-toy" / "failures.json"))
    assert [f["key"] for f in failures] == ["seeds-002"]


def test_a_real_ctrl_c_still_interrupts_the_one_process_run(tmp_path):
    """The guard above tells a task's own KeyboardInterrupt from a SIGINT: a SIGINT during a task is Ctrl-C."""
    import signal

    class Sigint(PoolToy):
        name = "sigint-toy"

        def run_task(self, config, task):
            if 2 in task.params["seeds"]:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
            return super().run_task(config, task)

    toy = Sigint()
    with pytest.raises(runner.RunInterrupted, match="1 finished task"):
        run_experiments([(toy, toy.Config())], str(tmp_path), workers=1, progress=False)


def test_the_cli_exits_1_when_a_pooled_task_raises_systemexit_0(tmp_path):
    """Before: `reproduce` exited 0 with 2 of 6 tasks stored and no failure recorded."""
    out = str(tmp_path / "out")
    script = _script(tmp_path, "exit0.py", f"""
        from test_hostile_runner import EndToy, EndConfig

        class Exit0Config(EndConfig):
            end: str = "exit0"

        @register
        class Exit0(EndToy):
            name = "exit0-toy"
            Config = Exit0Config

        if __name__ == "__main__":
            from attnsvm.cli import main
            main(["reproduce", "--out", {out!r}, "--only", "exit0-toy"])
        """)
    r = _python(script, timeout=200)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "FAILED task seeds-002" in r.stderr and "SystemExit" in r.stderr and "Traceback" not in r.stderr
    assert "exit0-toy: 3 task(s) (2 computed, 0 resumed, 1 failed)" in r.stdout


def test_a_skipped_json_that_is_a_folder_is_refused_before_any_work(tmp_path):
    """Before: reproduce computed everything, then stopped with an OSError traceback and wrote no report."""
    from conftest import attnsvm_cli

    (tmp_path / "skipped.json").mkdir()
    r = attnsvm_cli("reproduce", "--quick", "--workers", "1", "--only", "mm-loss-functions", "--out", str(tmp_path),
                    timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "skipped.json" in r.stderr and "a directory" in r.stderr
    assert not (tmp_path / "mm-loss-functions").exists()  # refused before any work


def test_skipped_json_turned_into_a_folder_during_the_run_keeps_the_report(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    toy = RunnerToy()
    run_experiment(toy, toy.Config(), str(tmp_path), progress=False)

    def replaced(jobs, outdir, **kw):  # the run took place; meanwhile skipped.json became a folder
        (tmp_path / "skipped.json").mkdir()
        return []

    monkeypatch.setattr(runner, "run_experiments", replaced)
    r = CliRunner().invoke(cli, ["reproduce", "--only", "mm-loss-functions", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "skipped.json" in r.output and "a directory" in r.output
    assert (tmp_path / "report.md").exists() and "runner-toy" in (tmp_path / "report.md").read_text()


# ------------------------------------------------------- the pool's processes
def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list:
    """The pids whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return out


class SleepConfig(PoolToyConfig):
    pid_dir: str = ""


class SleepToy(PoolToy):
    """Tasks that say where they run, then sleep for a minute."""

    name = "sleep-toy"
    Config = SleepConfig

    def run_task(self, config, task):
        open(os.path.join(config.pid_dir, str(os.getpid())), "w").close()
        time.sleep(60)
        return super().run_task(config, task)


def _kill_group(p) -> None:
    try:
        os.killpg(p.pid, 9)
    except OSError:
        pass


@pytest.mark.skipif(not os.path.isdir("/proc") or (os.cpu_count() or 1) < 2, reason="Linux /proc and 2 CPUs")
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_a_killed_main_process_leaves_no_pool_worker_behind(tmp_path, sig):
    """Before: after kill -9 or SIGTERM of the main process, the pool's workers and the resource tracker stayed
    alive, idle, indefinitely."""
    import signal

    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "pool.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from test_hostile_runner import SleepToy
        from attnsvm.runner import run_experiments

        if __name__ == "__main__":
            toy = SleepToy()
            run_experiments([(toy, toy.Config(pid_dir={str(pids)!r}))], {str(tmp_path / "out")!r}, progress=False)
        """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    try:
        deadline = time.time() + 150
        while time.time() < deadline and len(os.listdir(pids)) < 2 and p.poll() is None:
            time.sleep(0.1)
        assert len(os.listdir(pids)) == 2, p.communicate(timeout=10) if p.poll() is not None else "no task started"
        children = _children(p.pid)
        workers = [int(x) for x in os.listdir(pids)]
        assert set(workers) <= set(children)
        os.kill(p.pid, getattr(signal, sig))
        p.wait(timeout=30)
        deadline = time.time() + 30
        while time.time() < deadline and any(_alive(c) for c in children):
            time.sleep(0.1)
        assert [c for c in children if _alive(c)] == []  # the workers and the resource tracker
    finally:
        _kill_group(p)
        p.communicate()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a pool needs 2 CPUs")
def test_run_experiments_in_a_script_without_a_main_guard_is_a_clear_error(tmp_path):
    """Before: the spawned workers ran the script again and blocked on the folder lock: the run never ended."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from test_hostile_runner import RunnerToy
        from attnsvm.runner import run_experiments

        toy = RunnerToy()
        run_experiments([(toy, toy.Config())], {str(tmp_path / "out")!r}, progress=False)
        print("finished")
        """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=150)
    finally:
        _kill_group(p)
        if p.poll() is None:
            p.communicate()
    assert p.returncode == 1 and "finished" not in stdout, stderr
    assert stderr.count("Traceback") == 1  # this process's error; the workers exit without one each
    last = stderr.strip().splitlines()[-1]
    assert "AttnSVMError" in last and 'if __name__ == "__main__":' in last, stderr
