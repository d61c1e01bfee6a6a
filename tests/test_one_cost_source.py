"""One source for every time and cost (issue 42): each task records its wall and CPU seconds in its shard and
meta.json lists them (computed by this run, or reused from an earlier one); the report's banner and sections, the
terminal lines of ``attnsvm run`` and ``reproduce``, ``attnsvm list --out`` and a stored probe's costs (terminal,
probe.html, probe.json) all read them through :mod:`attnsvm.runner.costs`. Each display is shown to follow an edit of
the records (so it derives from them rather than from another clock), and a resumed run says what it reused."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from test_reproduce_pool import PoolToy, PoolToyConfig

import attnsvm.experiments
from attnsvm.cli import cli, print_summary
from attnsvm.report import record_run, write_report
from attnsvm.runner import read_shard, run_experiments


class CostToy(PoolToy):
    name = "cost-toy"
    title = "cost toy"


def _toy_run(out) -> list:
    return run_experiments([(CostToy(), PoolToyConfig(runs=4, per_task=2))], str(out), workers=1, progress=False)


def _meta(out, name="cost-toy") -> dict:
    return json.loads((out / name / "meta.json").read_text())


# ------------------------------------------------------------------ the records
def test_each_task_records_its_cost_in_its_shard_and_a_resumed_run_keeps_it(tmp_path):
    _toy_run(tmp_path)
    meta = _meta(tmp_path)
    prov = {p["task"]: p for p in meta["provenance"]}
    assert set(prov) == {"seeds-000", "seeds-002"}
    for key, p in prov.items():
        assert p["computed"] is True and p["cpu_seconds"] >= 0 and p["wall_seconds"] > 0, p
        shard = tmp_path / "cost-toy" / "shards" / meta["config_hash"] / f"{key}.parquet"
        _, stored = read_shard(str(shard))
        assert (stored["wall_seconds"], stored["cpu_seconds"]) == (p["wall_seconds"], p["cpu_seconds"])
    # pooled reproduce's sums are the tasks' records summed
    assert meta["task_cpu_seconds"] == pytest.approx(sum(p["cpu_seconds"] for p in prov.values()), abs=2e-3)
    # resumed: every task reused, with the seconds its shard recorded when it was computed
    from attnsvm.runner.costs import experiment_cost

    _toy_run(tmp_path)
    again = {p["task"]: p for p in _meta(tmp_path)["provenance"]}
    assert all(p["computed"] is False for p in again.values())
    assert {k: p["cpu_seconds"] for k, p in again.items()} == {k: p["cpu_seconds"] for k, p in prov.items()}
    cost = experiment_cost(_meta(tmp_path))
    assert (cost.computed, cost.reused, cost.cpu_seconds) == (0, 2, 0.0)
    assert cost.reused_cpu_seconds == pytest.approx(sum(p["cpu_seconds"] for p in prov.values()))


# ------------------------------------------------------------------ hand-written records
def _prov(key, wall, cpu, computed):
    return {"task": key, "config_hash": "h", "version": "v", "seeds": [0], "written": "w", "wall_seconds": wall,
            "cpu_seconds": cpu, "computed": computed}


def _folder(root, name, wall, tasks, workers=None):
    """An experiment folder whose meta.json records ``tasks`` ``[(key, wall, cpu, computed)]``."""
    d = root / name
    d.mkdir(parents=True)
    meta = {"name": name, "title": name, "paper": "p", "wall_seconds": wall, "preset": "full", "figures": [],
            "explain": "", "tasks": len(tasks), "computed": sum(t[3] for t in tasks),
            "resumed": sum(not t[3] for t in tasks), "workers": workers, "scheduler": None,
            "provenance": [_prov(*t) for t in tasks]}
    (d / "meta.json").write_text(json.dumps(meta))
    (d / "checks.json").write_text("[]")
    return d


def _banner(md_path) -> str:
    return open(md_path, encoding="utf-8").read().split("\n")[2]


def test_the_banner_sums_the_task_records_and_says_what_was_reused(tmp_path):
    _folder(tmp_path, "exp-a", 30.0, [("t1", 10.0, 11.5, True), ("t2", 9.0, 7.25, False)])
    _folder(tmp_path, "exp-b", 20.0, [("t1", 12.0, 12.5, True)])
    record_run(str(tmp_path), 25.0, 2.0, ["exp-a", "exp-b"], "full")
    line = _banner(write_report(str(tmp_path))[1])
    # the workers' computed tasks 11.5 + 12.5, the process 2.0; the reused task's 7.25 apart, not this run's
    assert "25.0 s of wall clock and 26.0 s of CPU (its tasks in worker processes 24.0 s" in line, line
    assert "1 of 3 tasks reused (their 7.2 CPU-s from an earlier run)" in line, line
    # the same sentence ends 'attnsvm reproduce' (run_cost_text of the same records)
    from attnsvm.runner.costs import run_cost, run_cost_text

    assert run_cost_text(run_cost(json.loads((tmp_path / "run.json").read_text()),
                                  [json.loads((tmp_path / n / "meta.json").read_text()) for n in ("exp-a", "exp-b")])
                         ) in line


def test_the_report_section_and_summary_show_the_records(tmp_path):
    _folder(tmp_path, "exp-a", 31.5, [("t1", 10.0, 11.5, True), ("t2", 9.0, 7.25, False)])
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    assert "31.5 s, its tasks 11.5 CPU-s; 1 of 2 tasks reused (their 7.2 CPU-s from an earlier run)" in page
    # edit the record: the section follows it
    meta = json.loads((tmp_path / "exp-a" / "meta.json").read_text())
    meta["provenance"][0]["cpu_seconds"] = 42.0
    (tmp_path / "exp-a" / "meta.json").write_text(json.dumps(meta))
    page = open(write_report(str(tmp_path))[0], encoding="utf-8").read()
    assert "31.5 s, its tasks 42.0 CPU-s; 1 of 2 tasks reused" in page
    # and each task's row in the provenance table
    assert "<td>t1</td>" in page and "42.0 CPU-s, 10.0 s, this run" in page
    assert "7.2 CPU-s, 9.0 s, reused from an earlier run" in page


def test_the_run_line_and_list_out_read_the_records(tmp_path, capsys):
    d = _folder(tmp_path, "exp-a", 12.3, [("t1", 4.0, 4.5, True), ("t2", 6.0, 6.7, False)], workers=1)
    summary = SimpleNamespace(name="exp-a", tasks=2, computed=1, resumed=1, failed=[], checks=[], recomputed=[],
                              wall_seconds=99.0, outdir=str(d))
    r = CliRunner().invoke(cli, ["list", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.strip().startswith("exp-a"))
    assert "12.3 s, its tasks 4.5 CPU-s; 1 of 2 tasks reused (their 6.7 CPU-s from an earlier run)" in row, row
    assert "Run: the experiments' recorded times add up to 12.3 s, 4.5 s of CPU" in r.output, r.output
    capsys.readouterr()
    print_summary(summary)
    text = capsys.readouterr().out
    assert "12.3 s, its tasks 4.5 CPU-s; 1 of 2 tasks reused (their 6.7 CPU-s from an earlier run) -> " in text, text
    assert "99.0" not in text


def test_list_out_of_a_folder_without_results_is_one_line(tmp_path):
    r = CliRunner().invoke(cli, ["list", "--out", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "no such results folder" in r.output and len(r.output.strip().splitlines()) == 1


def test_reproduce_prints_the_banners_time_and_a_resume_says_what_it_reused(tmp_path, monkeypatch):
    toy = CostToy()
    toy.quick = {"runs": 4, "per_task": 2}
    monkeypatch.setattr(attnsvm.experiments, "registry", lambda: {toy.name: toy})
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["reproduce", "--quick", "--workers", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    time_line = next(line for line in r.output.splitlines() if line.startswith("time: "))
    run = json.loads((out / "run.json").read_text())
    assert time_line.startswith(f"time: the run took {run['wall_seconds']:.1f} s of wall clock"), time_line
    assert "reused" not in time_line
    first_cpu = sum(p["cpu_seconds"] for p in _meta(out)["provenance"])
    again = CliRunner().invoke(cli, ["reproduce", "--quick", "--workers", "1", "--out", str(out)])
    assert again.exit_code == 0, again.output
    time_line = next(line for line in again.output.splitlines() if line.startswith("time: "))
    assert time_line.endswith(f"; 2 of 2 tasks reused (their {first_cpu:.1f} CPU-s from an earlier run)"), time_line
    assert f"2 of 2 tasks reused (their {first_cpu:.1f} CPU-s" in _banner(out / "report.md")


# ------------------------------------------------------------------ the probe's costs
def test_a_stored_probes_costs_come_from_its_task_records(tmp_path):
    """The heads' and null heads' costs that the terminal, probe.html and probe.json show (one dict, one
    :func:`~attnsvm.real.probe_view.cost_items`) are the stored tasks' records by part."""
    from attnsvm.cli.probe import task_costs
    from attnsvm.real.probe_view import cost_items

    d = _folder(tmp_path, "probe", 8.0, [("L0-H0", 1.0, 1.25, True), ("L0-H0-null", 3.0, 3.5, True),
                                         ("L0-H1", 2.0, 2.25, False), ("L0-H1-null", 4.0, 4.75, False)])
    parts = task_costs(str(d))
    assert parts["heads"]["cpu_seconds"] == 1.25 and parts["null heads"]["reused_cpu_seconds"] == 4.75
    items = dict(cost_items({"forward": 0.0, "forward_cached": True, "svm": 0.0, "nulls": 0.0, "total": 9.0,
                             "tasks_computed": 2, "tasks_reused": 2, "tasks": parts}, null_count="4"))
    assert items["heads' tasks (SVMs and baselines)"] == (
        "1 task(s) computed: 1.2 CPU-s, 1.0 s of task time; 1 of 2 tasks reused (their 2.2 CPU-s from an earlier run)")
    assert items["null heads' tasks (4 null heads)"].startswith("1 task(s) computed: 3.5 CPU-s, 3.0 s of task time")
    # a page rebuilt from the stored run: every task is that run's, and so is the wall clock
    rebuilt = task_costs(str(d), this_run=False)
    assert rebuilt["null heads"]["text"] == "none computed; 2 of 2 tasks reused (their 8.2 CPU-s from an earlier run)"
    assert dict(cost_items({"tasks": rebuilt, "total": 8.0, "total_of": "the stored run"}))["the stored run"] == \
        "8.0 s wall clock"


