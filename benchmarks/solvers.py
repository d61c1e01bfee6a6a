"""Benchmark of the SVM solvers against the full-variable cvxpy formulation (research-code style).

Usage: python benchmarks/solvers.py [--quick] [--skip-reference-above SECONDS] [--nuclear-time-limit S]
       python benchmarks/solvers.py --baseline-rev REV [--quick] [--only CASE ...]
       python benchmarks/solvers.py --scale [...]   (dense vs working set up to 1e6 rows: solvers_scale.py)

Without ``--baseline-rev`` it prints one row per case: ours (s), reference (s), ratio, relative objective
difference (the reference, tests/svm_reference.py: a d x d cvxpy variable, one constraint per row, is
measured in the same run), then the timed workloads of :data:`CASES` (wall and CPU seconds):

* ``small-nuclear``: one nuclear Att-SVM at (n, T, d) = (6, 8, 10) per ``solve_svm`` call, 100 instances;
* ``medium-nuclear``: one nuclear Att-SVM at (16, 20, 385) per ``solve_svm`` call (N = 304, the size of
  real-minilm-heads' 16-sentence SVMs), 3 instances;
* ``notebook``: the papers' local-convergence notebook workload: 10 problems (6, 8, 10), W and (K, Q)
  training (2000 NGD steps) and both SVMs (Frobenius and nuclear) of every run's selection, once with one
  ``train()`` / ``solve_svm`` call per problem and once with one ``train()`` call per parameterization and
  ``solve_svm_batch``; plus the per-call fixed cost of ``train()`` (one run of one step);
* ``batch``: 1000 Frobenius and 200 nuclear (6, 8, 10) instances through ``solve_svm_batch``, the nuclear
  ones also with one ``solve_svm`` call per instance.

With ``--baseline-rev REV`` every case of :data:`CASES` (``--only`` to choose) runs in a child process with one
BLAS thread on this checkout and on a git worktree of REV (benchmarks/_baseline.py); the table shows both CPU
and wall seconds and the ratios baseline / ours. Set OMP_NUM_THREADS=1 for comparable numbers otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
import _baseline  # noqa: E402


def nuc(W):
    return float(np.linalg.svd(W, compute_uv=False).sum())


def row(case, ours, ref, agree):
    ratio = f"{ref / ours:9.1f}x" if ref is not None else "        -"
    refs = f"{ref:10.3f}" if ref is not None else "         -"
    ag = f"{agree:10.2e}" if agree is not None else "         -"
    print(f"{case:<34s} {ours:10.3f} {refs} {ratio} {ag}", flush=True)


class _Timer:
    """Accumulated wall and process CPU seconds per label: ``with timer("label"): ...``."""

    def __init__(self):
        self.wall, self.cpu, self.order = {}, {}, []

    def __call__(self, label):
        timer = self

        class _Block:
            def __enter__(self):
                if label not in timer.wall:
                    timer.order.append(label)
                    timer.wall[label] = timer.cpu[label] = 0.0
                self.t, self.c = time.perf_counter(), time.process_time()

            def __exit__(self, *exc):
                timer.wall[label] += time.perf_counter() - self.t
                timer.cpu[label] += time.process_time() - self.c

        return _Block()

    def rows(self, per=None):
        per = per or {}
        return [(k, self.wall[k] / per.get(k, 1), self.cpu[k] / per.get(k, 1)) for k in self.order]


# ----------------------------------------------------------------------------------- timed cases
# Each case uses only the public API (it runs on the baseline revision's sources too) and returns
# {"rows": [(label, wall_s, cpu_s), ...], "notes": [str, ...]}.


def case_small_nuclear(quick=False):
    """One nuclear Att-SVM at (6, 8, 10) per ``solve_svm`` call: seconds per call."""
    from attnsvm.generators import random_problem
    from attnsvm.svm import solve_svm

    probs = [random_problem(6, 8, 10, seed=k) for k in range(30 if quick else 100)]
    for p in probs[:3]:                                       # imports and first-call caches
        solve_svm(p, norm="nuclear")
    tm = _Timer()
    label = "nuclear (6, 8, 10): per solve_svm call"
    with tm(label):
        sols = [solve_svm(p, norm="nuclear") for p in probs]
    ok = sum(s.status == "optimal" for s in sols)
    return {"rows": tm.rows({label: len(probs)}),
            "notes": [f"{ok} of {sum(s.feasible for s in sols)} feasible instances certified"]}


def case_medium_nuclear(quick=False):
    """One nuclear Att-SVM at (n, T, d) = (16, 20, 385) per ``solve_svm`` call (N = 304 rows, reduced shape
    (304, 16): the size of real-minilm-heads' 16-sentence SVMs, N ~ 300 and r1 + r2 ~ 315): seconds per call."""
    from attnsvm.generators import random_problem
    from attnsvm.svm import solve_svm

    probs = [random_problem(16, 20, 385, seed=k) for k in range(1 if quick else 3)]
    solve_svm(random_problem(6, 8, 10, seed=0), norm="nuclear")      # imports and first-call caches
    tm = _Timer()
    label = "nuclear (16, 20, 385): per solve_svm call"
    with tm(label):
        sols = [solve_svm(p, norm="nuclear") for p in probs]
    ok = sum(s.status == "optimal" for s in sols)
    its = [s.info.get("iterations") for s in sols]
    return {"rows": tm.rows({label: len(probs)}),
            "notes": [f"{ok} of {len(sols)} certified; iterations {its}; ||W||_* "
                      + ", ".join(f"{s.norm_value:.12g}" for s in sols)]}


def case_notebook(quick=False):
    """The local-convergence notebook workload: R problems, W and (K,Q) training, both SVMs of every run."""
    from attnsvm.generators import random_problem
    from attnsvm.svm import solve_svm, solve_svm_batch
    from attnsvm.training.train import train

    R, steps = (4, 500) if quick else (10, 2000)
    probs = [random_problem(6, 8, 10, seed=k) for k in range(R)]
    train(probs[0], param="W", steps=2, seed=0)                 # imports and first-call caches
    solve_svm(probs[0], norm="nuclear")
    tm = _Timer()
    for _ in range(5):
        with tm("train() fixed cost (1 run, 1 step), per call"):
            train(probs[0], param="W", steps=1, seed=0)
    one, batch = "one call each", "batched"
    n_ok = 0
    for k, p in enumerate(probs):
        for param in ("W", "KQ"):
            with tm(f"{one}: total"), tm(f"{one}: train, {2 * R} calls"):
                sel = train(p, param=param, steps=steps, seed=k).selection[0]
            with tm(f"{one}: total"), tm(f"{one}: SVMs, {4 * R} solve_svm calls"):
                sols = (solve_svm(p, select=sel, norm="fro"), solve_svm(p, select=sel, norm="nuclear"))
            n_ok += sum(s.status == "optimal" for s in sols)
    X = np.stack([p.X for p in probs])
    Z = np.stack([p.queries for p in probs])
    for param in ("W", "KQ"):
        with tm(f"{batch}: total"), tm(f"{batch}: train, 2 calls of {R} runs"):
            res = train(probs, param=param, steps=steps, seed=list(range(R)))
            sel = np.stack([res.selection[r] for r in range(R)])
        with tm(f"{batch}: total"), tm(f"{batch}: SVMs, 4 solve_svm_batch calls"):
            solve_svm_batch(X, Z, sel, norm="fro")
            solve_svm_batch(X, Z, sel, norm="nuclear")
    return {"rows": tm.rows({"train() fixed cost (1 run, 1 step), per call": 5}),
            "notes": [f"notebook workload: {R} problems (6, 8, 10), {steps} steps; one call each: {n_ok} of "
                      f"{4 * R} SVMs certified"]}


def case_batch(quick=False):
    """1000 Frobenius and 200 nuclear (6, 8, 10) instances batched; the nuclear ones also one call each."""
    from attnsvm.generators import random_problem
    from attnsvm.svm import solve_svm, solve_svm_batch

    R, Rn = (200, 40) if quick else (1000, 200)
    probs = [random_problem(6, 8, 10, seed=k) for k in range(R)]
    X = np.stack([p.X for p in probs])
    Z = np.stack([p.queries for p in probs])
    sel = np.stack([p.optimal_tokens().index for p in probs])
    solve_svm_batch(X[:4], Z[:4], sel[:4], norm="nuclear")   # imports and first-call caches
    tm = _Timer()
    with tm(f"{R} x fro (6, 8, 10) solve_svm_batch"):
        solve_svm_batch(X, Z, sel)
    with tm(f"{Rn} x nuclear (6, 8, 10) solve_svm_batch"):
        bn = solve_svm_batch(X[:Rn], Z[:Rn], sel[:Rn], norm="nuclear")
    with tm(f"{Rn} x nuclear (6, 8, 10) solve_svm one call each"):
        one = [solve_svm(p, norm="nuclear") for p in probs[:Rn]]
    diff = max(abs(a.norm_value - v) / a.norm_value for a, v in zip(one, bn.norm_value) if a.feasible)
    return {"rows": tm.rows(), "notes": [f"nuclear batch vs one call each: max relative objective difference "
                                         f"{diff:.1e}; {int((bn.status == 'optimal').sum())} of {Rn} certified"]}


#: name -> timed case (``--baseline-rev`` runs these on both revisions)
CASES = {"small-nuclear": case_small_nuclear, "medium-nuclear": case_medium_nuclear, "notebook": case_notebook,
         "batch": case_batch}


def print_case(name, res):
    print(f"\n{name}:", flush=True)
    for label, wall, cpu in res["rows"]:
        print(f"  {label:<58s} wall {wall * 1e3:10.2f} ms   cpu {cpu * 1e3:10.2f} ms", flush=True)
    for note in res["notes"]:
        print(f"  {note}", flush=True)


def compare(args):
    """``--baseline-rev``: every chosen case on both revisions, one child process with one thread each."""
    names = args.only or list(CASES)
    flags = ["--quick"] if args.quick else []
    with _baseline.baseline_src(args.baseline_rev) as base_src:
        print("same-run comparison, one child process with one BLAS thread per side; ratio = baseline / ours "
              "(> 1: ours faster). Wall times on a shared machine are loaded; CPU seconds are the process's own.")
        for name in names:
            argv = [os.path.abspath(__file__), "--child", name] + flags
            ours = _baseline.run_child(argv, _baseline.OURS)
            base = _baseline.run_child(argv, base_src)
            print(f"\n{name}:", flush=True)
            for side, r in (("ours", ours), ("baseline", base)):
                if "error" in r:
                    print(f"  {side} FAILED: {r['error']}", flush=True)
            if "error" in ours or "error" in base:
                continue
            print(f"  {'':<58s} {'ours cpu':>10s} {'base cpu':>10s} {'ratio':>7s} {'ours wall':>10s} "
                  f"{'base wall':>10s} {'ratio':>7s}", flush=True)
            brows = {r[0]: r for r in base["rows"]}
            for label, wall, cpu in ours["rows"]:
                b = brows.get(label)
                bw, bc = (b[1], b[2]) if b else (None, None)
                fmt = lambda v: f"{v * 1e3:8.2f}ms" if v is not None else f"{'-':>10s}"  # noqa: E731
                print(f"  {label:<58s} {fmt(cpu)} {fmt(bc)} {_baseline.ratio(bc, cpu):>7s} {fmt(wall)} {fmt(bw)} "
                      f"{_baseline.ratio(bw, wall):>7s}", flush=True)
            for side, r in (("ours", ours), ("baseline", base)):
                for note in r["notes"]:
                    print(f"  {side}: {note}", flush=True)


def reference_cases(args):
    """ours vs the research-code-style cvxpy formulation (tests/svm_reference.py), same run."""
    from svm_reference import reference_att_svm

    from attnsvm.generators import random_problem
    from attnsvm.svm import solve_svm

    expected_ref = {(20, 10, 100): 20, (50, 10, 100): 70, (10, 10, 200): 60}
    print(f"{'case':<34s} {'ours [s]':>10s} {'ref [s]':>10s} {'ratio':>10s} {'rel.diff':>10s}")
    cases = [("fro", (20, 10, 100)), ("fro", (50, 10, 100)), ("nuclear", (20, 10, 100)), ("nuclear", (10, 10, 200))]
    if args.quick:
        cases = [("fro", (6, 8, 10)), ("fro", (10, 6, 30)), ("nuclear", (6, 8, 10))]
    for norm, (n, T, d) in cases:
        pr = random_problem(n, T, d, seed=0)
        sel = pr.optimal_tokens().index
        t = time.perf_counter()
        sol = solve_svm(pr, norm=norm)
        ours = time.perf_counter() - t
        ref_t, agree = None, None
        skip = args.skip_reference_above is not None and expected_ref.get((n, T, d), 0) > args.skip_reference_above
        if not skip:
            t = time.perf_counter()
            Wr = reference_att_svm(pr.X, pr.queries, sel, norm=norm, solver="CLARABEL" if norm == "fro" else "SCS")
            ref_t = time.perf_counter() - t
            if Wr is not None:
                rv = np.linalg.norm(Wr) if norm == "fro" else nuc(Wr)
                agree = abs(sol.norm_value - rv) / rv
        row(f"{norm} att-svm {(n, T, d)}", ours, ref_t, agree)
        if norm == "nuclear":
            # the nuclear reference runs SCS (cvxpy's default for normNuc) at its default accuracy:
            # show both certificates so that rel.diff can be attributed
            c = sol.certificate
            line = (f"    ours ({sol.info.get('solver')}, {sol.info.get('iterations')} it): max violation "
                    f"{c.max_violation:.1e}, duality gap {c.duality_gap:.1e}")
            if Wr is not None:
                mr = sol.constraints.evaluate(Wr)
                lower = float(sol.constraints.rhs @ sol.duals)  # our dual value: a certified lower bound
                line += (f"; reference: max violation {max(0.0, float(np.max(1.0 - mr))):.1e}, objective "
                         f"{(rv - lower) / lower:+.1e} above our certified lower bound")
            print(line)
    if not args.quick:
        pr = random_problem(64, 32, 768, seed=0)
        t = time.perf_counter()
        sol = solve_svm(pr)
        row("fro att-svm (64, 32, 768)", time.perf_counter() - t, None, None)
        print(f"    max violation {sol.certificate.max_violation:.1e}, gap {sol.certificate.duality_gap:.1e}")
        # run in a child process: the reduced SDP (832 x 832) may exhaust memory or time
        import subprocess
        code = ("import time;from attnsvm.generators import random_problem;from attnsvm.svm import solve_svm;"
                "pr=random_problem(64,32,768,seed=0);t=time.perf_counter();"
                f"s=solve_svm(pr,norm='nuclear',time_limit={args.nuclear_time_limit});"
                "c=s.certificate;print(s.info.get('solver'),s.info.get('iterations'),s.info.get('solver_status'));"
                "print(time.perf_counter()-t,c.max_violation,c.duality_gap,c.stationarity_residual)")
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode == 0:
            lines = proc.stdout.strip().splitlines()
            el, mv, gap, st = (float(x) for x in lines[-1].split()[-4:])
            solver, iters, status = lines[-2].split()[-3:]
            row("nuclear att-svm (64, 32, 768)", el, None, None)
            print(f"    reached ({solver}, {iters} it, {status}): max violation {mv:.1e}, duality gap {gap:.1e}, "
                  f"stationarity residual {st:.1e}")
        else:
            print(f"{'nuclear att-svm (64, 32, 768)':<34s} NOT SOLVED: child exited with code {proc.returncode} "
                  f"after {time.perf_counter() - t:.1f} s {proc.stderr.strip().splitlines()[-1:] if proc.stderr else ''}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--scale" in argv:                       # dense vs working set up to 1e6 rows: benchmarks/solvers_scale.py
        from solvers_scale import main as scale_main

        return scale_main([a for a in argv if a != "--scale"])
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    ap.add_argument("--skip-reference-above", type=float, default=None,
                    help="skip the reference for cases whose expected reference time exceeds this (seconds)")
    ap.add_argument("--nuclear-time-limit", type=float, default=300.0)
    ap.add_argument("--only", nargs="+", choices=list(CASES), default=None,
                    help="timed cases to run (default: all; with --baseline-rev, the reference table is skipped)")
    _baseline.add_option(ap)
    ap.add_argument("--child", choices=list(CASES), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _baseline.emit(CASES[args.child](args.quick))
        return
    if args.baseline_rev:
        return compare(args)
    if not args.only:
        reference_cases(args)
    for name in args.only or CASES:
        print_case(name, CASES[name](args.quick))


if __name__ == "__main__":
    main()
