"""Theorem 3.15 of the causal-LM paper (``lm-near-ties``): GD on languages whose non-optimal scores lie within delta.

The paper (seed 002, a withdrawn ICLR 2024 submission; Sec. 3.2): "**Theorem 3.15** (Informal version of Theorem
G.5). For any initialization X(0), there exists a dataset dependent sufficiently small delta > 0 such that the
following holds: Suppose non-optimal scores obey |gamma_it - gamma_itau| <= delta for all t, tau != opt_i,
i in [m]. Then, Algorithm X-GD, with eta <= 1/(2 L_x) obeys lim_{k -> inf} ||X(k)||_F = inf and
lim_{k -> inf} X(k)/||X(k)||_F = X^mm/||X^mm||_F."

What the theorem controls: the *limit* direction of GD, exactly ``X^mm / ||X^mm||_F`` (cosine 1, not
``1 - O(delta)``), and the divergence of ``||X(k)||_F``; delta enters only as the hypothesis ``delta <= delta_0``
with ``delta_0`` depending on the data and on X(0), and not given. No rate, no bound in delta. The paper's own
experiment (Sec. 4) does not vary delta; ``lm-cosine`` tests only delta = 0 (the cycle language, Theorem 3.14's
case).

Here [OURS]: a family of languages in delta (:func:`attnsvm.svm.language.near_tie_language`: the cycle language
with the embedding norms perturbed just enough that the largest non-optimal score spread over every prefix the
language can emit equals delta; runs of one seed share the cycle, the sequences and X(0) across delta, so they are
paired). For each delta of ``deltas`` the finite-step signature of the theorem's conclusion is checked: over the
last decade of GD steps the cosine with the hard-margin Att-SVM X^mm rises and ``||X(k)||_F`` rises. The
``contrast_deltas`` (larger spreads) run the same way and are reported, not checked: the theorem says nothing above
its delta_0.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from attnsvm.errors import ValidationError
from attnsvm.experiments.base import Experiment, ExperimentConfig, Task, register
from attnsvm.experiments.checks import correlation_partners, integrity_check
from attnsvm.experiments.common import certified_check, log_steps, svm_record, uncertified
from attnsvm.experiments.lm.common import PAPER_LM, build_runs, ordering_check, preset_deviations
from attnsvm.experiments.power import STANDARDIZED_EFFECT
from attnsvm.metrics import correlation
from attnsvm.plotting import label_axes, save_figure, subplots
from attnsvm.svm import lm_constraints, solve
from attnsvm.svm.language import (near_tie_language, optimal_prefix_tokens, prefix_problem, prefix_scores,
                                  prefix_softmax, score_ties)
from attnsvm.training.language_model import train_runs

#: the theorem, as the checks cite it (the place is resolved by :mod:`attnsvm.experiments.places`)
SOURCE = ("causal-language-modeling.md Theorem 3.15 (near ties): for non-optimal scores within a small delta > 0 of "
          "each other, lim ||X(k)||_F = inf and lim X(k)/||X(k)||_F = X^mm/||X^mm||_F")
#: a language's spread equals its delta to this (Brent's root to 1e-13 in eps; spreads are sums of softplus terms)
CALIBRATION_TOL = 1e-9
#: an exact tie in float64 (as lm-cosine's cycle language): sums of a few logaddexp terms of order 1
TIE_TOL = 1e-12
#: the GD steps at which the runs are compared (those <= steps)
DECADES = (1, 10, 100, 1000, 10000, 100000)


class NearTiesConfig(ExperimentConfig):
    """Theorem 3.15: GD on cycle languages whose non-optimal scores lie within delta of each other."""

    m: PositiveInt = 10
    n: PositiveInt = Field(5, ge=3, description="sequence length (n <= vocab - 1)")
    d: PositiveInt = 100
    vocab: PositiveInt = Field(16, ge=4, description="token types V of the cycle (d >= V)")
    rho: float = Field(0.4, gt=0, lt=0.5, description="<e_q, e_f(q)> of successive types before the scaling")
    deltas: list[float] = Field(default_factory=lambda: [0.0, 0.01, 0.1], min_length=1,
                                description="spreads at which the theorem's conclusion is checked")
    contrast_deltas: list[float] = Field(default_factory=lambda: [0.2, 0.3],
                                         description="larger spreads run the same way and reported, not checked")
    runs: PositiveInt = 30
    steps: PositiveInt = 10000
    lr: PositiveFloat = 10.0
    init_scale: float = Field(1e-3, ge=0, description="X(0) = init_scale * N(0, 1) entrywise")
    loss: Literal["logistic"] = Field("logistic", description="the paper's loss (the theorem's)")
    seed: int = 0

    @model_validator(mode="after")
    def _sizes(self):
        if not (self.n <= self.vocab - 1 and self.d >= self.vocab):
            raise ValidationError(f"the cycle language needs n <= vocab - 1 and d >= vocab, got n = {self.n}, "
                                  f"d = {self.d}, vocab = {self.vocab}")
        if any(not x >= 0 for x in self.deltas + self.contrast_deltas):
            raise ValidationError(f"deltas must be >= 0, got {self.deltas + self.contrast_deltas}")
        if len(set(self.deltas + self.contrast_deltas)) != len(self.deltas) + len(self.contrast_deltas):
            raise ValidationError("deltas and contrast_deltas must be distinct values")
        if self.steps < 10:
            raise ValidationError(f"steps must be >= 10 (a last decade to compare), got {self.steps}")
        return self


def _of(per_run: pd.DataFrame, delta: float, col: str) -> pd.Series:
    """Column ``col`` of the runs at ``delta`` of a per-run table indexed by (delta, run), indexed by run (empty when
    the table has no such runs)."""
    if not len(per_run) or delta not in per_run.index.get_level_values(0):
        return pd.Series(dtype=float)
    return per_run.xs(delta, level="delta")[col].astype(float)


def last_decade(steps: int) -> tuple[int, int]:
    """The checkpoints of the last decade of ``steps`` GD steps: ``(steps // 10, steps)``."""
    return int(steps) // 10, int(steps)


@register
class LMNearTies(Experiment):
    name = "lm-near-ties"
    order = 4
    title = "Theorem 3.15: GD on languages whose non-optimal scores lie within delta converges to X^mm"
    paper = PAPER_LM + ", Theorem 3.15 (the paper has no experiment varying delta)"
    Config = NearTiesConfig
    quick = {"runs": 20, "steps": 1000, "contrast_deltas": []}

    def tasks(self, config):
        return [Task(f"delta-{x:g}", config.runs, {"delta": float(x), "claimed": bool(x in config.deltas)})
                for x in list(config.deltas) + list(config.contrast_deltas)]

    def run_task(self, config, task):
        delta = float(task.params["delta"])
        found = {}

        def language(seed):
            lang, eps, got, gap = near_tie_language(delta, config.vocab, config.d, n=config.n, rho=config.rho,
                                                    loss=config.loss, seed=seed)
            found[seed] = (eps, got, gap)
            return lang

        datas, W0 = build_runs(config, config.m, config.n, config.d, config.runs, language=language)
        cps = log_steps(config.steps, 9, extra=tuple(k for k in DECADES if k <= config.steps))
        res = train_runs(config, datas, W0, cps)
        rows = []
        for r, (data, seed) in enumerate(zip(datas, found)):
            eps, got, gap = found[seed]
            hard = solve(lm_constraints(data, config.loss), method="dense")
            spread, data_gap = score_ties(data, config.loss)
            sel = optimal_prefix_tokens(prefix_scores(data, config.loss))[:, : config.n - 1]
            rows.append(dict(record="svm", delta=delta, claimed=bool(task.params["claimed"]), run=r, eps=eps,
                             lang_delta=got, lang_gap=gap, data_spread=float(spread.max()),
                             data_gap=float(data_gap.min()),
                             query_optimal=bool(np.array_equal(sel, np.broadcast_to(np.arange(config.n - 1), sel.shape))),
                             hard_feasible=bool(hard.feasible), hard_used=True,
                             **svm_record(hard, "hard")))
            nan = np.full(len(res["steps"]), np.nan)
            cos = correlation(res["W"][r], hard.W) if hard.feasible and hard.certified else nan
            nrm = np.linalg.norm(res["W"][r].reshape(len(res["steps"]), -1), axis=1)
            _, _, _, pos = prefix_problem(data)
            for c, st in enumerate(res["steps"]):
                s = prefix_softmax(data, res["W"][r, c])
                # the softmax weight on the query token, every prefix's optimal token (query_optimal, checked)
                rows.append(dict(record="train", delta=delta, claimed=bool(task.params["claimed"]), run=r,
                                 step=int(st), cos_hard=float(cos[c]), norm=float(nrm[c]),
                                 loss=float(res["loss"][r, c]), opt_prob=float(s[np.arange(len(pos)), pos].min())))
        return pd.DataFrame(rows)

    # ------------------------------------------------------------------ checks

    @staticmethod
    def at_step(table, step: int) -> pd.DataFrame:
        """Per-run train rows at the checkpoint nearest ``step``: indexed by (delta, run)."""
        tr = table[table["record"] == "train"] if "record" in table else table.iloc[:0]
        out = []
        for _, g in tr.groupby(["delta", "run"]):
            steps = np.sort(g["step"].unique())
            st = steps[np.argmin(np.abs(steps - step))]
            out.append(g[g["step"] == st].iloc[0])
        return (pd.DataFrame(out).set_index(["delta", "run"]).sort_index() if out
                else pd.DataFrame(columns=["cos_hard", "norm", "step"]))

    @staticmethod
    def assumption_failures(table, config) -> tuple[int, str]:
        """Runs that do not meet the theorem's assumption at their delta (or are missing), and a summary."""
        sv = table[table["record"] == "svm"] if "record" in table else table.iloc[:0]
        wanted = list(config.deltas) + list(config.contrast_deltas)
        bad = sum(max(0, config.runs - int((sv["delta"] == x).sum())) for x in wanted) if len(sv) else \
            config.runs * len(wanted)
        if not len(sv):
            return bad, "no runs"
        dl = sv["delta"].astype(float)
        ld, sp = sv["lang_delta"].astype(float), sv["data_spread"].astype(float)
        ok = ((ld - dl).abs() <= CALIBRATION_TOL) & (sp <= dl + TIE_TOL) & (sv["data_gap"].astype(float) > 0)
        ok &= np.where(dl > 0, sp > TIE_TOL, sp <= TIE_TOL)          # ties broken exactly when delta > 0
        ok &= sv["hard_feasible"].astype(bool) & ~uncertified(sv, "hard")
        ok &= sv["query_optimal"].astype(bool) if "query_optimal" in sv else False
        summary = "; ".join(f"delta {x:g}: data spread {g['data_spread'].min():.3g}..{g['data_spread'].max():.3g}, "
                            f"smallest gap {g['data_gap'].min():.3g}" for x, g in sv.groupby("delta"))
        return bad + int((~ok).sum()), summary

    def checks(self, config, table):
        bad, summary = self.assumption_failures(table, config)
        wanted = list(config.deltas) + list(config.contrast_deltas)
        out = [integrity_check(
            "Theorem 3.15: every run meets the assumption at its delta (the language's largest non-optimal score "
            "spread equals delta, the data's is at most delta and positive exactly when delta > 0, the query is the "
            "unique optimal token of every prefix, a feasible and certified hard-margin SVM)", bad, "==", 0,
            f"{len(wanted)} deltas x {config.runs} runs; {summary}",
            reason=f"the construction, checked as measured: language spread within {CALIBRATION_TOL:g} of delta, data "
                   f"spread <= delta + {TIE_TOL:g} and > {TIE_TOL:g} iff delta > 0 (else the run tests Theorem 3.14's "
                   "exact ties, not 3.15), optimal gap > 0 and the optimal token of every prefix its query (the "
                   "construction; the softmax weight reported is the query's), the exact solver's hard-margin SVM "
                   "optimal and certified")]
        a, b = last_decade(config.steps)
        first, last = self.at_step(table, a), self.at_step(table, b)
        for x in config.deltas:
            for col, what, why in (
                    ("cos_hard", "the cosine with the hard-margin SVM X^mm rises",
                     "the theorem's limit X(k)/||X(k)||_F -> X^mm/||X^mm||_F (cosine 1, for every delta up to its "
                     "delta_0) at finite steps: the cosine keeps rising, where a limit 1 - O(delta) would stall"),
                    ("norm", "||X(k)||_F rises", "the theorem's limit ||X(k)||_F -> infinity at finite steps")):
                f, la = _of(first, x, col), _of(last, x, col)
                diff = (la - f).to_numpy(np.float64) if len(f) and len(la) else np.array([])
                detail = (f"mean {f.mean():.5g} at step {a} -> {la.mean():.5g} at step {b}" if diff.size else "no runs")
                out.append(ordering_check(
                    f"Theorem 3.15 at delta = {x:g}: {what} over the last decade of GD steps ({a} -> {b}; paired "
                    "over runs)", diff, 0.0, detail, source=SOURCE,
                    reason=why + "; comparator: the same runs one decade earlier; an ordering claim, so margin 0",
                    standardized=STANDARDIZED_EFFECT,
                    effect_reason="Cohen's large d: " + ("the cosine is near 1 late in training, so no fixed shift on "
                                                         "the correlation scale applies" if col == "cos_hard" else
                                                         "a norm has no natural scale")))
        sv = table[table["record"] == "svm"] if "record" in table else table.iloc[:0]
        out.append(certified_check(sv, ("hard",), "hard-margin Att-SVM of every run", expected=config.runs * len(wanted),
                                   name="Theorem 3.15: every hard-margin SVM is certified"))
        out += correlation_partners(table, {"cos_hard": "Theorem 3.15: cosine with the hard-margin SVM"})
        return out

    # ------------------------------------------------------------------ report

    def deviations(self, config):
        out = [{"spec": "Theorem 3.15 (no experiment in the paper: its Sec. 4 does not vary delta)",
                "here": f"cycle languages (V = {config.vocab}, rho = {config.rho:g}) with the embedding norms scaled so "
                        f"that the largest non-optimal score spread is exactly delta; deltas "
                        f"{', '.join(f'{x:g}' for x in config.deltas)} checked"
                        + (f", {', '.join(f'{x:g}' for x in config.contrast_deltas)} reported" if config.contrast_deltas
                           else "") + f"; {config.steps} GD steps with step {config.lr:g}",
                "reason": "the theorem's delta_0 depends on the data and X(0) and is not given: the checked deltas are "
                          "small against the optimal gap (about rho = 0.4 at delta = 0), the contrast ones are not; "
                          "a finite run tests the limits through the last decade's trend"}]
        return out + preset_deviations(self, config)

    def plot(self, config, table, outdir):
        tr = table[(table["record"] == "train") & (table["step"] > 0)] if "record" in table else table.iloc[:0]
        fig, axes = subplots(1, 2, width=16 / 3, height=4.5)
        for x, g in tr.groupby("delta"):
            style = "-" if bool(g["claimed"].iloc[0]) else ":"
            by = g.groupby("step")
            for ax, col, f in ((axes[0, 0], "cos_hard", lambda v: 1.0 - v), (axes[0, 1], "norm", lambda v: v)):
                mean = f(by[col].mean())
                ax.plot(mean.index, mean, style, label=f"delta = {x:g}" + ("" if style == "-" else " (reported)"))
        for ax in axes[0]:
            ax.set_xscale("log")
        axes[0, 0].set_yscale("log")
        label_axes(axes[0, 0], "GD step k", "1 - cos(X(k), X^mm)  (mean over runs)",
                   title=f"Theorem 3.15: near ties (V = {config.vocab}, m = {config.m}, n = {config.n}, d = {config.d})",
                   legend=8, grid="both")
        label_axes(axes[0, 1], "GD step k", "||X(k)||_F  (mean over runs)", legend=8, grid="both")
        return list(save_figure(fig, outdir, "lm_near_ties"))

    def explain(self, config, table):
        sv = table[table["record"] == "svm"] if "record" in table else table.iloc[:0]
        a, b = last_decade(config.steps)
        first, last = self.at_step(table, a), self.at_step(table, b)
        text = ("Theorem 3.15 of the paper (Sec. 3.2) concludes lim ||X(k)||_F = infinity and lim X(k)/||X(k)||_F = "
                "X^mm/||X^mm||_F when every prefix's non-optimal token scores lie within delta of each other, for a "
                "'dataset dependent sufficiently small delta > 0' it does not give. The limit it states does not "
                "depend on delta (cosine 1, not 1 - O(delta)). Languages [OURS]: one random cycle through V = "
                f"{config.vocab} types with <e_q, e_f(q)> = {config.rho:g}, every embedding scaled by 1 + eps r_u "
                "(r_u uniform in [-1, 1], eps solved so that the largest non-optimal spread over every prefix of "
                f"length-{config.n} sequences is exactly delta); runs of one seed share the cycle, the sequences and "
                f"X(0) across delta. m = {config.m}, d = {config.d}, {config.runs} runs per delta, {config.steps} GD "
                f"steps with step {config.lr:g}.")
        if len(sv):
            eps = sv.groupby("delta")["eps"].mean()
            gap = sv.groupby("delta")["lang_gap"].min()
            text += " Perturbations: " + ", ".join(f"delta {x:g}: eps {eps[x]:.3g}, smallest optimal gap {gap[x]:.3g}"
                                                  for x in eps.index) + "."
        if len(last):
            parts = []
            for x in sorted(set(last.index.get_level_values(0))):
                c0, c1 = _of(first, x, "cos_hard"), _of(last, x, "cos_hard")
                if not len(c0):
                    continue
                rise = (c1 - c0).to_numpy(np.float64)
                parts.append(f"delta {x:g}{'' if x in config.deltas else ' (reported, not checked)'}: cos with X^mm "
                             f"{c0.mean():.4f} -> {c1.mean():.4f} (falls in {int((rise < 0).sum())} of {rise.size} "
                             f"runs), ||X|| {_of(first, x, 'norm').mean():.3g} -> {_of(last, x, 'norm').mean():.3g}, "
                             f"smallest softmax weight on the optimal token at step {b}: "
                             f"{_of(last, x, 'opt_prob').min():.3g}")
            text += f" Measured over the last decade (step {a} -> {b}): " + "; ".join(parts) + "."
            if config.contrast_deltas:
                text += (" A fall at a contrast delta does not contradict the theorem (its delta_0 may lie below); a "
                         "fall at a checked delta would, unless delta_0 lies below that delta too.")
        return text
