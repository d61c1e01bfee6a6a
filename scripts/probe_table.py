"""Commit-sized table of a stored probe, with its provenance (issue 39: the at-scale MiniLM run).

    python scripts/probe_table.py OUT [OUT ...] DEST.csv [--command "attnsvm probe ..."] [--m 128,256,512]
    python scripts/probe_table.py OUT DEST.csv --markdown | --summary   (print the docs' tables of DEST.csv)

OUT is the folder given to ``attnsvm probe --out``. DEST.csv gets one row per head and m with the columns the guide
reads (layer, head, m, the head's score, both nulls' means and sds, p, q, verdict, stable_verdict, the sink
statistics and the margin ratio), and DEST.json beside it the provenance: the commit of the code that imports here
(run it with the frozen worktree's ``src`` on PYTHONPATH), the model digest and source digest the tasks recorded,
the settings, the command, and the tasks' seconds (head SVMs and null draws, summed by m and part).

A finished run is read from its ``probe.csv``. A run still going (or ``--m``) is read from its verified shards:
every head and null task of the run's layers and heads at each m in ``--m`` (default: every m whose tasks are all
stored) must be there, and the table is combined as the finished run would combine it, with Benjamini-Yekutieli
over the heads at each m and the stable verdict over the two largest m *of the subset*; the provenance's
``from_shards`` gives the m it holds, the m the runs asked for and whether that is ``partial``.
The shards stay out of the repository; this table is what the docs cite.

Several OUT folders are read as one run when their tasks ran the same code on the same model and their settings
differ only in :data:`MAY_DIFFER` (which m each ran, and how many descriptive spectrum nulls it drew beside the
verdict's): e.g. m = 128..512 from one run and m = 1000 from a second one with fewer spectrum nulls. Each m must
come from one folder; the verdict's nulls of a head at an m are the same draws whichever folder ran them.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

COLUMNS = ("layer", "head", "m", "mean_selected", "sel_first", "qi_share", "corr_restricted", "null_kind", "null_mean",
           "null_sd", "n_null", "spectrum_mean", "spectrum_sd", "n_spectrum", "p_upper", "p_lower", "q_upper",
           "q_lower", "verdict", "stable_verdict", "margin_ratio", "svm_status", "svm_gap")
PROVENANCE = ("provenance", "code_version", "source", "config_hash", "environment", "wall_seconds", "workers",
              "finished", "computed", "resumed", "failed")
#: settings in which the runs of one table may differ (see the module docstring)
MAY_DIFFER = ("svm_sentences", "spectrum_draws")


def asked_ms(config: dict) -> list:
    """The m a run's settings ask for."""
    return config["svm_sentences"] if isinstance(config["svm_sentences"], list) else [config["svm_sentences"]]


def read_shards(outs: list) -> tuple[list, list]:
    """Every verified shard of the stored probes in ``outs``: ``(tables, provenances)`` (a shard that fails its
    checksum raises :class:`attnsvm.runner.storage.ShardError`). Exits when the folders cannot be one table: other
    code, model or settings (beyond :data:`MAY_DIFFER`), or one m stored in two folders."""
    from attnsvm.runner.storage import read_shard

    tables, provs, owner = [], [], {}
    real = [os.path.realpath(o) for o in outs]
    if len(set(real)) != len(real):
        raise SystemExit(f"probe_table: a folder is given twice ({outs})")
    for out in outs:
        found = sorted(glob.glob(os.path.join(out, "probe", "shards", "*", "*.parquet")))
        if not found:
            raise SystemExit(f"probe_table: no stored shards under {out}/probe/shards")
        for path in found:
            table, prov = read_shard(path)
            m = prov["params"]["m"]
            if "m" not in table.columns:  # a run of one m keys its tasks and rows without it
                table = table.assign(m=int(m))
            if owner.setdefault(m, out) != out:
                raise SystemExit(f"probe_table: m = {m} is stored in both {owner[m]} and {out}; give it once")
            tables.append(table)
            provs.append(prov)
    for key in ("source", "inputs", "attnsvm"):
        values = {json.dumps(p.get(key), sort_keys=True) for p in provs}
        if len(values) != 1:
            raise SystemExit(f"probe_table: the tasks differ in {key} ({sorted(values)}); one table needs one "
                             "code and model")
    same = [{k: v for k, v in p["config"].items() if k not in MAY_DIFFER} for p in provs]
    if any(c != same[0] for c in same):
        diff = sorted({k for c in same for k in c if c.get(k) != same[0].get(k)})
        raise SystemExit(f"probe_table: the runs' settings differ in {diff} (only {list(MAY_DIFFER)} may)")
    return tables, provs


