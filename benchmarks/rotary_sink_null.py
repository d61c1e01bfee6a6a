"""The sink null on random-weight rotary heads: the query-state rotation the probe uses against ``W_h R`` in the
post-rotary query space (the non-rotary sink null applied to the rotary formulation's fixed W_h).

    OMP_NUM_THREADS=1 python benchmarks/rotary_sink_null.py [--models 5] [--families llama,neox] [--sinks 0,4]

Builds ``--models`` random-weight models per family (tests/test_probe_calibration.py's ``random_model`` at the
sizes of tests/test_probe_sink_calibration.py: Llama 4 layers x 6 query heads on 2 key-value heads, head size 8;
GPT-NeoX 4 layers x 5 heads, head size 16, rotary_pct 0.25) and judges every head at m = 8 and 16 SVM sentences
against 8 sink nulls of each construction, with and without a planted sink (that module's ``plant_sink``: in the
query map, as a rotary head carries it; "post-rotary" then rotates the sunk queries). Prints, per family, null,
sink and m: heads, mean p_upper, mean z, the KS p of p_upper against U(0, 1) and the Benjamini-Yekutieli calls
(over each model's heads at that m). "query-state" is exchangeable with a random head (the module docstring of
attnsvm.real.nulls); "post-rotary" is not.
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
from test_probe_sink_calibration import DRAWS, FAMILIES, MS, SENTENCES, plant_sink, positions  # noqa: E402

from attnsvm.real.layer import LayerInputs  # noqa: E402
from attnsvm.real.nulls import head_against_nulls  # noqa: E402
from attnsvm.real.probe_steps import layer_inputs, prepare_probe  # noqa: E402
from attnsvm.real.verdict import add_verdict  # noqa: E402


def judge_model(setup, sink: float, null: str) -> pd.DataFrame:
    """Every head of the model against its sink nulls of construction ``null`` at each m; BY per m."""
    tables = []
    for m in MS:
        rows = []
        for l, h in positions(setup):
            inp = layer_inputs(setup, l, m, head=h)
            W = setup.model.head_weights(l, h)
            if sink:
                inp, W = plant_sink(inp, W, sink)
            if null == "post-rotary":  # no query map: the sink null is W R about the mean post-rotary query
                inp = LayerInputs.build(inp.X, inp.Z, inp.cand)
            r = head_against_nulls(inp, W, np.ones(m, int), seed=0, layer=l, head=h, draws=DRAWS,
                                   threshold=THRESHOLD, kind="sink")
            rows.append({"m": m, "layer": l, "head": h, **r})
        tables.append(add_verdict(pd.DataFrame(rows)))
    return pd.concat(tables, ignore_index=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=5)
    ap.add_argument("--families", default="llama,neox")
    ap.add_argument("--sinks", default="0,4")
    args = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory(prefix="attnsvm-rotary-null-") as tmp:
        for family in args.families.split(","):
            for seed in range(args.models):
                path = random_model(family, os.path.join(tmp, f"{family}{seed}"), seed=seed, **FAMILIES[family])
                setup = prepare_probe(SENTENCES, model=path, max_length=24, threshold=THRESHOLD, seed=0)
                for sink in (float(s) for s in args.sinks.split(",")):
                    for null in ("query-state", "post-rotary"):
                        t0 = time.time()
                        t = judge_model(setup, sink, null)
                        out.append(t.assign(family=family, model=seed, sink=sink, null=null,
                                            seconds=time.time() - t0))
    t = pd.concat(out, ignore_index=True)
    rows = []
    for (family, null, sink, m), g in t.groupby(["family", "null", "sink", "m"]):
        rows.append({"family": family, "null": null, "sink": sink, "m": m, "heads": len(g),
                     "mean_p": g["p_upper"].mean(), "mean_z": g["z_null"].mean(),
                     "ks_p": stats.kstest(g["p_upper"].dropna(), "uniform").pvalue,
                     "beyond": int((g["verdict"] == "beyond null").sum()),
                     "below": int((g["verdict"] == "below null").sum())})
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
