"""Issue 41's limits on the code's shape, so that they hold after it: no function in src/ over 100 lines (an
experiment's ``checks``, a list of claims, excepted), none in svm/, real/ or the runner over 12 parameters (a config
object instead), and no module of svm/ importing another's private name."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "attnsvm"


def _functions():
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(SRC).as_posix(), node


def long_functions(limit: int = 100) -> list:
    return [(f, n.name, n.end_lineno - n.lineno + 1) for f, n in _functions()
            if n.end_lineno - n.lineno + 1 > limit and not (f.startswith("experiments/") and n.name == "checks")]


def many_parameters(limit: int = 12) -> list:
    out = []
    for f, n in _functions():
        if not f.startswith(("svm/", "real/", "runner/")):
            continue
        a = n.args
        k = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
        k -= bool(a.args) and a.args[0].arg in ("self", "cls")
        if k > limit:
            out.append((f, n.name, k))
    return out


def private_imports_in_svm(root: pathlib.Path = SRC / "svm") -> list:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnsvm.svm"):
                out += [(path.name, node.module, a.name) for a in node.names if a.name.startswith("_")]
    return out


def test_no_function_over_100_lines():
    assert long_functions() == []


def test_no_function_of_svm_real_or_runner_over_12_parameters():
    assert many_parameters() == []


def test_no_svm_module_imports_a_private_name_of_another():
    assert private_imports_in_svm() == []


def test_the_limits_find_what_they_look_for(tmp_path):
    (tmp_path / "mod.py").write_text("from attnsvm.svm.ipm.driver import _private\n", encoding="utf-8")
    assert private_imports_in_svm(tmp_path) == [("mod.py", "attnsvm.svm.ipm.driver", "_private")]
    # each scan reports a case it is meant to catch (at a limit the code does exceed somewhere)
    assert long_functions(limit=20) and many_parameters(limit=5)
    assert any(name == "checks" for f, n in _functions() if f.startswith("experiments/")
               for name in [n.name] if n.end_lineno - n.lineno + 1 > 100)
