"""One HTML page (and a Markdown twin) summarizing every experiment in a results folder.

Order of the page, as a paper reader takes it in:

1. the **verdict banner**: red when a check failed unexpectedly (or a folder is unreadable),
   amber for listed findings, inconclusive checks or skipped experiments, green only when every
   check passed; it names what failed and counts "N checks: P pass, F fail, I inconclusive,
   K findings";
2. the **summary**: a table of contents grouped by paper, one row per experiment with its title
   and a one-line takeaway generated from its checks;
3. the failed checks, unreadable folders, findings and skipped experiments;
4. one **section per experiment**, grouped by paper: its takeaway and figures first, then the
   checks (claim, source, value, threshold and its origin, verdict) and the notes (Markdown,
   rendered by :func:`markdown_html`) in one ``<details>``, collapsed to its line "checks: 12/12
   passed" when every check passed and open otherwise (so the page opens short and a problem is
   seen without a click; a link into a collapsed one opens it), then the deviations from the
   paper's protocol, provenance and config (collapsed); then the environment.

A check's verdict is its ``verdict`` field (``pass``, ``fail``, ``inconclusive``, ``finding``)
when checks.json carries one, else ``pass`` / ``finding`` / ``fail`` from ``passed`` and the
findings list. Every value that reaches the page is escaped. A folder whose ``meta.json`` or
``checks.json`` cannot be read, or holds fields of the wrong type, is shown with the error
instead of breaking the report of the others; so is a folder whose ``results.parquet`` fails its
checksum or whose ``checks.json`` is not the one the run wrote with it
(:func:`attnsvm.runner.results_problem`), and its checks are then not counted.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
from urllib.parse import quote

from attnsvm._files import atomic_write, loads_json, not_regular, oserror_text, printable, read_regular
from attnsvm._html import REVEAL_SCRIPT
from attnsvm._validate import finite_or_none
from attnsvm.errors import ValidationError

SKIPPED_FILE = "skipped.json"
#: the last ``attnsvm reproduce`` run's own clock: ``{"wall_seconds", "process_cpu_seconds", "experiments", "preset"}``
RUN_FILE = "run.json"
#: the seal of skipped.json: ``sha256:<hex>`` of its bytes, written with it by :func:`record_skipped`
SKIPPED_SEAL = "skipped.sha256"
#: the largest meta.json, checks.json, skipped.json or config.yaml the report reads (bytes)
MAX_JSON_BYTES = 64 << 20
#: the deepest nesting of arrays and objects read from them (the run writes at most 5 levels)
MAX_JSON_DEPTH = 64
#: the most digits of an integer read from them
MAX_INT_DIGITS = 100
#: the verdicts a check can carry, in the order the banner counts them
VERDICTS = ("pass", "fail", "inconclusive", "finding")


def _read_json(path: str, default):
    """``(value, error)``: the parsed JSON file, or ``default`` and a one-line reason. Nothing there: ``default``
    and no error. Read defensively (:func:`attnsvm._files.read_regular`, :func:`attnsvm._files.loads_json`):
    a fifo, a device or a folder is named, never opened for reading; a file over :data:`MAX_JSON_BYTES`, values
    nested more than :data:`MAX_JSON_DEPTH` levels or an integer of more than :data:`MAX_INT_DIGITS` digits is
    refused; lone surrogates become U+FFFD."""
    if not os.path.lexists(path):
        return default, None
    try:
        return loads_json(read_regular(path, MAX_JSON_BYTES), MAX_JSON_DEPTH, MAX_INT_DIGITS), None
    except FileNotFoundError:
        return default, None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return default, f"{os.path.basename(path)} is unreadable ({reason}); re-run the experiment"


_number = finite_or_none


def _load(expdir: str) -> dict | None:
    """The folder's meta with its ``checks``, ``problems`` (its checks are then not counted) and ``warnings``
    (what is shown unverified); None for a folder that holds no run (no meta.json, checks.json or results)."""
    from attnsvm.runner import CHECKS_FILE, RESULTS_FILE, results_seal

    meta_path = os.path.join(expdir, "meta.json")
    if not any(os.path.lexists(os.path.join(expdir, f)) for f in ("meta.json", CHECKS_FILE, RESULTS_FILE)):
        return None
    meta, err = _read_json(meta_path, None)
    problems = []
    if not os.path.lexists(meta_path):
        err = "meta.json is missing (removed after the run?); re-run the experiment"
    if not isinstance(meta, dict):
        problems.append(err or "meta.json does not hold a JSON object; re-run the experiment")
        meta = {"name": os.path.basename(expdir)}
    if meta.get("name", os.path.basename(expdir)) != os.path.basename(expdir):
        problems.append(f"meta.json names experiment {human(meta['name'])!r:.80}, not the folder's "
                        f"{os.path.basename(expdir)!r} (copied from another folder); re-run the experiment")
        meta["name"] = os.path.basename(expdir)
    for key in ("wall_seconds",):
        if key in meta and meta[key] is not None and _number(meta[key]) is None:
            problems.append(f"meta.json: {key} is {meta[key]!r}, not a number; re-run the experiment")
            meta[key] = None
    for key in ("figures", "deviations", "provenance"):
        if key in meta and not isinstance(meta[key], list):
            problems.append(f"meta.json: {key} is not a list; re-run the experiment")
            meta[key] = []
    for key in ("name", "title", "paper", "explain", "preset"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], str):
            problems.append(f"meta.json: {key} is not text; re-run the experiment")
            meta[key] = str(meta[key]) if key != "name" else os.path.basename(expdir)
    if not isinstance(meta.get("environment", {}), dict):
        meta["environment"] = {}
    checks, err = _read_json(os.path.join(expdir, "checks.json"), [])
    if err:
        problems.append(err)
    if not isinstance(checks, list) or not all(isinstance(c, dict) and "name" in c and "passed" in c for c in checks):
        problems.append("checks.json does not hold a list of checks; re-run the experiment")
        checks = []
    sealed, unverified = results_seal(expdir)
    if sealed is not None:      # its checks are not the run's: shown as the problem, never counted as verdicts
        problems.append(sealed)
        checks = []
    meta["checks"] = checks
    meta["problems"] = problems
    meta["warnings"] = [unverified] if unverified and not problems else []
    cfg = meta.get("config")
    if isinstance(cfg, dict):
        import yaml

        meta["config_text"] = yaml.safe_dump(cfg, sort_keys=False)
    else:
        cfg_path = os.path.join(expdir, "config.yaml")
        try:
            raw = read_regular(cfg_path, MAX_JSON_BYTES) if os.path.lexists(cfg_path) else b""
            meta["config_text"] = raw.decode("utf-8", "replace")
        except OSError as exc:
            meta["config_text"] = f"(config.yaml unreadable: {exc.strerror or exc})"
    meta.setdefault("name", os.path.basename(expdir))
    meta["dir"] = os.path.basename(expdir)
    return meta


def skipped_file_problem(outdir: str) -> str | None:
    """Why ``OUT/skipped.json`` cannot be replaced (it is a folder, a fifo, a device), else None: checked by
    ``attnsvm reproduce`` before it computes anything."""
    path = os.path.join(outdir, SKIPPED_FILE)
    kind = not_regular(path, follow=False)
    if kind is None or kind == "a symbolic link":     # a link is replaced, never written through
        return None
    return f"cannot record the skipped experiments in {path!r}: it is {kind}, not a regular file; remove it"


def skipped_seal_warning(outdir: str) -> str | None:
    """Why ``OUT/skipped.json`` is shown unverified: it does not match its seal ``OUT/skipped.sha256`` (edited
    after :func:`record_skipped` wrote it, e.g. an experiment removed from it), has no seal (an earlier attnsvm
    wrote it), or was removed while its seal is there; None when it matches or neither is there."""
    path, seal_path = os.path.join(outdir, SKIPPED_FILE), os.path.join(outdir, SKIPPED_SEAL)
    has_list, has_seal = os.path.lexists(path), os.path.lexists(seal_path)
    if not has_list:
        return (f"{SKIPPED_FILE} was removed after the run (its seal {SKIPPED_SEAL} is there): which experiments "
                "were skipped is unknown") if has_seal else None
    if not has_seal:
        return (f"{SKIPPED_FILE} is not sealed (written by an earlier attnsvm, or its seal {SKIPPED_SEAL} was "
                "removed): the skipped experiments are shown unverified")
    try:
        actual = "sha256:" + hashlib.sha256(read_regular(path, MAX_JSON_BYTES)).hexdigest()
        stored = read_regular(seal_path, 200).decode("ascii", "replace").strip()
    except OSError as exc:
        return f"cannot verify {SKIPPED_FILE} against {SKIPPED_SEAL} ({exc.strerror or exc})"
    if actual != stored:
        return (f"{SKIPPED_FILE} changed after the run (its digest {actual[7:19]}... is not the {stored[7:19]}... "
                f"of {SKIPPED_SEAL}): the experiments it lists as skipped may not be the run's")
    return None


def record_skipped(outdir: str, skipped: list[dict], ran=()) -> None:
    """Keep ``OUT/skipped.json`` current: add ``skipped`` experiments, drop those that ``ran``; seal it in
    ``OUT/skipped.sha256`` (:func:`skipped_seal_warning`).

    Raises :class:`~attnsvm.errors.ValidationError` when it cannot be written (:func:`skipped_file_problem`)."""
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, SKIPPED_FILE)
    problem = skipped_file_problem(outdir)
    if problem is not None:
        raise ValidationError(problem)
    old, _ = _read_json(path, [])       # unreadable: rewritten from this run's list
    old = old if isinstance(old, list) else []
    names = {s["name"] for s in skipped} | set(ran)
    merged = [s for s in old if isinstance(s, dict) and s.get("name") not in names] + list(skipped)
    data = json.dumps(merged, indent=2).encode("utf-8")
    seal = ("sha256:" + hashlib.sha256(data).hexdigest() + "\n").encode("ascii")
    try:
        atomic_write(path, lambda fh: fh.write(data))
        atomic_write(os.path.join(outdir, SKIPPED_SEAL), lambda fh: fh.write(seal))
    except OSError as exc:
        raise ValidationError(f"cannot record the skipped experiments in {path!r}: {oserror_text(exc, path)}") from None


def record_run(outdir: str, wall_seconds: float, process_cpu_seconds: float, experiments, preset: str) -> None:
    """Write ``OUT/run.json``: the wall clock of one ``attnsvm reproduce`` and the CPU time of its own process
    (``experiments``: the names it ran together, ``preset``: "quick" or "full"). The banner adds the CPU its
    worker processes' tasks recorded (meta.json ``task_cpu_seconds``) and gives both instead of the experiments'
    summed (overlapping) times."""
    os.makedirs(outdir, exist_ok=True)
    data = json.dumps({"wall_seconds": round(float(wall_seconds), 3),
                       "process_cpu_seconds": round(float(process_cpu_seconds), 3),
                       "experiments": [str(n) for n in experiments], "preset": str(preset)}, indent=2).encode("utf-8")
    atomic_write(os.path.join(outdir, RUN_FILE), lambda fh: fh.write(data))


def run_time_text(run, exps: list[dict]) -> str:
    """The banner's time (:func:`attnsvm.runner.costs.run_cost_text` of :func:`~attnsvm.runner.costs.run_cost`):
    the reproduce run's wall clock and CPU (``run``: :data:`RUN_FILE`'s content, None when absent) when it ran
    every experiment shown, its CPU being its own process's plus what the tasks of worker processes recorded; else
    the experiments' own recorded task times, said to overlap; and what a resumed run reused."""
    from attnsvm.runner.costs import run_cost, run_cost_text

    return run_cost_text(run_cost(run, exps))


