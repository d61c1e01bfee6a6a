"""Single-bit flips of a stored shard: how many does a resume detect, find harmless, or accept with changed values?

Usage: python benchmarks/shard_bitflip.py [--all | --stride 4] [--resumes 4] [--legacy] [--keep DIR]

Builds one shard with the runner (tf-feasibility, one task: n=6, T=8, d=8, 100 instances, as in
issue 26), then flips bits of it, one at a time, and asks the runner's resume check
(``read_shard`` with the provenance this run expects, what ``run_experiment`` calls before it
reuses a shard) what it makes of each flipped file:

* detected: the shard is refused (it would be set aside and recomputed), with the reason counted;
* harmless: the shard is accepted and its table and provenance equal the original's;
* accepted: the shard is accepted with a changed table or provenance (must be 0).

The default sample flips one bit in every 4th byte of the file (``--stride``; the bit index cycles
through 0..7 from one flipped byte to the next) and every bit of the checksum's tag and digits;
``--all`` flips every bit. ``--resumes N`` also runs N full
``run_experiment`` resumes on flipped copies (spread over the file) and checks that each
recomputed the task and wrote the results of the clean run. ``--legacy`` scans a shard written
the way attnsvm wrote them before checksums (same table and provenance, no checksum) under the
old rule (readable by pyarrow and the same config hash: reused), for comparison.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import sys
import tempfile
import time

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if os.path.isdir(SRC):
    sys.path.insert(0, SRC)


def _build(outdir):
    """Run the one-task tf-feasibility sweep into ``outdir``; return (experiment, config, shard path)."""
    from attnsvm.experiments import registry
    from attnsvm.runner import config_hash, run_experiment

    exp = registry()["tf-feasibility"]
    cfg = exp.Config(cells=[(6, 8)], ds=[8], instances=100)
    summary = run_experiment(exp, cfg, outdir, progress=False)
    assert summary.computed == 1 and not summary.failed, summary
    path = os.path.join(summary.outdir, "shards", config_hash(cfg), "n6-T8-d8.parquet")
    return exp, cfg, path


def _legacy_bytes(table, prov) -> bytes:
    """The shard as written before checksums: the table and the provenance JSON in the footer, nothing else."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    at = pa.Table.from_pandas(table, preserve_index=False)
    meta = dict(at.schema.metadata or {})
    meta[b"attnsvm.provenance"] = json.dumps(prov, default=str).encode("utf-8")
    sink = pa.BufferOutputStream()
    pq.write_table(at.replace_schema_metadata(meta), sink)
    return sink.getvalue().to_pybytes()


def _legacy_check(path, chash):
    """The resume rule before checksums: (table, provenance) if pyarrow reads it and the config hash matches."""
    import json

    import pyarrow.parquet as pq

    at = pq.read_table(path)
    raw = (at.schema.metadata or {}).get(b"attnsvm.provenance")
    prov = json.loads(raw.decode("utf-8")) if raw else None
    if prov is not None and prov.get("config_hash") != chash:
        raise ValueError("written for another config")
    return at.to_pandas(), prov


def _same(a, b) -> bool:
    import pandas as pd

    (ta, pa_), (tb, pb) = a, b
    if pa_ != pb or list(ta.columns) != list(tb.columns):
        return False
    try:
        pd.testing.assert_frame_equal(ta, tb, check_exact=True)
    except AssertionError:
        return False
    return True


