"""Compare two results folders of ``attnsvm run``/``reproduce`` table by table.

Usage: python scripts/compare_runs.py BEFORE AFTER [--rtol 1e-9] [--atol 1e-12]

For every experiment folder in BEFORE: its checks (same names, same verdicts, values within
``rtol`` relative, or ``atol`` absolute near zero) and its ``results.parquet`` (same rows and
columns; numeric columns within the same tolerance, others equal). Columns that measure time
(names containing "seconds", "time" or "elapsed") are skipped. Prints one line per experiment
and every difference; exits 1 if any value differs beyond the tolerance. Use it before and
after a change that must not move a number (a restructuring).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import numpy as np
import pandas as pd

TIME_WORDS = ("seconds", "time", "elapsed")


def _close(a, b, rtol, atol) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= max(atol, rtol * max(abs(a), abs(b)))
    return a == b


def _rel(a, b) -> float:
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return 0.0 if a == b else math.inf
    if math.isnan(a) and math.isnan(b):
        return 0.0
    den = max(abs(a), abs(b))
    return 0.0 if den == 0 else abs(a - b) / den


def compare_checks(before: list, after: list, rtol, atol) -> tuple[list[str], float]:
    problems, worst = [], 0.0
    b = {c["name"]: c for c in before}
    a = {c["name"]: c for c in after}
    for name in sorted(set(b) ^ set(a)):
        problems.append(f"check only in {'before' if name in b else 'after'}: {name}")
    for name in sorted(set(b) & set(a)):
        cb, ca = b[name], a[name]
        if cb["passed"] != ca["passed"]:
            problems.append(f"verdict of {name!r}: {cb['passed']} -> {ca['passed']}")
        if not _close(cb["value"], ca["value"], rtol, atol):
            problems.append(f"value of {name!r}: {cb['value']!r} -> {ca['value']!r}")
        worst = max(worst, _rel(cb["value"], ca["value"]) if cb["value"] is not None else 0.0)
    return problems, worst


def compare_tables(before: pd.DataFrame, after: pd.DataFrame, rtol, atol) -> tuple[list[str], float, int]:
    problems, worst = [], 0.0
    if before.shape[0] != after.shape[0]:
        return [f"rows: {before.shape[0]} -> {after.shape[0]}"], math.inf, 0
    cols = [c for c in before.columns if not any(w in c.lower() for w in TIME_WORDS)]
    missing = [c for c in cols if c not in after.columns]
    if missing:
        problems.append(f"columns missing after: {missing}")
    compared = 0
    for c in cols:
        if c in missing:
            continue
        x, y = before[c].to_numpy(), after[c].to_numpy()
        if pd.api.types.is_numeric_dtype(before[c]) and pd.api.types.is_numeric_dtype(after[c]):
            x, y = x.astype(float), y.astype(float)
            both_nan = np.isnan(x) & np.isnan(y)
            with np.errstate(invalid="ignore"):
                diff = np.where(x == y, 0.0, np.abs(x - y))
            scale = np.maximum(np.abs(x), np.abs(y))
            bad = ~both_nan & ~(diff <= np.maximum(atol, rtol * scale))
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.where(both_nan | (scale == 0), 0.0, diff / scale)
            worst = max(worst, float(np.nanmax(np.where(np.isnan(rel), np.inf, rel))) if rel.size else 0.0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                problems.append(f"column {c!r}: {int(bad.sum())} values differ, e.g. row {i}: {x[i]!r} -> {y[i]!r}")
        else:
            ne = [i for i, (p, q) in enumerate(zip(x, y)) if not (p == q or (p != p and q != q))]
            if ne:
                problems.append(f"column {c!r}: {len(ne)} values differ, e.g. row {ne[0]}: {x[ne[0]]!r} -> {y[ne[0]]!r}")
        compared += 1
    return problems, worst, compared


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=pathlib.Path)
    ap.add_argument("after", type=pathlib.Path)
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--atol", type=float, default=1e-12)
    args = ap.parse_args(argv)
    failed = False
    for exp in sorted(p for p in args.before.iterdir() if (p / "checks.json").exists()):
        other = args.after / exp.name
        if not (other / "checks.json").exists():
            print(f"{exp.name}: missing after")
            failed = True
            continue
        cb = json.loads((exp / "checks.json").read_text())
        ca = json.loads((other / "checks.json").read_text())
        problems, worst_check = compare_checks(cb, ca, args.rtol, args.atol)
        tb, ta = exp / "results.parquet", other / "results.parquet"
        worst_table, ncols = 0.0, 0
        if tb.exists():
            p2, worst_table, ncols = compare_tables(pd.read_parquet(tb), pd.read_parquet(ta), args.rtol, args.atol)
            problems += p2
        print(f"{exp.name}: {len(cb)} checks (max rel diff {worst_check:.2e}), {ncols} columns "
              f"(max rel diff {worst_table:.2e}): {'OK' if not problems else 'DIFFERS'}")
        for p in problems:
            print(f"    {p}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
