"""Scale benchmark of the SVM solvers: dense vs working set, up to a million constraints.

Usage: python benchmarks/solvers.py --scale [--only NAME ...] [--threads K] [--nuclear-time-limit S]
       [--baseline-rev REV]      (or python benchmarks/solvers_scale.py ...)

Every case runs in its own child process (``--case NAME --method M``), which prints one JSON
line: the seconds to generate the instance, to build the constraint set and to solve, the
peak resident memory of the child (``ru_maxrss``: everything, tokens included), and the
certificate (relative max violation over all N rows, relative duality gap; for an infeasible
result the relative Farkas residual ``||sum f_k A_k|| / sum |f_k| ||A_k||``). Dense and working
set run side by side where the dense N x N matrices fit; where they do not, the dense row shows
the memory it would need (the solver refuses, it does not swap). Targets (issue 13) are printed
next to the measurements; a missed target is shown as MISSED, never hidden.

With ``--baseline-rev REV`` every case row also runs on a git worktree of REV (benchmarks/_baseline.py: the
same child code, the baseline's sources on PYTHONPATH) and a line with both solve times and the ratio
baseline / ours follows (the sweep is skipped).

Instances: ``planted_problem`` (unit-norm Gaussian tokens and queries, selections of a
Gaussian W0 with a winner margin >= 0.1: separable by construction) and ``random_problem``
with its optimal tokens (not separable beyond n ~ 800-2000 at d = 64, T = 50).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _baseline  # noqa: E402

#: name -> (generator, (n, T, d), norm, formulation, methods, target seconds or None)
CASES = {
    "fro-planted-1e6": ("planted", (20000, 51, 64), "fro", "att", ("dense", "working_set"), 60.0),
    "fro-planted-1e5": ("planted", (2000, 51, 64), "fro", "att", ("working_set",), None),
    "fro-opt-300": ("opt", (300, 50, 64), "fro", "att", ("dense", "working_set", "auto"), 5.0),
    "fro-infeasible-1e6": ("opt", (20000, 51, 64), "fro", "att", ("dense", "working_set"), 60.0),
    "fro-planted-d384-1e5": ("planted", (2000, 51, 384), "fro", "att", ("dense", "working_set"), 120.0),
    "nuc-planted-1e5": ("planted", (2000, 51, 64), "nuclear", "att", ("working_set",), 600.0),
    "nuc-gen-planted-1e5": ("planted", (2000, 51, 64), "nuclear", "gen", ("working_set",), 600.0),
    "nuc-planted-25k": ("planted", (500, 51, 64), "nuclear", "att", ("dense", "working_set"), 600.0),
}
#: auto vs dense sweep at small and medium N (planted and optimal tokens, d = 64 and d = 10)
SWEEP = [(6, 8, 10), (20, 11, 64), (40, 21, 64), (60, 21, 64), (100, 31, 10), (60, 51, 64), (200, 51, 64)]


def _instance(kind, n, T, d, formulation):
    import numpy as np

    from attnsvm.generators import planted_problem, random_problem
    from attnsvm.svm.constraints import att_constraints, gen_constraints

    if kind == "planted":
        pr, sel, _ = planted_problem(n, T, d, seed=0)
    else:
        pr = random_problem(n, T, d, seed=0)
        sel = pr.optimal_tokens().index
    t = time.perf_counter()
    if formulation == "gen":        # singleton sets: the Gen-SVM path (same rows as the Att-SVM)
        O = np.zeros((n, T), bool)
        O[np.arange(n), sel] = True
        cs = gen_constraints(pr.X, pr.queries, O)
    else:
        cs = att_constraints(pr.X, pr.queries, sel)
    return cs, time.perf_counter() - t


def _child(name, method, spec, nuclear_time_limit, repeat):
    """Run one case in this process and print its JSON line."""
    import numpy as np

    from attnsvm.errors import ResourceLimitError
    from attnsvm.svm.frobenius import dense_frobenius_bytes
    try:
        from attnsvm.svm.dispatch import solve_dispatch
    except ImportError:                     # a --baseline-rev before svm/dispatch.py
        from attnsvm.svm.working_set import solve_dispatch

    kind, (n, T, d), norm, formulation = spec
    t0 = time.perf_counter()
    out = {"case": name, "method": method, "n": n, "T": T, "d": d, "norm": norm, "formulation": formulation}
    cs, t_cs = _instance(kind, n, T, d, formulation)
    out.update(N=int(cs.N), t_generate=time.perf_counter() - t0 - t_cs, t_constraints=t_cs)
    kw = {}
    if norm == "nuclear":
        kw["time_limit"] = nuclear_time_limit
    best, cpu, sol = float("inf"), float("inf"), None
    t = time.perf_counter()
    try:
        for _ in range(repeat):
            t, c = time.perf_counter(), time.process_time()
            sol = solve_dispatch(cs, norm, formulation, method=method, **kw)
            best = min(best, time.perf_counter() - t)
            cpu = min(cpu, time.process_time() - c)
    except ResourceLimitError as exc:
        out.update(refused=str(exc), after=time.perf_counter() - t, dense_bytes=dense_frobenius_bytes(cs.N))
    if sol is not None:
        c = sol.certificate
        out.update(t_solve=best, cpu_solve=cpu, status=sol.status, norm_value=sol.norm_value, solver=sol.info.get("method"),
                   rounds=sol.info.get("rounds"), working_set=sol.info.get("max_working_set"),
                   support=int(sol.support.sum()), max_violation=c.max_violation, duality_gap=c.duality_gap,
                   residual=c.stationarity_residual, certified=bool(sol.certified), stopped=sol.info.get("stopped"))
        if sol.status == "infeasible":
            f = c.farkas
            out.update(farkas_min=float(f[~cs.is_equality].min()), farkas_rhs=float(cs.rhs @ f),
                       farkas_rows=int(np.count_nonzero(f)))
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print("RESULT " + json.dumps(out), flush=True)


def _run(name, method, spec, args, repeat=1, src=_baseline.OURS):
    """One case in a child process on the sources ``src`` (this checkout's by default)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--case", name, "--method", method,
           "--spec", json.dumps(spec), "--nuclear-time-limit", str(args.nuclear_time_limit), "--repeat", str(repeat)]
    env = _baseline.child_env(src, args.threads)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"case": name, "method": method, "error": (proc.stderr.strip().splitlines() or ["?"])[-1],
            "wall": time.perf_counter() - t}


