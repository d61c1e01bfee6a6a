"""README's test counts, measured: one ``pytest --collect-only -m slow`` counts the ``slow`` tests and all.

Usage: python scripts/readme_numbers.py [--check]

Without ``--check`` it rewrites README.md's line "``tests/conftest.py`` marks them ``slow``: S of N tests" with the
counts it measures; with ``--check`` it changes nothing and exits 1 when the README's numbers differ (what
``tests/test_readme_numbers.py`` runs). Run it from the repository root with the project's Python, after adding
or removing tests.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: the README's sentence that states the counts
PATTERN = re.compile(r"(marks them `slow`: )(\d+) of (\d+)( tests)")


def collected(output: str) -> tuple[int, int]:
    """``(selected, total)`` from ``pytest --collect-only -m ...`` output: its last line, "S/N tests collected
    (D deselected)", or "N tests collected" when every test is selected."""
    for line in reversed(output.strip().splitlines()):
        m = re.match(r"\s*(\d+)(?:/(\d+))? tests? collected", line)
        if m:
            return int(m.group(1)), int(m.group(2) or m.group(1))
    raise ValueError(f"no 'tests collected' line in pytest's output: {output.strip().splitlines()[-1:]}")


def measure() -> tuple[int, int]:
    """``(slow, total)``: the tests pytest collects in ``tests/`` marked ``slow`` (tests/conftest.py), and all."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", "-m", "slow", "tests"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"pytest --collect-only failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return collected(out.stdout)


def rewrite(text: str, slow: int, total: int) -> str:
    """``text`` (the README) with the counts of its :data:`PATTERN` sentence set to ``slow`` of ``total``."""
    if len(PATTERN.findall(text)) != 1:
        raise ValueError("README.md must state the counts once as \"marks them `slow`: S of N tests\"")
    return PATTERN.sub(lambda m: f"{m.group(1)}{slow} of {total}{m.group(4)}", text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    slow, total = measure()
    text = README.read_text(encoding="utf-8")
    new = rewrite(text, slow, total)
    if check:
        if new != text:
            m = PATTERN.search(text)
            print(f"README.md says {m.group(2)} of {m.group(3)} tests are slow; measured {slow} of {total}: run "
                  "python scripts/readme_numbers.py")
            return 1
        print(f"README.md: {slow} of {total} tests are slow (measured)")
        return 0
    README.write_text(new, encoding="utf-8")
    print(f"README.md: {slow} of {total} tests are slow")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
