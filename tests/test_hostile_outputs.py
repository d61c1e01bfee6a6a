"""Inputs and outputs checked like the main ones (issue 43): a negative token index in ``--select`` is refused
with the range every other bad index gets; the probe's figures and page that are a fifo, a device or a link to
one get the one-line error of its tables, before any work."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from test_hostile_files import _cli

from attnsvm.generators import random_problem


def _one_line(r) -> str:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("attnsvm: error: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("index", [-1, -4, -9, 4])
@pytest.mark.parametrize("fmt", ["txt", "npy"])
def test_select_refuses_negative_token_indices_like_any_outside_the_range(tmp_path, index, fmt):
    random_problem(3, 4, 5).save(str(tmp_path / "p.npz"))
    sel = np.array([0, 1, index], dtype=np.int64)
    if fmt == "txt":
        (tmp_path / "s.txt").write_text(" ".join(map(str, sel)))
    else:
        np.save(tmp_path / "s.npy", sel)
    line = _one_line(_cli(["solve", "p.npz", "--select", f"s.{fmt}"], tmp_path))
    assert f"select holds token index {index}, outside [0, 4)" in line


def _fifo(path):
    os.mkfifo(path)


def _link_to_dev_full(path):
    os.symlink("/dev/full", path)


def _folder(path):
    os.mkdir(path)


@pytest.mark.parametrize("make, what", [(_fifo, "a fifo (named pipe)"), (_link_to_dev_full, "a character device"),
                                        (_folder, "a directory")])
@pytest.mark.parametrize("name", ["probe_heatmap.png", "probe_heatmap.pdf", "probe.html", "probe.csv"])
def test_probe_outputs_that_are_special_files_are_refused_before_any_work(tmp_path, make, what, name):
    out = tmp_path / "out"
    out.mkdir()
    make(out / name)
    line = _one_line(_cli(["probe", "--out", "out", "--layers", "0", "--heads", "0"], tmp_path))
    assert f"'out/{name}' is {what}, not a regular file" in line and line.startswith("attnsvm: error: --out: ")
    assert sorted(os.listdir(out)) == [name]


def test_a_figure_path_taken_after_the_check_is_one_line_not_a_traceback(tmp_path):
    from attnsvm.cli.probe import _figure
    from attnsvm.real.figures import heatmap_figure
    from attnsvm.runner import StorageError

    os.mkfifo(tmp_path / "probe_heatmap.png")
    table = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "corr_restricted": [0.5, 0.2]})
    with pytest.raises(StorageError, match="probe_heatmap.png: it is a fifo") as exc:
        _figure(lambda: heatmap_figure(table, str(tmp_path)), str(tmp_path / "probe_heatmap"))
    assert "\n" not in str(exc.value)
