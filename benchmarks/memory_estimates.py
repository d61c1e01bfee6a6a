"""Measured peak memory of SVM solves and training runs against the estimates the limits use.

Usage: python benchmarks/memory_estimates.py [--quick]

Each case runs in a fresh interpreter (one BLAS / torch thread): it warms up on a tiny instance,
resets the peak resident size (Linux ``/proc/self/clear_refs``) and reports the peak during the case
(``VmHWM``) minus the resident size before it. The estimates are
``attnsvm.svm.api.solution_bytes`` (the d x d arrays of a solve; the N x N work is counted by each
solver) and ``attnsvm.training.checks.training_bytes``. A limit refuses work whose estimate exceeds
it, so an estimate below the measured peak would let a run through that the limit should stop: the
last column must read "ok" (estimate >= measured) for every case. ``--quick`` uses smaller sizes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

PEAK = """
def _kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024


def reset_peak():
    # Linux: "5" to clear_refs resets the peak RSS (VmHWM) to the current RSS
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _kib("VmRSS:")


def peak_since(base):
    return _kib("VmHWM:") - base
"""

SVM = PEAK + """
import gc, numpy as np
from attnsvm.svm import solve
from attnsvm.svm.constraints import ConstraintSet
rng = np.random.default_rng(0)
solve(ConstraintSet(rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), np.ones(3)), "{norm}", method="{method}")
cs = ConstraintSet(rng.standard_normal(({N}, {d})), rng.standard_normal(({N}, {d})), np.ones({N}))
gc.collect()
base = reset_peak()
s = solve(cs, "{norm}", method="{method}")
print(peak_since(base))
"""

TRAIN = PEAK + """
import gc
from attnsvm.generators import random_problem
from attnsvm.training import train
train(random_problem(6, 8, 4, seed=0), param="{param}", steps=2, optimizer="{opt}")
p = random_problem(6, 8, {d}, seed=0)
gc.collect()
base = reset_peak()
train(p, param="{param}", steps={steps}, record_every={every}, runs={runs}, optimizer="{opt}")
print(peak_since(base))
"""


def _measure(code: str) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    args = ap.parse_args()
    from attnsvm.svm.api import solution_bytes
    from attnsvm.training.checks import training_bytes

    d_svm = 2000 if args.quick else 3000
    svm_cases = [(norm, method, 5, d_svm) for norm in ("fro", "nuclear") for method in ("dense", "working_set")]
    train_cases = [("W", 300, 4, 100, 10, "ngd"), ("KQ", 300, 4, 100, 10, "adam"), ("W", 20, 2000, 100, 10, "ngd"),
                   ("KQ", 600, 1, 50, 10, "ngd"), ("W", 300, 1, 2000, 100, "gd")]
    if not args.quick:
        train_cases += [("KQ", 3000, 1, 2, 1, "ngd"), ("W", 2000, 2, 2, 1, "adam")]
    mib = 2.0 ** 20
    print(f"{'case':52s} {'measured MiB':>12s} {'estimate MiB':>12s}  estimate >= measured")
    for norm, method, N, d in svm_cases:
        got = _measure(SVM.format(norm=norm, method=method, N=N, d=d))
        est = solution_bytes(N, d, d, norm)
        print(f"{f'solve {norm} {method} N={N} d={d}':52s} {got / mib:12.1f} {est / mib:12.1f}  "
              f"{'ok' if est >= got else 'UNDER'}")
    for param, d, runs, steps, every, opt in train_cases:
        got = _measure(TRAIN.format(param=param, d=d, runs=runs, steps=steps, every=every, opt=opt))
        C = steps // every + 1 + (1 if steps % every else 0)
        est = training_bytes(runs, 6, 8, d, param, d, C, steps, opt)
        name = f"train {param} d={d} runs={runs} steps={steps} every={every} {opt}"
        print(f"{name:52s} {got / mib:12.1f} {est / mib:12.1f}  {'ok' if est >= got else 'UNDER'}")


if __name__ == "__main__":
    main()