def stored_cost(outdir: str):
    """The :class:`~attnsvm.runner.costs.RunCost` of the results folder ``outdir``: its experiments' meta.json
    (as the report reads them, :func:`collect`) and its run.json."""
    from attnsvm.runner.costs import run_cost

    run, _ = _read_json(os.path.join(outdir, RUN_FILE), None)
    return run_cost(run, collect(outdir))


def stored_experiment_cost(expdir: str):
    """The :class:`~attnsvm.runner.costs.ExperimentCost` recorded in ``expdir/meta.json`` (an unreadable meta: one
    with nothing recorded)."""
    from attnsvm.runner.costs import experiment_cost

    meta, _ = _read_json(os.path.join(expdir, "meta.json"), None)
    return experiment_cost(meta if isinstance(meta, dict) else {"name": os.path.basename(expdir)})


def probe_folder(outdir: str) -> str | None:
    """The page of a probe's folder (``attnsvm probe --out DIR``: ``DIR/probe/meta.json`` of the experiment
    "probe", and no other experiment's results): ``DIR/probe.html`` (which may be missing); None for any other
    folder."""
    if not os.path.isdir(outdir):
        return None
    meta, _ = _read_json(os.path.join(outdir, "probe", "meta.json"), None)
    if not isinstance(meta, dict) or meta.get("name") != "probe":
        return None
    others = [d for d in os.listdir(outdir) if d != "probe" and os.path.isfile(os.path.join(outdir, d, "meta.json"))]
    return None if others else os.path.join(outdir, "probe.html")


