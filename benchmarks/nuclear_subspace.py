"""Benchmark: where a probe instance's nuclear solve spends its time.

Usage: python benchmarks/nuclear_subspace.py [--sentences 256] [--layer 3] [--heads 3] [--kinds head null]
       [--cases DIR] [--threads 1]

For the MiniLM selections of :mod:`probe_scale` (query "word", threshold 0.1, seed 0) of each head ("head") and of
its first spectrum null draw ("null": :func:`attnsvm.real.nulls.spectrum_null` of the head's spectrum, draw 0 of
:func:`attnsvm.real.nulls.null_rng`, selecting by its own attention at the threshold, as the probe's nulls do), it
solves the nuclear Gen-SVM of the first ``--sentences`` sentences by the working set
(:func:`attnsvm.svm.working_set.solve_nuclear_ws`, what ``attnsvm probe`` runs) and prints its CPU seconds,
rounds, subset size and interior-point iterations per round, the optimum's rank (singular values above 1e-6 of the
largest) and support, and the split of the CPU seconds over the interior-point method's parts (process CPU time
around each): ``schur`` (the blocks of the N x N Schur complement's lower triangle: its N x N x r products,
Hadamard products and query gathers), ``chol`` (its Cholesky factorization), ``dual`` (S's factor and the
(r1 + r2)-sized products of the dual iterate), ``dirs`` (the primal direction's products), ``factors`` (the Schur
complement's ``N x r`` and ``q x N`` factors) and the rest.

(The spectral-subspace restriction this benchmark also measured, ``attnsvm.svm.subspace``, was removed in 0.3: it
was slower than the full solve without an oracle, docs/guide/performance.md "Spectral subspaces for the nuclear
subproblem"; ``git show 89fb43a:benchmarks/nuclear_subspace.py`` has that version.)

``--cases DIR``: the arrays are read from / written to ``DIR/L{layer}h{head}_{sentences}.npz`` (as
benchmarks/nuclear_support.py). One BLAS thread by default. Needs the real extra: pip install 'attnsvm[real]'.
"""

from __future__ import annotations

import argparse
import time

from _offline import offline_threads


class _Split:
    """Process CPU seconds spent inside some functions of :mod:`attnsvm.svm.ipm` (wrapped while active)."""

    PARTS = {"schur": ("problem", "Problem", "schur_block"), "chol": ("linalg", None, "chol_upper_in_place"),
             "dual": ("problem", "Dual", "__init__"), "dirs": ("problem", "Problem", "XY"),
             "factors": ("problem", "Problem", "schur_parts")}

    def __init__(self):
        from attnsvm.svm.ipm import linalg, problem

        self.modules, self.cpu, self.saved = {"linalg": linalg, "problem": problem}, dict.fromkeys(self.PARTS, 0.0), []

    def __enter__(self):
        for name, (mod, cls, fn) in self.PARTS.items():
            owner = getattr(self.modules[mod], cls) if cls else self.modules[mod]
            orig = getattr(owner, fn)
            self.saved.append((owner, fn, orig))
            setattr(owner, fn, self._timed(name, orig))
        return self

    def _timed(self, name, orig):
        def run(*a, **k):
            c = time.process_time()
            try:
                return orig(*a, **k)
            finally:
                self.cpu[name] += time.process_time() - c
        return run

    def __exit__(self, *exc):
        for owner, fn, orig in self.saved:
            setattr(owner, fn, orig)


def _cases(args):
    """``{(head, kind): (X, Z, selected, valid)}`` of the first ``--sentences`` sentences."""
    import nuclear_support
    import numpy as np
    from attnsvm.real.layer import LayerInputs
    from attnsvm.real.minilm import load_minilm
    from attnsvm.real.nulls import head_spectrum, null_rng, own_selection, spectrum_null

    base = nuclear_support._load_cases(argparse.Namespace(sentences=args.sentences, sizes=[args.sentences],
                                                          layer=args.layer, heads=args.heads, cases=args.cases,
                                                          threads=args.threads))
    model = load_minilm() if "null" in args.kinds else None
    out = {}
    for h in args.heads:
        X, Z, S, valid = base[h]
        if "head" in args.kinds:
            out[(h, "head")] = (X, Z, S, valid)
        if "null" in args.kinds:          # draw 0 of the probe's spectrum nulls (null_heads, threshold selection)
            inp = LayerInputs.build(X, Z, valid)
            Wr = spectrum_null(head_spectrum(model.head_weights(args.layer, h)), X.shape[2],
                               null_rng(0, args.layer, h, 0, "spectrum"))
            out[(h, "null")] = (X, Z, np.asarray(own_selection(inp.scores(Wr), inp.cand, 0.1)), valid)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--layer", type=int, default=3)
    ap.add_argument("--heads", type=int, nargs="+", default=[3])
    ap.add_argument("--kinds", nargs="+", default=["head", "null"], choices=["head", "null"])
    ap.add_argument("--cases", default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    offline_threads(args.threads)

    import numpy as np

    from attnsvm.svm import gen_constraints
    from attnsvm.svm.working_set import solve_nuclear_ws

    for (h, kind), (X, Z, S, valid) in _cases(args).items():
        cs = gen_constraints(X, Z, S, valid=valid)
        print(f"\nlayer {args.layer} head {h} {kind}, {args.sentences} sentences: N = {cs.N}, d = {cs.d1}", flush=True)
        with _Split() as sp:
            c0 = time.process_time()
            ref = solve_nuclear_ws(cs, formulation="gen")
            cpu = time.process_time() - c0
        info = ref.info
        sv = np.linalg.svd(ref.W, compute_uv=False)
        its = int(sum(info.get("round_iterations") or [0]))
        split = " ".join(f"{k} {v:.1f}" for k, v in sp.cpu.items())
        print(f"  ws        {ref.status:>18} CPU-s {cpu:7.1f} rounds {info.get('rounds')} sizes "
              f"{info.get('round_sizes')} iterations {info.get('round_iterations')} rank {int((sv > 1e-6 * sv[0]).sum())}"
              f" support {info.get('support')} ||W||_* {ref.norm_value:.12g}", flush=True)
        print(f"            split (CPU-s): {split} other {cpu - sum(sp.cpu.values()):.1f}; per iteration "
              f"{cpu / max(its, 1):.3f}", flush=True)


if __name__ == "__main__":
    main()
