"""report.html and report.md from hand-written result folders: banner, order, escaping, formatting, errors."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from sealed_folder import seal

from attnsvm._html import REVEAL_SCRIPT
from attnsvm.report import counts_line, human, markdown_html, takeaway, verdict_of, write_report


def _check(name, passed=True, **kw):
    c = {"name": name, "value": 1.0, "threshold": ">= 1", "passed": passed, "source": "paper, section 1",
         "threshold_reason": "the paper's number", "kind": "spec", "detail": ""}
    c.update(kw)
    return c


def _folder(root, name, checks, **meta):
    d = root / name
    d.mkdir(parents=True)
    m = {"name": name, "title": f"title of {name}", "paper": "a paper", "wall_seconds": 1.5, "preset": "full",
         "figures": ["fig.png"], "explain": "", "config": {"runs": 3}}
    m.update(meta)
    (d / "meta.json").write_text(json.dumps(m))
    (d / "checks.json").write_text(json.dumps(checks))
    (d / "fig.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    seal(d)
    return d


def _banner(page):
    m = re.search(r"<div class='banner (\w+)' id='verdict'[^>]*><div class='head'>(.*?)</div>", page)
    return m.group(1), m.group(2)


@pytest.mark.parametrize("checks, colour, words", [
    ([_check("a"), _check("b")], "green", "All checks pass"),
    ([_check("a"), _check("b", passed=False, finding=True, finding_reason="the paper is wrong")], "amber",
     "1 listed finding(s)"),
    ([_check("a"), _check("b", passed=False, verdict="inconclusive", power=0.3)], "amber", "1 inconclusive check(s)"),
    ([_check("a"), _check("b", passed=False)], "red", "FAILURES: 1 check(s) failed unexpectedly"),
    ([_check("a", verdict="fail"), _check("b", passed=False, finding=True)], "red", "FAILURES"),  # the verdict field rules
])
def test_banner_colour_and_text_follow_the_verdicts(tmp_path, checks, colour, words):
    _folder(tmp_path, "exp-one", checks)
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    got, head = _banner(page)
    assert got == colour and words in head, (got, head)
    assert counts_line(checks) in page
    for c in checks:  # the banner names every check that did not pass, with its value and threshold
        if verdict_of(c) != "pass":
            assert f"{c['name']} (value 1, needs &gt;= 1)" in page[:page.index("id='summary'")]
    if colour == "green":
        assert "FAILURES" not in page and "No unexpected failures" not in page


def test_counts_line_and_verdicts():
    checks = [_check("a"), _check("b", passed=False), _check("c", passed=False, finding=True),
              _check("d", passed=False, verdict="inconclusive"), _check("e", verdict="bogus")]
    assert [verdict_of(c) for c in checks] == ["pass", "fail", "finding", "inconclusive", "pass"]
    assert counts_line(checks) == "5 checks: 2 pass, 1 fail, 1 inconclusive, 1 findings"
    assert takeaway(checks[:1]) == "all 1 checks pass, e.g. a"
    assert takeaway(checks).startswith("2 of 5 checks pass; fails: b; inconclusive: d; finding: c")


def test_figure_before_checks_before_notes_and_deviations_collapsed(tmp_path):
    _folder(tmp_path, "exp-one", [_check("the claim", spec_ref="internal-spec 7.2 item 9")], explain="Some **notes**.",
            deviations=[{"spec": "100 runs", "here": "3 runs", "reason": "time"}])
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    sec = page[page.index("<section id='exp-one'>"):]
    assert sec.index("<img") < sec.index("<table class='checks'>") < sec.index("<h3>Notes</h3>")
    assert "<details class='deviations'><summary>Deviations from the paper's protocol (1)</summary>" in sec
    assert page.index("id='summary'") < page.index("<section")  # contents before the experiments
    assert "internal-spec" not in page  # spec_ref is internal, never shown


class _ChecksHolders(HTMLParser):
    """Per check table (``<table class='checks'>``, in document order): the attributes of the innermost
    ``<details>`` around it, or None when it is inside none."""

    def __init__(self):
        super().__init__()
        self.stack, self.holders = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "details":
            self.stack.append(dict(attrs))
        elif tag == "table" and ("class", "checks") in attrs:
            self.holders.append(self.stack[-1] if self.stack else None)

    def handle_endtag(self, tag):
        if tag == "details":
            self.stack.pop()


def test_check_tables_collapse_when_every_check_passed(tmp_path):
    """(issue 42, item 6: the report was 81,500 px long) an experiment's check table sits in a ``<details>``
    collapsed to its line "checks: P/N passed" when every check passed, and open when one did not pass (failed,
    inconclusive, finding), so a problem is seen without a click; the summary table's count links to it."""
    _folder(tmp_path, "exp-a-pass", [_check("a"), _check("b")], explain="Some notes.")
    _folder(tmp_path, "exp-b-inconclusive", [_check("a"), _check("b", passed=False, verdict="inconclusive")])
    _folder(tmp_path, "exp-c-fail", [_check("a", passed=False)])
    _folder(tmp_path, "exp-d-finding", [_check("a"), _check("b", passed=False, finding=True)])
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    sections = page[page.index("<section"):page.rindex("</section>")]  # the experiments' sections only
    parser = _ChecksHolders()
    parser.feed(sections)
    holders = parser.holders
    assert len(holders) == 4 and all(holders), holders  # every experiment's table is inside a <details>
    assert [d.get("id") for d in holders] == ["checks-exp-a-pass", "checks-exp-b-inconclusive", "checks-exp-c-fail",
                                              "checks-exp-d-finding"]
    assert ["open" in d for d in holders] == [False, True, True, True]
    lines = re.findall(r"<details class='checks'[^>]*><summary>(.*?)</summary>", sections)
    assert lines == ["checks: 2/2 passed; notes", "checks: 1/2 passed, 1 inconclusive", "checks: 0/1 passed, 1 fail",
                     "checks: 1/2 passed, 1 finding"]
    # the notes are collapsed with the table (after it, in the same <details>)
    sec = sections[:sections.index("</section>")]
    assert sec.index("<details class='checks'") < sec.index("<table class='checks'>") < sec.index("<h3>Notes</h3>") \
        < sec.index("</details>")
    # the summary table's "checks passed" cell links to the collapsed table (the page's script opens it)
    assert "<a class='count' href='#checks-exp-a-pass'>2/2</a>" in page[:page.index("<section")]
    from attnsvm.report import checks_summary

    assert checks_summary([]) == "no checks"
    assert checks_summary([_check("a", passed=False, finding=True)] * 2) == "checks: 0/2 passed, 2 findings"


