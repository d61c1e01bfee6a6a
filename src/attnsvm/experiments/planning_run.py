"""Measure the planning sigmas of :mod:`attnsvm.experiments.planning` (a separate run on shifted seeds).

``python -m attnsvm.experiments.planning_run [--full] [--set KEY=VALUE ...] NAME ...`` runs each experiment's quick
preset (``--full``: the full one; ``--set``: config fields changed on top of it, recorded) on seeds shifted by
:data:`~attnsvm.experiments.planning.SEED_OFFSET` and merges the spread every mean, ordering, paired and
random-direction check saw into ``planning.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from attnsvm.experiments.config import parse_assignments
from attnsvm.experiments.planning import PLANNING_FILE, SEED_OFFSET, _CACHE, effect_rule

__all__ = ["measure", "main"]


def measure(name: str, offset: int = SEED_OFFSET, full: bool = False, overrides: dict | None = None) -> dict:
    """Run the quick preset (``full``: the full one) of experiment ``name`` on seeds shifted by ``offset`` and
    record, for every mean, ordering, paired or random-direction check, the standard deviation and count of
    the values it received (a grouped check: each group's too, under ``"sigmas"``). ``overrides``: config fields
    changed on top of the preset (fewer instances, only the cells a check needs); they are written into each
    entry's ``"measured"``.

    Seeds are shifted in the config when it has a ``seed`` (int) or ``seeds`` (list) field; otherwise in the
    tasks (their run_task reads an optional ``"seeds"`` parameter, default seeds 0..runs-1)."""
    import pandas as pd

    from attnsvm.experiments import build_config, registry
    from attnsvm.experiments import checks as checks_mod  # noqa: F811
    from attnsvm.experiments.base import Task

    exp = registry()[name]
    cfg = build_config(exp, quick=not full)
    if overrides:
        cfg = type(cfg).model_validate({**cfg.model_dump(), **overrides})
    fields = type(cfg).model_fields
    if "seed" in fields or "seeds" in fields:
        upd = {}
        if "seed" in fields:
            upd["seed"] = int(cfg.seed) + offset
        if "seeds" in fields:
            upd["seeds"] = [int(s) + offset for s in cfg.seeds]
        cfg = cfg.model_copy(update=upd)
        shifted = exp.tasks(cfg)
    else:
        tasks = exp.tasks(cfg)
        shifted = [Task(t.key, t.runs, {**t.params, "seeds": [int(s) + offset for s in t.params.get("seeds",
                                                                                                    range(t.runs))]})
                   for t in tasks]
    if not shifted:
        raise ValueError(f"{name}: no tasks")
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
                          "measured": f"{name} {'full' if full else 'quick'} preset"
                                      + (f" with {_fmt(overrides)}" if overrides else "")
                                      + f" on seeds + {offset}, attnsvm {_version()}, {stamp}"}
        if r.get("sigmas"):
            out[r["name"]]["sigmas"] = {k: float(f"{v:.4g}") for k, v in r["sigmas"].items()}
    return out


def _fmt(overrides: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in overrides.items())


def _version() -> str:
    from attnsvm import __version__

    return __version__


def main(argv=None) -> int:
    """``python -m attnsvm.experiments.planning_run [--full] [--set KEY=VALUE ...] NAME ...``: measure and merge
    into ``planning.json``."""
    args = list(sys.argv[1:] if argv is None else argv)
    full = "--full" in args
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set" and i + 1 < len(args)]
    skip = {i + 1 for i, a in enumerate(args) if a == "--set"}
    names = [a for i, a in enumerate(args) if a not in ("--full", "--set") and i not in skip]
    overrides = parse_assignments(sets)  # KEY=VALUE, VALUE read as YAML (so JSON too), else a string
    measured = [measure(name, full=full, overrides=overrides) for name in names]
    # read the file only now (after the long measurements), so that a planning run that finished meanwhile
    # keeps its entries
    data = {"note": "planning sigmas of the mean checks; see attnsvm.experiments.planning", "checks": {}}
    if os.path.isfile(PLANNING_FILE):
        with open(PLANNING_FILE, encoding="utf-8") as fh:
            data = json.load(fh)
    for entries in measured:
        for key, entry in entries.items():
            old = data["checks"].get(key)
            if full and old and not (old.get("sigmas") and entry.get("sigmas")):
                continue  # the quick preset's planning entry stays; the full preset only adds groups and names
            if old and old.get("sigmas") and entry.get("sigmas"):
                # a grouped check measured on both presets (different groups): keep every group's sigma
                entry["sigmas"] = {**old["sigmas"], **entry["sigmas"]}
                entry["sigma"] = max(entry["sigmas"].values())
                entry["measured"] = f"{old['measured']}; {entry['measured']}"
            data["checks"][key] = entry
    data["checks"] = dict(sorted(data["checks"].items()))
    with open(PLANNING_FILE, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    _CACHE.clear()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
