"""The docs build fails on a warning printed by an executed tutorial (issue 42, item 7): the built MiniLM and
your-model tutorials showed tqdm's "TqdmWarning: IProgress not found" in a stderr output cell while sphinx's -W
stayed green. scripts/check_docs_outputs.py reads the cell outputs of the tutorial pages (myst-nb's
``<div class="output stderr ...">`` and ``"output stream"``); scripts/build_docs.sh runs it after sphinx."""

from __future__ import annotations

import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_docs_outputs", ROOT / "scripts" / "check_docs_outputs.py")
cdo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cdo)

# the shape of myst-nb's output: a cell's input, then its outputs (stdout, stderr, html) in a container
CELL = """<div class="cell docutils container">
<div class="cell_input docutils container">
<div class="highlight-ipython3 notranslate"><div class="highlight"><pre><span></span>
<span class="kn">import</span> warnings  # Warning: in the input is no output
</pre></div>
</div>
</div>
<div class="cell_output docutils container">
{outputs}
</div>
</div>
<p>The text around the cells may say Warning: freely.</p>
"""
STREAM = ('<div class="output stream highlight-myst-ansi notranslate"><div class="highlight"><pre><span></span>'
          "{text}\n</pre></div>\n</div>")
STDERR = ('<div class="output stderr highlight-myst-ansi notranslate"><div class="highlight"><pre><span></span>'
          "{text}\n</pre></div>\n</div>")
TQDM = ("/venv/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress not found. Please update "
        "jupyter and ipywidgets.\n  from .autonotebook import tqdm as notebook_tqdm")
BAR = "Loading weights: 100%|\u2588\u2588\u2588\u2588| 103/103 [00:00&lt;00:00, 8021.19it/s]"


def _page(*outputs: str) -> str:
    return "<html><body>\n" + CELL.format(outputs="\n".join(outputs)) + "</body></html>\n"


def _site(tmp_path: pathlib.Path, **pages: str) -> pathlib.Path:
    (tmp_path / "tutorials").mkdir()
    for name, text in pages.items():
        (tmp_path / "tutorials" / f"{name}.html").write_text(text, encoding="utf-8")
    return tmp_path


def test_a_clean_page_passes_its_progress_bar_and_prose_included(tmp_path, capsys):
    page = _page(STREAM.format(text="{'forward': 1.8, 'total': 73.0} seconds"), STDERR.format(text=BAR))
    assert cdo.warnings_in(page) == []
    assert cdo.main([str(_site(tmp_path, clean=page))]) == 0
    assert "no warning" in capsys.readouterr().out


def test_a_stderr_warning_fails_naming_the_page_and_the_line(tmp_path, capsys):
    page = _page(STDERR.format(text=TQDM), STREAM.format(text="done"))
    site = _site(tmp_path, clean=_page(STREAM.format(text="ok")), warned=page)
    assert cdo.main([str(site)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1, out
    line = next(k for k, text in enumerate(page.splitlines(), 1) if "TqdmWarning" in text)
    assert out[0].startswith(f"tutorials/warned.html:{line}: ") and "TqdmWarning: IProgress not found" in out[0]


def test_every_kind_of_warning_line_is_found_in_any_output():
    for text in ["x.py:3: DeprecationWarning: old", "UserWarning: loc='best'", "Warning: the kernel restarted",
                 "WARNING:root:slow", "[IPKernelApp] WARNING | Unknown error in handling startup files"]:
        assert [t for _, t in cdo.warnings_in(_page(STDERR.format(text=text)))] == [text], text
        assert [t for _, t in cdo.warnings_in(_page(STREAM.format(text=text)))] == [text], text


def test_no_tutorial_page_is_an_error_not_a_pass(tmp_path, capsys):
    assert cdo.main([str(tmp_path)]) == 2
    assert "build the docs first" in capsys.readouterr().err


def test_the_docs_build_runs_the_check_and_ci_installs_the_docs_extra():
    build = (ROOT / "scripts" / "build_docs.sh").read_text(encoding="utf-8")
    sphinx = build.index("-m sphinx")
    assert re.search(r'\n"\$PY" "\$ROOT/scripts/check_docs_outputs\.py"', build[sphinx:]), build
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    setup = re.search(r"bash scripts/setup\.sh (\S+)", ci)
    assert setup and "docs" in setup.group(1).split(","), setup
    assert ci.index("scripts/setup.sh") < ci.index("scripts/build_docs.sh")