def collect(outdir: str) -> list[dict]:
    """Every experiment folder of ``outdir`` that holds a finished run, in registry order."""
    if not os.path.isdir(outdir):
        raise ValidationError(f"no such results folder: {outdir!r}")
    found = []
    for entry in sorted(os.listdir(outdir)):
        path = os.path.join(outdir, entry)
        if os.path.isdir(path):
            meta = _load(path)
            if meta is not None:
                found.append(meta)
    skipped, _ = _read_json(os.path.join(outdir, SKIPPED_FILE), [])
    if not found and not skipped:
        raise ValidationError(f"{outdir!r} holds no experiment results (run 'attnsvm run NAME --out {outdir}' first)")
    from attnsvm.experiments.base import registry

    order = {name: k for k, name in enumerate(registry())}
    return sorted(found, key=lambda e: (order.get(e["name"], len(order)), e["name"]))


# ------------------------------------------------------------------ values for people
# each pattern runs in linear time on any text: no two quantifiers can share the same characters
_NP_SCALAR = re.compile(r"np\.(?:u?int|float|complex|bool|str)_?\d*\(([^()]*)\)")
_NP_BOOL = re.compile(r"np\.(True|False)_")
_DICT_ITEM = re.compile(r"\s*'([^'{}]*)'\s*:(.+)", re.DOTALL)


def _flat_dicts(s: str) -> str:
    """``{'a': 1, 'b': x}`` -> ``a 1, b x`` wherever a pair of braces holds only such items (no regex: a text
    of unclosed braces costs one pass)."""
    out, k = [], 0
    while True:
        end = s.find("}", k)
        if end < 0:
            out.append(s[k:])
            return "".join(out)
        start = s.rfind("{", k, end)       # the innermost pair: no brace between them
        if start < 0:
            out.append(s[k:end + 1])
            k = end + 1
            continue
        pieces = s[start + 1:end].split(",")
        if len(pieces) > 1 and not pieces[-1].strip():
            pieces.pop()                    # a trailing comma
        items = [_DICT_ITEM.fullmatch(p) for p in pieces]
        if all(m is not None and m.group(2).strip() for m in items):
            out.append(s[k:start] + ", ".join(f"{m.group(1)} {m.group(2).strip()}" for m in items))
        else:
            out.append(s[k:end + 1])
        k = end + 1


#: "planning sigma 0.16 (planning sigma measured on ...)": the words once (bounded: linear time)
_SIGMA_TWICE = re.compile(r"(planning sigmas? [^()]{0,300}?) \(planning sigmas? measured")


def human(text) -> str:
    """``text`` without Python reprs: ``np.int64(10)`` -> ``10``, ``np.True_`` -> ``True``,
    ``{'ok': 15, 'infeasible': 11}`` -> ``ok 15, infeasible 11``. Not escaped."""
    s = str(text if text is not None else "")
    for _ in range(3):  # nested reprs, e.g. np.float64(np.int64(1)) never occur, lists of them do
        s = _NP_SCALAR.sub(lambda m: m.group(1).strip(), s)
    s = _NP_BOOL.sub(r"\1", s)
    return _SIGMA_TWICE.sub(r"\1 (measured", _flat_dicts(s))


def value_text(value) -> str:
    """A check's value as the report shows it (4 significant digits, integers without ``.0``): for the terminal too."""
    return _fmt(value)


def _fmt(value) -> str:
    """A check's value for people: integers without ``.0``, 4 significant digits, ``nan`` for none."""
    if value is None:
        return "nan"
    if isinstance(value, bool):
        return str(value)
    try:
        value = float(value)
    except (TypeError, ValueError, OverflowError):
        return human(value)
    if value != value:
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


def _seconds(e: dict) -> float:
    """The experiment's recorded time (:func:`attnsvm.runner.costs.experiment_cost`; 0 when not recorded)."""
    from attnsvm.runner.costs import experiment_cost

    return experiment_cost(e).wall_seconds or 0.0


def _e(text) -> str:
    """Escaped HTML of a value; control and format characters (ESC, NUL, U+202E) shown as escapes
    (:func:`attnsvm._files.printable`)."""
    return html.escape(printable(text if text is not None else "", keep="\n\t"), quote=True)


def _md(text) -> str:
    """A value in a report.md table cell or line: human, HTML escaped (Markdown viewers render raw HTML), one line."""
    return _md_block(text).replace("|", "\\|").replace("\n", " ")


def _md_block(text) -> str:
    """Markdown text from a file (an experiment's notes) for report.md: its markup kept, raw HTML escaped, and no
    link (``[text](javascript:...)``, a reference ``[a]: url``): brackets escaped, as the HTML twin has no links."""
    return html.escape(printable(human(text), keep="\n\t"), quote=False).replace("[", "\\[").replace("]", "\\]")


