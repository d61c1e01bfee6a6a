"""`attnsvm probe --curve`: the agreement per number of sentences, printed, stored and drawn, and one
implementation with the main probe (the row at m = --svm-sentences is the probe's own row)."""

import json
import os

import pytest

pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from attnsvm.cli import cli  # noqa: E402


def test_curve_rows_files_and_consistency(tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["probe", "--layers", "5", "--heads", "0,3", "--n-sentences", "20", "--svm-sentences",
                                 "8", "--curve", "8,all", "--out", str(out), "--view-sentences", "1"])
    assert r.exit_code == 0, r.output
    assert "agreement with the SVM by the number of sentences m" in r.output
    for f in ("probe_agreement.csv", "probe_agreement.png", "probe_agreement.pdf"):
        assert os.path.getsize(out / f) > 0
    payload = json.loads((out / "probe.json").read_text())
    rows = payload["agreement"]
    assert sorted({row["m"] for row in rows}) == [8, 20]
    assert len(rows) == 2 * 2
    main = {(h["layer"], h["head"]): h for h in payload["heads"]}
    for row in rows:
        if row["m"] == 8:  # the same selections, baselines and solver as the main probe at --svm-sentences 8
            assert row["corr_restricted"] == pytest.approx(main[(row["layer"], row["head"])]["corr_restricted"], abs=1e-12)


@pytest.mark.parametrize("value", ["x", "8,,y", "1.5"])
def test_bad_curve_is_a_one_line_error(value):
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--layers", "5", "--heads", "0", "--n-sentences", "4", "--curve", value])
    assert r.exit_code == 2 and "--curve expects comma-separated integers or 'all'" in r.output


def test_curve_larger_than_the_sentences_names_sizes():
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--layers", "5", "--heads", "0", "--n-sentences", "6",
                                 "--svm-sentences", "4", "--curve", "4,50"])
    assert r.exit_code == 2 and "sizes" in r.output and "50" in r.output
