"""Stored shards you can trust (issue 26): checksums, provenance, code version, input digests.

Each case damages what a finished run stored (one flipped bit, a shard of another task copied
over, a shard rewritten by pandas, edited code under the same version, a model file replaced
in place) and checks that the next run recomputes the shard, says which and why, and ends
with the results of a clean run.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from attnsvm import __version__, runner
from attnsvm._files import folder_digest
from attnsvm.experiments import Task
from attnsvm.runner import ShardError, StorageError, read_shard, run_experiment

sys.path.insert(0, os.path.dirname(__file__))
from test_hostile_storage import StoreToy, _calls, _clean, _results  # noqa: E402

import attnsvm  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.abspath(attnsvm.__file__)))  # the folder holding the code under test


def _stored(tmp_path, **overrides):
    toy = StoreToy()
    log = tmp_path / "calls.log"
    cfg = toy.Config(log=str(log), **overrides)
    out = str(tmp_path / "out")
    summary = run_experiment(toy, cfg, out, progress=False)
    sharddir = os.path.join(summary.outdir, "shards", runner.config_hash(cfg))
    log.write_text("")
    return toy, cfg, out, sharddir, log


def _resume_recomputes(tmp_path, toy, cfg, out, log, key, why, capsys=None):
    summary = run_experiment(toy, cfg, out, progress=False)
    assert _calls(log) == [key]
    assert [r["key"] for r in summary.recomputed] == [key]
    assert why in summary.recomputed[0]["error"], summary.recomputed[0]["error"]
    assert summary.computed == 1 and summary.ok
    if capsys is not None:
        err = capsys.readouterr().err
        assert f"{key}.parquet cannot be used (" in err and why in err and "recomputing it" in err
    pd.testing.assert_frame_equal(_results(summary.outdir).drop(columns="limit"),
                                  _clean(tmp_path, log=str(log)).drop(columns="limit"))
    return summary


# ------------------------------------------------------------ checksum
def _flip(path, bit):
    raw = bytearray(open(path, "rb").read())
    raw[bit // 8] ^= 1 << (bit % 8)
    with open(path, "wb") as fh:
        fh.write(bytes(raw))


def test_every_single_bit_flip_of_a_shard_is_detected(tmp_path):
    """Before: 18.6% of data-changing flips of a shard were accepted (changed values, a column turned None).
    Every bit of a stored shard, flipped in memory, fails the checksum that read_shard checks first (the full
    resume of every flip, with its counts, is benchmarks/shard_bitflip.py)."""
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    good = open(os.path.join(sharddir, "seeds-002.parquet"), "rb").read()
    assert runner.verify_shard_bytes(good) is None
    raw = bytearray(good)
    accepted = []
    for bit in range(8 * len(raw)):
        raw[bit // 8] ^= 1 << (bit % 8)
        if runner.verify_shard_bytes(bytes(raw)) is None:
            accepted.append(bit)
        raw[bit // 8] ^= 1 << (bit % 8)
    assert accepted == []


@pytest.mark.parametrize("where", ["data", "checksum", "footer"])
def test_a_flipped_bit_is_recomputed_on_resume(tmp_path, where, capsys):
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    path = os.path.join(sharddir, "seeds-002.parquet")
    raw = open(path, "rb").read()
    byte = {"data": 40, "checksum": raw.rindex(b"attnsvm-sha256:") + 20, "footer": len(raw) - 200}[where]
    _flip(path, 8 * byte + 1)
    why = "checksum mismatch" if where != "checksum" or raw[byte] ^ 2 in b"0123456789abcdef" else "checksum"
    _resume_recomputes(tmp_path, toy, cfg, out, log, "seeds-002", why, capsys)


def test_shard_of_another_task_copied_over_is_recomputed(tmp_path, capsys):
    """Before: `cp n6-T8-d8.parquet n6-T8-d4.parquet` was resumed as if it were that task's."""
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    shutil.copyfile(os.path.join(sharddir, "seeds-000.parquet"), os.path.join(sharddir, "seeds-002.parquet"))
    _resume_recomputes(tmp_path, toy, cfg, out, log, "seeds-002", "a shard of task 'seeds-000', not 'seeds-002'", capsys)


