"""Write one API page per public module into docs/api/generated/ at build time.

The public names of a module are its ``__all__``, or, without one, the functions and
classes it defines whose names do not start with ``_``. Every object is documented once,
at its *home*: the longest documented module name that is a prefix of the object's
``__module__`` (or equal to it) and exports the object (by identity). A module that
re-exports an object documented elsewhere (the lazy facade ``attnsvm``, the packages
``attnsvm.experiments`` and ``attnsvm.real``) lists it with a link to its home, so no object
is described twice. Constants are documented where they are listed.

Each page: the module docstring (``automodule``), a summary table of the names defined
there (``autosummary``), a table of re-exported names with links, then ``autofunction`` /
``autoclass`` / ``autoexception`` / ``autodata`` for each name defined there.

``api/index.md`` holds the toctree of these pages: a module added to ``MODULES`` without an
index entry fails the build (a document in no toctree is a warning, and warnings are errors).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from pathlib import Path

from sphinx.errors import ExtensionError
from sphinx.pycode import ModuleAnalyzer

#: documented modules, in layer order
MODULES = [
    "attnsvm",
    "attnsvm.errors",
    "attnsvm.memory",
    "attnsvm.tokens",
    "attnsvm.problem",
    "attnsvm.generators",
    "attnsvm.language",
    "attnsvm.svm",
    "attnsvm.svm.analysis",
    "attnsvm.svm.language",
    "attnsvm.svm.farkas",
    "attnsvm.svm.gen_ties",
    "attnsvm.training",
    "attnsvm.training.models",
    "attnsvm.training.language_model",
    "attnsvm.training.prompt",
    "attnsvm.metrics",
    "attnsvm.real",
    "attnsvm.real.digits",
    "attnsvm.real.sentences",
    "attnsvm.real.pretrained",
    "attnsvm.real.minilm",
    "attnsvm.real.adapters",
    "attnsvm.real.cache",
    "attnsvm.real.nulls",
    "attnsvm.real.verdict",
    "attnsvm.real.probe_config",
    "attnsvm.real.probe_steps",
    "attnsvm.real.probe_tasks",
    "attnsvm.real.probe",
    "attnsvm.real.probe_view",
    "attnsvm.real.agreement",
    "attnsvm.experiments",
    "attnsvm.experiments.base",
    "attnsvm.experiments.checks",
    "attnsvm.runner",
    "attnsvm.report",
]


def public_names(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return [n for n in names if n != "__all__"]
    return [n for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
            and getattr(v, "__module__", None) == module.__name__]


def _is_code(obj) -> bool:
    return inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)


def _homes(modules: dict) -> dict:
    """``(module name, public name) -> (home module, name at home)`` for every public name."""
    exported = {}  # id(obj) -> list of (module, name) exporting it
    for mname, mod in modules.items():
        for name in public_names(mod):
            obj = getattr(mod, name)
            if _is_code(obj):
                exported.setdefault(id(obj), []).append((mname, name))
    homes = {}
    for mname, mod in modules.items():
        for name in public_names(mod):
            obj = getattr(mod, name)
            if not _is_code(obj):
                homes[(mname, name)] = (mname, name)
                continue
            owner = getattr(obj, "__module__", "") or ""
            candidates = [(m, n) for m, n in exported[id(obj)] if owner == m or owner.startswith(m + ".")]
            homes[(mname, name)] = max(candidates, key=lambda mn: len(mn[0])) if candidates else (mname, name)
    return homes


def _directive(obj) -> str:
    if inspect.isclass(obj):
        return "autoexception" if issubclass(obj, BaseException) else "autoclass"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "autofunction"
    return "autodata"


def _summary(obj) -> str:
    doc = inspect.getdoc(obj) if _is_code(obj) else None
    line = (doc or "").strip().split("\n\n")[0].replace("\n", " ")
    return line


def _page(mname: str, mod, homes: dict) -> str:
    own, foreign = [], []
    for name in public_names(mod):
        home = homes[(mname, name)]
        (own if home[0] == mname else foreign).append((name, home))
    title = f"``{mname}``"
    lines = [title, "=" * len(title), "", f".. automodule:: {mname}", ""]
    code = [name for name, _ in own if _is_code(getattr(mod, name))]
    data = [name for name, _ in own if not _is_code(getattr(mod, name))]
    if code:
        lines += [".. rubric:: Defined here", "", ".. autosummary::", ""]
        lines += [f"   {name}" for name in code]
        lines.append("")
    if data:
        lines += [".. rubric:: Constants", "", ".. list-table::", "   :widths: 30 70", ""]
        for name in data:
            doc = _shorten(" ".join(_data_doc(mod, name, getattr(mod, name))))
            lines += [f"   * - :py:data:`{name}`", f"     - {doc}"]
        lines.append("")
    if foreign:
        lines += [".. rubric:: Re-exported here, documented at their home", "",
                  f"Each is also available as ``{mname}.NAME``; the link goes to the module that documents it.", "",
                  ".. list-table::", "   :header-rows: 1", "   :widths: 20 30 50", "",
                  "   * - name", "     - documented at", "     - summary"]
        for name, (hmod, hname) in foreign:
            alias = "" if hname == name else f" (alias of ``{hname}``)"
            lines += [f"   * - ``{name}``", f"     - :py:obj:`{hmod}.{hname}`{alias}",
                      f"     - {_shorten(_summary(getattr(mod, name)), 120)}"]
        lines.append("")
    for name, _ in own:
        obj = getattr(mod, name)
        directive = _directive(obj)
        if directive == "autodata":
            lines += _data(mname, mod, name, obj)
            continue
        lines.append(f".. {directive}:: {mname}.{name}")
        if directive in ("autoclass", "autoexception"):
            lines.append("   :members:")
        if directive == "autoexception":  # the bases say which built-in exceptions it is (e.g. ValueError)
            lines.append("   :show-inheritance:")
        lines.append("")
    return "\n".join(lines)


def _shorten(text: str, width: int = 150) -> str:
    """The first paragraph of ``text`` cut at a word boundary (literals kept whole)."""
    words, out = text.split(), ""
    for word in words:
        if len(out) + len(word) > width and out.count("`") % 2 == 0:  # never inside a literal or role
            return out + " ..."
        out = f"{out} {word}".strip()
    return out


def _data_doc(mod, name, obj) -> list[str]:
    """The ``#:`` comment of a constant: in the module itself, else in the submodule defining it
    (autodoc would only look in the module and fall back to the docstring of the value's type)."""
    candidates = [mod] + [m for k, m in sorted(sys.modules.items())
                          if k.startswith(mod.__name__ + ".") and m is not None and getattr(m, name, None) is obj]
    for m in candidates:
        try:
            docs = ModuleAnalyzer.for_module(m.__name__).find_attr_docs()
        except Exception:  # noqa: BLE001 (no source: no comment)
            continue
        if ("", name) in docs:
            return [line for line in docs[("", name)]]
    return []


def _data(mname: str, mod, name: str, obj) -> list[str]:
    lines = [f".. py:data:: {name}", f"   :module: {mname}"]
    value = repr(obj)
    machine_specific = isinstance(obj, str) and os.path.isabs(obj)  # e.g. a path into this checkout
    if len(value) <= 100 and "\n" not in value and not machine_specific:
        lines.append(f"   :value: {value}")
    lines.append("")
    lines += [f"   {line}".rstrip() for line in _data_doc(mod, name, obj)]
    lines.append("")
    return lines


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def generate(app) -> None:
    try:
        modules = {m: importlib.import_module(m) for m in MODULES}
    except ImportError as exc:  # e.g. the `real` extra is missing
        raise ExtensionError(f"API pages: cannot import {exc.name!r} ({exc}); install attnsvm[docs,real]") from exc
    homes = _homes(modules)
    out = Path(app.srcdir) / "api" / "generated"
    out.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for mname, mod in modules.items():
        path = out / f"{mname}.rst"
        wanted.add(path.name)
        _write(path, _page(mname, mod, homes))
    for stale in out.glob("*.rst"):
        if stale.name not in wanted:
            stale.unlink()


def setup(app):
    app.connect("builder-inited", generate)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
