"""Feasibility of Att-SVM and the share of support vectors vs d (over-parameterization)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import PositiveInt

from ..generators import random_problem
from ..svm import solve_svm
from .base import Experiment, ExperimentConfig, Task, check, register
from .common import save_figure, subplots


class Config(ExperimentConfig):
    cells: list[tuple[PositiveInt, PositiveInt]] = [(5, 5), (6, 8)]
    ds: list[PositiveInt] = [1, 2, 3, 4, 6, 8, 10, 15, 20, 30, 50, 100]
    instances: PositiveInt = 100
    rng: Literal["torch", "numpy"] = "torch"


@register
class Feasibility(Experiment):
    name = "tf-feasibility"
    title = "Over-parameterization: Att-SVM feasibility and the share of support vectors vs d"
    paper = "Transformers as Support Vector Machines, feasibility when d >= max(T-1, n) and 'all tokens are support vectors'"
    Config = Config
    quick = {"cells": [(5, 5)], "ds": [1, 2, 4, 8, 30], "instances": 15}

    def tasks(self, config):
        return [Task(f"n{n}-T{T}-d{d}", config.instances, {"n": n, "T": T, "d": d}) for n, T in config.cells for d in config.ds]

    def run_task(self, config, task):
        n, T, d = task.params["n"], task.params["T"], task.params["d"]
        rows = []
        for seed in range(config.instances):
            problem = random_problem(n, T, d, seed, rng=config.rng)
            opt = solve_svm(problem, norm="fro")
            rand_select = np.random.default_rng([seed, n, T, d]).integers(0, T, size=n)
            rnd = solve_svm(problem, select=rand_select, norm="fro")
            frac = opt.support.mean() if opt.feasible else np.nan
            rows.append({"n": n, "T": T, "d": d, "seed": seed, "feasible_opt": opt.feasible, "feasible_random": rnd.feasible,
                         "support_fraction": frac, "all_support": bool(opt.feasible and opt.support.all()),
                         "infeasibility_certified": bool(opt.feasible or opt.certificate.farkas is not None)})
        return pd.DataFrame(rows)

    def checks(self, config, table):
        over = table[table.d >= np.maximum(table["T"] - 1, table.n)]
        out = []
        if len(over):
            out.append(check("P(feasible), optimal tokens, d >= max(T-1, n)", over.feasible_opt.mean(), ">=", 1.0))
            out.append(check("P(feasible), random selection, d >= max(T-1, n)", over.feasible_random.mean(), ">=", 1.0))
        out.append(check("share of infeasible instances that carry a certificate", table.infeasibility_certified.mean(), ">=", 1.0))
        g = table.groupby(["n", "T", "d"]).feasible_opt.mean()
        for (n, T), sub in g.groupby(level=[0, 1]):
            ds = sub.index.get_level_values(2)
            out.append(check(f"n={n}, T={T}: P(feasible) at d={ds.max()} minus at d={ds.min()}", sub.iloc[-1] - sub.iloc[0], ">", 0.5))
        sv = table[table.feasible_opt].groupby(["n", "T", "d"]).support_fraction.mean()
        for (n, T), sub in sv.groupby(level=[0, 1]):
            ds = sub.index.get_level_values(2)
            lo = sub[ds >= 4]
            if len(lo) >= 2:
                out.append(check(f"n={n}, T={T}: support-vector share grows from d={lo.index[0][2]} to d={lo.index[-1][2]}",
                                 lo.iloc[-1] - lo.iloc[0], ">", 0.1))
        return out

    def plot(self, config, table, outdir):
        fig, axes = subplots(1, 2)
        for n, T in config.cells:
            sub = table[(table.n == n) & (table["T"] == T)].groupby("d")
            axes[0, 0].plot(sub.feasible_opt.mean().index, sub.feasible_opt.mean(), "-o", ms=3, label=f"n={n}, T={T}, optimal")
            axes[0, 0].plot(sub.feasible_random.mean().index, sub.feasible_random.mean(), "--", label=f"n={n}, T={T}, random")
            axes[0, 0].axvline(max(T - 1, n), color="gray", lw=0.6, ls=":")
            sv = table[(table.n == n) & (table["T"] == T) & table.feasible_opt].groupby("d").support_fraction.mean()
            axes[0, 1].plot(sv.index, sv, "-o", ms=3, label=f"n={n}, T={T}")
        for ax, ylabel in zip(axes[0], ("P(Att-SVM feasible)", "share of active constraints (support vectors)")):
            ax.set_xscale("log")
            ax.set_xlabel("d")
            ax.set_ylabel(ylabel)
            ax.legend(fontsize=7)
        return save_figure(fig, outdir, "feasibility")

    def explain(self, config, table):
        allsv = table[table.feasible_opt].all_support.mean()
        return (f"Dotted lines mark d = max(T-1, n), from which every selection is separable. Share of feasible instances "
                f"in which all tokens are support vectors: {allsv:.3f} (the 'all tokens are support vectors' condition "
                "needs d far beyond max(T-1, n) for this data model).")