def _fence(text: str) -> str:
    """A code fence longer than every run of backticks in ``text`` (which then cannot end the block)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


# ------------------------------------------------------------------ markdown
_INLINE = [
    (re.compile(r"\*\*(?=\S)((?:(?!\*\*).)+?)(?<=\S)\*\*"), r"<b>\1</b>"),   # never across a ** (linear)
    (re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*(?![\w*])"), r"<i>\1</i>"),
    (re.compile(r"(?<!\w)_(?=\S)([^_\n]+?)(?<=\S)_(?!\w)"), r"<i>\1</i>"),
]


def _inline(text: str) -> str:
    """Inline Markdown of an already escaped line: `code`, **bold**, *italic*."""
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for part in parts:
        if len(part) > 1 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{part[1:-1]}</code>")
            continue
        for pattern, repl in _INLINE:
            part = pattern.sub(repl, part)
        out.append(part)
    return "".join(out)


def _table_cells(line: str) -> list:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def markdown_html(text) -> str:
    """HTML of a small, safe Markdown subset: paragraphs, ``#`` headings, ``-``/``*``/``1.`` lists,
    pipe tables, fenced code blocks and inline `code`, **bold**, *italic*.

    The text is escaped before any markup is added, so no tag or attribute of the input survives.
    """
    lines = human(text).replace("\r\n", "\n").split("\n")
    out, k = [], 0
    while k < len(lines):
        line = lines[k]
        s = line.strip()
        if not s:
            k += 1
            continue
        if s.startswith("```"):
            k += 1
            code = []
            while k < len(lines) and not lines[k].strip().startswith("```"):
                code.append(lines[k])
                k += 1
            k += 1
            out.append("<pre>" + _e("\n".join(code)) + "</pre>")
            continue
        if s.startswith("|"):
            rows = []
            while k < len(lines) and lines[k].strip().startswith("|"):
                rows.append(lines[k])
                k += 1
            cells = [_table_cells(r) for r in rows if not re.fullmatch(r"\|?[\s:\-|]+\|?", r.strip())]
            if cells:
                head, body = cells[0], cells[1:]
                t = ["<table class='md'><tr>" + "".join(f"<th>{_inline(_e(c))}</th>" for c in head) + "</tr>"]
                t += ["<tr>" + "".join(f"<td>{_inline(_e(c))}</td>" for c in r) + "</tr>" for r in body]
                out.append("".join(t) + "</table>")
            continue
        m = re.match(r"(#{1,6})\s+(.*)", s)
        if m:
            level = min(len(m.group(1)) + 3, 6)
            out.append(f"<h{level}>{_inline(_e(m.group(2)))}</h{level}>")
            k += 1
            continue
        if re.match(r"([-*+]|\d+[.)])\s+", s):
            ordered = bool(re.match(r"\d+[.)]\s+", s))
            items = []
            while k < len(lines) and lines[k].strip():
                t = lines[k].strip()
                m2 = re.match(r"([-*+]|\d+[.)])\s+(.*)", t)
                if m2:
                    items.append(m2.group(2))
                elif items:
                    items[-1] += " " + t
                k += 1
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>" + "".join(f"<li>{_inline(_e(i))}</li>" for i in items) + f"</{tag}>")
            continue
        para = []
        while k < len(lines) and lines[k].strip() and not lines[k].strip().startswith(("|", "```")) \
                and not re.match(r"(#{1,6}\s|([-*+]|\d+[.)])\s+)", lines[k].strip()):
            para.append(lines[k].strip())
            k += 1
        out.append("<p>" + _inline(_e(" ".join(para))) + "</p>")
    return "\n".join(out)


# ------------------------------------------------------------------ verdicts
def verdict_of(c: dict) -> str:
    """The verdict of a check: its ``verdict`` field when valid, else from ``passed`` and ``finding``."""
    v = c.get("verdict")
    if v in VERDICTS:
        return v
    if c.get("passed"):
        return "pass"
    return "finding" if c.get("finding") else "fail"


def inconclusive_reason(c: dict) -> str:
    """Why a check is inconclusive, in the words the terminal (``attnsvm run/reproduce``), checks.json's fields and
    the report's banner share: its power against its ``alternative`` (the check's own statement, e.g. "decided at
    the full preset (2000 steps)"), or that the power is unknown and why."""
    power, alt = _number(c.get("power")), human(c.get("alternative") or "").strip()
    if power is not None:
        return f"power {power:.2f} < 0.8 against {alt or 'its alternative'}"
    return f"power unknown: {alt}" if alt else "power unknown: no planning sigma or alternative stated"


def _verdict_label(c: dict) -> str:
    v = verdict_of(c)
    if v == "pass":
        return "pass (listed finding no longer holds)" if c.get("finding_resolved") else "pass"
    return {"fail": "FAIL", "finding": "FINDING", "inconclusive": "inconclusive"}[v]


def verdict_counts(checks) -> dict[str, int]:
    """How many of ``checks`` have each verdict of :data:`VERDICTS`."""
    n = {v: 0 for v in VERDICTS}
    for c in checks:
        n[verdict_of(c)] += 1
    return n


def counts_line(checks) -> str:
    """``"N checks: P pass, F fail, I inconclusive, K findings"``."""
    n = verdict_counts(checks)
    return (f"{len(checks)} checks: {n['pass']} pass, {n['fail']} fail, {n['inconclusive']} inconclusive, "
            f"{n['finding']} findings")


def checks_summary(checks) -> str:
    """The line an experiment's collapsible check table opens with: ``"checks: 12/12 passed"``, ``"checks: 9/12
    passed, 1 fail, 2 inconclusive"``, or ``"no checks"``."""
    if not checks:
        return "no checks"
    n = verdict_counts(checks)
    return ", ".join([f"checks: {n['pass']}/{len(checks)} passed"]
                     + [f"{n[v]} {v if v != 'finding' or n[v] == 1 else 'findings'}" for v in VERDICTS[1:] if n[v]])


def takeaway(checks, problems=()) -> str:
    """One line per experiment, generated from its checks."""
    if problems:
        return "results unreadable: " + human(problems[0])
    if not checks:
        return "no checks (figures and notes only)"
    by = {v: [c for c in checks if verdict_of(c) == v] for v in VERDICTS}
    n = len(checks)
    if len(by["pass"]) == n:
        main = next((c for c in checks if c.get("kind") != "integrity"), checks[0])
        return f"all {n} checks pass, e.g. {human(main['name'])}"
    parts = [f"{len(by['pass'])} of {n} checks pass"]
    for v, word in (("fail", "fails"), ("inconclusive", "inconclusive"), ("finding", "finding")):
        if by[v]:
            more = f" (+{len(by[v]) - 1} more)" if len(by[v]) > 1 else ""
            parts.append(f"{word}: {human(by[v][0]['name'])}{more}")
    return "; ".join(parts)


def check_detail(c: dict) -> str:
    """The detail cell of a check ``c`` (a dict of checks.json) as the report shows it: its detail (after the finding's
    reason when the verdict is a finding), its alternative when not said already, then the rule its verdict followed
    and, for a passing claim tested as the alternative, the p-value."""
    detail = human(c.get("detail", ""))
    if c.get("finding") and verdict_of(c) == "finding":
        detail = f"finding: {human(c.get('finding_reason', ''))}" + (f"; {detail}" if detail else "")
    alt = human(c.get("alternative") or "")
    if alt and alt not in human(c.get("threshold_reason", "")) and alt not in detail:  # each sentence once a row
        detail += ("; " if detail else "") + f"alternative: {alt}"
    return _claim_note(c, detail)


