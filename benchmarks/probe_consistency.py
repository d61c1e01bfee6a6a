"""Is the probe's statistic consistent as the number of SVM sentences m grows? Planted heads whose truth is known.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/probe_consistency.py [--ms 8,16,32,64,128] [--draws 4]
        [--heads 5] [--layers 1,2] [--pool 256] [--kinds max-margin,random,sink+random] [--seed 0] [--minilm 16,48]
        (a kind partial<e>, e.g. partial0.5, adds partially planted heads)

(defaults: 6.5-7 min wall, 150-161 CPU-s on the shared 2-core machine, two runs with identical output; the
calibration check of the guide's table is ``--ms 16,64 --draws 8 --layers 0,1,2,3 --kinds random,sink+random``,
MiniLM's ``--kinds '' --minilm 16,48,128``)

On a random-weight BERT-like model (tests/test_probe_calibration.py's ``random_model``: width 40, so the
bias-augmented states have D = 41 coordinates and span 40 directions; initializer range 0.3, threshold 0.1,
max_length 24; seed 0) and nested samples of the first m of ``max(ms)`` corpus sentences (one random word
query each), three kinds of planted heads, each selecting by its own attention (``own_selection``):

* ``max-margin``: 40 times the nuclear Gen-SVM of random one-token selections on the first ``--pool`` (256)
  sentences of layer 1 (as ``PLANTED`` heads are made), probed on the first m of those sentences: the max-margin
  head of its selections on a larger sample, of which every probe sees a part (as a trained head would be, if
  the theory holds, for its training text);
* ``random``: the model's own heads (Gaussian weights and query bias: one more draw of either null);
* ``sink+random``: the same heads plus ``4 k mu^T`` (tests/test_probe_sink_calibration.py's ``sink_direction``:
  position 0 gets a mean query-independent logit advantage of 4, like MiniLM's layer-3 heads give [CLS]).

Each head and each of its ``--draws`` spectrum nulls (``spectrum_null``) and sink nulls (``sink_null``) is
scored by its own selections' SVM with the candidate statistics: ``corr_restricted`` (the probe's), ``corr``
(unrestricted: what corr_restricted is once the queries span the states, m >= 40 here), ``corr_qd`` (the
query-dependent parts only, :func:`attnsvm.real.layer.corr_query_dependent`) and ``margin_ratio`` (the head's own
normalized margin on its selections over the SVM's, :func:`attnsvm.real.layer.margin_ratio`). Prints, per kind of
head, statistic and m, the heads' mean, each null's mean and sd, the mean z against each null and the KS p of the
heads' predictive-t p-values against U(0, 1); then the mechanism: support tokens per sentence, the share of W's
squared norm inside the restriction, and the query-independent (sink) share of the restricted W and of the SVM.
Writes the per-draw rows to /tmp/probe_consistency.csv.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from test_probe_calibration import THRESHOLD, random_model  # noqa: E402
from test_probe_sink_calibration import SINK, sink_direction  # noqa: E402

from attnsvm.real.layer import corr, margin_ratio, summary  # noqa: E402
from attnsvm.real.nulls import (  # noqa: E402
    head_spectrum, mean_query_direction, null_rng, own_selection, sink_null, spectrum_null,
)
from attnsvm.real.probe_steps import layer_inputs, prepare_probe, random_like  # noqa: E402
from attnsvm.real.sentences import corpus_sentences  # noqa: E402
from attnsvm.real.verdict import t_pvalues  # noqa: E402

KINDS = ("max-margin", "random", "sink+random")
STATS = ("corr_restricted", "corr", "corr_qd", "margin_ratio", "dual_margin")
ALPHA = 40.0  # the planted max-margin heads' scale (as planted_model)


def corr_query_dependent(R, S, mu):
    """Candidate (ii): the cosine of the query-dependent parts ``R (I - mu mu^T)`` and ``S (I - mu mu^T)`` of the
    restricted head ``R (D, D)`` and its SVM ``S (D, D)`` (mu (D,) the unit mean query: the split of
    :func:`attnsvm.real.nulls.query_split`)."""
    Q = np.eye(len(mu)) - np.outer(mu, mu)
    return corr(R @ Q, S @ Q)


def dual_margin(sol, R):
    """A softer margin ratio, measured and not kept: ``<G, R> / (||G||_2 ||R||_*)``, G = sum_k lam_k u_k v_k^T the
    SVM's multipliers' matrix (the support rows' margins of R weighted by the multipliers; <= 1 by Hoelder, 1 for
    R = the SVM itself)."""
    cs = sol.constraints
    G = cs.U.T @ (sol.duals[:, None] * cs.V)
    return float(np.sum(G * R) / (np.linalg.norm(G, 2) * np.linalg.norm(R, "nuc")))


def score(inp, W: np.ndarray) -> dict:
    """One bilinear head ``W (D, D)`` on the sentences ``inp``: its own selections, their SVM and every statistic,
    plus the mechanism's measurements (NaN statistics without a certified SVM)."""
    sel = own_selection(inp.scores(W), inp.cand, THRESHOLD)
    full = inp.svm(sel)
    sol = summary(full)
    S = sol["W"]
    mu = mean_query_direction(inp.Z)
    R = inp.restrict(W)
    nan = float("nan")
    out = {"corr_restricted": corr(R, S), "corr": corr(W, S),
           "corr_qd": corr_query_dependent(R, S, mu) if S is not None else nan,
           "margin_ratio": margin_ratio(inp.scores(W), sel, inp.cand, R, S),
           "dual_margin": dual_margin(full, R) if S is not None else nan,
           "selected": float(sel.sum(axis=1).mean()), "support": float(sol["support"].sum(axis=1).mean()),
           "in_restriction": float(np.sum(R ** 2) / np.sum(W ** 2)),
           "sink_share": float(np.sum(np.outer(R @ mu, mu) ** 2) / np.sum(R ** 2)),
           "svm_sink_share": float(np.sum((S @ mu) ** 2) / np.sum(S ** 2)) if S is not None else nan}
    return out


