"""Write the command line's help texts into docs/_generated/ at build time.

Runs ``python -m attnsvm --help`` and ``python -m attnsvm COMMAND --help`` for every
command listed under "Commands:" (with the Python that runs Sphinx, 80 columns), writes
``_generated/attnsvm.txt`` and ``_generated/attnsvm-COMMAND.txt``, and
``_generated/cli_commands.md``: one section per command with its help
``{literalinclude}``-ed, included by ``guide/cli.md``; and the output of ``attnsvm list``
(``_generated/attnsvm-list-output.txt``, the registered experiments). So the documented options
and experiments are the code's, and a new command appears without editing the docs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sphinx.errors import ExtensionError


def _attnsvm(args: list[str]) -> str:
    env = dict(os.environ, COLUMNS="80", TERM="dumb", NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "attnsvm", *args], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise ExtensionError(f"`python -m attnsvm {' '.join(args)}` failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


def _help(args: list[str]) -> str:
    return _attnsvm([*args, "--help"])


def _commands(main_help: str) -> list[str]:
    names, inside = [], False
    for line in main_help.splitlines():
        if line.strip() == "Commands:":
            inside = True
            continue
        if inside:
            if not line.startswith("  "):
                break
            if not line.startswith("   ") and line.strip():  # continuation lines are indented further
                names.append(line.split()[0])
    if not names:
        raise ExtensionError("no 'Commands:' section in `attnsvm --help`")
    return names


def _write(path: Path, text: str) -> None:
    """Write only when the content changes (an unchanged file does not trigger a re-read)."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def generate(app) -> None:
    out = Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    main_help = _help([])
    _write(out / "attnsvm.txt", main_help)
    sections = []
    for name in _commands(main_help):
        _write(out / f"attnsvm-{name}.txt", _help([name]))
        sections.append(f"### `attnsvm {name}`\n\n```{{literalinclude}} /_generated/attnsvm-{name}.txt\n:language: text\n```\n")
    _write(out / "cli_commands.md", "\n".join(sections))
    _write(out / "attnsvm-list-output.txt", _attnsvm(["list"]))  # the registered experiments (guide/experiments.md)


def setup(app):
    app.connect("builder-inited", generate)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
