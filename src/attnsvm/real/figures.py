"""Figures of the probe: layer x head heat maps of a head table."""

from __future__ import annotations

import numpy as np


def heatmap_figure(table, outdir: str, stem: str = "probe_heatmap") -> list:
    """Heat maps over layers x heads: corr_restricted, its random baseline and the advantage.

    Returns the PNG and PDF paths.
    """
    from attnsvm.plotting import save_figure, subplots

    layers = sorted(table["layer"].unique())
    heads = sorted(table["head"].unique())
    keys = [k for k in ("corr_restricted", "corr_random_restricted", "advantage") if k in table.columns]
    if not keys:
        keys = ["mean_selected"]
    fig, axes = subplots(1, len(keys), width=0.42 * len(heads) + 1.8, height=0.42 * len(layers) + 1.4)
    grids = {}
    for key in keys:
        grid = np.full((len(layers), len(heads)), np.nan)
        for _, r in table.iterrows():
            grid[layers.index(r["layer"]), heads.index(r["head"])] = r[key]
        grids[key] = grid
    # one colour scale for all panels, so the baseline reads against the heads' own correlation
    lim = max(max(float(np.nanmax(np.abs(g))) for g in grids.values()), 1e-6)
    for ax, key in zip(axes[0], keys):
        grid = grids[key]
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(len(heads)), [str(h) for h in heads], fontsize=7)
        ax.set_yticks(range(len(layers)), [str(l) for l in layers], fontsize=7)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(key.replace("_", " "), fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    return save_figure(fig, outdir, stem)
