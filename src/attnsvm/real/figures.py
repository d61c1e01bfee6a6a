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


def largest_m(table):
    """The rows of ``table`` at its largest number of SVM sentences (a table with an ``m`` column: one row per head
    and m), each head once, with its ``stable_verdict``; a table without ``m`` as it is."""
    if "m" not in table.columns:
        return table
    return table[table["m"] == table["m"].max()].reset_index(drop=True)


def curve_figure(table, outdir: str, stem: str = "probe_curve") -> list:
    """One small panel per head of a probe at several m (``table`` with an ``m`` column): the head's
    ``corr_restricted`` against m over its nulls' band ``null_mean +- 2 null_sd`` (where drawn), the panel titled
    with the head and its ``stable_verdict``. Returns the PNG and PDF paths."""
    from attnsvm.plotting import save_figure, subplots

    keys = sorted({(int(r.layer), int(r.head)) for r in table.itertuples()})
    cols = min(6, len(keys))
    rows = -(-len(keys) // cols)
    # the whole figure 2.2 cols + 0.6 by 1.9 rows + 0.6 inches (subplots takes each panel's size)
    fig, axes = subplots(rows, cols, width=2.2 + 0.6 / cols, height=1.9 + 0.6 / rows)
    for k, (l, h) in enumerate(keys):
        ax = axes[k // cols][k % cols]
        g = table[(table["layer"] == l) & (table["head"] == h)].sort_values("m")
        m = g["m"].to_numpy(float)
        if "null_mean" in g.columns:
            mean, sd = g["null_mean"].to_numpy(float), g["null_sd"].to_numpy(float)
            ok = np.isfinite(mean) & np.isfinite(sd)
            ax.fill_between(m[ok], (mean - 2 * sd)[ok], (mean + 2 * sd)[ok], color="#bdbdbd", alpha=0.7, lw=0,
                            label="null mean +- 2 sd")
            ax.plot(m[ok], mean[ok], color="#757575", lw=1)
        y = g["corr_restricted"].to_numpy(float)
        ax.plot(m[np.isfinite(y)], y[np.isfinite(y)], "o-", color="#1565c0", ms=3, lw=1.2, label="head")
        ax.set_xscale("log")
        ax.set_xticks(m, [str(int(v)) for v in m], fontsize=7)
        ax.minorticks_off()
        ax.tick_params(labelsize=7)
        stable = str(g["stable_verdict"].iloc[-1]) if "stable_verdict" in g.columns else ""
        ax.set_title(f"L{l}-H{h}" + (f": {stable}" if stable else ""), fontsize=8)
    for k in range(len(keys), rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.text(0.5, -0.01, "x: SVM sentences m; blue: the head's corr_restricted; grey band: its nulls' mean +- 2 sd",
             ha="center", va="top", fontsize=9)
    return save_figure(fig, outdir, stem)
