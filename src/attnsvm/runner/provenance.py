"""What a shard says about where it came from: the config hash, the code (version, ``git describe``, a digest of
the package's source files), the experiment's declared inputs, the task's seeds; and the environment a run
records in its meta.

:func:`run_provenance` is what every shard of a run must say (:data:`~attnsvm.runner.storage.VERIFIED_FIELDS`
but the task); :func:`expected_provenance` adds the task. A stored shard whose provenance differs is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from functools import lru_cache

from attnsvm.experiments.base import Task
from attnsvm.experiments.config import config_to_yaml
from attnsvm.runner.storage import StorageError

#: the folder of the attnsvm package, whose files :func:`source_digest` hashes
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_hash(config) -> str:
    """Hash of the config and the attnsvm version: shards of another config or release are never reused."""
    from attnsvm import __version__

    return hashlib.sha256((config_to_yaml(config) + __version__).encode()).hexdigest()[:12]


def source_digest(package_dir: str | None = None) -> str:
    """``sha256:<hex>`` of the package's files (relative paths and contents, ``__pycache__`` and ``.pyc`` left out).

    Stored in every shard's provenance and compared on resume: shards computed by other code
    are recomputed even when the version number is the same and there is no git checkout.
    """
    root = package_dir or _PACKAGE_DIR
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/").encode("utf-8", "surrogateescape")
            with open(full, "rb") as fh:
                data = fh.read()
            h.update(b"%d:%s:%d:" % (len(rel), rel, len(data)))
            h.update(data)
    return "sha256:" + h.hexdigest()


def git_version(package_dir: str | None = None) -> str | None:
    """``git describe --always`` of the checkout the package folder is tracked in, with ``-dirty`` when a file
    under the package folder differs from that commit (modified, added, deleted or untracked); None when the
    package is not tracked by git (an installed wheel) or git is unavailable."""
    pkg = package_dir or _PACKAGE_DIR

    def git(*args):
        r = subprocess.run(["git", "-C", pkg, *args], capture_output=True, text=True, timeout=5)
        return r.stdout.strip() if r.returncode == 0 else None

    try:
        # tracked in the repository git finds from here: a checkout of the package, not a venv inside some project
        if not git("ls-files", "--", "__init__.py"):
            return None
        desc = git("describe", "--always")
        status = git("status", "--porcelain", "--untracked-files=all", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return None
    if not desc or status is None:
        return None
    return desc + ("-dirty" if status else "")


@lru_cache(maxsize=8)
def _code_version(source: str) -> str:
    from attnsvm import __version__

    desc = git_version()
    return f"{__version__} (git {desc})" if desc else __version__


def code_version() -> str:
    """``attnsvm.__version__``, plus ``git describe --always`` (``-dirty`` when the package's files differ from the
    commit) when the package runs from a git checkout, e.g. ``0.1.0 (git 1a2b3c4-dirty)``."""
    return _code_version(source_digest())


def _inputs_of(experiment, config) -> dict:
    """Digests of the files the experiment's numbers depend on beyond its config, from its optional method
    ``input_digests(config) -> {name: digest}`` (the probe: its model's weight, config and tokenizer files)."""
    hook = getattr(experiment, "input_digests", None)
    if hook is None:
        return {}
    try:
        digests = hook(config)
    except OSError as exc:
        raise StorageError(f"{experiment.name}: cannot read the inputs to record their digests: "
                           f"{exc.strerror or exc}") from None
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        raise TypeError(f"{experiment.name}.input_digests must return a dict of str to str, got {digests!r:.80}")
    return dict(sorted(digests.items()))


def run_provenance(experiment, config, config_json, chash) -> dict:
    """What every shard of this run must say (:data:`~attnsvm.runner.storage.VERIFIED_FIELDS` but the task) and
    the code version."""
    from attnsvm import __version__

    source = source_digest()
    return {"experiment": experiment.name, "config_hash": chash, "config": config_json, "attnsvm": __version__,
            "source": source, "version": _code_version(source), "inputs": _inputs_of(experiment, config)}


def expected_provenance(run_prov: dict, task: Task) -> dict:
    """What the shard of ``task`` must say: the run's provenance (:func:`run_provenance`) and the task's key."""
    return {**run_prov, "task": task.key}


def seeds_of(task: Task):
    """The seeds a task covers, as its params state them (else the params that fix its randomness)."""
    for key in ("seeds", "seed", "run"):
        if key in task.params:
            return task.params[key]
    return "set by the config and task params " + json.dumps(task.params, sort_keys=True, default=str)


def environment() -> dict:
    """Versions of the pieces that decide the numbers."""
    import importlib.metadata as md

    versions = {}
    for pkg in ("attnsvm", "numpy", "scipy", "torch", "cvxpy", "clarabel", "pandas", "matplotlib", "dask"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "packages": versions, "attnsvm_code": code_version()}
