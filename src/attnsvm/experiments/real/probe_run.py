"""``probe``: the probe of :func:`attnsvm.real.probe.probe_heads` as resumable runner tasks, one per head.

``attnsvm probe --out DIR`` runs it through :func:`attnsvm.runner.run_experiment` into ``DIR/probe``:
each (layer, head) is a task whose row (the head's statistics, its SVM and its random baselines'
SVMs) is stored as a shard when it finishes, so a killed probe resumes where it stopped
(``DIR/probe/shards/<config hash>/L<layer>-H<head>.parquet``), ``--workers N`` shares the heads
among N local processes and ``--scheduler ADDRESS`` among the workers of a Dask cluster. A head's
row equals its row of one in-process ``probe_heads`` call over all heads (its random baselines come
from its own generator, :func:`attnsvm.real.probe_steps.baseline_rng`). ``DIR/probe`` holds the runner's
``meta.json``, ``checks.json`` and ``results.parquet``, so ``attnsvm report DIR`` shows the probe as
a section (its checks are those of ``real-minilm-heads``).

Null heads (:mod:`attnsvm.real.nulls`) are tasks of their own, one per head (``L<layer>-H<head>-null``,
its ``null_draws`` verdict nulls and ``structured_draws`` structured nulls), so heads and nulls resume
separately. With several numbers of SVM sentences (``svm_sentences`` a list) every head has a task per m
(``L<layer>-H<head>-m<m>``, ``...-m<m>-null``). ``results.parquet`` holds both kinds of rows (column ``part``:
"head" or "null"); :func:`attnsvm.real.probe_tasks.combine` turns them into one row per head (and m) with its
p-values and the verdict (Benjamini-Yekutieli over all the probed heads, at each m, so the verdict is computed
from the whole table, never per task).

The tasks are those of :mod:`attnsvm.real.probe_tasks`, the same that :func:`attnsvm.real.probe.probe_heads`
runs in one process, from the same :class:`attnsvm.real.probe_config.ProbeConfig` (one forward pass per
process, cached by :mod:`attnsvm.real.cache`; the layer's SVM sentences built once per process); :func:`stored_result`
assembles from the runner's folder the :class:`attnsvm.real.probe.ProbeResult` that
``attnsvm probe --out`` writes and shows.

This experiment is not registered: ``reproduce`` runs the small ``real-minilm-heads`` preset, the
full-scale probe is the command above.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from attnsvm.experiments.base import Task
from attnsvm.experiments.real.minilm_heads import RealMinilmHeads
from attnsvm.real.probe_config import ProbeConfig
from attnsvm.real.probe_tasks import ProbeTask, combine, probe_tasks


def has_nulls(config) -> bool:
    """Whether the probe of ``config`` draws null heads (:attr:`attnsvm.real.probe_config.ProbeConfig.has_nulls`)."""
    return config.has_nulls


def tested_heads(config) -> int:
    """The number of heads the probe of ``config`` draws nulls for (every probed head): the m of the null tasks'
    stopping level (:func:`attnsvm.real.verdict.stop_level`), known when the tasks are planned."""
    return config.tested


#: the statistic of heads solved in this process, ``{(config key, task key): value}``
#: (:func:`attnsvm.real.probe_steps.row_statistic`): a null task right after its head's task in the same
#: process reuses it instead of solving the head's SVM again (a fresh process solves it: the same value)
_STATISTIC: dict = {}


def _statistic_key(config, task: ProbeTask) -> tuple:
    import hashlib

    return hashlib.sha256(config.model_dump_json().encode()).hexdigest(), task.layer, task.head, task.m


def _solver(config, max_memory) -> dict:
    from attnsvm.real.probe import solver_options

    return solver_options(max_memory, config.device)


def _probe_task(params: dict) -> ProbeTask:
    return ProbeTask(params["layer"], params["head"], params["m"], params["part"], params["several"])


class ProbeRun(RealMinilmHeads):
    """The probe, one task per head and one per head's null heads (see the module docstring)."""

    name = "probe"
    order = 99
    title = "Probe: do the heads' key-query matrices point along the nuclear-norm SVM of their own selections?"
    Config = ProbeConfig
    quick = {}
    takes_max_memory = True  # the run's --max-memory reaches the forward pass and every SVM as an argument

    def tasks(self, config):
        return [Task(t.key, 1, {"layer": t.layer, "head": t.head, "m": t.m, "part": t.part, "several": t.several})
                for t in probe_tasks(config)]

    def run_task(self, config, task, max_memory=None):
        """A head task: the head's row (:func:`attnsvm.real.probe_tasks.head_rows`, ``part`` "head"), plus
        ``view_support``: its SVM's support tokens in the first ``view_sentences`` sentences as JSON (for
        probe.html; "[]" without an SVM) and ``seconds_svm``. A null task: one row per null head
        (:func:`attnsvm.real.probe_tasks.null_rows`, ``part`` "null").

        ``max_memory``: the run's memory limit (bytes; None: the package limit), handed by the runner
        (:attr:`takes_max_memory`) and passed to the model's loading, the forward pass and every SVM, as
        :func:`attnsvm.real.probe.probe_heads` passes its own."""
        import pandas as pd

        from attnsvm.real.probe_steps import layer_selections, row_statistic
        from attnsvm.real.probe_tasks import head_rows, null_rows, setup_of

        t = _probe_task(task.params)
        setup = setup_of(config, layers=[t.layer], heads=[t.head], max_memory=max_memory)
        solver = _solver(config, max_memory)
        ls = layer_selections(setup, t.layer)
        if t.part == "null":
            real = _STATISTIC.pop(_statistic_key(config, t), None)
            return pd.DataFrame(null_rows(config, setup, t, ls.sel[0], solver, real))
        t0 = time.perf_counter()
        row, sup = head_rows(config, setup, t, ls.sel[0], ls.stats[0], solver)
        t_svm = time.perf_counter() - t0 if sup is not None else 0.0
        if sup is not None and config.has_nulls and config.null_stop:  # for its null task, if it runs next here
            if len(_STATISTIC) > 4096:
                _STATISTIC.clear()
            _STATISTIC[_statistic_key(config, t)] = row_statistic(row, config.statistic)
        out = pd.DataFrame([row])
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

    def plot(self, config, table, outdir):
        from attnsvm.real.figures import curve_figure, heatmap_figure, largest_m

        table = combine(config, table)
        if "corr_restricted" not in table.columns:
            return []
        paths = heatmap_figure(largest_m(table), outdir, "probe_heatmap")
        return paths + (curve_figure(table, outdir, "probe_curve") if "m" in table.columns else [])

    def checks(self, config, table):
        """The checks of ``real-minilm-heads`` on the combined table; with several m, on the rows of the largest m
        (each check is about the heads once; the verdict at each m and the stable verdict are in the table)."""
        table = combine(config, table)
        if "corr_restricted" not in table.columns:  # svm_sentences = 0: statistics only, nothing to check
            return []
        if "m" in table.columns:
            table = table[table["m"] == table["m"].max()].drop(columns=["m", "stable_verdict"], errors="ignore")
            table = table.reset_index(drop=True)
        return super().checks(config, table)

    def deviations(self, config):
        return []

    def explain(self, config, table):
        from attnsvm.real.nulls import NULLS
        from attnsvm.real.probe_tasks import n_sentences_of

        table = combine(config, table)
        n = n_sentences_of(config)
        sizes = ", ".join(str(m) for m in config.sizes_for(n))
        head = (f"{len(table)} rows, {n} sentences, each head's SVM on the first {sizes}, "
                f"{config.query} queries, threshold {config.threshold}, {config.baseline_draws} random draw(s) per head"
                + (f", {config.null_draws} {config.null_kind} null heads per head" if config.has_nulls else "")
                + (" (fewer where no further draw can change any verdict)"
                   if config.has_nulls and config.null_stop and config.null_draws else "")
                + (f" ({NULLS[config.null_kind].summary})" if config.has_nulls and config.null_draws else "")
                + (f", the verdict on {config.statistic}" if config.has_nulls and config.null_draws else "")
                + (f", {config.transplant_draws} transplanted heads per head (descriptive)"
                   if config.has_nulls and config.transplant_draws else "")
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
    from attnsvm.real.probe_steps import view_arrays
    from attnsvm.real.probe_tasks import result_settings, setup_of

    t0 = time.perf_counter() if t0 is None else t0
    path = os.path.join(outdir, "results.parquet")
    table = pd.read_parquet(path) if os.path.exists(path) else pd.DataFrame()
    setup = setup_of(config, max_memory=max_memory)
    view = view_arrays(setup, config.view_sentences)
    table = combine(config, table)
    support, svm, nulls = {}, 0.0, 0.0
    if not table.empty:
        # one order on both paths (attnsvm.real.probe_tasks.combine): by layer, head and m
        table = table.sort_values(["layer", "head"] + (["m"] if "m" in table.columns else []), ignore_index=True)
        if "view_support" in table.columns:  # each head's at its largest m (its last row: m ascending)
            support = {(int(r.layer), int(r.head)): np.array(json.loads(r.view_support), bool)
                       for r in table.itertuples() if r.view_support != "[]"}
        svm = float(table["seconds_svm"].sum()) if "seconds_svm" in table.columns else 0.0
        nulls = float(table["null_seconds"].sum()) if "null_seconds" in table.columns else 0.0
        table = table.drop(columns=[c for c in ("view_support", "seconds_svm") if c in table.columns])
    seconds = {"forward": setup.t_forward, "forward_cached": setup.cached, "svm": svm, "nulls": nulls,
               "total": time.perf_counter() - t0}
    return result_of(setup, table, view, support, seconds, result_settings(config, setup))
