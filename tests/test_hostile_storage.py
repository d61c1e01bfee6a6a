"""Hostile storage: crashes, corrupt shards, full disks, concurrent runs, provenance, memory limits.

Every fault is injected (a writer that dies mid-shard, a mocked full disk or read-only
folder, a zero-byte / truncated / foreign shard, two processes on one folder, Ctrl-C) and
the stored results afterwards are compared with a clean run's, exactly.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest
from pydantic import PositiveInt

from attnsvm import __version__
from attnsvm.errors import ResourceLimitError, ValidationError
from attnsvm.experiments import Experiment, ExperimentConfig, Task, check
from attnsvm.report import write_report
from attnsvm.runner import run_experiment
from attnsvm import _files, runner
from attnsvm.runner import storage
from attnsvm.runner import RunInterrupted, StorageError, read_shard
from attnsvm.memory import ENV_VAR


class StoreConfig(ExperimentConfig):
    runs: PositiveInt = 6
    per_task: PositiveInt = 2
    scale: float = 1.0
    log: str = ""


class StoreToy(Experiment):
    name = "store-toy"
    title = "storage toy"
    Config = StoreConfig

    def tasks(self, config):
        seeds = list(range(config.runs))
        return [Task(f"seeds-{c[0]:03d}", len(c), {"seeds": c})
                for c in (seeds[i:i + config.per_task] for i in range(0, len(seeds), config.per_task))]

    def run_task(self, config, task):
        if config.log:
            with open(config.log, "a") as fh:
                fh.write(task.key + "\n")
        rows = [{"seed": s, "value": config.scale * np.random.default_rng(s).standard_normal(),
                 "limit": os.environ.get(ENV_VAR, "")} for s in task.params["seeds"]]
        return pd.DataFrame(rows)

    def checks(self, config, table):
        return [check("runs stored", len(table), "==", config.runs, source="test", reason="every run is stored")]


def _results(expdir) -> pd.DataFrame:
    return pd.read_parquet(os.path.join(expdir, "results.parquet")).sort_values("seed").reset_index(drop=True)


def _clean(tmp_path, **overrides) -> pd.DataFrame:
    toy = StoreToy()
    summary = run_experiment(toy, toy.Config(**overrides), str(tmp_path / "clean"), progress=False)
    assert summary.ok
    return _results(summary.outdir)


def _temp_files(root) -> list:
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if ".tmp-" in f]


def _calls(log) -> list:
    return log.read_text().split() if log.exists() else []


# ------------------------------------------------------------- provenance
def test_each_shard_stores_config_version_and_seeds_and_is_fsynced(tmp_path, monkeypatch):
    toy = StoreToy()
    cfg = toy.Config(scale=2.0)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    summary = run_experiment(toy, cfg, str(tmp_path), progress=False)
    shards = sorted(os.listdir(os.path.join(summary.outdir, "shards", runner.config_hash(cfg))))
    assert shards == ["seeds-000.parquet", "seeds-002.parquet", "seeds-004.parquet"]
    for name, seeds in zip(shards, ([0, 1], [2, 3], [4, 5])):
        table, prov = read_shard(os.path.join(summary.outdir, "shards", runner.config_hash(cfg), name))
        assert prov["config"] == cfg.model_dump(mode="json")
        assert prov["config_hash"] == runner.config_hash(cfg) and prov["version"].startswith(__version__)
        assert prov["seeds"] == seeds and prov["task"] == name[:-len(".parquet")]
        assert sorted(table["seed"]) == seeds
    # shards and the five result files are fsynced before their rename (files, plus their folders)
    assert len(synced) >= 2 * (3 + 5)
    meta = json.loads(open(os.path.join(summary.outdir, "meta.json")).read())
    assert meta["config"] == cfg.model_dump(mode="json")
    assert [p["task"] for p in meta["provenance"]] == ["seeds-000", "seeds-002", "seeds-004"]
    assert [p["seeds"] for p in meta["provenance"]] == [[0, 1], [2, 3], [4, 5]]
    assert all(p["version"].startswith(__version__) for p in meta["provenance"])


def test_killed_run_with_other_settings_does_not_relabel_stored_results(tmp_path):
    """Before: config.yaml was written when a run started, so a killed run with other settings left a
    config beside results it did not produce (a silent wrong answer in the report)."""
    toy = StoreToy()
    out = str(tmp_path / "out")
    run_experiment(toy, toy.Config(scale=1.0), out, progress=False)
    before = _results(os.path.join(out, "store-toy"))

    def die(key):
        raise KeyboardInterrupt

    with pytest.raises(RunInterrupted):
        run_experiment(toy, toy.Config(scale=7.0), out, progress=False, task_hook=die)
    expdir = os.path.join(out, "store-toy")
    assert "scale: 1.0" in open(os.path.join(expdir, "config.yaml")).read()
    meta = json.load(open(os.path.join(expdir, "meta.json")))
    assert meta["config"]["scale"] == 1.0
    pd.testing.assert_frame_equal(_results(expdir), before)
    html, md = write_report(out)
    text = open(md).read()
    assert "scale: 1.0" in text and "scale: 7.0" not in text


# --------------------------------------------------- unreadable shards
@pytest.mark.parametrize("damage", ["zero-bytes", "truncated", "not-parquet", "other-config"])
def test_unreadable_shard_is_recomputed_and_reported(tmp_path, damage):
    toy = StoreToy()
    log = tmp_path / "calls.log"
    cfg = toy.Config(log=str(log))
    out = str(tmp_path / "out")
    first = run_experiment(toy, cfg, out, progress=False)
    sharddir = os.path.join(first.outdir, "shards", runner.config_hash(cfg))
    path = os.path.join(sharddir, "seeds-002.parquet")
    raw = open(path, "rb").read()
    if damage == "zero-bytes":
        open(path, "wb").close()
    elif damage == "truncated":
        open(path, "wb").write(raw[: len(raw) // 2])
    elif damage == "not-parquet":
        open(path, "w").write("this is not parquet\n")
    else:  # a valid shard of another config copied over this one
        other = toy.Config(log=str(log), scale=3.0)
        run_experiment(toy, other, str(tmp_path / "other"), progress=False)
        src = os.path.join(tmp_path, "other", "store-toy", "shards", runner.config_hash(other), "seeds-002.parquet")
        open(path, "wb").write(open(src, "rb").read())
    log.write_text("")
    summary = run_experiment(toy, cfg, out, progress=False)
    assert _calls(log) == ["seeds-002"]
    assert [r["key"] for r in summary.recomputed] == ["seeds-002"] and summary.recomputed[0]["error"]
    assert summary.computed == 1 and summary.resumed == 2 and summary.ok
    assert os.path.exists(path + ".unreadable")
    meta = json.load(open(os.path.join(summary.outdir, "meta.json")))
    assert [r["key"] for r in meta["recomputed_unreadable"]] == ["seeds-002"]
    pd.testing.assert_frame_equal(_results(summary.outdir).drop(columns="limit"),
                                  _clean(tmp_path, log=str(log)).drop(columns="limit"))


def test_stale_temp_files_are_removed(tmp_path):
    toy = StoreToy()
    cfg = toy.Config()
    summary = run_experiment(toy, cfg, str(tmp_path), progress=False)
    sharddir = os.path.join(summary.outdir, "shards", runner.config_hash(cfg))
    for path in (_files.temp_name(os.path.join(sharddir, "seeds-000.parquet")),
                 _files.temp_name(os.path.join(summary.outdir, "meta.json"))):
        open(path, "wb").write(b"half a file")
    run_experiment(toy, cfg, str(tmp_path), progress=False)
    assert _temp_files(tmp_path) == []


# -------------------------------------------------------- write faults
def _failing_write(fail_on: str, err: int, after: int = 0):
    """A ``_write_all`` that writes half of the data, then fails like a full disk or read-only folder
    for a file whose name contains ``fail_on`` (from its ``after``+1-th such write on)."""
    seen = {"n": 0}
    real = storage._write_all

    def write(fh, data):
        if fail_on in os.path.basename(fh.name):
            seen["n"] += 1
            if seen["n"] > after:
                fh.write(data[: len(data) // 2])
                raise OSError(err, os.strerror(err))
        real(fh, data)

    return write


def test_disk_full_mid_shard_keeps_stored_shards_and_resumes_exactly(tmp_path, monkeypatch):
    toy = StoreToy()
    log = tmp_path / "calls.log"
    cfg = toy.Config(log=str(log))
    out = str(tmp_path / "out")
    monkeypatch.setattr(storage, "_write_all", _failing_write(".parquet", errno.ENOSPC, after=1))
    with pytest.raises(StorageError) as info:
        run_experiment(toy, cfg, out, progress=False)
    msg = str(info.value)
    assert "\n" not in msg and "No space left on device" in msg and "seeds-002.parquet" in msg
    assert "1 finished task(s) are kept" in msg and "run the same command again" in msg
    assert _temp_files(tmp_path) == []  # no half-written temporary file left behind
    sharddir = os.path.join(out, "store-toy", "shards", runner.config_hash(cfg))
    assert sorted(os.listdir(sharddir)) == ["seeds-000.parquet"]
    assert _calls(log) == ["seeds-000", "seeds-002"]  # the sweep stopped at the first write error
    monkeypatch.undo()
    summary = run_experiment(toy, cfg, out, progress=False)
    assert summary.resumed == 1 and summary.computed == 2 and summary.ok
    pd.testing.assert_frame_equal(_results(summary.outdir), _clean(tmp_path, log=str(log)))


def test_read_only_results_folder_is_one_clear_error_and_keeps_shards(tmp_path, monkeypatch):
    toy = StoreToy()
    cfg = toy.Config()
    out = str(tmp_path / "out")
    monkeypatch.setattr(storage, "_write_all", _failing_write("meta.json", errno.EROFS))
    with pytest.raises(StorageError, match=r"cannot write .*meta\.json: Read-only file system") as info:
        run_experiment(toy, cfg, out, progress=False)
    assert "\n" not in str(info.value)
    assert _temp_files(tmp_path) == []
    monkeypatch.undo()
    summary = run_experiment(toy, cfg, out, progress=False)
    assert summary.resumed == 3 and summary.computed == 0 and summary.ok
    pd.testing.assert_frame_equal(_results(summary.outdir), _clean(tmp_path))


def test_writer_killed_mid_shard_then_resume_matches_clean_run(tmp_path):
    """A real process death (os._exit) in the middle of writing the second shard."""
    out = tmp_path / "out"
    script = tmp_path / "die.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_hostile_storage import StoreToy
        from attnsvm import runner
        from attnsvm.runner import storage
        n = {{"k": 0}}
        def write(fh, data):
            if ".parquet.tmp-" in fh.name:
                n["k"] += 1
                if n["k"] == 2:
                    fh.write(data[: len(data) // 3]); fh.flush()
                    os._exit(9)
            fh.write(data)
        storage._write_all = write  # where the runner's writes go through
        toy = StoreToy()
        runner.run_experiment(toy, toy.Config(), {str(out)!r}, progress=False)
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 9, r.stderr
    assert len(_temp_files(out)) == 1  # what a killed writer leaves behind
    toy = StoreToy()
    summary = run_experiment(toy, toy.Config(), str(out), progress=False)
    assert summary.resumed == 1 and summary.computed == 2 and summary.ok and summary.recomputed == []
    assert _temp_files(out) == []
    pd.testing.assert_frame_equal(_results(summary.outdir), _clean(tmp_path))


def test_out_through_a_regular_file_and_empty_out(tmp_path):
    toy = StoreToy()
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match="is a file, not a folder"):
        run_experiment(toy, toy.Config(), str(tmp_path / "file" / "sub"), progress=False)
    for bad in ("", "   ", "a\0b"):
        with pytest.raises(ValidationError, match="outdir"):
            run_experiment(toy, toy.Config(), bad, progress=False)


# ------------------------------------------------------------- concurrency
CONCURRENT = """
import os, sys, time
sys.path.insert(0, {tests!r})
import pandas as pd
from test_hostile_storage import StoreToy, StoreConfig
from attnsvm import runner

