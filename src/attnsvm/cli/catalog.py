"""The experiment catalog behind ``attnsvm list``: names, titles, paper groups, extras, quick times.

``experiments.json`` beside this module is written by ``scripts/catalog.py`` from
:func:`attnsvm.experiments.registry` (names, titles, groups, the extra each needs) and the
``meta.json`` wall times of a timed ``attnsvm reproduce --quick``. Reading it instead of the
registry keeps ``attnsvm list`` free of the experiments' imports (pandas, pydantic, scipy),
so it answers well within a second. ``tests/test_cli.py`` checks the file against the registry.
"""

from __future__ import annotations

import json
import os

CATALOG_FILE = os.path.join(os.path.dirname(__file__), "experiments.json")


def load_catalog(path: str = CATALOG_FILE) -> dict:
    """The catalog: ``{"measured": how the times were taken, "groups": [{"group", "title", "experiments":
    [{"name", "title", "extra", "quick_seconds"}]}]}``."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _duration(seconds) -> str:
    if seconds is None:
        return "not timed"
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def format_catalog(catalog: dict) -> str:
    """The text of ``attnsvm list``: one block per paper, one line per experiment (name, extra, quick time, title)."""
    lines = []
    for group in catalog["groups"]:
        lines.append(group["title"])
        for exp in group["experiments"]:
            extra = f"[{exp['extra']}]" if exp.get("extra") else "core"
            lines.append(f"  {exp['name']:<24} {extra:<7} {_duration(exp.get('quick_seconds')):>9}  {exp['title']}")
        lines.append("")
    lines.append("Columns: name, the extra it needs (core: the base install; [real]: pip install 'attnsvm[real]'), "
                 "the wall time of its --quick preset, title.")
    lines.append(f"Quick times: {catalog.get('measured', 'not measured')}. Full presets take much longer.")
    lines.append("Run one: attnsvm run NAME --quick --out results; all: attnsvm reproduce --quick --out results")
    return "\n".join(lines)


def build_catalog(times: dict | None = None, measured: str = "") -> dict:
    """The catalog from the registry; ``times`` maps names to quick wall seconds (missing: None)."""
    import re

    from attnsvm.experiments import registry
    from attnsvm.experiments.base import GROUP_TITLES, group_of

    times = times or {}
    groups: dict = {}
    for name, exp in registry().items():
        key = group_of(exp)
        match = re.search(r"\[(\w+)\]", exp.install_hint or "")
        entry = {"name": name, "title": exp.title, "extra": match.group(1) if (exp.requires and match) else "",
                 "quick_seconds": times.get(name)}
        groups.setdefault(key, {"group": key, "title": GROUP_TITLES.get(key, "Other experiments"),
                                "experiments": []})["experiments"].append(entry)
    return {"measured": measured, "groups": list(groups.values())}
