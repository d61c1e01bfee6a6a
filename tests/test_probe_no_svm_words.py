"""A head without an SVM reads in words everywhere (issue 42, item 3): no "nan", "inf" or "advantage nan" on
probe.html's visible text or tooltips, in the terminal table or the verdict summary (the explain text), and its
reason is the Gen-SVM's tie requirement, not "no bilinear W separates the selections"."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

pytest.importorskip("transformers")

from infeasible_head import probe_with_infeasible_head  # noqa: E402

from attnsvm.real.probe import format_table  # noqa: E402
from attnsvm.real.probe_view import render_probe_view  # noqa: E402
from attnsvm.real.verdict import verdict_summary  # noqa: E402

SENTENCES = ["The cat sat on the mat while the dog slept.", "Margins decide which token wins.",
             "Every head reads its own tokens here.", "Attention selects a few tokens at a time.",
             "The solver returns multipliers for every row.", "Nuclear norms favour low rank matrices.",
             "Queries look for keys that match them.", "Small models still have many heads."]
NOT_A_NUMBER = re.compile(r"(?i)(?<![\w-])(nan|inf|-inf|infinity)(?![\w-])")


class _Visible(HTMLParser):
    """The page's visible text and its tooltips (title attributes); scripts and styles left out."""

    def __init__(self):
        super().__init__()
        self.skip, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        self.skip += tag in ("script", "style")
        self.parts += [v for k, v in attrs if k in ("title", "alt") and v]

    def handle_endtag(self, tag):
        self.skip -= tag in ("script", "style")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


@pytest.fixture(scope="module")
def result():
    """A real probe of two heads, head 0's SVM made infeasible (as the solver reports one: NaN cosines,
    an infinite nuclear norm, no support)."""
    return probe_with_infeasible_head(SENTENCES, (3, 0), layers=[3], heads=[0, 1], svm_sentences=6, view_sentences=2,
                                      null_draws=3)


def _hits(text: str) -> list[str]:
    return [text[max(0, m.start() - 60):m.end() + 20] for m in NOT_A_NUMBER.finditer(text)]


def test_the_page_shows_words_not_nan_or_inf(result):
    assert result.table.loc[0, "verdict"] == "no SVM"
    page = _Visible()
    page.feed(render_probe_view(result))
    text = " ".join(page.parts)
    assert not _hits(text), _hits(text)
    assert "advantage nan" not in text and "(0 draws)" not in text
    assert "no bilinear W" not in text
    assert "tie (equal scores)" in text and "need not tie" in text


def test_the_terminal_table_and_summary_show_words(result):
    table = format_table(result.table)
    assert not _hits(table), _hits(table)
    header, row = table.splitlines()[0].split(), table.splitlines()[1].split()
    i = header.index("corr_restricted")  # the columns before it hold one word each: layer, head, numbers
    assert row[:2] == ["3", "0"] and row[i:i + 2] == ["no", "SVM"], (header, row)
    only_no_svm = result.table[result.table["head"] == 0]
    summary = verdict_summary(only_no_svm) + verdict_summary(result.table)
    assert not _hits(summary), _hits(summary)
