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
differ only in :data:`MAY_DIFFER` (which m and layers each ran, and how many descriptive spectrum nulls it drew
beside the verdict's): e.g. m = 128..512 from one run and m = 1000 from a second one with fewer spectrum nulls, or
layers 1-5 from one run and layer 0 from another. Each layer and m comes from one folder; the verdict's nulls of a
head at an m are the same draws whichever folder ran them (seeded by seed, layer, head and draw). Benjamini-Yekutieli
runs over every layer's heads at each m, as one run of all the layers would.

    python scripts/probe_table.py OUT1 OUT2 DEST.csv --replace --mixed-code "REASON"

``--replace``: a layer and m stored in several folders is taken from the last (a rerun of a layer whose tasks
failed); the provenance's ``replaced`` says what, and ``agreement`` the largest difference, column by column, between
the tasks both runs stored. ``--mixed-code REASON``: tasks of different code (source digest) in one table, with the
reason and which layers each code ran in the provenance's ``mixed_code``. Without them such folders are refused.
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
           "q_lower", "verdict", "stable_verdict", "margin_ratio", "svm_status", "svm_gap", "verdict_reason")
PROVENANCE = ("provenance", "code_version", "source", "config_hash", "environment", "wall_seconds", "workers",
              "finished", "computed", "resumed", "failed")
#: settings in which the runs of one table may differ (see the module docstring)
MAY_DIFFER = ("svm_sentences", "spectrum_draws", "layers")


def asked_ms(config: dict) -> list:
    """The m a run's settings ask for."""
    return config["svm_sentences"] if isinstance(config["svm_sentences"], list) else [config["svm_sentences"]]


def _settings(config: dict) -> dict:
    """A run's settings without :data:`MAY_DIFFER`, with every field an older run did not record at its default
    (``statistic`` came after the first at-scale runs; their tasks computed the default, corr_restricted)."""
    from attnsvm.real.probe_config import ProbeConfig

    full = {**ProbeConfig().model_dump(), **config}
    return {k: v for k, v in full.items() if k not in MAY_DIFFER}


def _task(prov: dict) -> tuple:
    p = prov["params"]
    return int(p["layer"]), int(p["head"]), int(p["m"]), p["part"]


def _agreement(old: list, new: list) -> dict:
    """How far the tasks stored twice agree: per numeric column both hold, the largest absolute difference over the
    rows (matched by draw for null tasks) where both are finite, and the number of cells finite in only one."""
    import numpy as np
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    worst, one_sided, compared = {}, 0, 0
    for (a, _), (b, _) in zip(old, new):
        keys = [k for k in ("kind", "draw") if k in a.columns and k in b.columns]
        if keys:
            a, b = a.sort_values(keys, kind="stable"), b.sort_values(keys, kind="stable")
        if len(a) != len(b):
            one_sided += abs(len(a) - len(b))
            continue
        compared += 1
        for c in a.columns.intersection(b.columns):
            numbers = is_numeric_dtype(a[c]) and is_numeric_dtype(b[c]) and not is_bool_dtype(a[c])
            if c in ("layer", "head", "m", "draw") or "seconds" in c or not numbers:
                continue
            x, y = a[c].to_numpy(float), b[c].to_numpy(float)
            both = np.isfinite(x) & np.isfinite(y)
            one_sided += int((np.isfinite(x) != np.isfinite(y)).sum())
            if both.any():
                worst[c] = max(worst.get(c, 0.0), float(np.abs(x[both] - y[both]).max()))
    return {"tasks_compared": compared, "cells_finite_in_one_only": one_sided,
            "max_abs_diff": {c: float(f"{v:.3g}") for c, v in sorted(worst.items())}}


