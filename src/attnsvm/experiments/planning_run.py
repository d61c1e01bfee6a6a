"""Measure the planning sigmas of :mod:`attnsvm.experiments.planning` (a separate run on shifted seeds).

``python -m attnsvm.experiments.planning_run NAME ...`` runs each experiment's quick preset on seeds
shifted by :data:`~attnsvm.experiments.planning.SEED_OFFSET` and merges the spread every mean check saw
into ``planning.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from attnsvm.experiments.planning import PLANNING_FILE, SEED_OFFSET, _CACHE, effect_rule

__all__ = ["measure", "main"]


def measure(name: str, offset: int = SEED_OFFSET) -> dict:
    """Run the quick preset of experiment ``name`` on seeds shifted by ``offset`` and record, for every
    mean check, the standard deviation and count of the values it received. Experiments whose tasks
    carry no ``seeds`` cannot be shifted: ValueError."""
    import pandas as pd

    from attnsvm.experiments import build_config, registry
    from attnsvm.experiments import checks as checks_mod  # noqa: F811
    from attnsvm.experiments.base import Task

    exp = registry()[name]
    cfg = build_config(exp, quick=True)
    tasks = exp.tasks(cfg)
    if not tasks:
        raise ValueError(f"{name}: no tasks")
    # tasks without a seed list run seeds 0..runs-1 (their run_task reads an optional "seeds" parameter)
    shifted = [Task(t.key, t.runs, {**t.params, "seeds": [int(s) + offset for s in t.params.get("seeds", range(t.runs))]})
               for t in tasks]
    table = pd.concat([exp.run_task(cfg, t) for t in shifted], ignore_index=True)
    checks_mod._RECORD = []
    try:
        exp.checks(cfg, table)
        recorded = list(checks_mod._RECORD)
    finally:
        checks_mod._RECORD = None
    stamp = time.strftime("%Y-%m-%d")
    out = {}
    for r in recorded:
        if not (r["runs"] > 1 and r["sd"] >= 0):
            continue
        effect, rule = effect_rule(r["op"], r["lo"], r.get("hi"))
        out[r["name"]] = {"experiment": name, "sigma": float(f"{r['sd']:.4g}"), "runs": int(r["runs"]),
                          "effect": float(f"{effect:.4g}"), "rule": rule,
                          "measured": f"{name} quick preset on seeds + {offset}, attnsvm {_version()}, {stamp}"}
    return out


def _version() -> str:
    from attnsvm import __version__

    return __version__


def main(argv=None) -> int:
    """``python -m attnsvm.experiments.planning_run NAME ...``: measure and merge into ``planning.json``."""
    names = list(sys.argv[1:] if argv is None else argv)
    data = {"note": "planning sigmas of the mean checks; see attnsvm.experiments.planning", "checks": {}}
    if os.path.isfile(PLANNING_FILE):
        with open(PLANNING_FILE, encoding="utf-8") as fh:
            data = json.load(fh)
    for name in names:
        data["checks"].update(measure(name))
    data["checks"] = dict(sorted(data["checks"].items()))
    with open(PLANNING_FILE, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    _CACHE.clear()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
