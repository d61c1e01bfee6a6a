"""probe.html states its answer (issue 42, item 9): words, never "nan", for a verdict that is not one in the
verdict map; attention that is not a number reaches the explorer as "no value", not as a huge negative integer;
each head's verdicts (the stable one first at several m) and its [CLS] / position-0 shares are data the page shows;
the page of a probe at several m shows its curve figure. No browser: small hand-made rows and results, and one
random-weight model for the curve."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from attnsvm.real.probe_view import _explorer_data, _verdict_grid

NOT_A_NUMBER = re.compile(r"(?i)(?<![\w-])(nan|inf|-inf|infinity)(?![\w-])")


def _rows(**over):
    base = {"layer": [2, 2], "head": [0, 1], "verdict": ["beyond null", "not distinguishable"],
            "verdict_reason": ["q_upper 0.01 <= 0.05", "p between"], "p_upper": [0.001, 0.4], "q_upper": [0.01, 0.5],
            "q_lower": [1.0, 0.9], "corr_restricted": [0.2, 0.1], "null_mean": [0.05, 0.09], "null_sd": [0.01, 0.02],
            "advantage": [0.1, 0.02]}
    base.update(over)
    return pd.DataFrame(base)


def test_verdict_map_words_for_a_verdict_that_is_not_one():
    # a NaN verdict (and a NaN reason) in a head's row, with and without a number
    table = _rows(verdict=[math.nan, math.nan], verdict_reason=[math.nan, math.nan],
                  corr_restricted=[0.2, math.nan], advantage=[0.1, math.nan])
    page = _verdict_grid(table, [2], [0, 1])
    assert not NOT_A_NUMBER.search(page), NOT_A_NUMBER.findall(page)
    assert "data-verdict='no verdict'" in page and "data-verdict='no SVM'" in page
    # the words of a real verdict stay as they are
    assert "data-verdict='beyond null'" in _verdict_grid(_rows(), [2], [0, 1])


def _result(att):
    """A one-head, one-sentence result whose attention matrix is ``att (3, 3)``."""
    table = _rows().iloc[:1]
    return SimpleNamespace(config={"threshold": 0.1, "svm_sentences": 1}, matrices={(2, 0): np.asarray([att])},
                           tokens=[["[CLS]", "a", "[SEP]"]], queries=np.array([1]), sentences=["a"],
                           support={(2, 0): np.array([[True, False, False]])}, table=table)


def test_explorer_shows_no_value_for_attention_that_is_not_a_number():
    att = [[0.5, 0.25, 0.25], [math.nan, 0.9, 0.1], [0.0, math.inf, 1.0]]
    data = _explorer_data(_result(att), 1)
    assert data["att"]["2-0"] == [[[500, 250, 250], [None, 900, 100], [0, None, 1000]]]
    text = json.dumps(data, allow_nan=False)  # no NaN or Infinity token in the page's JSON
    assert not NOT_A_NUMBER.search(text)
    # the page's script shows such a cell as "no value" (and grey), and leaves it out of the colour scale
    from attnsvm.real.probe_view import _SCRIPT
    assert "a === null ? 'no value'" in _SCRIPT and ".filter(a => a !== null)" in _SCRIPT


def test_head_verdicts_one_and_several_m():
    from attnsvm.real.probe_view import head_verdicts

    row = {"verdict": "beyond null", "corr_restricted": 0.2, "advantage": 0.1}
    assert head_verdicts(row) == [("beyond null", "beyond null")]
    several = {**row, "m": 48, "stable_verdict": "depends on sample size"}
    assert head_verdicts(several) == [("depends on sample size", "stable: depends on sample size"),
                                      ("beyond null", "m = 48: beyond null")]
    assert head_verdicts({**several, "stable_verdict": "below"})[0] == ("below null", "stable: below")
    assert head_verdicts({"corr_restricted": 0.2}) == []  # no SVMs: nothing to say


def test_share_items_labels_and_words():
    from attnsvm.real.probe_view import share_items

    row = {"sel_first": 0.9166, "sel_last": 0.0, "qi_share": math.nan}
    assert share_items(row) == [
        ("selects [CLS]", "0.92", share_items(row)[0][2]), ("selects [SEP]", "0.00", share_items(row)[1][2]),
        ("query-indep. share", "no value", share_items(row)[2][2])]
    assert [x[0] for x in share_items(row, "gpt2")] == ["selects pos 0", "selects last", "query-indep. share"]
    assert share_items({"sel_first": 0.5}) == [("selects [CLS]", "0.50", share_items({"sel_first": 0.5})[0][2])]
    assert share_items({}) == []


def _curve_imgs(page: str) -> list[str]:
    """The ``src`` of each ``<img>`` in the page's "Across sample sizes" section (from its heading to the next)."""
    start = page.index("<h2 id='curve'>")
    end = page.find("<h2", start + 1)
    return re.findall(r"<img src='([^']+)'", page[start:end if end > 0 else None])


