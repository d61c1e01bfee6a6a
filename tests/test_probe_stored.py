"""The probe as resumable runner tasks (one per head, ``attnsvm probe --out``): same rows as one
in-process call, per-head random baselines, resume after a kill, Dask workers, the report section."""

import json
import os

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from attnsvm.cli import cli  # noqa: E402
from attnsvm.cli.probe import run_probe  # noqa: E402
from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.experiments.real.probe_run import ProbeRun  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_config import ProbeConfig  # noqa: E402
from attnsvm.real.probe_steps import baseline_rng  # noqa: E402
from attnsvm.real.probe_tasks import combine  # noqa: E402
from attnsvm.report import write_report  # noqa: E402
from attnsvm.runner import RunInterrupted, run_experiment  # noqa: E402

ARGS = dict(n_sentences=10, layers=[2], heads=[0, 3], svm_sentences=5, seed=1)
TIMES = ("svm_seconds", "random_seconds", "null_seconds")
#: Benjamini-Yekutieli over the probed heads: the only columns that depend on which heads are probed together
BY_SET = ("q_upper", "q_lower", "verdict", "verdict_reason")


def _rows(table):
    return table.drop(columns=[c for c in TIMES if c in table.columns]).sort_values(["layer", "head"],
                                                                                  ignore_index=True)


@pytest.fixture(scope="module")
def reference():
    return probe_heads(**ARGS)


def test_a_heads_row_does_not_depend_on_the_other_heads(reference):
    alone = probe_heads(**dict(ARGS, heads=[3]))
    assert alone.table["n_null"].iloc[0] >= 7  # its null heads too (p-values, null mean) are its own
    pd.testing.assert_frame_equal(_rows(alone.table).drop(columns=list(BY_SET)),
                                  _rows(reference.table).iloc[[1]].reset_index(drop=True).drop(columns=list(BY_SET)))
    # the baselines come from the head's own generator
    a, b = baseline_rng(1, 2, 3).random(4), baseline_rng(1, 2, 0).random(4)
    assert not np.allclose(a, b) and np.allclose(a, baseline_rng(1, 2, 3).random(4))


def test_stored_probe_equals_the_in_process_probe(tmp_path, reference):
    text = run_probe(ARGS["layers"], ARGS["heads"], None, ARGS["n_sentences"], str(tmp_path),
                     svm_sentences=ARGS["svm_sentences"], seed=ARGS["seed"], as_json=True)
    payload = json.loads(text)
    assert payload["stored"]["computed"] == 4 and payload["stored"]["resumed"] == 0  # 2 heads, 2 null tasks
    table = pd.read_csv(tmp_path / "probe.csv")
    ref = _rows(reference.table)
    got = _rows(table)[ref.columns]
    pd.testing.assert_frame_equal(got, ref, check_dtype=False, rtol=1e-12)
    shards = sorted(os.listdir(tmp_path / "probe" / "shards" / os.listdir(tmp_path / "probe" / "shards")[0]))
    assert shards == ["L2-H0-null.parquet", "L2-H0.parquet", "L2-H3-null.parquet", "L2-H3.parquet"]
    # the page shows each head's support tokens from the stored shards
    html = (tmp_path / "probe.html").read_text()
    n_sup = int(reference.table.loc[reference.table["head"] == 3, "svm_support"].iloc[0])
    assert f"{n_sup} on 5 sentences" in html
    # the same command again: everything resumed, same table
    again = json.loads(run_probe(ARGS["layers"], ARGS["heads"], None, ARGS["n_sentences"], str(tmp_path),
                                 svm_sentences=ARGS["svm_sentences"], seed=ARGS["seed"], as_json=True))
    assert again["stored"]["computed"] == 0 and again["stored"]["resumed"] == 4
    assert again["heads"] == payload["heads"] or all(
        {k: v for k, v in a.items() if k not in TIMES} == {k: v for k, v in b.items() if k not in TIMES}
        for a, b in zip(again["heads"], payload["heads"]))
    # the report of the folder has the probe's section, with its per-layer summary
    html_path, _ = write_report(str(tmp_path))
    page = open(html_path).read()
    assert "Probe: do the heads" in page and "layer 2:" in page


def test_a_killed_probe_resumes(tmp_path, reference):
    cfg = ProbeConfig(n_sentences=ARGS["n_sentences"], layers=ARGS["layers"], heads=ARGS["heads"],
                      svm_sentences=ARGS["svm_sentences"], seed=ARGS["seed"])

    def kill(key):
        raise KeyboardInterrupt

    with pytest.raises(RunInterrupted) as err:
        run_experiment(ProbeRun(), cfg, str(tmp_path), progress=False, task_hook=kill)
    assert err.value.stored == 1
    summary = run_experiment(ProbeRun(), cfg, str(tmp_path), progress=False)
    assert (summary.computed, summary.resumed) == (3, 1)  # 2 heads and their 2 null tasks, one stored before
    table = combine(cfg, pd.read_parquet(tmp_path / "probe" / "results.parquet"))
    ref = _rows(reference.table)
    pd.testing.assert_frame_equal(_rows(table)[ref.columns], ref, check_dtype=False, rtol=1e-12)


def test_workers_need_out_and_run_on_dask(tmp_path, reference):
    with pytest.raises(ValidationError, match="--out"):
        run_probe([2], [0], None, 10, None, workers=2)
    res = CliRunner().invoke(cli, ["probe", "--no-store", "--workers", "2", "--layers", "2", "--heads", "0"])
    assert res.exit_code != 0 and "--out" in res.output
    res = CliRunner().invoke(cli, ["probe", "--layers", "2", "--heads", "0,3", "--n-sentences", "10",
                                   "--svm-sentences", "5", "--seed", "1", "--workers", "2", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "4 computed, 0 resumed, 0 failed" in res.output
    ref = _rows(reference.table)
    got = _rows(pd.read_csv(tmp_path / "probe.csv"))[ref.columns]
    pd.testing.assert_frame_equal(got, ref, check_dtype=False, rtol=1e-12)
