"""Commit-sized table of a stored probe, with its provenance (issue 39: the at-scale MiniLM run).

    python scripts/probe_table.py OUT DEST.csv [--command "attnsvm probe ..."]

OUT is the folder given to ``attnsvm probe --out`` (it holds ``probe.csv`` and ``probe/meta.json``). DEST.csv gets one
row per head and m with the columns the guide reads (layer, head, m, the head's score, both nulls' means and sds,
p, q, verdict, stable_verdict, the sink statistics and the margin ratio), and DEST.json beside it the provenance:
the commit of the code that imports here (run it from the frozen worktree), the model digest and source digest the
runner recorded per task, the settings, the command, the tasks' CPU and wall seconds.
The shards stay out of the repository; this table is what the docs cite.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

COLUMNS = ("layer", "head", "m", "mean_selected", "sel_first", "qi_share", "corr_restricted", "null_kind", "null_mean",
           "null_sd", "n_null", "spectrum_mean", "spectrum_sd", "n_spectrum", "p_upper", "p_lower", "q_upper",
           "q_lower", "verdict", "stable_verdict", "margin_ratio", "svm_status", "svm_gap")


def main(argv=None) -> int:
    import pandas as pd

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the folder of attnsvm probe --out")
    ap.add_argument("dest", help="the CSV to write (a JSON of provenance is written beside it)")
    ap.add_argument("--command", default="", help="the command that made OUT (recorded as provenance)")
    args = ap.parse_args(argv)
    table = pd.read_csv(os.path.join(args.out, "probe.csv"))
    with open(os.path.join(args.out, "probe", "meta.json"), encoding="utf-8") as fh:
        meta = json.load(fh)
    with open(os.path.join(args.out, "probe.json"), encoding="utf-8") as fh:
        probe = json.load(fh)
    cols = [c for c in COLUMNS if c in table.columns]
    table[cols].to_csv(args.dest, index=False, float_format="%.6g")
    keep = ("provenance", "code_version", "source", "config_hash", "environment", "wall_seconds", "workers",
            "finished", "computed", "resumed", "failed")
    import subprocess

    import attnsvm

    here = os.path.dirname(os.path.abspath(attnsvm.__file__))  # the checkout whose code ran (a frozen worktree)
    git = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True)
    prov = {"commit": git.stdout.strip() or None, "command": args.command, "settings": probe.get("config"),
            "seconds": probe.get("seconds"), "rows": int(len(table)), **{k: meta[k] for k in keep if k in meta}}
    with open(os.path.splitext(args.dest)[0] + ".json", "w", encoding="utf-8") as fh:
        json.dump(prov, fh, indent=2, default=str)
    print(f"wrote {args.dest} ({len(table)} rows, {len(cols)} columns) and its provenance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
