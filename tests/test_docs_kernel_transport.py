"""The docs build runs its notebook kernels without ipykernel's "[IPKernelApp] WARNING | Kernel is running over
TCP without encryption" (issue 42, item 7: six such lines in the build log, one per executed notebook).

docs/_ext/kernel_transport.py makes MyST-NB start its kernels over IPC. The test sets up the extensions
docs/conf.py lists (those in docs/_ext, as Sphinx does: their ``setup(app)``), executes a one-cell notebook with
the function MyST-NB's executor calls, and reads the kernel's stderr (the kernel inherits it). build_docs.sh fails
when the sphinx log shows such a warning (scripts/check_docs_outputs.py --sphinx-log)."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_docs_outputs", ROOT / "scripts" / "check_docs_outputs.py")
cdo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cdo)

#: run in a fresh interpreter: docs/conf.py as Sphinx reads it, its docs/_ext extensions set up, then one notebook
#: executed as MyST-NB's "force" mode executes it (myst_nb.core.execute.direct)
SCRIPT = r"""
import importlib, pathlib, runpy, sys
from unittest import mock

import nbformat

docs, cwd = pathlib.Path(sys.argv[1]), sys.argv[2]
conf = runpy.run_path(str(docs / "conf.py"))
for name in conf["extensions"]:
    if (docs / "_ext" / f"{name}.py").is_file():
        importlib.import_module(name).setup(mock.MagicMock())
from myst_nb.core.execute import direct

nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")],
                              metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}})
# as MyST-NB calls it (the notebook's folder as the kernel's working folder), the start's wait shortened from 60 s
result = direct.single_nb_execution(nb, cwd=cwd, allow_errors=False, timeout=60, meta_override=True,
                                    startup_timeout=20)
assert result.err is None, result.exc_string
print(nb.cells[0].outputs[0]["text"].strip())
"""


def run_notebook_as_the_docs_build(docs: pathlib.Path, build: pathlib.Path, notebook: pathlib.Path):
    """Execute a one-cell notebook the way the docs under ``docs`` configure it, the build running in the folder
    ``build`` and the kernel in ``notebook`` (as build_docs.sh run from the repository executes a tutorial in
    docs/tutorials); its ``CompletedProcess`` (stdout, stderr)."""
    return subprocess.run([sys.executable, "-c", SCRIPT, str(docs), str(notebook)], capture_output=True, text=True,
                          timeout=120, cwd=build)


def test_notebook_kernels_run_without_the_tcp_warning(tmp_path):
    build, notebook = tmp_path / "build", tmp_path / "notebook"
    build.mkdir()
    notebook.mkdir()
    r = run_notebook_as_the_docs_build(ROOT / "docs", build, notebook)
    assert r.returncode == 0 and r.stdout.strip().endswith("42"), r.stdout + r.stderr
    assert "without encryption" not in r.stderr and "[IPKernelApp] WARNING" not in r.stderr, r.stderr
    # the kernel's sockets are in neither working folder (nor left behind)
    assert list(build.iterdir()) == [] and list(notebook.iterdir()) == []


def test_a_kernel_warning_in_the_sphinx_log_fails(tmp_path, capsys):
    log = tmp_path / "sphinx.log"
    log.write_text("reading sources... [ 50%] tutorials/first_direction\n"
                   "[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All communication ...\n"
                   "build succeeded.\n", encoding="utf-8")
    assert cdo.check_log(log) == ["sphinx.log:2: [IPKernelApp] WARNING | Kernel is running over TCP without "
                                  "encryption. All communication ..."]
    assert cdo.main(["--sphinx-log", str(log)]) == 1
    assert "sphinx.log:2: [IPKernelApp] WARNING" in capsys.readouterr().out
    log.write_text("reading sources... [100%] index\nbuild succeeded.\n", encoding="utf-8")
    assert cdo.check_log(log) == [] and cdo.main(["--sphinx-log", str(log)]) == 0


def test_the_docs_build_checks_its_sphinx_log():
    """build_docs.sh copies sphinx's output (stdout and stderr: the kernels write to stderr) to a log as it prints
    it, and runs the check on that log after sphinx."""
    build = (ROOT / "scripts" / "build_docs.sh").read_text(encoding="utf-8")
    run = re.search(r'\n"\$PY" -m sphinx [^\n]*2>&1 \| tee "\$LOG"\n', build)
    assert run, build
    assert re.search(r'\n"\$PY" "\$ROOT/scripts/check_docs_outputs\.py" --sphinx-log "\$LOG"\n', build[run.end():])
    assert "set -euo pipefail" in build  # sphinx's own failure is not hidden by tee
