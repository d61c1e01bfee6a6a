"""Support code for ``attnsvm solve problem.npz [--select opt|FILE] [--norm fro|nuclear] [-o out.npz] [--json]``."""

from __future__ import annotations

import os

import numpy as np

from ..errors import ValidationError
from ..problem import TokenProblem
from .api import solve_gen_svm, solve_svm
from .solution import SVMSolution

__all__ = ["run_solve", "read_selection", "format_solution"]


def read_selection(path: str) -> np.ndarray:
    """Read a selection file: ``.npy``, ``.npz`` (key ``select`` or ``selected``, or a single
    array) or text (integers separated by spaces, commas or newlines).

    Returns an int array (n,) (Att-SVM) or a bool array (n, T) (Gen-SVM).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValidationError(f"--select: no such file: {path!r}")
    try:
        if path.endswith(".npy"):
            arr = np.load(path, allow_pickle=False)
        elif path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as z:
                keys = list(z.files)
                key = "select" if "select" in keys else "selected" if "selected" in keys else (keys[0] if len(keys) == 1 else None)
                if key is None:
                    raise ValidationError(f"--select: {path!r} must hold an array named 'select' or 'selected'")
                arr = z[key]
        else:
            with open(path) as fh:
                text = fh.read().replace(",", " ").split()
            arr = np.array([int(t) for t in text], dtype=np.int64)
    except ValidationError:
        raise
    except (ValueError, OSError) as exc:
        raise ValidationError(f"--select: cannot read {path!r}: {exc}") from None
    return arr


def format_solution(sol: SVMSolution) -> str:
    """A short human-readable report of a solution."""
    c = sol.certificate
    lines = [f"status        {sol.status}", f"formulation   {sol.formulation}", f"norm          {sol.norm}"]
    if sol.feasible:
        lines += [
            f"norm value    {sol.norm_value:.12g}",
            f"min margin    {sol.min_margin:.12g}",
            f"support       {int(sol.support.sum())} of {sol.constraints.N} constraints",
            f"max violation {c.max_violation:.3g}",
            f"stationarity  {c.stationarity_residual:.3g}",
            f"duality gap   {c.duality_gap:.3g}",
        ]
    else:
        lines += [f"certificate   Farkas multipliers on {len(c.offending)} constraints, "
                  f"||sum lam_k u_k w_k^T|| = {c.stationarity_residual:.3g}"]
        lines += [f"  offending   {lab}" for lab in c.offending_labels[:10]]
    return "\n".join(lines)


def run_solve(problem_path, select="opt", norm: str = "fro", output=None, as_json: bool = False) -> str:
    """Solve the SVM of a problem file and return the text to print.

    Parameters
    ----------
    problem_path : path of a ``.npz`` problem written by ``TokenProblem.save``
    select : "opt" / None (optimal tokens) or the path of a selection file
        (int (n,) -> Att-SVM; bool (n, T) -> Gen-SVM)
    norm : "fro" or "nuclear"
    output : optional path of the ``.npz`` solution file to write
    as_json : return a JSON summary instead of the table

    Raises
    ------
    ValidationError (a ValueError) for user errors (bad file, bad selection, bad norm).
    """
    problem = TokenProblem.load(problem_path)
    if select is None or select == "opt":
        sol = solve_svm(problem, None, norm=norm)
    else:
        arr = read_selection(select)
        if arr.ndim == 2 and (arr.dtype == bool or problem.mode != "prompt"):
            sol = solve_gen_svm(problem, arr, norm=norm)
        else:
            sol = solve_svm(problem, arr, norm=norm)
    if output:
        sol.save(output)
    text = sol.to_json() if as_json else format_solution(sol)
    if output and not as_json:
        text += f"\nwritten       {os.fspath(output)}"
    return text