def heads(setup, layers, n_heads, pool, kinds=KINDS):
    """``{(kind, layer, head): function of inp -> W (D, D)}`` for the three kinds of planted heads (the max-margin
    heads fitted on the first ``pool`` sentences) and, for each kind ``partial<e>`` in ``kinds``, the partially
    planted heads ``W_e = c ((1 - e) W_rand / ||W_rand|| + e W_svm / ||W_svm||)`` of benchmarks/planted_heads.py
    (W_rand layer 1's head, W_svm the max-margin head's SVM, c = ||40 W_svm||)."""
    out = {}
    big = layer_inputs(setup, 1, pool)
    for h in range(n_heads):
        first = np.eye(big.X.shape[1], dtype=bool)[np.zeros(big.m, int)]
        chosen = random_like(first, big.cand, np.random.default_rng([17, h]))
        sol = big.svm(chosen)
        if sol.status != "optimal":
            raise RuntimeError(f"the max-margin head {h}'s SVM is {sol.status}")
        out[("max-margin", 1, h)] = (lambda inp, W=ALPHA * sol.W: W)
        Wr, Ws = setup.model.head_weights(1, h), sol.W
        for kind in kinds:
            if kind.startswith("partial"):
                e = float(kind[len("partial"):])
                W = ALPHA * np.linalg.norm(Ws) * ((1 - e) * Wr / np.linalg.norm(Wr) + e * Ws / np.linalg.norm(Ws))
                out[(kind, 1, h)] = (lambda inp, W=W: W)
    for layer in layers:
        for h in range(n_heads):
            Wh = setup.model.head_weights(layer, h)
            out[("random", layer, h)] = (lambda inp, W=Wh: W)
            out[("sink+random", layer, h)] = (
                lambda inp, W=Wh: W + SINK * np.outer(sink_direction(inp), mean_query_direction(inp.Z)))
    return out


def run(ms, draws, layers, n_heads, pool, kinds=KINDS, seed=0):
    with tempfile.TemporaryDirectory() as tmp:
        path = random_model("bert", os.path.join(tmp, "random"), seed=seed)
        setup = prepare_probe(corpus_sentences(max(pool, max(ms)), 3), model=path, max_length=24,
                              threshold=THRESHOLD, seed=seed)
        rows = []
        for (kind, layer, h), make in heads(setup, layers, n_heads, pool, kinds).items():
            if kind not in kinds:
                continue
            for m in ms:
                inp = layer_inputs(setup, layer, m)
                W = make(inp)
                D = W.shape[0]
                rows.append({"kind": kind, "layer": layer, "head": h, "m": m, "role": "head", "draw": -1,
                             **score(inp, W)})
                s, mu = head_spectrum(W), mean_query_direction(inp.Z)
                for j in range(draws):
                    Wr = spectrum_null(s, D, null_rng(seed, layer, h, j, "spectrum"))
                    rows.append({"kind": kind, "layer": layer, "head": h, "m": m, "role": "spectrum", "draw": j,
                                 **score(inp, Wr)})
                    Wr = sink_null(W, mu, null_rng(seed, layer, h, j, "sink"))
                    rows.append({"kind": kind, "layer": layer, "head": h, "m": m, "role": "sink", "draw": j,
                                 **score(inp, Wr)})
    return pd.DataFrame(rows)


