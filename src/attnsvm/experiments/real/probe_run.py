"""``probe``: the probe of :func:`attnsvm.real.probe.probe_heads` as resumable runner tasks, one per head.

``attnsvm probe --out DIR`` runs it through :func:`attnsvm.runner.run_experiment` into ``DIR/probe``:
each (layer, head) is a task whose row (the head's statistics, its SVM and its random baselines'
SVMs) is stored as a shard when it finishes, so a killed probe resumes where it stopped
(``DIR/probe/shards/<config hash>/L<layer>-H<head>.parquet``), ``--workers N`` shares the heads
among N local processes and ``--scheduler ADDRESS`` among the workers of a Dask cluster. A head's
row equals its row of one in-process ``probe_heads`` call over all heads (its random baselines come
from its own generator, :func:`attnsvm.real.probe.baseline_rng`). ``DIR/probe`` holds the runner's
``meta.json``, ``checks.json`` and ``results.parquet``, so ``attnsvm report DIR`` shows the probe as
a section (its checks are those of ``real-minilm-heads``).

Null heads (:mod:`attnsvm.real.nulls`) are tasks of their own, one per head (``L<layer>-H<head>-null``,
its ``null_draws`` spectrum and ``structured_draws`` structured nulls), so heads and nulls resume
separately. ``results.parquet`` holds both kinds of rows (column ``part``: "head" or "null");
:func:`combine` turns them into one row per head with its p-values and the verdict (Benjamini-Yekutieli
over all the probed heads, so the verdict is computed from the whole table, never per task).

The tasks call the steps of :mod:`attnsvm.real.probe_steps` (one forward pass per process, cached by
:mod:`attnsvm.real.cache`; the layer's SVM sentences built and validated once per task); :func:`stored_result`
assembles from the runner's folder the :class:`attnsvm.real.probe.ProbeResult` that
``attnsvm probe --out`` writes and shows.

This experiment is not registered: ``reproduce`` runs the small ``real-minilm-heads`` preset, the
full-scale probe is the command above.
"""

from __future__ import annotations

import json
import os
import time

from typing import Literal

import numpy as np
from pydantic import NonNegativeInt

from attnsvm.experiments.base import Task
from attnsvm.experiments.real.minilm_heads import HeadsConfig, RealMinilmHeads


class ProbeConfig(HeadsConfig):
    """The arguments of :func:`attnsvm.real.probe.probe_heads` (``layers`` and ``heads`` explicit):
    those of ``real-minilm-heads`` plus the sentences, the view, the model, the transplanted heads and the
    solvers' device."""

    sentences: list[str] | None = None
    svm_sentences: NonNegativeInt = 48
    view_sentences: NonNegativeInt = 4
    model: str | None = None
    transplant_draws: NonNegativeInt = 0
    device: str | None = None
    #: a head's spectrum nulls stop once no further draw can change any verdict (``probe_heads(null_stop=)``)
    null_stop: bool = True
    #: the verdict's null (``probe_heads(null_kind=)``): "spectrum" or "sink" (then ``null_draws`` spectrum nulls
    #: too, all drawn, in the descriptive ``spectrum_*`` columns)
    null_kind: Literal["spectrum", "sink"] = "spectrum"


def has_nulls(config) -> bool:
    """Whether the probe of ``config`` draws null heads (one query per sentence, SVMs, null_draws > 0)."""
    return config.query != "all" and config.svm_sentences >= 1 and \
        (config.null_draws + config.structured_draws + config.transplant_draws) > 0


def tested_heads(config) -> int:
    """The number of heads the probe of ``config`` draws nulls for (every probed head): the m of the null tasks'
    stopping level (:func:`attnsvm.real.verdict.stop_level`), known when the tasks are planned."""
    return len(config.layers) * len(config.heads)