def test_every_value_is_escaped(tmp_path):
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    _folder(tmp_path, "exp-one", [_check(evil, value=evil, threshold=evil, detail=evil, source=evil,
                                         threshold_reason=evil, kind=evil, passed=False)],
            title=evil, paper=evil, explain=evil + "\n\n| a | b |\n|---|---|\n| " + evil + " | x |",
            deviations=[{"spec": evil, "here": evil, "reason": evil}], preset=evil, config_hash=evil)
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    own = f"<script>{REVEAL_SCRIPT}</script>"  # the page's one script of its own: it opens collapsed sections
    assert page.count(own) == 1
    page = page.replace(own, "")
    assert "<script" not in page.lower() and "<img src=x" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_malformed_meta_shows_the_folders_error(tmp_path):
    _folder(tmp_path, "exp-bad", [_check("a")], wall_seconds="twelve", figures="fig.png")
    _folder(tmp_path, "exp-good", [_check("b")])
    html_path, md_path = write_report(str(tmp_path))
    page = open(html_path, encoding="utf-8").read()
    assert "meta.json: wall_seconds is &#x27;twelve&#x27;, not a number" in page
    assert "meta.json: figures is not a list" in page
    assert _banner(page)[0] == "red" and "1 result folder(s) unreadable" in _banner(page)[1]
    assert "<section id='exp-good'>" in page and "| exp-good | 1/1 |" in open(md_path).read()


def test_values_for_people():
    assert human("d in [np.int64(10), np.int64(20)]") == "d in [10, 20]"
    assert human("{'ok': 15, 'infeasible': 11}; flag np.True_, x np.float64(0.5)") == "ok 15, infeasible 11; flag True, x 0.5"
    assert human("plain text {not a dict}") == "plain text {not a dict}"


