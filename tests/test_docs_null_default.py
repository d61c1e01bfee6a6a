"""The docs and docstrings name the verdict's default null as it is, the sink null (issue 42, docs): the probe
guide's opening example printed "vs spectrum nulls", ``probe_heads``' docstring called ``null_draws`` "spectrum
null heads per head", and :func:`attnsvm.real.nulls.verdict_null_kinds` said its first kind (spectrum) is the
default, all from before the sink null became the default (:class:`attnsvm.real.probe_config.ProbeConfig`)."""

from __future__ import annotations

import pathlib
import re

import pandas as pd

from attnsvm.real.nulls import verdict_null_kinds
from attnsvm.real.probe_config import ProbeConfig
from attnsvm.real.verdict import verdict_summary

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT = ProbeConfig().null_kind


def _summary_shape(line: str) -> str:
    """A summary line with its numbers replaced by N (the words are the format)."""
    return re.sub(r"-?\d+(\.\d+)?", "N", line)


def test_the_default_null_is_the_sink_null():
    assert DEFAULT == "sink"  # the statements below are about this default


def test_probe_guide_opening_example_prints_what_the_default_probe_prints():
    guide = (ROOT / "docs" / "guide" / "probe.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n\$ attnsvm probe (.*?)\n```", guide, flags=re.S)
    assert block, "the probe guide opens with an example run"
    command, _, output = block.group(1).partition("\n")
    assert "--null-kind" not in command  # the default's run
    lines = [s for s in output.splitlines() if re.match(r"(layer \d+|all layers): ", s)]
    assert lines, output
    # verdict_summary's words for a default (sink) table with spectrum nulls beside it
    table = pd.DataFrame({"layer": [3], "head": [0], "verdict": ["beyond null"], "corr_restricted": [0.15],
                          "null_mean": [0.1], "null_kind": [DEFAULT], "spectrum_mean": [0.08],
                          "corr_random_restricted": [0.01], "advantage": [0.14]})
    expected = {_summary_shape(s.split(": ", 1)[1]) for s in verdict_summary(table).splitlines()}
    for line in lines:
        assert _summary_shape(line.split(": ", 1)[1]) in expected, line
        assert f"vs {DEFAULT} nulls" in line, line


def test_docstrings_name_the_null_of_the_verdicts_kind():
    from attnsvm.real import nulls, probe, verdict

    doc = probe.probe_heads.__doc__
    entry = re.search(r"\n    null_draws : (.*?)\n    \w+ :", doc, flags=re.S).group(1)
    assert "null_kind" in entry and "sink" in entry and "spectrum null heads per head" not in entry, entry
    step = re.search(r"5\. \*\*Verdict\.\*\*(.*?)\n6\.", probe.__doc__, flags=re.S).group(1)
    assert "null_kind" in step and "sink" in step, step
    assert "spectrum null" not in verdict.stop_reason.__doc__.splitlines()[0]
    # "the first is the default" only where the first verdict kind is the default
    assert verdict_null_kinds()[0] != DEFAULT
    assert "first is the default" not in nulls.verdict_null_kinds.__doc__
    assert "the one the verdict uses" not in nulls.__doc__
