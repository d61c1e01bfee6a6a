"""A quick run's inconclusive check says the same why in the terminal, checks.json and the report's banner, and the
banner says the run was the quick preset (issue 42, item 5: lm-margins' C2 at the quick preset)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from attnsvm.cli import print_summary
from sealed_folder import seal

from attnsvm.report import inconclusive_reason, write_report

#: lm-margins' C2 as its quick run stores it in checks.json (experiments/lm/margins.py)
C2 = {"name": "C2: the non-support pairs' share of the gradient mass at step K is below 0.05", "value": 0.08,
      "threshold": "< 0.05", "passed": False, "source": "paper, Sec. 1", "kind": "spec", "detail": "",
      "threshold_reason": "fixed floor; this run has 200 < 2000 steps: not decided here",
      "verdict": "inconclusive", "power": None, "alternative": "decided at the full preset (2000 steps)"}
WHY = "power unknown: decided at the full preset (2000 steps)"


def test_terminal_and_banner_give_the_checks_own_reason(tmp_path, capsys):
    assert inconclusive_reason(C2) == WHY
    print_summary(SimpleNamespace(name="lm-margins", tasks=1, computed=1, resumed=0, failed=[], checks=[C2],
                                   wall_seconds=1.0, outdir=str(tmp_path), recomputed=[]))
    err = capsys.readouterr().err
    assert f"inconclusive ({WHY})" in err and "no planning sigma" not in err
    d = tmp_path / "lm-margins"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"name": "lm-margins", "title": "t", "paper": "p", "wall_seconds": 1.0,
                                             "preset": "quick", "figures": [], "explain": ""}))
    (d / "checks.json").write_text(json.dumps([C2]))
    seal(d)  # the run's seal: checks without it are not shown as a verdict
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    banner = page[page.index("id='verdict'"):page.index("</div>\n", page.index("id='verdict'"))]
    banner = page[page.index("id='verdict'"):page.index("<p class='nav'>")]
    assert WHY in banner
    assert "quick preset" in banner


def test_a_full_run_banner_does_not_mention_the_quick_preset(tmp_path):
    d = tmp_path / "lm-margins"
    d.mkdir()
    (d / "meta.json").write_text(json.dumps({"name": "lm-margins", "title": "t", "paper": "p", "wall_seconds": 1.0,
                                             "preset": "full", "figures": [], "explain": ""}))
    (d / "checks.json").write_text(json.dumps([{**C2, "power": 0.42, "alternative": "a true share of 0.1"}]))
    seal(d)  # the run's seal: checks without it are not shown as a verdict
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    banner = page[page.index("id='verdict'"):page.index("<p class='nav'>")]
    assert "power 0.42 &lt; 0.8 against a true share of 0.1" in banner and "quick preset" not in banner
