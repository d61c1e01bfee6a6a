"""Times and costs that agree (issue 42, item 4): the report's banner gives the run's wall clock and CPU (not the
experiments' summed, overlapping times); ``attnsvm report`` on a probe's folder names the probe's page instead of
titling it a reproduction report; a stored probe's costs say what was reused (one reading of its seconds for the
terminal and probe.html)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from attnsvm.cli import cli
from attnsvm.real.probe_view import cost_items
from attnsvm.report import record_run, write_report


def _folder(root, name, wall, cpu):
    d = root / name
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"name": name, "title": name, "paper": "p", "wall_seconds": wall,
                                             "task_cpu_seconds": cpu, "preset": "full", "figures": [], "explain": ""}))
    (d / "checks.json").write_text("[]")


def _summary(md_path) -> str:
    return open(md_path, encoding="utf-8").read().split("\n")[2]


def test_the_banner_gives_the_runs_wall_clock_and_cpu(tmp_path):
    _folder(tmp_path, "exp-a", 400.0, 390.0)
    _folder(tmp_path, "exp-b", 453.2, 440.0)  # ran beside exp-a: 853.2 s summed, 410 s of wall clock
    record_run(str(tmp_path), 410.0, 15.5, ["exp-a", "exp-b"], "full")
    _, md = write_report(str(tmp_path))
    line = _summary(md)
    # the workers' tasks recorded 390 + 440 s of CPU, the reproducing process used 15.5 s
    assert "410.0 s of wall clock and 845.5 s of CPU (its tasks in worker processes 830.0 s" in line, line
    assert "853.2" not in line


def test_tasks_run_in_the_process_count_once(tmp_path):
    for name, wall, cpu in (("exp-a", 40.0, 39.0), ("exp-b", 45.0, 44.0)):
        _folder(tmp_path, name, wall, cpu)
        meta = json.loads((tmp_path / name / "meta.json").read_text())
        (tmp_path / name / "meta.json").write_text(json.dumps({**meta, "workers": 1, "scheduler": None}))
    record_run(str(tmp_path), 86.0, 85.0, ["exp-a", "exp-b"], "full")  # --workers 1: the tasks' CPU is the process's
    line = _summary(write_report(str(tmp_path))[1])
    assert "86.0 s of wall clock and 85.0 s of CPU" in line, line


def test_without_a_run_record_the_sum_is_said_to_overlap(tmp_path):
    _folder(tmp_path, "exp-a", 400.0, 390.0)
    _folder(tmp_path, "exp-b", 453.2, 440.0)
    _, md = write_report(str(tmp_path))
    line = _summary(md)
    assert "add up to 853.2 s, 830.0 s of CPU" in line and "overlap" in line and "853.2 s of wall time" not in line
    # a run record that did not run every experiment shown does not speak for them
    record_run(str(tmp_path), 10.0, 9.0, ["exp-a"], "quick")
    assert "add up to 853.2 s" in _summary(write_report(str(tmp_path))[1])


def test_report_on_an_unfinished_probe_folder_says_to_run_it_again(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "meta.json").write_text(json.dumps({"name": "probe", "wall_seconds": 3.0, "preset": "full",
                                                 "config": {"n_sentences": 8}}))
    (probe / "checks.json").write_text("[]")
    r = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "has not finished" in r.output and "attnsvm probe --out" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "probe.html").exists()
    # the page itself is rebuilt from a finished run: tests/test_probe_default_store.py


def test_a_resumed_probe_says_what_it_reused():
    first = dict(cost_items({"forward": 0.0, "forward_cached": True, "svm": 900.0, "nulls": 961.6, "total": 1900.0,
                             "tasks_computed": 144, "tasks_reused": 0}))
    assert first["forward pass"].startswith("computed inside the heads' tasks")
    assert "stored tasks reused" not in first
    resumed = dict(cost_items({"forward": 4.1, "forward_cached": False, "svm": 900.0, "nulls": 961.6, "total": 18.8,
                               "tasks_computed": 0, "tasks_reused": 144}))
    assert resumed["stored tasks reused"].startswith("144 of 144 (stored by an earlier run")
    assert resumed["this command"] == "18.8 s wall clock" and "task time summed" in resumed["null-head SVMs"]
    # an in-process probe (no stored tasks): a forward pass cached by an earlier probe in this process
    plain = dict(cost_items({"forward": 0.0, "forward_cached": True, "svm": 1.0, "nulls": 0.0, "total": 2.0}))
    assert plain["forward pass"].startswith("reused from an earlier forward pass") and "summed" not in plain["null-head SVMs"]


def test_reproduce_records_its_clock_for_the_banner(quick_reproduce):
    """Slow (the session's ``reproduce --quick``): the run's own wall clock and CPU in run.json and the banner."""
    out, _ = quick_reproduce
    run = json.loads((out / "run.json").read_text())
    assert run["preset"] == "quick" and run["wall_seconds"] > 0 and run["process_cpu_seconds"] > 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert f"the run took {run['wall_seconds']:.1f} s of wall clock" in md