def complete_ms(provs: list) -> list:
    """The m whose head and null tasks are all stored, for every layer and head of the runs' settings."""
    config = provs[0]["config"]
    asked = sorted({m for p in provs for m in asked_ms(p["config"])})
    have = {(p["params"]["layer"], p["params"]["head"], p["params"]["m"], p["params"]["part"]) for p in provs}
    return [m for m in asked if all((la, h, m, part) in have for la in config["layers"] for h in config["heads"]
                                    for part in ("head", "null"))]


def partial_table(tables: list, provs: list, ms: list):
    """The combined per-head table of the tasks at ``ms`` (each complete), as the finished run would make it."""
    import pandas as pd

    from attnsvm.real.probe_config import probe_config
    from attnsvm.real.probe_tasks import combine

    done = complete_ms(provs)
    missing = [m for m in ms if m not in done]
    if missing:
        raise SystemExit(f"probe_table: m = {missing} not complete (every layer x head needs its head and null "
                         f"task); complete: {done}")
    config = dict(provs[0]["config"], svm_sentences=sorted(ms) if len(ms) > 1 else ms[0])
    keep = [t for t, p in zip(tables, provs) if p["params"]["m"] in ms]
    return combine(probe_config(**config), pd.concat(keep, ignore_index=True))


def task_seconds(tables: list, provs: list) -> dict:
    """Seconds the stored tasks spent, summed by m: head SVMs (``seconds_svm``) and null draws by kind."""
    out = {}
    for table, prov in zip(tables, provs):
        part = out.setdefault(str(prov["params"]["m"]), {})
        if prov["params"]["part"] == "head":
            part["head_svm"] = part.get("head_svm", 0.0) + float(table["seconds_svm"].fillna(0).sum())
        else:
            for kind, s in table.groupby("kind")["null_seconds"].sum().items():
                part[f"null_{kind}"] = part.get(f"null_{kind}", 0.0) + float(s)
            for kind, n in table.groupby("kind").size().items():
                part[f"draws_{kind}"] = part.get(f"draws_{kind}", 0) + int(n)
    return {m: {k: round(v, 1) for k, v in d.items()} for m, d in out.items()}


SHORT = {"beyond null": "beyond", "below null": "below", "not distinguishable": "n.d.", "no SVM": "no SVM",
         "depends on sample size": "depends on m"}


def _pm(mean, sd, n) -> str:
    import math

    if not (isinstance(mean, float) and math.isfinite(mean)):
        return "none drawn"
    return f"{mean:.3f} ± {sd:.3f} ({int(n)})" if math.isfinite(sd) else f"{mean:.3f} ({int(n)})"


