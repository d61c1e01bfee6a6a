"""How a head's agreement with its nuclear-norm Gen-SVM changes with the number of sentences.

:func:`agreement_curve` runs the probe of :func:`attnsvm.real.probe.probe_heads` once per size m
(the first m of the loaded sentences enter each head's SVM and its random baseline's; the forward
pass is computed once and reused), so every row is exactly what ``probe_heads(...,
svm_sentences=m)`` reports for that head: the same selections, the same random baselines (same
seed), the same solver and the same rule that a correlation counts only when its SVM is certified
(status "optimal"; NaN otherwise, with the status in the table). :func:`agreement_figure` draws
corr_restricted against m for every head, one panel per layer, over the band of the random
baselines.

A reader sees whether the agreement grows, settles or vanishes with data. The restricted
correlation compares the SVM with the part of W_h the m sentences can see (its projection onto the
span of their token differences and queries); that span grows with m, so the curve of one head
is the agreement on a growing subspace, not a fixed target.

Cost: the SVMs dominate. Each is solved by :meth:`attnsvm.real.layer.LayerInputs.svm` (see its docstring
for the method); the working-set solver's time grows roughly linearly in m on MiniLM
(benchmarks/probe_scale.py prints the measurements).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.real.pretrained import check_sentences
from attnsvm.real.probe import probe_heads
from attnsvm.real.probe_config import ProbeConfig, probe_config
from attnsvm.real.probe_steps import resolve_model
from attnsvm.real.sentences import corpus_sentences

#: the columns of :attr:`AgreementResult.table`, in order
COLUMNS = ("layer", "head", "m", "corr", "corr_restricted", "corr_random_restricted", "advantage", "svm_status",
           "svm_gap", "random_status", "seconds")


@dataclass
class AgreementResult:
    """What :func:`agreement_curve` returns.

    Attributes
    ----------
    table : pandas.DataFrame, one row per (layer, head, m) with the columns of :data:`COLUMNS`:
        ``m`` the number of sentences in the SVM, ``corr``, ``corr_restricted``,
        ``corr_random_restricted`` (mean over the baseline draws), ``advantage`` (corr_restricted -
        corr_random_restricted), ``svm_status`` ("optimal" = certified, "optimal_inaccurate",
        "infeasible"; the correlations of an SVM that is not "optimal" are NaN), ``svm_gap`` (its
        relative duality gap), ``random_status`` (the baselines' statuses, comma-separated) and
        ``seconds`` (wall time of the head's SVM and its baselines' SVMs at this m)
    sizes : list of int, the sizes m (ascending; None resolved to the number of sentences)
    sentences : list of str, the loaded sentences (the first m enter the SVMs of size m)
    seconds : dict ``{"forward": s, "svm": s, "total": s}`` (wall time)
    config : dict of the arguments
    """

    table: object
    sizes: list
    sentences: list
    seconds: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


def _check_sizes(sizes, n: int) -> list:
    """Sizes as sorted distinct ints in [1, n] (None = n); ValidationError naming ``sizes``."""
    if sizes is None or isinstance(sizes, (int, np.integer)):
        sizes = [sizes]
    try:
        sizes = list(sizes)
    except TypeError:
        raise ValidationError(f"sizes must be a list of integers >= 1 (or None for all sentences), got "
                              f"{type(sizes).__name__}") from None
    if not sizes:
        raise ValidationError("sizes must not be empty")
    out = []
    for v in sizes:
        if v is None:
            out.append(n)
            continue
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValidationError(f"sizes must be integers >= 1 (or None for all sentences), got {v!r}")
        if v > n:
            raise ValidationError(f"sizes must not exceed the {n} loaded sentences, got {int(v)} (load more "
                                  "sentences or use None for all)")
        out.append(int(v))
    return sorted(set(out))


#: the corpus sentences loaded when neither ``sentences`` nor the config's ``n_sentences`` is given
N_SENTENCES = 1000


def agreement_curve(model=None, sentences=None, config: ProbeConfig | dict | None = None, *,
                    sizes=(48, 128, 512, None), progress=None, max_memory=None) -> AgreementResult:
    """Each head's agreement with its nuclear-norm Gen-SVM as the number of sentences m grows.

    For every size m, the probe of :func:`attnsvm.real.probe.probe_heads` with ``svm_sentences=m``
    on the same sentences (one forward pass for all sizes): selections and random baselines are
    those of that call (same seed), so the row of (layer, head, m) equals its row of
    ``probe_heads(sentences, config, svm_sentences=m, null_draws=0)``.

    Parameters
    ----------
    model : None (the shipped MiniLM, or the config's ``model``), a model directory or a loaded
        :class:`attnsvm.real.pretrained.PretrainedTransformer` (as :func:`probe_heads`)
    sentences : list of str, optional (default: the config's ``sentences``, else
        ``corpus_sentences(n_sentences, seed)`` with the config's ``n_sentences`` when it sets one, else
        :data:`N_SENTENCES`)
    config : a :class:`attnsvm.real.probe_config.ProbeConfig` (or a dict of its settings): ``layers``, ``heads``
        (indices to probe, default all), ``query``, ``threshold``, ``baseline_draws``, ``seed``, ``max_length``
        and the other settings of :func:`probe_heads`, except ``svm_sentences`` (each m of ``sizes``) and the
        null heads (none: ``null_draws=0``)
    sizes : the numbers of sentences m (the first m) entering each SVM; integers in [1, n] or None
        (all n loaded sentences); duplicates are solved once
    progress : optional callable ``progress(message)``
    max_memory : as :func:`probe_heads`

    The keyword forms of the settings (``layers=[2]``, ..., deprecated) were removed in 0.3: give them in
    ``config``.

    Returns
    -------
    AgreementResult (its ``table`` has one row per (layer, head, m), NaN correlations exactly where
    the SVM is not certified)
    """
    import pandas as pd

    t_start = time.perf_counter()
    config = probe_config(config)
    if sentences is None:
        sentences = config.sentences
    if sentences is None:
        n = config.n_sentences if "n_sentences" in config.model_fields_set else N_SENTENCES
        sentences = corpus_sentences(n, config.seed)
    sentences = check_sentences(sentences)
    sizes = _check_sizes(sizes, len(sentences))
    model = resolve_model(config.model if model is None else model, max_memory)
    say = progress or (lambda msg: None)
    frames = []
    forward = svm = 0.0
    cfg = None
    for j, m in enumerate(sizes):
        say(f"m = {m} sentences ({j + 1}/{len(sizes)})")
        res = probe_heads(sentences, config, model=model, progress=progress, max_memory=max_memory,
                          svm_sentences=m, null_draws=0)  # nulls: not per m yet
        t = res.table.copy()
        t["m"] = m
        t["seconds"] = t["svm_seconds"] + t["random_seconds"]
        frames.append(t[list(COLUMNS)])
        forward += res.seconds["forward"]
        svm += res.seconds["svm"]
        cfg = res.config
    table = pd.DataFrame(pd.concat(frames, ignore_index=True))
    table = table.sort_values(["layer", "head", "m"], kind="stable").reset_index(drop=True)
    config = {k: v for k, v in cfg.items() if k != "svm_sentences"}
    config["sizes"] = list(sizes)
    seconds = {"forward": forward, "svm": svm, "total": time.perf_counter() - t_start}
    return AgreementResult(table, list(sizes), list(sentences), seconds, config)


def agreement_figure(table, out_dir: str, stem: str = "probe_agreement") -> list:
    """corr_restricted against the number of sentences m (log x), one panel per layer, one line per head.

    The grey band is the range (smallest to largest) of the random baselines' corr_restricted over
    the panel's heads at each m, their mean the dashed line. A missing point is an SVM that is not
    certified (NaN; its status is in the table).

    Parameters
    ----------
    table : the ``table`` of :class:`AgreementResult` (columns layer, head, m, corr_restricted,
        corr_random_restricted)
    out_dir : existing directory
    stem : file name without extension

    Returns
    -------
    list of str, the PNG and PDF paths
    """
    from attnsvm.plotting import pyplot, save_figure, subplots

    missing = {"layer", "head", "m", "corr_restricted", "corr_random_restricted"} - set(table.columns)
    if missing:
        raise ValidationError(f"table lacks the columns {sorted(missing)} (give AgreementResult.table)")
    if len(table) == 0:
        raise ValidationError("table is empty: nothing to draw")
    layers = sorted(int(v) for v in table["layer"].unique())
    ncols = min(3, len(layers))
    nrows = -(-len(layers) // ncols)
    fig, axes = subplots(nrows, ncols, width=4.2, height=3.3, sharey=True)
    sizes = sorted(int(v) for v in table["m"].unique())
    cmap = pyplot().get_cmap("tab20")
    for ax in axes.ravel()[len(layers):]:
        ax.set_visible(False)
    for ax, layer in zip(axes.ravel(), layers):
        t = table[table["layer"] == layer]
        base = t.groupby("m")["corr_random_restricted"]
        lo, hi, mean = base.min(), base.max(), base.mean()
        ax.fill_between(lo.index, lo.to_numpy(float), hi.to_numpy(float), color="0.8", alpha=0.7, lw=0,
                        label="random baseline (range)")
        ax.plot(mean.index, mean.to_numpy(float), color="0.45", ls="--", lw=1, label="random baseline (mean)")
        for h, th in t.groupby("head"):
            th = th.sort_values("m")
            ax.plot(th["m"], th["corr_restricted"].to_numpy(float), marker="o", ms=3, lw=1.2,
                    color=cmap(int(h) % 20), label=f"head {int(h)}")
        ax.axhline(0.0, color="0.3", lw=0.6)
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("sentences in the SVM (m)")
        ax.set_title(f"layer {layer}", fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel("corr_restricted")
    handles, labels = axes.ravel()[len(layers) - 1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return save_figure(fig, out_dir, stem)
