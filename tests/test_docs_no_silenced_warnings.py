"""The tutorials silence no warning (issue 42, item 6): the MiniLM tutorial's first cell hid tqdm's "IProgress not
found" (transformers imports tqdm.auto, which warns in a notebook kernel without ipywidgets); the docs extra now
installs ipywidgets, the cause, and no tutorial filters warnings."""

from __future__ import annotations

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _code_cells(text: str) -> list[str]:
    return re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, flags=re.S)


def test_no_tutorial_filters_warnings():
    silenced = []
    for path in sorted((ROOT / "docs" / "tutorials").glob("*.md")):
        for cell in _code_cells(path.read_text(encoding="utf-8")):
            if re.search(r"warnings\.(filterwarnings|simplefilter)\(\s*['\"]ignore", cell):
                silenced.append(path.name)
    assert not silenced, f"tutorials that silence warnings: {silenced}"


def test_the_docs_extra_installs_what_tqdm_wants_in_a_notebook():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(re.match(r"ipywidgets\b", dep) for dep in extras["docs"]), extras["docs"]
