"""E6 of Transformers as SVMs: the lambda head selects more tokens as lambda grows."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import PositiveFloat, PositiveInt

from attnsvm.generators import orthonormal_problem
from attnsvm.training.models import LambdaHead
from attnsvm.tokens import simplex_projection
from attnsvm.training.train import train
from attnsvm.experiments.base import Experiment, ExperimentConfig, Task, register
from attnsvm.experiments.checks import check, share_check
from attnsvm.experiments.lm.common import grouped_ordering_check
from attnsvm.plotting import save_figure, subplots
from attnsvm.experiments.common import config_deviations
from attnsvm.experiments.tf.common import approx_mean_check, item


#: the spec's table (E6, mean |O_i| from GD, 30 seeds per lambda): the stated alternative of the trend test
SPEC_SELECTED = {0.05: 1.22, 0.1: 1.42, 0.2: 1.88, 0.3: 2.47, 0.5: 3.13, 1.0: 3.89, 2.0: 4.00}


def trend_groups(lams, runs: int) -> dict[str, tuple[int, float | None]]:
    """The groups of the trend check "mean |O_i| increases along the lambda grid" on the grid ``lams``:
    ``{"a->b": (runs, effect)}`` for each neighbouring pair ``a < b`` of the sorted grid, with the stated effect
    the rise of the spec's table between them (:data:`SPEC_SELECTED`; None for a lambda the table lacks)."""
    lams = sorted(lams)
    return {f"{a:g}->{b:g}": (int(runs), SPEC_SELECTED[b] - SPEC_SELECTED[a]
                               if a in SPEC_SELECTED and b in SPEC_SELECTED else None)
            for a, b in zip(lams[:-1], lams[1:])}


def preset_trend_groups(config) -> dict[str, tuple[int, float | None]]:
    """:func:`trend_groups` of a config (its lambda grid, ``config.runs`` seeds per lambda)."""
    return trend_groups(config.lambdas, config.runs)


class Config(ExperimentConfig):
    n: PositiveInt = 3
    T: PositiveInt = 4
    d: PositiveInt = 8
    lambdas: list[PositiveFloat] = [0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0]
    runs: PositiveInt = 100
    steps: PositiveInt = 3000
    lr: PositiveFloat = 0.1
    threshold: PositiveFloat = 1e-3


@register
class LambdaHeadExperiment(Experiment):
    name = "tf-lambda-head"
    order = 5
    title = "E6: number of selected tokens vs lambda for h(a) = v^T a - lambda ||a||^2 (simplex-projection prediction)"
    paper = "Transformers as Support Vector Machines, nonlinear (lambda) head; protocol of the spec (E6)"
    Config = Config
    quick = {"lambdas": [0.05, 0.3, 2.0], "runs": 100, "steps": 3000}
    notes = ("Tokens are orthonormal (X_i X_i^T = I_T), so the head reads gamma^T s - lambda ||s||^2 and its maximizer "
             "over the simplex is s* = Proj(gamma / (2 lambda)) (sparsemax). Selected set O_i = {t : s_it > threshold} "
             "at the last iterate. The research code's lambda branch crashes as released; this protocol is the spec's.")

    def tasks(self, config):
        return [Task(f"lambda-{lam:g}", config.runs, {"lam": lam}) for lam in config.lambdas]

    def run_task(self, config, task):
        lam = task.params["lam"]
        # the planning run (attnsvm.experiments.planning_run) passes shifted seeds
        seeds = [int(s) for s in task.params.get("seeds", range(config.runs))]
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
        src = item(7)
        per_run = table.groupby(["lam", "seed"]).selected.mean()         # mean |O_i| of each run
        out = []
        lams = sorted(per_run.index.get_level_values(0).unique())
        for lam, target in ((0.05, 1.2), (2.0, 4.0)):
            if lam in lams:
                out.append(approx_mean_check(f"mean |O_i| at lambda={lam:g} (about {target:.1f})", per_run.loc[lam],
                                             target, target, f"{per_run.loc[lam].size} runs", source=src, slack=0.05,
                                             reason="spec: mean |O_i| grows from 1.2 to 4.0 over lambda in [0.05, 2] "
                                                    "(one decimal: rounding 0.05)"))
        # "increasing" as a trend test: every neighbouring pair of the grid must show a significant rise of the
        # per-seed |O_i| (same seed, same data at every lambda; claim is the alternative: a flat curve fails)
        wide = per_run.unstack(level=0)
        if len(lams) > 1:
            pairs = list(zip(lams[:-1], lams[1:]))
            groups = {f"{a:g}->{b:g}": (wide[b] - wide[a]).to_numpy(np.float64) for a, b in pairs}
            # the stated alternative: the spec's own curve (its table's mean |O_i| from GD) between the same lambdas
            effect = {k: e for k, (_, e) in trend_groups(lams, config.runs).items()}
            effect = effect if all(e is not None for e in effect.values()) else None
            out.append(grouped_ordering_check(
                "mean |O_i| increases along the lambda grid (per-seed rise between neighbouring lambdas)", groups,
                0.0, "means " + ", ".join(f"{lam:g}: {per_run.loc[lam].mean():.2f}" for lam in lams), source=src,
                reason="spec: mean |O_i| increasing in lambda (1.2 -> 4.0 over [0.05, 2]); a trend test, not "
                       "'no significant drop'", effect=effect,
                effect_reason="the rise of the spec's table (mean |O_i| from GD, 30 seeds) between the same lambdas"))
        # agreement per lambda, as in the spec's table (0.83-1.00 per lambda), bar 0.8
        runs = table.groupby(["lam", "seed"]).match.all()
        for lam in lams:
            r = runs.loc[lam]
            out.append(share_check(f"share of runs with O_i = supp(s*) for every sample at lambda={lam:g}",
                                   int(r.sum()), int(r.size), ">=", 0.8, source=src,
                                   reason="spec: agreement >= 0.8 of runs, per lambda (spec table 0.83-1.00)"))
        med = table.groupby("lam").max_abs_diff.median()
        out.append(check("largest median over lambda of max_t |s_t - s*_t|", float(med.max()), "<=", 3e-2,
                         f"after {config.steps} steps; at lambda = {med.idxmax():g}", source=src,
                         reason="spec: median max |s - s*| <= 3e-2 after 3000 steps"))
        return out

    def deviations(self, config):
        out = [{"spec": "E6: the research code's lambda branch crashes as released; the spec's protocol",
                "here": "the spec's protocol (orthonormal tokens from a random orthogonal matrix, Y = +1, 3000 steps)",
                "reason": "no runnable official code"}]
        out.append({"spec": "30 seeds per lambda", "here": f"{config.runs} seeds per lambda",
                    "reason": "power: at 30 seeds the per-lambda agreement check (>= 0.8) and 'mean |O_i| about 1.2' "
                              "cannot tell a 0.15 (resp. 15%) departure from the claim; 100 seeds detect both with "
                              "probability >= 0.8"})
        out += config_deviations(config, {
            "runs": ("100 seeds per lambda", "wider tolerances"),
            "lambdas": ("lambda in {0.05, 0.1, 0.2, 0.3, 0.5, 1, 2}", "the monotone trend is checked on fewer lambdas"),
            "steps": ("3000 steps", "the softmax is compared with s* after 3000 steps")})
        return out

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
