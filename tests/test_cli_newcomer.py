"""The CLI's wording a newcomer meets (issue 42): a wrong option named, a solution file read by ``info``,
a CSV given to ``info`` said to be one, and no ``-0.0`` in JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from attnsvm import TokenProblem
from attnsvm.cli import cli
from attnsvm.generators import GENERATORS


def test_n_sentences_zero_names_the_option(tmp_path):
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--n-sentences", "0"])
    assert r.exit_code == 2
    assert "--n-sentences" in r.output and "n must be an integer" not in r.output


def test_prepare_probe_names_n_sentences():
    from attnsvm.errors import ValidationError
    from attnsvm.real.probe_steps import prepare_probe

    with pytest.raises(ValidationError, match="n_sentences"):
        prepare_probe(None, n_sentences=0)


@pytest.fixture
def problem_file(tmp_path):
    path = tmp_path / "p.npz"
    GENERATORS["tf-vis1"][0]().save(path)
    return path


def test_info_reads_what_solve_writes(tmp_path, problem_file):
    sol = tmp_path / "s.npz"
    r = CliRunner().invoke(cli, ["solve", str(problem_file), "-o", str(sol)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["info", str(sol)])
    assert r.exit_code == 0, r.output
    assert "status        optimal" in r.output and "written by 'attnsvm solve -o'" in r.output
    r = CliRunner().invoke(cli, ["info", str(sol), "--json"])
    data = json.loads(r.output)
    assert data["status"] == "optimal" and data["solution_shape"] == [2, 2]
    # the problem file still reads as a problem
    r = CliRunner().invoke(cli, ["info", str(problem_file)])
    assert r.exit_code == 0 and "shape     n=2 samples" in r.output


def test_info_on_a_csv_says_what_it_is(tmp_path):
    path = tmp_path / "probe.csv"
    path.write_text("layer,head,mean_selected\n3,0,2.1\n")
    r = CliRunner().invoke(cli, ["info", str(path)])
    assert r.exit_code == 2
    assert "is a CSV table" in r.output and "info reads the .npz archives" in r.output
    assert "corrupt" not in r.output and "truncated" not in r.output


def test_solve_json_prints_no_negative_zero(problem_file):
    r = CliRunner().invoke(cli, ["solve", str(problem_file), "--json"])
    assert r.exit_code == 0, r.output
    assert "-0.0" not in r.output
    data = json.loads(r.output)

    def floats(x):
        if isinstance(x, dict):
            return [f for v in x.values() for f in floats(v)]
        if isinstance(x, list):
            return [f for v in x for f in floats(v)]
        return [x] if isinstance(x, float) else []

    assert all(not (f == 0 and np.signbit(f)) for f in floats(data))
    assert TokenProblem.load(problem_file).shape == (2, 3, 2)
