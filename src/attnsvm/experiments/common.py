"""Small helpers shared by the experiments: figures, seed chunks, table lookups."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd


def save_figure(fig, outdir: str, stem: str) -> list[str]:
    """Save ``fig`` as ``outdir/stem.png`` and ``.pdf``; close it; return both paths."""
    import matplotlib.pyplot as plt

    paths = []
    try:
        fig.tight_layout()
    except Exception:  # noqa: BLE001 - layout is cosmetic; never lose a figure over it
        pass
    for ext in ("png", "pdf"):
        path = os.path.join(outdir, f"{stem}.{ext}")
        fig.savefig(path, dpi=130 if ext == "png" else None, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def subplots(nrows: int = 1, ncols: int = 1, width: float = 4.6, height: float = 3.6, **kw):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)


def seed_chunks(seeds, size: int) -> list[list[int]]:
    """Split a list of seeds into consecutive chunks of at most ``size``."""
    seeds = [int(s) for s in seeds]
    return [seeds[i:i + size] for i in range(0, len(seeds), size)]


def final_rows(table: pd.DataFrame, by=("seed",)) -> pd.DataFrame:
    """Rows at the last recorded step of each group."""
    last = table.groupby(list(by))["step"].transform("max")
    return table[table["step"] == last]


def at_step(table: pd.DataFrame, step: int) -> pd.DataFrame:
    """Rows recorded at the checkpoint closest to ``step`` (at or below it)."""
    steps = np.sort(table["step"].unique())
    below = steps[steps <= step]
    chosen = below[-1] if below.size else steps[0]
    return table[table["step"] == chosen]
