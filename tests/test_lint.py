"""ruff's checks (settings in pyproject.toml) over the package, the tests, benchmarks and scripts."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("ruff")
    assert exe, "ruff is not installed: pip install -e '.[dev]' installs it"
    return [exe]


def test_ruff_passes():
    out = subprocess.run(_ruff() + ["check", "--no-cache", "src", "tests", "benchmarks", "scripts"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_ruff_fails_on_an_unused_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n", encoding="utf-8")
    out = subprocess.run(_ruff() + ["check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "F401" in out.stdout
