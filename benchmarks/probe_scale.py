"""Benchmark: one head's nuclear-norm Gen-SVM of the probe vs the number of sentences, dense vs working set.

Usage: python benchmarks/probe_scale.py [--sizes 48 128 256 512 1000] [--layer 3] [--heads 0 5]
       [--methods dense working_set] [--dense-max 128] [--sentences N] [--baseline] [--nulls] [--threads 1]
       [--baseline-rev REV] [--export DIR]

For MiniLM-L6 (query "word", threshold 0.1, the corpus of :func:`attnsvm.real.sentences.corpus_sentences`
with ``--sentences`` = max(sizes) sentences, seed 0) it builds the selections of the given layer's heads
exactly as :func:`attnsvm.real.probe.probe_heads` does and solves the Gen-SVM of the first m sentences
for each size m with each method of :func:`attnsvm.svm.solve` (``method`` "dense", "working_set" or
"auto"). One line per (head, m, method): the constraint rows N, wall and CPU seconds, status, the
certificate's relative duality gap and relative max violation, the final / largest working set (working
set only), the nuclear norm, corr_restricted with the head's W_h, and the relative difference of the
solution to the dense one where both ran. "dense" is skipped above ``--dense-max`` sentences (its N x N
Schur complement grows as N^2 in memory and N^3 in time). ``--baseline`` adds a random selection of
equal sizes per head (one draw on all sentences, its first m used at size m; the probe draws its baseline
per size instead). ``--nulls`` adds each head's first spectrum null draw (selection "null", as the probe's nulls:
:func:`attnsvm.real.nulls.spectrum_null` of the head's spectrum, draw 0 of :func:`attnsvm.real.nulls.null_rng`,
selecting by its own attention at the threshold; corr_restricted then against the null's W).

BLAS and torch use ``--threads`` threads (default 1, through threadpoolctl). The CPU column is the
process CPU time of the solve: when it is well below the wall time another process shared the cores.
Default runtime (sizes 48 128 256, dense up to 128, heads 0 and 5 of layer 3): about 2 minutes on one core
(``--dense-max 256`` adds 2 to 4 minutes per head). The measured seconds of the defaults and of ``--sizes 1000``
are in docs/guide/performance.md ("Figures recorded in the source before this page" and the sections below).
``--export DIR`` writes each case's arrays (as below) to DIR and solves nothing.
``--baseline-rev REV``: every solve runs in two child processes with one thread each, on this checkout and on a
git worktree of REV (benchmarks/_baseline.py); the parent builds the selections once and hands each child the
arrays of :func:`attnsvm.svm.gen_constraints` (X, Z, selected, valid) in a temporary .npz. Each row then shows
both CPU and wall seconds, the ratio baseline / ours, and the relative difference of the two nuclear norms; the
totals over all rows close the table.
Needs the real extra: pip install 'attnsvm[real]'.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import _baseline
from _offline import offline_threads


def solve_file(path: str, method: str) -> None:
    """Child of ``--baseline-rev``: the nuclear Gen-SVM of the arrays in ``path`` by ``method``; prints RESULT."""
    import numpy as np

    from attnsvm.svm import gen_constraints, solve

    with np.load(path) as f:
        X, Z, S, valid = f["X"], f["Z"], f["selected"], f["valid"]
    cs = gen_constraints(X, Z, S, valid=valid)
    t1, c1 = time.perf_counter(), time.process_time()
    sol = solve(cs, "nuclear", formulation="gen", method=method)
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    info = sol.info or {}
    c = sol.certificate
    _baseline.emit({"wall": wall, "cpu": cpu, "status": sol.status, "nuclear": float(sol.norm_value),
                    "gap": float(c.duality_gap), "violation": float(c.max_violation), "N": int(cs.N),
                    "rounds": info.get("rounds"), "ws": info.get("max_working_set")})


def main():
    if "--solve-file" in sys.argv:
        i = sys.argv.index("--solve-file")
        offline_threads(1)
        return solve_file(sys.argv[i + 1], sys.argv[i + 2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[48, 128, 256])
    ap.add_argument("--layer", type=int, default=3)
    ap.add_argument("--heads", type=int, nargs="+", default=[0, 5])
    ap.add_argument("--methods", nargs="+", default=["dense", "working_set"],
                    choices=["dense", "working_set", "auto"])
    ap.add_argument("--dense-max", type=int, default=128, help="largest m solved by the dense method")
    ap.add_argument("--sentences", type=int, default=None, help="corpus sentences loaded (default max(sizes))")
    ap.add_argument("--baseline", action="store_true", help="also the random selections of equal sizes")
    ap.add_argument("--nulls", action="store_true", help="also each head's first spectrum null draw")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--export", metavar="DIR", default=None,
                    help="only write each case's gen_constraints arrays to DIR/case-HEAD-SEL-M.npz (no solve)")
    _baseline.add_option(ap)
    args = ap.parse_args()
    offline_threads(args.threads)
    if args.export:
        return export(args)
    if args.baseline_rev:
        with _baseline.baseline_src(args.baseline_rev) as base_src, tempfile.TemporaryDirectory() as tmp:
            return compare(args, base_src, tmp)
    run(args)


def _cases(args):
    """The MiniLM selections of the chosen layer's heads: yields ``(head, kind, m, Xs, Zs, selected, valid, Wr)``."""
    import numpy as np
    from attnsvm.real.minilm import load_minilm
    from attnsvm.real.pretrained import augment
    from attnsvm.real.nulls import select_tokens
    from attnsvm.real.probe_steps import random_like
    from attnsvm.real.sentences import corpus_sentences
    from attnsvm.svm.nuclear import row_basis            # here in every revision

    n = args.sentences or max(args.sizes)
    if any(m < 1 or m > n for m in args.sizes):
        raise SystemExit(f"--sizes must lie in [1, {n}]")
    model = load_minilm()
    sentences = corpus_sentences(n, 0)
    t0 = time.perf_counter()
    fw = model.forward(sentences, max_length=128, attentions=True)
    print(f"MiniLM forward of {n} sentences: {time.perf_counter() - t0:.1f} s ({args.threads} thread(s))", flush=True)
    rng = np.random.default_rng(0)
    idx = np.arange(n)
    q = rng.integers(1, np.maximum(fw.lengths - 1, 2))      # as probe_heads, query="word", seed 0
    cand = fw.mask
    layer = args.layer
    X = augment(fw.layer_input(layer)) * cand[:, :, None]
    Z = X[idx, q]
    A = fw.attentions[layer][idx, :, q, :][:, args.heads].transpose(1, 0, 2)
    sel = select_tokens(A, cand, 0.1)
    rand = random_like(sel, cand, rng)
    for k, h in enumerate(args.heads):
        Wh = model.head_weights(layer, h)
        kinds = [("head", sel[k], Wh)] + ([("random", rand[k], Wh)] if args.baseline else [])
        if getattr(args, "nulls", False):
            kinds.append(("null",) + _null(model, X, Z, cand, layer, h))
        for kind, S, Wk in kinds:
            for m in args.sizes:
                Xs, ms, Zs = X[:m], cand[:m], Z[:m]
                first = np.argmax(ms, axis=1)
                P, B = row_basis((Xs - Xs[np.arange(m), first][:, None, :])[ms]), row_basis(Zs)
                Wr = P @ (P.T @ Wk @ B) @ B.T
                yield h, kind, m, Xs, Zs, S[:m], ms, Wr


