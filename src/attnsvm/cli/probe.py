"""What the ``attnsvm probe`` command runs: probe MiniLM's heads, print or save the table.

The CLI wiring lives in :mod:`attnsvm.cli`; this module has no click dependency.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np


from attnsvm.errors import ValidationError
from attnsvm.real.figures import heatmap_figure
from attnsvm.real.probe_view import write_probe_view


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


def read_sentences(path) -> list[str]:
    """Non-empty lines of a UTF-8 text file (``--sentences``), stripped.

    Raises :class:`ValidationError` naming ``--sentences`` and the file when it is missing,
    a folder, behind a path through a file, not UTF-8 text, larger than the memory limit
    allows, holds no non-empty line or a line longer than :data:`MAX_SENTENCE_CHARS` characters.
    """
    from attnsvm.npzfile import input_file, require_file_memory

    path = input_file(path, "--sentences", what="sentences file")
    # the text, its lines and their Python strings: about 10 bytes per byte of the file
    require_file_memory(10.0 * os.path.getsize(path), path, "--sentences: ", "a text file of sentences")
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
    sentences = [line.strip() for line in text.splitlines() if line.strip()]
    del raw, text
    long_ = next((k for k, line in enumerate(sentences) if len(line) > MAX_SENTENCE_CHARS), None)
    if long_ is not None:
        raise ValidationError(f"--sentences: sentence {long_ + 1} of {path!r} has {len(sentences[long_])} characters; "
                              f"a sentence may have at most {MAX_SENTENCE_CHARS} (the probe reads at most "
                              "--max-length tokens of each): one sentence per line")
    if not sentences:
        raise ValidationError(f"--sentences: the file {path!r} holds no non-empty line")
    return sentences


#: the legend printed under the table of ``attnsvm probe``
_COLUMNS = ("columns: mean_selected = mean |O_i|, the tokens a query attends to with weight >= the threshold; "
            "frac_cls = share of argmaxes on [CLS];\n  corr = cosine of the head's key-query matrix W_h with the SVM of "
            "its selections; corr_restricted = the same with W_h projected on what the sentences reveal;\n  "
            "corr_random_restricted = that cosine for random selections of the same sizes (the baseline); advantage = "
            "corr_restricted - baseline;\n  svm_status = optimal (certified) / optimal_inaccurate / infeasible (no "
            "number: no matrix separates the selections); svm_gap = its relative duality gap")


def run_probe(layers=None, heads=None, sentences=None, n_sentences: int = 256, out: str | None = None,
              as_json: bool = False, *, svm_sentences: int = 48, threshold: float = 0.1, query: str = "word",
              seed: int = 0, max_length: int | None = None, progress=None, max_memory=None, model=None,
              view_sentences: int = 4, curve=None, workers: int | None = None, scheduler: str | None = None,
              connect_timeout: float = 20.0, progress_bar: bool = False, null_draws: int | None = None) -> str:
    """Probe a model's heads (default: the shipped MiniLM) and return the text to print.

    Parameters
    ----------
    layers, heads : lists of indices (None: all 6 layers, all 12 heads)
    sentences : None (English sentences from the stdlib documentation), a list of str,
        or a path to a UTF-8 text file with one sentence per line (empty lines skipped)
    n_sentences : sentences drawn when ``sentences`` is None
    out : optional directory: writes ``probe.csv``, ``probe.json``, the heat map
        ``probe_heatmap.png/.pdf`` and the page ``probe.html`` (:mod:`attnsvm.real.probe_view`) there.
        With ``out`` the heads run as resumable runner tasks stored in ``out/probe``
        (:mod:`attnsvm.experiments.real.probe_run`): the same command resumes a killed probe
    workers, scheduler, connect_timeout : share the heads among N local worker processes or the
        workers of a Dask scheduler (as :func:`attnsvm.runner.run_experiment`; need ``out``)
    progress_bar : show the runner's progress bar over the heads (with ``out``)
    null_draws : spectrum null heads per head (None: :data:`attnsvm.real.nulls.NULL_DRAWS`; 0: no verdict);
        ``query="all"`` draws none (nulls of the sequence SVM are not implemented yet), nor does ``curve``
    as_json : return JSON (list of per-head rows plus timings) instead of a text table
    svm_sentences, threshold, query, seed, max_length, max_memory : see :func:`attnsvm.real.probe.probe_heads`
        (``max_length`` None: the smaller of 128 and the model's position limit, printed)
    model : None (MiniLM) or a local model directory (``--model``: BERT-like encoder or GPT-2-like decoder)
    view_sentences : sentences shown per head in ``probe.html`` (their tokens shaded by attention)
    curve : optional list of sentence counts m (int, or None for all loaded sentences): also each
        head's agreement at each m (:func:`attnsvm.real.agreement.agreement_curve` on the same
        sentences); printed per layer and, with ``out``, written to ``probe_agreement.csv`` and the
        figure ``probe_agreement.png/.pdf``

    Returns
    -------
    str
    """
    from attnsvm.real.nulls import NULL_DRAWS
    from attnsvm.real.probe import format_table, probe_heads, resolve_model
    from attnsvm.real.sentences import check_seed
    from attnsvm.real.verdict import LEGEND, verdict_summary

    check_seed(seed)
    if isinstance(sentences, (str, os.PathLike)):
        sentences = read_sentences(sentences)
    if (scheduler or (workers is not None and workers != 1)) and not out:
        raise ValidationError("--workers and --scheduler run the heads as stored tasks: give --out DIR as well")
    loaded = resolve_model(model, max_memory)  # loaded once: the default max_length needs its position limit
    if model is not None:
        model = loaded
    length_note = (f"max_length {loaded.probe_max_length(max_length)} tokens per sentence"
                   + (f" (default: the smaller of 128 and the model's position limit {loaded.max_length})"
                      if max_length is None else ""))
    max_length = loaded.probe_max_length(max_length)
    if null_draws is None:
        null_draws = NULL_DRAWS if query != "all" else 0
    if isinstance(null_draws, bool) or not isinstance(null_draws, (int, np.integer)) or null_draws < 0:
        raise ValidationError(f"--null-draws must be an integer >= 0, got {null_draws!r}")
    kw = dict(threshold=threshold, query=query, seed=seed, max_length=max_length, max_memory=max_memory,
              view_sentences=view_sentences, null_draws=int(null_draws))
    stored = None
    if out:
        res, stored = _probe_stored(sentences, n_sentences, layers, heads, svm_sentences, model, out, workers,
                                    scheduler, connect_timeout, progress_bar, progress, kw)
    else:
        res = probe_heads(sentences, n_sentences=n_sentences, layers=layers, heads=heads,
                          svm_sentences=svm_sentences, progress=progress, model=model, **kw)
    table = res.table
    payload = {"config": res.config, "seconds": res.seconds, "heads": json.loads(table.to_json(orient="records"))}
    if stored is not None:
        payload["stored"] = stored
    agreement = None
    if curve is not None:
        from attnsvm.real.agreement import agreement_curve

        agreement = agreement_curve(model, res.sentences, sizes=curve, layers=layers, heads=heads, query=query,
                                    threshold=threshold, seed=seed, max_length=max_length, progress=progress,
                                    max_memory=max_memory)
        payload["agreement"] = json.loads(agreement.table.to_json(orient="records"))
    written = []
    if out:
        os.makedirs(out, exist_ok=True)
        _write_text(os.path.join(out, "probe.csv"), table.to_csv(index=False))
        _write_text(os.path.join(out, "probe.json"), json.dumps(payload, indent=2))
        written = [os.path.join(out, "probe.csv"), os.path.join(out, "probe.json")]
        written += heatmap_figure(table, out, "probe_heatmap")
        png = next((os.path.basename(p) for p in written if p.endswith(".png")), None)
        written.append(write_probe_view(res, out, heatmap=png))
        if agreement is not None:
            from attnsvm.real.agreement import agreement_figure

            _write_text(os.path.join(out, "probe_agreement.csv"), agreement.table.to_csv(index=False))
            written.append(os.path.join(out, "probe_agreement.csv"))
            written += agreement_figure(agreement.table, out, "probe_agreement")
    if as_json:
        return json.dumps(payload, indent=2)
    lines = [format_table(table), _COLUMNS, ""]
    if "corr_restricted" in table.columns:
        lines.append(verdict_summary(table))
        if "verdict" in table.columns:
            lines.append(LEGEND)
        elif query == "all":
                lines.append("no null heads for --query all yet: no verdict (the random-selection baseline only)")
    lines.append(length_note)
    sec = res.seconds
    fwd = ("reused from an earlier probe of the same sentences in this process (not re-timed)"
           if res.forward_cached or sec.get("forward_cached") else f"{sec['forward']:.1f} s")
    nnull = int(table["n_null"].sum() + table["n_null_dropped"].sum()) if "n_null" in table.columns else 0
    null_s = float(table["null_seconds"].sum()) if "null_seconds" in table.columns else sec.get("nulls", 0.0)
    lines.append(f"{res.config['n_sentences']} sentences, SVMs on {res.config['svm_sentences']}; cost: forward {fwd}, "
                 f"head and baseline SVMs {sec['svm']:.1f} s, {nnull} null-head SVMs {null_s:.1f} s, "
                 f"total {sec['total']:.1f} s (wall)")
    if agreement is not None:
        lines += ["", "agreement with the SVM by the number of sentences m in it (mean over the layer's heads):",
                  f"{'layer':>5}  {'m':>6}  {'corr_restricted':>15}  {'random':>8}  {'above':>7}  {'certified':>9}"]
        for (layer, m), g in agreement.table.groupby(["layer", "m"]):
            lines.append(f"{layer:>5}  {m:>6}  {g['corr_restricted'].mean():>15.4f}  "
                         f"{g['corr_random_restricted'].mean():>8.4f}  {int((g['advantage'] > 0).sum()):>3}/{len(g):<3}  "
                         f"{int((g['svm_status'] == 'optimal').sum()):>5}/{len(g):<3}")
        lines.append(f"agreement curve: SVMs {agreement.seconds['svm']:.1f} s, total {agreement.seconds['total']:.1f} s")
    if stored is not None:
        lines.append(f"heads stored in {stored['dir']}: {stored['computed']} computed, {stored['resumed']} resumed, "
                     f"{len(stored['failed'])} failed; checks {stored['checks_passed']}/{stored['checks']} passed")
        lines += [f"  FAILED head {f['key']}: {f['error']}" for f in stored["failed"]]
    if written:
        lines.append("wrote " + ", ".join(written))
    return "\n".join(lines)


def _probe_stored(sentences, n_sentences, layers, heads, svm_sentences, model, out, workers, scheduler,
                  connect_timeout, progress_bar, progress, kw):
    """The probe with one runner task per head, stored in ``out/probe`` (resumable), then the
    selections and attention of the first sentences for the view from one pass without SVMs.

    Returns ``(ProbeResult, stored)`` with ``stored`` the run's summary (folder, computed, resumed,
    failed tasks, checks)."""
    import pandas as pd

    from attnsvm.experiments.real import probe_run
    from attnsvm.experiments.real.probe_run import ProbeConfig, ProbeRun
    from attnsvm.real.probe import check_indices, probe_heads, resolve_model
    from attnsvm.runner import run_experiment

    loaded = resolve_model(model, kw["max_memory"])
    if model is not None:  # tasks run in this process use the loaded model (and its cached forward pass)
        probe_run._MODELS.clear()
        probe_run._MODELS[loaded.path] = loaded
    cfg = ProbeConfig(sentences=sentences, n_sentences=n_sentences, svm_sentences=svm_sentences,
                      layers=check_indices(layers, loaded.n_layers, "layers"),
                      heads=check_indices(heads, loaded.n_heads, "heads"), query=kw["query"],
                      threshold=kw["threshold"], seed=kw["seed"], max_length=kw["max_length"],
                      view_sentences=kw["view_sentences"], model=None if model is None else loaded.path,
                      null_draws=kw["null_draws"])
    t0 = time.perf_counter()
    summary = run_experiment(ProbeRun(), cfg, out, workers=workers, scheduler=scheduler, progress=progress_bar,
                             connect_timeout=connect_timeout, max_memory=kw["max_memory"])
    path = os.path.join(summary.outdir, "results.parquet")
    table = pd.read_parquet(path) if os.path.exists(path) else pd.DataFrame()
    view = probe_heads(sentences, n_sentences=n_sentences, layers=cfg.layers, heads=cfg.heads, svm_sentences=0,
                       progress=progress, model=loaded, **kw)
    table = probe_run.combine(cfg, table)
    if not table.empty:
        table = table.sort_values(["layer", "head"], ignore_index=True)
        if "view_support" in table.columns:
            view.support = {(int(r.layer), int(r.head)): np.array(json.loads(r.view_support), bool)
                            for r in table.itertuples() if r.view_support != "[]"}
        svm = float(table["seconds_svm"].sum()) if "seconds_svm" in table.columns else 0.0
        table = table.drop(columns=[c for c in ("view_support", "seconds_svm") if c in table.columns])
        view.seconds.update(svm=svm)
    view.table = table
    view.config["svm_sentences"] = min(int(svm_sentences), len(view.sentences))
    view.seconds["total"] = time.perf_counter() - t0
    stored = {"dir": summary.outdir, "computed": summary.computed, "resumed": summary.resumed,
              "failed": [{"key": f["key"], "error": f["error"]} for f in summary.failed],
              "checks": len(summary.checks), "checks_passed": sum(bool(c["passed"]) for c in summary.checks)}
    return view, stored
