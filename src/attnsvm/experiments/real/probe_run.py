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


class ProbeRun(RealMinilmHeads):
    """The probe, one task per head (see the module docstring)."""

    name = "probe"
    order = 99
    title = "Probe: do the heads' key-query matrices point along the nuclear-norm SVM of their own selections?"
    Config = ProbeConfig
    quick = {}

    def tasks(self, config):
        return [Task(f"L{int(l)}-H{int(h)}", 1, {"layer": int(l), "head": int(h)})
                for l in config.layers for h in config.heads]

    def run_task(self, config, task):
        """The head's row of :attr:`ProbeResult.table`, plus ``view_support``: its SVM's support tokens
        in the first ``view_sentences`` sentences as JSON (for probe.html; "[]" without an SVM)."""
        from attnsvm.real.probe import probe_heads

        l, h = task.params["layer"], task.params["head"]
        res = probe_heads(config.sentences, n_sentences=config.n_sentences, layers=[l], heads=[h],
                          query=config.query, threshold=config.threshold, svm_sentences=config.svm_sentences,
                          baseline_draws=config.baseline_draws, seed=config.seed, max_length=config.max_length,
                          model=_model(config.model), view_sentences=config.view_sentences)
        out = res.table.copy()
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

    def plot(self, config, table, outdir):
        from attnsvm.real.figures import heatmap_figure

        return heatmap_figure(table, outdir, "probe_heatmap") if "corr_restricted" in table.columns else []

    def checks(self, config, table):
        if "corr_restricted" not in table.columns:  # svm_sentences = 0: statistics only, nothing to check
            return []
        return super().checks(config, table)

    def deviations(self, config):
        return []

    def explain(self, config, table):
        n = len(config.sentences) if config.sentences is not None else config.n_sentences
        head = (f"{len(table)} heads, {n} sentences, each head's SVM on the first {config.svm_sentences}, "
                f"{config.query} queries, threshold {config.threshold}, {config.baseline_draws} random draw(s) per head"
                + (f", model {config.model}" if config.model else ", MiniLM-L6") + ".")
        if table.empty or "corr_restricted" not in table.columns:
            return head
        lines = [head, "", "Per layer: mean corr_restricted, mean random baseline, heads above it, certified SVMs."]
        for layer, g in table.groupby("layer"):
            lines.append(f"layer {int(layer)}: {g['corr_restricted'].mean():.4f} vs {g['corr_random_restricted'].mean():.4f}, "
                         f"{int((g['advantage'] > 0).sum())}/{len(g)} above, "
                         f"{int((g['svm_status'] == 'optimal').sum())}/{len(g)} certified")
        return "\n".join(lines)