def _setup(config, layer: int, head: int):
    """The probe's shared step for one task: :func:`attnsvm.real.probe_steps.prepare_probe` (the forward pass
    cached per process), the layer's selections and its SVM sentences (built once per process for the
    consecutive tasks of a layer: :func:`attnsvm.real.cache.derived`)."""
    from attnsvm.real import cache
    from attnsvm.real.probe_steps import layer_inputs, layer_selections, prepare_probe, seq_layer_inputs

    setup = prepare_probe(config.sentences, n_sentences=config.n_sentences, layers=[layer], heads=[head],
                          query=config.query, threshold=config.threshold, seed=config.seed,
                          max_length=config.max_length, model=config.model)
    m = min(config.svm_sentences, len(setup.sentences))
    inp = None
    if m >= 1:
        build = (lambda: seq_layer_inputs(setup, layer, m)) if config.query == "all" else \
            (lambda: layer_inputs(setup, layer, m))
        # the inputs read the forward pass, the queries (query kind, seed) and the causal flag (the model's)
        inp = cache.derived(setup.fw, ("layer_inputs", config.query, setup.seed, setup.causal, int(layer), int(m)),
                            build)
    return setup, layer_selections(setup, layer), inp, m


#: the statistic of heads solved in this process, ``{(config key, layer, head): value}``
#: (:func:`attnsvm.real.probe_steps.row_statistic`): a null task right after its head's task in the same
#: process reuses it instead of solving the head's SVM again (a fresh process solves it: the same value)
_STATISTIC: dict = {}


def _statistic_key(config, layer: int, head: int) -> tuple:
    import hashlib

    return hashlib.sha256(config.model_dump_json().encode()).hexdigest(), int(layer), int(head)


def _solver(config) -> dict:
    from attnsvm.real.probe import solver_options

    return solver_options(None, config.device)


def combine(config, table):
    """The per-head table of a stored probe: the head rows (``part == "head"``) with the null columns of
    their null task's rows (:func:`attnsvm.real.verdict.null_columns`) and the verdict over all heads
    (:func:`attnsvm.real.verdict.add_verdict`). A table without null rows comes back with only the head rows."""
    import pandas as pd

    from attnsvm.real.probe import head_null_columns
    from attnsvm.real.verdict import add_verdict

    if table.empty or "part" not in table.columns:
        return table
    # layer and head stay integers: a task that stored no rows (a head without an SVM draws no nulls) is a
    # zero-row shard, and concatenating it made them float (printed "3.0000  0.0000", stored "3.0,0.0")
    table = table.astype({c: "int64" for c in ("layer", "head") if c in table.columns})
    nulls = table[table["part"] == "null"]
    null_only = [c for c in ("kind", "draw", "null_status", "null_corr_restricted", "null_seconds", "source")
                 if c in table]
    heads = table[table["part"] == "head"].drop(columns=null_only).reset_index(drop=True)  # a head's NaN columns stay
    heads = heads.drop(columns=["part"])
    if nulls.empty:
        return heads
    from attnsvm.real.probe_steps import row_statistic

    planned = int(config.null_draws) if getattr(config, "null_stop", False) and config.null_draws else None
    tested = tested_heads(config)
    extra = []
    for r in heads.itertuples():
        g = nulls[(nulls["layer"] == r.layer) & (nulls["head"] == r.head)].sort_values("draw", kind="stable")
        real = row_statistic(r._asdict()) if str(r.svm_status) == "optimal" else float("nan")
        if g.empty and not (planned and not np.isfinite(real)):  # its null task failed: no p-values
            extra.append({})
            continue
        draws = [{"kind": k, "corr_restricted": float(v), "seconds": float(s), "source": src}
                 for k, v, s, src in zip(g["kind"], g["null_corr_restricted"], g["null_seconds"],
                                         g["source"] if "source" in g.columns else [""] * len(g))]
        extra.append(head_null_columns(real, draws, planned=planned, tested=tested, null_kind=config.null_kind))
    out = pd.concat([heads, pd.DataFrame(extra, index=heads.index)], axis=1)
    return add_verdict(out)