def test_the_probe_command_and_page_show_the_stored_records(tmp_path, monkeypatch):
    """A tiny stored probe (random-weight BERT, two heads): the terminal's, probe.json's and probe.html's costs are
    the parts of its meta.json records; run again, every task is said reused with the first run's CPU."""
    pytest.importorskip("transformers")
    from test_probe_notebook import TEXTS, _objects, _save

    model, _ = _objects("bert")
    path = _save(model, tmp_path / "model")
    f = tmp_path / "s.txt"
    f.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "out"
    args = ["probe", "--model", path, "--sentences", str(f), "--layers", "0", "--heads", "0,1", "--svm-sentences",
            "3", "--null-draws", "2", "--view-sentences", "1", "--out", str(out)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    meta = _meta(out, "probe")
    heads = [p for p in meta["provenance"] if not p["task"].endswith("-null")]
    nulls = [p for p in meta["provenance"] if p["task"].endswith("-null")]
    assert len(heads) == len(nulls) == 2
    seconds = json.loads((out / "probe.json").read_text())["seconds"]["tasks"]
    assert seconds["heads"]["cpu_seconds"] == pytest.approx(sum(p["cpu_seconds"] for p in heads))
    assert seconds["null heads"]["wall_seconds"] == pytest.approx(sum(p["wall_seconds"] for p in nulls))
    for part in ("heads", "null heads"):
        assert seconds[part]["text"] in r.output
        assert seconds[part]["text"].replace("'", "&#x27;") in (out / "probe.html").read_text(encoding="utf-8")
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    cpu = sum(p["cpu_seconds"] for p in heads)
    from attnsvm.runner.costs import experiment_cost, part_cost_text

    assert f"none computed; 2 of 2 tasks reused (their {cpu:.1f} CPU-s from an earlier run)" in again.output
    assert part_cost_text(experiment_cost(_meta(out, "probe")).parts(lambda k: k.endswith("-null"))[False]) in \
        again.output
