"""E4 of Transformers as SVMs: share of runs converging globally, locally or neither vs d."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import PositiveFloat, PositiveInt

from ..generators import random_problem
from ..metrics import convergence_type, correlation
from ..svm import solve_svm
from ..train import train
from .base import Experiment, ExperimentConfig, Task, check, register
from .common import save_figure, seed_chunks, subplots


class Config(ExperimentConfig):
    n: PositiveInt = 6
    T: PositiveInt = 8
    ds: list[PositiveInt] = [2, 4, 6, 8, 10, 15, 20, 30, 50]
    runs: PositiveInt = 100
    steps: PositiveInt = 2000
    lr: PositiveFloat = 0.1
    chunk: PositiveInt = 50
    saturation: PositiveFloat = 0.99
    support_tol: PositiveFloat = 1e-3
    rng: Literal["torch", "numpy"] = "torch"


@register
class ConvergenceTypes(Experiment):
    name = "tf-convergence-types"
    title = "E4: global / locally-optimal / neither convergence of W-parameterized GD vs d"
    paper = "Transformers as Support Vector Machines, 'percentage of convergence types' bar chart (protocol of the spec, E4)"
    Config = Config
    quick = {"ds": [2, 6, 30], "runs": 16, "chunk": 16}
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
            softmax = res.softmax[r, -1]
            kind = convergence_type(problem, softmax=softmax, saturation=config.saturation, tol=config.support_tol)
            corr = np.nan
            if kind != "neither":
                sol = solve_svm(problem, select=softmax.argmax(axis=-1), norm="fro")
                corr = float(correlation(res.W[r, -1], sol.W))
            rows.append({"d": d, "seed": seed, "type": kind, "corr": corr,
                         "min_max_softmax": float(res.softmax[r, -1].max(axis=-1).min())})
        return pd.DataFrame(rows)

    def _shares(self, table):
        g = table.groupby("d")["type"]
        return pd.DataFrame({"global": g.apply(lambda s: (s == "global").mean()),
                             "local": g.apply(lambda s: s.isin(["global", "local"]).mean())})

    def checks(self, config, table):
        sh = self._shares(table)
        four = sh[sh.index >= 4]
        out = []
        if len(four) >= 2:
            out.append(check(f"global share at d={four.index[-1]} minus at d={four.index[0]} (over-parameterization helps)",
                             four["global"].iloc[-1] - four["global"].iloc[0], ">=", 0.25))
            out.append(check("smallest local-incl-global share for d >= 4", four["local"].min(), ">=", 0.9))
        classified = table[table["type"].isin(["global", "local"])]
        out.append(check("mean corr(W, W^mm_alpha) over classified runs", classified["corr"].mean(), ">=", 0.99))
        return out

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
        ax.set_xlabel("d")
        ax.set_ylabel("% of runs")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=7)
        return save_figure(fig, outdir, "convergence_types")
