"""The test suite's time against an earlier revision's, measured in one run (issue 41: "the test suite (the same
tests) is not slower than at the base commit on the same machine, measured in one run").

Usage: python benchmarks/suite_time.py --baseline-rev REV [--ours-rev REV] [--serial] [--same-source] [--out DIR]
           [-- PYTEST_ARGS ...]
       python benchmarks/suite_time.py --from-xml DIR [--baseline-rev REV]

Both suites run at once by default, each in its own child process (``python -m pytest`` in its own tree, with its
own ``src`` first on PYTHONPATH, one BLAS thread): this checkout's tests on this checkout's code, and REV's tests on
REV's code (a temporary git worktree of REV). Running them side by side gives both the same machine over the same
minutes, which a shared machine's load would otherwise decide (``--serial``: one after the other, ours first).
Printed: each suite's wall and CPU seconds and test count, then the seconds pytest recorded for the tests both
suites passed (the same node ids: "the same tests"; a failed, errored or skipped test is left out), summed, and
the ratio baseline / ours (above 1: ours is faster), and the ten tests whose time moved most. A test whose body was
edited since REV (another assertion, another workload) has the same node id but is not the same test: the sums are
printed again over the tests whose function source (decorators included) is identical at REV and here, read from
git, so that a test that now does more work is not counted as the code being slower (fixtures and the library's
defaults can still differ: the ten largest moves are listed to look at). The JUnit XML files
are kept under ``--out``. The suites share the machine's ports and tmp folders: tests that start a browser or a
Dask cluster can collide when both run at once, and a test's own time limit (``within``) can end a suite on a
machine loaded by the other; ``--serial`` avoids both.
"""

from __future__ import annotations

import argparse
import ast
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _baseline import ROOT, baseline_src, child_env  # noqa: E402


def start(tree: str, xml: str, log: str, pytest_args: list[str]) -> tuple[subprocess.Popen, float]:
    """Start ``python -m pytest`` in ``tree`` on ``tree/src`` writing JUnit XML to ``xml``; (process, start time)."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={xml}", *pytest_args]
    with open(log, "w") as fh:
        # a session of its own: a test that signals its process group (the runner's hostile tests) reaches only
        # its own suite, not the other one running beside it
        # and SIGINT at its default: started from a background job it is inherited ignored, and the runner's tests
        # of Ctrl-C then end the whole suite as interrupted
        proc = subprocess.Popen(cmd, cwd=tree, env=child_env(os.path.join(tree, "src")), stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, time.perf_counter()


def finish(proc: subprocess.Popen, t0: float) -> dict:
    """Wait for ``proc``; its exit code, wall seconds and CPU seconds (its own and its children's, from wait4)."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": proc.returncode, "wall": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime}


def junit_times(xml: str) -> tuple[dict[str, float], int]:
    """Seconds per passed test node id (``classname::name``) from a JUnit XML file, and how many tests did not pass
    (failed, errored or skipped: their seconds say nothing about speed, so "the same tests" leaves them out)."""
    times, other = {}, 0
    for c in ET.parse(xml).getroot().iter("testcase"):
        if any(child.tag in ("failure", "error", "skipped") for child in c):
            other += 1
        else:
            times[f"{c.get('classname')}::{c.get('name')}"] = float(c.get("time") or 0.0)
    return times, other


def test_sources(rev: str | None) -> dict[str, str]:
    """The source of every test function under tests/ at ``rev`` (None: the working tree), by the node id prefix
    JUnit gives it (``tests.test_x::test_name``, parameters left off; a class's methods as
    ``tests.test_x.Class::name``)."""
    if rev is None:
        files = {f: open(os.path.join(ROOT, f), encoding="utf-8").read()
                 for f in sorted(os.listdir(os.path.join(ROOT, "tests"))) for f in [f"tests/{f}"] if f.endswith(".py")}
    else:
        names = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", rev, "tests/"], capture_output=True,
                               text=True, check=True).stdout.split()
        files = {f: subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{f}"], capture_output=True, text=True,
                                   check=True).stdout for f in names if f.endswith(".py")}
    out = {}
    for f, text in files.items():
        mod = f[:-3].replace("/", ".")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
        defs = [(mod, n) for n in tree.body if isinstance(n, funcs)]
        defs += [(f"{mod}.{c.name}", n) for c in tree.body if isinstance(c, ast.ClassDef)
                 for n in c.body if isinstance(n, funcs)]
        for prefix, d in defs:  # the def and its decorators (a changed parametrize is a changed test)
            out[f"{prefix}::{d.name}"] = ast.get_source_segment(text, d) + "".join(
                ast.get_source_segment(text, x) or "" for x in d.decorator_list)
    return out


def same_source_ids(rev: str, ours: str | None = None) -> list[str]:
    """pytest node ids (``tests/test_x.py::name``, every parameter of it) of the test functions whose source is the
    same at ``rev`` and here (or at ``ours``): the tests both suites run with ``--same-source``."""
    then, now = test_sources(rev), test_sources(ours)
    ids = []
    for key in sorted(k for k in now if then.get(k) == now[k]):
        mod, name = key.split("::", 1)
        parts = mod.split(".")
        if not (parts[1].startswith("test_") and name.startswith("test")):
            continue  # helpers and fixtures: not tests (what they changed shows in the tests that use them)
        if len(parts) > 2:  # tests.test_x.Class::method
            ids.append(f"{'/'.join(parts[:2])}.py::{parts[2]}::{name}")
        else:
            ids.append(f"{'/'.join(parts)}.py::{name}")
    return ids


