"""Benchmark (a model, not a timing): the pooled ``reproduce``'s schedule in the old and the new queue order.

Usage: python benchmarks/reproduce_queue.py RESULTS_DIR [--workers 2]

``RESULTS_DIR`` is a folder of a cold full ``attnsvm reproduce`` whose experiments' ``meta.json`` hold
``task_cpu_seconds`` (e.g. /work/runs/full33). Each task's length is its runs times its experiment's measured
CPU seconds per run; real-minilm-heads' layers take their own length from the table's ``seconds_svm`` column
(scaled to the experiment's task CPU seconds). ``--workers`` processes take the queued tasks first come, first
served, as the pool does. Printed for the registry's order (the queue before issue 28's change) and for
:func:`attnsvm.runner.queue_order` (longest first): when each worker ends, the idle tail and the last task.
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
from attnsvm.runner import queue_order


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
    print(f"{sum(length for _, length in old):.1f} CPU-s of tasks on {args.workers} workers")
    for label, order in (("registry order", old), ("longest first (queue_order)", new)):
        ends, last = schedule(order, args.workers)
        print(f"{label}: workers end at " + ", ".join(f"{e:.1f}" for e in ends)
              + f" s; idle tail {ends[-1] - ends[0]:.1f} s; last task of {last}")


if __name__ == "__main__":
    main()
