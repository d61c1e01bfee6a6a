"""Support code for ``attnsvm solve problem.npz [--select opt|FILE] [--norm fro|nuclear] [-o out.npz] [--json]``."""

from __future__ import annotations

import json
import os

import numpy as np

from attnsvm._files import decode_utf8, printable
from attnsvm.errors import ValidationError
from attnsvm.problem import TokenProblem
from attnsvm.svm import CERTIFIED_GAP, CERTIFIED_VIOLATION, SVMSolution, solve_gen_svm, solve_svm

__all__ = ["run_solve", "read_selection_file", "format_solution", "describe_selection", "archive_format",
           "solution_file_summary", "format_solution_summary", "not_an_archive"]


def read_selection_file(path: str) -> np.ndarray:
    """Read a selection file: ``.npy``, ``.npz`` (key ``select`` or ``selected``, or a single
    array) or text (integers separated by spaces, commas or newlines).

    The format is told by the file's first bytes, not its name. Returns an int array (n,)
    (Att-SVM) or a bool array (n, T) (Gen-SVM). Every unreadable file (missing, a folder,
    a path through a file, corrupt, pickled, declaring more data than the memory limit,
    not UTF-8, not integers) raises :class:`ValidationError` naming ``--select`` and the file.
    """
    from attnsvm.npzfile import file_kind, input_file, npz_headers, read_npy, read_npz_arrays, require_file_memory

    path = input_file(path, "--select")
    try:
        kind = file_kind(path)
    except OSError as exc:
        raise ValidationError(f"--select: cannot read {path!r}: {exc.strerror or exc}") from None
    if kind == "npy":
        return read_npy(path, "--select")
    if kind == "npz":
        headers = npz_headers(path, "--select")
        keys = list(headers)
        key = "select" if "select" in keys else "selected" if "selected" in keys else (keys[0] if len(keys) == 1 else None)
        if key is None:
            raise ValidationError(f"--select: {path!r} must hold an array named 'select' or 'selected'")
        require_file_memory(headers[key][2], path, "--select: ", f"array {key!r} of shape {headers[key][0]}")
        return read_npz_arrays(path, [key], "--select")[key]
    if path.endswith((".npy", ".npz")):
        raise ValidationError(f"--select: {path!r} is not a NumPy .npy/.npz file (it does not start with their "
                              "signature); expected .npy, .npz or a text file of integers")
    # text: about 40 bytes of memory per character at most (Python ints, the list, the array)
    require_file_memory(40.0 * os.path.getsize(path), path, "--select: ", "a text file of integers")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ValidationError(f"--select: cannot read {path!r}: {exc.strerror or exc}") from None
    text = decode_utf8(raw, f"--select: {path!r}", "; expected .npy, .npz or integers separated by spaces, commas or "
                       "newlines", ValidationError)
    values = []
    for tok in text.replace(",", " ").split():
        try:
            val = int(tok)
        except ValueError:
            raise ValidationError(f"--select: {path!r} holds {tok[:40]!r}, expected integers separated by spaces, "
                                  "commas or newlines") from None
        if not -2**63 <= val < 2**63:
            raise ValidationError(f"--select: {path!r} holds the integer {tok[:40]}, outside the 64-bit range")
        values.append(val)
    return np.array(values, dtype=np.int64)