def _fmt(r):
    if "error" in r:
        return f"  {r['method']:<12s} FAILED: {r['error']}"
    if "refused" in r:
        if r["method"] == "dense":
            return f"  {r['method']:<12s} refused: needs {r['dense_bytes'] / 2**30:.1f} GiB for its N x N matrices"
        return (f"  {r['method']:<12s} refused after {r['after']:.1f} s (peak {r['peak_rss_gb']:.2f} GiB): "
                f"{r['refused']}")
    cert = (f"farkas residual {r['residual']:.1e} (f >= {r['farkas_min']:.0e}, rhs.f = {r['farkas_rhs']:.12g}, "
            f"{r['farkas_rows']} rows)" if r["status"] == "infeasible"
            else f"viol {r['max_violation']:.1e} gap {r['duality_gap']:.1e}")
    extra = f" rounds {r['rounds']} |S|max {r['working_set']}" if r.get("rounds") else ""
    stop = f" STOPPED ({r['stopped']})" if r.get("stopped") else ""
    return (f"  {r['method']:<12s} solve {r['t_solve']:9.3f} s, cpu {r['cpu_solve']:9.3f} s  "
            f"(generate {r['t_generate']:.1f} s, constraints "
            f"{r['t_constraints']:.1f} s)  peak {r['peak_rss_gb']:5.2f} GiB  {r['status']:<18s} {cert}{extra}{stop}")


def _verdict(ok, what):
    return f"    target {what}: {'met' if ok else 'MISSED'}"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None,
                    help=f"case names among {', '.join(CASES)} and 'sweep' (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--nuclear-time-limit", type=float, default=600.0)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--case")
    ap.add_argument("--method")
    ap.add_argument("--spec")
    ap.add_argument("--repeat", type=int, default=1)
    _baseline.add_option(ap)
    args = ap.parse_args(argv)
    if args.case:
        kind, nTd, norm, form = json.loads(args.spec)
        _child(args.case, args.method, (kind, tuple(nTd), norm, form), args.nuclear_time_limit, args.repeat)
        return
    with _baseline.baseline_src(args.baseline_rev) as base_src:
        _cases(args, base_src)