def _claim_note(c: dict, detail: str) -> str:
    """``detail`` with the rule the check's verdict followed (its ``claim_is``) and, for a passing claim tested as the
    alternative, the p-value of the test; checks.json written before ``claim_is`` existed get no note."""
    from attnsvm.experiments.checks import CLAIM_IS

    claim = c.get("claim_is")
    if not isinstance(claim, str) or claim not in CLAIM_IS or claim == "exact":     # a list: unhashable
        return detail
    note = CLAIM_IS[claim]
    p = _number(c.get("p_value"))
    if claim == "alternative" and verdict_of(c) == "pass":
        note += f"; p = {p:.3g}" if p is not None else "; p not recorded"
    return f"{note}; {detail}" if detail else note


def _text(value) -> str:
    """Escaped HTML of a text for people (:func:`human`), its Markdown `code` spans as <code> (no raw backticks)."""
    return _inline(_e(human(value)))


#: what a check name's "[RUN]" tag means (the spec's source tags)
RUN_TAG = ("[RUN] marks a number from re-running the paper's official notebook code (the spec's reproduction "
           "target), not one printed in the paper.")


def power_text(c: dict) -> str:
    """A check's power for the power column: two decimals, or words when none was computed."""
    p = _number(c.get("power"))
    return f"{p:.2f}" if p is not None else "not computed (no alternative stated)"


_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1400px;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.45}"
          "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;"
          "vertical-align:top}th{background:#f6f8fa}.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:700}"
          ".finding,.inconclusive{color:#9a6700;font-weight:700}.small{font-size:.85em;color:#555}"
          ".fig{margin:.8em 0}.fig img{max-width:100%;height:auto;border:1px solid #eee;display:block}"
          "pre{background:#f6f8fa;padding:.6em;overflow:auto;white-space:pre-wrap}section{margin-bottom:3em;"
          "padding-top:.5em;border-top:2px solid #ddd}code{background:#f6f8fa;padding:0 .2em}"
          ".banner{padding:.7em 1em;border-radius:6px;border-left:8px solid}.banner.green{background:#dafbe1;"
          "border-color:#1a7f37}.banner.amber{background:#fff8c5;border-color:#bf8700}.banner.red{background:#ffebe9;"
          "border-color:#cf222e}.banner .head{font-weight:700;font-size:1.15em}.banner ul{margin:.3em 0}"
          ".toc td.take{font-size:.9em;max-width:44em}"
          ".toc td .small{max-width:34em}.toc tr.paper th{background:#eaeef2;font-size:1.02em}"
          ".notes{max-width:1000px}details{margin:.5em 0}summary{cursor:pointer;color:#0550ae}"
          "h2.paper{margin-top:2em;border-bottom:3px solid #444}details.checks>summary{font-weight:600;font-size:1.1em;"
          "margin:.6em 0}.toc a.count{color:inherit}")


def _check_rows_html(checks, with_experiment=False, exp_name="", power=False):
    head = ("<tr>" + ("<th>experiment</th>" if with_experiment else "") +
            "<th>claim</th><th>source</th><th>kind</th><th>value</th><th>threshold</th><th>threshold from</th>"
            + ("<th>power</th>" if power else "") + "<th>verdict</th><th>detail</th></tr>")
    rows = [head]
    for item in checks:
        e, c = item if with_experiment else (exp_name, item)
        v = verdict_of(c)
        pw = f"<td>{_e(power_text(c))}</td>" if power else ""
        rows.append("<tr class='check' data-verdict='" + _e(v) + "'>" +
                    (f"<td><a href='#{_e(e)}'>{_e(e)}</a></td>" if with_experiment else "") +
                    f"<td>{_text(c['name'])}</td><td class='small'>{_text(c.get('source', ''))}</td>"
                    f"<td>{_e(c.get('kind', ''))}</td><td>{_e(_fmt(c.get('value')))}</td>"
                    f"<td>{_text(c.get('threshold', ''))}</td>"
                    f"<td class='small'>{_text(c.get('threshold_reason', ''))}</td>{pw}"
                    f"<td class='{_e(v)}'>{_e(_verdict_label(c))}</td><td class='small'>{_text(check_detail(c))}</td></tr>")
    return "<table class='checks'>" + "".join(rows) + "</table>"


def _check_rows_md(checks, with_experiment=False, exp_name=""):
    out = [("| experiment " if with_experiment else "")
           + "| claim | source | kind | value | threshold | threshold from | verdict | detail |",
           ("|---" if with_experiment else "") + "|---|---|---|---|---|---|---|---|"]
    for item in checks:
        e, c = item if with_experiment else (exp_name, item)
        out.append(("| " + _md(e) + " " if with_experiment else "") +
                   f"| {_md(c['name'])} | {_md(c.get('source', ''))} | {_md(c.get('kind', ''))} | "
                   f"{_md(_fmt(c.get('value')))} | {_md(c.get('threshold', ''))} | {_md(c.get('threshold_reason', ''))} | "
                   f"{_md(_verdict_label(c))} | {_md(check_detail(c))} |")
    return out


def _groups(exps):
    """``[(group title, [experiments])]`` in registry order; experiments of unknown groups last."""
    from attnsvm.experiments.base import GROUP_TITLES, group_of, registry

    reg = registry()
    out: dict = {}
    for e in exps:
        exp = reg.get(e["name"])
        key = group_of(exp) if exp is not None else ""
        title = GROUP_TITLES.get(key, "Other experiments")
        out.setdefault(title, []).append(e)
    return list(out.items())


def _preset_line(e: dict) -> str:
    """What the preset of this run changed: the quick preset's sizes next to the full ones."""
    from attnsvm.experiments.base import registry

    exp = registry().get(e["name"])
    cfg = e.get("config") if isinstance(e.get("config"), dict) else None
    if exp is None or cfg is None or e.get("preset") != "quick" or not exp.quick:
        return ""
    try:
        full = exp.Config().model_dump()
    except Exception:  # noqa: BLE001 - a config without defaults: show this run's values only
        full = {}
    parts = []
    for key in exp.quick:
        here = cfg.get(key, exp.quick[key])
        parts.append(f"{key} = {here!r}" + (f" (full preset {full[key]!r})" if key in full else ""))
    return ("This run used the quick preset, smaller than the papers' protocol: " + "; ".join(parts)
            + ". Statistical checks widen their tolerances to these sizes; numbers in the notes below that "
            "describe the full preset are not this run's.")


def _preset_note(exps: list[dict]) -> str:
    """The banner's word on the preset: "" when every experiment ran the full preset."""
    quick = sorted(str(e.get("name")) for e in exps if e.get("preset") == "quick")
    if not quick:
        return ""
    which = "every experiment" if len(quick) == len(exps) else f"{len(quick)} of {len(exps)} experiments"
    return (f" This run used the quick preset ({which}): smaller sizes than the papers' protocol, so some checks are "
            "decided only at the full preset.")


