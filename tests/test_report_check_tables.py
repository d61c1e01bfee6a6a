"""The report's check tables read cleanly (issue 42, item 7): the planning-sigma sentence once per row, the "[RUN]"
tag explained, a power column of numbers with words where none was computed, no raw Markdown backticks in the HTML,
and rounded values in the terminal."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from attnsvm.cli import print_summary
from sealed_folder import seal

from attnsvm.report import RUN_TAG, write_report

SIGMA = "planning sigma 0.1648 (planning sigma measured on the tf-multi-token quick preset (50 runs))"
ALT = f"true mean 0.05 (target - 0.05), {SIGMA}"
CHECKS = [
    {"name": "share at d = 10 stays >= 0.1", "value": 0.1707, "threshold": ">= 0.03", "passed": True, "kind": "spec",
     "source": "paper", "threshold_reason": f"one-sided tolerance; power 0.405 against {ALT}", "detail": "50 runs",
     "power": 0.405, "alternative": ALT, "verdict": "inconclusive"},
    {"name": "[RUN] E1 local runs at iteration 200: p = (19.05, 0.56)", "value": 0.7142857142857143,
     "threshold": "<= 1", "passed": True, "kind": "spec", "source": "notebook", "detail": "",
     "threshold_reason": "fewer means the seed budget `attempts` is too small", "power": 1.0},
    {"name": "a deterministic check", "value": 1.0, "threshold": "== 1", "passed": True, "kind": "spec",
     "source": "paper", "threshold_reason": "exact", "detail": ""},
]


def _page(tmp_path) -> str:
    d = tmp_path / "exp-one"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"name": "exp-one", "title": "t", "paper": "p", "wall_seconds": 1.0,
                                             "preset": "full", "figures": [], "explain": ""}))
    (d / "checks.json").write_text(json.dumps(CHECKS))
    seal(d)  # the run's seal: checks without it are not shown as a verdict
    html_path, md_path = write_report(str(tmp_path))
    return open(html_path, encoding="utf-8").read(), open(md_path, encoding="utf-8").read()


def _rows(page: str) -> list[str]:
    return re.findall(r"<tr class='check'.*?</tr>", page, flags=re.S)


def test_the_planning_sigma_sentence_appears_once_per_row(tmp_path):
    page, md = _page(tmp_path)
    rows = _rows(page)
    assert rows and all(r.count("planning sigma") <= 1 for r in rows), [r.count("planning sigma") for r in rows]
    assert all(line.count("planning sigma") <= 1 for line in md.splitlines() if line.startswith("| exp-one")
               or line.startswith("| share"))


def test_the_run_tag_is_explained_once(tmp_path):
    page, md = _page(tmp_path)
    assert page.count(RUN_TAG.replace("'", "&#x27;")) == 1 and md.count(RUN_TAG) == 1
    assert "official notebook" in RUN_TAG


def test_the_power_column_has_numbers_or_words(tmp_path):
    page, _ = _page(tmp_path)
    cells = [re.findall(r"<td>([^<]*)</td><td class='(?:pass|fail|inconclusive|finding)", r)[0] for r in _rows(page)]
    assert "1" not in cells and "not computed" not in cells, cells
    assert "1.00" in cells and "0.41" in cells and "not computed (no alternative stated)" in cells


def test_no_raw_backticks_in_the_html(tmp_path):
    page, _ = _page(tmp_path)
    visible = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", page, flags=re.S)
    assert "`" not in visible and "<code>attempts</code>" in page


def test_the_terminal_rounds_values(tmp_path, capsys):
    failing = {**CHECKS[1], "passed": False, "verdict": "fail"}
    print_summary(SimpleNamespace(name="exp-one", tasks=1, computed=1, resumed=0, failed=[], checks=[failing],
                                   wall_seconds=1.0, outdir=str(tmp_path), recomputed=[]))
    err = capsys.readouterr().err
    assert "value 0.7143 <= 1" in err and "0.7142857142857143" not in err


def test_a_grouped_checks_planning_sigma_provenance_is_said_once():
    """A check decided in every group (lm-cosine's C1, tf-lambda-head's rises) said where its planning sigmas were
    measured, the effect's reason and "planned with the larger of the planning sigma and this run's own" once per
    group: three to six times in one cell. Now once, each group with its own numbers."""
    import numpy as np

    from attnsvm.experiments.lm.common import grouped_ordering_check

    rng = np.random.default_rng(0)
    groups = {f"(g{i})": rng.normal(0.6, 0.15, 10) for i in range(3)}
    c = grouped_ordering_check("grouped", groups, source="s", reason="r", effect=0.1, sigma=0.2,
                               sigma_source="planning sigma measured on the x quick preset (10 runs)",
                               effect_reason="Cohen's small correlation")
    alt = c.alternative
    assert alt.count("measured on the x quick preset") == 1, alt
    assert alt.count("Cohen's small correlation") == 1 and alt.count("the larger of") == 1, alt
    assert all(f"(g{i}): true mean difference 0.1 (margin + 0.1), planning sigma 0.2, this run's own" in alt
               for i in range(3)), alt
    # one group: the sentence as before, whole
    one = grouped_ordering_check("grouped", {"a": groups["(g0)"]}, source="s", reason="r", effect=0.1, sigma=0.2,
                                 sigma_source="planning sigma measured on the x quick preset (10 runs)",
                                 effect_reason="Cohen's small correlation").alternative
    assert "(margin + 0.1; Cohen's small correlation), planning sigma 0.2 (planning sigma measured" in one, one
