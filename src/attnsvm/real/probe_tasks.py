"""The probe's tasks: what one head (or one head's null heads) at one number of SVM sentences computes, and how
the rows of all tasks become the per-head table with its verdict.

Both ways of running a probe run exactly these tasks from one :class:`~attnsvm.real.probe_config.ProbeConfig`:
:func:`attnsvm.real.probe.probe_heads` in this process (:func:`run_in_process`), and the stored probe
(:mod:`attnsvm.experiments.real.probe_run`), one runner task per :class:`ProbeTask`, each stored as it finishes
and resumed from disk. :func:`combine` turns the rows of either into the same table.

A task's rows (``part`` "head" or "null"):

* a **head** task (``L<l>-H<h>``, with several m ``L<l>-H<h>-m<m>``): the head's selection statistics on all
  sentences and, on the first m, its SVM, its random baselines' SVMs and their agreement
  (:func:`attnsvm.real.probe_steps.head_task`);
* a **null** task (the same key plus ``-null``): one row per null head (``kind``, ``draw``, ``null_status``,
  ``null_corr_restricted``, ``null_margin_ratio``, ``null_seconds``, ``source`` for a transplant; rows stored before
  null heads recorded ``null_margin_ratio`` lack it, and combine to a table whose margin-ratio p-values are
  unavailable, said in words in ``p_note``)
  (:func:`attnsvm.real.probe_steps.null_task`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm.real import cache
from attnsvm.real.probe_config import ProbeConfig
from attnsvm.real.probe_steps import (
    NullDraws, ProbeSetup, check_transplant, head_statistic, head_task, layer_inputs, layer_selections, null_task,
    prepare_probe, row_statistic, seq_layer_inputs,
)
from attnsvm.real.verdict import (
    add_verdict, add_verdict_by_m, null_columns, reference_columns, transplant_columns,
)

#: the integer columns of a head task's row (stored beside null rows, which lack them)
INT_COLUMNS = ("svm_rank", "svm_support", "svm_contradictions")
#: the columns only a null task's rows have
NULL_ONLY = ("kind", "draw", "null_status", "null_corr_restricted", "null_margin_ratio", "null_seconds", "source")


@dataclass(frozen=True)
class ProbeTask:
    """One task of a probe: ``part`` "head" or "null" of head ``(layer, head)`` on the first ``m`` SVM sentences
    (``several``: the probe asks for several m, so the key names it)."""

    layer: int
    head: int
    m: int
    part: str
    several: bool = False

    @property
    def key(self) -> str:
        """``L<layer>-H<head>``, plus ``-m<m>`` with several m, plus ``-null`` for a null task (a file name)."""
        return (f"L{self.layer}-H{self.head}" + (f"-m{self.m}" if self.several else "")
                + ("-null" if self.part == "null" else ""))


def n_sentences_of(config: ProbeConfig) -> int:
    """The number of sentences the probe of ``config`` reads (its list, else ``n_sentences`` corpus sentences)."""
    return len(config.sentences) if config.sentences is not None else int(config.n_sentences)


def probe_tasks(config: ProbeConfig) -> list[ProbeTask]:
    """The tasks of ``config`` (``layers`` and ``heads`` explicit): per layer, m and head its head task, and its null
    task right after it when nulls are drawn (:attr:`ProbeConfig.has_nulls`)."""
    parts = ("head", "null") if config.has_nulls else ("head",)
    sizes = config.sizes_for(n_sentences_of(config))
    several = len(sizes) > 1  # values that all clip to n: one m, today's table without an m column
    return [ProbeTask(int(l), int(h), m, p, several) for l in config.layers for m in sizes for h in config.heads
            for p in parts]


def setup_of(config: ProbeConfig, *, layers=None, heads=None, model=None, max_memory=None) -> ProbeSetup:
    """:func:`attnsvm.real.probe_steps.prepare_probe` of ``config`` (its layers and heads, or those given; ``model``
    a loaded model that overrides ``config.model``): the forward pass, cached per process. Transplanted heads on a
    rotary model are refused here, before any SVM (:func:`attnsvm.real.probe_steps.check_transplant`)."""
    setup = prepare_probe(config.sentences, n_sentences=config.n_sentences,
                         layers=config.layers if layers is None else layers,
                         heads=config.heads if heads is None else heads, query=config.query,
                         threshold=config.threshold, seed=config.seed, max_length=config.max_length,
                         model=config.model if model is None else model, max_memory=max_memory,
                         query_seed=config.query_seed)
    check_transplant(setup.model, config.transplant_draws if config.has_nulls else 0)
    return setup


def svm_inputs(setup: ProbeSetup, layer: int, m: int, head: int | None = None):
    """The layer's first ``m`` SVM sentences (:func:`~attnsvm.real.probe_steps.layer_inputs`, or
    :func:`~attnsvm.real.probe_steps.seq_layer_inputs` for ``query="all"``), built once per process for the
    tasks of a layer (:func:`attnsvm.real.cache.derived`); None for m = 0. A rotary model's inputs are ``head``'s
    own (its post-rotary keys and queries), built once for its head and null tasks."""
    if m < 1:
        return None
    build = (lambda: seq_layer_inputs(setup, layer, m)) if setup.query == "all" else \
        (lambda: layer_inputs(setup, layer, m, head))
    own = int(head) if setup.model.family.rotary else None  # a rotary head's tokens are its own
    # the inputs read the forward pass, the queries (query kind, seed) and the causal flag (the model's)
    return cache.derived(setup.fw, ("layer_inputs", setup.query, setup.query_seed, setup.causal, int(layer), int(m),
                                    own), build)


def head_rows(config: ProbeConfig, setup: ProbeSetup, task: ProbeTask, selected: np.ndarray, stats: dict,
              solver: dict) -> tuple[dict, np.ndarray | None]:
    """A head task's row (``part`` "head") and its SVM's support ``(m, T)`` (None without an SVM).

    ``selected``: the head's selections on all n sentences, ``(n, T)`` bool (``query="all"``: ``(n, T, T)``);
    ``stats``: its selection statistics (:class:`attnsvm.real.probe_steps.LayerSelections`); ``solver``: the
    options of every SVM (:func:`attnsvm.real.probe.solver_options`)."""
    row = {"part": "head", "layer": task.layer, "head": task.head, **({"m": task.m} if task.several else {}), **stats}
    inp = svm_inputs(setup, task.layer, task.m, task.head)
    if inp is None:
        return row, None
    svm_row, support = head_task(setup, inp, task.layer, task.head, selected[:task.m],
                                 baseline_draws=config.baselines_at(task.m), **solver)
    row.update(svm_row)
    return row, support


def null_rows(config: ProbeConfig, setup: ProbeSetup, task: ProbeTask, selected: np.ndarray, solver: dict,
              real: float | None = None) -> list[dict]:
    """A null task's rows (``part`` "null"), one per null head of ``task``'s head.

    ``real``: the head's statistic (:func:`attnsvm.real.probe_steps.row_statistic`) when its head task ran in this
    process; None: solved here when the draws may stop early (:attr:`ProbeConfig.null_stop`)."""
    inp = svm_inputs(setup, task.layer, task.m, task.head)
    if inp is None:
        return []
    sel = selected[:task.m]
    if config.null_stop and config.null_draws and real is None:
        real = head_statistic(setup, inp, task.layer, task.head, sel, config.statistic, **solver)
    draws = null_task(setup, inp, task.layer, task.head, sel, NullDraws.of(config),
                      real=real if config.null_stop else None, tested=config.tested, **solver)
    return [{"part": "null", "layer": task.layer, "head": task.head, **({"m": task.m} if task.several else {}),
             "kind": d["kind"], "draw": d["draw"], "null_status": d["status"],
             "null_corr_restricted": d["corr_restricted"], "null_margin_ratio": d["margin_ratio"],
             "null_seconds": d["seconds"],
             **({"source": d["source"]} if "source" in d else {})} for d in draws]


def head_null_columns(real: float, draws: list, planned: int | None = None, tested: int | None = None,
                      null_kind: str = "spectrum", statistic: str = "corr_restricted",
                      margin_ratio: float | None = None, corr_restricted: float | None = None) -> dict:
    """The null columns of a head's row from its ``statistic`` ``real`` (NaN without a certified SVM; its
    ``margin_ratio`` for ``p_margin_ratio`` and its ``corr_restricted`` for the transplant columns, both None: ``real``
    where that is the statistic, else unknown) and its
    :func:`~attnsvm.real.probe_steps.null_task` draws: with draws of the verdict's ``null_kind`` or structured draws
    (or ``planned`` verdict draws, the probe's ``null_draws`` when they may stop early)
    :func:`attnsvm.real.verdict.null_columns` (the verdict's inputs; ``tested``: the stopping level's m); the draws
    of every other kind drawn beside the verdict's, :func:`attnsvm.real.verdict.reference_columns` (descriptive,
    e.g. ``spectrum_mean`` beside a sink verdict); transplanted heads :func:`attnsvm.real.verdict.transplant_columns`
    (descriptive)."""
    kinds: dict = {}
    for d in draws:
        kinds.setdefault(d["kind"], []).append(d)
    out = {}
    verdict, structured = kinds.pop(null_kind, []), kinds.pop("structured", [])
    if verdict or structured or planned:
        out.update(null_columns(real, verdict, structured or None, planned=planned, tested=tested, kind=null_kind,
                                statistic=statistic, margin_ratio=margin_ratio))
    transplant = kinds.pop("transplant", [])
    for kind, ds in kinds.items():
        out.update(reference_columns(kind, ds))
    if transplant:  # descriptive, in corr_restricted whatever the verdict's statistic
        corr = real if statistic == "corr_restricted" else float("nan") if corr_restricted is None else corr_restricted
        out.update(transplant_columns(corr, transplant))
    return out


def combine(config: ProbeConfig, table):
    """The per-head table of a probe's task rows (``part`` "head" and "null", in-process or stored): one row per
    head (and m), with the null columns of its null task (:func:`head_null_columns`) and the verdict over all heads
    (:func:`attnsvm.real.verdict.add_verdict`; with several m :func:`~attnsvm.real.verdict.add_verdict_by_m`). A
    table without null rows comes back with only the head rows."""
    import pandas as pd

    if table.empty or "part" not in table.columns:
        return table
    # layer and head stay integers: a task that stored no rows (a head without an SVM draws no nulls) is a
    # zero-row shard, and concatenating it makes them float (printed "3.0000  0.0000", stored "3.0,0.0")
    table = table.astype({c: "int64" for c in ("layer", "head", "m") if c in table.columns})
    nulls = table[table["part"] == "null"]
    heads = table[table["part"] == "head"].drop(columns=[c for c in NULL_ONLY if c in table])
    heads = heads.drop(columns=["part"])  # a head's NaN columns stay
    # one order on both paths: by layer, head (and m), whatever order the tasks ran or were stored in
    heads = heads.sort_values([c for c in ("layer", "head", "m") if c in heads.columns], kind="stable")
    heads = heads.reset_index(drop=True)
    for c in INT_COLUMNS:  # integers, as a head's row has them (the null rows' NaN make the column float)
        if c in heads.columns and heads[c].notna().all() and len(heads):
            heads[c] = heads[c].astype("int64")
    if nulls.empty and not config.has_nulls:
        return heads
    planned = int(config.null_draws) if config.null_stop and config.null_draws else None
    keys = ["layer", "head"] + (["m"] if "m" in heads.columns else [])
    groups = {k: g for k, g in nulls.groupby(keys, sort=False)}
    extra = []
    for r in heads.itertuples():
        g = groups.get(tuple(getattr(r, k) for k in keys))
        row = r._asdict()
        real = row_statistic(row, config.statistic) if str(r.svm_status) == "optimal" else float("nan")
        ok = np.isfinite(row_statistic(row))  # the head's own values where it has a certified SVM, else NaN
        if g is None and not (planned and not np.isfinite(real)):  # its null task failed: no p-values
            extra.append({})
            continue
        draws = []
        if g is not None:
            g = g.sort_values("draw", kind="stable")
            # rows stored before null heads recorded their margin ratio have no such key: no margin-ratio p-value
            ratios = g["null_margin_ratio"] if "null_margin_ratio" in g.columns else [None] * len(g)
            draws = [{"kind": k, "corr_restricted": float(v), "seconds": float(s), "source": src,
                      **({} if mr is None else {"margin_ratio": float(mr)})}
                     for k, v, mr, s, src in zip(g["kind"], g["null_corr_restricted"], ratios, g["null_seconds"],
                                                 g["source"] if "source" in g.columns else [""] * len(g))]
        own = {c: float(row.get(c, float("nan"))) if ok else float("nan") for c in ("corr_restricted", "margin_ratio")}
        extra.append(head_null_columns(real, draws, planned=planned, tested=config.tested,
                                       null_kind=config.null_kind, statistic=config.statistic, **own))
    out = pd.concat([heads, pd.DataFrame(extra, index=heads.index)], axis=1)
    if not config.has_verdict:
        return out
    return add_verdict_by_m(out) if "m" in out.columns else add_verdict(out)


def run_in_process(config: ProbeConfig, setup: ProbeSetup, solver: dict, say=None) -> tuple[list, dict, dict]:
    """Every task of ``config`` in this process, in :func:`probe_tasks` order.

    Returns
    -------
    rows : the tasks' rows (for :func:`combine`)
    support : ``{(layer, head): (m, T) bool}``, the support of each head's SVM at its largest m
    seconds : ``{"svm": ..., "nulls": ...}``, the solver time of the head and null tasks
    """
    import time

    say = say or (lambda msg: None)
    rows, support, seconds, real = [], {}, {"svm": 0.0, "nulls": 0.0}, {}
    selections, announced = {}, set()
    for task in probe_tasks(config):
        if task.layer not in selections:
            selections = {task.layer: layer_selections(setup, task.layer)}  # one layer at a time in memory
        ls = selections[task.layer]
        k = setup.heads.index(task.head)
        if (task.layer, task.m) not in announced and task.m >= 1:
            announced.add((task.layer, task.m))
            say(_announce(config, setup, task))
        t0 = time.perf_counter()
        if task.part == "head":
            row, sup = head_rows(config, setup, task, ls.sel[k], ls.stats[k], solver)
            rows.append(row)
            if sup is not None:
                support[(task.layer, task.head)] = sup
            real[(task.layer, task.head, task.m)] = row_statistic(row, config.statistic) if sup is not None else None
            seconds["svm"] += time.perf_counter() - t0
        else:
            rows += null_rows(config, setup, task, ls.sel[k], solver, real.get((task.layer, task.head, task.m)))
            seconds["nulls"] += time.perf_counter() - t0
    return rows, support, seconds


def _announce(config: ProbeConfig, setup: ProbeSetup, task: ProbeTask) -> str:
    """The progress line of a layer's SVMs at m sentences."""
    h = len(setup.heads)
    nulls = config.null_draws + config.structured_draws + config.transplant_draws if config.has_nulls else 0
    return (f"layer {task.layer}: solving {h * (1 + config.baseline_draws)} nuclear-norm "
            + ("sequence Gen-SVMs" if config.query == "all" else "Gen-SVMs") + f" on {task.m} sentences"
            + (f" ({int(setup.qmask[:task.m].sum())} queries)" if config.query == "all" else "")
            + (f" and {h * nulls} of null heads" if nulls else ""))


