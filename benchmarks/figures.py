"""Benchmark: CPU seconds of drawing every experiment's figures from a results folder's tables.

Usage: python benchmarks/figures.py RESULTS_DIR [--only NAME ...] [--baseline-rev REV]

Each experiment's ``plot`` is run on the ``results.parquet`` table of ``RESULTS_DIR/NAME`` (e.g. the cold full
run /work/runs/full34) with its full-preset config, into a temporary folder, in a child process (one thread):
what the ``attnsvm`` process of ``reproduce`` spends on figures. With ``--baseline-rev`` the same runs on a git
worktree of REV (:mod:`_baseline`), and the PNGs of both are compared pixel for pixel (size and every pixel)
and the PDFs' page boxes (largest difference in points).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import tempfile
import time

import _baseline


def child(results: str, out: str, only: list) -> None:
    """Draw the figures into ``out`` and emit the CPU seconds (the child's side)."""
    import pandas as pd

    from attnsvm.experiments import build_config, registry
    from attnsvm.plotting import pyplot

    pyplot()
    reg = registry()
    names = [n for n in (only or sorted(reg)) if os.path.exists(os.path.join(results, n, "results.parquet"))]
    cpu = 0.0
    for name in names:
        exp = reg[name]
        table = pd.read_parquet(os.path.join(results, name, "results.parquet"))
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        t = time.process_time()
        exp.plot(build_config(exp, quick=False), table, folder)
        cpu += time.process_time() - t
    _baseline.emit({"cpu_plot": cpu, "experiments": len(names)})


def compare(ours: str, base: str) -> str:
    """PNGs equal pixel for pixel, and the largest difference of the PDFs' page boxes (points)."""
    import numpy as np
    from PIL import Image

    same, differ, box = 0, [], 0.0
    for path in sorted(glob.glob(os.path.join(ours, "*", "*.png"))):
        other = os.path.join(base, os.path.relpath(path, ours))
        a, b = np.asarray(Image.open(path)), np.asarray(Image.open(other))
        if a.shape == b.shape and np.array_equal(a, b):
            same += 1
        else:
            differ.append(os.path.relpath(path, ours))
    pattern = rb"/MediaBox \[ *0 0 ([0-9.]+) ([0-9.]+) *\]"
    for path in sorted(glob.glob(os.path.join(ours, "*", "*.pdf"))):
        other = os.path.join(base, os.path.relpath(path, ours))
        with open(path, "rb") as fa, open(other, "rb") as fb:
            a, b = re.findall(pattern, fa.read()), re.findall(pattern, fb.read())
        if len(a) == len(b):
            box = max([box] + [abs(float(x) - float(y)) for p, q in zip(a, b) for x, y in zip(p, q)])
    return (f"PNGs pixel-identical: {same} of {same + len(differ)}" + (f" (differ: {', '.join(differ)})" if differ
            else "") + f"; PDF page boxes differ by at most {box:.2f} pt")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    _baseline.add_option(ap)
    args = ap.parse_args(argv)
    if args.child_out:
        child(args.results, args.child_out, args.only)
        return
    me = os.path.abspath(__file__)
    extra = [a for name in args.only for a in ("--only", name)]
    with tempfile.TemporaryDirectory(prefix="attnsvm-figures-") as tmp, \
            _baseline.baseline_src(args.baseline_rev) as base_src:
        sides = [("ours", _baseline.OURS)] + ([("baseline", base_src)] if base_src else [])
        got = {}
        for label, src in sides:
            out = os.path.join(tmp, label)
            got[label] = _baseline.run_child([me, args.results, "--child-out", out] + extra, src)
            r = got[label]
            if "error" in r:
                print(f"{label}: {r['error']}", file=sys.stderr)
                continue
            print(f"{label}: {r['experiments']} experiments' figures, plot {r['cpu_plot']:.2f} CPU-s "
                  f"(child {r['child_cpu']:.2f} CPU-s, {r['child_wall']:.1f} s wall)")
        if base_src and all("error" not in r for r in got.values()):
            print(f"ratio baseline / ours (plot CPU-s): "
                  f"{_baseline.ratio(got['baseline']['cpu_plot'], got['ours']['cpu_plot'])}")
            print(compare(os.path.join(tmp, "ours"), os.path.join(tmp, "baseline")))


if __name__ == "__main__":
    main()
