"""Fail when an executed tutorial's page shows a warning in a cell's output (issue 42, item 7).

    python scripts/check_docs_outputs.py [HTML_DIR]      (default docs/_build/html; run by scripts/build_docs.sh)
    python scripts/check_docs_outputs.py --sphinx-log LOG   (the build's log; run by scripts/build_docs.sh)

Sphinx's ``-W`` catches warnings of the build itself, not what a notebook cell printed while it ran: myst-nb
writes a cell's stderr into ``<div class="output stderr ...">`` (and its stdout into ``"output stream"``), so a
``TqdmWarning: IProgress not found`` or a ``DeprecationWarning`` raised in a tutorial lands on the published page
with the build still green. This script reads every page under ``tutorials/`` and prints ``page:line: text``
for each output line that names a warning (``SomethingWarning``, ``Warning:``, ``WARNING``, ``IPKernelApp``),
the line being the HTML file's; it exits 1 when there is one, 0 otherwise, 2 when there is no page to read.
Progress bars and other stderr text that names no warning pass.

With ``--sphinx-log LOG`` it reads the log of the build instead (sphinx's stdout and stderr, which the notebook
kernels inherit) and prints ``log:line: text`` for each line where a kernel warned (``[IPKernelApp] WARNING``,
``ERROR`` or ``CRITICAL``, e.g. ipykernel's "Kernel is running over TCP without encryption", which
docs/_ext/kernel_transport.py prevents by running the kernels over IPC); exit 1 when there is one, 2 when the
log cannot be read.
"""

from __future__ import annotations

import html.parser
import pathlib
import re
import sys

# a line of a cell's output that is a warning: a Python warning category ("TqdmWarning", "UserWarning: ..."),
# "Warning:", a logging "WARNING", or Jupyter's kernel app warning about its configuration ("IPKernelApp")
WARNING_LINE = re.compile(r"\b[A-Z]\w*Warning\b|\bWarning:|\bWARNING\b|IPKernelApp")


class _Outputs(html.parser.HTMLParser):
    """The text of every ``<div class="output ...">`` as (HTML line, text line) pairs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[tuple[int, str]] = []
        self._depth = 0  # open divs inside the current output div (0: not in one)

    def handle_starttag(self, tag, attrs):
        if tag != "div":
            return
        if self._depth:
            self._depth += 1
        elif "output" in (dict(attrs).get("class") or "").split():
            self._depth = 1

    def handle_endtag(self, tag):
        if tag == "div" and self._depth:
            self._depth -= 1

    def handle_data(self, data):
        if not self._depth:
            return
        first = self.getpos()[0]
        for k, text in enumerate(data.split("\n")):
            if text.strip():
                self.lines.append((first + k, text.strip()))


def warnings_in(page: str) -> list[tuple[int, str]]:
    """The (line, text) of each warning line in the cell outputs of one HTML page's text."""
    parser = _Outputs()
    parser.feed(page)
    parser.close()
    return [(line, text) for line, text in parser.lines if WARNING_LINE.search(text)]


def check(html_dir: pathlib.Path) -> list[str]:
    """``page:line: text`` for each warning in the outputs of the tutorials under ``html_dir``."""
    pages = sorted((html_dir / "tutorials").glob("*.html"))
    if not pages:
        raise FileNotFoundError(f"no tutorial page under {html_dir / 'tutorials'}: build the docs first")
    found = []
    for page in pages:
        for line, text in warnings_in(page.read_text(encoding="utf-8")):
            found.append(f"{page.relative_to(html_dir)}:{line}: {text}")
    return found


# a line of the build's log where a notebook's kernel (ipykernel's IPKernelApp) logged a warning or an error
KERNEL_LINE = re.compile(r"\[IPKernelApp\] (?:WARNING|ERROR|CRITICAL)\b")


def check_log(log: pathlib.Path) -> list[str]:
    """``log:line: text`` for each line of the build's log ``log`` where a notebook kernel warned."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return [f"{log.name}:{k}: {text.strip()}" for k, text in enumerate(lines, 1) if KERNEL_LINE.search(text)]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--sphinx-log"]:
        if len(args) != 2:
            print("usage: check_docs_outputs.py --sphinx-log LOG", file=sys.stderr)
            return 2
        log = pathlib.Path(args[1])
        find, none, some = (lambda: check_log(log), f"no notebook kernel warning in the build log {log}",
                            f"notebook kernel warning(s) in the build log {log}")
    else:
        html_dir = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parents[1] / "docs/_build/html")
        find, none, some = (lambda: check(html_dir), f"no warning in the outputs of {html_dir / 'tutorials'}",
                            "warning line(s) in the executed tutorials' outputs")
    try:
        found = find()
    except OSError as exc:  # no tutorial page (FileNotFoundError, "build the docs first"), an unreadable log
        print(f"check_docs_outputs: {exc}", file=sys.stderr)
        return 2
    for item in found:
        print(item)
    if found:
        print(f"check_docs_outputs: {len(found)} {some}", file=sys.stderr)
        return 1
    print(f"check_docs_outputs: {none}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
