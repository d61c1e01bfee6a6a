"""Count what the restructuring of issue 27 is measured by (a report, never a test).

Usage: python scripts/structure_counts.py [SRC]   (SRC defaults to src/attnsvm)

Prints, for the package tree:
- training loops: loops over steps in training/ (``for`` over a ``range`` that names ``step``, and
  ``while`` loops whose condition names ``step``), in code, not in docstrings;
- places that build ``Certificate(...)`` and ``SVMSolution(...)`` (call sites, not the classes);
- the size of ``attnsvm.svm.__all__`` (imported from SRC's parent);
- functions over 80 lines, and functions with more than 10 parameters (report only).
Import loops and upward imports: ``python3 ../shared/tools/import_graph.py src attnsvm``.
Repeated code: ``duplicates --repo src --most 200``.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys



def _calls(tree: ast.AST, name: str) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                count += 1
    return count


def main(src: pathlib.Path) -> None:
    files = sorted(src.rglob("*.py"))
    loops, cert, sol, long_funcs, wide_funcs = [], 0, 0, [], []
    for path in files:
        text = path.read_text()
        tree = ast.parse(text)
        rel = path.relative_to(src)
        if rel.parts[0] == "training":
            for node in ast.walk(tree):  # code only (a loop shown in a docstring does not count)
                head = (ast.get_source_segment(text, node.iter) if isinstance(node, ast.For)
                        else ast.get_source_segment(text, node.test) if isinstance(node, ast.While) else None)
                if head is not None and "step" in head and (isinstance(node, ast.While) or "range" in head):
                    loops.append(f"{rel}:{node.lineno}")
        cert += _calls(tree, "Certificate")
        sol += _calls(tree, "SVMSolution")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n_lines = node.end_lineno - node.lineno + 1
                a = node.args
                n_params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                n_params -= 1 if a.args and a.args[0].arg in ("self", "cls") else 0
                if n_lines > 80:
                    long_funcs.append(f"{rel}:{node.name} ({n_lines} lines)")
                if n_params > 10:
                    wide_funcs.append(f"{rel}:{node.name} ({n_params} parameters)")
    code = "import attnsvm.svm as s; print(len(s.__all__))"
    env_path = str(src.parent)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    print(f"training loops: {len(loops)}  {' '.join(loops)}")
    print(f"Certificate(...) call sites: {cert}")
    print(f"SVMSolution(...) call sites: {sol}")
    print(f"svm.__all__: {out.stdout.strip() or out.stderr.strip()[-200:]}")
    print(f"functions over 80 lines: {len(long_funcs)}")
    for f in long_funcs:
        print(f"  {f}")
    print(f"functions with more than 10 parameters: {len(wide_funcs)}")
    for f in wide_funcs:
        print(f"  {f}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src/attnsvm"))