def markdown(table) -> str:
    """The docs' two tables of a probe table (one layer, several m): per head at the largest m (score, both nulls,
    the excess over the verdict's null in its sds and in corr, p, q, verdict, stable verdict, the [CLS] and
    query-independent shares), then each head's verdict and excess at every m."""
    import math

    ms = sorted(table["m"].unique())
    top = table[table["m"] == ms[-1]].sort_values(["layer", "head"])
    lines = [f"| head | selects [CLS] | query-independent share | corr_restricted | sink null (K) | excess: sink sds "
             f"(corr) | spectrum null (K) | p | q | verdict at m = {ms[-1]} | stable verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in top.itertuples():
        ex = r.corr_restricted - r.null_mean
        sds = f"{ex / r.null_sd:+.1f} ({ex:+.3f})" if math.isfinite(ex / r.null_sd) else f"({ex:+.3f})"
        lines.append(f"| L{r.layer}-H{r.head} | {r.sel_first:.2f} | {r.qi_share:.2f} | {r.corr_restricted:.3f} | "
                     f"{_pm(r.null_mean, r.null_sd, r.n_null)} | {sds} | "
                     f"{_pm(r.spectrum_mean, r.spectrum_sd, r.n_spectrum)} | {r.p_upper:.2g} | {r.q_upper:.2g} | "
                     f"{SHORT.get(r.verdict, r.verdict)} | {SHORT.get(r.stable_verdict, r.stable_verdict)} |")
    lines += ["", "| head | " + " | ".join(f"m = {m}" for m in ms) + " |", "|---|" + "---|" * len(ms)]
    for (layer, head), g in table.sort_values("m").groupby(["layer", "head"]):
        cells = []
        for r in g.itertuples():
            z = (r.corr_restricted - r.null_mean) / r.null_sd
            cells.append(f"{SHORT.get(r.verdict, r.verdict)} ({z:+.1f} sd)" if math.isfinite(z)
                         else SHORT.get(r.verdict, r.verdict))
        lines.append(f"| L{layer}-H{head} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(table) -> str:
    """The docs' per-layer summary of a probe table (several layers): per layer, at the largest m, how many heads
    have each stable verdict, the median head's excess over the verdict's null (in its sds and in corr), the median
    share of queries selecting [CLS], and the heads stably beyond or below the null with their excess."""
    import math

    ms = sorted(table["m"].unique())
    top = table[table["m"] == ms[-1]]
    order = ("beyond", "below", "not distinguishable", "depends on sample size", "no SVM")  # verdict.STABLE_VERDICTS
    lines = [f"| layer | heads | stably beyond | stably below | n.d. at both m | depends on m | median excess at m = "
             f"{ms[-1]}: sink sds (corr) | median share selecting [CLS] | beyond (excess in sds) | below |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for layer, g in top.groupby("layer"):
        counts = g["stable_verdict"].value_counts()
        ex = g["corr_restricted"] - g["null_mean"]
        z = ex / g["null_sd"]
        named = {v: ", ".join(f"H{r.head} ({(r.corr_restricted - r.null_mean) / r.null_sd:+.1f})"
                              for r in g[g["stable_verdict"] == v].sort_values("head").itertuples()) or "none"
                 for v in order[:2]}
        zmed = z[z.apply(math.isfinite)].median()
        lines.append(f"| {layer} | {len(g)} | " + " | ".join(str(int(counts.get(v, 0))) for v in order[:4])
                     + f" | {zmed:+.1f} ({ex.median():+.3f}) | {g['sel_first'].median():.2f} | "
                       f"{named['beyond']} | {named['below']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    import pandas as pd

    import attnsvm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="+", help="the folder(s) of attnsvm probe --out")
    ap.add_argument("dest", help="the CSV to write (a JSON of provenance is written beside it)")
    ap.add_argument("--command", default="", help="the command that made OUT (recorded as provenance)")
    ap.add_argument("--markdown", action="store_true", help="print the docs' tables of DEST.csv (already written) "
                    "and write nothing")
    ap.add_argument("--summary", action="store_true", help="print the docs' per-layer summary of DEST.csv (already "
                    "written) and write nothing")
    ap.add_argument("--m", default=None, help="comma list of m to table from the stored shards (default: a finished "
                    "run's probe.csv, else every complete m)")
    args = ap.parse_args(argv)
    if args.markdown or args.summary:
        print((summary if args.summary else markdown)(pd.read_csv(args.dest)), end="")
        return 0
    tables, provs = read_shards(args.out)
    finished = len(args.out) == 1 and os.path.exists(os.path.join(args.out[0], "probe.csv")) and args.m is None
    prov = {}
    if finished:
        out = args.out[0]
        table = pd.read_csv(os.path.join(out, "probe.csv"))
        with open(os.path.join(out, "probe", "meta.json"), encoding="utf-8") as fh:
            meta = json.load(fh)
        with open(os.path.join(out, "probe.json"), encoding="utf-8") as fh:
            probe = json.load(fh)
        prov.update(settings=probe.get("config"), seconds=probe.get("seconds"),
                    **{k: meta[k] for k in PROVENANCE if k in meta})
    else:
        ms = [int(v) for v in args.m.split(",")] if args.m else complete_ms(provs)
        if not ms:
            raise SystemExit("probe_table: the run has no complete m yet")
        table = partial_table(tables, provs, ms)
        asked = sorted({m for p in provs for m in asked_ms(p["config"])})
        runs = {p["config_hash"]: p["config"] for p in provs}
        prov.update(settings=provs[0]["config"] if len(runs) == 1 else runs,
                    from_shards={"m": ms, "runs_asked": asked, "partial": ms != asked,
                                 "tasks_stored": len(provs)},
                    config_hash=sorted(runs), source=provs[0]["source"],
                    code_version=provs[0]["version"], written=[min(p["written"] for p in provs),
                                                              max(p["written"] for p in provs)])
    cols = [c for c in COLUMNS if c in table.columns]
    table[cols].to_csv(args.dest, index=False, float_format="%.6g")
    here = os.path.dirname(os.path.abspath(attnsvm.__file__))  # the checkout whose code ran (a frozen worktree)
    git = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True)
    inputs = sorted({json.dumps(p.get("inputs"), sort_keys=True) for p in provs})
    prov = {"commit": git.stdout.strip() or None, "command": args.command, "rows": int(len(table)),
            "inputs": [json.loads(i) for i in inputs], "task_seconds": task_seconds(tables, provs), **prov}
    with open(os.path.splitext(args.dest)[0] + ".json", "w", encoding="utf-8") as fh:
        json.dump(prov, fh, indent=2, default=str)
    what = "" if finished else f" (from shards: m = {prov['from_shards']['m']} of {prov['from_shards']['runs_asked']})"
    print(f"wrote {args.dest} ({len(table)} rows, {len(cols)} columns){what} and its provenance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
