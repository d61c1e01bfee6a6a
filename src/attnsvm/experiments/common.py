"""Small helpers shared by the experiments: figures, checkpoints, seed chunks, table lookups."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (unless a backend is already in use)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, outdir: str, stem: str) -> list[str]:
    """Lay out ``fig``, save it as ``outdir/stem.png`` and ``.pdf``, close it; return both paths."""
    paths = []
    try:
        fig.tight_layout()
    except Exception:  # noqa: BLE001 - layout is cosmetic; never lose a figure over it
        pass
    for ext in ("png", "pdf"):
        path = os.path.join(outdir, f"{stem}.{ext}")
        fig.savefig(path, dpi=130 if ext == "png" else None, bbox_inches="tight")
        paths.append(path)
    pyplot().close(fig)
    return paths


def subplots(nrows: int = 1, ncols: int = 1, width: float = 4.6, height: float = 3.6, **kw):
    """``(fig, axes)`` with ``axes`` always 2-D (nrows, ncols), each panel ``width x height`` inches."""
    return pyplot().subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)


def seed_chunks(seeds, size: int) -> list[list[int]]:
    """Split a list of seeds into consecutive chunks of at most ``size``."""
    seeds = [int(s) for s in seeds]
    return [seeds[i:i + size] for i in range(0, len(seeds), size)]


def log_steps(total: int, count: int, extra=()) -> list[int]:
    """0, ``total``, ``count`` log-spaced steps in [1, total] (rounded, deduplicated) and ``extra`` (all <= total)."""
    pts = np.round(np.logspace(0, np.log10(max(total, 1)), count)).astype(int)
    return sorted({0, int(total), *(int(p) for p in pts if p <= total), *(int(e) for e in extra if 0 <= e <= total)})


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
