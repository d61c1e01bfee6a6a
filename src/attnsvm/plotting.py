"""Figure helpers: pyplot on the Agg backend, panels, and saving a figure as PNG and PDF."""

from __future__ import annotations

import os

from attnsvm._files import atomic_write


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
        # exclusive temporary file and rename: never written through a link planted at the figure's name
        atomic_write(path, lambda fh: fig.savefig(fh, format=ext, dpi=130 if ext == "png" else None, bbox_inches="tight"))
        paths.append(path)
    pyplot().close(fig)
    return paths


def subplots(nrows: int = 1, ncols: int = 1, width: float = 4.6, height: float = 3.6, **kw):
    """``(fig, axes)`` with ``axes`` always 2-D (nrows, ncols), each panel ``width x height`` inches."""
    return pyplot().subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
