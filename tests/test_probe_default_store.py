"""``attnsvm probe`` never loses a long run (issue 42): without ``--out`` it stores the run in
``./attnsvm-probe/<hash of the settings>``, named in the first line; the same command resumes that folder, other
settings go to a new folder (the first line says so and names what differs); ``--no-store`` writes nothing."""

import json
import os
import re

import pytest

pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from attnsvm.cli import cli  # noqa: E402
from test_probe_notebook import TEXTS, _objects, _save  # noqa: E402

FIRST = re.compile(r"attnsvm probe: storing the run in (attnsvm-probe/[0-9a-f]{12}), a new folder")


@pytest.fixture
def probe_args(tmp_path, monkeypatch):
    """The arguments of a tiny probe (a random-weight BERT, six sentences, one layer, two heads), run in an empty
    working directory (``tmp_path/work``): nothing is written beside the repository."""
    model, _ = _objects("bert")
    path = _save(model, tmp_path / "model")
    f = tmp_path / "s.txt"
    f.write_text("\n".join(TEXTS) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return ["probe", "--model", path, "--sentences", str(f), "--layers", "0", "--heads", "0,1", "--svm-sentences",
            "3", "--null-draws", "2", "--view-sentences", "1"]


def test_a_probe_without_out_is_stored_and_resumed(probe_args):
    r = CliRunner().invoke(cli, probe_args)
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    m = FIRST.fullmatch(first.split(";")[0])
    assert m, first
    folder = m.group(1)
    assert "the same command resumes it" in first and "--no-store keeps nothing" in first
    for name in ("probe.csv", "probe.json", "probe.html", "settings.json", "probe/results.parquet"):
        assert os.path.isfile(os.path.join(folder, name)), name
    assert "4 computed, 0 resumed" in r.stdout  # two heads and their null tasks
    settings = json.loads(open(os.path.join(folder, "settings.json")).read())
    assert settings["svm_sentences"] == 3 and settings["model"] == os.path.realpath(probe_args[2])
    # the same command: the same folder, every head reused
    again = CliRunner().invoke(cli, probe_args)
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines()[0].startswith(f"attnsvm probe: the run with these settings is stored in {folder}: "
                                                   "reusing its finished heads")
    assert "0 computed" in again.stdout and os.listdir("attnsvm-probe") == [os.path.basename(folder)]
    # other settings: a new folder, the first line names the stored run and what differs
    other = CliRunner().invoke(cli, probe_args[:-5] + ["4"] + probe_args[-4:])
    assert other.exit_code == 0, other.output
    line = other.stdout.splitlines()[0]
    m2 = FIRST.match(line)
    assert m2 and m2.group(1) != folder, line
    assert f"its settings differ from those of the run stored in {folder} (in svm_sentences)" in line
    assert sorted(os.listdir("attnsvm-probe")) == sorted([os.path.basename(folder), os.path.basename(m2.group(1))])


def test_json_keeps_stdout_json_and_says_where_on_stderr(probe_args):
    r = CliRunner().invoke(cli, probe_args + ["--json"])
    assert r.exit_code == 0, r.output
    payload = json.loads(r.stdout)
    assert FIRST.match(r.stderr.splitlines()[0]) and payload["stored"]["dir"].startswith("attnsvm-probe")


def test_no_store_writes_nothing(probe_args):
    r = CliRunner().invoke(cli, probe_args + ["--no-store"])
    assert r.exit_code == 0, r.output
    assert os.listdir(".") == [] and "storing" not in r.output and "heads stored" not in r.output
    r = CliRunner().invoke(cli, probe_args + ["--no-store", "--out", "o"])
    assert r.exit_code == 2 and r.stderr.strip() == ("attnsvm: error: --no-store writes nothing and --out names where "
                                                     "to write: give one of them"), r.stderr
    assert os.listdir(".") == []


def test_a_default_folder_that_cannot_be_made_is_one_line(probe_args):
    with open("attnsvm-probe", "w") as fh:  # a file where the folder of the stored runs goes
        fh.write("not a folder")
    r = CliRunner().invoke(cli, probe_args)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnsvm: error: cannot create the probe's default folder "
                                                   "attnsvm-probe/") and "--no-store" in lines[0], r.stderr


def test_report_on_a_probe_folder_rebuilds_its_page(probe_args, tmp_path):
    """``attnsvm report DIR`` on a probe's folder writes the probe's page from its stored heads (issue 42, item 2),
    not a "reproduction report" of "preset full"; every task counts as reused."""
    out = str(tmp_path / "out")
    r = CliRunner().invoke(cli, probe_args + ["--out", out])
    assert r.exit_code == 0, r.output
    first = open(os.path.join(out, "probe.html"), encoding="utf-8").read()
    os.remove(os.path.join(out, "probe.html"))
    r = CliRunner().invoke(cli, ["report", out])
    assert r.exit_code == 0, r.output
    assert "wrote its page" in r.output and not os.path.exists(os.path.join(out, "report.html"))
    page = open(os.path.join(out, "probe.html"), encoding="utf-8").read()
    assert "reproduction report" not in page and "preset full" not in page
    # each part's tasks reused, with the CPU the stored run recorded for them (tests/test_one_cost_source.py)
    assert page.count("none computed; 2 of 2 tasks reused (their ") == 2
    # the same verdicts as the page the probe wrote
    verdicts = re.compile(r"(beyond null|not distinguishable|below null|no SVM)")
    assert verdicts.findall(page) == verdicts.findall(first)
