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

This experiment is not registered: ``reproduce`` runs the small ``real-minilm-heads`` preset, the
full-scale probe is the command above.
"""

from __future__ import annotations

import json

import numpy as np
from pydantic import NonNegativeInt

from attnsvm.experiments.base import Task
from attnsvm.experiments.real.minilm_heads import HeadsConfig, RealMinilmHeads

#: models loaded by this process, by directory (a Dask worker runs many heads of one model)
_MODELS: dict = {}


class ProbeConfig(HeadsConfig):
    """The arguments of :func:`attnsvm.real.probe.probe_heads` (``layers`` and ``heads`` explicit):
    those of ``real-minilm-heads`` plus the sentences, the view and the model."""

    sentences: list[str] | None = None
    svm_sentences: NonNegativeInt = 48
    view_sentences: NonNegativeInt = 4
    model: str | None = None


def _model(path):
    from attnsvm.real.probe import resolve_model

    if path is None:
        return resolve_model(None)
    if path not in _MODELS:
        _MODELS.clear()
        _MODELS[path] = resolve_model(path)
    return _MODELS[path]


def has_nulls(config) -> bool:
    """Whether the probe of ``config`` draws null heads (one query per sentence, SVMs, null_draws > 0)."""
    return config.query != "all" and config.svm_sentences >= 1 and (config.null_draws + config.structured_draws) > 0


def combine(config, table):
    """The per-head table of a stored probe: the head rows (``part == "head"``) with the null columns of
    their null task's rows (:func:`attnsvm.real.verdict.null_columns`) and the verdict over all heads
    (:func:`attnsvm.real.verdict.add_verdict`). A table without null rows comes back with only the head rows."""
    import pandas as pd

    from attnsvm.real.verdict import add_verdict, null_columns

    if table.empty or "part" not in table.columns:
        return table
    nulls = table[table["part"] == "null"]
    null_only = [c for c in ("kind", "draw", "null_status", "null_corr_restricted", "null_seconds") if c in table]
    heads = table[table["part"] == "head"].drop(columns=null_only).reset_index(drop=True)  # a head's NaN columns stay
    heads = heads.drop(columns=["part"])
    if nulls.empty:
        return heads
    extra = []
    for r in heads.itertuples():
        g = nulls[(nulls["layer"] == r.layer) & (nulls["head"] == r.head)]
        if g.empty:  # its null task failed: no p-values
            extra.append({})
            continue
        as_dicts = lambda kind: [{"corr_restricted": float(v), "seconds": float(s)}  # noqa: E731
                                 for v, s in zip(g.loc[g["kind"] == kind, "null_corr_restricted"],
                                                 g.loc[g["kind"] == kind, "null_seconds"])]
        real = float(r.corr_restricted) if str(r.svm_status) == "optimal" else float("nan")
        extra.append(null_columns(real, as_dicts("spectrum"), as_dicts("structured") or None))
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

        from attnsvm.real.probe import probe_heads

        l, h = task.params["layer"], task.params["head"]
        if task.params.get("part") == "null":
            return pd.DataFrame(self._null_rows(config, l, h))
        res = probe_heads(config.sentences, n_sentences=config.n_sentences, layers=[l], heads=[h],
                          query=config.query, threshold=config.threshold, svm_sentences=config.svm_sentences,
                          baseline_draws=config.baseline_draws, seed=config.seed, max_length=config.max_length,
                          model=_model(config.model), view_sentences=config.view_sentences, null_draws=0)
        out = res.table.copy()
        out.insert(0, "part", "head")
        sup = res.support.get((l, h))
        k = min(config.view_sentences, len(res.sentences))
        out["view_support"] = json.dumps(np.asarray(sup[:k], bool).tolist() if sup is not None else [])
        out["seconds_svm"] = res.seconds["svm"]
        return out

    def input_digests(self, config):
        """Digest of the model's files (weights, config, tokenizer): the runner recomputes stored heads when the
        model's files were replaced in place (same path, other content)."""
        from attnsvm._files import folder_digest
        from attnsvm.real.minilm import model_path

        return {"model": folder_digest(config.model or model_path())}

    @staticmethod
    def _null_rows(config, layer, head) -> list[dict]:
        from attnsvm.real.nulls import null_heads
        from attnsvm.real.probe import head_selections, layer_inputs, prepare_probe

        setup = prepare_probe(config.sentences, n_sentences=config.n_sentences, layers=[layer], heads=[head],
                              query=config.query, threshold=config.threshold, seed=config.seed,
                              max_length=config.max_length, model=_model(config.model))
        m = min(config.svm_sentences, len(setup.sentences))
        inp = layer_inputs(setup, layer, m)
        _, sel = head_selections(setup, layer)
        Wh = setup.model.head_weights(layer, head)
        rows = []
        for kind, draws in (("spectrum", config.null_draws), ("structured", config.structured_draws)):
            for d in null_heads(inp, Wh, sel[0, :m].sum(axis=1), seed=config.seed, layer=layer, head=head,
                                draws=draws, kind=kind,
                                threshold=config.threshold if config.null_selection == "threshold" else None):
                rows.append({"part": "null", "layer": layer, "head": head, "kind": d["kind"], "draw": d["draw"],
                             "null_status": d["status"], "null_corr_restricted": d["corr_restricted"],
                             "null_seconds": d["seconds"]})
        return rows

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
                + (f", model {config.model}" if config.model else ", MiniLM-L6") + ".")
        if table.empty or "corr_restricted" not in table.columns:
            return head
        from attnsvm.real.verdict import verdict_summary

        return head + "\n\n" + verdict_summary(table)