class ProbeRun(RealMinilmHeads):
    """The probe, one task per head and one per head's null heads (see the module docstring)."""

    name = "probe"
    order = 99
    title = "Probe: do the heads' key-query matrices point along the nuclear-norm SVM of their own selections?"
    Config = ProbeConfig
    quick = {}

    def tasks(self, config):
        parts = ("head", "null") if has_nulls(config) else ("head",)  # a head's null task right after it
        return [Task(f"L{int(l)}-H{int(h)}" + ("-null" if p == "null" else ""), 1,
                     {"layer": int(l), "head": int(h), "part": p})
                for l in config.layers for h in config.heads for p in parts]

    def run_task(self, config, task):
        """A head task: the head's row of :attr:`ProbeResult.table` (``part`` "head"), plus ``view_support``:
        its SVM's support tokens in the first ``view_sentences`` sentences as JSON (for probe.html; "[]"
        without an SVM). A null task: one row per null head (``part`` "null", ``kind``, ``draw``,
        ``null_status``, ``null_corr_restricted``, ``null_seconds``)."""
        import pandas as pd

        from attnsvm.real.probe_steps import head_task

        l, h = task.params["layer"], task.params["head"]
        setup, ls, inp, m = _setup(config, l, h)
        if task.params.get("part") == "null":
            return pd.DataFrame(self._null_rows(config, setup, ls, inp, m, l, h))
        row, sup, t_svm = {"layer": l, "head": h, **ls.stats[0]}, None, 0.0
        if inp is not None:
            t0 = time.perf_counter()
            svm_row, sup = head_task(setup, inp, l, h, ls.sel[0, :m], baseline_draws=config.baseline_draws,
                                     **_solver(config))
            t_svm = time.perf_counter() - t0
            row.update(svm_row)
            if has_nulls(config) and config.null_stop:  # for its null task, if it runs next in this process
                from attnsvm.real.probe_steps import row_statistic

                if len(_STATISTIC) > 4096:
                    _STATISTIC.clear()
                _STATISTIC[_statistic_key(config, l, h)] = row_statistic(svm_row)
        out = pd.DataFrame([row])
        out.insert(0, "part", "head")
        k = min(config.view_sentences, len(setup.sentences))
        out["view_support"] = json.dumps(np.asarray(sup[:k], bool).tolist() if sup is not None else [])
        out["seconds_svm"] = t_svm
        return out

    def input_digests(self, config):
        """Digest of the model's files (weights, config, tokenizer): the runner recomputes stored heads when the
        model's files were replaced in place (same path, other content)."""
        from attnsvm._files import folder_digest
        from attnsvm.real.minilm import model_path

        return {"model": folder_digest(config.model or model_path())}

    @staticmethod
    def _null_rows(config, setup, ls, inp, m, layer, head) -> list[dict]:
        from attnsvm.real.probe_steps import head_statistic, null_task

        if inp is None:
            return []
        real = None
        if config.null_stop and config.null_draws:
            key = _statistic_key(config, layer, head)
            real = _STATISTIC.pop(key, None)
            if real is None:  # its head ran in another process (or earlier): solve the head's SVM here
                real = head_statistic(setup, inp, layer, head, ls.sel[0, :m], **_solver(config))
        draws = null_task(setup, inp, layer, head, ls.sel[0, :m], null_draws=config.null_draws,
                          structured_draws=config.structured_draws, transplant_draws=config.transplant_draws,
                          null_selection=config.null_selection, real=real, tested=tested_heads(config),
                          null_kind=config.null_kind, spectrum_draws=config.null_draws, **_solver(config))
        return [{"part": "null", "layer": layer, "head": head, "kind": d["kind"], "draw": d["draw"],
                 "null_status": d["status"], "null_corr_restricted": d["corr_restricted"],
                 "null_seconds": d["seconds"], **({"source": d["source"]} if "source" in d else {})}
                for d in draws]

    def plot(self, config, table, outdir):
        from attnsvm.real.figures import heatmap_figure

        table = combine(config, table)
        return heatmap_figure(table, outdir, "probe_heatmap") if "corr_restricted" in table.columns else []

    def checks(self, config, table):
        table = combine(config, table)
        if "corr_restricted" not in table.columns:  # svm_sentences = 0: statistics only, nothing to check
            return []
        return super().checks(config, table)

    def deviations(self, config):
        return []

    def explain(self, config, table):
        table = combine(config, table)
        n = len(config.sentences) if config.sentences is not None else config.n_sentences
        head = (f"{len(table)} heads, {n} sentences, each head's SVM on the first {config.svm_sentences}, "
                f"{config.query} queries, threshold {config.threshold}, {config.baseline_draws} random draw(s) per head"
                + (f", {config.null_draws} spectrum null heads per head" if has_nulls(config) else "")
                + (" (fewer where no further draw can change any verdict)"
                   if has_nulls(config) and config.null_stop and config.null_draws else "")
                + (f", {config.transplant_draws} transplanted heads per head (descriptive)"
                   if has_nulls(config) and config.transplant_draws else "")
                + (f", model {config.model}" if config.model else ", MiniLM-L6") + ".")
        if table.empty or "corr_restricted" not in table.columns:
            return head
        from attnsvm.real.verdict import verdict_summary

        return head + "\n\n" + verdict_summary(table)