def format_solution(sol: SVMSolution) -> str:
    """A short human-readable report of a solution."""
    c = sol.certificate
    status = sol.status
    if status == "optimal_inaccurate":
        status += " (the certificate does not pass: see max violation and duality gap)"
    lines = [f"status        {status}", f"formulation   {sol.formulation}", f"norm          {sol.norm}"]
    if sol.feasible:
        lines += [
            f"norm value    {sol.norm_value:.12g}",
            f"min margin    {sol.min_margin:.12g}",
            f"support       {int(sol.support.sum())} of {sol.constraints.N} constraints",
            f"max violation {c.max_violation:.3g} (relative: backward error of the rows)",
            f"stationarity  {c.stationarity_residual:.3g} (relative)",
            f"duality gap   {c.duality_gap:.3g} (relative; certified: <= {CERTIFIED_GAP.get(sol.norm, 1e-8):g}, "
            f"violation <= {CERTIFIED_VIOLATION:g})",
        ]
    elif status == "undecided" and "farkas_unproven" in sol.info:
        lines += [f"certificate   none: Farkas multipliers (relative residual {sol.info['farkas_residual']:.3g}) "
                  f"that do not verify in exact arithmetic ({sol.info['farkas_unproven']})",
                  f"norm bound    every W satisfying the rows has ||W||_F >= {c.norm_lower_bound:.6g}"]
    elif status == "undecided":
        lines += [f"certificate   none: the working set stopped ({sol.info.get('stopped', 'early')}) before it found "
                  "a W satisfying every row or a Farkas certificate",
                  f"max violation {c.max_violation:.3g} (relative, of the last subset's W)"]
    else:
        lines += [f"certificate   Farkas multipliers on {len(c.offending)} constraints, "
                  f"relative ||sum lam_k u_k w_k^T|| = {c.stationarity_residual:.3g}"]
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
    if output:
        from attnsvm.npzfile import output_file

        reads = [problem_path] + ([select] if select not in (None, "opt") and isinstance(select, (str, os.PathLike)) else [])
        output = output_file(output, "--output", "solution file", inputs=reads)
    problem = TokenProblem.load(problem_path)
    arr = None
    if select is None or select == "opt":
        sol = solve_svm(problem, None, norm=norm)
    else:
        arr = read_selection_file(select)
        if arr.ndim == 2 and (arr.dtype == bool or problem.mode != "prompt"):
            sol = solve_gen_svm(problem, arr, norm=norm)
        else:
            if arr.dtype != bool and np.issubdtype(arr.dtype, np.number) and np.any(arr < 0):
                # a file names tokens 0 .. T-1; the API's python-style -1 (the last token) would hide a typo
                raise ValidationError(f"select holds token index {arr[arr < 0].ravel()[0]}, outside [0, {problem.T})")
            sol = solve_svm(problem, arr, norm=norm)
    what, optimality = describe_selection(problem, select, arr, sol, norm)
    if output:
        sol.save(output)
    if as_json:
        data = json.loads(sol.to_json())
        data.update(selection=what, optimality=optimality)
        return json.dumps(data, indent=2)
    text = f"selection     {printable(what)}\noptimality    {optimality}\n" + format_solution(sol)
    if output:
        text += f"\nwritten       {printable(os.fspath(output))}"
    return text


def _tokens(values) -> str:
    values = [int(v) for v in np.asarray(values).ravel()]
    shown = ", ".join(map(str, values[:12]))
    return f"[{shown}{', ...' if len(values) > 12 else ''}]"


def describe_selection(problem, select, arr, sol: SVMSolution, norm: str) -> tuple[str, str]:
    """``(which selection was solved, its optimality)`` in words, for ``attnsvm solve``.

    Parameters
    ----------
    problem : TokenProblem (n, T, d)
    select : "opt" / None or the selection file's path
    arr : None (optimal tokens) or the selection read from the file: (n,) int or (n, T) bool
    sol : the SVM solution of that selection

    The optimality of one token per sample (Att-SVM) follows the papers: *globally optimal*
    when every selected token has the sample's highest score ``Y_i v^T x_it``, *locally
    optimal* when the SVM is certified and every selected token scores strictly higher than
    each of its support tokens (:func:`attnsvm.svm.analysis.is_locally_optimal`), *neither* otherwise.
    It needs labels Y and a head v; sets of tokens (Gen-SVM) have no such notion.
    """
    from attnsvm.svm.analysis import is_locally_optimal

    has_scores = problem.Y is not None and problem.v is not None
    if arr is None:
        if not has_scores:
            return ("the optimal tokens (Att-SVM)", "not defined (the problem has no labels Y or head v)")
        opt = problem.optimal_tokens()
        what = f"the optimal token of each sample (Att-SVM): {_tokens(opt.index)}"
        ties = int(np.sum(opt.has_tie))
        note = f"; {ties} sample(s) have a tied optimal token" if ties else ""
        return what, f"globally optimal (by construction: each sample's highest-scoring token{note})"
    if arr.ndim == 2:
        sizes = np.asarray(arr, bool).sum(axis=1) if arr.dtype == bool else None
        size_text = f", {int(sizes.min())} to {int(sizes.max())} tokens per sample" if sizes is not None else ""
        return (f"sets of tokens from {os.fspath(select)} (Gen-SVM, {arr.shape[0]} samples{size_text})",
                "not assessed (global and local optimality are defined for one token per sample)")
    what = f"tokens from {os.fspath(select)} (Att-SVM): {_tokens(arr)}"
    if not has_scores:
        return what, "not defined (the problem has no labels Y or head v)"
    opt = problem.optimal_tokens()
    if arr.shape == (problem.n,) and np.all(opt.tied[np.arange(problem.n), arr]):
        return what, "globally optimal (every selected token has its sample's highest score)"
    if not sol.feasible:
        return what, "neither (the selection is not separable: its SVM is infeasible)"
    if sol.status != "optimal":
        return what, "not determined (the SVM's certificate did not pass, so its support tokens are uncertain)"
    if is_locally_optimal(problem, arr, norm=norm, solution=sol):
        return what, "locally optimal (each selected token scores above all of its support tokens), not global"
    return what, "neither (a support token scores at least as high as the selected token of its sample)"


