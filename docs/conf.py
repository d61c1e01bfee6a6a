"""Sphinx configuration of the attnsvm documentation.

Why Sphinx (and not MkDocs): the library's docstrings are numpy style, which Sphinx reads
natively (napoleon) and turns into an API reference with autodoc/autosummary; and MyST-NB
executes the text-stored notebooks (the tutorials, the theory page's figure) during the
build, so every output shown was produced by the code of this checkout. MkDocs has neither
natively (mkdocstrings and a notebook plugin would be two more dependencies).

Build: ``bash scripts/build_docs.sh`` (warnings are errors; output in docs/_build/html).

Generated at build time, never edited by hand (both git-ignored):

* ``docs/_generated/``: the output of ``attnsvm --help`` and of each subcommand's
  ``--help`` (``_ext/cli_help.py``), included by ``guide/cli.md``;
* ``docs/api/generated/``: one page per public module (``_ext/api_pages.py``), listing
  every name of the module's ``__all__``; an object re-exported elsewhere (the lazy
  facade ``attnsvm``, ``attnsvm.experiments``) is documented once, at its home, and linked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent / "src"))
# the machine building the docs may be shared: one BLAS / OpenMP thread (notebook kernels inherit it)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import attnsvm  # noqa: E402

project = "attnsvm"
author = "the attnsvm authors"
copyright = "the attnsvm authors"
release = version = attnsvm.__version__

extensions = [
    "myst_nb",  # provides myst_parser
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax copied into _static: formulas render without a CDN
    "notebook_times",  # _ext/: one line per executed notebook with its execution time
    "cli_help",  # _ext/: docs/_generated/*.txt from `python -m attnsvm ... --help`
    "api_pages",  # _ext/: docs/api/generated/*.rst from each public module's __all__
    "api_math",  # _ext/: the docstrings' ASCII formulas (``x^T W z >= 1``) rendered as math in the API pages
    "kernel_transport",  # _ext/: the notebooks' kernels talk over IPC, not unencrypted TCP (no IPKernelApp warning)
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", "_generated"]
root_doc = "index"

# ----------------------------------------------------------------- MyST / MyST-NB
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "force"  # every notebook runs on every build that reads it
nb_execution_raise_on_error = True  # a failing cell fails the build
nb_execution_timeout = 600  # seconds per cell
nb_execution_show_tb = True  # print the traceback of a failing cell in the build log
if os.environ.get("ATTNSVM_DOCS_SKIP_TUTORIALS"):  # quick iterations: tutorials shown without outputs
    nb_execution_excludepatterns = ["tutorials/*"]

# ------------------------------------------------------------ autodoc / napoleon
autosummary_generate = False  # the module pages are written by _ext/api_pages.py
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
# parameter and return types are rendered as text: the docstrings' informal types ("(n, T, d)",
# "TokenProblem with X ...") would otherwise become cross-references to ambiguous names such as v or W
napoleon_use_rtype = False
napoleon_use_param = False

# -------------------------------------------------------------------------- HTML
html_theme = "furo"
html_title = f"attnsvm {release}"
html_static_path = ["_static"]
# furo's content column is a fixed 46em with no theme option for it; _static/wide.css widens it on
# screens that show the sidebar (code, outputs and the display formulas then fit)
html_css_files = ["wide.css"]
