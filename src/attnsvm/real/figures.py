"""Figures of the probe: layer x head heat maps of a head table."""

from __future__ import annotations

import numpy as np

#: the colour of a head without a value (NaN) in the heat maps, hatched on top
NAN_COLOUR = "#9e9e9e"


#: the mark of each verdict in the excess panel
VERDICT_MARKS = {"beyond null": "+", "below null": "-", "not distinguishable": "", "no SVM": ""}


def heatmap_figure(table, outdir: str, stem: str = "probe_heatmap") -> list:
    """Heat maps over layers x heads. With null heads (a ``null_mean`` column): corr_restricted, the spectrum
    nulls' mean and the excess ``corr_restricted - null_mean``, the cells of heads "beyond null" marked "+"
    and "below null" "-" (:data:`VERDICT_MARKS`); without: corr_restricted, its random baseline and the advantage.

    A head without a value (NaN: infeasible or uncertified SVM) is a grey hatched cell, distinct from
    0.0 (white on the diverging scale); a note under the panels says so when there is one.
    Returns the PNG and PDF paths.
    """
    from attnsvm.plotting import save_figure, subplots

    layers = sorted(table["layer"].unique())
    heads = sorted(table["head"].unique())
    if "null_mean" in table.columns:
        table = table.assign(excess_over_null=table["corr_restricted"] - table["null_mean"])
        keys = ["corr_restricted", "null_mean", "excess_over_null"]
    else:
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
    finite = [np.abs(g[np.isfinite(g)]) for g in grids.values()]
    lim = max([float(a.max()) for a in finite if a.size] + [1e-6])  # all-NaN panels (no SVM anywhere) keep a scale
    import matplotlib

    from matplotlib.patches import Rectangle

    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad=NAN_COLOUR)  # white is 0.0 on this scale
    any_nan = False
    for ax, key in zip(axes[0], keys):
        grid = grids[key]
        im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-lim, vmax=lim, aspect="auto")
        for r, c in zip(*np.nonzero(~np.isfinite(grid))):
            any_nan = True
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="xx", edgecolor="#424242", lw=0))
        ax.set_xticks(range(len(heads)), [str(h) for h in heads], fontsize=10)
        ax.set_yticks(range(len(layers)), [str(l) for l in layers], fontsize=10)
        ax.set_xlabel("head", fontsize=10)
        ax.set_ylabel("layer", fontsize=10)
        if key == "excess_over_null" and "verdict" in table.columns:
            for _, r in table.iterrows():
                mark = VERDICT_MARKS.get(str(r["verdict"]), "")
                if mark:
                    ax.text(heads.index(r["head"]), layers.index(r["layer"]), mark, ha="center", va="center",
                            fontsize=12, fontweight="bold", color="black")
        ax.set_title(key.replace("_", " "), fontsize=11)
        fig.colorbar(im, ax=ax, shrink=0.8)
    if "excess_over_null" in keys and "verdict" in table.columns:
        fig.text(0.5, 1.02, "excess over null: + beyond null, - below null (Benjamini-Yekutieli, FDR 0.05)",
                 ha="center", va="bottom", fontsize=10)
    if any_nan:
        fig.text(0.5, -0.02, "grey hatched cells: no value (the head's SVM is infeasible or not certified; see probe.html "
                 "for the reason)", ha="center", va="top", fontsize=10)
    return save_figure(fig, outdir, stem)
