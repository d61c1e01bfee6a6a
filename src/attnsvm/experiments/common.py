"""Small helpers shared by the experiments: checkpoints, seed chunks, table lookups (figures: :mod:`attnsvm.plotting`)."""

from __future__ import annotations

import numpy as np
import pandas as pd


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