def _banner(all_checks, broken, skipped, n_exps, time_text, preset_note="", warnings=()):
    """``(colour, headline, summary, items)``. ``warnings``: ``[(experiment or "", text)]`` of what the report
    could not verify; any makes a green banner amber."""
    failed = [(n, c) for n, c in all_checks if verdict_of(c) == "fail"]
    inconclusive = [(n, c) for n, c in all_checks if verdict_of(c) == "inconclusive"]
    findings = [(n, c) for n, c in all_checks if verdict_of(c) == "finding"]
    if failed or broken:
        colour = "red"
        head = ("FAILURES: " + ", ".join(x for x in (f"{len(failed)} check(s) failed unexpectedly" if failed else "",
                                                      f"{len(broken)} result folder(s) unreadable" if broken else "")
                                          if x))
    elif findings or inconclusive or skipped or warnings:
        colour = "amber"
        head = "No unexpected failures, but not everything passed: " + ", ".join(
            x for x in (f"{len(findings)} listed finding(s)" if findings else "",
                        f"{len(inconclusive)} inconclusive check(s)" if inconclusive else "",
                        f"{len(skipped)} experiment(s) skipped" if skipped else "",
                        f"{len(warnings)} warning(s)" if warnings else "") if x)
    else:
        colour = "green"
        head = f"All checks pass: every one of the {len(all_checks)} checks of {n_exps} experiment(s) passed"
    n_bad = sum(1 for _, c in all_checks if verdict_of(c) != "pass")
    summary = (f"{counts_line([c for _, c in all_checks])}; {n_bad} not passed, {len(skipped)} experiments skipped; "
               f"{n_exps} experiment(s); {time_text}.{preset_note}")
    items = []
    for label, rows in (("failed", failed), ("inconclusive", inconclusive), ("finding", findings)):
        for n, c in rows[:8]:
            why = f": {inconclusive_reason(c)}" if label == "inconclusive" else ""
            items.append((label, n, f"{human(c['name'])} (value {_fmt(c.get('value'))}, needs "
                                    f"{human(c.get('threshold', ''))}){why}"))
        if len(rows) > 8:
            items.append((label, "", f"and {len(rows) - 8} more {label} check(s), listed below"))
    for e in broken:
        items.append(("unreadable", e["name"], "; ".join(human(p) for p in e["problems"])))
    for s in skipped:
        items.append(("skipped", s.get("name", ""), human(s.get("reason", ""))))
    for n, text in warnings:
        items.append(("warning", n, human(text)))
    return colour, head, summary, items


def write_report(outdir: str) -> tuple[str, str]:
    """Write ``outdir/report.html`` and ``outdir/report.md``; returns their paths.

    Report-wide warnings (a skipped.json that cannot be read: which experiments were skipped is then unknown)
    are listed in the banner, which is then not green."""
    exps = collect(outdir)
    skipped, warnings = _skipped_and_warnings(outdir, exps)
    all_checks = [(e["name"], c) for e in exps for c in e["checks"]]
    failed = [(n, c) for n, c in all_checks if verdict_of(c) == "fail"]
    inconclusive = [(n, c) for n, c in all_checks if verdict_of(c) == "inconclusive"]
    findings = [(n, c) for n, c in all_checks if verdict_of(c) == "finding"]
    resolved = [(n, c) for n, c in all_checks if c.get("passed") and c.get("finding_resolved")]
    broken = [e for e in exps if e.get("problems")]
    env = next((e.get("environment") for e in exps if e.get("environment")), {}) or {}
    run, _ = _read_json(os.path.join(outdir, RUN_FILE), None)
    colour, headline, summary, items = _banner(all_checks, broken, skipped, len(exps), run_time_text(run, exps),
                                               _preset_note(exps), warnings)
    power = any("power" in c for _, c in all_checks)
    groups = _groups(exps)

    h = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>attnsvm report</title>"
         f"<style>{_STYLE}</style></head><body>",
         "<h1>attnsvm reproduction report</h1>",
         f"<div class='banner {colour}' id='verdict' data-colour='{colour}'><div class='head'>{_e(headline)}</div>"
         f"<div class='counts'>{_e(summary)}</div>"]
    if items:
        h.append("<ul>" + "".join(f"<li><b>{_e(label)}</b> " + (f"<a href='#{_e(n)}'>{_e(n)}</a>: " if n else "")
                                  + f"{_e(text)}</li>" for label, n, text in items) + "</ul>")
    h.append("</div>")
    h.append("<p class='nav'>Jump to: " + " &middot; ".join(
        f"<a href='#{a}'>{t}</a>" for a, t, show in (
            ("failed", "failed checks", failed), ("unreadable", "unreadable results", broken),
            ("summary", "summary by paper", True), ("inconclusive", "inconclusive checks", inconclusive),
            ("findings", "findings", findings), ("skipped", "skipped experiments", skipped),
            ("environment", "environment", True)) if show) + "</p>")
    md = ["# attnsvm reproduction report", "", f"**{headline}.** {summary}", ""]
    md += [f"- {label} {_md(n) + ': ' if n else ''}{_md(text)}" for label, n, text in items] + ([""] if items else [])
    if any(str(c.get("name", "")).startswith("[RUN]") for _, c in all_checks):  # the tag, said once
        h.append(f"<p class='small' id='run-tag'>{_e(RUN_TAG)}</p>")
        md += [RUN_TAG, ""]

    # ---- unexpected failures first (usually none), then the contents by paper
    if failed:
        h.append("<h2 id='failed'>Failed checks</h2>" + _check_rows_html(failed, True, power=power))
        md += ["## Failed checks", ""] + _check_rows_md(failed, True) + [""]
    _summary_table(groups, skipped, h, md)
    _unreadable_section(broken, h, md)
    for title, members in groups:
        h.append(f"<h2 class='paper'>{_e(title)}</h2>")
        md += [f"# {_md(title)}", ""]
        for e in members:
            _section(e, h, md, power)
    _detail_sections(inconclusive, findings, resolved, power, h, md)
    _skipped_section(skipped, h, md)
    _environment_section(env, h, md)
    return _write_pair(outdir, h, md)


