"""Print, at the end of the build, how long each notebook executed in this build took.

MyST-NB stores the result of executing a notebook in the build environment:
``env.nb_metadata[docname]["exec_data"]`` (``myst_nb.sphinx_.NbMetadataCollector.set_exec_data``),
an ``ExecutionResult`` dict whose ``runtime`` is the execution time in seconds and ``mtime``
the POSIX time at which it ran. A notebook counts as executed in this build when its
``mtime`` is not older than the start of the build (notebooks read from an earlier build's
environment keep their old record and are not listed).

The build log then shows, e.g.::

    tutorial tutorials/first_direction: 12.3 s
    notebook theory: 4.1 s
    notebooks executed: 2, total 16.4 s
"""

from __future__ import annotations

import time

from sphinx.util import logging

logger = logging.getLogger(__name__)


def _build_started(app) -> None:
    app.env._notebook_times_start = time.time()  # noqa: SLF001 (our own attribute)


def _report(app, exception) -> None:
    if exception is not None:
        return
    env = app.env
    start = getattr(env, "_notebook_times_start", 0.0)
    metadata = getattr(env, "nb_metadata", {}) or {}
    rows = []
    for docname in sorted(metadata):
        data = (metadata[docname] or {}).get("exec_data")
        if not data or data.get("runtime") is None:
            continue
        if data.get("mtime", 0.0) < start - 1.0:  # executed by an earlier build
            continue
        rows.append((docname, float(data["runtime"]), bool(data.get("succeeded", True))))
    for docname, runtime, ok in rows:
        kind = "tutorial" if docname.startswith("tutorials/") else "notebook"
        logger.info(f"{kind} {docname}: {runtime:.1f} s" + ("" if ok else " (FAILED)"))
    total = sum(r for _, r, _ in rows)
    logger.info(f"notebooks executed: {len(rows)}, total {total:.1f} s")


def setup(app):
    app.connect("builder-inited", _build_started)
    app.connect("build-finished", _report)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
