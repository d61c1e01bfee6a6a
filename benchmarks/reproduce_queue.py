"""Benchmark (a model, not a timing): the pooled ``reproduce``'s schedule in the old and the new queue order.

Usage: python benchmarks/reproduce_queue.py RESULTS_DIR [--workers 2]

``RESULTS_DIR`` is a folder of a cold full ``attnsvm reproduce`` whose experiments' ``meta.json`` hold
``task_cpu_seconds`` (e.g. /work/runs/full33). Each task's length is its runs times its experiment's measured
CPU seconds per run; real-minilm-heads' layers take their own length from the table's ``seconds_svm`` column
(scaled to the experiment's task CPU seconds). ``--workers`` processes take the queued tasks first come, first
served, as the pool does. Printed for the registry's order (the queue before issue 28's change), for
:func:`attnsvm.runner.queue_order` (longest first) and for the pool as it runs now (longest first, each worker
handed :data:`attnsvm.runner.LANE_DEPTH` tasks at a time by :func:`attnsvm.runner.next_for_worker`, which keeps
the tasks of a shared worker-process state on one worker): when each worker ends, the idle tail and the last
task. The measured lengths include each worker's first build of a shared state (the MiniLM load and forward
pass), which the last schedule builds fewer times: its ends are upper bounds.
It leaves out the workers' start, the ``attnsvm`` process's checks and figures and the report.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
from types import SimpleNamespace

import pandas as pd

from attnsvm.experiments import registry
from attnsvm.runner import LANE_DEPTH, next_for_worker, queue_order, shared_state_of


def task_lengths(outdir: str) -> dict:
    """``{experiment: (experiment, config, tasks, lengths)}`` of the full presets, lengths from ``outdir``."""
    out = {}
    for name, exp in registry().items():
        path = os.path.join(outdir, name, "meta.json")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as fh:
            meta = json.load(fh)
        config = exp.Config()
        tasks = exp.tasks(config)
        per_run = meta["task_cpu_seconds"] / meta["runs"]
        lengths = [t.runs * per_run for t in tasks]
        if name == "real-minilm-heads":
            table = pd.read_parquet(os.path.join(outdir, name, "results.parquet"))
            per_layer = table.groupby("layer")["seconds_svm"].first()
            scale = meta["task_cpu_seconds"] / float(per_layer.sum())
            lengths = [float(per_layer[t.params["layer"]]) * scale for t in tasks]
        out[name] = (exp, config, tasks, lengths)
    return out


def schedule(order, workers: int) -> tuple[list, str]:
    """Each worker's end and the last task's experiment, for ``order`` = [(experiment, length)] taken first come,
    first served."""
    free = [0.0] * workers
    last = (0.0, "")
    for name, length in order:
        start = heapq.heappop(free)
        heapq.heappush(free, start + length)
        last = max(last, (start + length, name))
    return sorted(free), last[1]


def schedule_shared(order, workers: int, depth: int = LANE_DEPTH) -> tuple[list, str, dict]:
    """Each worker's end, the last task's experiment and which workers built each shared state, for ``order`` =
    [(experiment, length, shared state)] handed ``depth`` at a time per worker by :func:`next_for_worker`."""
    queue = list(order)
    states = [state for _, _, state in queue]
    holders: dict = {}
    handed = [[] for _ in range(workers)]

    def hand(w):
        k = next_for_worker(states, holders, w)
        name, length, state = queue.pop(k)
        states.pop(k)
        if state is not None:
            holders.setdefault(state, set()).add(w)
        handed[w].append((name, length))

    for _ in range(depth):
        for w in range(workers):
            if queue:
                hand(w)
    running = []  # (end, worker, name)
    for w in range(workers):
        if handed[w]:
            name, length = handed[w].pop(0)
            heapq.heappush(running, (length, w, name))
    ends, last = [0.0] * workers, (0.0, "")
    while running:
        end, w, name = heapq.heappop(running)
        ends[w], last = end, max(last, (end, name))
        if queue:
            hand(w)
        if handed[w]:
            name, length = handed[w].pop(0)
            heapq.heappush(running, (end + length, w, name))
    return sorted(ends), last[1], {k: sorted(v) for k, v in holders.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    jobs = task_lengths(args.outdir)
    old = [(name, length) for name, (_, _, _, lengths) in jobs.items() for length in lengths]
    sweeps = [SimpleNamespace(experiment=exp, config=config, todo=tasks) for exp, config, tasks, _ in jobs.values()]
    index = {(s.experiment.name, t.key): k for s in sweeps for k, t in enumerate(s.todo)}
    new = [(sweeps[i].experiment.name, jobs[sweeps[i].experiment.name][3][index[(sweeps[i].experiment.name, t.key)]])
           for i, t in queue_order(sweeps)]
    shared = [(sweeps[i].experiment.name, jobs[sweeps[i].experiment.name][3][index[(sweeps[i].experiment.name, t.key)]],
               shared_state_of(sweeps[i], t)) for i, t in queue_order(sweeps)]
    print(f"{sum(length for _, length in old):.1f} CPU-s of tasks on {args.workers} workers")
    for label, order in (("registry order", old), ("longest first (queue_order)", new)):
        ends, last = schedule(order, args.workers)
        print(f"{label}: workers end at " + ", ".join(f"{e:.1f}" for e in ends)
              + f" s; idle tail {ends[-1] - ends[0]:.1f} s; last task of {last}")
    ends, last, holders = schedule_shared(shared, args.workers)
    print(f"the pool now (shared states, {LANE_DEPTH} tasks handed at a time): workers end at "
          + ", ".join(f"{e:.1f}" for e in ends) + f" s; idle tail {ends[-1] - ends[0]:.1f} s; last task of {last}; "
          + "; ".join(f"{state!r} built by worker(s) {w}" for state, w in holders.items()))


if __name__ == "__main__":
    main()
