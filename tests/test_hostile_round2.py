"""Hostile cases, second round (issue 43): the report's inputs, the seal, output paths and the pool's task ends.

Every case ends cleanly: a report with nothing unescaped and no traceback (the report), a problem or warning instead
of a green banner (the seal), a one-line error or a correct run with nothing written outside --out (output
paths), or the task's own recorded failure while the other tasks finish (the pool).

Before their fixes: a Markdown link ``[x](javascript:...)`` from any text field was live in report.md; ESC and NUL
from checks.json and skipped.json reached report.md and report.html raw; a check's ``claim_is`` of a list or dict
was a TypeError traceback; an error quoting an ``--out`` with a newline took two lines; and a task whose table
stored alone but not with the other task's (text or bytes where they hold numbers) stopped the whole sweep, every
experiment of it, with a TableError traceback after all the work."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys

import pandas as pd
import pytest
from test_hostile_report import _check, _folder, within
from test_hostile_runner import RunnerToy
from test_reproduce_pool import PoolToy, PoolToyConfig
from test_results_seal import SealToy, _reseal

from attnsvm._html import REVEAL_SCRIPT
from attnsvm.errors import ValidationError
from attnsvm.report import collect, record_skipped, write_report
from attnsvm.runner import CHECKS_DIGEST_KEY, META_DIGEST_KEY, StorageError, run_experiment, run_experiments

EVIL = ("<script>alert(1)</script><img src=x onerror=alert(2)>x' onmouseover='alert(3)\" "
        "[click](javascript:alert(4)) <!-- c --> &amp; <a href=javascript:alert(5)>a</a>")


def _unescaped(page: str, md: str) -> list:
    """What of :data:`EVIL` survives as markup: tags in either file, an attribute breaking out of its quotes, a
    Markdown link to javascript: in report.md."""
    found = []
    md = re.sub(r"(?ms)^(`{3,})yaml\n.*?^\1$", "", md)   # a config's code block: literal text, its fence longer
    page = page.replace("<div class='fig'><img src='", "")  # the report's own figure tags
    page = page.replace(f"<script>{REVEAL_SCRIPT}</script>", "")  # and its own script (opens collapsed sections)
    for where, text in (("html", page), ("md", md)):       # than any run of backticks in it
        low = text.lower()
        for tag in ("<script", "<img", "<!--", "<a href=javascript"):
            if tag in low:
                found.append(f"{where}: {tag}")
    if "' onmouseover='" in page:      # report.md has no tags (all escaped): its quotes are text
        found.append("html: attribute")
    if re.search(r"(?<!\\)\]\(\s*javascript:", md, re.IGNORECASE):
        found.append("md: javascript link")
    return found


def _write_report(root):
    with within(20):
        html_path, md_path = write_report(str(root))
    return open(html_path, encoding="utf-8").read(), open(md_path, encoding="utf-8").read()


def _raw_seal(d) -> None:
    """Seal ``d`` as a run does, whatever its meta.json holds (its bytes are sealed as they are)."""
    import hashlib

    from attnsvm.runner import shard_bytes

    def digest(name):
        return "sha256:" + hashlib.sha256((d / name).read_bytes()).hexdigest()

    try:
        meta = json.loads((d / "meta.json").read_bytes())
    except ValueError:
        meta = None
    prov = {"experiment": d.name, "config_hash": meta.get("config_hash") if isinstance(meta, dict) else None,
            CHECKS_DIGEST_KEY: digest("checks.json"), META_DIGEST_KEY: digest("meta.json")}
    (d / "results.parquet").write_bytes(shard_bytes(pd.DataFrame({"x": [1.0]}), prov))


# ================================================================== (a) the report's hostile inputs
META_FIELDS = ["title", "paper", "explain", "preset", "finished", "workers", "scheduler", "runs", "config_hash"]
CHECK_FIELDS = ["name", "source", "kind", "value", "threshold", "threshold_reason", "detail", "finding_reason",
                "alternative", "verdict", "claim_is"]


@pytest.mark.parametrize("field", META_FIELDS)
def test_markup_in_every_meta_field_is_escaped(tmp_path, field):
    d = _folder(tmp_path, **{field: EVIL})
    _raw_seal(d)
    page, md = _write_report(tmp_path)
    assert _unescaped(page, md) == []


@pytest.mark.parametrize("field", CHECK_FIELDS)
def test_markup_in_every_check_field_is_escaped(tmp_path, field):
    d = _folder(tmp_path, checks=[_check(**{field: EVIL}, passed=False, finding=True)])
    _raw_seal(d)
    page, md = _write_report(tmp_path)
    assert _unescaped(page, md) == []


@pytest.mark.parametrize("where", ["deviations", "provenance", "figures", "environment", "config-key",
                                   "config-value", "config.yaml", "skipped"])
def test_markup_in_nested_entries_is_escaped(tmp_path, where):
    meta = {"deviations": {"deviations": [{"spec": EVIL, "here": EVIL, "reason": EVIL}]},
            "provenance": {"provenance": [{"task": EVIL, "config_hash": EVIL, "version": EVIL, "seeds": EVIL,
                                           "written": EVIL}]},
            "figures": {"figures": [EVIL + ".png", f"a](javascript:alert(6)) {EVIL}.png"]},
            "environment": {"environment": {"python": EVIL, "platform": EVIL, "cpus": EVIL,
                                            "packages": {EVIL: EVIL}}},
            "config-key": {"config": {EVIL: 1}}, "config-value": {"config": {"runs": EVIL}},
            "config.yaml": {"config": None}, "skipped": {}}[where]
    d = _folder(tmp_path, **meta)
    if where == "config.yaml":
        (d / "config.yaml").write_text(f"runs: 3\n```\n{EVIL}\n````\n")
    if where == "skipped":
        (tmp_path / "skipped.json").write_text(json.dumps([{"name": EVIL, "title": EVIL, "reason": EVIL,
                                                            "hint": EVIL}]))
    _raw_seal(d)
    page, md = _write_report(tmp_path)
    assert _unescaped(page, md) == []


WRONG = {"int": 7, "float": 2.5, "bool": True, "null": None, "list": [1, [2, [3]]], "dict": {"a": {"b": []}},
         "huge": "x" * 200_000, "deep": [[[[[[[[[[[["d"]]]]]]]]]]]]}


@pytest.mark.parametrize("kind", sorted(WRONG))
@pytest.mark.parametrize("key", ["title", "wall_seconds", "figures", "deviations", "provenance", "environment",
                                 "config"])
def test_a_wrong_type_at_a_meta_key_gives_a_report(tmp_path, key, kind):
    d = _folder(tmp_path, **{key: WRONG[kind]})
    _raw_seal(d)
    page, md = _write_report(tmp_path)
    assert "exp-one" in md and _unescaped(page, md) == []


@pytest.mark.parametrize("kind", sorted(WRONG))
@pytest.mark.parametrize("key", ["name", "value", "passed", "verdict", "threshold", "detail", "power", "p_value",
                                 "finding", "claim_is", "alternative"])
def test_a_wrong_type_at_a_check_key_gives_a_report(tmp_path, key, kind):
    d = _folder(tmp_path, checks=[_check(**{key: WRONG[kind]}), _check("second")])
    _raw_seal(d)
    page, md = _write_report(tmp_path)
    assert "exp-one" in md


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "nan", None, True, False, [1, 2], {"a": 1}, "",
                                   "1e999", -0.0])
def test_check_values_that_are_not_numbers_are_shown(tmp_path, value):
    d = _folder(tmp_path, checks=[_check(value=value)])
    _raw_seal(d)
    page, md = _write_report(tmp_path)
    assert "| a claim |" in md


RAW = {
    "nan-literal": b'[{"name": "a", "passed": true, "value": NaN}]',
    "infinity-literal": b'[{"name": "a", "passed": true, "value": -Infinity}]',
    "duplicate-keys": b'[{"name": "a", "name": "<script>x</script>", "passed": false, "passed": true}]',
    "bom": b"\xef\xbb\xbf" + json.dumps([_check()]).encode(),
    "invalid-utf8": b'[{"name": "a\xff\xfe", "passed": true}]',
    "control-chars": json.dumps([_check("a\x1b[31mred\x07\x00\r\n# heading\n| x | y |")]).encode(),
    "empty": b"",
    "whitespace": b" \n\t ",
    "truncated": json.dumps([_check()]).encode()[:-3],
    "trailing-garbage": json.dumps([_check()]).encode() + b" ]]",
    "big-float": b'[{"name": "a", "passed": true, "value": 1e400}]',
    "long-string": json.dumps([_check(detail="y" * 3_000_000)]).encode(),
}


@pytest.mark.parametrize("name", sorted(RAW))
@pytest.mark.parametrize("file", ["checks.json", "meta.json", "skipped.json"])
def test_raw_hostile_bytes_give_a_report(tmp_path, file, name):
    d = _folder(tmp_path)
    raw = RAW[name]
    if file == "meta.json":
        raw = raw.replace(b'"passed"', b'"title"')
    (tmp_path / file if file == "skipped.json" else d / file).write_bytes(raw)
    _raw_seal(d)
    page, md = _write_report(tmp_path)
    assert "exp-one" in md and _unescaped(page, md) == []
    assert "\x1b" not in md and "\x00" not in md and "\x1b" not in page and "\x00" not in page


def test_a_newline_in_a_check_name_does_not_break_the_markdown_table(tmp_path):
    d = _folder(tmp_path, checks=[_check("a\n## injected heading\n| x | y |", detail="d|e\nf")])
    _raw_seal(d)
    page, md = _write_report(tmp_path)
    assert "\n## injected heading" not in md and "\n| x | y |" not in md


# ================================================================== (b) the seal
@pytest.fixture(scope="module")
def sealed_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("sealed")
    toy = SealToy()
    run_experiment(toy, toy.Config(runs=3), str(root / "a"), progress=False)
    run_experiment(toy, toy.Config(runs=2), str(root / "b"), progress=False)
    record_skipped(str(root / "a"), [{"name": "real-x", "title": "t", "reason": "needs transformers>=4.40", "hint": "pip"}])
    return root


def _copy(sealed_run, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sealed_run / "a", out)
    return out, out / "seal-toy"


def _banner(out) -> str:
    _, md = _write_report(out)
    return md.splitlines()[2]


def _not_green(out) -> None:
    assert "All checks pass" not in _banner(out)


def _edit_json(raw: bytes, how: str) -> bytes:
    if how == "append-space":
        return raw + b" "
    if how == "append-newline":
        return raw + b"\n"
    if how == "prepend-bom":
        return b"\xef\xbb\xbf" + raw
    if how == "change-digit":
        m = re.search(rb"\d", raw)
        return raw[:m.start()] + bytes([b"0123456789"[(raw[m.start()] - 47) % 10]]) + raw[m.end():]
    if how == "reorder-keys":
        return json.dumps(_reorder(json.loads(raw)), indent=2).encode()
    if how == "reserialize-compact":
        return json.dumps(json.loads(raw)).encode()
    if how == "flip-case":
        k = raw.index(b"e")
        return raw[:k] + b"E" + raw[k + 1:]
    if how == "drop-last-byte":
        return raw[:-1]
    if how == "swap-true-false":
        return raw.replace(b"true", b"false", 1) if b"true" in raw else raw.replace(b"false", b"true", 1)
    raise AssertionError(how)


def _reorder(value):
    if isinstance(value, dict):
        return {k: _reorder(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reorder(v) for v in value]
    return value


EDITS = ["append-space", "append-newline", "prepend-bom", "change-digit", "reorder-keys", "reserialize-compact",
         "flip-case", "drop-last-byte"]


@pytest.mark.parametrize("how", EDITS + ["swap-true-false"])
@pytest.mark.parametrize("file", ["checks.json", "meta.json"])
def test_every_edit_of_a_sealed_file_is_detected(sealed_run, tmp_path, file, how):
    """A re-serialization of the same JSON changes the bytes, and the seal is of the bytes: it is detected too
    (conservative). Only a byte-identical rewrite is accepted (the next test)."""
    out, d = _copy(sealed_run, tmp_path)
    raw = (d / file).read_bytes()
    edited = _edit_json(raw, how)
    assert edited != raw
    (d / file).write_bytes(edited)
    (e,) = collect(str(out))
    assert e["checks"] == [] and any(f"{file} changed after the run" in p or file in p for p in e["problems"]), e
    _not_green(out)


@pytest.mark.parametrize("file", ["checks.json", "meta.json", "skipped.json"])
def test_a_byte_identical_rewrite_is_accepted(sealed_run, tmp_path, file):
    """Documented: the seal is of the bytes, so writing the very same bytes again (a copy, a restore) is the run's."""
    out, d = _copy(sealed_run, tmp_path)
    path = out / file if file == "skipped.json" else d / file
    raw = path.read_bytes()
    path.unlink()
    path.write_bytes(raw)
    assert "1 warning" not in _banner(out) and "FAILURES" not in _banner(out)