def _skipped_and_warnings(outdir: str, exps: list) -> tuple[list, list]:
    """The skipped experiments of ``outdir`` (dicts from skipped.json) and the report-wide warnings
    ``(experiment or "", text)``: an unreadable or unsealed skipped.json, and each experiment's own warnings."""
    skipped, err = _read_json(os.path.join(outdir, SKIPPED_FILE), [])
    warnings = [("", err.replace("; re-run the experiment", "; the experiments it lists as skipped are unknown"))] \
        if err else []
    if not err and not isinstance(skipped, list):
        warnings.append(("", f"{SKIPPED_FILE} does not hold a list; the experiments it lists as skipped are unknown"))
    seal = None if err else skipped_seal_warning(outdir)
    warnings += [("", seal)] if seal else []
    warnings += [(e["name"], w) for e in exps for w in e.get("warnings", [])]
    skipped = [s for s in (skipped if isinstance(skipped, list) else []) if isinstance(s, dict)]
    return skipped, warnings


def _summary_table(groups: list, skipped: list, h: list, md: list) -> None:
    """The summary by paper: one row per experiment (takeaway, checks passed, preset, runs, wall time) and the
    skipped ones."""
    h.append("<h2 id='summary'>Summary</h2><p class='small'>By paper: each experiment's checks and a one-line "
             "takeaway generated from them. Click a name for its section and figures, the checks passed for its check "
             "table and notes (collapsed in an experiment whose checks all passed: click its line to open it).</p>"
             "<table class='toc'><tr><th>experiment</th><th>takeaway</th><th>checks passed</th>"
             "<th>preset</th><th>runs</th><th>wall time (s)</th></tr>")
    md += ["## Summary", "", "| experiment | checks passed | preset | runs | wall time (s) | takeaway |",
           "|---|---|---|---|---|---|"]
    for title, members in groups:
        h.append(f"<tr class='paper'><th colspan='6'>{_e(title)}</th></tr>")
        for e in members:
            cs = e["checks"]
            npass = sum(verdict_of(c) == "pass" for c in cs)
            verdicts = {verdict_of(c) for c in cs}
            if not cs:
                cell, cls = "no checks", "fail" if e.get("problems") else "small"
            else:
                cell = f"{npass}/{len(cs)}"
                cls = ("fail" if ("fail" in verdicts or e.get("problems")) else
                       "finding" if verdicts - {"pass"} else "pass")
            take = takeaway(cs, e.get("problems", []))
            link = f"<a class='count' href='#checks-{_e(e['name'])}'>{_e(cell)}</a>" if cs else _e(cell)
            h.append(f"<tr data-experiment='{_e(e['name'])}'><td><a href='#{_e(e['name'])}'>{_e(e['name'])}</a>"
                     f"<div class='small'>{_e(human(e.get('title', '')))}</div></td><td class='take'>{_e(take)}</td>"
                     f"<td class='{cls}'>{link}</td><td>{_e(e.get('preset', ''))}</td><td>{_e(e.get('runs', '-'))}</td>"
                     f"<td>{_seconds(e):.1f}</td></tr>")
            md.append(f"| {_md(e['name'])} | {cell} | {_md(e.get('preset', ''))} | {_md(e.get('runs', '-'))} | "
                      f"{_seconds(e):.1f} | {_md(take)} |")
    if skipped:
        h.append("<tr class='paper'><th colspan='6'>Skipped (not run here)</th></tr>")
        for s in skipped:
            h.append(f"<tr><td>{_e(s.get('name'))}<div class='small'>{_e(s.get('title', ''))}</div></td><td class='take'>"
                     f"skipped: {_e(s.get('reason'))}</td><td class='small'>skipped</td><td></td><td></td><td></td></tr>")
            md.append(f"| {_md(s.get('name'))} | skipped | | | | {_md(s.get('reason'))} |")
    h.append("</table>")
    md.append("")


def _unreadable_section(broken: list, h: list, md: list) -> None:
    """The experiments whose results could not be read, one line per problem."""
    if broken:
        h.append("<h2 id='unreadable'>Unreadable results</h2><ul>")
        md += ["## Unreadable results", ""]
        for e in broken:
            for p in e["problems"]:
                h.append(f"<li><a href='#{_e(e['name'])}'>{_e(e['name'])}</a>: {_e(p)}</li>")
                md.append(f"- {_md(e['name'])}: {_md(p)}")
        h.append("</ul>")
        md.append("")


def _detail_sections(inconclusive: list, findings: list, resolved: list, power: bool, h: list, md: list) -> None:
    """The details the banner links to, after the experiments: inconclusive checks, findings, listed findings
    that now pass."""
    if inconclusive:
        h.append("<h2 id='inconclusive'>Inconclusive checks</h2><p>The run cannot tell whether the claim holds at "
                 "these sizes (too little power); a larger preset decides.</p>"
                 + _check_rows_html(inconclusive, True, power=power))
        md += ["## Inconclusive checks", ""] + _check_rows_md(inconclusive, True) + [""]
    if findings:
        h.append("<h2 id='findings'>Findings</h2><p>Paper targets that careful measurement contradicts. They stay "
                 "failing checks (listed in <code>findings.txt</code> with their reason) and do not change the exit "
                 "status.</p>" + _check_rows_html(findings, True, power=power))
        md += ["## Findings", "", "Paper targets that careful measurement contradicts; they stay failing checks and do "
               "not change the exit status.", ""] + _check_rows_md(findings, True) + [""]
    if resolved:
        h.append("<h2 id='resolved'>Listed findings that now pass</h2><p>Remove them from findings.txt.</p>"
                 + _check_rows_html(resolved, True, power=power))
        md += ["## Listed findings that now pass", ""] + _check_rows_md(resolved, True) + [""]


def _skipped_section(skipped: list, h: list, md: list) -> None:
    """The skipped experiments with their reason and how to enable them."""
    if skipped:
        h.append("<h2 id='skipped'>Skipped experiments</h2><table><tr><th>experiment</th><th>reason</th>"
                 "<th>to enable</th></tr>")
        md += ["## Skipped experiments", "", "| experiment | reason | to enable |", "|---|---|---|"]
        for s in skipped:
            h.append(f"<tr><td>{_e(s.get('name'))}</td><td>{_e(s.get('reason'))}</td><td>{_e(s.get('hint'))}</td></tr>")
            md.append(f"| {_md(s.get('name'))} | {_md(s.get('reason'))} | {_md(s.get('hint'))} |")
        h.append("</table>")
        md.append("")


