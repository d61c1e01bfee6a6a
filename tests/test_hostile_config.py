"""Config input is bounded: YAML aliases (a billion-laughs file of under 1 KB, a recursive value), deep nesting
and huge files in ``--config`` and ``--set`` are one-line errors, and ``generate`` applies the memory limit
(issue 43)."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from attnsvm.cli import cli
from attnsvm.errors import ResourceLimitError, ValidationError
from attnsvm.experiments import parse_assignments, read_config_file
from attnsvm.generators import orthonormal_problem, random_problem

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + k)}: &{chr(98 + k)} [{', '.join(['*' + chr(97 + k)] * 9)}]\n" for k in range(8)) + "ds: *i\n"


def _one_line_error(args, cwd, match):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        r = CliRunner().invoke(cli, args, catch_exceptions=False)
    finally:
        os.chdir(old)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnsvm: error: ") and match in lines[0], r.stderr
    assert not (cwd / "o").exists()


def test_the_billion_laughs_file_is_small_and_refused(tmp_path):
    assert len(LAUGHS) < 1024
    (tmp_path / "laughs.yaml").write_text(LAUGHS)
    with pytest.raises(ValidationError, match=r"laughs.yaml.*alias \*a.*not accepted"):
        read_config_file(tmp_path / "laughs.yaml")
    _one_line_error(["run", "tf-svm-rank", "--quick", "--config", "laughs.yaml", "--out", "o"], tmp_path,
                    "aliases (*name) are not accepted")


@pytest.mark.parametrize("text", ["ds: &a [*a]\n", "ds: &a {x: *a}\n", "ds: " + "[" * 5000 + "]" * 5000 + "\n",
                                  "ds: " + "[" * 40 + "1" + "]" * 40 + "\n"])
def test_recursive_or_deep_config_files_are_one_line_errors(tmp_path, text):
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ValidationError, match="not accepted|nest"):
        read_config_file(tmp_path / "c.yaml")
    _one_line_error(["run", "tf-svm-rank", "--quick", "--config", "c.yaml", "--out", "o"], tmp_path, "--config: ")


@pytest.mark.parametrize("value", ["&a [*a]", "&a [1, *a]", "[" * 5000 + "]" * 5000, "&x 3", "*.txt"])
def test_recursive_or_deep_set_values_are_one_line_errors(tmp_path, value):
    if value == "&x 3":         # an anchor without an alias is harmless YAML
        assert parse_assignments([f"runs={value}"]) == {"runs": 3}
        return
    if value == "*.txt":        # not YAML (an undefined alias): kept as the text, as before
        assert parse_assignments([f"glob={value}"]) == {"glob": "*.txt"}
        return
    with pytest.raises(ValidationError, match="--set ds: "):
        parse_assignments([f"ds={value}"])
    _one_line_error(["run", "tf-svm-rank", "--quick", "--set", f"ds={value}", "--out", "o"], tmp_path, "--set ds: ")


def test_config_files_over_the_size_limit_and_special_files_are_refused(tmp_path):
    (tmp_path / "big.yaml").write_text("runs: 3\n" + "# padding\n" * 200_000)
    with pytest.raises(ValidationError, match="big.yaml.*more than the 1048576 read"):
        read_config_file(tmp_path / "big.yaml")
    os.mkfifo(tmp_path / "fifo.yaml")
    with pytest.raises(ValidationError, match="fifo.yaml.*it is a fifo"):
        read_config_file(tmp_path / "fifo.yaml")
    assert read_config_file(_write(tmp_path / "ok.yaml", "runs: 3\nds: [1, 2]\n")) == {"runs": 3, "ds": [1, 2]}


def _write(path, text):
    path.write_text(text)
    return path


def test_generate_applies_the_memory_limit(tmp_path):
    with pytest.raises(ResourceLimitError, match="more than the memory limit"):
        random_problem(10**12, 8, 10)
    with pytest.raises(ResourceLimitError, match="more than the memory limit 1.0 MiB"):
        orthonormal_problem(1000, 8, 100, max_memory="1M")
    assert random_problem(2, 3, 4, max_memory="1M").n == 2
    _one_line_error(["generate", "rd", "--n", "1000000000000", "--T", "8", "--d", "10", "-o", "o"], tmp_path,
                    "more than the memory limit")
    _one_line_error(["generate", "rd", "--n", "100000", "--T", "8", "--d", "10", "--max-memory", "10M", "-o", "o"],
                    tmp_path, "more than the memory limit 10.0 MiB")