def _cases(args, base_src):
    """The table of cases (and the sweep unless a baseline is compared)."""
    print(f"scale benchmark: {args.threads} BLAS thread(s), one child process per row; times are the solve "
          "alone unless stated", flush=True)
    names = [n for n in args.only if n != "sweep"] if args.only else list(CASES)
    for name in names:
        kind, nTd, norm, form, methods, target = CASES[name]
        print(f"\n{name}: {kind} {tuple(nTd)} {norm} {form}", flush=True)
        res = {}
        for m in methods:
            r = _run(name, m, (kind, nTd, norm, form), args)
            res[m] = r
            print(_fmt(r), flush=True)
            if base_src is not None:
                b = _run(name, m, (kind, nTd, norm, form), args, src=base_src)
                print(_fmt(b).replace(f"  {m:<12s}", f"  {'baseline':<12s}", 1), flush=True)
                if "t_solve" in r and "t_solve" in b:
                    obj = ""
                    if r["status"] == b["status"] != "infeasible":
                        rel = abs(r["norm_value"] - b["norm_value"]) / max(abs(r["norm_value"]), abs(b["norm_value"]))
                        obj = f", objective rel. diff {rel:.1e}"
                    print(f"    {m}: baseline / ours: cpu {_baseline.ratio(b['cpu_solve'], r['cpu_solve'])}, "
                          f"wall {_baseline.ratio(b['t_solve'], r['t_solve'])}{obj}", flush=True)
        ws = res.get("working_set")
        if ws and "t_solve" in ws:
            print(f"    N = {ws['N']}", flush=True)
            if target is not None:
                total = ws["t_solve"]
                ok = total <= target and (ws["certified"] or ws["status"] == "infeasible")
                print(_verdict(ok, f"certified within {target:g} s (solve)"), flush=True)
            if name == "fro-planted-1e6":
                print(_verdict(ws["peak_rss_gb"] <= 3.0, "peak memory <= 3 GB"), flush=True)
                print(_verdict(ws["duality_gap"] <= 1e-9 and ws["max_violation"] <= 1e-9,
                               "relative gap and max violation <= 1e-9"), flush=True)
            if name.startswith("nuc"):
                print(_verdict(ws["duality_gap"] <= 1e-6, "certified relative gap <= 1e-6"), flush=True)
        dn = res.get("dense")
        for other in ("working_set", "auto"):
            o = res.get(other)
            if dn and o and "t_solve" in dn and "t_solve" in o and dn["status"] != "infeasible":
                rel = abs(dn["norm_value"] - o["norm_value"]) / max(dn["norm_value"], o["norm_value"])
                print(f"    {other} vs dense: {dn['t_solve'] / o['t_solve']:.1f}x faster, objective rel. diff "
                      f"{rel:.1e}", flush=True)
                tol = 1e-9 if norm == "fro" else 1e-6
                print(_verdict(rel <= tol, f"agreement with dense <= {tol:g}"), flush=True)
    if (args.only is None or "sweep" in args.only) and not args.no_sweep and base_src is None:
        print("\nauto vs dense (best of 5 below N = 2000, else one run; planted and optimal tokens):", flush=True)
        print(f"  {'instance':<28s} {'N':>7s} {'dense [s]':>10s} {'auto [s]':>10s} {'dense/auto':>10s} "
              f"{'rel.diff':>9s}  status", flush=True)
        worst_small = None
        for kind in ("planted", "opt"):
            for nTd in SWEEP:
                spec = (kind, list(nTd), "fro", "att")
                n, T, d = nTd
                N = n * (T - 1)
                rep = 5 if N < 2000 else 1
                dn = _run("sweep", "dense", spec, args, rep)
                au = _run("sweep", "auto", spec, args, rep)
                if "t_solve" not in dn or "t_solve" not in au:
                    print(f"  {kind} {nTd}: {dn.get('error') or dn.get('refused')} / {au.get('error')}", flush=True)
                    continue
                ratio = dn["t_solve"] / au["t_solve"]
                rel = (abs(dn["norm_value"] - au["norm_value"]) / max(dn["norm_value"], au["norm_value"])
                       if dn["status"] != "infeasible" else 0.0)
                print(f"  {kind + ' ' + str(tuple(nTd)):<28s} {N:7d} {dn['t_solve']:10.4f} {au['t_solve']:10.4f} "
                      f"{ratio:10.2f} {rel:9.1e}  {dn['status']} / {au['status']} ({au['solver']})", flush=True)
                if N < 10**4:
                    worst_small = ratio if worst_small is None else min(worst_small, ratio)
                else:
                    print(_verdict(ratio >= 10, "auto >= 10x faster than dense from N = 1e4"), flush=True)
        if worst_small is not None:
            print(_verdict(worst_small >= 1 / 1.1, "auto never > 10% slower than dense below N = 1e4") +
                  f" (worst dense/auto {worst_small:.2f})", flush=True)


if __name__ == "__main__":
    main()
