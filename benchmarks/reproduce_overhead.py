"""Benchmark: the CPU of ``attnsvm reproduce`` outside the experiments' tasks, split by process, on this checkout
and (``--baseline-rev REV``) on REV, alternating.

Usage: python benchmarks/reproduce_overhead.py --out DIR [--full] [--only NAME ...] [--pairs 2] [--baseline-rev REV]

It runs ``attnsvm reproduce`` (``--quick`` unless ``--full``; the default pool of workers) into
``DIR/ours-K`` and ``DIR/base-K`` (kept, for ``python scripts/compare_runs.py``), ours first in each pair. Printed
per run: the CPU seconds (user + system, from the OS) of the ``attnsvm`` process itself ("main": imports,
checks, figures, report) and of its worker processes ("workers"), the sum of the experiments' measured
``task_cpu_seconds`` (meta.json), what is left outside the tasks (total - tasks; workers - tasks: the workers'
start-up and imports, task hand-over) and the wall seconds. Wall figures are only comparable on an idle machine.
Both sides run with one BLAS / OpenMP thread in the environment (the runner gives each task one thread anyway).
The figures alone (most of the ``attnsvm`` process's CPU): ``benchmarks/figures.py``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from _baseline import add_option, baseline_src, ratio, run_child, OURS

_REPRODUCE = """
import atexit, resource, sys
def _usage():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print("RESULT " + __import__("json").dumps({"main": me.ru_utime + me.ru_stime,
                                              "workers": kids.ru_utime + kids.ru_stime}), flush=True)
atexit.register(_usage)
from attnsvm.cli import main
main(sys.argv[1:])
"""

def task_cpu(outdir: str) -> float:
    """Sum of the experiments' ``task_cpu_seconds`` in ``outdir``'s meta.json files."""
    total = 0.0
    for path in glob.glob(os.path.join(outdir, "*", "meta.json")):
        with open(path, encoding="utf-8") as fh:
            total += float(json.load(fh).get("task_cpu_seconds") or 0.0)
    return total


def reproduce(src: str, outdir: str, args) -> dict:
    argv = ["-c", _REPRODUCE, "reproduce", "--out", outdir, "--allow-failures"]
    argv += [] if args.full else ["--quick"]
    for name in args.only or ():
        argv += ["--only", name]
    r = run_child(argv, src, threads=1)
    if "error" in r:
        raise SystemExit(f"{outdir}: {r['error']}")
    r["tasks"] = task_cpu(outdir)
    r["total"] = r["main"] + r["workers"]
    return r


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the runs' results (kept)")
    ap.add_argument("--full", action="store_true", help="paper-scale presets (default: --quick)")
    ap.add_argument("--only", nargs="*", help="experiments to run (default: all)")
    ap.add_argument("--pairs", type=int, default=2)
    add_option(ap)
    args = ap.parse_args(argv)
    with baseline_src(args.baseline_rev) as base:
        sides = [("ours", OURS)] + ([("base", base)] if base else [])
        rows = {name: [] for name, _ in sides}
        for k in range(args.pairs):
            for name, src in sides:
                r = reproduce(src, os.path.join(args.out, f"{name}-{k}"), args)
                print(f"pair {k} {name}: total {r['total']:.1f} CPU-s = main {r['main']:.1f} + workers "
                      f"{r['workers']:.1f}; tasks {r['tasks']:.1f}; outside the tasks {r['total'] - r['tasks']:.1f}"
                      f" (workers {r['workers'] - r['tasks']:.1f}); wall {r['child_wall']:.1f} s; load "
                      f"{os.getloadavg()[0]:.2f}", flush=True)
                rows[name].append(r)
        for name, _ in sides:
            print(f"{name}: total CPU-s " + ", ".join(f"{r['total']:.1f}" for r in rows[name]))
        if base:
            print("baseline / ours per pair: " + ", ".join(
                ratio(b["total"], o["total"]) for o, b in zip(rows["ours"], rows["base"])))
            out = [(b["total"] - b["tasks"]) - (o["total"] - o["tasks"]) for o, b in zip(rows["ours"], rows["base"])]
            print("CPU outside the tasks, baseline - ours per pair: " + ", ".join(f"{d:.1f}" for d in out))


if __name__ == "__main__":
    sys.exit(main())
