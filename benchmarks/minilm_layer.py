"""Benchmark: one layer task of ``real-minilm-heads`` (its 12 heads' Gen-SVMs, random baselines and 8 spectrum
null heads each: 120 nuclear-norm SVMs of 16 sentences), CPU seconds of the task alone.

Each child loads MiniLM and runs the forward pass first (not timed: the shared state of the experiment's tasks),
then times ``RealMinilmHeads.run_task`` of the layer (``time.process_time``, one BLAS thread) at the
experiment's default config, and reports per head ``corr_restricted``, ``corr_random_restricted``, ``svm_nuclear``,
``null_mean``, ``p_upper`` and the statuses. With ``--baseline-rev REV`` the same task also runs on REV's ``src``
(benchmarks/_baseline.py); printed: both CPU times, the ratio baseline / ours, whether every status is equal and
the largest absolute difference of each value column. Needs the MiniLM weights (``attnsvm reproduce`` does too).

Usage: python benchmarks/minilm_layer.py [--layers 3] [--baseline-rev REV]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _baseline import add_option, baseline_src, emit, ratio, run_pair  # noqa: E402

VALUES = ("corr", "corr_restricted", "corr_random_restricted", "svm_nuclear", "null_mean", "p_upper")
STATUSES = ("svm_status", "random_status")


def child(layer: int) -> None:
    from attnsvm.experiments.base import registry
    from attnsvm.real.probe_steps import prepare_probe

    exp = registry()["real-minilm-heads"]
    cfg = exp.Config()
    task = next(t for t in exp.tasks(cfg) if t.params["layer"] == layer)
    prepare_probe(n_sentences=cfg.n_sentences, layers=[layer], heads=cfg.heads, query=cfg.query,
                  threshold=cfg.threshold, seed=cfg.seed, max_length=cfg.max_length)  # the forward pass, cached
    c0 = time.process_time()
    table = exp.run_task(cfg, task)
    cpu = time.process_time() - c0
    out = {"cpu": cpu}
    for c in VALUES + STATUSES:
        if c in table.columns:
            out[c] = [v if isinstance(v, str) else float(v) for v in table[c]]
    emit(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[3])
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    add_option(ap)
    a = ap.parse_args()
    if a.child is not None:
        child(a.child)
        return
    import numpy as np

    with baseline_src(a.baseline_rev) as base:
        for layer in a.layers:
            argv = [os.path.abspath(__file__), "--child", str(layer)]
            ours, theirs = run_pair(argv, base)
            line = f"real-minilm-heads layer {layer}: ours {ours['cpu']:.1f} CPU-s"
            if theirs is not None:
                line += f", baseline {theirs['cpu']:.1f} CPU-s, baseline / ours {ratio(theirs['cpu'], ours['cpu'])}"
                same = all(ours.get(c) == theirs.get(c) for c in STATUSES)
                line += f"; statuses {'equal' if same else 'DIFFER'}"
                for c in VALUES:
                    if c in ours and c in theirs:
                        x, y = np.asarray(ours[c], float), np.asarray(theirs[c], float)
                        both = np.isfinite(x) & np.isfinite(y)
                        nan_same = np.array_equal(np.isnan(x), np.isnan(y))
                        d = float(np.abs(x[both] - y[both]).max(initial=0.0))
                        line += f"; {c} max |diff| {d:.1e}" + ("" if nan_same else " (NaN pattern DIFFERS)")
            print(line + f" (load average {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