@pytest.mark.parametrize("how", EDITS)
def test_every_edit_of_skipped_json_is_a_warning(sealed_run, tmp_path, how):
    out, _ = _copy(sealed_run, tmp_path)
    path = out / "skipped.json"
    path.write_bytes(_edit_json(path.read_bytes(), how))
    banner = _banner(out)
    assert "All checks pass" not in banner and "warning" in banner


RESULTS = {
    "truncated-1": lambda raw, other, old: raw[:-1],
    "truncated-half": lambda raw, other, old: raw[:len(raw) // 2],
    "extended-1": lambda raw, other, old: raw + b"\0",
    "extended-parquet": lambda raw, other, old: raw + raw,
    "empty": lambda raw, other, old: b"",
    "magic-only": lambda raw, other, old: b"PAR1PAR1",
    "other-config": lambda raw, other, old: other,
    "older-unsealed": lambda raw, other, old: old,
}


@pytest.mark.parametrize("how", sorted(RESULTS))
def test_a_replaced_results_parquet_is_not_green(sealed_run, tmp_path, how):
    from attnsvm.runner import read_shard, shard_bytes

    out, d = _copy(sealed_run, tmp_path)
    raw = (d / "results.parquet").read_bytes()
    other = (sealed_run / "b" / "seal-toy" / "results.parquet").read_bytes()
    old = shard_bytes(read_shard(str(d / "results.parquet"))[0])
    (d / "results.parquet").write_bytes(RESULTS[how](raw, other, old))
    (e,) = collect(str(out))
    assert e["problems"] or e["warnings"]
    _not_green(out)


def test_another_experiments_folder_copied_in_whole_is_refused(sealed_run, tmp_path):
    out, d = _copy(sealed_run, tmp_path)
    shutil.copytree(d, out / "tf-svm-rank")
    (e1, e2) = collect(str(out))
    assert any("sealed for experiment 'seal-toy'" in p or "names experiment" in p for p in e1["problems"] + e2["problems"])
    _not_green(out)


PROV = {"experiment-missing": {"experiment": None}, "experiment-int": {"experiment": 7},
        "experiment-list": {"experiment": ["seal-toy"]}, "config-hash-missing": {"config_hash": None},
        "config-hash-int": {"config_hash": 12}, "checks-digest-int": {CHECKS_DIGEST_KEY: 1},
        "checks-digest-empty": {CHECKS_DIGEST_KEY: ""}, "checks-digest-list": {CHECKS_DIGEST_KEY: ["sha256:"]},
        "meta-digest-int": {META_DIGEST_KEY: 3}, "meta-digest-empty": {META_DIGEST_KEY: ""},
        "meta-digest-dict": {META_DIGEST_KEY: {"a": 1}}, "meta-digest-null": {META_DIGEST_KEY: "null"}}


@pytest.mark.parametrize("how", sorted(PROV))
def test_seal_provenance_missing_or_of_the_wrong_type_is_a_problem(sealed_run, tmp_path, how):
    out, d = _copy(sealed_run, tmp_path)
    _reseal(str(d), **PROV[how]) if None not in PROV[how].values() else _drop_prov(d, *PROV[how])
    (e,) = collect(str(out))
    assert e["problems"] and e["checks"] == [], e
    _not_green(out)


def _drop_prov(d, key):
    from attnsvm.runner import read_shard, shard_bytes

    table, prov = read_shard(str(d / "results.parquet"))
    prov.pop(key)
    (d / "results.parquet").write_bytes(shard_bytes(table, prov))


@pytest.mark.parametrize("value", ["a string", 5, None, [1]])
def test_a_provenance_that_is_not_an_object_is_a_warning(sealed_run, tmp_path, value):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attnsvm.runner import PROVENANCE_KEY, read_shard, shard_bytes

    out, d = _copy(sealed_run, tmp_path)
    raw = shard_bytes(read_shard(str(d / "results.parquet"))[0], {"x": 1})
    t = pq.read_table(pa.BufferReader(raw))
    meta = dict(t.schema.metadata)
    meta[PROVENANCE_KEY] = json.dumps(value).encode()
    t = t.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    (d / "results.parquet").write_bytes(sink.getvalue().to_pybytes())
    (e,) = collect(str(out))
    assert e["problems"] or e["warnings"]
    _not_green(out)


# ================================================================== (c) output paths
def _outside(tmp_path, out) -> dict:
    """Every path under tmp_path that is not below ``out``, with its kind and size."""
    found = {}
    for d, dirs, files in os.walk(tmp_path):
        for name in dirs + files:
            p = os.path.join(d, name)
            if not (p == str(out) or p.startswith(str(out) + os.sep)) and not \
                    (str(out).startswith(p + os.sep) and os.path.isdir(p) and not os.listdir(p)):  # mkdir -p OUT
                st = os.lstat(p)
                found[p] = (st.st_mode, st.st_size if not os.path.isdir(p) else 0)
    return found


def _make(path, what):
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if what == "file":
        open(path, "w").write("mine\n")
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "dangling":
        os.symlink(path + ".nowhere", path)
    elif what == "devnull":
        os.symlink("/dev/null", path)
    elif what == "folder":
        os.mkdir(path)
    else:
        raise AssertionError(what)


def _run_toy(out, workers=1):
    toy = RunnerToy()
    with within(60):
        return run_experiments([(toy, toy.Config())], str(out), workers=workers, progress=False)


def _one_line_error(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text and text.strip(), text
    return text


@pytest.mark.parametrize("what", ["file", "fifo", "dangling", "devnull"])
@pytest.mark.parametrize("where", ["OUT", "OUT/runner-toy", "OUT/runner-toy/shards"])
def test_an_output_folder_that_is_not_a_folder_is_one_line(tmp_path, where, what):
    out = tmp_path / "out"
    target = tmp_path / where.replace("OUT", "out")
    _make(target, what)
    before = _outside(tmp_path, out)
    with pytest.raises((StorageError, ValidationError)) as info:
        _run_toy(out)
    _one_line_error(info)
    assert _outside(tmp_path, out) == before and not os.path.exists(str(target) + ".nowhere")
    assert os.path.islink(target) or target.is_fifo() or target.is_file()


@pytest.mark.parametrize("what", ["fifo", "dangling", "devnull", "folder"])
@pytest.mark.parametrize("name", ["checks.json", "meta.json", "results.parquet", "failures.json"])
def test_an_output_file_that_is_special_is_replaced_or_refused(tmp_path, name, what):
    out = tmp_path / "out"
    target = out / "runner-toy" / name
    _make(target, what)
    before = _outside(tmp_path, out)
    try:
        (s,) = _run_toy(out)
    except (StorageError, ValidationError) as exc:
        assert "\n" not in str(exc)
    else:
        assert s.ok and os.path.isfile(out / "runner-toy" / "checks.json")
        if name != "failures.json":
            assert target.is_file() and not target.is_symlink()
    assert _outside(tmp_path, out) == before and not os.path.exists(str(target) + ".nowhere")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


@pytest.mark.parametrize("name", ["new\nline", "uni\u00e9\u4e2d\U0001f600", "sp ace", "-dash", "a" * 255,
                                  "\u202eevil", "tab\there"])
def test_unusual_out_names_run_correctly(tmp_path, name):
    out = tmp_path / name
    before = _outside(tmp_path, out)
    (s,) = _run_toy(out)
    assert s.ok and (out / "runner-toy" / "checks.json").is_file()
    assert _outside(tmp_path, out) == before


@pytest.mark.parametrize("out", ["a" * 256, "file/below", "file/below/deeper", "x/" + "b" * 300])
def test_impossible_out_paths_are_one_line(tmp_path, out):
    (tmp_path / "file").write_text("mine\n")
    before = _outside(tmp_path, tmp_path / out)
    with pytest.raises((StorageError, ValidationError)) as info:
        _run_toy(tmp_path / out)
    _one_line_error(info)
    assert _outside(tmp_path, tmp_path / out) == before and (tmp_path / "file").read_text() == "mine\n"


@pytest.mark.parametrize("what", ["file", "fifo", "dangling", "devnull"])
def test_the_cli_report_on_an_out_that_is_not_a_folder_is_one_line(tmp_path, what):
    from test_hostile_files import _cli

    _make(tmp_path / "out\nx", what)
    with within(20):
        r = _cli(["report", "out\nx"], tmp_path)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert len([x for x in r.stderr.splitlines() if x.strip()]) == 1, r.stderr


@pytest.mark.parametrize("what", ["file", "devnull", "parent-file"])
def test_the_cli_run_on_an_out_with_a_newline_is_one_line(tmp_path, what):
    from test_hostile_files import _cli

    out = "o\nut" if what != "parent-file" else "o\nut/below"
    _make(tmp_path / "o\nut", "file" if what == "parent-file" else what)
    with within(60):
        r = _cli(["run", "tf-lambda-head", "--quick", "--out", out], tmp_path)
    assert r.exit_code == 2, r.output
    assert len([x for x in r.stderr.splitlines() if x.strip()]) == 1, r.stderr


# ================================================================== (d) the pool's task ends
class Stop(BaseException):
    """A BaseException of the task's own."""


class EndsConfig(PoolToyConfig):
    runs: int = 4       # two tasks: seeds-000 and seeds-002
    end: str = "table"


def _ends(end, seeds):
    if end == "none":
        return None
    if end == "dict":
        return {"seed": seeds, "value": [1.0] * len(seeds)}
    if end == "list":
        return [{"seed": s, "value": 1.0} for s in seeds]
    if end == "int":
        return 3
    if end == "series":
        return pd.Series([1.0] * len(seeds))
    if end == "mixed-objects":
        return pd.DataFrame({"seed": seeds, "value": [1, "a"][:len(seeds)]})
    if end == "duplicate-columns":
        return pd.DataFrame([[s, 1.0, 2.0] for s in seeds], columns=["seed", "value", "value"])
    if end == "string-value":     # a column the other tasks hold as floats
        return pd.DataFrame({"seed": seeds, "value": ["text"] * len(seeds)})
    if end == "huge-string":
        return pd.DataFrame({"seed": seeds, "value": [1.0] * len(seeds), "blob": ["z" * 2_000_000] * len(seeds)})
    if end == "generator-exit":
        raise GeneratorExit("closed")
    if end == "own-baseexception":
        raise Stop("stop here")
    if end == "stderr-then-raise":
        for _ in range(2000):
            print("noise " * 50, file=sys.stderr)
        raise RuntimeError("after noise")
    if end == "bytes-column":
        return pd.DataFrame({"seed": seeds, "value": [b"\xff\x00"] * len(seeds)})
    if end == "nested-lists":
        return pd.DataFrame({"seed": seeds, "value": [[1, [2]]] * len(seeds)})
    raise AssertionError(end)


ENDS = ["none", "dict", "list", "int", "series", "mixed-objects", "duplicate-columns", "string-value", "huge-string",
        "generator-exit", "own-baseexception", "stderr-then-raise", "bytes-column", "nested-lists"]


def _end_class(end):
    class EndsToy(PoolToy):
        name = f"ends-{end}"
        title = f"ends {end}"
        Config = EndsConfig

        def run_task(self, config, task):
            if 2 in task.params["seeds"]:
                return _ends(config.end, task.params["seeds"])
            return super().run_task(config, task)

    EndsToy.__name__ = EndsToy.__qualname__ = f"EndsToy_{end.replace('-', '_')}"
    return EndsToy


for _end in ENDS:
    globals()[f"EndsToy_{_end.replace('-', '_')}"] = _end_class(_end)

#: ends that are valid tables: stored, the run ok (a huge string is data)
STORABLE = {"huge-string"}
#: ends whose table stores alone but cannot join the other task's
JOIN_FAILS = {"string-value", "bytes-column"}


#: the ends also run on the pool (each experiment there costs seconds on a loaded machine): those whose way
#: back differs from one process (a BaseException in a worker, a table pickled back, output on stderr)
POOL_ENDS = ["none", "mixed-objects", "string-value", "generator-exit", "own-baseexception", "stderr-then-raise"]


def _run_ends(out, ends, workers):
    jobs = [(globals()[f"EndsToy_{end.replace('-', '_')}"](), EndsConfig(end=end)) for end in ends]
    with within(240):
        summaries = run_experiments(jobs, str(out), workers=workers, progress=False)
    return out, {s.name: s for s in summaries}


@pytest.fixture(scope="module")
def ended_one(tmp_path_factory):
    return _run_ends(tmp_path_factory.mktemp("ends1"), ENDS, 1)


@pytest.fixture(scope="module")
def ended_pool(tmp_path_factory):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("a pool needs 2 CPUs")
    return _run_ends(tmp_path_factory.mktemp("ends2"), POOL_ENDS, 2)


def _ended_badly(ended, end):
    out, summaries = ended
    s = summaries[f"ends-{end}"]
    if end in STORABLE:
        assert s.ok and not s.failed and s.computed == 2
        return
    assert [f["key"] for f in s.failed] == ["seeds-002"], s.failed
    assert not s.ok and "Traceback" not in s.failed[0]["error"]
    # a table that stores alone but not with the others' (text where they hold numbers) was computed, then failed
    assert s.computed == (2 if end in JOIN_FAILS else 1), (s.computed, s.failed)
    table = pd.read_parquet(out / f"ends-{end}" / "results.parquet")
    assert sorted(table["seed"]) == [0, 1]
    failures = json.load(open(out / f"ends-{end}" / "failures.json"))
    assert [f["key"] for f in failures] == ["seeds-002"]


@pytest.mark.parametrize("end", ENDS)
def test_a_task_that_ends_badly_is_its_own_failure_in_one_process(ended_one, end):
    _ended_badly(ended_one, end)


@pytest.mark.parametrize("end", POOL_ENDS)
def test_a_task_that_ends_badly_is_its_own_failure_on_the_pool(ended_pool, end):
    _ended_badly(ended_pool, end)


def test_a_worker_that_calls_os_exit_is_that_tasks_failure(tmp_path):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("a pool needs 2 CPUs")
    toy = RunnerToy()
    with within(120):
        (s,) = run_experiments([(toy, toy.Config(die_seed=2))], str(tmp_path), workers=2, progress=False)
    assert [f["key"] for f in s.failed] == ["seeds-002"] and s.computed == 2 and not s.ok


def test_the_cli_exits_1_when_a_task_ends_badly(tmp_path):
    from test_hostile_runner import _python, _script

    script = _script(tmp_path, "ends.py", f"""
        from test_hostile_round2 import EndsToy_none, EndsToy_own_baseexception

        register(EndsToy_none)
        register(EndsToy_own_baseexception)
        if __name__ == "__main__":
            from attnsvm.cli import main
            main(["reproduce", "--out", {str(tmp_path / 'out')!r}, "--only", "ends-none", "--only",
                  "ends-own-baseexception"])
        """)
    r = _python(script, timeout=200)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("FAILED task seeds-002") == 2, r.stderr


@pytest.mark.parametrize("what", ["fifo", "dangling", "devnull", "folder"])
@pytest.mark.parametrize("name", ["report.html", "report.md", "skipped.sha256"])
def test_a_report_output_that_is_special_is_replaced_or_refused(tmp_path, name, what):
    out = tmp_path / "out"
    _folder(out)
    if name == "skipped.sha256":
        (out / "skipped.json").write_text("[]")
    _make(out / name, what)
    before = _outside(tmp_path, out)
    try:
        page, md = _write_report(out)
    except ValidationError as exc:
        assert "\n" not in str(exc) and name in str(exc)
    else:
        if name == "skipped.sha256":       # the seal cannot be read: a warning, never a green banner
            assert "All checks pass" not in md.splitlines()[2] and "warning" in md.splitlines()[2]
        else:
            assert (out / name).is_file() and not (out / name).is_symlink()
    assert _outside(tmp_path, out) == before and not os.path.exists(str(out / name) + ".nowhere")