def read_shards(outs: list, replace: bool = False, mixed_code: str | None = None) -> tuple[list, list, dict]:
    """Every verified shard of the stored probes in ``outs``: ``(tables, provenances, merge)`` (a shard that fails
    its checksum raises :class:`attnsvm.runner.storage.ShardError`).

    Each layer and m comes from one folder. With ``replace`` a later folder that stores a layer at an m replaces an
    earlier folder's tasks of that layer and m (``merge["replaced"]`` lists them, and ``merge["agreement"]`` measures
    the tasks both stored: an earlier run's failed task has no shard and is only in the later one). Runs of different
    code (the tasks' source digest or version) are one table only with ``mixed_code``, the stated reason, kept in
    ``merge``. Exits when the folders cannot be one table: another model, settings beyond :data:`MAY_DIFFER`, a layer
    and m stored twice without ``replace``, or other code without ``mixed_code``."""
    from attnsvm.runner.storage import read_shard

    real = [os.path.realpath(o) for o in outs]
    if len(set(real)) != len(real):
        raise SystemExit(f"probe_table: a folder is given twice ({outs})")
    stored = []  # (folder index, table, provenance)
    for i, out in enumerate(outs):
        found = sorted(glob.glob(os.path.join(out, "probe", "shards", "*", "*.parquet")))
        if not found:
            raise SystemExit(f"probe_table: no stored shards under {out}/probe/shards")
        for path in found:
            table, prov = read_shard(path)
            if "m" not in table.columns:  # a run of one m keys its tasks and rows without it
                table = table.assign(m=int(prov["params"]["m"]))
            stored.append((i, table, prov))
    owner = {}  # (layer, m) -> the folder whose tasks are used
    for i, _, prov in stored:
        key = _task(prov)[0], _task(prov)[2]
        if owner.setdefault(key, i) != i:
            if not replace:
                raise SystemExit(f"probe_table: layer {key[0]} at m = {key[1]} is stored in both {outs[owner[key]]} "
                                 f"and {outs[i]}; give it once, or --replace to take the later folder's")
            owner[key] = max(owner[key], i)
    keep = [(t, p) for i, t, p in stored if owner[_task(p)[0], _task(p)[2]] == i]
    dropped = {_task(p): (t, p) for i, t, p in stored if owner[_task(p)[0], _task(p)[2]] != i}
    kept = {_task(p): (t, p) for t, p in keep}
    twice = sorted(set(dropped) & set(kept))
    merge = {}
    if dropped:
        where = sorted({(k[0], k[2]) for k in dropped})
        later = [k for k in kept if (k[0], k[2]) in where]
        merge["replaced"] = {"layer_m": where, "tasks_earlier": len(dropped), "tasks_later": len(later),
                             "only_in_later": sorted("L{}-H{}-m{}-{}".format(*k) for k in later if k not in dropped)}
        merge["agreement"] = _agreement([dropped[k] for k in twice], [kept[k] for k in twice])
    provs = [p for _, p in keep]
    if len({json.dumps(p.get("inputs"), sort_keys=True) for p in provs}) != 1:
        raise SystemExit("probe_table: the tasks ran on different models (inputs); one table needs one model")
    by_code = {}  # (source digest, attnsvm version, "version (git commit)") -> the provenances of its tasks
    for p in provs:
        by_code.setdefault((p.get("source"), p.get("attnsvm"), p.get("version")), []).append(p)
    codes = sorted(by_code, key=str)
    if len({c[:2] for c in codes}) != 1:
        if not mixed_code:
            raise SystemExit(f"probe_table: the tasks ran different code ({[c[2] or c[0] for c in codes]}); one "
                             "table needs one code, or --mixed-code REASON to say why they are one")
        merge["mixed_code"] = {"reason": mixed_code, "codes": [
            {"source": c[0], "version": c[2], "tasks": len(by_code[c]),
             "layers": sorted({_task(p)[0] for p in by_code[c]})} for c in codes]}
    same = [_settings(p["config"]) for p in provs]
    if any(c != same[0] for c in same):
        diff = sorted({k for c in same for k in c if c.get(k) != same[0].get(k)})
        raise SystemExit(f"probe_table: the runs' settings differ in {diff} (only {list(MAY_DIFFER)} may)")
    return [t for t, _ in keep], provs, merge


def run_layers(provs: list) -> list:
    """The layers the runs asked for, together."""
    return sorted({la for p in provs for la in p["config"]["layers"]})