class Slow(StoreToy):
    def run_task(self, config, task):
        with open(config.log, "a") as fh:
            fh.write(f"{{task.key}} {{os.getpid()}}\\n")
        time.sleep(0.4)
        return super().run_task(config.model_copy(update={{"log": ""}}), task)

toy = Slow()
while not os.path.exists({go!r}):  # both processes start the sweep at the same moment
    time.sleep(0.01)
s = runner.run_experiment(toy, StoreConfig(log={log!r}), {out!r}, progress=False)
print("computed", s.computed, "resumed", s.resumed)
"""


def test_two_processes_on_one_out_compute_each_task_once(tmp_path):
    log = tmp_path / "calls.log"
    out = tmp_path / "out"
    script = tmp_path / "run.py"
    go = tmp_path / "go"
    script.write_text(CONCURRENT.format(tests=os.path.dirname(__file__), log=str(log), out=str(out), go=str(go)))
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    time.sleep(0.5)
    go.write_text("")
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    keys = [line.split()[0] for line in log.read_text().splitlines()]
    assert sorted(keys) == ["seeds-000", "seeds-002", "seeds-004"]  # each task computed once in total
    first, second = sorted(outs, key=lambda o: "computed 3" not in o[0])
    assert "computed 3 resumed 0" in first[0] and "computed 0 resumed 3" in second[0]
    assert "waiting for it to finish, then its stored tasks are reused" in second[1]
    pd.testing.assert_frame_equal(_results(out / "store-toy"), _clean(tmp_path))


# ------------------------------------------------------------------ Ctrl-C
CTRL_C = """
import os, sys, time
sys.path.insert(0, {tests!r})
from test_hostile_storage import StoreToy
from attnsvm.experiments.base import register

