"""E2 of Transformers as SVMs: local convergence on random data (100 runs, W and (K,Q))."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import PositiveFloat, PositiveInt

from attnsvm.experiments.base import Experiment, ExperimentConfig, Task, register
from attnsvm.experiments.checks import correlation_partners, mean_check, share_check
from attnsvm.experiments.common import at_step, config_deviations, final_rows, seed_chunks, svm_record
from attnsvm.experiments.tf.common import approx_mean_check, certificate_integrity, item, nan_corr
from attnsvm.generators import random_problem
from attnsvm.plotting import save_figure, subplots
from attnsvm.svm import solve_svm
from attnsvm.training.train import train


class Config(ExperimentConfig):
    n: PositiveInt = 6
    T: PositiveInt = 8
    d: PositiveInt = 10
    runs: PositiveInt = 132
    first_seed: int = 0
    steps: PositiveInt = 2000
    lr: PositiveFloat = 0.1
    record_every: PositiveInt = 10
    chunk: PositiveInt = 50
    rng: Literal["torch", "numpy"] = "torch"


def trained_rows(problems, seeds, param, config, extra=None):
    """Train ``param`` on the problems (one run each), solve both SVMs for the selected
    tokens and return one row per run x checkpoint (correlations NaN against an uncertified SVM)."""
    res = train(problems, param=param, seed=list(seeds), steps=config.steps, lr=config.lr, record_every=config.record_every)
    rows = []
    for r, (problem, seed) in enumerate(zip(problems, seeds)):
        alpha = res.selection[r]
        fro = solve_svm(problem, select=alpha, norm="fro")
        nuc = solve_svm(problem, select=alpha, norm="nuclear")
        c_fro, c_nuc = nan_corr(res.W[r], fro), nan_corr(res.W[r], nuc)
        is_global = bool(np.array_equal(alpha, problem.optimal_tokens().index))
        max_sfx = res.softmax[r].max(axis=-1).mean(axis=-1)
        cert = {**svm_record(fro, "fro"), **svm_record(nuc, "nuc")}
        for c, step in enumerate(res.steps):
            rows.append({"seed": int(seed), "param": param, "step": int(step), "corr_fro": c_fro[c], "corr_nuc": c_nuc[c],
                         "max_softmax": max_sfx[c], "is_global": is_global, "feasible": fro.feasible, **cert,
                         **(extra or {})})
    return rows


#: 7.2 item 1: share of runs selecting the optimal tokens (W, (K,Q))
GLOBAL_SHARE = {"W": 0.68, "KQ": 0.75}


@register
class LocalConvergence(Experiment):
    name = "tf-local-convergence"
    order = 2
    title = "E2: W and (K,Q) converge to the SVM of the tokens they select, often a locally-optimal one"
    paper = "Transformers as Support Vector Machines, local_converge (n=6, T=8, d=10, 100 runs)"
    Config = Config
    quick = {"record_every": 100}

    def tasks(self, config):
        seeds = range(config.first_seed, config.first_seed + config.runs)
        return [Task(f"seeds-{c[0]:05d}", len(c), {"seeds": c}) for c in seed_chunks(seeds, config.chunk)]

    def run_task(self, config, task):
        seeds = task.params["seeds"]
        problems = [random_problem(config.n, config.T, config.d, s, rng=config.rng) for s in seeds]
        rows = []
        for param in ("W", "KQ"):
            rows += trained_rows(problems, seeds, param, config)
        return pd.DataFrame(rows)

    @staticmethod
    def _global(final: pd.DataFrame) -> tuple[int, int]:
        g = final.groupby("seed")["is_global"].first()
        return int(g.sum()), int(g.size)

    def checks(self, config, table):
        W, KQ = table[table.param == "W"], table[table.param == "KQ"]
        fW, fKQ = final_rows(W), final_rows(KQ)
        src = item(1)
        last = f"step {int(fW.step.max()) if len(fW) else config.steps}"
        out = [
            mean_check("mean corr(W, W^mm_alpha) at the last step", fW.corr_fro, ">=", 0.99, last, source=src,
                       reason="spec's bar 0.99 at k = 1999 (measured 0.996)"),
            mean_check("mean corr(W, W^mm_alpha) at step 1000", at_step(W, 1000).corr_fro, ">=", 0.98,
                       f"step {int(at_step(W, 1000).step.max())}", source=src,
                       reason="spec's bar 0.98 at k = 1000 (measured 0.991)"),
            mean_check("mean corr(KQ^T, W^mm_*alpha) at the last step", fKQ.corr_nuc, ">=", 0.99, last, source=src,
                       reason="spec's bar 0.99 at k = 1999 (measured 0.9965)"),
            approx_mean_check("cross: mean corr(W, W^mm_*alpha) at the last step", fW.corr_nuc, 0.85, 0.92, last,
                              source=src, hi_is_bound=True,
                              reason="spec: cross-correlations stay about 0.85-0.86, assert < 0.92 (each "
                                     "parameterization is clearly closer to its own SVM)"),
            approx_mean_check("cross: mean corr(KQ^T, W^mm_alpha) at the last step", fKQ.corr_fro, 0.85, 0.92, last,
                              source=src, hi_is_bound=True,
                              reason="spec: cross-correlations stay about 0.85-0.86, assert < 0.92 (each "
                                     "parameterization is clearly closer to its own SVM)"),
            mean_check("mean max softmax (W) at step 300", at_step(W, 300).max_softmax, ">=", 0.99,
                       f"step {int(at_step(W, 300).step.max())}", source=src, reason="spec: >= 0.99 by k = 300 (W)"),
            mean_check("mean max softmax (K,Q) at step 100", at_step(KQ, 100).max_softmax, ">=", 0.99,
                       f"step {int(at_step(KQ, 100).step.max())}", source=src,
                       reason="spec: >= 0.99 by k = 100 ((K,Q))"),
        ]
        for param, f in (("W", fW), ("KQ", fKQ)):
            k, R = self._global(f)
            label = "W" if param == "W" else "(K,Q)"
            out.append(share_check(f"share of {label} runs selecting the optimal tokens", k, R, "~", GLOBAL_SHARE[param],
                                   source=src, reason="spec: about 0.68 (W) / 0.75 (K,Q), asserted in [0.5, 0.9] and "
                                                      "strictly below 1 (local convergence happens)"))
        out.append(certificate_integrity(pd.concat([fW, fKQ]), ("fro", "nuc"),
                                         "W^mm_alpha and W^mm_*alpha of every run's selection"))
        out += correlation_partners(table, {
            "corr_fro": "corr(W, W^mm_alpha)",
            "corr_nuc": "corr(KQ^T, W^mm_star)",
        })
        return out

    def deviations(self, config):
        out = [{"spec": "init from the notebook's unseeded global torch stream (nn.Linear default U(-1/sqrt(d), 1/sqrt(d)))",
                "here": "the same distribution, drawn per run from torch.Generator().manual_seed(run index)",
                "reason": "reproducible runs; the official instances' inits cannot be recovered. The share of runs "
                          "selecting the optimal tokens is a binomial quantity: over seeds 0-999 (`attnsvm run "
                          "tf-local-convergence --set runs=1000`) it is 0.684 (W) and 0.729 (K,Q), against the spec's "
                          "0.68 / 0.75, and blocks of 100 seeds range from 0.63 to 0.75 (W); seeds 0-99 give 0.74"},
               {"spec": "100 runs", "here": f"{config.runs} runs",
                "reason": "power: at 100 runs the two-sided binomial check of the share 'about 0.68 / 0.75' detects a "
                          "share 0.15 away with probability 0.69 only; 132 runs give >= 0.8 for both (and at 131 and "
                          "133: the power is sawtooth in the run count)"},
               {"spec": "SVMs by cvxpy (SCS for the nuclear norm)", "here": "attnsvm's exact, certified solvers",
                "reason": "spec 8: accurate solutions for correlation statements"}]
        out += config_deviations(config, {
            "record_every": ("correlation and softmax at every iteration", "the figure's resolution only; the checked "
                                                                         "steps 100, 300, 1000 and 2000 are recorded"),
            "runs": ("100 runs", "wider sampling tolerances"), "steps": ("2000 iterations", "the targets are at k = 1000 "
                                                                                             "and 1999")})
        return out

    def plot(self, config, table, outdir):
        fig, axes = subplots(1, 2)
        colors = {"W": "tab:blue", "KQ": "tab:red"}
        labels = {"W": "W", "KQ": "(K,Q)"}
        for param in ("W", "KQ"):
            g = table[table.param == param].groupby("step")
            m, s = g.max_softmax.mean(), g.max_softmax.std().fillna(0)
            axes[0, 0].plot(m.index, m, color=colors[param], label=labels[param])
            axes[0, 0].fill_between(m.index, m - s, np.minimum(m + s, 1), color=colors[param], alpha=0.2)
            own, other = ("corr_fro", "corr_nuc") if param == "W" else ("corr_nuc", "corr_fro")
            m, s = g[own].mean(), g[own].std().fillna(0)
            axes[0, 1].plot(m.index, m, color=colors[param], label=f"{labels[param]} vs its own SVM")
            axes[0, 1].fill_between(m.index, m - s, np.minimum(m + s, 1), color=colors[param], alpha=0.2)
            axes[0, 1].plot(m.index, g[other].mean(), "--", color=colors[param], label=f"{labels[param]} vs the other SVM")
        axes[0, 0].set_xlabel("iteration")
        axes[0, 0].set_ylabel("mean max softmax probability")
        axes[0, 0].legend()
        axes[0, 1].set_xlabel("iteration")
        axes[0, 1].set_ylabel("correlation with SVM of selected tokens")
        axes[0, 1].legend(fontsize=7)
        return save_figure(fig, outdir, "local_convergence")

    def explain(self, config, table):
        from scipy.stats import binom

        f = final_rows(table[table.param == "W"])
        k, R = self._global(f)
        lo, hi = binom.ppf(0.005, R, 0.68) / R, binom.ppf(0.995, R, 0.68) / R
        return (f"{k} of {R} W runs ({100 * k / max(R, 1):.0f}%) selected the optimal tokens; the others converged to "
                "the SVM of a non-optimal (locally-optimal) selection, which they match just as well. With the spec's "
                f"share 0.68, {R} runs give a share in [{lo:.2f}, {hi:.2f}] with probability 99% (binomial): the "
                + ("measured share is within the sampling error of the seeds. " if lo <= k / max(R, 1) <= hi else
                   "measured share is OUTSIDE that range. ")
                + "The selection is read off the final softmax (argmax) and the SVMs are solved for it, as in the "
                "research notebook.")