def _reason(text: str) -> str:
    for key in ("checksum mismatch", "no attnsvm checksum", "not a parquet file", "empty file", "a shard of",
                "written for config", "other code", "inputs changed", "no provenance"):
        if key in text:
            return key
    return text.split(":")[0][:40]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="flip every bit of the shard (default: a sample, see --stride)")
    ap.add_argument("--stride", type=int, default=4, help="sample: one bit in every STRIDE-th byte (default 4)")
    ap.add_argument("--resumes", type=int, default=4, help="full run_experiment resumes on flipped copies (default 4)")
    ap.add_argument("--legacy", action="store_true", help="scan the pre-checksum format under the old resume rule")
    ap.add_argument("--keep", default=None, help="build in this folder and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)

    from attnsvm.runner import ShardError, config_hash, read_shard, run_experiment
    from attnsvm.runner.provenance import expected_provenance, run_provenance

    work = args.keep or tempfile.mkdtemp(prefix="shard-bitflip-")
    t0 = time.perf_counter()
    exp, cfg, path = _build(work)
    build_s = time.perf_counter() - t0
    good = open(path, "rb").read()
    chash = config_hash(cfg)
    task = exp.tasks(cfg)[0]
    expected = expected_provenance(run_provenance(exp, cfg, cfg.model_dump(mode="json"), chash), task)
    reference = read_shard(path, expected)
    if args.legacy:
        good = _legacy_bytes(*reference)

        def check(p):
            return _legacy_check(p, chash)
    else:
        def check(p):
            return read_shard(p, expected)

    n = len(good)
    if args.all:
        bits = list(range(8 * n))
        sample = "every bit"
    else:
        tag = good.rfind(b"attnsvm-sha256:")
        extra = set(range(8 * tag, 8 * (tag + 15 + 64))) if tag >= 0 else set()
        k = max(1, args.stride)
        bits = sorted({8 * i + (i // k) % 8 for i in range(0, n, k)} | extra)
        sample = f"one bit in every {k}th byte (bit = (byte / {k}) mod 8)" + (
            ", every bit of the checksum's tag and digits" if extra else "")

    flipped = os.path.join(os.path.dirname(path), "flipped.parquet")
    counts = collections.Counter()
    reasons = collections.Counter()
    accepted_at = []
    t1 = time.perf_counter()
    for bit in bits:
        raw = bytearray(good)
        raw[bit // 8] ^= 1 << (bit % 8)
        with open(flipped, "wb") as fh:
            fh.write(raw)
        try:
            got = check(flipped)
        except ShardError as exc:
            counts["detected"] += 1
            reasons[_reason(exc.reason)] += 1
        except Exception as exc:  # noqa: BLE001 - the legacy rule: unreadable means recomputed
            if not args.legacy:
                raise  # the resume check must refuse with ShardError, never crash
            counts["detected"] += 1
            reasons[type(exc).__name__] += 1
        else:
            if _same(got, reference):
                counts["harmless"] += 1
            else:
                counts["accepted"] += 1
                accepted_at.append(bit)
    scan_s = time.perf_counter() - t1
    os.unlink(flipped)

    print(f"shard       {os.path.basename(path)} of tf-feasibility, {n} bytes ({8 * n} bits)"
          + (" [legacy format, old resume rule]" if args.legacy else ""))
    print(f"flips       {len(bits)} single-bit flips: {sample}")
    print(f"detected    {counts['detected']}")
    for why, k in reasons.most_common():
        print(f"  {why:<26s}{k}")
    print(f"harmless    {counts['harmless']}")
    print(f"accepted    {counts['accepted']}" + (f" (first bits: {accepted_at[:10]})" if accepted_at else ""))
    print(f"time        build {build_s:.1f} s, scan {scan_s:.1f} s ({1e3 * scan_s / max(len(bits), 1):.2f} ms per flip)")

    bad = counts["accepted"]
    if args.resumes > 0 and not args.legacy:
        import pandas as pd

        results = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(path))), "results.parquet")
        clean = pd.read_parquet(results)
        ok = 0
        for bit in [int(8 * n * (k + 0.5) / args.resumes) for k in range(args.resumes)]:
            raw = bytearray(good)
            raw[bit // 8] ^= 1 << (bit % 8)
            with open(path, "wb") as fh:
                fh.write(raw)
            with contextlib.redirect_stderr(io.StringIO()):  # the runner says which shard it recomputes, and why
                summary = run_experiment(exp, cfg, work, progress=False)
            same = pd.read_parquet(results).equals(clean)
            ok += summary.computed == 1 and [r["key"] for r in summary.recomputed] == [task.key] and same
        print(f"resumes     {ok}/{args.resumes} full run_experiment resumes of flipped shards recomputed the task "
              "and wrote the clean run's results")
        bad += args.resumes - ok
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad and not args.legacy else 0


if __name__ == "__main__":
    sys.exit(main())
