"""The nuclear solver on a torch device against the numpy / scipy path, same instances, same machine, same run.

    python benchmarks/device_ratio.py [--device cuda] [--files F.npz ...] [--select NAME ...] [--planted n,T,d ...]
                                      [--dense n,T,d ...] [--threads K] [--csv OUT.csv]

Each case is solved twice, first with ``device=None`` (numpy / scipy, BLAS with ``--threads`` threads:
default all of the machine's) and then with ``device=--device``; the device is warmed up once before the
first timed solve (a small solve, not counted). Printed per case: wall seconds and process CPU seconds of
both, the wall ratio (numpy / device), both statuses, and the relative difference of the certified nuclear
norms, which must stay within 1e-8 (the working set's ``gap_tol``: two certified answers of one problem
can differ by that much in objective) for the line to say "equal".

Cases:

- ``--files F.npz``: the probe's instances as written by ``python benchmarks/probe_scale.py --export DIR``
  (arrays ``X, Z, selected, valid``: one case), or a file holding ``X, Z, valid`` and several
  ``sel_NAME`` arrays (one case per selection: the heads and nulls of one layer share X and Z); the nuclear
  Gen-SVM by the working set, as ``attnsvm probe`` solves it.
- ``--planted n,T,d``: the planted Att-SVM of :func:`attnsvm.generators.planted_problem` (seed 0), by
  the working set.
- ``--dense n,T,d``: the same planted instance in one interior-point run over all rows (``method="dense"``:
  the IPM's Schur complement at full N, where the device's share of the work is largest).

Without a CUDA device, ``--device cpu`` runs the torch path on the CPU (a check that the script works;
its ratio is not a GPU figure).
"""

import argparse
import os
import sys
import time


def _cases(args):
    import numpy as np

    from attnsvm.generators import planted_problem
    from attnsvm.svm import gen_constraints

    for path in args.files:
        with np.load(path) as f:
            X, Z, valid = (f[k].astype(np.float64) if f[k].dtype.kind == "f" else f[k] for k in ("X", "Z", "valid"))
            sels = {k[4:]: f[k] for k in f.files if k.startswith("sel_")} or {"selected": f["selected"]}
        for name, S in sels.items():
            if args.select and name not in args.select:
                continue
            yield (f"{os.path.basename(path)}:{name}", "working_set",
                   lambda S=S: gen_constraints(X, Z, S, valid=valid), "gen")
    for spec, method in [(s, "working_set") for s in args.planted] + [(s, "dense") for s in args.dense]:
        n, T, d = (int(v) for v in spec.split(","))

        def make(n=n, T=T, d=d):
            from attnsvm.svm import att_constraints

            pp = planted_problem(n, T, d, seed=0)
            return att_constraints(pp.problem.X, pp.problem.Z, pp.select)

        yield f"planted {n},{T},{d}", method, make, "att"


def _timed(cs, formulation, method, device):
    from attnsvm.svm import solve

    t0, c0 = time.perf_counter(), time.process_time()
    sol = solve(cs, "nuclear", formulation=formulation, method=method, device=device)
    return sol, time.perf_counter() - t0, time.process_time() - c0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--files", nargs="*", default=[])
    ap.add_argument("--select", nargs="*", default=[], metavar="NAME",
                    help="only these selections of the --files (sel_NAME arrays; default all)")
    ap.add_argument("--planted", nargs="*", default=[], metavar="n,T,d")
    ap.add_argument("--dense", nargs="*", default=[], metavar="n,T,d")
    ap.add_argument("--threads", type=int, default=None, help="BLAS threads of the numpy path (default: all)")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args(argv)
    if not (args.files or args.planted or args.dense):
        ap.error("give at least one case: --files, --planted or --dense")
    if args.threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    import numpy as np
    import torch

    from attnsvm.generators import planted_problem
    from attnsvm.svm import att_constraints, solve

    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "torch on the CPU"
    print(f"device {args.device} ({name}); numpy path BLAS threads: {args.threads or 'default'}; "
          f"torch {torch.__version__}, numpy {np.__version__}", flush=True)
    pp = planted_problem(30, 6, 8, seed=1)                  # warm-up: CUDA context, kernels, cuSOLVER handles
    solve(att_constraints(pp.problem.X, pp.problem.Z, pp.select), "nuclear", method="dense", device=args.device)
    rows = []
    for label, method, make, formulation in _cases(args):
        cs = make()
        ref, w0, c0 = _timed(cs, formulation, method, None)
        got, w1, c1 = _timed(cs, formulation, method, args.device)
        rel = abs(got.norm_value - ref.norm_value) / max(abs(ref.norm_value), 1e-300)
        same = ref.status == got.status == "optimal" and rel <= 1e-8
        row = dict(case=label, method=method, N=int(cs.N), cpu_wall=w0, cpu_cpu=c0, dev_wall=w1, dev_cpu=c1,
                   ratio=w0 / w1, status_cpu=ref.status, status_dev=got.status, nuclear=float(ref.norm_value),
                   rel_diff=rel, equal=same, gap_dev=float(got.certificate.duality_gap))
        rows.append(row)
        print(f"{label:28s} {method:11s} N={row['N']:6d}  numpy {w0:8.2f} s wall {c0:8.1f} CPU-s | "
              f"{args.device} {w1:8.2f} s wall {c1:8.1f} CPU-s | ratio {w0 / w1:5.2f}x | {ref.status}/{got.status} "
              f"norm rel diff {rel:.1e} {'equal' if same else 'DIFFERENT'}", flush=True)
    tw0, tw1 = sum(r["cpu_wall"] for r in rows), sum(r["dev_wall"] for r in rows)
    print(f"total: numpy {tw0:.2f} s wall, {args.device} {tw1:.2f} s wall: {tw0 / tw1:.2f}x; "
          f"all equal: {all(r['equal'] for r in rows)}", flush=True)
    if args.csv:
        import pandas as pd

        pd.DataFrame(rows).to_csv(args.csv, index=False)
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
