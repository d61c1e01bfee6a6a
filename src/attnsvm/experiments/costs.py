"""Measured CPU seconds per run of each experiment: the runner's estimate of a task's length.

:func:`attnsvm.runner.run_experiments` queues the tasks of all the experiments longest first
(:meth:`attnsvm.experiments.Experiment.estimate_seconds`, which reads this table by default), so that
the long tasks do not run last on a half-idle pool. The estimate only orders the queue: every task
is seeded by its own parameters, so no result depends on it.

:data:`RUN_SECONDS` holds, per experiment, the CPU seconds of its computed tasks divided by its runs
(``task_cpu_seconds / runs`` of its ``meta.json``) in one cold full ``attnsvm reproduce`` on an idle machine
(which run: docs/guide/performance.md, "Design decisions outside svm/ and their measurements"). Re-measure
from any results folder of a pooled ``reproduce`` with::

    python -m attnsvm.experiments.costs RESULTS_DIR

An experiment not in the table (a new or a user's experiment) counts :data:`DEFAULT_RUN_SECONDS` per run.
"""

from __future__ import annotations

import glob
import json
import os
import sys

__all__ = ["RUN_SECONDS", "DEFAULT_RUN_SECONDS", "run_seconds", "measured_run_seconds"]

#: CPU seconds per run at the full preset, from one idle cold full ``reproduce`` (the module docstring says which)
RUN_SECONDS = {
    "lm-cosine": 0.2171,
    "lm-margins": 0.08043,
    "lm-stability": 0.1735,
    "mm-joint": 0.678,
    "mm-loss-functions": 0.0153,
    "mm-multi-input": 0.01405,
    "mm-regularization-path": 0.06067,
    "mm-single-input": 0.3154,
    "real-digits": 0.9553,
    "real-minilm-embeddings": 9.644,
    "real-minilm-heads": 4.792,
    "tf-convergence-types": 0.007449,
    "tf-feasibility": 0.002016,
    "tf-lambda-head": 0.004381,
    "tf-local-convergence": 0.04024,
    "tf-multi-token": 0.002209,
    "tf-seq-causal": 0.04616,
    "tf-svm-rank": 0.01444,
    "tf-trajectories": 0.1348,
}
#: seconds per run of an experiment the table does not list
DEFAULT_RUN_SECONDS = 0.1


def run_seconds(name: str) -> float:
    """CPU seconds per run of the experiment ``name`` (:data:`RUN_SECONDS`, else :data:`DEFAULT_RUN_SECONDS`)."""
    return float(RUN_SECONDS.get(name, DEFAULT_RUN_SECONDS))


def measured_run_seconds(outdir: str) -> dict[str, float]:
    """``{experiment: task CPU seconds / runs}`` from the ``meta.json`` files of a results folder ``outdir``
    (experiments whose meta has no ``task_cpu_seconds``, i.e. not run by the pooled ``reproduce``, or whose
    tasks were all resumed, are left out), 4 significant digits."""
    out = {}
    for path in sorted(glob.glob(os.path.join(outdir, "*", "meta.json"))):
        with open(path, encoding="utf-8") as fh:
            meta = json.load(fh)
        cpu, runs = meta.get("task_cpu_seconds"), meta.get("runs")
        if cpu and runs and meta.get("computed") == meta.get("tasks"):
            out[meta["name"]] = float(f"{cpu / runs:.4g}")
    return out


if __name__ == "__main__":  # pragma: no cover - a maintenance command
    if len(sys.argv) != 2:
        sys.exit("usage: python -m attnsvm.experiments.costs RESULTS_DIR")
    for name, value in measured_run_seconds(sys.argv[1]).items():
        print(f"    {name!r}: {value!r},".replace("'", '"'))
