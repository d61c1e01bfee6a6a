"""`attnsvm probe --curve` (deprecated) was removed in 0.3: a one-line usage error naming its replacement,
`--svm-sentences` with several values, which gives the rows per m."""

import pytest

pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from attnsvm.cli import cli  # noqa: E402
from attnsvm.cli.probe import run_probe  # noqa: E402


@pytest.mark.parametrize("value", ["8,all", "x", "48,128,512"])
def test_curve_is_removed_with_a_one_line_error_naming_svm_sentences(value):
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--layers", "5", "--heads", "0",
                                 "--n-sentences", "4", "--curve", value])
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--curve was removed in 0.3" in lines[0] and "--svm-sentences" in lines[0], r.stderr
    assert "--curve" not in CliRunner().invoke(cli, ["probe", "--help"]).output


def test_run_probe_has_no_curve():
    import inspect

    assert "curve" not in inspect.signature(run_probe).parameters


def test_the_replacement_gives_a_row_per_head_and_m():
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--json", "--layers", "5", "--heads", "0",
                                 "--n-sentences", "6", "--svm-sentences", "4,6", "--null-draws", "0"])
    assert r.exit_code == 0, r.output
    import json

    rows = json.loads(r.stdout[r.stdout.index("{"):])["heads"]
    assert sorted(row["m"] for row in rows) == [4, 6]
