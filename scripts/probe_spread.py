"""A head's spread over query draws (issue 39): the head SVMs of two stored probes that differ only in their query
draw (``query_seed``), side by side.

    PYTHONPATH=FROZEN/src python scripts/probe_spread.py OUT_A OUT_B DEST.csv

OUT_A and OUT_B are stored probes (``attnsvm probe --out`` or ``scripts/probe_stored.py``) whose settings differ only
in ``query_seed``, null_draws and spectrum_draws (the head SVMs do not read the nulls' settings); each must hold every
head task at one common m. DEST.csv gets per head and m both draws' ``corr_restricted``, ``sel_first``, ``qi_share``
and ``mean_selected``, and the difference of the scores; DEST.json its provenance (both runs' settings, the code's
commit, the model digest). Shards are verified (checksums) as they are read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

MAY_DIFFER = ("query_seed", "null_draws", "spectrum_draws", "null_stop")
KEEP = ("corr_restricted", "sel_first", "qi_share", "mean_selected", "svm_status")


def heads(out: str):
    """``(table, provenance)`` of the head tasks stored in ``out`` (one row per layer, head and m), read and verified
    by :func:`probe_table.read_shards`."""
    import pandas as pd

    from probe_table import read_shards

    tables, provs, _ = read_shards([out])
    rows = [(t[["layer", "head", "m", *KEEP]], p) for t, p in zip(tables, provs) if p["params"]["part"] == "head"]
    if not rows:
        raise SystemExit(f"probe_spread: no stored head task under {out}/probe/shards")
    return pd.concat([t for t, _ in rows], ignore_index=True), [p for _, p in rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_a")
    ap.add_argument("out_b")
    ap.add_argument("dest")
    args = ap.parse_args(argv)
    import attnsvm

    (ta, pa), (tb, pb) = heads(args.out_a), heads(args.out_b)
    ca, cb = pa[0]["config"], pb[0]["config"]
    differ = sorted(k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k) and k not in MAY_DIFFER + ("svm_sentences",))
    if differ:
        raise SystemExit(f"probe_spread: the runs differ in {differ} (only {list(MAY_DIFFER)} may)")
    for key in ("source", "inputs"):
        if json.dumps(pa[0].get(key), sort_keys=True) != json.dumps(pb[0].get(key), sort_keys=True):
            raise SystemExit(f"probe_spread: the runs differ in {key}: one code and one model")
    both = ta.merge(tb, on=["layer", "head", "m"], suffixes=("_a", "_b"))
    if both.empty:
        raise SystemExit("probe_spread: no (layer, head, m) stored in both runs")
    both["diff"] = both["corr_restricted_b"] - both["corr_restricted_a"]
    both.sort_values(["layer", "head", "m"]).to_csv(args.dest, index=False, float_format="%.6g")
    here = os.path.dirname(os.path.abspath(attnsvm.__file__))
    git = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True)
    prov = {"commit": git.stdout.strip() or None, "runs": {"a": ca, "b": cb}, "inputs": pa[0].get("inputs"),
            "source": pa[0].get("source"), "rows": int(len(both))}
    with open(os.path.splitext(args.dest)[0] + ".json", "w", encoding="utf-8") as fh:
        json.dump(prov, fh, indent=2, default=str)
    print(f"wrote {args.dest} ({len(both)} rows): |difference| mean {both['diff'].abs().mean():.4f}, "
          f"max {both['diff'].abs().max():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
