"""Hostile files: every unreadable input ends in a one-line error naming the file, never a traceback.

Problem files (``TokenProblem.load/save``), selection files (``attnsvm solve --select``),
sentence files (``attnsvm probe --sentences``), config files and output paths. Sizes
declared by a file are checked against the package's memory limit before anything is
decompressed, so a zip bomb never needs a big file here: a small archive whose member
declares a large array, checked against a small ``ATTNSVM_MAX_MEMORY``, proves the same.
"""

import errno
import io
import os
import struct
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from attnsvm import npzfile as problem_module
from attnsvm import TokenProblem
from attnsvm.cli import cli
from attnsvm.errors import ProblemFileError, ResourceLimitError, ValidationError
from attnsvm.memory import ENV_VAR
from attnsvm.cli.probe import read_sentences
from attnsvm.cli.solve import read_selection_file as read_selection


def npy_header(shape, descr="<f8") -> bytes:
    """A version 1.0 ``.npy`` header declaring ``shape`` (no data)."""
    text = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    text += " " * ((64 - (10 + len(text) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def npy_bytes(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def tagged_zip(path, members: dict, compression=zipfile.ZIP_STORED, tag=True):
    """An .npz with attnsvm's format tag (unless ``tag`` is false) and ``members`` (name -> raw .npy bytes)."""
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        if tag:
            z.writestr("format.npy", npy_bytes(np.array("attnsvm.TokenProblem")))
            z.writestr("version.npy", npy_bytes(np.array(1)))
        for name, raw in members.items():
            z.writestr(name, raw)
    return path


@pytest.fixture
def good(tmp_path):
    p = TokenProblem(np.random.default_rng(0).normal(size=(2, 3, 4)), np.ones((2, 4)), Y=[1, -1], v=np.ones(4))
    path = tmp_path / "good.npz"
    p.save(path)
    return p, path


def one_line(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------ problem files
def test_npy_renamed_to_npz(tmp_path):
    path = tmp_path / "x.npz"
    path.write_bytes(npy_bytes(np.zeros((2, 3, 4))))
    with pytest.raises(ProblemFileError, match="is a bare .npy array, expected an .npz archive") as info:
        TokenProblem.load(path)
    assert str(path) in one_line(info)


def test_npz_declaring_1e12_elements_is_refused_without_allocating(tmp_path):
    path = tagged_zip(tmp_path / "huge.npz", {"X.npy": npy_header((10**4, 10**4, 10**4)) + b"\0" * 64})
    with pytest.raises(ProblemFileError, match=r"declares the shape \(10000, 10000, 10000\)") as info:
        TokenProblem.load(path)
    assert "huge.npz" in one_line(info)


def test_integer_overflow_in_a_shape(tmp_path):
    path = tagged_zip(tmp_path / "over.npz", {"X.npy": npy_header((2**62, 2**62, 4)) + b"\0" * 64})
    with pytest.raises(ProblemFileError, match="overflows 64-bit integers"):
        TokenProblem.load(path)
    neg = tagged_zip(tmp_path / "neg.npz", {"X.npy": npy_header((-3, 4, 2)) + b"\0" * 64})
    with pytest.raises(ProblemFileError, match="negative dimension"):
        TokenProblem.load(neg)


def test_zip_bomb_is_refused_by_the_memory_limit_before_decompressing(tmp_path, monkeypatch):
    # 8 MiB of zeros compresses to a few KiB; the limit is 1 MiB
    X = npy_bytes(np.zeros((1, 2, 2**19)))
    path = tagged_zip(tmp_path / "bomb.npz", {"X.npy": X}, compression=zipfile.ZIP_DEFLATED)
    assert os.path.getsize(path) < 64 * 1024
    read = []
    real = problem_module.read_npz_arrays
    monkeypatch.setattr(problem_module, "read_npz_arrays",
                        lambda p, names, label="": (read.extend(names), real(p, names, label))[1])
    monkeypatch.setenv(ENV_VAR, "1M")
    with pytest.raises(ResourceLimitError, match=r"reading .*bomb\.npz.*X \(1, 2, 524288\).*more than the memory limit") as info:
        TokenProblem.load(path)
    one_line(info)
    assert "X" not in read  # refused before decompressing X
    # with room enough (2 x 8 MiB: the array and the problem's own copy) the same file loads
    monkeypatch.setenv(ENV_VAR, "64M")
    assert TokenProblem.load(path).shape == (1, 2, 2**19)


def test_untagged_bomb_is_refused_before_its_big_member_is_read(tmp_path, monkeypatch):
    path = tagged_zip(tmp_path / "untagged.npz", {"X.npy": npy_bytes(np.zeros((1, 2, 2**19)))},
                      compression=zipfile.ZIP_DEFLATED, tag=False)
    read = []
    real = problem_module.read_npz_arrays
    monkeypatch.setattr(problem_module, "read_npz_arrays",
                        lambda p, names, label="": (read.extend(names), real(p, names, label))[1])
    with pytest.raises(ProblemFileError, match="not an attnsvm problem file"):
        TokenProblem.load(path)
    assert read == []


@pytest.mark.parametrize("members, match", [
    ({"X.npy": npy_bytes(np.zeros((2, 3, 4)))[:-40]}, "truncated or corrupt"),
    ({"X.npy": b"\x93NUMPY\x09\x00garbage"}, "corrupt, truncated or not a NumPy array"),
    ({"X.npy": npy_header((2, 3, 4), descr="|O") + b"\0" * 200}, "unpickling"),
    ({"notes.txt": b"hello"}, "not a .npy array member"),
])
def test_malformed_members(tmp_path, members, match):
    path = tagged_zip(tmp_path / "bad.npz", members)
    with pytest.raises(ProblemFileError, match=match) as info:
        TokenProblem.load(path)
    assert "bad.npz" in one_line(info)


def test_corrupt_compressed_member(tmp_path, good):
    _, path = good
    X = npy_bytes(np.random.default_rng(1).normal(size=(2, 3, 4)))
    bad = tagged_zip(tmp_path / "deflated.npz", {"X.npy": X}, compression=zipfile.ZIP_DEFLATED)
    raw = bytearray(bad.read_bytes())
    start = raw.index(b"X.npy") + len("X.npy") + 20  # inside X's compressed payload
    for k in range(start, start + 40):
        raw[k] ^= 0x5A
    bad.write_bytes(bytes(raw))
    with pytest.raises(ProblemFileError) as info:
        TokenProblem.load(bad)
    one_line(info)


@pytest.mark.parametrize("bad, match", [
    ("", "empty path"), ("a\0b", "NUL"), (5, "expected a file path"),
])
def test_bad_path_values(bad, match):
    with pytest.raises(ProblemFileError, match=match):
        TokenProblem.load(bad)


def test_paths_through_a_regular_file_and_folders(tmp_path, good):
    p, path = good
    with pytest.raises(ProblemFileError, match=r"good\.npz' is a file, not a folder"):
        TokenProblem.load(path / "inner.npz")
    with pytest.raises(ProblemFileError, match=r"cannot write problem file .*good\.npz' is a file, not a folder"):
        p.save(path / "inner.npz")
    with pytest.raises(ProblemFileError, match="is a directory"):
        TokenProblem.load(tmp_path)
    with pytest.raises(ProblemFileError, match="cannot write problem file"):
        p.save(tmp_path)
    with pytest.raises(ProblemFileError, match="expected a file path"):
        p.save("")


def test_save_on_a_full_disk_keeps_the_old_file(tmp_path, good, monkeypatch):
    p, path = good
    before = path.read_bytes()
    other = TokenProblem(np.ones((1, 2, 3)))

    def savez_full(fh, **arrays):
        fh.write(b"PK\x03\x04 half an archive")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(problem_module.np, "savez", savez_full)
    with pytest.raises(ProblemFileError, match="No space left on device") as info:
        other.save(path)
    assert "good.npz" in one_line(info)
    monkeypatch.undo()
    assert path.read_bytes() == before and TokenProblem.load(path) == p
    assert [f for f in os.listdir(tmp_path) if ".tmp-" in f] == []


def test_round_trip_still_exact(tmp_path, good):
    p, path = good
    q = TokenProblem.load(path)
    assert q == p and q.X.dtype == np.float64


# ---------------------------------------------------------- selection files
def test_selection_format_is_told_by_content_not_name(tmp_path):
    sel = np.array([0, 2, 1])
    (tmp_path / "a.npz").write_bytes(npy_bytes(sel))  # an .npy named .npz
    np.testing.assert_array_equal(read_selection(str(tmp_path / "a.npz")), sel)
    np.savez(tmp_path / "b.npz", select=sel)
    os.replace(tmp_path / "b.npz", tmp_path / "b.npy")  # an .npz named .npy
    np.testing.assert_array_equal(read_selection(str(tmp_path / "b.npy")), sel)
    (tmp_path / "c.txt").write_text("0, 2\n1\n")
    np.testing.assert_array_equal(read_selection(str(tmp_path / "c.txt")), sel)


@pytest.mark.parametrize("name, content, match", [
    ("empty.npy", b"", "not a NumPy .npy/.npz file"),
    ("latin1.txt", "0 1 \u00e9".encode("latin1"), r"is not UTF-8 text \(byte 0xe9 at offset 4\)"),
    ("utf16.txt", "0 1".encode("utf-16"), "is not UTF-8 text"),
    ("float.txt", b"0 1.5", "holds '1.5', expected integers"),
    ("big.txt", b"0 99999999999999999999999", "outside the 64-bit range"),
    ("huge.npy", npy_header((10**12,)) + b"\0" * 64, r"declares the shape \(1000000000000,\)"),
    ("over.npy", npy_header((2**40, 2**40)) + b"\0" * 64, "overflows 64-bit integers"),
    ("obj.npy", npy_header((3,), descr="|O") + b"\0" * 64, "unpickling"),
])
def test_bad_selection_files(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValidationError, match=match) as info:
        read_selection(str(path))
    msg = one_line(info)
    assert msg.startswith("--select: ") and name in msg


def test_selection_paths_and_limits(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("0 1")
    with pytest.raises(ValidationError, match=r"--select: no such file: .*\('.*file' is a file, not a folder\)"):
        read_selection(str(tmp_path / "file" / "s.txt"))
    with pytest.raises(ValidationError, match="--select: .* is a directory"):
        read_selection(str(tmp_path))
    np.savez_compressed(tmp_path / "bomb.npz", select=np.zeros(2**20, dtype=np.int64))
    (tmp_path / "long.txt").write_text("0 " * 100000)
    monkeypatch.setenv(ENV_VAR, "1M")
    with pytest.raises(ResourceLimitError, match=r"--select: reading .*bomb\.npz.*more than the memory limit"):
        read_selection(str(tmp_path / "bomb.npz"))
    with pytest.raises(ResourceLimitError, match=r"--select: reading .*long\.txt"):
        read_selection(str(tmp_path / "long.txt"))


# ----------------------------------------------------------- sentence files
def test_sentence_files(tmp_path):
    ok = tmp_path / "s.txt"
    ok.write_text("Erste Zeile mit \u00fc.\n  Second.  \n", encoding="utf-8")
    assert read_sentences(str(ok)) == ["Erste Zeile mit \u00fc.", "Second."]
    # blank lines at the very end (one newline or several, CRLF too) are accepted; no final newline either
    for tail in ("\n\n\n", "\r\n\r\n", " \n\t\n", ""):
        (tmp_path / "end.txt").write_text("One.\nTwo." + tail, encoding="utf-8", newline="")
        assert read_sentences(str(tmp_path / "end.txt")) == ["One.", "Two."], repr(tail)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Zeile mit \u00fc\n".encode("latin1"))
    with pytest.raises(ValidationError, match=r"--sentences: .*latin1\.txt' is not UTF-8 text \(byte 0xfc"):
        read_sentences(str(bad))
    with pytest.raises(ValidationError, match="no such sentences file"):
        read_sentences(str(tmp_path / "missing.txt"))
    with pytest.raises(ValidationError, match="is a file, not a folder"):
        read_sentences(str(ok / "x.txt"))
    with pytest.raises(ValidationError, match="is a directory"):
        read_sentences(str(tmp_path))
    (tmp_path / "blank.txt").write_text("\n   \n")
    with pytest.raises(ValidationError, match="holds no non-empty line"):
        read_sentences(str(tmp_path / "blank.txt"))


@pytest.mark.parametrize("content, match", [
    (b"", r"empty\.txt' is empty \(0 bytes\); expected one sentence per line"),
    (b"\n \n\t\n", r"holds no non-empty line; expected one sentence per line"),
    # the line's number in the file
    (b"first.\nsecond.\n" + b"w" * 100_001 + b"\n", r"line 3 of .* has 100001 characters; a sentence may have at most"),
    # a blank line before a sentence (line i would no longer be sentence i): the first blank one is named
    (b"first.\n\n\nsecond.\n", r"line 2 of .* is blank, before the sentence on line 4; expected one sentence per line"),
    (b"first.\n  \t \nsecond.\n", r"line 2 of .* is blank, before the sentence on line 3"),
    (b"\nfirst.\n", r"line 1 of .* is blank, before the sentence on line 2"),
    (b"first.\r\n\r\nsecond.\r\n", r"line 2 of .* is blank, before the sentence on line 3"),
    # zero-width and control characters only: the tokenizer drops them, an empty sentence
    ("one.\n\u200b\u2060\x07\n".encode(), r"line 2 of .* has no visible character"),
])
def test_sentence_file_errors_name_the_line(tmp_path, content, match):
    """--sentences refuses an empty file, a file of blank lines, a blank line before a sentence, an over-long line
    and a line that only looks non-empty, naming the line by its number in the file (issue 42): one line, exit 2,
    before any model loads."""
    f = tmp_path / "empty.txt"
    f.write_bytes(content)
    with pytest.raises(ValidationError, match=match):
        read_sentences(str(f))
    r = _cli(["probe", "--no-store", "--sentences", str(f)], tmp_path)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("attnsvm: error: --sentences: "), r.stderr


@pytest.mark.parametrize("value", ["0", "-3"])
def test_n_sentences_below_one_names_the_option(tmp_path, value):
    r = _cli(["probe", "--no-store", "--n-sentences", value], tmp_path)
    assert r.exit_code == 2 and r.stderr.strip() == \
        f"attnsvm: error: --n-sentences: Input should be greater than 0, got {value}", r.stderr


# --------------------------------------------------------------------- CLI
def _cli(args, cwd):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, args, catch_exceptions=False)
    finally:
        os.chdir(old)


@pytest.mark.parametrize("args, match", [
    (["info", "npy_as.npz"], "is a bare .npy array"),
    (["info", "regular/p.npz"], "is a file, not a folder"),
    (["solve", "good.npz", "--select", "latin1.txt"], "--select: 'latin1.txt' is not UTF-8 text"),
    (["solve", "good.npz", "--select", "regular/s.npy"], "--select: no such file"),
    (["generate", "rd", "--n", "2", "--T", "3", "--d", "2", "-o", "regular/p.npz"], "is a file, not a folder"),
    (["run", "tf-lambda-head", "--quick", "--out", ""], "--out must name a folder"),
    (["run", "tf-lambda-head", "--quick", "--out", "regular/out"], "is a file, not a folder"),
    (["run", "tf-lambda-head", "--quick", "--config", "bad.yaml", "--out", "o"], "--config: config file 'bad.yaml' is not UTF-8"),
    (["run", "tf-lambda-head", "--quick", "--set", "runs=1000000000000", "--out", "o"], "more than the memory limit"),
    (["run", "tf-lambda-head", "--quick", "--max-memory", "lots", "--out", "o"], "--max-memory must be a size"),
    (["report", ""], "--out must name a folder"),
])
def test_cli_file_errors_are_one_line(tmp_path, good, args, match):
    p, _ = good
    (tmp_path / "npy_as.npz").write_bytes(npy_bytes(np.zeros((2, 3, 4))))
    (tmp_path / "regular").write_text("x")
    (tmp_path / "latin1.txt").write_bytes("0 1 \u00e9".encode("latin1"))
    (tmp_path / "bad.yaml").write_bytes(b"\xff\xferuns: 3\n")
    r = _cli(args, tmp_path)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnsvm: error: ") and match in lines[0], r.stderr
    assert not (tmp_path / "o").exists()  # refused before writing anything


def test_read_config_file_non_utf8_is_a_validation_error_for_api_callers(tmp_path):
    from attnsvm.experiments import read_config_file

    bad = tmp_path / "bad.yaml"
    bad.write_bytes("runs: 3 # \u00e9".encode("latin1"))
    with pytest.raises(ValidationError, match=r"bad\.yaml' is not UTF-8 text \(byte 0xe9 at offset 10\)"):
        read_config_file(bad)
