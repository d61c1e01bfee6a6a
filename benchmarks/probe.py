"""Benchmark: probe all 72 heads of MiniLM-L6 (6 layers x 12 heads) on 256 sentences.

Usage: python benchmarks/probe.py [--sentences 256] [--svm-sentences 48] [--threads 1]

Prints the time of the forward pass (all layers' hidden states and attention maps),
of the nuclear-norm Gen-SVMs (72 heads + 72 random baselines, exact interior-point
solver) and the total, plus the model load time, the process CPU time (a check on
wall times when other jobs share the machine) and the solvers' certificates.
BLAS and torch use ``--threads`` threads (default 1).
Needs the real extra: pip install 'attnsvm[real]'.
"""

import argparse
import time

from _offline import offline_threads


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--svm-sentences", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    offline_threads(args.threads)
    from attnsvm.real.minilm import load_minilm
    from attnsvm.real.probe import probe_heads

    t0 = time.perf_counter()
    c0 = time.process_time()
    load_minilm()
    t_load = time.perf_counter() - t0
    res = probe_heads(n_sentences=args.sentences, svm_sentences=args.svm_sentences,
                      progress=lambda m: print(f"  [{time.perf_counter() - t0:6.1f} s] {m}", flush=True))
    t = res.table
    print(f"probed {len(t)} heads on {res.config['n_sentences']} sentences "
          f"(nuclear Gen-SVMs on {res.config['svm_sentences']} sentences, {len(t)} heads + {len(t)} baselines)")
    print(f"model load {t_load:.1f} s, forward {res.seconds['forward']:.1f} s, SVMs {res.seconds['svm']:.1f} s, "
          f"probe total {res.seconds['total']:.1f} s, wall {time.perf_counter() - t0:.1f} s, "
          f"CPU {time.process_time() - c0:.1f} s ({args.threads} thread(s))")
    if "svm_status" not in t.columns:  # --svm-sentences 0: selections only
        print("no SVMs solved (--svm-sentences 0): selections and their statistics only")
        return
    status = list(t["svm_status"]) + [s for r in t["random_status"] for s in r.split(",")]
    print(f"SVMs reported optimal by the solver: {sum(s == 'optimal' for s in status)}/{len(status)} "
          f"(heads: max relative gap {t['svm_gap'].max():.1e}, max violation {t['svm_violation'].max():.1e}), "
          f"{sum(s == 'infeasible' for s in status)} infeasible")
    print(f"mean corr_restricted {t['corr_restricted'].mean():.3f} vs baseline {t['corr_random_restricted'].mean():.3f} "
          f"(advantage {t['advantage'].mean():.3f}; {int((t['advantage'] > 0).sum())}/{len(t)} heads above baseline)")


if __name__ == "__main__":
    main()