def test_shard_rewritten_by_pandas_is_recomputed(tmp_path, capsys):
    """Before: a shard rewritten by pandas (same values, no attnsvm metadata) was resumed."""
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    path = os.path.join(sharddir, "seeds-002.parquet")
    table = pd.read_parquet(path)
    table.loc[0, "value"] = 99.0  # what an edit by hand does; an unedited rewrite is refused the same way
    table.to_parquet(path, index=False)
    with pytest.raises(ShardError, match="no attnsvm checksum"):
        read_shard(path)
    _resume_recomputes(tmp_path, toy, cfg, out, log, "seeds-002", "no attnsvm checksum", capsys)


def test_shard_with_a_valid_checksum_but_another_experiment_or_config_is_recomputed(tmp_path):
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    path = os.path.join(sharddir, "seeds-002.parquet")
    table, prov = read_shard(path)
    # a correctly checksummed shard whose provenance names another experiment
    with open(path, "wb") as fh:
        fh.write(runner.shard_bytes(table, {**prov, "experiment": "other"}))
    _resume_recomputes(tmp_path, toy, cfg, out, log, "seeds-002", "a shard of experiment 'other'")
    table, prov = read_shard(path)
    with open(path, "wb") as fh:
        fh.write(runner.shard_bytes(table, {**prov, "config": {**prov["config"], "scale": 5.0}}))
    log.write_text("")
    _resume_recomputes(tmp_path, toy, cfg, out, log, "seeds-002", "written for config")


def test_shard_that_is_a_fifo_is_set_aside_without_blocking(tmp_path):
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    path = os.path.join(sharddir, "seeds-002.parquet")
    os.unlink(path)
    os.mkfifo(path)
    _resume_recomputes(tmp_path, toy, cfg, out, log, "seeds-002", "fifo")


def test_results_and_checks_are_written_only_from_verified_shards(tmp_path):
    """A shard that changes after it was verified (here while another task runs) stops the run before results.parquet
    and checks.json are written from it."""
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    expdir = os.path.join(out, "store-toy")
    before = {f: open(os.path.join(expdir, f), "rb").read() for f in ("results.parquet", "checks.json")}
    os.unlink(os.path.join(sharddir, "seeds-004.parquet"))

    def damage(key):
        _flip(os.path.join(sharddir, "seeds-000.parquet"), 8 * 50)

    with pytest.raises(StorageError, match=r"seeds-000\.parquet changed during the run \(checksum mismatch"):
        run_experiment(toy, cfg, out, progress=False, task_hook=damage)
    assert {f: open(os.path.join(expdir, f), "rb").read() for f in before} == before


def test_a_resubmitted_dask_task_recomputes_a_damaged_shard(tmp_path):
    """execute_task skips a task whose shard is stored (Dask resubmits tasks of lost workers) only if the shard
    passes its checksum."""
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    path = os.path.join(sharddir, "seeds-002.parquet")
    task = Task("seeds-002", 2, {"seeds": [2, 3]})
    assert runner.execute_task(toy, cfg.model_dump(mode="json"), task, path) is None
    _flip(path, 8 * 40)
    table = runner.execute_task(toy, cfg.model_dump(mode="json"), task, path)
    assert sorted(table["seed"]) == [2, 3]


def test_provenance_names_experiment_task_config_code_and_inputs(tmp_path):
    toy, cfg, out, sharddir, log = _stored(tmp_path)
    table, prov = read_shard(os.path.join(sharddir, "seeds-002.parquet"))
    assert prov["experiment"] == "store-toy" and prov["task"] == "seeds-002"
    assert prov["config_hash"] == runner.config_hash(cfg) and prov["config"] == cfg.model_dump(mode="json")
    assert prov["attnsvm"] == __version__ and prov["version"] == runner.code_version()
    assert prov["source"] == runner.source_digest() and prov["inputs"] == {}
    meta = json.load(open(os.path.join(out, "store-toy", "meta.json")))
    assert meta["source"] == runner.source_digest() and meta["code_version"] == runner.code_version()
    assert all(p["source"] == runner.source_digest() for p in meta["provenance"])


