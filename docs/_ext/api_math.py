"""Formulas in the API pages as math: docstring literals that are formulas become ``:math:`` roles.

The docstrings write formulas in ASCII inside double back-quotes (``(x_a - x_b)^T W z >= rhs``),
readable in a terminal. On ``autodoc-process-docstring`` this extension turns each such literal into
``:math:`` with a conservative ASCII-to-LaTeX translation (:func:`to_latex`); literals that look like
code (quotes, dotted calls, keywords) stay code. ``tests/test_docs_math.py`` checks the translation.
"""

from __future__ import annotations

import re

_LITERAL = re.compile(r"``([^`]+)``")
_CODE = re.compile(r"[\"']|\b(attnsvm|np|torch|self|None|True|False|import|return|def|lambda_)\b|\w\.\w+\(|\.\.\.|::|=\s*$")
_MATHY = re.compile(r"\^T\b|\|\||\bsum_|\b(gamma|lambda|lam|alpha|delta|tau|sigma|eta|xi|beta|mu|rho|theta)\b|"
                    r"_\{|\^\{|[<>]=|\^\d")
_GREEK = ("alpha", "beta", "gamma", "delta", "epsilon", "eta", "theta", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau",
          "phi", "psi", "omega")


_KNOWN = set(_GREEK) | {"sum", "min", "max", "log", "exp", "det", "argmax", "sqrt", "rhs"}


def is_formula(text: str) -> bool:
    """Whether a literal is a formula: math notation, no code markers, no English words (a word of four
    or more letters that is not a Greek letter or an operator keeps the literal as code)."""
    words = [w for w in re.findall(r"(?<![A-Za-z_])[A-Za-z]{4,}(?![A-Za-z])", text) if w not in _KNOWN]
    return bool(_MATHY.search(text)) and not _CODE.search(text) and not words and len(text) <= 120


def to_latex(text: str) -> str:
    """A LaTeX rendering of an ASCII formula: norms, transposes, comparisons, Greek letters, operators,
    multi-letter subscripts, inner products ``<a, b>``."""
    t = text
    t = t.replace("||", r"\|")
    t = re.sub(r"\^T\b", r"^\\top", t)
    t = t.replace("<=", r" \le ").replace(">=", r" \ge ").replace("!=", r" \ne ")
    t = re.sub(r"<([^<>]*,[^<>]*)>", r"\\langle \1 \\rangle", t)
    t = re.sub(r"(?<!\\)\b(" + "|".join(_GREEK) + r")(?![A-Za-z])", r"\\\1", t)
    t = re.sub(r"(?<!\\)\blam(?![A-Za-z])", r"\\lambda", t)
    t = re.sub(r"(?<!\\)\bargmax(?![A-Za-z])", r"\\operatorname{argmax}", t)
    t = re.sub(r"(?<!\\)\b(sum|min|max|log|exp|det)(?![A-Za-z])", r"\\\1", t)
    t = re.sub(r"\bsqrt\(([^()]*)\)", r"\\sqrt{\1}", t)
    t = re.sub(r"(?<!\\)\brhs(?![A-Za-z])", r"\\mathrm{rhs}", t)
    t = re.sub(r"(?<=[A-Za-z0-9)}])_([A-Za-z0-9]{2,})\b", r"_{\1}", t)
    t = t.replace("~", r"\sim ").replace("%", r"\%").replace("#", r"\#").replace("&", r"\&")
    return re.sub(r"\s+", " ", t).strip()


def convert_line(line: str) -> str:
    """One docstring line with its formula literals as ``:math:`` roles."""
    return _LITERAL.sub(lambda m: f":math:`{to_latex(m.group(1))}`" if is_formula(m.group(1)) else m.group(0), line)


def _process(app, what, name, obj, options, lines):
    in_block = False
    for k, line in enumerate(lines):
        stripped = line.strip()
        if stripped.endswith("::") or stripped.startswith(">>>"):
            in_block = True  # literal blocks and doctests keep their text
            continue
        if in_block and stripped and not line.startswith((" ", "\t")):
            in_block = False
        if not in_block:
            lines[k] = convert_line(line)


def setup(app):
    app.connect("autodoc-process-docstring", _process)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