def run_both(args, out: str) -> dict:
    """Run this checkout's suite and the baseline's (at once, or one after the other with ``--serial``); their
    exit codes, wall and CPU seconds by name."""
    with baseline_src(args.baseline_rev) as base_src, baseline_src(args.ours_rev) as ours_src:
        # --ours-rev: a worktree of its own, so that editing or merging in this checkout while the suites run
        # cannot change the code or tests under measurement
        trees = {"ours": os.path.dirname(ours_src) if ours_src else ROOT, "baseline": os.path.dirname(base_src)}
        if args.serial:
            results = {}
            for name, tree in trees.items():
                results[name] = finish(*start(tree, f"{out}/{name}.xml", f"{out}/{name}.log", args.pytest_args))
            return results
        running = {name: start(tree, f"{out}/{name}.xml", f"{out}/{name}.log", args.pytest_args)
                   for name, tree in trees.items()}
        results = {}
        while len(results) < len(running):  # each suite's wall clock when it ends, whichever ends first
            pid, status, ru = os.wait4(-1, 0)
            name = next((n for n, (p, _) in running.items() if p.pid == pid), None)
            if name is not None:
                proc, t0 = running[name]
                proc.returncode = os.waitstatus_to_exitcode(status)
                results[name] = {"rc": proc.returncode, "wall": time.perf_counter() - t0,
                                 "cpu": ru.ru_utime + ru.ru_stime}
        return results


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-rev", metavar="REV", help="the revision whose suite is compared")
    ap.add_argument("--from-xml", metavar="DIR", help="compare the JUnit XML files an earlier run left in DIR "
                                                       "(ours.xml, baseline.xml) instead of running")
    ap.add_argument("--serial", action="store_true", help="run the two suites one after the other, not at once")
    ap.add_argument("--ours-rev", metavar="REV", default=None,
                    help="run our suite from a temporary git worktree of REV (e.g. HEAD) instead of this checkout")
    ap.add_argument("--same-source", action="store_true",
                    help="run only the test functions whose source is the same at REV and here, in both suites "
                         "(the same list, so both run the same tests in the same order)")
    ap.add_argument("--out", default=None, help="where the JUnit XML files and logs go (default: a temporary folder)")
    ap.add_argument("pytest_args", nargs="*", help="passed to both pytest runs (after --)")
    args = ap.parse_args(argv)
    if not (args.baseline_rev or args.from_xml):
        ap.error("give --baseline-rev REV (or --from-xml DIR)")
    if args.from_xml:
        out, results = args.from_xml, {}
    else:
        out = args.out or tempfile.mkdtemp(prefix="attnsvm-suite-")
        os.makedirs(out, exist_ok=True)
        if args.same_source:
            args.pytest_args = [*args.pytest_args, *same_source_ids(args.baseline_rev, args.ours_rev)]
            print(f"--same-source: {len(args.pytest_args)} pytest arguments (test functions unchanged since "
                  f"{args.baseline_rev})", flush=True)
        results = run_both(args, out)
    parsed = {name: junit_times(f"{out}/{name}.xml") for name in ("ours", "baseline")}
    times = {name: t for name, (t, _) in parsed.items()}
    for name, (t, other) in parsed.items():
        r = results.get(name)
        clock = f", exit {r['rc']}, wall {r['wall']:.1f} s, CPU {r['cpu']:.1f} s" if r else ""
        print(f"{name}: {len(t)} tests passed, {other} failed, errored or skipped{clock} (log {out}/{name}.log)")
    common = sorted(set(times["ours"]) & set(times["baseline"]))
    ours, base = (sum(times[n][t] for t in common) for n in ("ours", "baseline"))
    print(f"the same tests ({len(common)} node ids in both): baseline {base:.1f} s, ours {ours:.1f} s, "
          f"baseline / ours {base / ours:.3f}" if ours else "no common tests")
    print(f"only in ours: {len(times['ours']) - len(common)} tests, {max(0.0, sum(times['ours'].values()) - ours):.1f} s; "
          f"only in the baseline: {len(times['baseline']) - len(common)} tests, "
          f"{max(0.0, sum(times['baseline'].values()) - base):.1f} s")
    moved = sorted(common, key=lambda t: abs(times["ours"][t] - times["baseline"][t]), reverse=True)[:10]
    for t in moved:
        print(f"  {times['baseline'][t]:7.2f} s -> {times['ours'][t]:7.2f} s  {t}")
    if args.baseline_rev:
        then, now = test_sources(args.baseline_rev), test_sources(args.ours_rev)
        same = [t for t in common if (k := t.split("[", 1)[0]) in then and then[k] == now.get(k)]
        ours, base = (sum(times[n][t] for t in same) for n in ("ours", "baseline"))
        print(f"the same tests with the same source ({len(same)} of the {len(common)}; the others were edited "
              f"since {args.baseline_rev}): baseline {base:.1f} s, ours {ours:.1f} s, baseline / ours "
              f"{base / ours:.3f}" if ours else "no common test with the same source")
        for t in sorted(same, key=lambda t: abs(times["ours"][t] - times["baseline"][t]), reverse=True)[:10]:
            print(f"  {times['baseline'][t]:7.2f} s -> {times['ours'][t]:7.2f} s  {t}")


if __name__ == "__main__":
    main()