def result_settings(config: ProbeConfig, setup: ProbeSetup) -> dict:
    """The settings a probe's result reports (``ProbeResult.config``, ``probe.json``): the sentences' count, the
    resolved layers, heads and max_length, the clipped m, and the null settings where nulls were drawn (the
    default model's entries stay as they were)."""
    n = len(setup.sentences)
    ms = config.sizes_for(n)
    cfg = dict(n_sentences=n, layers=setup.layers, heads=setup.heads, query=config.query,
               threshold=float(config.threshold), svm_sentences=ms if len(ms) > 1 else ms[-1],
               baseline_draws=int(config.baseline_draws), seed=int(setup.seed), max_length=int(setup.max_length))
    if config.query != "all" and ms[-1] >= 1:
        cfg.update(null_draws=int(config.null_draws), structured_draws=int(config.structured_draws),
                   null_selection=config.null_selection, null_kind=config.null_kind, statistic=config.statistic)
        if config.transplant_draws:
            cfg.update(transplant_draws=int(config.transplant_draws))
        if config.null_stop and config.null_draws:
            cfg.update(null_stop=True)
    if config.query_seed is not None:
        cfg.update(query_seed=int(config.query_seed))
    if getattr(setup.model, "name", "") != "MiniLM":
        # a model object has no directory: its name says what it is (e.g. "the bert model object (BertModel)")
        cfg.update(model=setup.model.path if setup.model.path is not None else setup.model.name,
                   family=setup.model.family.name)
    return cfg
