"""Benchmark: CPU seconds of one head's SVM and of each of its null heads, the probe's cost at scale.

Usage: python benchmarks/probe_cost.py [--sentences 1000] [--svm-sentences S] [--layer 3] [--heads 3 0]
       [--null-draws 2] [--transplant-draws 0] [--threads 1]

``--svm-sentences`` (default: all ``--sentences``) is the SVMs' share, as ``attnsvm probe --svm-sentences``: the
default probe's size is ``--sentences 256 --svm-sentences 48``. Each spectrum null's line also gives its own
constraint rows N and working set, and ``setup-s``: its CPU seconds outside the SVM build and solve (the null's
spectrum, singular vectors, scores, selection and correlation).

For MiniLM-L6 (query "word", threshold 0.1, the corpus of :func:`attnsvm.real.sentences.corpus_sentences`, seed 0)
it runs the probe's own steps (:mod:`attnsvm.real.probe_steps`): one forward pass, the layer's SVM sentences
(all ``--sentences`` of them) built once, then per head the head's nuclear Gen-SVM (no random baseline: it costs
several times the head, see benchmarks/probe_scale.py --baseline) and its first ``--null-draws`` spectrum null
heads (:func:`attnsvm.real.probe_steps.null_task`), each timed in process CPU seconds with ``--threads`` BLAS
threads. One line per SVM: kind, draw, status, constraint rows N, largest working set, CPU and wall seconds,
corr_restricted. The head's row equals its row of ``attnsvm probe --layers L --heads H --n-sentences S
--svm-sentences S`` (same steps, same seeds). It closes with the estimates the lines imply (printed with the
arithmetic): a layer's 12 heads with K nulls each, at the measured mean per head and per null.
Needs the real extra: pip install 'attnsvm[real]'.
"""

from __future__ import annotations

import argparse
import time

from _offline import offline_threads


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--svm-sentences", type=int, default=None)
    ap.add_argument("--layer", type=int, default=3)
    ap.add_argument("--heads", type=int, nargs="+", default=[3, 0])
    ap.add_argument("--null-draws", type=int, default=2)
    ap.add_argument("--transplant-draws", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    offline_threads(args.threads)

    import numpy as np

    from attnsvm.real.layer import LayerInputs, corr, summary
    from attnsvm.real.probe_steps import NullDraws, layer_inputs, layer_selections, null_task, prepare_probe

    class TimedInputs(LayerInputs):
        """The layer's inputs, recording each SVM's CPU seconds (rows built and solved), N and working set."""

        last: dict = {}

        def svm(self, selected, **solver_options):
            c = time.process_time()
            sol = super().svm(selected, **solver_options)
            TimedInputs.last = {"cpu": time.process_time() - c, "N": sol.constraints.N,
                                "ws": (sol.info or {}).get("max_working_set", "")}
            return sol

    t0, c0 = time.perf_counter(), time.process_time()
    setup = prepare_probe(n_sentences=args.sentences, layers=[args.layer], heads=args.heads)
    print(f"forward of {args.sentences} sentences (T = {setup.fw.mask.shape[1]}): {time.process_time() - c0:.1f} "
          f"CPU-s, {time.perf_counter() - t0:.1f} s wall", flush=True)
    ls = layer_selections(setup, args.layer)
    m = len(setup.sentences) if args.svm_sentences is None else min(args.svm_sentences, len(setup.sentences))
    inp = TimedInputs(**vars(layer_inputs(setup, args.layer, m)))
    print(f"{'head':>4} {'kind':>10} {'draw':>4} {'status':>10} {'N':>6} {'ws':>5} {'CPU-s':>8} {'wall-s':>8} "
          f"{'corr_r':>8} {'setup-s':>8}", flush=True)
    cost = {"head": [], "spectrum": [], "transplant": []}
    setup_cpu = []
    for k, h in enumerate(setup.heads):  # setup.heads is sorted: ls.sel[k] is head setup.heads[k]
        sel = ls.sel[k, :m]
        c1, t1 = time.process_time(), time.perf_counter()
        sol = inp.svm(sel)
        cpu, wall = time.process_time() - c1, time.perf_counter() - t1
        s = summary(sol)
        info = sol.info or {}
        cost["head"].append(cpu)
        print(f"{h:>4} {'head':>10} {'':>4} {s['status']:>10} {sol.constraints.N:>6} "
              f"{str(info.get('max_working_set', '')):>5} {cpu:>8.1f} {wall:>8.1f} "
              f"{corr(inp.restrict(setup.model.head_weights(args.layer, h)), s['W']):>8.4f}", flush=True)
        for kind, draws in (("spectrum", args.null_draws), ("transplant", args.transplant_draws)):
            for j in range(draws):
                c1, t1 = time.process_time(), time.perf_counter()
                if kind == "spectrum":  # draw j alone: null_heads draws j from its own generator
                    from attnsvm.real.nulls import null_heads

                    d = null_heads(inp, setup.model.head_weights(args.layer, h), sel.sum(axis=1), seed=setup.seed,
                                   layer=args.layer, head=h, draws=1, start=j, threshold=setup.threshold)[0]
                else:
                    d = [x for x in null_task(setup, inp, args.layer, h, sel, NullDraws(0, transplant=j + 1))
                         if x["kind"] == "transplant"][-1]
                cpu, wall = time.process_time() - c1, time.perf_counter() - t1
                cost[kind].append(cpu)
                last = TimedInputs.last
                setup_cpu.append(cpu - last["cpu"])
                print(f"{h:>4} {kind:>10} {j:>4} {d['status']:>10} {last['N']:>6} {str(last['ws']):>5} {cpu:>8.1f} "
                      f"{wall:>8.1f} {d['corr_restricted']:>8.4f} {cpu - last['cpu']:>8.3f}", flush=True)
    head = float(np.mean(cost["head"]))
    null = float(np.mean(cost["spectrum"])) if cost["spectrum"] else float("nan")
    print(f"\nmean CPU-s per head SVM {head:.1f} ({len(cost['head'])} heads), per spectrum null {null:.1f} "
          f"({len(cost['spectrum'])} draws), null / head {null / head:.2f}; per null outside its SVM "
          f"{np.mean(setup_cpu) if setup_cpu else float('nan'):.3f} CPU-s")
    for K in (2, 8):
        est = 12 * (head + K * null)
        print(f"estimate, layer {args.layer} at {m} sentences, 12 heads with K = {K} nulls each (no random "
              f"baseline): 12 x ({head:.1f} + {K} x {null:.1f}) = {est:.0f} CPU-s = {est / 3600:.2f} CPU-h")


if __name__ == "__main__":
    main()
