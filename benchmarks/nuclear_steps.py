"""Benchmark: the nuclear IPM (``ipm.nuclear_ipm``) on exported instances of the probe, against a baseline revision.

Usage:
  python benchmarks/nuclear_steps.py --export DIR [probe_cost.py options]   # write DIR/inst_*.npz
  python benchmarks/nuclear_steps.py DIR/inst_*.npz [--rounds 3] [--baseline-rev REV]
  python benchmarks/nuclear_steps.py DIR/inst_*.npz --trace
  python benchmarks/nuclear_steps.py --export-grown DIR CASE.npz [CASE.npz ...]   # write DIR/CASE-grown.npz

``--export`` runs benchmarks/probe_cost.py (needs the real extra: MiniLM) with every ``nuclear_ipm`` call's inputs
written to ``DIR/inst_NNN.npz`` (U, V, rhs, eq, lam_init, W_init, tol; the solver's own arguments from
``svm.nuclear``); real-minilm-heads' shape is ``--sentences 256 --svm-sentences 16 --layer L --heads H
--null-draws K``. The timing mode solves each file in a child process with one BLAS thread (``--rounds`` times,
ours and the baseline alternating, the least CPU time of each kept) and prints per instance: reduced shape,
status, iterations, CPU ms, and ``||W||_*``; with ``--baseline-rev``, the baseline's, the ratio baseline / ours
and the relative difference of the objectives. ``--trace`` solves each file once in this process (this checkout)
and prints the solver's per-iteration trace (the DEBUG records of ``attnsvm.svm.barrier``): rows N, barrier
parameter mu, relative gap, violation, largest primal residual rp, then sigma, the affine-scaling mu, the primal
bound (and its LP part), the dual bound and the steps taken.

``--export-grown DIR CASE.npz ...`` takes the probe's arrays (X, Z, selected, valid: ``probe_scale.py --export``
or ``--baseline-rev``'s files), solves each case's nuclear Gen-SVM by the working set (this checkout, one thread)
and writes the inputs of its grown round (``barrier_grow.nuclear_ipm_grow``: U, V, rhs, eq, start, lam_init,
W_init, tol, max_rows) to ``DIR/CASE-grown.npz``. Files with a ``start`` array are solved by ``nuclear_ipm_grow``
in the timing and trace modes (the iterations are then the grown round's, joins and drops included), the others
by ``nuclear_ipm``.
"""

from __future__ import annotations

import argparse
import inspect
import os
import runpy
import sys
import time

import _baseline


def export(out: str, argv: list) -> None:
    """Run probe_cost.py with ``svm.nuclear.nuclear_ipm_unchecked``'s inputs written to ``out/inst_NNN.npz``
    (the key ``tol`` holds the run's ``gap_tol``)."""
    import numpy as np

    import attnsvm.svm.nuclear as nuc

    os.makedirs(out, exist_ok=True)
    real, count = nuc.nuclear_ipm_unchecked, [0]

    def dump(U, V, rhs, eq, **kw):
        lam0, W0 = kw.get("lam_init"), kw.get("W_init")
        np.savez(os.path.join(out, f"inst_{count[0]:03d}.npz"), U=U, V=V, rhs=rhs, eq=eq,
                 lam_init=np.zeros(0) if lam0 is None else lam0, W_init=np.zeros((0, 0)) if W0 is None else W0,
                 tol=kw["gap_tol"])
        count[0] += 1
        return real(U, V, rhs, eq, **kw)

    nuc.nuclear_ipm_unchecked = dump
    sys.argv = ["probe_cost.py"] + argv
    runpy.run_path(os.path.join(_baseline.HERE, "probe_cost.py"), run_name="__main__")


def export_grown(out: str, cases: list) -> None:
    """Solve each probe case by the working set and write its grown round's inputs to ``out/CASE-grown.npz``."""
    import numpy as np

    import attnsvm.svm.barrier_grow as bg
    from attnsvm.svm import gen_constraints, solve

    os.makedirs(out, exist_ok=True)
    real = bg.nuclear_ipm_grow
    for case in cases:
        path = os.path.join(out, os.path.basename(case).removesuffix(".npz") + "-grown.npz")

        def dump(U, V, rhs, eq, start, path=path, **kw):
            np.savez(path, U=U, V=V, rhs=rhs, eq=eq, start=start, lam_init=kw["lam_init"], W_init=kw["W_init"],
                     tol=kw["settings"].gap_tol, max_rows=kw["limits"].max_rows)
            return real(U, V, rhs, eq, start, **kw)

        bg.nuclear_ipm_grow = dump
        with np.load(case) as f:
            cs = gen_constraints(f["X"], f["Z"], f["selected"], valid=f["valid"])
        c = time.process_time()
        sol = solve(cs, "nuclear", formulation="gen", method="working_set")
        i = sol.info or {}
        print(f"{path}: N {cs.N} {sol.status} ||W||_* {float(sol.norm_value):.15g} CPU {time.process_time() - c:.1f} s "
              f"rounds {i.get('rounds')} iterations {i.get('round_iterations')}", flush=True)
    bg.nuclear_ipm_grow = real


