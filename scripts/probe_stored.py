"""Run (or resume) a stored probe from its settings as ``ProbeConfig`` fields, for settings the command line does
not take (issue 39's at-scale runs: a frozen worktree's code, ``spectrum_draws`` below ``null_draws``).

    PYTHONPATH=FROZEN/src python scripts/probe_stored.py OUT [--stop-after-m M] key=value [key=value ...]

Each value is JSON (``layers=[3]``, ``svm_sentences=1000``, ``spectrum_draws=2``); every other field keeps
:class:`attnsvm.real.probe_config.ProbeConfig`'s default. ``max_length`` is not defaulted here as ``attnsvm probe``
does (the model's limit): give it (128 for MiniLM, as the command records). The tasks are stored exactly as
``attnsvm probe --out OUT`` stores them (:class:`attnsvm.experiments.real.probe_run.ProbeRun` through
:func:`attnsvm.runner.run_experiment`), so the same command resumes a stopped run and
``scripts/probe_table.py`` reads it. ``--stop-after-m M`` stops the run (its shards kept, resumable) as soon as
every task with m <= M is stored (the tasks run in ascending m), or at once when they already are: a run stored
under the settings that ask for larger m too, whose larger m are computed elsewhere.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys


class _Enough(Exception):
    """Every task up to ``--stop-after-m`` is stored."""


def stored_keys(sharddir: str) -> set:
    """The task keys with a shard in ``sharddir``."""
    return {os.path.basename(p)[:-len(".parquet")] for p in glob.glob(os.path.join(sharddir, "*.parquet"))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the folder (as attnsvm probe --out)")
    ap.add_argument("--stop-after-m", type=int, default=None, help="stop once every task with m <= this is stored")
    ap.add_argument("settings", nargs="+", help="ProbeConfig fields as key=JSON")
    args = ap.parse_args(argv)
    from attnsvm.experiments.real.probe_run import ProbeRun
    from attnsvm.real.probe_config import probe_config
    from attnsvm.runner import results_problem, run_experiment
    from attnsvm.runner.sweep import make_plan

    settings = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"settings are key=value, got {item!r}")
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError:
            ap.error(f"{key}: the value must be JSON, got {value!r}")
    if "max_length" not in settings:
        ap.error("give max_length (attnsvm probe records the model's limit, 128 for MiniLM)")
    config = probe_config(**settings)
    hook = None
    if args.stop_after_m is not None:
        plan = make_plan(ProbeRun(), config, args.out, None)  # writes nothing: the tasks and the shard folder
        wanted = {t.key for t in plan.tasks if t.params["m"] <= args.stop_after_m} - stored_keys(plan.sharddir)
        print(f"{plan.sharddir}: {len(wanted)} tasks with m <= {args.stop_after_m} to compute", flush=True)
        if not wanted:
            return 0

        def hook(key):
            wanted.discard(key)
            if not wanted:
                raise _Enough
    try:
        summary = run_experiment(ProbeRun(), config, args.out, progress=True, task_hook=hook)
    except _Enough:
        print(f"every task with m <= {args.stop_after_m} is stored; stopped (the same command resumes)")
        return 0
    problem = results_problem(summary.outdir)
    print(f"{summary.outdir}: {summary.computed} computed, {summary.resumed} reused, {len(summary.failed)} failed"
          + (f"; results: {problem}" if problem else ""))
    return 1 if summary.failed or problem else 0


if __name__ == "__main__":
    sys.exit(main())