#: what ``attnsvm info`` reads, said when it is given another kind of file
INFO_READS = ("info reads the .npz archives that 'attnsvm generate -o' (problems) and 'attnsvm solve -o' "
              "(solutions) write, or TokenProblem.save / SVMSolution.save")


def not_an_archive(path: str) -> str | None:
    """None when ``path`` starts like a NumPy file (.npz or .npy); else the one-line error ``attnsvm info``
    gives, naming what the file looks like (:func:`attnsvm.npzfile.file_description`), e.g.
    "probe.csv is a CSV table; info reads the .npz archives ..."."""
    from attnsvm.npzfile import file_description, file_kind, input_file

    path = input_file(path)
    try:
        kind = file_kind(path)
    except OSError as exc:
        raise ValidationError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    if kind != "other":
        return None
    what = file_description(path)
    return f"{printable(path)} is {what if what.startswith('not ') else what + ', not an .npz archive'}; {INFO_READS}"


def archive_format(path: str) -> str | None:
    """The ``format`` tag of an .npz archive (``"attnsvm.TokenProblem"``, ``"attnsvm.SVMSolution"``), or None
    when it has none or is no .npz archive; reads only that member (a ProblemFileError for a file that is no readable archive)."""
    from attnsvm.npzfile import file_kind, input_file, npz_headers, read_npz_arrays

    path = input_file(path)
    if file_kind(path) != "npz":
        return None
    headers = npz_headers(path)
    if "format" not in headers or headers["format"][2] > 1 << 16:
        return None
    tag = read_npz_arrays(path, ["format"])["format"]
    return str(tag) if tag.shape == () and tag.dtype.kind == "U" else None


def solution_file_summary(path: str) -> dict:
    """The summary a solution file stores (:meth:`attnsvm.svm.SVMSolution.to_dict`, written by ``solve -o``),
    plus ``file``. Raises :class:`attnsvm.errors.ProblemFileError` when the file is no solution file."""
    from attnsvm.errors import ProblemFileError
    from attnsvm.npzfile import read_npz

    def check(data):
        fmt = data.get("format")
        if fmt is None or fmt.shape != () or str(fmt) != SVMSolution.FORMAT:
            raise ProblemFileError(f"{path!r} is not an attnsvm solution file (missing format tag {SVMSolution.FORMAT!r})")

    data = read_npz(path, first=("format", "summary_json"), check_first=check)
    raw = data.get("summary_json")
    try:
        # + 0.0: no -0.0 (files written before solutions' JSON dropped the sign of zero)
        summary = json.loads(str(raw), parse_float=lambda t: float(t) + 0.0) \
            if raw is not None and raw.shape == () else None
    except ValueError:
        summary = None
    if not isinstance(summary, dict):
        raise ProblemFileError(f"{path!r} is a solution file without a readable summary (summary_json)")
    return {"file": os.fspath(path), **summary}


def format_solution_summary(summary: dict) -> str:
    """The text ``attnsvm info`` prints for a solution file (from :func:`solution_file_summary`)."""
    def num(key, source=summary):
        v = source.get(key)
        return "n/a" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)

    cert = summary.get("certificate") if isinstance(summary.get("certificate"), dict) else {}
    shape = summary.get("solution_shape")
    lines = [f"solution      {printable(summary['file'])} (written by 'attnsvm solve -o')",
             f"status        {printable(str(summary.get('status')))}",
             f"formulation   {printable(str(summary.get('formulation')))}",
             f"norm          {printable(str(summary.get('norm')))}",
             f"norm value    {num('norm_value')}",
             f"min margin    {num('min_margin')}",
             f"support       {num('n_support')} of {num('n_constraints')} constraints",
             f"max violation {num('max_violation', cert)} (relative)",
             f"duality gap   {num('duality_gap', cert)} (relative)"]
    if isinstance(shape, list):
        lines.append(f"solution      shape {' x '.join(str(int(k)) for k in shape)}")
    return "\n".join(lines)
