"""docs/_ext/api_math.py: the docstrings' ASCII formulas become math in the API pages, code stays code."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "docs" / "_ext"))
api_math = pytest.importorskip("api_math")


@pytest.mark.parametrize("ascii_, latex", [
    ("(x_a - x_b)^T W z >= rhs", r"(x_a - x_b)^\top W z \ge \mathrm{rhs}"),
    ("<A, B> / (||A|| ||B||)", r"\langle A, B \rangle / (\|A\| \|B\|)"),
    ("(||W||_* - rhs^T lam) / max(1, ||W||_*)", r"(\|W\|_* - \mathrm{rhs}^\top \lambda) / \max(1, \|W\|_*)"),
    ("G = sum_it c_it x_it z_i^T", r"G = \sum_{it} c_{it} x_{it} z_i^\top"),
    ("0 <= lam <= C", r"0 \le \lambda \le C"),
    ("gamma[i, t] = Y_i v^T x_it", r"\gamma[i, t] = Y_i v^\top x_{it}"),
    ("u_k^T W w_k >= rhs_k", r"u_k^\top W w_k \ge \mathrm{rhs}_k"),
])
def test_formulas_become_latex(ascii_, latex):
    assert api_math.is_formula(ascii_)
    assert api_math.to_latex(ascii_) == latex
    assert api_math.convert_line(f"where ``{ascii_}`` holds") == f"where :math:`{latex}` holds"


@pytest.mark.parametrize("code", ['">= 0.4"', "attnsvm.solve_svm(problem)", "norm='fro'", "X", "(n, T, d)", "None",
                                  "min ||W|| subject to u_k^T W w_k >= rhs_k"])
def test_code_stays_code(code):
    assert api_math.convert_line(f"see ``{code}``") == f"see ``{code}``"


def test_literal_blocks_keep_their_text():
    lines = ["Example::", "", "    x_it^T W >= 1", "", "Then ``x^T W z >= 1``."]
    api_math._process(None, "function", "f", None, {}, lines)
    assert lines[2] == "    x_it^T W >= 1" and lines[4] == r"Then :math:`x^\top W z \ge 1`."