def _solve(z):
    """``nuclear_ipm`` (or ``nuclear_ipm_grow`` when the file has a ``start`` array) on the arrays of one file."""
    from attnsvm.svm.ipm import nuclear_ipm
    from attnsvm.svm.barrier_grow import GrowthLimits, nuclear_ipm_grow
    from attnsvm.svm.settings import SolverSettings

    if "start" in z.files:
        return nuclear_ipm_grow(z["U"], z["V"], z["rhs"], z["eq"], z["start"], lam_init=z["lam_init"],
                                W_init=z["W_init"], settings=SolverSettings(gap_tol=float(z["tol"])),
                                limits=GrowthLimits(max_rows=int(z["max_rows"])))[0]
    kw = {"lam_init": z["lam_init"], "W_init": z["W_init"]} if z["lam_init"].size else {}
    # a baseline revision before gap_tol took the gap tolerance as tol
    kw["gap_tol" if "gap_tol" in inspect.signature(nuclear_ipm).parameters else "tol"] = float(z["tol"])
    return nuclear_ipm(z["U"], z["V"], z["rhs"], z["eq"], **kw)


def child(files: list) -> None:
    """Solve each file once; emit per file the CPU seconds, status, iterations, reduced shape and ||W||_*."""
    import numpy as np

    from attnsvm.svm.ipm import singular_values

    rows = []
    for f in files:
        z = np.load(f)
        c = time.process_time()
        res = _solve(z)
        rows.append({"cpu": time.process_time() - c, "status": res.status, "it": res.info.get("iterations"),
                     "shape": res.info.get("reduced_shape"), "obj": float(singular_values(res.W).sum())})
    _baseline.emit({"rows": rows})


def trace(files: list) -> None:
    """Solve each file once here and print the interior-point method's per-iteration trace."""
    import logging

    import numpy as np

    class Lines(logging.Handler):
        def emit(self, record):
            r = record.ipm
            if r["kind"] == "iterate":
                print(f"  N {r['N']:6d} mu {r['mu']:9.2e} gap {r['gap']:9.2e} viol {r['viol']:8.1e} rp {r['rp']:8.1e}",
                      end="")
            elif r["kind"] == "step":
                print(f" | sigma {r['sigma']:8.2e} mu_aff {r['mu_aff']:8.2e} bound p {r['ap_max']:.3f} (lp "
                      f"{r['ap_lp']:.3f}) d {r['ad_max']:.3f} step p {r['ap']:.3f} d {r['ad']:.3f}")
            else:
                print(f"\n  {r['kind']} {r['rows']} rows: N {r['N']}")

    log = logging.getLogger("attnsvm.svm.barrier")
    log.addHandler(Lines())
    log.setLevel(logging.DEBUG)
    log.propagate = False
    for f in files:
        z = np.load(f)
        print(os.path.basename(f))
        res = _solve(z)
        print(f"\n  {res.status}, {res.info.get('iterations')} iterations, relative gap {res.info['rel_gap']:.1e}")


def main():
    argv = sys.argv[1:]
    if "--export" in argv:                  # the rest goes to probe_cost.py as it is
        i = argv.index("--export")
        if i + 1 >= len(argv):
            raise SystemExit("--export needs a folder")
        return export(argv[i + 1], argv[:i] + argv[i + 2:])
    if "--export-grown" in argv:
        i = argv.index("--export-grown")
        if i + 2 >= len(argv):
            raise SystemExit("--export-grown needs a folder and at least one case file")
        from _offline import offline_threads

        offline_threads(1)
        return export_grown(argv[i + 1], argv[i + 2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--export", metavar="DIR", help="write the instances of probe_cost.py's run (its options follow)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help="print each solve's per-iteration trace (this checkout)")
    _baseline.add_option(ap)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.files)
    if args.trace:
        from _offline import offline_threads

        offline_threads(1)
        return trace(args.files)
    with _baseline.baseline_src(args.baseline_rev) as base_src:
        sides = [("ours", _baseline.OURS)] + ([("base", base_src)] if base_src else [])
        best = {}
        for _ in range(args.rounds):
            for name, src in sides:
                r = _baseline.run_child([os.path.abspath(__file__), "--child"] + args.files, src)
                if "error" in r:
                    raise SystemExit(f"{name}: {r['error']}")
                if name not in best:
                    best[name] = r["rows"]
                else:
                    for b, x in zip(best[name], r["rows"]):
                        b["cpu"] = min(b["cpu"], x["cpu"])
    tot = {k: 0.0 for k in best}
    its = {k: 0 for k in best}
    print(f"{'instance':>24} {'r1 x r2':>9} {'status':>10} {'it':>4} {'ms':>8} {'||W||_*':>20}"
          + (f" {'base it':>7} {'base ms':>8} {'ratio':>6} {'obj rel diff':>12}" if "base" in best else ""))
    for k, f in enumerate(args.files):
        o = best["ours"][k]
        line = (f"{os.path.basename(f):>24} {'x'.join(map(str, o['shape'])):>9} {o['status']:>10} {o['it']:>4} "
                f"{1e3 * o['cpu']:>8.1f} {o['obj']:>20.15g}")
        if "base" in best:
            b = best["base"][k]
            line += (f" {b['it']:>7} {1e3 * b['cpu']:>8.1f} {_baseline.ratio(b['cpu'], o['cpu']):>6} "
                     f"{abs(o['obj'] - b['obj']) / abs(b['obj']):>12.1e}")
        print(line)
        for name in best:
            tot[name] += best[name][k]["cpu"]
            its[name] += best[name][k]["it"]
    n = len(args.files)
    for name in best:
        print(f"{name}: total {tot[name]:.3f} CPU-s, mean iterations {its[name] / n:.1f} (least of {args.rounds} "
              f"rounds, one BLAS thread)")
    if "base" in best:
        print(f"ratio base / ours: {_baseline.ratio(tot['base'], tot['ours'])}")


if __name__ == "__main__":
    main()