# -------------------------------------------------------- code version
def test_code_version_adds_git_describe_in_this_checkout():
    """Before: code_version() compared `src` with `<top>/src/attnsvm` and never added the commit."""
    top = subprocess.run(["git", "-C", SRC, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0:
        pytest.skip("the tests do not run from a git checkout (no commit to report)")
    head = subprocess.run(["git", "-C", SRC, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    version = runner.code_version()
    assert version.startswith(f"{__version__} (git ") and version.endswith(")")
    assert head.strip()[:7] in version


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def test_git_version_is_dirty_exactly_when_the_package_files_differ(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    pkg = repo / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (repo / "README").write_text("readme\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert runner.git_version(str(pkg)) == head
    (repo / "README").write_text("edited\n")  # outside the package: the code is the commit's
    assert runner.git_version(str(pkg)) == head
    (pkg / "__init__.py").write_text("x = 2\n")
    assert runner.git_version(str(pkg)) == head + "-dirty"
    _git(repo, "checkout", "-q", "--", "src")
    (pkg / "new.py").write_text("y = 1\n")  # untracked code counts
    assert runner.git_version(str(pkg)) == head + "-dirty"
    # a package folder git does not track (an installed copy, or a venv inside some project's checkout)
    other = tmp_path / "installed"
    other.mkdir()
    (other / "__init__.py").write_text("x = 1\n")
    assert runner.git_version(str(other)) is None
    inside = repo / "venv" / "pkg"
    inside.mkdir(parents=True)
    (inside / "__init__.py").write_text("x = 1\n")
    assert runner.git_version(str(inside)) is None


def test_source_digest_follows_the_files_not_the_caches(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "sub" / "m.py").write_text("y = 1\n")
    first = runner.source_digest(str(pkg))
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0" * 10)
    assert runner.source_digest(str(pkg)) == first
    (pkg / "sub" / "m.py").write_text("y = 2\n")
    assert runner.source_digest(str(pkg)) != first
    (pkg / "sub" / "m.py").write_text("y = 1\n")
    assert runner.source_digest(str(pkg)) == first
    (pkg / "sub" / "m.py").rename(pkg / "m.py")  # same bytes, another module
    assert runner.source_digest(str(pkg)) != first


def test_edited_code_under_the_same_version_recomputes_every_shard(tmp_path):
    """Before: "0 computed, 14 resumed" after an edit of the code (no git, same version). A copy of the package
    without git, run in a fresh process before and after one of its files is edited."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SRC, "attnsvm"), src / "attnsvm", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(src)!r}, {os.path.dirname(__file__)!r}]
        import attnsvm
        assert attnsvm.__file__.startswith({str(src)!r}), attnsvm.__file__
        from test_hostile_storage import StoreToy
        from attnsvm.runner import run_experiment

        def run():
            s = run_experiment(StoreToy(), StoreToy().Config(), {str(out)!r}, progress=False)
            print(s.computed, s.resumed, s.ok)

        run()
        run()
        with open({str(src / "attnsvm" / "metrics.py")!r}, "a") as fh:
            fh.write("\\n# an edit that could change the numbers\\n")
        run()
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["3 0 True", "0 3 True", "3 0 True"]
    assert r.stderr.count("written by other code") == 3 and "seeds-000.parquet cannot be used" in r.stderr


# -------------------------------------------------------------- inputs
class InputToy(StoreToy):
    """A toy whose numbers depend on a file named in the config (as the probe's on its model)."""

    name = "input-toy"

    def input_digests(self, config):
        return {"data": folder_digest(config.log)}

    def run_task(self, config, task):
        scale = float(open(os.path.join(config.log, "scale.txt")).read())
        return pd.DataFrame([{"seed": s, "value": scale * np.random.default_rng(s).standard_normal()}
                             for s in task.params["seeds"]])

    def checks(self, config, table):
        return []


def test_inputs_replaced_in_place_are_recomputed(tmp_path):
    """Before: `attnsvm probe --model M --out O` resumed old numbers after M's weights were replaced in place."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "scale.txt").write_text("1.0")
    toy = InputToy()
    cfg = toy.Config(log=str(data))
    out = str(tmp_path / "out")
    assert run_experiment(toy, cfg, out, progress=False).computed == 3
    assert run_experiment(toy, cfg, out, progress=False).resumed == 3
    (data / "scale.txt").write_text("2.0")
    summary = run_experiment(toy, cfg, out, progress=False)
    assert summary.computed == 3 and len(summary.recomputed) == 3
    assert all("its inputs changed since it was written ('data': 'sha256:" in r["error"] for r in summary.recomputed)
    values = _results(summary.outdir)["value"].to_numpy()
    expect = [2.0 * np.random.default_rng(s).standard_normal() for s in range(6)]
    np.testing.assert_array_equal(values, expect)


def test_the_probe_records_a_digest_of_its_model_files(tmp_path):
    """The probe task's provenance: a digest of the model directory's weight, config and tokenizer files
    (needs no model: the digest is of the files)."""
    from attnsvm.experiments.real.probe_run import ProbeRun
    from attnsvm.real.probe_config import ProbeConfig

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    (model / "model.safetensors").write_bytes(b"\1" * 1000)
    (model / "vocab.txt").write_text("[PAD]\n")
    cfg = ProbeConfig(model=str(model))
    first = ProbeRun().input_digests(cfg)
    assert set(first) == {"model"} and first["model"].startswith("sha256:")
    assert ProbeRun().input_digests(cfg) == first
    (model / "model.safetensors").write_bytes(b"\1" * 999 + b"\2")  # the weights replaced in place
    assert ProbeRun().input_digests(cfg) != first
    (model / "model.safetensors").write_bytes(b"\1" * 1000)
    assert ProbeRun().input_digests(cfg) == first
    (model / "config.json").write_text('{"model_type": "gpt2"}')
    assert ProbeRun().input_digests(cfg) != first


def test_probe_recomputes_heads_after_the_model_files_are_replaced_in_place(tmp_path):
    """Before: `attnsvm probe --model M --out O` showed the old model's numbers after M's weights were replaced
    (the shards were keyed on the path). End to end with a tiny BERT whose weights are re-drawn in place."""
    pytest.importorskip("transformers")
    from click.testing import CliRunner

    from attnsvm.cli import cli
    from test_real_any_model import SENTENCES, _tiny

    model = _tiny("bert", tmp_path / "model", seed=0)
    f = tmp_path / "s.txt"
    f.write_text("\n".join(SENTENCES[:4]) + "\n")

    def probe(out):
        r = CliRunner().invoke(cli, ["probe", "--model", model, "--sentences", str(f), "--svm-sentences", "3",
                                     "--layers", "1", "--out", str(out), "--json"])
        assert r.exit_code == 0, r.output
        data = json.loads((out / "probe.json").read_text())
        return data["stored"], pd.DataFrame(data["heads"]).drop(columns=["svm_seconds", "random_seconds",
                                                                         "null_seconds"], errors="ignore")

    first, old = probe(tmp_path / "out")
    assert (first["computed"], first["resumed"]) == (4, 0)  # 2 heads, each with its null-heads task
    assert probe(tmp_path / "out")[0]["resumed"] == 4
    _tiny("bert", tmp_path / "model", tokenizer=False, seed=1)  # same path, other weights
    again, table = probe(tmp_path / "out")
    assert (again["computed"], again["resumed"]) == (4, 0)
    fresh = probe(tmp_path / "fresh")[1]
    pd.testing.assert_frame_equal(table, fresh)
    assert not table.equals(old), list(old.columns)  # the new weights give other numbers
