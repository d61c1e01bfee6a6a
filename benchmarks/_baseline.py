"""Same-run comparison with an earlier revision: the ``--baseline-rev REV`` option of the benchmarks.

``python benchmarks/solvers.py --baseline-rev REV`` (likewise ``probe_scale.py``, ``solvers_scale.py``) runs
every case twice, each time in a child process with one BLAS thread: once on this checkout's ``src`` and once
on the ``src`` of a git worktree of REV (``git worktree add --detach`` in a temporary directory, removed at
the end). The driver code is this checkout's in both children (only ``PYTHONPATH`` differs), so both sides
run the same case through the public API. Printed: both times and the ratio baseline / ours (above 1: this
checkout is faster). Wall times on a shared machine are loaded; the CPU seconds of each child are printed too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OURS = os.path.join(ROOT, "src")


def add_option(ap) -> None:
    """Add ``--baseline-rev REV`` to an argparse parser."""
    ap.add_argument("--baseline-rev", default=None, metavar="REV",
                    help="also run every case on a git worktree of REV (child processes, one thread each) and "
                         "print both times and the ratio")


@contextlib.contextmanager
def baseline_src(rev: str | None):
    """The ``src`` directory of a temporary git worktree of ``rev`` (None: yields None); removed on exit."""
    if rev is None:
        yield None
        return
    # a SIGTERM (e.g. from ``timeout``) unwinds through ``finally`` below, so the worktree is removed
    old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="attnsvm-baseline-")
    tree = os.path.join(tmp, "tree")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", tree, rev], check=True)
    try:
        sha = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        print(f"baseline: {rev} ({sha}) in {tree}", flush=True)
        yield os.path.join(tree, "src")
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=False)
        subprocess.run(["git", "-C", ROOT, "worktree", "prune"], check=False)
        with contextlib.suppress(OSError):
            os.rmdir(tmp)
        signal.signal(signal.SIGTERM, old)


def child_env(src: str, threads: int = 1) -> dict:
    """Environment of a child process: ``src`` first on PYTHONPATH, ``threads`` BLAS / OpenMP threads."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src, HERE] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    return env


def run_child(argv: list, src: str, threads: int = 1, timeout: float | None = None) -> dict:
    """Run ``python argv...`` with ``src`` on the path; the last ``RESULT {json}`` line it prints, plus the
    child's ``wall`` and ``cpu`` seconds (user + system, from the OS), or ``{"error": ...}``."""
    t0 = time.perf_counter()
    r0 = os.times()
    try:
        proc = subprocess.run([sys.executable] + list(argv), capture_output=True, text=True,
                              env=child_env(src, threads), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    r1 = os.times()
    out = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
    if out is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit code {proc.returncode}: {tail}"}
    out["child_wall"] = time.perf_counter() - t0
    out["child_cpu"] = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    return out


def run_pair(argv: list, base: str | None, threads: int = 1) -> tuple[dict, dict | None]:
    """:func:`run_child` of ``argv`` on this checkout and, when ``base`` (a baseline's src) is given, on it:
    ``(ours, theirs)`` (``theirs`` None without a baseline); SystemExit naming the side whose child failed."""
    ours = run_child(argv, OURS, threads)
    if "error" in ours:
        raise SystemExit(f"ours: {ours['error']}")
    theirs = run_child(argv, base, threads) if base else None
    if theirs is not None and "error" in theirs:
        raise SystemExit(f"baseline: {theirs['error']}")
    return ours, theirs


def emit(result: dict) -> None:
    """Print the child's result line (read by :func:`run_child`)."""
    print("RESULT " + json.dumps(result), flush=True)


def ratio(base: float | None, ours: float | None) -> str:
    """``baseline / ours`` as text ("-" when either is missing)."""
    if base is None or ours is None or ours <= 0:
        return "-"
    return f"{base / ours:.2f}x"
