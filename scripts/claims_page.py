"""Regenerate docs/guide/claims.md from the stored quick tables and planning.json, in one command.

    python scripts/claims_page.py            # from the repository root

Re-judges every experiment's stored quick-preset results table (tests/data/quick/NAME.parquet) with its own checks
(:func:`attnsvm.experiments.claims.stored_claims_page`); no experiment runs. Prints how many statistical checks cannot
fail at the full preset (planned power below 0.8). After an experiment's table changes, remake its stored table first
(tests/data/quick/README.md).
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from attnsvm.experiments.claims import main

    sys.exit(main(["--tables", os.path.join(ROOT, "tests", "data", "quick"),
                   "--out", os.path.join(ROOT, "docs", "guide", "claims.md")]))
