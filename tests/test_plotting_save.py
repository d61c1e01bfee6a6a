"""``attnsvm.plotting.save_figure``: the PNG is what ``savefig(dpi=130, bbox_inches="tight")`` writes, pixel for
pixel, with the tight box found once (:func:`attnsvm.plotting.tight_box`); the PDF is cropped to that box."""

import re

import numpy as np
import pytest
from PIL import Image

from attnsvm.plotting import PNG_DPI, label_axes, legible, pyplot, save_figure, subplots, tight_box


def _figure():
    fig, axes = subplots(1, 2)
    x = np.linspace(0.0, 1.0, 50)
    axes[0, 0].plot(x, np.sin(7 * x), label=r"$\sin(7x)$")
    axes[0, 1].semilogy(x, np.exp(5 * x), label="exp")
    label_axes(axes[0, 0], "steps k", r"$1 - \mathrm{corr}(W, W^{svm})$", "a long title for the first panel",
               legend=7, grid="major")
    label_axes(axes[0, 1], "x", "y", "second", legend=True, grid="both")
    fig.suptitle("a figure with text at its edges")
    return fig


def _heatmap_figure():
    """Artists laid out at draw time: an equal-aspect image with a colorbar, an annotation outside the axes,
    a legend placed "best", an axis offset text (1e6) and a text beyond the figure's edge."""
    fig, axes = subplots(1, 2)
    rng = np.random.default_rng(0)
    im = axes[0, 0].imshow(rng.random((6, 9)), aspect="equal")
    fig.colorbar(im, ax=axes[0, 0], label="value")
    axes[0, 0].annotate("outside", xy=(8, 0), xytext=(10.5, -2.0), arrowprops={"arrowstyle": "->"},
                        annotation_clip=False)
    x = np.linspace(0.0, 1.0, 30)
    axes[0, 1].plot(x, 1e6 + 3e3 * x, "o-", label="large values")
    axes[0, 1].plot(x, 1e6 + 3e3 * x ** 2, label="second")
    label_axes(axes[0, 1], "x", "y", "offset text", legend=True)
    fig.text(1.02, 0.5, "beyond the edge", rotation=90)
    return fig


FIGURES = {"lines": _figure, "heatmap": _heatmap_figure}


def _reference_png(tmp_path, make=_figure):
    """The PNG the way it was written before: tight layout, then savefig's own tight box."""
    fig = make()
    legible(fig)
    fig.tight_layout()
    path = tmp_path / "ref.png"
    fig.savefig(path, format="png", dpi=PNG_DPI, bbox_inches="tight")
    pyplot().close(fig)
    return np.asarray(Image.open(path))


@pytest.mark.parametrize("kind", sorted(FIGURES))
def test_save_figure_writes_the_png_of_savefigs_tight_box_and_a_pdf_of_the_same_box(tmp_path, kind):
    png, pdf = save_figure(FIGURES[kind](), str(tmp_path), "fig")
    got = np.asarray(Image.open(png))
    ref = _reference_png(tmp_path, FIGURES[kind])
    assert got.shape == ref.shape and np.array_equal(got, ref)
    # the PDF's page is the PNG's box in points (72 per inch)
    (box,) = re.findall(rb"/MediaBox \[ *0 0 ([0-9.]+) ([0-9.]+) *\]", open(pdf, "rb").read())
    w, h = (float(v) for v in box)
    assert w == pytest.approx(got.shape[1] / PNG_DPI * 72, abs=72 / PNG_DPI)
    assert h == pytest.approx(got.shape[0] / PNG_DPI * 72, abs=72 / PNG_DPI)


def test_tight_box_leaves_the_figures_dpi_as_it_was():
    fig = _figure()
    dpi = fig.dpi
    box = tight_box(fig, PNG_DPI)
    assert fig.dpi == dpi and box.width > 0 and box.height > 0
    pyplot().close(fig)