def minilm(ms, draws, heads=(0, 3, 7), layer=3, seed=0) -> pd.DataFrame:
    """The shipped MiniLM's ``layer`` (D = 385): each of ``heads`` and ``draws`` sink nulls on the first m of
    ``max(ms)`` corpus sentences (the probe's defaults: one random word query, threshold 0.1), every statistic."""
    setup = prepare_probe(corpus_sentences(max(ms), seed), layers=[layer], threshold=THRESHOLD, seed=seed)
    rows = []
    for h in heads:
        W = setup.model.head_weights(layer, h)
        for m in ms:
            inp = layer_inputs(setup, layer, m)
            mu = mean_query_direction(inp.Z)
            rows.append({"kind": "MiniLM", "layer": layer, "head": h, "m": m, "role": "head", "draw": -1,
                         **score(inp, W)})
            for j in range(draws):
                rows.append({"kind": "MiniLM", "layer": layer, "head": h, "m": m, "role": "sink", "draw": j,
                             **score(inp, sink_null(W, mu, null_rng(seed, layer, h, j, "sink")))})
    return pd.DataFrame(rows)


def verdict_table(t: pd.DataFrame) -> pd.DataFrame:
    """Per kind, statistic, m: the heads' mean and sd, each null's mean and sd (over all draws of all heads),
    the heads' mean z against their own nulls and the KS p of their predictive-t p_upper against U(0, 1)."""
    out = []
    for (kind, m), g in t.groupby(["kind", "m"], sort=False):
        for st in STATS:
            row = {"kind": kind, "stat": st, "m": m}
            hv = g[g.role == "head"].set_index(["layer", "head"])[st]
            row["head"], row["head_sd"] = hv.mean(), hv.std()
            for null in ("spectrum", "sink"):
                nv = g[g.role == null]
                row[f"{null}_mean"], row[f"{null}_sd"] = nv[st].mean(), nv.groupby(["layer", "head"])[st].std().mean()
                p, z = [], []
                for key, v in hv.items():
                    pu, _, zz = t_pvalues(v, nv.set_index(["layer", "head"]).loc[[key], st].to_numpy(float))
                    p.append(pu)
                    z.append(zz)
                p = np.asarray(p)
                row[f"z_{null}"] = float(np.nanmean(z))
                row[f"ks_{null}"] = float(stats.kstest(p[np.isfinite(p)], "uniform").pvalue) if np.isfinite(p).sum() \
                    else float("nan")
                row[f"beyond_{null}"] = int(np.sum(p < 0.05))
            out.append(row)
    return pd.DataFrame(out)


def report(t: pd.DataFrame, draws: int):
    """Print the tables of :func:`run`'s rows (and keep them in /tmp/probe_consistency.csv)."""
    t.to_csv("/tmp/probe_consistency.csv", index=False)
    v = verdict_table(t)
    print(f"1. statistics by kind of head and m ({draws} spectrum and sink nulls per head; z: mean over heads; "
          "ks: KS p of the heads' p_upper vs U(0,1); beyond: heads with p_upper < 0.05)")
    for st in STATS:
        print(f"\n{st}")
        print(v[v.stat == st].drop(columns="stat").round(3).to_string(index=False))
    mech = t.groupby(["kind", "role", "m"], sort=False)[["selected", "support", "in_restriction", "sink_share",
                                                         "svm_sink_share"]].mean()
    print("\n2. mechanism (means): selected and support tokens per sentence, share of ||W||^2 inside the restriction, "
          "query-independent share of the restricted W and of its SVM")
    print(mech.round(3).to_string())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="8,16,32,64,128", help="numbers of SVM sentences (nested samples)")
    ap.add_argument("--draws", type=int, default=4, help="spectrum and sink nulls per head and m")
    ap.add_argument("--heads", type=int, default=5, help="heads per layer (and max-margin heads)")
    ap.add_argument("--layers", default="1,2", help="layers whose heads are the random and sink+random heads")
    ap.add_argument("--minilm", default="", help="also MiniLM layer 3, heads 0, 3, 7 at these m (e.g. 16,48)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="kinds of heads on the random model ('': none)")
    ap.add_argument("--seed", type=int, default=0, help="the random model's, the queries' and the nulls' seed")
    ap.add_argument("--pool", type=int, default=256, help="sentences the max-margin heads are fitted on (>= max m)")
    args = ap.parse_args()
    ms = sorted(int(v) for v in args.ms.split(","))
    layers = [int(v) for v in args.layers.split(",")]
    t0, c0 = time.perf_counter(), time.process_time()
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    if args.kinds:
        report(run(ms, args.draws, layers, args.heads, args.pool, args.kinds.split(","), args.seed), args.draws)
    if args.minilm:
        ml = minilm(sorted(int(v) for v in args.minilm.split(",")), args.draws)
        print("\n3. MiniLM layer 3 (sink nulls): head value, null mean and sd per statistic")
        g = ml.groupby(["head", "m", "role"])[list(STATS) + ["selected", "support", "sink_share"]]
        print(g.mean().round(3).to_string())
        print(ml[ml.role == "sink"].groupby(["head", "m"])[list(STATS)].std().round(3).to_string())
    print(f"\nwall {time.perf_counter() - t0:.0f} s, CPU {time.process_time() - c0:.0f} s")


if __name__ == "__main__":
    main()
