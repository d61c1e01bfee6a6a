"""Why a pretrained model's heads have no Gen-SVM: direct contradictions among their selections (issue 39).

    python scripts/probe_tie_contradictions.py [--layers 0,1] [--m 256,512] [--n-sentences 1000] [--max-length 128]

For each layer, head and m it prints how many (query state, key-state pair) the head's selections on the first m
sentences ask two conflicting relations of (:func:`attnsvm.svm.gen_ties.gen_contradictions`: a tie in one sentence,
a margin in another, with bitwise-equal states), and how many distinct token and query states the m sentences have.
A head with one or more has no Gen-SVM on those sentences, whatever the solver says; none proves nothing. The
sentences, queries and selections are the probe's (``attnsvm probe`` with the same settings: default model, word
queries, threshold 0.1, seed 0), so the counts sit beside the probe's statuses in docs/data/probe_minilm_layers.csv.
"""

from __future__ import annotations

import argparse
import sys


def counts(setup, layer: int, ms: list) -> list[dict]:
    """One row per head and m: the head's direct contradictions on the first m sentences, and the layer's distinct
    candidate-token and query states there."""
    import numpy as np

    from attnsvm.real.probe_steps import head_selections, layer_inputs
    from attnsvm.svm.gen_ties import gen_contradictions

    _, sel = head_selections(setup, layer)  # (h, n, T)
    rotary = setup.model.family.rotary  # a rotary model's SVM tokens are per head (its post-rotary keys)
    rows = []
    for m in ms:
        for k, head in enumerate(setup.heads):
            if k == 0 or rotary:
                inp = layer_inputs(setup, layer, m, head=int(head))  # the SVM's own tokens X, queries Z, candidates
                states = len(np.unique(inp.X[inp.cand], axis=0))
                queries = len(np.unique(inp.Z, axis=0))
            w = gen_contradictions(inp.X, inp.Z, sel[k, :m], valid=inp.cand)
            rows.append({"layer": layer, "head": int(head), "m": m, "contradictions": len(w),
                         "candidates": int(inp.cand.sum()), "distinct_states": states, "distinct_queries": queries})
    return rows


def main(argv=None) -> int:
    import pandas as pd

    from attnsvm.real.probe_steps import prepare_probe

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="0,1", help="comma list of layers (default 0,1)")
    ap.add_argument("--m", default="256,512", help="comma list of SVM sentence counts (default 256,512)")
    ap.add_argument("--n-sentences", type=int, default=1000, help="the probe's corpus sentences (default 1000)")
    ap.add_argument("--max-length", type=int, default=128, help="tokens per sentence (default 128, MiniLM's run)")
    args = ap.parse_args(argv)
    layers = [int(v) for v in args.layers.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    setup = prepare_probe(n_sentences=args.n_sentences, layers=layers, max_length=args.max_length, seed=0)
    table = pd.DataFrame([r for layer in layers for r in counts(setup, layer, ms)])
    wide = table.pivot_table(index=["layer", "m", "candidates", "distinct_states", "distinct_queries"],
                             columns="head", values="contradictions")
    wide = wide.astype(int)
    wide.columns = [f"H{h}" for h in wide.columns]
    print(wide.reset_index().to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
