"""The layer contract of ../shared/DESIGN.md, read from the source: no upward import, no import loop.

Every ``import`` / ``from ... import`` of an attnsvm module is an edge, wherever it is written
(module level or inside a function: a lazy import is still a dependency), and so is
``importlib.import_module("attnsvm....")`` with a literal name. Layers, lowest first, are
``LAYERS`` below; a module may import its own layer or lower ones. Within a layer any import is
allowed as long as the module graph has no cycle.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

#: (layer, module prefixes), lowest first; the most specific prefix wins
LAYERS = [
    ("base", ["attnsvm.errors", "attnsvm._files", "attnsvm._validate", "attnsvm._html", "attnsvm.npzfile",
              "attnsvm.memory", "attnsvm.plotting"]),
    ("data", ["attnsvm.tokens", "attnsvm.problem", "attnsvm.generators", "attnsvm.language"]),
    ("svm", ["attnsvm.svm"]),
    ("training", ["attnsvm.training"]),
    ("metrics", ["attnsvm.metrics"]),
    ("facade", ["attnsvm"]),  # the package's own __init__: re-exports the layers below, training lazily
    ("real", ["attnsvm.real"]),
    ("experiments", ["attnsvm.experiments"]),
    ("runner", ["attnsvm.runner", "attnsvm.report"]),
    ("cli", ["attnsvm.cli", "attnsvm.__main__"]),
]

#: the only imports that run up the layers, each with its reason
ALLOWED_UPWARD = {
    ("attnsvm", "attnsvm.real.probe"): "attnsvm.probe, the notebook entry point, imported on first use (PEP 562)",
}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted((SRC / "attnsvm").rglob("*.py"))}


def _resolve(name: str, modules) -> str | None:
    """The longest attnsvm module that ``name`` (a module or a name inside one) refers to."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: pathlib.Path, modules) -> set[str]:
    """attnsvm modules that ``module`` imports anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] or [base]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            targets = [node.args[0].value]
        else:
            continue
        for t in targets:
            if t == "attnsvm" or t.startswith("attnsvm."):
                hit = _resolve(t, modules)
                if hit and hit != module:
                    found.add(hit)
    return found


def layer_of(module: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank is not None, f"{module} belongs to no layer: add it to LAYERS in tests/test_layers.py"
    return rank


def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def upward_imports(g) -> list[str]:
    bad = []
    for m, targets in g.items():
        for t in targets:
            if layer_of(t) > layer_of(m) and (m, t) not in ALLOWED_UPWARD:
                bad.append(f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})")
    return sorted(bad)


def cycles(g) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def _without_facade(g):
    """Edges into the ``attnsvm`` facade are not followed for cycles: importing any submodule runs it first anyway."""
    return {m: {t for t in ts if t != "attnsvm"} for m, ts in g.items()}


def test_every_module_has_a_layer():
    for m in _modules():
        layer_of(m)


def test_no_module_imports_a_higher_layer():
    bad = upward_imports(graph())
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)


def test_no_import_loops():
    loops = cycles(_without_facade(graph()))
    assert not loops, "import loops:\n" + "\n".join(" <-> ".join(c) for c in loops)


def test_only_the_facade_and_the_top_layers_use_the_facade():
    """Lower layers import the module that defines a name, never ``attnsvm`` itself (which imports them)."""
    g = graph()
    users = sorted(m for m, ts in g.items() if "attnsvm" in ts and layer_of(m) < layer_of("attnsvm"))
    assert not users, f"modules below the facade import attnsvm: {users}"


def test_allowed_exceptions_are_still_needed():
    g = graph()
    stale = [pair for pair in ALLOWED_UPWARD if pair[1] not in g.get(pair[0], ())]
    assert not stale, f"ALLOWED_UPWARD lists imports that no longer exist: {stale}"


# ------------------------------------------------------------------ the contract can fail


def test_an_upward_import_is_reported(tmp_path):
    g = graph()
    g["attnsvm.svm.api"] = set(g["attnsvm.svm.api"]) | {"attnsvm.training.train"}
    assert any("attnsvm.svm.api (svm) imports attnsvm.training.train" in b for b in upward_imports(g))


def test_a_loop_is_reported():
    g = graph()
    g["attnsvm.tokens"] = set(g["attnsvm.tokens"]) | {"attnsvm.problem"}
    assert ["attnsvm.problem", "attnsvm.tokens"] in cycles(_without_facade(g))


def test_lazy_and_relative_imports_are_edges(tmp_path):
    pkg = tmp_path / "attnsvm" / "svm"
    pkg.mkdir(parents=True)
    f = pkg / "x.py"
    f.write_text("def f():\n    from ..training import train\n    import importlib\n"
                 "    importlib.import_module('attnsvm.metrics')\n", encoding="utf-8")
    modules = {"attnsvm.svm.x": f, "attnsvm.training": None, "attnsvm.training.train": None,
               "attnsvm.metrics": None, "attnsvm": None, "attnsvm.svm": None}
    global SRC
    old, SRC = SRC, tmp_path
    try:
        assert imports_of("attnsvm.svm.x", f, modules) == {"attnsvm.training.train", "attnsvm.metrics"}
    finally:
        SRC = old


@pytest.mark.parametrize("module", ["attnsvm.svm.api", "attnsvm.problem", "attnsvm.training.train"])
def test_known_modules_sit_where_design_puts_them(module):
    names = [n for n, _ in LAYERS]
    assert names.index(LAYERS[layer_of(module)][0]) == {"attnsvm.svm.api": 2, "attnsvm.problem": 1,
                                                        "attnsvm.training.train": 3}[module]


#: the public submodules of the solver package (the helpers around the solvers, out of ``svm.__all__`` since 0.2)
PUBLIC_SVM_MODULES = {"attnsvm.svm.analysis", "attnsvm.svm.language", "attnsvm.svm.farkas", "attnsvm.svm.gen_ties"}


def test_higher_layers_use_the_public_solver_package():
    """Outside ``attnsvm.svm`` the solvers are reached through the package (``from attnsvm.svm import ...``)
    and its public submodules :data:`PUBLIC_SVM_MODULES`."""
    g = graph()
    private = sorted(f"{m} imports {t}" for m, ts in g.items() if not m.startswith("attnsvm.svm")
                     for t in ts if t.startswith("attnsvm.svm.") and t not in PUBLIC_SVM_MODULES)
    assert not private, "imports of private solver modules:\n" + "\n".join(private)


# ------------------------------------------------------------------ torch in the solver layer

#: the only module of the solver layer that may import torch: the device backend of the nuclear IPM,
#: itself imported only when a device is asked for (tests/test_torch_free.py)
TORCH_IN_SVM = {"attnsvm.svm.torch_backend"}


def torch_importers(prefix: str) -> set[str]:
    """Modules under ``prefix`` whose source imports torch anywhere (module level or in a function)."""
    out = set()
    for m, p in _modules().items():
        if not (m == prefix or m.startswith(prefix + ".")):
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), str(p))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "torch" or n.startswith("torch.") for n in names):
                out.add(m)
    return out


def test_only_the_device_backend_imports_torch_in_the_solver_layer():
    assert torch_importers("attnsvm.svm") == TORCH_IN_SVM


def test_a_torch_import_in_the_solver_layer_is_reported(tmp_path):
    pkg = tmp_path / "attnsvm" / "svm"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("def f():\n    import torch.linalg\n", encoding="utf-8")
    global SRC
    old, SRC = SRC, tmp_path
    try:
        assert torch_importers("attnsvm.svm") == {"attnsvm.svm.x"}
    finally:
        SRC = old