def test_markdown_notes():
    text = ("**Pitfall (float32).** Use `float64` *here*.\n\n| d | runs |\n|---|---|\n| 2 | 100 |\n\n"
            "- one\n- two <b>x</b>\n\n## A heading")
    out = markdown_html(text)
    assert "<b>Pitfall (float32).</b>" in out and "<code>float64</code>" in out and "<i>here</i>" in out
    assert "<table class='md'><tr><th>d</th><th>runs</th></tr><tr><td>2</td><td>100</td></tr></table>" in out
    assert "<ul><li>one</li><li>two &lt;b&gt;x&lt;/b&gt;</li></ul>" in out and "<h5>A heading</h5>" in out
    assert "**" not in out and "|---" not in out


def test_quick_preset_notes_state_the_sizes(tmp_path):
    from attnsvm.experiments import build_config, registry

    exp = registry()["tf-svm-rank"]
    cfg = build_config(exp, quick=True).model_dump()
    _folder(tmp_path, "tf-svm-rank", [_check("a")], preset="quick", config=cfg)
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    line = re.search(r"<p class='preset'>(.*?)</p>", page).group(1)
    full = build_config(exp, quick=False).model_dump()
    assert cfg["instances"] != full["instances"]
    assert "quick preset" in line and f"instances = {cfg['instances']} (full preset {full['instances']})" in line


def test_legible_raises_small_text_only(tmp_path):
    from attnsvm.plotting import MIN_FONT_PT, save_figure, subplots

    fig, axes = subplots(1, 1)
    ax = axes[0, 0]
    ax.plot([0, 1], [0, 1], label="line")
    small = ax.set_title("tiny", fontsize=5)
    big = ax.set_xlabel("big", fontsize=14)
    ax.legend(fontsize=6)
    save_figure(fig, str(tmp_path), "f")
    assert small.get_fontsize() == MIN_FONT_PT and big.get_fontsize() == 14
    assert ax.get_legend().get_texts()[0].get_fontsize() == MIN_FONT_PT


def test_probe_heat_map_draws_nan_apart_from_zero(tmp_path):
    """A NaN head is a grey hatched cell (a colour the diverging scale never uses); without NaN there is none."""
    import matplotlib.image as mpimg
    import pandas as pd

    from attnsvm.real.figures import NAN_COLOUR, heatmap_figure

    grey = np.array([int(NAN_COLOUR[k:k + 2], 16) / 255 for k in (1, 3, 5)])

    def grey_and_dark(values, stem):
        table = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "corr_restricted": values})
        img = mpimg.imread(heatmap_figure(table, str(tmp_path), stem)[0])[..., :3]
        return int((np.abs(img - grey).max(axis=2) < 0.02).sum()), img

    n_grey, _ = grey_and_dark([0.0, np.nan, 0.5, -0.5], "with_nan")
    n_none, _ = grey_and_dark([0.0, 0.1, 0.5, -0.5], "without_nan")
    # a cell of a 2 x 2 grid is over 50 x 50 px at 130 dpi: well over 1000 grey pixels between the hatch lines;
    # without NaN only antialiased text edges come near that grey (a few dozen pixels)
    assert n_none < 300 and n_grey > 1000 + n_none, (n_grey, n_none)


def test_quick_presets_draw_only_panels_with_data(quick_out):
    """tf-svm-rank's quick preset has one T (panel (b) would repeat panel (a)) and lm-cosine's one d: their
    figures leave those panels out (one panel column is about 650 px wide at 130 dpi, two about 1300,
    lm-cosine's three about 2065)."""
    import matplotlib.image as mpimg

    from attnsvm.experiments import build_config, registry

    rank = build_config(registry()["tf-svm-rank"], quick=True)
    cosine = build_config(registry()["lm-cosine"], quick=True)
    assert rank.Ts == [] and len(cosine.vary_d) == 1  # the premise: these presets vary nothing there
    assert mpimg.imread(quick_out / "tf-svm-rank" / "svm_rank.png").shape[1] < 1000
    assert mpimg.imread(quick_out / "lm-cosine" / "lm_cosine.png").shape[1] < 1700
