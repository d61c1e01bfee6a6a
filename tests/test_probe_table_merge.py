"""scripts/probe_table.py reads several stored probes as one table only where they are one run: the same model,
the same settings (beyond which m, layers and descriptive nulls each ran), one code unless a reason is given, and
each layer and m from one folder unless ``--replace`` takes a rerun's (issue 39: layer 0 of MiniLM rerun after a
solver fix). Synthetic stores: the shards carry the provenance and columns a probe task stores."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pandas as pd
import pytest

from attnsvm.runner.storage import atomic_parquet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADS = [0, 1, 2]


@pytest.fixture(scope="module")
def pt():
    spec = importlib.util.spec_from_file_location("probe_table", os.path.join(ROOT, "scripts", "probe_table.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _store(out, layers, ms, source="sha256:aaa", version="0.3.0 (git aaaaaaa)", shift=0.0, skip=(), old=False,
           **settings):
    """A stored probe under ``out``: head and null tasks of ``layers`` x HEADS x ``ms`` (``skip``: task keys not
    stored, as a failed task stores none). Each head's corr_restricted is 0.3 + 0.1 layer + ``shift``; its nulls
    draw around 0.2. ``old``: the settings lack ``statistic``, as runs before it existed recorded them."""
    config = {"layers": list(layers), "heads": HEADS, "svm_sentences": list(ms), "null_draws": 4,
              "spectrum_draws": 0, "n_sentences": 1000, "max_length": 128, "statistic": "corr_restricted", **settings}
    if old:
        config.pop("statistic")
    rng = np.random.default_rng(len(str(out)))
    folder = os.path.join(out, "probe", "shards", "cfg")
    os.makedirs(folder, exist_ok=True)
    for layer in layers:
        for h in HEADS:
            for m in ms:
                for part in ("head", "null"):
                    key = f"L{layer}-H{h}-m{m}" + ("-null" if part == "null" else "")
                    if key in skip:
                        continue
                    base = {"part": part, "layer": layer, "head": h, "m": m}
                    if part == "head":
                        table = pd.DataFrame([{**base, "corr_restricted": 0.3 + 0.1 * layer + shift,
                                               "margin_ratio": 0.5, "svm_status": "optimal", "svm_gap": 1e-9,
                                               "selected_all": False, "mean_selected": 1.5, "sel_first": 0.9,
                                               "qi_share": 0.4, "seconds_svm": 1.0}])
                    else:
                        table = pd.DataFrame([{**base, "kind": "sink", "draw": j,
                                               "null_corr_restricted": 0.2 + 0.01 * rng.standard_normal(),
                                               "null_margin_ratio": 0.4, "null_seconds": 2.0} for j in range(4)])
                    prov = {"experiment": "probe", "config": config, "config_hash": "cfg", "source": source,
                            "attnsvm": version.split(" ")[0], "version": version, "inputs": {"model": "sha256:m"},
                            "params": {"layer": layer, "head": h, "m": m, "part": part, "several": True},
                            "task": key, "written": "2026-12-07 12:00:00"}
                    atomic_parquet(table, os.path.join(folder, key + ".parquet"), prov)
    return str(out)


def test_one_layer_and_m_from_two_folders_needs_replace(pt, tmp_path):
    a = _store(tmp_path / "a", [0, 1], [256, 512], skip={"L0-H1-m256-null"})
    b = _store(tmp_path / "b", [0], [256, 512], shift=0.01)
    with pytest.raises(SystemExit, match="stored in both .* --replace"):
        pt.read_shards([a, b])
    tables, provs, merge = pt.read_shards([a, b], replace=True)
    # layer 0 comes wholly from b (its 12 tasks), layer 1 from a (12 tasks)
    assert len(provs) == 24
    assert {(p["params"]["layer"], p["config"]["layers"] == [0]) for p in provs} == {(0, True), (1, False)}
    rep = merge["replaced"]
    assert rep["layer_m"] == [(0, 256), (0, 512)] and rep["tasks_earlier"] == 11 and rep["tasks_later"] == 12
    assert rep["only_in_later"] == ["L0-H1-m256-null"]
    # the tasks both stored are measured against each other: the planted shift, not a made-up zero
    agree = merge["agreement"]
    assert agree["tasks_compared"] == 11
    assert agree["max_abs_diff"]["corr_restricted"] == pytest.approx(0.01, rel=1e-6)
    assert agree["max_abs_diff"]["null_corr_restricted"] > 0  # other seeds, other draws


def test_the_merged_table_is_one_run_of_every_layer(pt, tmp_path):
    a = _store(tmp_path / "a", [0, 1], [256, 512], skip={"L0-H1-m256-null"})
    b = _store(tmp_path / "b", [0], [256, 512])
    tables, provs, _ = pt.read_shards([a, b], replace=True)
    assert pt.complete_ms(provs) == [256, 512]
    t = pt.partial_table(tables, provs, [256, 512])
    assert len(t) == 2 * len(HEADS) * 2 and set(t["layer"]) == {0, 1}
    assert set(t["stable_verdict"]) <= {"beyond", "below", "not distinguishable", "depends on sample size"}
    assert np.isfinite(t["q_upper"]).all()
    # without the rerun, the failed null task leaves m = 256 incomplete
    _, provs_a, _ = pt.read_shards([a])
    assert pt.complete_ms(provs_a) == [512]


def test_other_code_needs_a_reason(pt, tmp_path):
    a = _store(tmp_path / "a", [1], [256], source="sha256:old", version="0.2.0 (git ec2dd98)", old=True)
    b = _store(tmp_path / "b", [0], [256], source="sha256:new", version="0.3.0 (git f129694)")
    with pytest.raises(SystemExit, match="different code .*--mixed-code"):
        pt.read_shards([a, b])
    _, provs, merge = pt.read_shards([a, b], mixed_code="only a crash fix between them")
    mixed = merge["mixed_code"]
    assert mixed["reason"] == "only a crash fix between them"
    assert {c["version"]: c["layers"] for c in mixed["codes"]} == {"0.2.0 (git ec2dd98)": [1],
                                                                   "0.3.0 (git f129694)": [0]}
    assert sum(c["tasks"] for c in mixed["codes"]) == len(provs) == 2 * 2 * len(HEADS)


def test_settings_must_agree_beyond_what_may_differ(pt, tmp_path):
    a = _store(tmp_path / "a", [1], [256], old=True)  # no "statistic": the default, corr_restricted
    b = _store(tmp_path / "b", [0], [512], spectrum_draws=2)
    pt.read_shards([a, b])  # layers, m and spectrum draws may differ; a missing default is the default
    c = _store(tmp_path / "c", [2], [256], null_draws=8)
    with pytest.raises(SystemExit, match=r"settings differ in \['null_draws'\]"):
        pt.read_shards([a, c])
    d = _store(tmp_path / "d", [2], [256], statistic="margin_ratio")
    with pytest.raises(SystemExit, match=r"settings differ in \['statistic'\]"):
        pt.read_shards([a, d])


def test_another_model_is_never_one_table(pt, tmp_path):
    a = _store(tmp_path / "a", [1], [256])
    b = _store(tmp_path / "b", [0], [256])
    for path in os.listdir(os.path.join(b, "probe", "shards", "cfg"))[:1]:
        from attnsvm.runner.storage import read_shard
        full = os.path.join(b, "probe", "shards", "cfg", path)
        table, prov = read_shard(full)
        atomic_parquet(table, full, {**prov, "inputs": {"model": "sha256:other"}})
    with pytest.raises(SystemExit, match="different models"):
        pt.read_shards([a, b], mixed_code="x")


def test_the_command_line_writes_the_merge_into_the_provenance(pt, tmp_path, capsys):
    a = _store(tmp_path / "a", [0, 1], [256, 512], skip={"L0-H1-m256-null"})
    b = _store(tmp_path / "b", [0], [256, 512], source="sha256:new", version="0.3.0 (git bbbbbbb)")
    dest = str(tmp_path / "t.csv")
    assert pt.main([a, b, dest, "--replace", "--mixed-code", "why"]) == 0
    prov = json.load(open(str(tmp_path / "t.json"), encoding="utf-8"))
    assert prov["mixed_code"]["reason"] == "why" and prov["replaced"]["only_in_later"] == ["L0-H1-m256-null"]
    assert sorted(prov["code_version"]) == ["0.3.0 (git aaaaaaa)", "0.3.0 (git bbbbbbb)"]
    assert prov["from_shards"]["m"] == [256, 512] and prov["rows"] == 12
