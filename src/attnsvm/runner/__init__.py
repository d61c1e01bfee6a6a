"""Run an experiment's tasks serially, on local processes or on a Dask cluster.

Every finished task is stored at once as ``OUT/NAME/shards/<config-hash>/<task>.parquet``,
so a sweep that is interrupted or killed resumes, when re-run with the same command,
without recomputing anything stored. A failing task is recorded with its parameters
(seeds) in ``failures.json`` and the others complete.

Storage is crash-safe and checked:

* a shard is written to an exclusively created temporary file (never through a symbolic
  link), flushed and fsynced, renamed, and its folder fsynced; it carries its provenance
  (experiment, task, config hash, the config itself, the attnsvm version with ``git describe``
  when run from a checkout, a digest of the package's source files, digests of the inputs the
  experiment declares such as a probed model's files, seeds, time written) in the parquet
  key-value metadata, and a SHA-256 checksum of the whole file (:func:`shard_bytes`), so any
  change to the file after it was written, one flipped bit included, is detected;
* on resume every shard is verified (:func:`read_shard`): checksum, then its provenance against
  this run's (another task's shard copied over it, a shard rewritten by another program without
  attnsvm's metadata, a shard of other code or other inputs under the same version); one that
  fails is set aside as ``<task>.parquet.unreadable``, recomputed and reported with the reason
  (:attr:`RunSummary.recomputed`); results, checks and the report's config and provenance are
  built only from verified shards;
* one run at a time per experiment folder (a file lock ``OUT/NAME/.lock``, opened without
  following links): a second ``attnsvm run`` on the same folder waits, at most ``lock_timeout``
  seconds (``--lock-timeout``; then a :class:`LockError` naming the pid that holds it), then
  reuses the first one's shards; a run of several experiments takes their locks in one order
  (sorted folder paths), so two runs never wait for each other; stale temporary files are removed;
* no folder below the run's ``outdir`` is followed when it is a symbolic link (``OUT/NAME``, its ``shards`` and
  shard folders are created one at a time and checked before the lock is taken and again after);
* a write error (disk full, read-only folder) stops the sweep with one clear error naming
  the path, removes the temporary file and keeps every shard already stored; Ctrl-C does
  the same (:class:`RunInterrupted`).

Before anything runs, the memory of planning and of each task is estimated
(:meth:`Experiment.estimate_memory`) and checked against the package's one memory limit
(:func:`attnsvm.memory.require_memory`, option ``--max-memory``), which also applies to
the solvers inside the tasks.

The package, read top to bottom: ``attnsvm.runner.storage`` (the shard format, checksums, durable writes,
the results seal), ``attnsvm.runner.provenance`` (config hash, code version, inputs),
``attnsvm.runner.folders`` (the run's folders and their locks), ``attnsvm.runner.tasks`` (one task where
it runs), ``attnsvm.runner.executors`` (this process, a local pool or Dask, behind one interface),
``attnsvm.runner.sweep`` (an experiment's tasks, stored shards and results) and ``attnsvm.runner.run``
(:func:`run_experiment`, :func:`run_experiments`). The names documented here are imported from here.
"""

from attnsvm.runner.executors import (  # noqa: F401 - constants re-exported
    LANE_DEPTH, PARENT_POLL, WORKER_TIMEOUT, SchedulerError, check_scheduler, next_for_worker, queue_order,
    shared_state_of,
)
from attnsvm.runner.folders import LOCK_FILE, LOCK_TIMEOUT, LockError  # noqa: F401 - constants re-exported
from attnsvm.runner.provenance import code_version, config_hash, environment, git_version, source_digest
from attnsvm.runner.run import (  # noqa: F401 - constants re-exported
    WORKERS_PER_CPU, default_workers, max_workers, run_experiment, run_experiments,
)
from attnsvm.runner.storage import (  # noqa: F401 - constants re-exported
    CHECKS_DIGEST_KEY, CHECKS_FILE, CHECKSUM_KEY, MAX_SEALED_BYTES, META_DIGEST_KEY, PROVENANCE_KEY, RESULTS_FILE,
    VERIFIED_FIELDS, ShardError, StorageError, TableError, provenance_mismatch, read_shard, results_problem,
    results_seal, shard_bytes, verify_shard_bytes,
)
from attnsvm.runner.sweep import RunInterrupted, RunSummary, preset_of
from attnsvm.runner.tasks import TaskAborted, execute_task, execute_timed

#: the documented classes and functions (the API page lists these; the constants above are importable too)
__all__ = [
    "StorageError", "ShardError", "LockError", "TaskAborted", "TableError", "SchedulerError", "RunInterrupted",
    "RunSummary", "config_hash", "source_digest", "git_version", "code_version", "execute_task", "shard_bytes",
    "verify_shard_bytes", "read_shard", "provenance_mismatch", "results_problem", "results_seal", "preset_of",
    "max_workers", "run_experiment", "execute_timed", "default_workers", "run_experiments", "queue_order",
    "shared_state_of", "next_for_worker", "check_scheduler", "environment",
]