def complete_ms(provs: list) -> list:
    """The m whose head and null tasks are all stored, for every layer and head of the runs' settings."""
    config = provs[0]["config"]
    asked = sorted({m for p in provs for m in asked_ms(p["config"])})
    have = {_task(p) for p in provs}
    return [m for m in asked if all((la, h, m, part) in have for la in run_layers(provs) for h in config["heads"]
                                    for part in ("head", "null"))]


def partial_table(tables: list, provs: list, ms: list):
    """The combined per-head table of the tasks at ``ms`` (each complete), as one finished run of all their layers
    would make it (Benjamini-Yekutieli over every layer's heads at each m)."""
    import pandas as pd

    from attnsvm.real.probe_config import probe_config
    from attnsvm.real.probe_tasks import combine

    done = complete_ms(provs)
    missing = [m for m in ms if m not in done]
    if missing:
        raise SystemExit(f"probe_table: m = {missing} not complete (every layer x head needs its head and null "
                         f"task); complete: {done}")
    config = dict(provs[-1]["config"], layers=run_layers(provs), svm_sentences=sorted(ms) if len(ms) > 1 else ms[0])
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
    have each stable verdict (a head without a certified SVM at both m: "no SVM"), the median head's excess over the
    verdict's null (in its sds and in corr, over the heads with one), the median
    share of queries selecting [CLS], and the heads stably beyond or below the null with their excess."""
    import math

    ms = sorted(table["m"].unique())
    top = table[table["m"] == ms[-1]]
    order = ("beyond", "below", "not distinguishable", "depends on sample size", "no SVM")  # verdict.STABLE_VERDICTS
    lines = [f"| layer | heads | stably beyond | stably below | n.d. at both m | depends on m | no SVM at both m | "
             f"median excess at m = {ms[-1]}: sink sds (corr) | median share selecting [CLS] | beyond (excess in sds) "
             "| below |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for layer, g in top.groupby("layer"):
        counts = g["stable_verdict"].value_counts()
        ex = g["corr_restricted"] - g["null_mean"]
        z = ex / g["null_sd"]
        named = {v: ", ".join(f"H{r.head} ({(r.corr_restricted - r.null_mean) / r.null_sd:+.1f})"
                              for r in g[g["stable_verdict"] == v].sort_values("head").itertuples()) or "none"
                 for v in order[:2]}
        zs = z[z.apply(math.isfinite)]
        median = f"{zs.median():+.1f} ({ex[zs.index].median():+.3f})" if len(zs) else "none (no head has an SVM)"
        lines.append(f"| {layer} | {len(g)} | " + " | ".join(str(int(counts.get(v, 0))) for v in order)
                     + f" | {median} | {g['sel_first'].median():.2f} | "
                       f"{named['beyond']} | {named['below']} |")
    return "\n".join(lines) + "\n"


def _one_or_all(values):
    """The one value, or every distinct value (sorted) where the tasks differ."""
    values = sorted(set(values))
    return values[0] if len(values) == 1 else values


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
    ap.add_argument("--replace", action="store_true", help="a layer and m stored in several folders is taken from "
                    "the last of them (e.g. a rerun of a layer whose tasks failed); the provenance lists what was "
                    "replaced and how far the tasks stored in both agree")
    ap.add_argument("--mixed-code", metavar="REASON", default=None, help="allow tasks of different code (source "
                    "digest) in one table; REASON, why their numbers are one run's, goes into the provenance")
    args = ap.parse_args(argv)
    if args.markdown or args.summary:
        print((summary if args.summary else markdown)(pd.read_csv(args.dest)), end="")
        return 0
    tables, provs, merge = read_shards(args.out, replace=args.replace, mixed_code=args.mixed_code)
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
        prov.update(merge)
        prov.update(settings=provs[0]["config"] if len(runs) == 1 else runs,
                    from_shards={"m": ms, "runs_asked": asked, "partial": ms != asked,
                                 "tasks_stored": len(provs)},
                    config_hash=sorted(runs), source=_one_or_all(p["source"] for p in provs),
                    code_version=_one_or_all(p["version"] for p in provs), written=[min(p["written"] for p in provs),
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
