"""Benchmark (a measurement, no timing): can the nuclear IPM's Newton systems be solved for less than a factorization?

Usage: python benchmarks/newton_reduction.py CASE.npz [--systems 10 20 30] [--frac 0.1 0.2] [--tol 1e-10]
       [--maxit 300]

``CASE.npz`` holds the arrays of :func:`attnsvm.svm.gen_constraints` (``X``, ``Z``, ``selected``, ``valid``), as
``python benchmarks/probe_scale.py ... --export DIR`` writes them. The nuclear Gen-SVM is solved by the working
set (one thread); at each listed Newton system (numbered from 0 over the whole solve) the system
``(M + D) y = r`` (M the Schur complement, ``D = diag(s / lam)``, r the predictor's right-hand side) is formed
densely and the script prints:

- ``N`` and the share of rows whose diagonal ``D_kk`` exceeds ``M_kk`` (where an LP's constraint reduction would
  treat the row as decoupled), and the 90% quantile of ``D_kk / M_kk``;
- PCG iterations to the relative residual ``--tol`` with three preconditioners: the previous system's Cholesky
  factor (when it has the same rows; "-" otherwise), and for each ``--frac`` f, with the f largest ``s / lam``
  rows as "inactive" R and the rest Q, the factor of the Q block plus R's diagonal ("Q+diag"), or plus R's own
  factor ("block");
- the Jacobi-scaled matrix's condition number.

``--maxit`` caps PCG (shown as ">maxit"). Each listed system costs a few dense N x N factorizations on top of the
solve. Measured on the first spectrum null of head 3 (layer 3, 512 sentences): docs/guide/performance.md, "The
Newton solve at N ~ 6000".
"""

from __future__ import annotations

import argparse

from _offline import offline_threads


def _pcg(M, b, P, tol: float, maxit: int) -> int:
    """Iterations of preconditioned CG on ``M y = b`` (``P(r)`` the preconditioner) to ``|r| <= tol |b|``; maxit + 1
    when not reached."""
    import numpy as np

    x = np.zeros_like(b)
    r = b.copy()
    z = P(r)
    p = z.copy()
    rz = r @ z
    nb = np.linalg.norm(b)
    for i in range(maxit):
        Mp = M @ p
        a = rz / (p @ Mp)
        x += a * p
        r -= a * Mp
        if np.linalg.norm(r) <= tol * nb:
            return i + 1
        z = P(r)
        rz, rz0 = r @ z, rz
        p = z + (rz / rz0) * p
    return maxit + 1


def _factor(M):
    """Solver of ``M y = r`` by the Jacobi-scaled Cholesky factorization of the symmetric positive definite M."""
    import numpy as np
    import scipy.linalg as sla

    sc = 1.0 / np.sqrt(np.diagonal(M))
    F = sla.cho_factor(M * sc[:, None] * sc[None, :], lower=True)
    return lambda r: sc * sla.cho_solve(F, sc * r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case")
    ap.add_argument("--systems", type=int, nargs="+", default=[10, 20, 30])
    ap.add_argument("--frac", type=float, nargs="+", default=[0.1, 0.2])
    ap.add_argument("--tol", type=float, default=1e-10)
    ap.add_argument("--maxit", type=int, default=300)
    args = ap.parse_args()
    offline_threads(1)
    import numpy as np

    from attnsvm.svm import gen_constraints, solve
    from attnsvm.svm.ipm import Problem

    want = set(args.systems) | {k - 1 for k in args.systems}
    state = {"k": 0, "prev": None}
    orig = Problem.newton_solver

    def fmt(it):
        return f">{args.maxit}" if it > args.maxit else str(it)

    def analysed(pb, x, du, diag):
        solver = orig(pb, x, du, diag)
        k = state["k"]
        state["k"] += 1
        if k not in want:
            state["prev"] = None
            return solver
        M = pb.schur(x.X11, x.X12, x.X22, du)
        mkk = M.diagonal().copy()
        M[np.diag_indices_from(M)] += diag
        prev, state["prev"] = state["prev"], (pb, _factor(M))
        if k not in args.systems:
            return solver
        rows = pb.ineq if not isinstance(pb.I, slice) else np.ones(pb.N, bool)
        ratio = np.where(rows, diag / mkk, 0.0)
        b = pb.rhs.copy()
        stale = fmt(_pcg(M, b, prev[1], args.tol, args.maxit)) if prev is not None and prev[0] is pb else "-"
        red = []
        for f in args.frac:
            R = np.argsort(-ratio)[: int(f * pb.N)]
            Q = np.setdiff1d(np.arange(pb.N), R)
            FQ, FR, dR = _factor(M[np.ix_(Q, Q)]), _factor(M[np.ix_(R, R)]), M.diagonal()[R]

            def P(r, own):
                out = np.empty_like(r)
                out[Q] = FQ(r[Q])
                out[R] = FR(r[R]) if own else r[R] / dR
                return out

            red.append(f"{f:g}: Q+diag {fmt(_pcg(M, b, lambda r: P(r, False), args.tol, args.maxit))} "
                       f"block {fmt(_pcg(M, b, lambda r: P(r, True), args.tol, args.maxit))}")
        sc = 1.0 / np.sqrt(M.diagonal())
        w = np.linalg.eigvalsh(M * sc[:, None] * sc[None, :])
        print(f"system {k:3d}  N {pb.N:6d}  D>M_kk {np.mean(ratio > 1):.2f}  q90(D/M_kk) "
              f"{np.quantile(ratio[rows], 0.9):.1e}  PCG previous factor {stale}  {'  '.join(red)}  "
              f"cond {w[-1] / max(w[0], 1e-300):.1e}", flush=True)
        return solver

    Problem.newton_solver = analysed
    with np.load(args.case) as f:
        cs = gen_constraints(f["X"], f["Z"], f["selected"], valid=f["valid"])
    sol = solve(cs, "nuclear", formulation="gen", method="working_set")
    print(f"solve: {sol.status}, {state['k']} Newton systems, rounds {sol.info.get('round_sizes')}", flush=True)


if __name__ == "__main__":
    main()
