"""Benchmark: the random-direction control of the Gen-SVM fit (``attnsvm.svm.language.random_direction_control``).

Workload (the shape of tf-multi-token's control): ``--cases`` instances ``relu_head_instance(3, 4, 10, seed)``
(seed = case index) with random selected sets (each sample: 1 to 3 of its 4 tokens, uniform probabilities on
them) and a random ``W`` (10 x 10); ``svm_equivalence`` gives the Gen-SVM and the W_fin system (tie rows:
0 to 6), and the control of each feasible case is timed (``n_random = 16``, CPU seconds, best of
``--repeat`` passes). With ``--baseline-rev REV`` the same workload also runs on REV's ``src`` (child
processes, one BLAS thread each; benchmarks/_baseline.py).

Usage: python benchmarks/random_control.py [--cases 300] [--repeat 3] [--baseline-rev REV]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _baseline import add_option, baseline_src, emit, ratio, run_pair  # noqa: E402


def child(n_cases: int, repeat: int) -> None:
    import numpy as np

    from attnsvm.errors import ValidationError
    from attnsvm.generators import relu_head_instance
    from attnsvm.svm import svm_equivalence
    from attnsvm.svm.language import random_direction_control

    cases = []
    for k in range(n_cases):
        g = np.random.default_rng(k)
        problem = relu_head_instance(3, 4, 10, k)[0]
        sel = np.zeros((3, 4), bool)
        for i in range(3):
            sel[i, g.choice(4, size=int(g.integers(1, 4)), replace=False)] = True
        W = g.standard_normal((10, 10))
        try:
            eq = svm_equivalence(problem, sel, sel / sel.sum(axis=1, keepdims=True), W, norm="fro")
        except ValidationError:
            continue
        cases.append((W, eq.svm, eq.fin, k))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for W, gen, fin, k in cases:
            random_direction_control(W, gen, fin, seed=k, n_random=16)
        best = min(best, time.process_time() - t0)
    emit({"cases": len(cases), "cpu": best})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_option(ap)
    a = ap.parse_args()
    if a.child:
        child(a.cases, a.repeat)
        return
    argv = [os.path.abspath(__file__), "--child", "--cases", str(a.cases), "--repeat", str(a.repeat)]
    with baseline_src(a.baseline_rev) as base:
        ours, theirs = run_pair(argv, base)
    line = f"random-direction control, {ours['cases']} cases: ours {ours['cpu']:.3f} CPU-s"
    if theirs is not None:
        line += f", baseline {theirs['cpu']:.3f} CPU-s, baseline / ours {ratio(theirs['cpu'], ours['cpu'])}"
    print(line + f" (best of {a.repeat}; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