def _null(model, X, Z, cand, layer: int, h: int):
    """``(selected (n, T), W (D, D))`` of head h's first spectrum null draw, selecting as the probe's nulls do."""
    import numpy as np
    from attnsvm.real.layer import LayerInputs
    from attnsvm.real.nulls import head_spectrum, null_rng, own_selection, spectrum_null

    inp = LayerInputs.build(X, Z, cand)
    Wr = spectrum_null(head_spectrum(model.head_weights(layer, h)), X.shape[2], null_rng(0, layer, h, 0, "spectrum"))
    return np.asarray(own_selection(inp.scores(Wr), inp.cand, 0.1)), Wr


def export(args):
    """``--export DIR``: the arrays (X, Z, selected, valid) of every case in DIR, as the children of ``--baseline-rev``
    read them (e.g. for benchmarks/newton_reduction.py)."""
    import numpy as np

    os.makedirs(args.export, exist_ok=True)
    for h, kind, m, Xs, Zs, S, ms, _ in _cases(args):
        path = os.path.join(args.export, f"case-{h}-{kind}-{m}.npz")
        np.savez(path, X=Xs, Z=Zs, selected=S, valid=ms)
        print(path, flush=True)


def compare(args, base_src, tmp):
    """Every (head, selection, size, method) solve on both revisions, one child process each."""
    import numpy as np

    print("same-run comparison: one child process with one thread per side; ratio = baseline / ours (> 1: ours "
          "faster); wall times on a shared machine are loaded", flush=True)
    cols = ("head", "sel", "m", "N", "method", "cpu_ours", "cpu_base", "ratio", "wall_ours", "wall_base", "ratio",
            "status", "gap", "d_nuclear")
    print("  ".join(f"{c:>10}" for c in cols), flush=True)
    tot = np.zeros(4)
    for h, kind, m, Xs, Zs, S, ms, _ in _cases(args):
        path = os.path.join(tmp, f"case-{h}-{kind}-{m}.npz")
        np.savez(path, X=Xs, Z=Zs, selected=S, valid=ms)
        for method in args.methods:
            if method == "dense" and m > args.dense_max:
                continue
            argv = [os.path.abspath(__file__), "--solve-file", path, method]
            a = _baseline.run_child(argv, _baseline.OURS)
            b = _baseline.run_child(argv, base_src)
            if "error" in a or "error" in b:
                print(f"{h:>10}  {kind:>10}  {m:>10}  {method}: ours {a.get('error', 'ok')}, baseline "
                      f"{b.get('error', 'ok')}", flush=True)
                continue
            tot += (a["cpu"], b["cpu"], a["wall"], b["wall"])
            dn = abs(a["nuclear"] - b["nuclear"]) / max(a["nuclear"], b["nuclear"])
            row = (h, kind, m, a["N"], method, f"{a['cpu']:.1f}", f"{b['cpu']:.1f}", _baseline.ratio(b["cpu"], a["cpu"]),
                   f"{a['wall']:.1f}", f"{b['wall']:.1f}", _baseline.ratio(b["wall"], a["wall"]),
                   f"{a['status']}/{b['status']}", f"{a['gap']:.0e}/{b['gap']:.0e}", f"{dn:.1e}")
            print("  ".join(f"{str(c):>10}" for c in row), flush=True)
    print(f"total: cpu ours {tot[0]:.1f} s, baseline {tot[1]:.1f} s, ratio {_baseline.ratio(tot[1], tot[0])}; "
          f"wall ours {tot[2]:.1f} s, baseline {tot[3]:.1f} s, ratio {_baseline.ratio(tot[3], tot[2])}", flush=True)


