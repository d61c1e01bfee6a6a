"""What the ``attnsvm probe`` command runs: probe MiniLM's heads, print or save the table.

The CLI wiring lives in :mod:`attnsvm.cli`; this module has no click dependency.
"""

from __future__ import annotations

import json
import os
import time



from attnsvm.errors import ValidationError
from attnsvm.real.figures import curve_figure, heatmap_figure, largest_m
from attnsvm.real.probe_view import cost_items, write_probe_view


#: the longest line ``--sentences`` accepts (characters); the model reads at most its position limit in tokens
MAX_SENTENCE_CHARS = 100_000


def _write_text(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically, never through a symbolic link; a clear error on failure."""
    from attnsvm._files import atomic_write, oserror_text
    from attnsvm.runner import StorageError

    try:
        atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {oserror_text(exc, path)}") from None


#: the files ``probe --out DIR`` writes there
OUT_FILES = ("probe.csv", "probe.json", "probe_heatmap.png", "probe_heatmap.pdf", "probe.html")


def check_outputs(out: str) -> None:
    """Refuse, before any work, an output of ``probe --out`` (the tables, the figures, the page) that exists and
    is not a regular file, also through a link (a fifo, a device such as ``/dev/full``, a folder): the same
    one-line error (:func:`attnsvm.npzfile.output_file`) for each."""
    from attnsvm.npzfile import output_file

    if not os.path.isdir(out):
        return
    for name in OUT_FILES:
        output_file(os.path.join(out, name), "--out", f"probe's {name}")


def _figure(draw, path_hint: str) -> list:
    """The paths ``draw()`` wrote; its ``OSError`` (a figure's path taken since the check) as one line."""
    from attnsvm._files import oserror_text
    from attnsvm.runner import StorageError

    try:
        return draw()
    except OSError as exc:
        where = os.fspath(exc.filename) if isinstance(exc.filename, (str, os.PathLike)) else path_hint
        raise StorageError(f"cannot write {where}: {oserror_text(exc, where)}") from None


def _invisible(line: str) -> bool:
    """Whether ``line`` has no visible character: only control, format (zero-width) and separator characters,
    which tokenizers drop (the model would read an empty sentence)."""
    import unicodedata

    return all(unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp") for ch in line)


def read_sentences(path) -> list[str]:
    """The lines of a UTF-8 text file (``--sentences``), one sentence per line, stripped; blank lines (empty or
    whitespace only) are accepted only at the end of the file (a file ending with a newline, or several).

    Raises :class:`ValidationError` naming ``--sentences`` and the file when it is missing,
    a folder, behind a path through a file, not UTF-8 text, larger than the memory limit
    allows, empty (0 bytes), holds no non-empty line, a blank line before a sentence (line i would no longer be
    sentence i), a line longer than :data:`MAX_SENTENCE_CHARS` characters or a line with no visible character (only
    control or zero-width characters, which the tokenizer drops); a line is named by its number in the file (from 1).
    """
    from attnsvm.npzfile import input_file, require_file_memory

    path = input_file(path, "--sentences", what="sentences file")
    size = os.path.getsize(path)
    if size == 0:
        raise ValidationError(f"--sentences: the file {path!r} is empty (0 bytes); expected one sentence per line")
    # the text, its lines and their Python strings: about 10 bytes per byte of the file
    require_file_memory(10.0 * size, path, "--sentences: ", "a text file of sentences")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ValidationError(f"--sentences: cannot read {path!r}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"--sentences: {path!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                              f"{exc.start}); expected one sentence per line in UTF-8") from None
    del raw
    sentences, blank = [], None  # blank: the number of the first blank line since the last sentence
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            blank = blank or number
            continue
        if blank is not None:
            raise ValidationError(f"--sentences: line {blank} of {path!r} is blank, before the sentence on line "
                                  f"{number}; expected one sentence per line (blank lines only at the end of the "
                                  "file): remove it")
        if len(line) > MAX_SENTENCE_CHARS:
            raise ValidationError(f"--sentences: line {number} of {path!r} has {len(line)} characters; a sentence may "
                                  f"have at most {MAX_SENTENCE_CHARS} (the probe reads at most --max-length tokens of "
                                  "each): one sentence per line")
        if _invisible(line):
            raise ValidationError(f"--sentences: line {number} of {path!r} has no visible character (only control "
                                  f"or zero-width characters: {line[:20]!r}), an empty sentence for the tokenizer; "
                                  "remove it or write a sentence there")
        sentences.append(line)
    del text
    if not sentences:
        raise ValidationError(f"--sentences: the file {path!r} holds no non-empty line; expected one sentence per "
                              "line")
    return sentences


#: the legend printed under the table of ``attnsvm probe``
_COLUMNS = ("columns: mean_selected = mean |O_i|, the tokens a query attends to with weight >= the threshold; "
            "frac_cls = share of argmaxes on [CLS];\n  corr = cosine of the head's key-query matrix W_h with the SVM of "
            "its selections; corr_restricted = the same with W_h projected on what the sentences reveal;\n  "
            "corr_random_restricted = that cosine for random selections of the same sizes (the baseline); advantage = "
            "corr_restricted - baseline;\n  svm_status = optimal (certified) / optimal_inaccurate / infeasible (no "
            "number: no matrix makes the selected tokens tie above the others, as the Gen-SVM requires);\n  "
            "svm_gap = its relative duality gap")


#: the folder ``attnsvm probe`` stores a run in when no ``--out`` is given (relative to the working directory): each
#: run in ``<this>/<settings hash>`` (:func:`default_store`)
STORE_ROOT = "attnsvm-probe"
#: the file of a default folder recording the settings its hash is made of
SETTINGS_FILE = "settings.json"


def store_settings(config) -> dict:
    """What names a stored probe's default folder: every setting of ``config`` (a
    :class:`attnsvm.real.probe_config.ProbeConfig`, validated, ``max_length`` explicit), the model directory as
    its real path (None: the shipped MiniLM). The memory limit, workers and output options are not settings."""
    settings = config.model_dump(mode="json")
    if settings.get("model") is not None:
        settings["model"] = os.path.realpath(settings["model"])
    return settings


def default_store(config, root: str = STORE_ROOT) -> tuple[str, str]:
    """The folder a probe of ``config`` is stored in without ``--out``: ``root/<hash>``, the first 12 hex digits of
    the SHA-256 of its settings (:func:`store_settings`), so the same settings resume the same folder and others go
    to a new one; and the line that says so (printed first).

    Writes ``root/<hash>/settings.json`` (the settings, for the next run's comparison) when the folder is new.

    Returns
    -------
    (folder, line)
    """
    import hashlib

    settings = store_settings(config)
    text = json.dumps(settings, sort_keys=True, indent=1)
    folder = os.path.join(root, hashlib.sha256(text.encode()).hexdigest()[:12])
    tail = "; the same command resumes it, --out DIR chooses the folder, --no-store keeps nothing"
    if os.path.isfile(os.path.join(folder, SETTINGS_FILE)):
        return folder, f"attnsvm probe: the run with these settings is stored in {folder}: reusing its finished heads{tail}"
    others = []
    if os.path.isdir(root):
        for name in os.listdir(root):
            path = os.path.join(root, name, SETTINGS_FILE)
            if os.path.join(root, name) != folder and os.path.isfile(path):
                others.append((os.path.getmtime(path), os.path.join(root, name), path))
    line = f"attnsvm probe: storing the run in {folder}, a new folder{tail}"
    if others:
        _, latest, path = max(others)
        try:
            with open(path, encoding="utf-8") as fh:
                before = json.load(fh)
            changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
        except (OSError, ValueError):
            changed = []
        what = f" (in {', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''})" if changed else ""
        line = (f"attnsvm probe: storing the run in {folder}, a new folder: its settings differ from those of the run "
                f"stored in {latest}{what}{tail}")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        from attnsvm._files import oserror_text
        from attnsvm.runner import StorageError

        raise StorageError(f"cannot create the probe's default folder {folder}: {oserror_text(exc, folder)}; give "
                           "--out DIR, or --no-store to write nothing") from None
    _write_text(os.path.join(folder, SETTINGS_FILE), text + "\n")
    return folder, line


def run_probe(layers=None, heads=None, sentences=None, n_sentences: int | None = None, out: str | None = None,
              as_json: bool = False, *, svm_sentences=None, threshold: float | None = None, query: str | None = None,
              seed: int | None = None, max_length: int | None = None, progress=None, max_memory=None, model=None,
              view_sentences: int | None = None, workers: int | None = None, scheduler: str | None = None,
              connect_timeout: float = 20.0, progress_bar: bool = False, null_draws: int | None = None,
              transplant_draws: int | None = None, device: str | None = None, null_stop: bool | None = None,
              null_kind: str | None = None, baseline_max_m: int | None = None,
              query_seed: int | None = None, spectrum_draws: int | None = None, store: bool = False,
              statistic: str | None = None, announce=None, store_root: str = STORE_ROOT) -> str:
    """Probe a model's heads (default: the shipped MiniLM) and return the text to print.

    Parameters
    ----------
    layers, heads : lists of indices (None: all 6 layers, all 12 heads)
    sentences : None (English sentences from the stdlib documentation), a list of str,
        or a path to a UTF-8 text file with one sentence per line (:func:`read_sentences`: blank lines only at the
        end)
    n_sentences : sentences drawn when ``sentences`` is None
    out : optional directory: writes ``probe.csv``, ``probe.json``, the heat map
        ``probe_heatmap.png/.pdf`` and the page ``probe.html`` (:mod:`attnsvm.real.probe_view`) there.
        With ``out`` the heads run as resumable runner tasks stored in ``out/probe``
        (:mod:`attnsvm.experiments.real.probe_run`): the same command resumes a killed probe
    store : without ``out``, store the run all the same, in :func:`default_store`'s folder under ``store_root``
        (``attnsvm probe`` does unless ``--no-store``; False: in this process, nothing written)
    announce : optional callable ``announce(line)`` given the first line, where the run is stored, before the run
    workers, scheduler, connect_timeout : share the heads among N local worker processes or the
        workers of a Dask scheduler (as :func:`attnsvm.runner.run_experiment`; need ``out`` or ``store``)
    progress_bar : show the runner's progress bar over the heads (with ``out`` or ``store``)
    n_sentences, svm_sentences, threshold, query, seed, view_sentences, transplant_draws, null_draws, null_kind,
    null_stop, spectrum_draws, query_seed, baseline_max_m, device, statistic : the fields of those names of
        :class:`attnsvm.real.probe_config.ProbeConfig` (None: its default; every setting validated there, before the
        model loads; ``null_draws`` 0: no verdict; ``query="all"`` draws no null heads)
    transplant_draws : other heads of the model transplanted onto each head's states (descriptive columns
        ``transplant_*``, outside the verdict; :func:`attnsvm.real.nulls.transplant_heads`)
    device : None or a torch device such as "cuda" for the nuclear solves (``device`` of
        :func:`attnsvm.svm.solve`); a ValidationError when torch or that device is missing
    as_json : return JSON (list of per-head rows plus timings) instead of a text table
    svm_sentences, threshold, query, seed, max_length, max_memory : see :func:`attnsvm.real.probe.probe_heads`
        (``max_length`` None: the smaller of 128 and the model's position limit, printed)
    model : None (MiniLM) or a local model directory (``--model``: BERT-like encoder, GPT-2-like or rotary
        Llama/GPT-NeoX decoder)
    view_sentences : sentences shown per head in ``probe.html`` (their tokens shaded by attention)

    ``curve`` (deprecated) was removed in 0.3: ``svm_sentences`` with several values gives each head's
    score, null heads and verdict at each m (:func:`attnsvm.real.agreement.agreement_curve` stays, for the
    agreement alone).

    Returns
    -------
    str
    """
    from attnsvm.real.probe import probe_heads
    from attnsvm.real.probe_steps import check_indices, resolve_model
    from attnsvm.real.probe_config import probe_config
    from attnsvm.real.sentences import check_seed

    # the probe's settings, defaulted and validated once (attnsvm.real.probe_config) before any work; unset: None
    given = dict(n_sentences=n_sentences, svm_sentences=svm_sentences, query=query, threshold=threshold, seed=seed,
                 max_length=max_length, view_sentences=view_sentences, transplant_draws=transplant_draws,
                 device=device, null_stop=null_stop, baseline_max_m=baseline_max_m, query_seed=query_seed,
                 spectrum_draws=spectrum_draws, null_kind=null_kind, null_draws=null_draws,
                 statistic=statistic)
    settings = probe_config(**{k: v for k, v in given.items() if v is not None})
    check_seed(settings.seed)
    sentences = _checked(sentences, out, max_memory, device, (scheduler or (workers is not None and workers != 1))
                         and not out and not store)
    loaded = resolve_model(model, max_memory)  # loaded once: the default max_length needs its position limit
    length_note = (f"max_length {loaded.probe_max_length(max_length)} tokens per sentence"
                   + (f" (default: the smaller of 128 and the model's position limit {loaded.max_length})"
                      if max_length is None else ""))
    # with what the model resolves (sentences, layers, heads, max_length), for both paths below
    config = probe_config(settings, sentences=sentences, layers=check_indices(layers, loaded.n_layers, "layers"),
                          heads=check_indices(heads, loaded.n_heads, "heads"),
                          max_length=loaded.probe_max_length(max_length), model=None if model is None else loaded.path)
    if store and not out:  # the default folder, named by the settings: the same command resumes it
        out, line = default_store(config, store_root)
        check_outputs(out)
        if announce is not None:
            announce(line)
    stored = None
    if out:
        res, stored = _run_stored(config, out, dict(workers=workers, scheduler=scheduler, progress=progress_bar,
                                                    connect_timeout=connect_timeout, max_memory=max_memory))
    else:
        res = probe_heads(config=config, model=None if model is None else loaded, progress=progress,
                          max_memory=max_memory)
    table = res.table
    payload = {"config": res.config, "seconds": res.seconds, "heads": json.loads(table.to_json(orient="records"))}
    if stored is not None:
        payload["stored"] = stored
    written = _write_outputs(res, out, payload) if out else []
    if as_json:
        return json.dumps(payload, indent=2)
    return _text(res, config, length_note, stored, written)


def _checked(sentences, out, max_memory, device, needs_store: bool):
    """The checks before any work (the outputs' folder, torch or the device when asked for, workers without a stored
    run); returns the sentences, read from their file when ``sentences`` is a path."""
    from attnsvm.real.probe import solver_options

    if out:
        check_outputs(out)
    solver_options(max_memory, device)  # a clear error before any work when torch or the device is missing
    if needs_store:
        raise ValidationError("--workers and --scheduler run the heads as stored tasks: give --out DIR (or leave "
                              "out --no-store)")
    return read_sentences(sentences) if isinstance(sentences, (str, os.PathLike)) else sentences


def _run_stored(config, out: str, options: dict):
    """The probe of ``config`` as stored runner tasks in ``out`` (:func:`attnsvm.runner.run_experiment` with
    ``options``: workers, scheduler, progress, connect_timeout, max_memory), the table read back verified; returns
    the ProbeResult and what the run computed and reused."""
    from attnsvm.experiments.real.probe_run import ProbeRun, stored_result
    from attnsvm.runner import StorageError, results_problem, run_experiment

    t0 = time.perf_counter()
    summary = run_experiment(ProbeRun(), config, out, **options)
    problem = results_problem(summary.outdir)   # the table shown is the one the run stored, verified
    if problem is not None:
        raise StorageError(f"{summary.outdir}: {problem}")
    res = stored_result(config, summary.outdir, max_memory=options.get("max_memory"), t0=t0)
    res.seconds.update(tasks_computed=int(summary.computed), tasks_reused=int(summary.resumed),
                       tasks=task_costs(summary.outdir))
    heads = int(res.table[["layer", "head"]].drop_duplicates().shape[0]) if len(res.table) else 0
    stored = {"dir": summary.outdir, "heads": heads, "tasks": summary.tasks, "computed": summary.computed,
              "resumed": summary.resumed,
              "failed": [{"key": f["key"], "error": f["error"]} for f in summary.failed],
              "checks": len(summary.checks), "checks_passed": sum(bool(c["passed"]) for c in summary.checks),
              "check_groups": check_groups(summary.checks)}
    return res, stored


def write_stored_page(outdir: str) -> str:
    """Rebuild ``outdir/probe.html`` (``attnsvm report`` on a probe's folder) from the stored run in
    ``outdir/probe``: its settings (``meta.json``'s config), its verified results and one forward pass for the view's
    attention (no SVM is solved); every head's task counts as reused. Returns the page's path. A folder without a
    finished run's results is a :class:`attnsvm.errors.ValidationError` that says to run the probe again."""
    from attnsvm.experiments.real.probe_run import stored_result
    from attnsvm.real.probe_config import probe_config
    from attnsvm.runner import results_problem

    rundir = os.path.join(outdir, "probe")
    again = "run the same 'attnsvm probe --out' command again (it reuses the stored heads and writes the page)"
    try:
        with open(os.path.join(rundir, "meta.json"), encoding="utf-8") as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{outdir}: cannot read the stored probe's settings ({exc}): {again}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise ValidationError(f"{outdir}: the stored probe's meta.json holds no settings: {again}")
    if not os.path.isfile(os.path.join(rundir, "results.parquet")):
        raise ValidationError(f"{outdir}: the stored probe has not finished (no probe/results.parquet): {again}")
    problem = results_problem(rundir)
    if problem is not None:
        raise ValidationError(f"{rundir}: {problem}: {again}")
    config = probe_config(meta["config"])
    res = stored_result(config, rundir)
    tasks = int(meta.get("tasks") or 0)
    # no task ran: every task's cost, and the wall clock shown, are the stored run's
    from attnsvm.report import stored_experiment_cost

    res.seconds.update(tasks_computed=0, tasks_reused=tasks, tasks=task_costs(rundir, this_run=False),
                       total=stored_experiment_cost(rundir).wall_seconds, total_of="the stored run")
    curve = "probe_curve.png" if "m" in res.table.columns else None
    return write_probe_view(res, outdir, heatmap="probe_heatmap.png", curve=curve)


#: the parts of a stored probe whose task costs are shown apart: (name, whether a task key belongs to it)
PROBE_PARTS = (("heads", lambda key: not key.endswith("-null")), ("null heads", lambda key: key.endswith("-null")))


def task_costs(rundir: str, this_run: bool = True) -> dict:
    """The stored probe's task costs by part, as its records give them (:mod:`attnsvm.runner.costs`, read from
    ``rundir/meta.json``): ``{"heads": {...}, "null heads": {...}}``, each :meth:`PartCost.as_dict
    <attnsvm.runner.costs.PartCost.as_dict>` plus ``text`` (:func:`~attnsvm.runner.costs.part_cost_text`), for the
    terminal, probe.html and probe.json alike. ``this_run`` False (a page rebuilt from the stored run): every task
    counts as reused, its CPU as the stored run's."""
    import dataclasses

    from attnsvm.report import stored_experiment_cost
    from attnsvm.runner.costs import part_cost_text

    cost = stored_experiment_cost(rundir)
    if not this_run:
        cost = dataclasses.replace(cost, tasks=tuple(dataclasses.replace(t, computed=False) for t in cost.tasks))
    parts = cost.parts(lambda key: next(name for name, belongs in PROBE_PARTS if belongs(key)))
    return {name: {**part.as_dict(), "text": part_cost_text(part)} for name, part in parts.items()}


#: a stored probe's checks in three groups, what each says and whether it matters: (key, label, what it means)
CHECK_GROUPS = (
    ("integrity", "integrity", "whether the numbers above are sound (certified SVMs, correlations in [-1, 1]): a "
                               "fail means the run is broken"),
    ("claim", "the claim", "the verdict above restated (do the heads beat their null heads?): a fail is the answer "
                           "'no', not a broken run"),
    ("secondary", "secondary", "against random selections, which any bilinear head passes: context, not the answer"),
)


def check_groups(checks: list[dict]) -> dict:
    """A stored probe's checks (the runner's check dicts) by group, ``{key: {"n", "pass", "fail", "inconclusive",
    "finding"}}`` for the keys of :data:`CHECK_GROUPS` that have checks: ``integrity`` (``kind`` "integrity"),
    ``secondary`` (named "secondary ..."), ``claim`` (the others)."""
    from attnsvm.experiments.checks import count_verdicts

    out = {}
    for key, _, _ in CHECK_GROUPS:
        group = [c for c in checks if _check_group(c) == key]
        if group:
            out[key] = {"n": len(group), **count_verdicts(group)}
    return out


def _check_group(check: dict) -> str:
    if check.get("kind") == "integrity":
        return "integrity"
    return "secondary" if str(check.get("name", "")).startswith("secondary") else "claim"


def stored_lines(stored: dict) -> list[str]:
    """The lines ``attnsvm probe --out`` prints about the stored run: heads and the tasks they ran as (a head's
    task and its null heads' task, at each m), computed now or reused, and the checks by group, each with what it
    means (:data:`CHECK_GROUPS`); ``stored``: the dict of :func:`_run_stored`."""
    tasks = int(stored.get("tasks", stored["computed"] + stored["resumed"] + len(stored["failed"])))
    heads = stored.get("heads")
    what = f"{heads} heads ({tasks} tasks: each head's and its null heads')" if heads and heads != tasks else \
        f"{tasks} tasks"
    lines = [f"heads stored in {stored['dir']}: {what}: {stored['computed']} computed, {stored['resumed']} resumed, "
             f"{len(stored['failed'])} failed" + (" (resumed: stored by an earlier run)" if stored["resumed"] else "")]
    lines += [f"  FAILED head {f['key']}: {f['error']}" for f in stored["failed"]]
    groups = stored.get("check_groups") or {}
    parts = []
    for key, label, meaning in CHECK_GROUPS:
        g = groups.get(key)
        if not g:
            continue
        other = ", ".join(f"{g[v]} {v}" for v in ("fail", "inconclusive", "finding") if g[v])
        parts.append(f"  {label}: {g['pass']}/{g['n']} pass{' (' + other + ')' if other else ''}: {meaning}")
    if parts:
        lines.append(f"checks ({stored['checks_passed']}/{stored['checks']} pass; each in "
                     f"{os.path.join(stored['dir'], 'checks.json')}):")
        lines += parts
    return lines


def _write_outputs(res, out: str, payload: dict) -> list:
    """probe.csv, probe.json, the heat map (and with several m the curve) and probe.html in ``out``; returns the
    paths written."""

    table = res.table
    os.makedirs(out, exist_ok=True)
    _write_text(os.path.join(out, "probe.csv"), table.to_csv(index=False))
    _write_text(os.path.join(out, "probe.json"), json.dumps(payload, indent=2))
    written = [os.path.join(out, "probe.csv"), os.path.join(out, "probe.json")]
    written += _figure(lambda: heatmap_figure(largest_m(table), out, "probe_heatmap"),
                       os.path.join(out, "probe_heatmap"))
    png = next((os.path.basename(p) for p in written if p.endswith(".png")), None)
    curve_png = None
    if "m" in table.columns:  # several m: each head's score against m over its nulls' band
        paths = _figure(lambda: curve_figure(table, out, "probe_curve"), os.path.join(out, "probe_curve"))
        written += paths
        curve_png = next((os.path.basename(p) for p in paths if p.endswith(".png")), None)
    written.append(write_probe_view(res, out, heatmap=png, curve=curve_png))
    return written


def _text(res, config, length_note: str, stored: dict | None, written: list) -> str:
    """The text ``attnsvm probe`` prints: the table, its legends, the verdict summary, the costs, where the heads
    are stored and what was written."""
    from attnsvm.real.nulls import NULLS
    from attnsvm.real.probe import format_table
    from attnsvm.real.verdict import LEGEND, verdict_summary

    table = res.table
    lines = [format_table(table), _COLUMNS, ""]
    if "corr_restricted" in table.columns:
        lines.append(verdict_summary(table))
        if "verdict" in table.columns:
            lines.append(LEGEND)
            if NULLS[config.null_kind].legend:
                lines.append(NULLS[config.null_kind].legend)
        elif config.query == "all":
            lines.append("no null heads for --query all yet: no verdict (the random-selection baseline only)")
    lines.append(length_note)
    nnull = int(table["n_null"].sum() + table["n_null_dropped"].sum()) if "n_null" in table.columns else 0
    if "null_planned" in table.columns:  # the draws stopped early where no further one could change a verdict
        early = int((table["null_stop"].astype(str) != "all drawn").sum())
        nnull = f"{nnull} (of {int(table['null_planned'].sum())} planned; {early} heads stopped early)"
    costs = cost_items(res.seconds, res.forward_cached, null_count=str(nnull))
    lines.append(f"{res.config['n_sentences']} sentences, SVMs on {res.config['svm_sentences']}; cost: "
                 + "; ".join(f"{what} {how}" for what, how in costs))
    if stored is not None:
        lines += stored_lines(stored)
    if written:
        lines.append("wrote " + ", ".join(written))
    return "\n".join(lines)

