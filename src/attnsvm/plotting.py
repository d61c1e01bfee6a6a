"""Figure helpers: pyplot on the Agg backend, panels and their labels, and saving a figure as PNG and PDF."""

from __future__ import annotations

import os

from attnsvm._files import atomic_write


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (unless a backend is already in use)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


#: the smallest font size (points) a saved figure keeps: at 130 dpi and the report's scaling of wide
#: figures (about 2/3 of the PNG's width at a 1400 px window) that is about 10 px on screen
MIN_FONT_PT = 8.5


def legible(fig, min_pt: float = MIN_FONT_PT) -> None:
    """Raise every text of ``fig`` (ticks, labels, legends, titles) smaller than ``min_pt`` points to ``min_pt``."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        if text.get_text() and text.get_fontsize() < min_pt:
            text.set_fontsize(min_pt)


#: resolution of the saved PNG (dots per inch)
PNG_DPI = 130


def tight_box(fig, dpi: float):
    """The box (inches) that ``fig.savefig(..., dpi=dpi, bbox_inches="tight")`` crops a PNG to: the tight box
    of the figure's artists laid out at ``dpi``, padded by ``savefig.pad_inches``.

    ``get_tightbbox`` lays out what it measures (ticks, tick labels, titles, the axes' aspect) itself, so no
    draw comes before it (savefig's own "tight" draws the whole figure once first, at the cost of a draw).
    Meant for a figure whose layout is fixed (:func:`save_figure` turns its layout engine off first)."""
    import matplotlib

    old = fig.dpi
    fig.dpi = dpi
    try:
        return fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    finally:
        fig.dpi = old


def save_figure(fig, outdir: str, stem: str) -> list[str]:
    """Lay out ``fig`` with legible text (:func:`legible`), save it as ``outdir/stem.png`` (:data:`PNG_DPI`)
    and ``.pdf``, both cropped to the PNG's tight box (:func:`tight_box`, found once rather than by each
    ``savefig``), close it; return both paths."""
    paths = []
    legible(fig)
    try:
        fig.tight_layout()
    except Exception:  # noqa: BLE001 - layout is cosmetic; never lose a figure over it
        pass
    fig.set_layout_engine(None)  # laid out: no engine for each savefig to run (and draw for) again
    box = tight_box(fig, PNG_DPI)
    for ext in ("png", "pdf"):
        path = os.path.join(outdir, f"{stem}.{ext}")
        # exclusive temporary file and rename: never written through a link planted at the figure's name
        atomic_write(path, lambda fh: fig.savefig(fh, format=ext, dpi=PNG_DPI if ext == "png" else None,
                                                  bbox_inches=box))
        paths.append(path)
    pyplot().close(fig)
    return paths


def subplots(nrows: int = 1, ncols: int = 1, width: float = 4.6, height: float = 3.6, **kw):
    """``(fig, axes)`` with ``axes`` always 2-D (nrows, ncols), each panel ``width x height`` inches."""
    return pyplot().subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)


def label_axes(ax, xlabel: str | None = None, ylabel: str | None = None, title: str | None = None, *,
               legend: float | bool | None = None, grid: str | None = None, **legend_kw) -> None:
    """Label one panel ``ax``: the x and y labels and the title (those given), a legend (``legend``: its
    font size in points, or True for the default size; ``legend_kw`` go to ``ax.legend``) and a light
    grid (``grid``: "major" or "both"). None leaves that part out."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    if legend is not None and legend is not False:
        ax.legend(**({} if legend is True else {"fontsize": legend}), **legend_kw)
    if grid is not None:
        ax.grid(alpha=0.3, which=grid)
