"""README's test counts are the ones scripts/readme_numbers.py measures (issue 42, item 8). The check collects the
whole suite, so it is marked slow; the script's parsing and rewriting are tested fast."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("readme_numbers", ROOT / "scripts" / "readme_numbers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_the_readme_states_the_measured_counts():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_numbers.py"), "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_script_reads_pytest_and_rewrites_one_sentence():
    mod = _script()
    assert mod.collected("a\ntests/x.py::t\n\n154/1482 tests collected (1328 deselected) in 28.42s\n") == (154, 1482)
    assert mod.collected("7 tests collected in 0.1s") == (7, 7)
    with pytest.raises(ValueError):
        mod.collected("error")
    text = "wheel and the browser; `tests/conftest.py` marks them `slow`: 154 of 1156 tests):\n"
    assert mod.rewrite(text, 156, 1490) == text.replace("154 of 1156", "156 of 1490")
    with pytest.raises(ValueError):
        mod.rewrite(text + text, 1, 2)
