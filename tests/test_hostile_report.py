"""``attnsvm report`` on hostile result folders: special files, huge or deeply nested JSON, giant integers, lone
surrogates, text built to make regular expressions backtrack, and markup in what report.md takes from files.

Each case ends with a report that names the problem (or a one-line error), never a hang or a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest
from sealed_folder import seal

from attnsvm import report as rp
from attnsvm.errors import ValidationError
from attnsvm.report import collect, human, record_skipped, write_report

#: the texts of issue 43 that made report.human backtrack for minutes
BACKTRACKERS = ["{" + "'a':a " * 40, "np.int64(" + " " * 20000, "{" + "'a': " + " " * 20000,
                "x **y" * 20000, "np.float64(" * 3000 + " " * 3000]


@contextlib.contextmanager
def within(seconds: int):
    """Fail (instead of hanging) when the block runs longer than ``seconds``."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def in_child(code: str, seconds: int = 20) -> str:
    """Run ``code`` in a fresh interpreter; fail when it runs past ``seconds`` (a regular expression that
    backtracks holds the interpreter in C code, where no alarm interrupts it)."""
    try:
        res = subprocess.run([sys.executable, "-"], input=textwrap.dedent(code), capture_output=True, text=True,
                             timeout=seconds, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {seconds} s")
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _check(name="a claim", **kw):
    c = {"name": name, "value": 1.0, "threshold": ">= 1", "passed": True, "source": "paper", "kind": "spec",
         "detail": ""}
    c.update(kw)
    return c


def _folder(root, name="exp-one", checks=None, **meta):
    d = root / name
    d.mkdir(parents=True)
    m = {"name": name, "title": f"title of {name}", "paper": "a paper", "wall_seconds": 1.5, "preset": "full",
         "figures": [], "explain": "", "config": {"runs": 3}}
    m.update(meta)
    (d / "meta.json").write_text(json.dumps(m))
    (d / "checks.json").write_text(json.dumps([_check()] if checks is None else checks))
    seal(d)
    return d


def _report(root, seconds: int = 10) -> tuple[str, str]:
    with within(seconds):
        html_path, md_path = write_report(str(root))
    return open(html_path, encoding="utf-8").read(), open(md_path, encoding="utf-8").read()


# ------------------------------------------------------------------ special files
def _fifo(path):
    os.mkfifo(path)


def _folder_at(path):
    os.mkdir(path)


def _dev_zero(path):
    os.symlink("/dev/zero", path)


@pytest.mark.parametrize("make, what", [(_fifo, "a fifo (named pipe)"), (_folder_at, "a directory"),
                                        (_dev_zero, "a character device")])
@pytest.mark.parametrize("name", ["checks.json", "meta.json"])
def test_a_special_file_is_named_in_the_report_never_read(tmp_path, make, what, name):
    d = _folder(tmp_path)
    os.unlink(d / name)
    make(d / name)
    page, md = _report(tmp_path)
    assert f"{name} is unreadable (it is {what}, not a regular file)" in md
    assert "FAILURES" in md and "1 result folder(s) unreadable" in md


@pytest.mark.parametrize("make, what", [(_fifo, "a fifo (named pipe)"), (_dev_zero, "a character device"),
                                        (_folder_at, "a directory")])
def test_a_special_skipped_json_is_a_warning_and_cannot_be_recorded(tmp_path, make, what):
    _folder(tmp_path)
    make(tmp_path / "skipped.json")
    page, md = _report(tmp_path)
    assert f"skipped.json is unreadable (it is {what}, not a regular file)" in md
    assert "All checks pass" not in md
    if make is _dev_zero:       # a link is replaced by the new file, never written through
        record_skipped(str(tmp_path), [{"name": "x", "reason": "r"}])
        assert not os.path.islink(tmp_path / "skipped.json") and "x" in (tmp_path / "skipped.json").read_text()
        return
    with within(10), pytest.raises(ValidationError, match=f"skipped.json.*it is {re.escape(what)}, not a regular file"):
        record_skipped(str(tmp_path), [{"name": "x", "reason": "r"}])


def test_files_over_the_size_cap_are_refused(tmp_path, monkeypatch):
    _folder(tmp_path, checks=[_check(detail="x" * 5000)])
    monkeypatch.setattr(rp, "MAX_JSON_BYTES", 4000)
    page, md = _report(tmp_path)
    assert "checks.json is unreadable (it holds" in md and "more than the 4000 read" in md


# ------------------------------------------------------------------ what the JSON holds
DEEP = "[" * 100000 + "]" * 100000


@pytest.mark.parametrize("name", ["checks.json", "meta.json", "skipped.json"])
@pytest.mark.parametrize("text, words", [(DEEP, "its values nest more than 64 levels deep"),
                                         ("[" * 70 + "]" * 70, "its values nest more than 64 levels deep"),
                                         ('[{"name": "a", "passed": true, "value": ' + "7" * 5000 + "}]",
                                          "an integer of 5000 digits"),
                                         ('{"title": ' + "-" + "9" * 5000 + "}", "an integer of 5000 digits")])
def test_nesting_and_integer_caps_give_a_clean_error(tmp_path, name, text, words):
    d = _folder(tmp_path)
    (tmp_path / "skipped.json" if name == "skipped.json" else d / name).write_text(text)
    page, md = _report(tmp_path)
    assert f"{name} is unreadable ({words}" in md


def test_lone_surrogates_are_replaced(tmp_path):
    d = _folder(tmp_path, checks=[_check("claim \ud800", detail="\udfff")], title="t \udc80", explain="e \ud83d")
    assert "\\ud800" in (d / "checks.json").read_text()
    (tmp_path / "skipped.json").write_text(json.dumps([{"name": "s \ud800", "reason": "r \udbff"}]))
    page, md = _report(tmp_path)
    assert "claim \ufffd" in page and "t \ufffd" in md and "s \ufffd" in md


# ------------------------------------------------------------------ regular expressions that backtrack
def test_human_and_markdown_are_linear():
    out = in_child(f"""
        import time
        from attnsvm.report import human, markdown_html
        for text in {BACKTRACKERS!r}:
            t = time.perf_counter()
            human(text), markdown_html(text)
            assert time.perf_counter() - t < 2, (text[:30], time.perf_counter() - t)
        print("ok")
    """)
    assert out.strip() == "ok"


def test_backtracking_texts_in_every_field_render_quickly(tmp_path):
    checks = [_check(f"claim {k}", detail=t, threshold=t, passed=False, verdict="fail") for k, t in enumerate(BACKTRACKERS)]
    _folder(tmp_path, checks=checks, title=BACKTRACKERS[0], explain="\n\n".join(BACKTRACKERS), paper=BACKTRACKERS[1])
    (tmp_path / "skipped.json").write_text(json.dumps([{"name": "s", "reason": t, "hint": t} for t in BACKTRACKERS]))
    in_child(f"from attnsvm.report import write_report; write_report({str(tmp_path)!r})", seconds=20)
    assert "np.int64(" in (tmp_path / "report.md").read_text()


def test_human_keeps_its_conversions():
    assert human("np.int64(10) and np.float64( 2.5 ) np.True_") == "10 and 2.5 True"
    assert human("{'ok': 15, 'infeasible': 11}") == "ok 15, infeasible 11"
    assert human("{'ok': np.int64(3),}") == "ok 3"
    assert human("{'a': 1, {'b': 2}}") == "{'a': 1, b 2}"
    assert human("{} {'a' 1}") == "{} {'a' 1}"


# ------------------------------------------------------------------ what report.md takes from files is escaped
def test_report_md_escapes_markup_from_files(tmp_path):
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    _folder(tmp_path, checks=[_check(evil, detail=evil)], title=evil, explain=f"Some **notes** {evil}\n\n{evil}",
            paper=evil, deviations=[{"spec": evil, "here": evil, "reason": evil}], figures=[f"{evil}.png"])
    (tmp_path / "skipped.json").write_text(json.dumps([{"name": evil, "reason": evil, "hint": evil, "title": evil}]))
    page, md = _report(tmp_path)
    assert "<script" not in md.lower() and "<img" not in md.lower(), md
    assert "&lt;script&gt;" in md and "**notes**" in md


def test_a_config_cannot_end_its_code_block(tmp_path):
    d = _folder(tmp_path, config=None)
    (d / "config.yaml").write_text("runs: 3\n```\n<script>alert(1)</script>\n```\n")
    page, md = _report(tmp_path)
    block = md[md.index("runs: 3") - 10:md.index("runs: 3")]
    assert block == "\n````yaml\n", block       # longer than the config's own ``` fences


def test_reproduce_refuses_a_skipped_json_folder_before_computing(tmp_path):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    (tmp_path / "skipped.json").mkdir()
    res = CliRunner().invoke(cli, ["reproduce", "--quick", "--only", "tf-svm-rank", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "skipped.json" in res.output and "it is a directory" in res.output
    assert sorted(os.listdir(tmp_path)) == ["skipped.json"]       # nothing computed


def test_the_cli_report_on_a_fifo_is_not_a_hang(tmp_path):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    d = _folder(tmp_path)
    os.unlink(d / "checks.json")
    os.mkfifo(d / "checks.json")
    with within(10):
        res = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert res.exit_code == 0 and "report:" in res.output
    (e,) = collect(str(tmp_path))
    assert e["checks"] == [] and "fifo" in e["problems"][0]