@register
class Slow(StoreToy):
    name = "slow-toy"

    def run_task(self, config, task):
        if task.key != "seeds-000":
            time.sleep(30)
        return super().run_task(config, task)

from attnsvm.cli import main
main(["run", "slow-toy", "--out", {out!r}])
"""


def test_ctrl_c_says_what_is_kept_and_how_to_resume(tmp_path):
    out = tmp_path / "out"
    script = tmp_path / "cc.py"
    script.write_text(CTRL_C.format(tests=os.path.dirname(__file__), out=str(out)))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shard_root = out / "slow-toy" / "shards"
    deadline = time.time() + 90
    while time.time() < deadline and not list(shard_root.glob("*/seeds-000.parquet")):
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    sharddir = str(next(shard_root.iterdir()))
    assert f"attnsvm: interrupted; 1 finished task(s) of slow-toy are stored in {sharddir}" in stderr
    assert "run the same command again to resume" in stderr


# ---------------------------------------------------------------- reports
def test_corrupt_checks_or_meta_json_do_not_break_the_others(tmp_path):
    for name in ("toy-a", "toy-b", "toy-c"):
        exp = type(name.replace("-", "_"), (StoreToy,), {"name": name})()
        run_experiment(exp, exp.Config(), str(tmp_path), progress=False)
    (tmp_path / "toy-a" / "checks.json").write_text("{not json")
    (tmp_path / "toy-b" / "meta.json").write_bytes(b"\xff\xfe garbage")
    html, md = write_report(str(tmp_path))
    text = open(md).read()
    assert "| toy-c | 1/1 |" in text and "## toy-c: storage toy" in text  # the others are reported as usual
    assert "toy-a: checks.json is unreadable (JSONDecodeError" in text
    assert "toy-b: meta.json is unreadable (UnicodeDecodeError" in text


# ------------------------------------------------------------------ memory
def test_default_memory_estimate_follows_the_stated_formula():
    class Sized(Experiment):
        name = "sized"

        class Config(ExperimentConfig):
            n: int = 3
            T: int = 4
            ds: list = [8, 16]
            runs: int = 30
            steps: int = 1000
            record_every: int = 100

    exp = Sized()
    cfg = exp.Config()
    n, T, d, S, C, R = 3, 4, 16, 1000, 1000 // 100 + 2, 5
    per_run = 16 * n * T * d + (4 + C) * d * d + (4 + C) * n * T * T + S
    assert exp.estimate_memory(cfg, Task("t", R, {})) == 2 * 8 * R * per_run
    # task params override the config's sizes
    d = 8
    per_run = 16 * n * T * d + (4 + C) * d * d + (4 + C) * n * T * T + S
    assert exp.estimate_memory(cfg, Task("t", R, {"d": 8})) == 2 * 8 * R * per_run
    assert exp.estimate_memory(cfg) == 100 * 30 * 2  # planning: runs x cells (len(ds))


def test_huge_runs_or_sizes_are_refused_before_anything_runs(tmp_path, monkeypatch):
    toy = StoreToy()
    log = tmp_path / "calls.log"
    with pytest.raises(ResourceLimitError, match="planning the tasks needs about"):
        run_experiment(toy, toy.Config(runs=10**12, log=str(log)), str(tmp_path / "a"), progress=False)
    assert not (tmp_path / "a").exists() and not log.exists()

    class Big(StoreToy):
        name = "big-toy"

        def estimate_memory(self, config, task=None):
            return 64 * 2**30 if task is not None else 0.0

    with pytest.raises(ResourceLimitError, match=r"big-toy task seeds-000 \(2 run\(s\)\) needs about 64\.0 GiB, more "
                                                 r"than the memory limit 1\.0 GiB"):
        run_experiment(Big(), Big.Config(log=str(log)), str(tmp_path / "b"), progress=False, max_memory="1G")
    assert not (tmp_path / "b").exists() and not log.exists()
    monkeypatch.setenv(ENV_VAR, "2G")
    with pytest.raises(ResourceLimitError, match="2.0 GiB"):
        run_experiment(Big(), Big.Config(), str(tmp_path / "b"), progress=False)


def test_max_memory_reaches_the_tasks(tmp_path, monkeypatch):
    """--max-memory is the one limit: the solvers inside a task see it through ATTNSVM_MAX_MEMORY."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    toy = StoreToy()
    summary = run_experiment(toy, toy.Config(), str(tmp_path), progress=False, max_memory="3G")
    assert set(_results(summary.outdir)["limit"]) == {str(3 * 2**30)}
    assert ENV_VAR not in os.environ
    with pytest.raises(ValidationError, match="max_memory"):
        run_experiment(toy, toy.Config(), str(tmp_path), progress=False, max_memory="lots")
