"""Hostile scheduler: nothing listening, a TCP server that is not Dask, bad addresses, a killed worker.

Only loopback addresses are used. Before: a closed port gave a traceback after 30 s, a
silent TCP server hung for more than 200 s, a server speaking another protocol crashed
with a MemoryError while parsing its bytes as a Dask frame, and tasks already stored were
recomputed after a Dask worker was killed.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import cloudpickle
import numpy as np
import pandas as pd
import pytest
from pydantic import PositiveInt

from attnsvm.errors import ValidationError
from attnsvm.experiments import Experiment, ExperimentConfig, Task, check
from attnsvm.runner import run_experiment
from attnsvm import runner
from attnsvm.runner import SchedulerError, check_scheduler, execute_task


class SchedConfig(ExperimentConfig):
    runs: PositiveInt = 6
    per_task: PositiveInt = 1
    sleep: float = 0.0
    log: str = ""


class SchedToy(Experiment):
    name = "sched-toy"
    title = "scheduler toy"
    Config = SchedConfig

    def tasks(self, config):
        seeds = list(range(config.runs))
        return [Task(f"seeds-{c[0]:03d}", len(c), {"seeds": c})
                for c in (seeds[i:i + config.per_task] for i in range(0, len(seeds), config.per_task))]

    def run_task(self, config, task):
        if config.log:
            with open(config.log, "a") as fh:
                fh.write(f"{task.key} {os.getpid()}\n")
        time.sleep(config.sleep)
        return pd.DataFrame([{"seed": s, "value": np.random.default_rng(s).standard_normal(), "pid": os.getpid()}
                             for s in task.params["seeds"]])

    def checks(self, config, table):
        return [check("runs stored", len(table), "==", config.runs, source="test", reason="every run is stored")]


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@contextmanager
def _tcp_server(mode: str):
    """A plain TCP server on 127.0.0.1: ``silent`` accepts and never answers, ``http`` answers like a web
    server, ``close`` hangs up at once."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()
    conns = []

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conns.append(conn)
            if mode == "http":
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<html>hello</html>")
            elif mode == "close":
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for c in conns:
            c.close()
        srv.close()


@pytest.mark.parametrize("mode", ["closed", "silent", "http", "close"])
def test_no_dask_scheduler_is_a_clear_error_within_the_timeout(tmp_path, mode):
    toy = SchedToy()
    out = tmp_path / "out"

    def attempt(address):
        t0 = time.time()
        with pytest.raises(SchedulerError, match="no Dask scheduler answered at|not as a Dask scheduler") as info:
            run_experiment(toy, toy.Config(), str(out), progress=False, scheduler=address, connect_timeout=1.0)
        return time.time() - t0, str(info.value)

    if mode == "closed":
        elapsed, msg = attempt(f"tcp://127.0.0.1:{_closed_port()}")
    else:
        with _tcp_server(mode) as address:
            elapsed, msg = attempt(address)
    assert elapsed < 1.0 + 5.0, elapsed  # the timeout plus slack for a loaded machine; never a hang
    assert "\n" not in msg and "127.0.0.1" in msg
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize("address", ["nonsense", "tcp://", "tcp://127.0.0.1:notaport", "bogus://127.0.0.1:1"])
def test_malformed_scheduler_addresses(tmp_path, address):
    with pytest.raises(SchedulerError, match="no Dask scheduler answered"):
        check_scheduler(address, 1.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"connect_timeout": 0}, "connect-timeout"), ({"connect_timeout": -1}, "connect-timeout"),
    ({"connect_timeout": float("nan")}, "connect-timeout"), ({"connect_timeout": float("inf")}, "connect-timeout"),
    ({"connect_timeout": "5"}, "connect-timeout"), ({"scheduler": ""}, "scheduler"), ({"scheduler": 8786}, "scheduler"),
    ({"workers": 0}, "workers"), ({"workers": 1.5}, "workers"),
])
def test_bad_scheduler_arguments(tmp_path, kwargs, match):
    toy = SchedToy()
    with pytest.raises(ValidationError, match=match):
        run_experiment(toy, toy.Config(), str(tmp_path), progress=False, **kwargs)


def test_cli_closed_port_is_one_line_after_the_timeout(tmp_path):
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "attnsvm", "run", "tf-lambda-head", "--quick", "--out", str(tmp_path),
                        "--scheduler", f"tcp://127.0.0.1:{_closed_port()}", "--connect-timeout", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("attnsvm")]
    assert len(lines) == 1 and lines[0].startswith("attnsvm: error: no Dask scheduler answered at 'tcp://127.0.0.1:")
    assert time.time() - t0 < 60


def test_stored_shard_is_not_recomputed_by_a_resubmitted_task(tmp_path):
    toy = SchedToy()
    log = tmp_path / "calls.log"
    cfg = toy.Config(log=str(log))
    summary = run_experiment(toy, cfg, str(tmp_path / "out"), progress=False)
    shard = os.path.join(summary.outdir, "shards", runner.config_hash(cfg), "seeds-000.parquet")
    log.write_text("")
    task = toy.tasks(cfg)[0]
    assert execute_task(toy, cfg.model_dump(mode="json"), task, shard) is None
    assert log.read_text() == ""  # not computed
    open(shard, "wb").close()  # an unreadable shard is not "stored": compute
    assert len(execute_task(toy, cfg.model_dump(mode="json"), task, shard)) == 1


def test_killed_dask_worker_does_not_recompute_stored_tasks(tmp_path):
    from dask.distributed import LocalCluster

    toy = SchedToy()
    log = tmp_path / "calls.log"
    cfg = toy.Config(log=str(log), sleep=1.0)
    killed = {}
    out = tmp_path / "out"

    def kill_worker_of_first_task(key):
        if killed:
            return
        shard = os.path.join(out, "sched-toy", "shards", runner.config_hash(cfg), f"{key}.parquet")
        pid = int(pd.read_parquet(shard)["pid"].iloc[0])
        os.kill(pid, signal.SIGKILL)  # the worker that holds this task's result
        killed.update(key=key, pid=pid)

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        summary = run_experiment(toy, cfg, str(out), progress=False, scheduler=cluster.scheduler_address,
                                 task_hook=kill_worker_of_first_task, connect_timeout=30)
    assert killed and summary.ok and summary.tasks == 6 and not summary.failed
    calls = [line.split()[0] for line in log.read_text().splitlines()]
    assert calls.count(killed["key"]) == 1, calls  # stored before the kill: never computed again
    assert sorted(set(calls)) == [t.key for t in toy.tasks(cfg)]
    serial = run_experiment(toy, toy.Config(), str(tmp_path / "serial"), progress=False)
    cols = ["seed", "value"]
    a = pd.read_parquet(os.path.join(summary.outdir, "results.parquet"))[cols].sort_values("seed").reset_index(drop=True)
    b = pd.read_parquet(os.path.join(serial.outdir, "results.parquet"))[cols].sort_values("seed").reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_scheduler_check_inside_a_running_event_loop(tmp_path):
    """A Jupyter kernel runs an event loop in the calling thread: the check must still answer
    (a real scheduler passes, a closed port is the usual clear error, never 'asyncio.run() cannot be called')."""
    import asyncio

    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        async def inside_a_loop(address):
            check_scheduler(address, 5.0)

        asyncio.run(inside_a_loop(cluster.scheduler_address))  # no exception: the scheduler answered
        closed = f"tcp://127.0.0.1:{_closed_port()}"
        with pytest.raises(SchedulerError, match="no Dask scheduler answered") as info:
            asyncio.run(inside_a_loop(closed))
        assert "running event loop" not in str(info.value)
