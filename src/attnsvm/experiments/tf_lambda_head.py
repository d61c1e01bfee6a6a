"""E6 of Transformers as SVMs: the lambda head selects more tokens as lambda grows."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import PositiveFloat, PositiveInt

from ..generators import orthonormal_problem
from ..models import LambdaHead
from ..tokens import simplex_projection
from ..train import train
from .base import Experiment, ExperimentConfig, Task, check, register
from .common import save_figure, subplots


class Config(ExperimentConfig):
    n: PositiveInt = 3
    T: PositiveInt = 4
    d: PositiveInt = 8
    lambdas: list[PositiveFloat] = [0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0]
    runs: PositiveInt = 30
    steps: PositiveInt = 3000
    lr: PositiveFloat = 0.1
    threshold: PositiveFloat = 1e-3


@register
class LambdaHeadExperiment(Experiment):
    name = "tf-lambda-head"
    title = "E6: number of selected tokens vs lambda for h(a) = v^T a - lambda ||a||^2 (simplex-projection prediction)"
    paper = "Transformers as Support Vector Machines, nonlinear (lambda) head; protocol of the spec (E6)"
    Config = Config
    quick = {"lambdas": [0.05, 0.3, 2.0], "runs": 8, "steps": 3000}
    notes = ("Tokens are orthonormal (X_i X_i^T = I_T), so the head reads gamma^T s - lambda ||s||^2 and its maximizer "
             "over the simplex is s* = Proj(gamma / (2 lambda)) (sparsemax). Selected set O_i = {t : s_it > threshold} "
             "at the last iterate. The research code's lambda branch crashes as released; this protocol is the spec's.")

    def tasks(self, config):
        return [Task(f"lambda-{lam:g}", config.runs, {"lam": lam}) for lam in config.lambdas]

    def run_task(self, config, task):
        lam = task.params["lam"]
        seeds = list(range(config.runs))
        problems = [orthonormal_problem(config.n, config.T, config.d, s) for s in seeds]
        V = np.stack([p.v for p in problems])
        res = train(problems, param="W", head=LambdaHead(V, lam), seed=seeds, steps=config.steps, lr=config.lr,
                    checkpoints=[config.steps])
        rows = []
        for r, p in enumerate(problems):
            s = res.softmax[r, -1]                      # (n, T)
            gamma = p.Y[:, None] * (p.X @ p.v)          # (n, T)
            s_star = simplex_projection(gamma / (2 * lam))
            for i in range(p.n):
                O = s[i] > config.threshold
                P = s_star[i] > 0
                rows.append({"lam": lam, "seed": seeds[r], "sample": i, "selected": int(O.sum()), "predicted": int(P.sum()),
                             "match": bool(np.array_equal(O, P)), "max_abs_diff": float(np.abs(s[i] - s_star[i]).max())})
        return pd.DataFrame(rows)

    def checks(self, config, table):
        g = table.groupby("lam")
        sizes = g.selected.mean()
        run_match = table.groupby(["lam", "seed"]).match.all().mean()
        return [
            check(f"mean |O_i| at lambda={sizes.index[-1]:g} minus at lambda={sizes.index[0]:g}", sizes.iloc[-1] - sizes.iloc[0], ">=", 1.5),
            check("mean |O_i| never decreases along the lambda grid (largest drop)", float(np.max(-np.diff(sizes.values), initial=0)), "<=", 0.1),
            check("share of runs with O_i = supp(s*) for every sample", run_match, ">=", 0.8),
            check("median max_t |s_t - s*_t|", table.max_abs_diff.median(), "<=", 3e-2),
        ]

    def plot(self, config, table, outdir):
        g = table.groupby("lam")
        fig, axes = subplots(1, 2)
        axes[0, 0].plot(g.selected.mean().index, g.selected.mean(), "-o", label="selected by GD (s > threshold)")
        axes[0, 0].plot(g.predicted.mean().index, g.predicted.mean(), "--s", label="support of Proj(gamma / 2 lambda)")
        axes[0, 0].set_xscale("log")
        axes[0, 0].set_xlabel("lambda")
        axes[0, 0].set_ylabel("mean number of selected tokens")
        axes[0, 0].legend(fontsize=7)
        axes[0, 1].semilogy(g.max_abs_diff.median().index, g.max_abs_diff.median(), "-o")
        axes[0, 1].set_xscale("log")
        axes[0, 1].set_xlabel("lambda")
        axes[0, 1].set_ylabel("median max |s - s*|")
        return save_figure(fig, outdir, "lambda_head")
