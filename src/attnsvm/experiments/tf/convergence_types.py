"""E4 of Transformers as SVMs: share of runs converging globally, locally or neither vs d."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import PositiveFloat, PositiveInt

from attnsvm.generators import random_problem
from attnsvm.metrics import convergence_type
from attnsvm.svm import solve_svm
from attnsvm.training.train import train
from attnsvm.experiments.base import Experiment, ExperimentConfig, Task, register
from attnsvm.experiments.checks import correlation_partners, mean_check, share_check, share_difference_check
from attnsvm.experiments.common import config_deviations, seed_chunks, svm_record
from attnsvm.plotting import label_axes, save_figure, subplots
from attnsvm.experiments.tf.common import certificate_integrity, item, nan_corr, section


class Config(ExperimentConfig):
    n: PositiveInt = 6
    T: PositiveInt = 8
    ds: list[PositiveInt] = [2, 4, 6, 8, 10, 15, 20, 30, 50]
    runs: PositiveInt = 132
    steps: PositiveInt = 2000
    lr: PositiveFloat = 0.1
    chunk: PositiveInt = 50
    saturation: PositiveFloat = 0.99
    support_tol: PositiveFloat = 1e-3
    rng: Literal["torch", "numpy"] = "torch"


@register
class ConvergenceTypes(Experiment):
    name = "tf-convergence-types"
    order = 4
    title = "E4: global / locally-optimal / neither convergence of W-parameterized GD vs d"
    paper = "Transformers as Support Vector Machines, 'percentage of convergence types' bar chart (protocol of the spec, E4)"
    Config = Config
    quick = {"ds": [2, 4, 10, 30, 50], "runs": 70, "chunk": 35}
    notes = ("A run is classified from its final iterate: saturated if every sample's largest softmax probability "
             "exceeds the saturation level; global if saturated and the selected tokens (argmax) are the optimal ones; "
             "local if saturated, not global, Att-SVM of the selection is feasible and the selection is locally "
             "optimal (it beats each of its support tokens; support = margin within support_tol of 1); otherwise "
             "neither. No official code exists for this figure; the protocol is the spec's.")

    def tasks(self, config):
        return [Task(f"d{d:03d}-seeds-{c[0]:05d}", len(c), {"d": d, "seeds": c})
                for d in config.ds for c in seed_chunks(range(config.runs), config.chunk)]

    def run_task(self, config, task):
        d, seeds = task.params["d"], task.params["seeds"]
        problems = [random_problem(config.n, config.T, d, s, rng=config.rng) for s in seeds]
        res = train(problems, param="W", seed=seeds, steps=config.steps, lr=config.lr, checkpoints=[config.steps])
        rows = []
        for r, (problem, seed) in enumerate(zip(problems, seeds)):
            softmax = res.softmax[r, -1]                              # (n, T)
            saturated = bool(np.all(softmax.max(axis=-1) > config.saturation))
            row = {"d": d, "seed": seed, "saturated": saturated, "corr": np.nan,
                   "min_max_softmax": float(softmax.max(axis=-1).min())}
            if saturated:
                # one SVM per run: the classifier's support tokens and the correlation use the same solution
                sol = solve_svm(problem, select=softmax.argmax(axis=-1), norm="fro")
                row.update(svm_record(sol, "svm"))
                kind = convergence_type(problem, softmax=softmax, saturation=config.saturation, tol=config.support_tol,
                                        solver=lambda p, s, n, sol=sol: sol)
                if kind != "neither":
                    row["corr"] = float(nan_corr(res.W[r, -1], sol))
            else:
                kind = "neither"
            row["type"] = kind
            rows.append(row)
        return pd.DataFrame(rows)

    @staticmethod
    def _counts(table):
        g = table.groupby("d")["type"]
        return pd.DataFrame({"runs": g.size(), "global": g.apply(lambda s: int((s == "global").sum())),
                             "local": g.apply(lambda s: int(s.isin(["global", "local"]).sum()))})

    def _shares(self, table):
        c = self._counts(table)
        return pd.DataFrame({"global": c["global"] / c["runs"], "local": c["local"] / c["runs"]})

    def checks(self, config, table):
        c = self._counts(table)
        out = []
        src = item(5)
        if 2 in c.index:
            out.append(share_check("global share at d=2 (about 2%)", c.loc[2, "global"], c.loc[2, "runs"], "~", 0.02,
                                   source=src, reason="spec: 2% at d = 2"))
        if 10 in c.index:
            out.append(share_check("global share at d=10 (about 70%)", c.loc[10, "global"], c.loc[10, "runs"], "~", 0.70,
                                   source=src, reason="spec: about 70% at d = 10 (E4 table 73%, E2 68%)"))
        for d in c.index[c.index >= 30]:
            out.append(share_check(f"global share at d={d} (>= 90%)", c.loc[d, "global"], c.loc[d, "runs"], ">=", 0.90,
                                   source=src, reason="spec: >= 90% at d >= 30"))
        for d in c.index[c.index >= 4]:
            out.append(share_check(f"local-incl-global share at d={d} (>= 95%)", c.loc[d, "local"], c.loc[d, "runs"],
                                   ">=", 0.95, source=src, reason="spec: local-incl-global >= 95% for all d >= 4"))
        if 4 in c.index and 50 in c.index:
            lo, hi = 4, 50
            out.append(share_difference_check(f"global share at d={hi} minus at d={lo} (over-parameterization helps)",
                                              c.loc[hi, "global"], c.loc[hi, "runs"], c.loc[lo, "global"],
                                              c.loc[lo, "runs"], ">=", 0.4, source=src, p1=0.97, p2=0.72,
                                              tolerance=False,
                                              reason="spec: monotone trend with slack, global(d=50) - global(d=4) >= 0.4; "
                                                     "alternative: the spec's measured d=50 share 0.97 with the d=4 "
                                                     "share raised to 0.72, a difference of 0.25 (0.15 below the bar)"))
        classified = table[table["type"].isin(["global", "local"])]
        out.append(mean_check("mean corr(W, W^mm_alpha) over classified runs", classified["corr"], ">=", 0.99,
                              f"{len(classified)} runs", source=section("5 E4") + "; " + item(1),
                              reason="E4 measures 0.9953-0.9972 per d; the bar is item 1's 0.99 for the same data model"))
        out.append(certificate_integrity(table[table.saturated.astype(bool)], ("svm",),
                                         "Att-SVM of every saturated run's selection"))
        out += correlation_partners(table, {
            "corr": "corr(W, W^mm_alpha)",
        })
        return out

    def deviations(self, config):
        out = [{"spec": "E4 has no official code; the spec's protocol (n=6, T=8, 100 seeds per d, 2000 steps, "
                        "saturation 0.99, support tolerance 1e-3)",
                "here": f"n={config.n}, T={config.T}, {config.runs} seeds per d, {config.steps} steps, saturation "
                        f"{config.saturation:g}, support tolerance {config.support_tol:g}; data from the '{config.rng}' "
                        "stream, init U(-1/sqrt(d), 1/sqrt(d)) from torch.Generator(seed)",
                "reason": "the spec's protocol; its random streams are not given"}]
        out.append({"spec": "100 seeds per d", "here": f"{config.runs} seeds per d" + (" (full preset: 132)"
                                                                                        if config.runs != 132 else ""),
                    "reason": "power: at 100 seeds the two-sided check 'about 70% at d = 10' detects a share 0.15 away "
                              "with probability 0.69 only; 132 seeds give >= 0.8. The quick preset (70 seeds) leaves "
                              "that check inconclusive (power 0.50); the full preset decides it"})
        out += config_deviations(config, {
            "ds": ("d in {2, 4, 6, 8, 10, 15, 20, 30, 50}", "targets at the missing d are not checked")})
        return out

    def explain(self, config, table):
        c = self._counts(table)
        lines = ["| d | runs | global | local (not global) | neither: not saturated | neither: saturated |",
                 "|---|---|---|---|---|---|"]
        for d, sub in table.groupby("d"):
            nei = sub[sub["type"] == "neither"]
            uns = int((~nei.saturated.astype(bool)).sum())
            lines.append(f"| {d} | {c.loc[d, 'runs']} | {c.loc[d, 'global']} | {c.loc[d, 'local'] - c.loc[d, 'global']} "
                         f"| {uns} | {len(nei) - uns} |")
        runs = int(config.runs)
        return (self.notes + f"\n\nAt {runs} seeds per d (this run) the shares carry a binomial sampling error of "
                f"up to {50 / np.sqrt(max(runs, 1)):.0f} points (5 points at the full preset's 100 seeds): "
                "re-measured over seeds 0-999 (`attnsvm run tf-convergence-types --set runs=1000 --set \"ds=[4, 10]\"`), "
                "the local-incl-global share at d = 4 is 0.967 (spec 97%) and the global share at d = 10 is 0.684. "
                "\n\nRuns that are neither are either not saturated after the step budget (largest "
                "softmax probability of some sample <= the saturation level) or saturated on a selection that is "
                "infeasible or not locally optimal:\n\n" + "\n".join(lines))

    def plot(self, config, table, outdir):
        sh = self._shares(table)
        fig, axes = subplots(1, 1, width=6.5, height=3.8)
        ax = axes[0, 0]
        x = np.arange(len(sh))
        w = 0.27
        ax.bar(x - w, 100 * sh["global"], w, color="tab:red", label="global")
        ax.bar(x, 100 * sh["local"], w, color="tab:blue", label="locally optimal (incl. global)")
        ax.bar(x + w, 100 * (1 - sh["local"]), w, color="teal", label="neither")
        ax.set_xticks(x, [str(d) for d in sh.index])
        ax.set_ylim(0, 105)
        # the legend above the bars
        label_axes(ax, "d", "% of runs", legend=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
        return save_figure(fig, outdir, "convergence_types")
