"""Write src/attnsvm/cli/experiments.json (what ``attnsvm list`` prints) from the registry.

    python scripts/catalog.py                       # names, titles, groups, extras; keeps the stored times
    python scripts/catalog.py --times results-quick "measured how"   # and the quick times of that folder

The times are the ``wall_seconds`` of each experiment's ``meta.json`` in a folder written by
``attnsvm reproduce --quick --out FOLDER`` (state the machine and its load in the second argument).
"""

from __future__ import annotations

import json
import os
import sys

from attnsvm.cli.catalog import CATALOG_FILE, build_catalog, load_catalog
from attnsvm.runner.costs import experiment_cost


def main(argv) -> int:
    old = load_catalog() if os.path.isfile(CATALOG_FILE) else {"groups": [], "measured": ""}
    times = {e["name"]: e.get("quick_seconds") for g in old["groups"] for e in g["experiments"]}
    measured = old.get("measured", "")
    if argv[:1] == ["--times"]:
        folder, measured = argv[1], argv[2]
        for name in os.listdir(folder):
            meta = os.path.join(folder, name, "meta.json")
            if os.path.isfile(meta):
                with open(meta, encoding="utf-8") as fh:  # the experiment's time as its run recorded it
                    times[name] = round(float(experiment_cost(json.load(fh)).wall_seconds), 1)
    catalog = build_catalog(times, measured)
    with open(CATALOG_FILE, "w", encoding="utf-8") as fh:
        json.dump(catalog, fh, indent=1)
        fh.write("\n")
    print(f"wrote {CATALOG_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