def test_several_m_page_shows_the_curve_with_its_null_band(tmp_path):
    """The page of a probe at several m (``--svm-sentences 4,6``, a random-weight BERT-like model with two heads)
    shows the curve figure in its "Across sample sizes" section: one ``<img>``, a PNG in the probe's folder that
    decodes, with the heads' blue lines and the nulls' grey band of :func:`attnsvm.real.figures.curve_figure` and
    one panel per head (2 x 1 panels: wider than tall). A page without the image fails."""
    pytest.importorskip("transformers")
    from click.testing import CliRunner
    from PIL import Image
    from test_probe_calibration import random_model

    from attnsvm.cli import cli
    from attnsvm.real.sentences import corpus_sentences

    model = random_model("bert", tmp_path / "bert", layers=1, heads=2)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(corpus_sentences(6, 3)) + "\n", encoding="utf-8")
    out = tmp_path / "probe"
    r = CliRunner().invoke(cli, ["probe", "--model", model, "--sentences", str(sentences), "--svm-sentences", "4,6",
                                 "--null-draws", "2", "--max-length", "32", "--view-sentences", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    srcs = _curve_imgs((out / "probe.html").read_text(encoding="utf-8"))
    assert srcs == ["probe_curve.png"], srcs
    with Image.open(out / srcs[0]) as img:
        img.load()  # decodes (a truncated or non-PNG file raises here)
        assert img.format == "PNG"
        width, height = img.size
        rgb = np.asarray(img.convert("RGB")).reshape(-1, 3).astype(int)
    assert width > height > 100, (width, height)
    # the heads' lines (#1565c0) and the nulls' band (#bdbdbd at alpha 0.7 on white: 209 grey), a filled area:
    # at least 1% of the image (a figure without the band has about 0.06% such pixels, from anti-aliased text)
    near = {name: int((np.abs(rgb - colour).sum(axis=1) <= 6).sum())
            for name, colour in (("head line", (0x15, 0x65, 0xC0)), ("null band", (209, 209, 209)))}
    assert near["head line"] >= 200 and near["null band"] >= 0.01 * len(rgb), (near, len(rgb))


@pytest.mark.parametrize("n_heads", [4, 8])
def test_curve_figure_is_sized_for_the_page(tmp_path, n_heads):
    """The curve figure is ``2.2 cols + 0.6`` by ``1.9 rows + 0.6`` inches (up to 6 panels a row), so the page shows
    its panels legibly: it was passed as each panel's size to :func:`attnsvm.plotting.subplots` (which multiplies
    by the panels), so 4 heads drew a 37.6 x 2.5 in strip (4875 x 349 px), shrunk to a sliver on the page, and 72
    heads would draw 83 x 280 in."""
    from PIL import Image

    from attnsvm.plotting import PNG_DPI
    from attnsvm.real.figures import curve_figure

    rows = [{"layer": 0, "head": h, "m": m, "corr_restricted": 0.2 + 0.01 * h, "null_mean": 0.1, "null_sd": 0.02,
             "stable_verdict": "beyond null"} for h in range(n_heads) for m in (4, 6)]
    png = next(p for p in curve_figure(pd.DataFrame(rows), str(tmp_path), "c") if p.endswith(".png"))
    cols = min(6, n_heads)
    nrows = -(-n_heads // cols)
    with Image.open(png) as img:
        width, height = (v / PNG_DPI for v in img.size)
    # bbox_inches="tight" trims the margins and adds the caption below: within half an inch of the figure size
    assert abs(width - (2.2 * cols + 0.6)) <= 0.5 and abs(height - (1.9 * nrows + 0.6)) <= 0.5, (width, height)