def stored_result(config: ProbeConfig, outdir: str, *, max_memory=None, t0: float | None = None):
    """The :class:`attnsvm.real.probe.ProbeResult` of a stored probe (``outdir``: the runner's folder of
    ``config``, holding ``results.parquet``): its rows combined with their null tasks' and the verdict over all
    heads (:func:`combine`), and the view's arrays from the forward pass
    (:func:`attnsvm.real.probe_steps.view_arrays`, no SVM). ``t0``: ``time.perf_counter()`` at the start (for
    the total seconds)."""
    import pandas as pd

    from attnsvm.real.probe import result_of
    from attnsvm.real.probe_steps import prepare_probe, view_arrays

    t0 = time.perf_counter() if t0 is None else t0
    path = os.path.join(outdir, "results.parquet")
    table = pd.read_parquet(path) if os.path.exists(path) else pd.DataFrame()
    setup = prepare_probe(config.sentences, n_sentences=config.n_sentences, layers=config.layers,
                          heads=config.heads, query=config.query, threshold=config.threshold, seed=config.seed,
                          max_length=config.max_length, model=config.model, max_memory=max_memory)
    view = view_arrays(setup, config.view_sentences)
    table = combine(config, table)
    support, svm, nulls = {}, 0.0, 0.0
    if not table.empty:
        table = table.sort_values(["layer", "head"], ignore_index=True)
        if "view_support" in table.columns:
            support = {(int(r.layer), int(r.head)): np.array(json.loads(r.view_support), bool)
                       for r in table.itertuples() if r.view_support != "[]"}
        svm = float(table["seconds_svm"].sum()) if "seconds_svm" in table.columns else 0.0
        nulls = float(table["null_seconds"].sum()) if "null_seconds" in table.columns else 0.0
        table = table.drop(columns=[c for c in ("view_support", "seconds_svm") if c in table.columns])
    n = len(setup.sentences)
    cfg = dict(n_sentences=n, layers=setup.layers, heads=setup.heads, query=config.query,
               threshold=float(config.threshold), svm_sentences=min(int(config.svm_sentences), n),
               baseline_draws=int(config.baseline_draws), seed=int(setup.seed), max_length=int(setup.max_length))
    if getattr(setup.model, "name", "") != "MiniLM":
        cfg.update(model=setup.model.path, family=setup.model.family.name)
    seconds = {"forward": setup.t_forward, "forward_cached": setup.cached, "svm": svm, "nulls": nulls,
               "total": time.perf_counter() - t0}
    return result_of(setup, table, view, support, seconds, cfg)