def _environment_section(env: dict, h: list, md: list) -> None:
    """The environment of the run (python, platform, cpus, packages) and the closing of the page."""
    pk = env.get("packages", {}) if isinstance(env.get("packages", {}), dict) else {}
    h.append("<h2 id='environment'>Environment</h2><table>")
    h.append(f"<tr><td>python</td><td>{_e(env.get('python'))}</td></tr><tr><td>platform</td><td>{_e(env.get('platform'))}</td></tr>"
             f"<tr><td>cpus</td><td>{_e(env.get('cpus'))}</td></tr>")
    md += ["## Environment", "", f"- python {_md(env.get('python'))}, {_md(env.get('platform'))}, {_md(env.get('cpus'))} cpus"]
    for k, v in pk.items():
        h.append(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>")
        md.append(f"- {_md(k)} {_md(v)}")
    h.append("</table><p>Seeds are part of each config above; every run of a task is seeded by its run index.</p>"
             f"<script>{REVEAL_SCRIPT}</script></body></html>")


def _write_pair(outdir: str, h: list, md: list) -> tuple[str, str]:
    """Write the html lines ``h`` and markdown lines ``md`` atomically as report.html and report.md."""
    html_path, md_path = os.path.join(outdir, "report.html"), os.path.join(outdir, "report.md")
    for path, text in ((html_path, "\n".join(h)), (md_path, "\n".join(md) + "\n")):
        data = text.encode("utf-8", "replace")     # lone surrogates are replaced when read; none can stop the write
        try:
            atomic_write(path, lambda fh: fh.write(data))
        except OSError as exc:
            raise ValidationError(f"cannot write the report to {path!r}: {oserror_text(exc, path)}") from None
    return html_path, md_path


def _section(e: dict, h: list, md: list, power: bool) -> None:
    """One experiment: title, paper, takeaway, figures, checks, notes, deviations, provenance, config."""
    from attnsvm.runner.costs import experiment_cost, experiment_cost_text, task_cost_text

    name = e["name"]
    h.append(f"<section id='{_e(name)}'><h2>{_e(name)}: {_e(human(e.get('title', '')))}</h2>")
    md += [f"## {_md(name)}: {_md(e.get('title', ''))}", ""]
    if e.get("paper"):
        h.append(f"<p><i>{_e(human(e['paper']))}</i></p>")
        md += [f"*{_md(e['paper'])}*", ""]
    h.append(f"<p class='takeaway'><b>Takeaway:</b> {_e(takeaway(e['checks'], e.get('problems', [])))}</p>")
    for p in e.get("problems", []):
        h.append(f"<p class='fail'>{_e(p)}</p>")
        md += [f"**{_md(p)}**", ""]
    for w in e.get("warnings", []):
        h.append(f"<p class='finding'>warning: {_e(w)}</p>")
        md += [f"*warning: {_md(w)}*", ""]
    for fig in e.get("figures", []) or []:
        if isinstance(fig, str) and fig.endswith(".png"):
            src = f"{e['dir']}/{fig}"
            h.append(f"<div class='fig'><img src='{_e(src)}' alt='{_e(fig)}'></div>")
            md += [f"![{_md(fig)}]({quote(src)})", ""]
    # the check table and the notes, collapsed when every check passed: open (seen without a click) otherwise
    preset = _preset_line(e)
    notes = bool(e.get("explain") or preset)
    problem = bool(e.get("problems")) or any(verdict_of(c) != "pass" for c in e["checks"])
    h.append(f"<details class='checks' id='checks-{_e(name)}'{' open' if problem else ''}>"
             f"<summary>{_e(checks_summary(e['checks']))}{'; notes' if notes else ''}</summary>")
    if e["checks"]:
        h.append(_check_rows_html(e["checks"], exp_name=name, power=power))
        md += _check_rows_md(e["checks"], exp_name=name) + [""]
    else:
        md += ["no checks", ""]
    if notes:
        h.append("<h3>Notes</h3><div class='notes'>" + (f"<p class='preset'>{_e(preset)}</p>" if preset else "")
                 + markdown_html(e.get("explain") or "") + "</div>")
        md += ["### Notes", ""] + ([_md(preset), ""] if preset else []) + [_md_block(e.get("explain") or ""), ""]
    h.append("</details>")
    devs = [d for d in (e.get("deviations") or []) if isinstance(d, dict)]
    if devs:
        h.append(f"<details class='deviations'><summary>Deviations from the paper's protocol ({len(devs)})</summary>"
                 "<table><tr><th>the paper's protocol</th><th>this run</th><th>why</th></tr>")
        md += [f"### Deviations from the paper's protocol ({len(devs)})", "", "| the paper's protocol | this run | why |",
               "|---|---|---|"]
        for d in devs:
            h.append(f"<tr><td>{_text(d.get('spec'))}</td><td>{_text(d.get('here'))}</td>"
                     f"<td>{_text(d.get('reason'))}</td></tr>")
            md.append(f"| {_md(d.get('spec'))} | {_md(d.get('here'))} | {_md(d.get('reason'))} |")
        h.append("</table></details>")
        md.append("")
    prov = [p for p in (e.get("provenance") or []) if isinstance(p, dict)]
    if prov:
        h.append("<details><summary>provenance: what produced these numbers "
                 f"({len(prov)} shard(s))</summary><table><tr><th>task</th><th>config hash</th><th>code version</th>"
                 "<th>seeds</th><th>written</th><th>cost (as the task recorded it)</th></tr>")
        costs = {t.key: t for t in experiment_cost(e).tasks}
        for p in prov:
            h.append(f"<tr><td>{_e(p.get('task'))}</td><td>{_e(p.get('config_hash'))}</td><td>{_e(p.get('version'))}</td>"
                     f"<td class='small'>{_e(human(p.get('seeds')))}</td><td>{_e(p.get('written'))}</td>"
                     f"<td class='small'>{_e(task_cost_text(costs.get(str(p.get('task')))))}</td></tr>")
        h.append("</table></details>")
    h.append(f"<details><summary>config (hash {_e(e.get('config_hash', ''))}, preset {_e(e.get('preset', ''))})</summary>"
             f"<pre>{_e(e.get('config_text', ''))}</pre></details>")
    h.append(f"<p class='small'>finished {_e(e.get('finished', ''))}, {_e(experiment_cost_text(experiment_cost(e)))}, "
             f"workers: {_e(e.get('workers'))}"
             f"{', scheduler ' + _e(e['scheduler']) if e.get('scheduler') else ''}</p></section>")
    config_text = printable(e.get("config_text", ""), keep="\n\t").rstrip()
    md += [_fence(config_text) + "yaml", config_text, _fence(config_text), ""]
