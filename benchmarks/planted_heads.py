"""Calibration of the probe's verdict: untouched, structured and planted heads in random BERT / GPT-2 models.

    OMP_NUM_THREADS=1 python benchmarks/planted_heads.py [--models 3] [--draws 8] [--sentences 8]

Builds, per family, ``--models`` random-weight models (tests/test_probe_calibration.py: 4 layers x 5
heads, width 40, initializer range 0.3, query biases drawn like the weights) whose 20 untouched heads
are probed, and as many models with heads 0-4 of layer 0 planted (the nuclear SVM of random one-token
selections, alpha 40), each head with ``--draws`` spectrum null heads. (Untouched heads *behind* a
planted layer were less well calibrated: 90 of them gave KS p 0.020, GPT-2's 45 p 0.029; not
explained, see the issue's closing note.) Prints

1. the calibration table: untouched heads' mean selected set and max attention, the KS test of their
   p_upper against U(0, 1) and of the exact Monte Carlo ranks (chi-square on the K + 1 ranks), and
   how many are called beyond / below null;
2. structured heads (the spectrum of each untouched head, singular vectors in the top principal
   subspaces of the layer's states) judged the same way;
3. the planted heads' verdicts, and the detection curve against the partial strength e of
   ``W_e = c ((1 - e) W_rand / ||W_rand|| + e W_svm / ||W_svm||)`` (c = ||alpha W_svm||): the share of
   such heads beyond null (Benjamini-Yekutieli over the heads at each e).

Writes only to /tmp/attnsvm-planted-heads.
"""

import argparse
import os
import shutil
import sys
import time

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from test_probe_calibration import PLANTED, THRESHOLD, planted_model, random_model, structured_heads  # noqa: E402

from attnsvm.real.nulls import head_against_nulls  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_steps import layer_inputs, prepare_probe  # noqa: E402
from attnsvm.real.sentences import corpus_sentences  # noqa: E402
from attnsvm.real.verdict import add_verdict  # noqa: E402

BASE = "/tmp/attnsvm-planted-heads"
STRENGTHS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


def mc_rank_chi2(t: pd.DataFrame, draws: int) -> float:
    """Chi-square p-value of the exact Monte Carlo ranks (K + 1 equally likely values under the null)."""
    ranks = np.rint(t["p_upper_mc"].to_numpy(float) * (draws + 1)).astype(int)
    counts = np.bincount(ranks, minlength=draws + 2)[1:draws + 2]
    return float(stats.chisquare(counts).pvalue)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=3, help="random models per family (20 untouched heads each)")
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--sentences", type=int, default=8)
    args = ap.parse_args()
    sentences = corpus_sentences(args.sentences, 3)
    shutil.rmtree(BASE, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    tables, svms = [], {}
    for kind in ("bert", "gpt2"):
        for seed in range(args.models):
            # untouched heads: a model of its own (no planted layer before them)
            path = random_model(kind, f"{BASE}/{kind}{seed}/untouched", seed=100 + seed)
            res = probe_heads(sentences, model=path, svm_sentences=len(sentences), threshold=THRESHOLD, max_length=24,
                              null_draws=args.draws)
            tables.append(res.table.assign(family=kind, model=seed, planted=False))
            path, sv = planted_model(kind, f"{BASE}/{kind}{seed}", PLANTED, sentences=sentences, seed=seed)
            res = probe_heads(sentences, model=path, layers=[0], svm_sentences=len(sentences), threshold=THRESHOLD,
                              max_length=24, null_draws=args.draws)
            tables.append(res.table.assign(family=kind, model=seed, planted=True))
            svms[(kind, seed)] = sv
    t = pd.concat(tables, ignore_index=True)
    un = add_verdict(t[~t["planted"]])  # BY over the untouched heads
    print(f"1. untouched heads ({len(un)}; {args.draws} spectrum nulls each, predictive t):")
    for fam, g in list(un.groupby("family")) + [("both", un)]:
        ks = stats.kstest(g["p_upper"].dropna(), "uniform")
        print(f"   {fam:>5}: {len(g)} heads, mean selected {g['mean_selected'].mean():.2f}, max attention "
              f"{g['max_attention'].mean():.2f}; KS p_upper vs U(0,1): D {ks.statistic:.3f}, p {ks.pvalue:.3f}; "
              f"Monte Carlo ranks chi-square p {mc_rank_chi2(g, args.draws):.3f}; beyond null "
              f"{int((g['verdict'] == 'beyond null').sum())}, below null {int((g['verdict'] == 'below null').sum())}")
    rows = []
    for kind in ("bert", "gpt2"):
        for seed in range(args.models):
            path = f"{BASE}/{kind}{seed}/random"
            s = structured_heads(path, sentences, [(l, h) for l in range(4) for h in range(5)], args.draws, seed)
            rows.append(s.assign(family=kind))
    st = add_verdict(pd.concat(rows, ignore_index=True))
    ks = stats.kstest(st["p_upper"].dropna(), "uniform")
    print(f"2. structured heads ({len(st)}): KS p_upper vs U(0,1) p {ks.pvalue:.3f}; beyond null "
          f"{int((st['verdict'] == 'beyond null').sum())} (BY over them), mean corr_restricted "
          f"{st['corr_restricted'].mean():.3f} vs their nulls {st['null_mean'].mean():.3f}")
    pl = add_verdict(t[t["planted"]])  # BY over the planted heads
    print(f"3. planted heads ({len(pl)}): beyond null {int((pl['verdict'] == 'beyond null').sum())}/{len(pl)}; "
          f"corr_restricted {pl['corr_restricted'].mean():.3f} vs nulls {pl['null_mean'].mean():.3f}")
    print("   detection curve: share beyond null (BY over the heads at each e) for W_e = c((1-e) W_rand + e W_svm)")
    for e in STRENGTHS:
        rows = []
        for kind in ("bert", "gpt2"):
            for seed in range(args.models):
                setup = prepare_probe(sentences, model=f"{BASE}/{kind}{seed}/random", max_length=24,
                                      threshold=THRESHOLD)
                inp = layer_inputs(setup, 0, len(setup.sentences))
                for h in PLANTED:
                    Wr, Ws = setup.model.head_weights(0, h), svms[(kind, seed)][h]
                    W = 40.0 * np.linalg.norm(Ws) * ((1 - e) * Wr / np.linalg.norm(Wr) + e * Ws / np.linalg.norm(Ws))
                    r = head_against_nulls(inp, W, np.ones(inp.m, int), seed=seed, layer=0, head=h, draws=args.draws,
                                           threshold=THRESHOLD)
                    rows.append(r)
        c = add_verdict(pd.DataFrame(rows).assign(layer=0, head=0))
        print(f"   e = {e:.1f}: {int((c['verdict'] == 'beyond null').sum())}/{len(c)} beyond null, corr_restricted "
              f"{c['corr_restricted'].mean():.3f} vs nulls {c['null_mean'].mean():.3f}")
    print(f"wall {time.perf_counter() - t0:.0f} s, CPU {time.process_time() - c0:.0f} s")


if __name__ == "__main__":
    main()