def run(args):
    """The table of the default mode (in this process)."""
    import numpy as np
    from attnsvm.real.layer import corr as _corr, summary as _summary
    from attnsvm.svm import gen_constraints, solve

    cols = ("head", "sel", "m", "N", "method", "wall_s", "cpu_s", "status", "gap", "violation", "ws", "max_ws",
            "nuclear", "corr_r", "dW_vs_dense")
    print("  ".join(f"{c:>11}" for c in cols), flush=True)
    for h, kind, m, Xs, Zs, S, ms, Wr in _cases(args):
        cs = gen_constraints(Xs, Zs, S, valid=ms)
        W_dense = None
        for method in args.methods:
            if method == "dense" and m > args.dense_max:
                continue
            t1, c1 = time.perf_counter(), time.process_time()
            sol = solve(cs, "nuclear", formulation="gen", method=method)
            wall, cpu = time.perf_counter() - t1, time.process_time() - c1
            s = _summary(sol)
            info = sol.info or {}
            dW = float("nan")
            if method == "dense" and sol.W is not None:
                W_dense = sol.W
            elif W_dense is not None and sol.W is not None:
                dW = float(np.linalg.norm(sol.W - W_dense) / np.linalg.norm(W_dense))
            row = (h, kind, m, cs.N, method, f"{wall:.1f}", f"{cpu:.1f}", s["status"], f"{s['gap']:.1e}",
                   f"{s['violation']:.1e}", info.get("working_set", "-"), info.get("max_working_set", "-"),
                   f"{s['nuclear']:.5g}", f"{_corr(Wr, s['W']):.6f}", f"{dW:.1e}")
            print("  ".join(f"{str(c):>11}" for c in row), flush=True)


if __name__ == "__main__":
    main()
