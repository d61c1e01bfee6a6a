"""C2 of the causal-LM paper (``lm-margins``): histograms of the token-separation margins during training."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from pydantic import Field, PositiveInt

from .base import Experiment, Task, check, register
from .common import log_steps, pyplot, save_figure, subplots
from .lm_language import PAPER_LM, LanguageFields, build_runs
from .lm_model import lm_loss_grad, train_runs
from .lm_svm import lm_constraints, soft_margin_svm


class MarginsConfig(LanguageFields):
    """C2: histograms of the normalized margins over training (same setting as C1's default)."""

    m: PositiveInt = 10
    n: PositiveInt = Field(5, ge=2)
    d: PositiveInt = 100
    runs: PositiveInt = 5
    hist_steps: list[int] = Field(default_factory=lambda: [0, 1, 10, 100, 1000])
    n_checkpoints: PositiveInt = 20


@register
class LMMargins(Experiment):
    name = "lm-margins"
    title = "C2: histograms of the token-separation margins (optimal vs other tokens) during training"
    paper = PAPER_LM
    Config = MarginsConfig
    quick = {"d": 50, "runs": 3, "steps": 300, "hist_steps": [0, 1, 10, 100, 300], "n_checkpoints": 10}

    def tasks(self, config):
        return [Task(f"run-{r:02d}", 1, {"run": r}) for r in range(config.runs)]

    def run_task(self, config, task):
        r = task.params["run"]
        torch.set_num_threads(1)
        datas, W0 = build_runs(config, config.m, config.n, config.d, config.runs)
        data, W0 = datas[r], W0[r:r + 1]
        cs = lm_constraints(data, config.loss)
        sol = soft_margin_svm(data, config.C, config.loss, config.squared, cs=cs)
        support = (sol.margins <= 1.0 + 1e-6)
        steps = sorted(set(log_steps(config.steps, config.n_checkpoints)) | {s for s in config.hist_steps
                                                                               if 0 <= s <= config.steps})
        res = train_runs(config, [data], W0, steps)
        rows = []
        A = torch.as_tensor(data.A[None])
        tg = torch.as_tensor(data.targets[None])
        E = torch.as_tensor(data.E[None])
        unorm = np.linalg.norm(cs.U, axis=1) * np.linalg.norm(cs.V, axis=1)
        for c, st in enumerate(res["steps"]):
            W = res["W"][0, c]
            nrm = float(np.linalg.norm(W))
            marg = cs.evaluate(W) / nrm if nrm > 0 else np.zeros(cs.N)
            _, _, coef = lm_loss_grad(torch.as_tensor(W[None]), A, tg, E, loss=config.loss, want_coef=True)
            cf = coef[0].numpy()[cs.sample, cs.query, cs.other]  # dL/dlogit of each (prefix, other token)
            mass = np.abs(cf) * unorm
            tot = mass.sum()
            rows.append(dict(record="summary", run=r, step=int(st), norm=nrm, loss=float(res["loss"][0, c]),
                             median_margin=float(np.median(marg)), frac_positive=float((marg > 0).mean()),
                             min_margin=float(marg.min()),
                             grad_frac_nonsupport=float(mass[~support].sum() / tot) if tot > 0 else np.nan,
                             n_support=int(support.sum()), n_rows=int(cs.N),
                             svm_min_margin=float(cs.evaluate(sol.W).min() / sol.norm_value)))
            if st in config.hist_steps:
                for k in range(cs.N):
                    rows.append(dict(record="margin", run=r, step=int(st), margin=float(marg[k]),
                                     support=bool(support[k]), seq=int(cs.sample[k]), query=int(cs.query[k]),
                                     token=int(cs.other[k])))
        return pd.DataFrame(rows)

    def checks(self, config, table):
        out = []
        s = table[table["record"] == "summary"]
        last = int(s["step"].max())
        a = s[s["step"] == 0]
        b = s[s["step"] == last]
        out.append(check("C2: margins start near 0 (|median normalized margin| at k = 0, mean over runs)",
                         float(a["median_margin"].abs().mean()), "<=", 0.05))
        out.append(check(f"C2: margins move to positive values (median normalized margin at k = {last} minus k = 0, "
                         "mean over runs)", float((b["median_margin"].to_numpy() - a["median_margin"].to_numpy()).mean()),
                         ">=", 0.15, f"k = 0: {a['median_margin'].mean():.4f}, k = {last}: {b['median_margin'].mean():.4f}"))
        out.append(check(f"C2: share of positive margins at k = {last} (mean over runs)", float(b["frac_positive"].mean()),
                         ">=", 0.8, f"k = 0: {a['frac_positive'].mean():.2f}"))
        out.append(check("C2: gradient mass on non-support (prefix, token) pairs shrinks during training "
                         f"(k = {last} relative to k = 1, mean over runs)",
                         float(b["grad_frac_nonsupport"].mean() / s[s["step"] == 1]["grad_frac_nonsupport"].mean()),
                         "<=", 0.8, f"k = 1: {s[s['step'] == 1]['grad_frac_nonsupport'].mean():.3f}, k = {last}: "
                                    f"{b['grad_frac_nonsupport'].mean():.3f}"))
        return out

    def plot(self, config, table, outdir):
        mg = table[table["record"] == "margin"]
        steps = sorted(mg["step"].unique())
        cmap = pyplot().get_cmap("plasma")
        fig, axes = subplots(1, 2, width=6.5, height=4.5)
        axes = axes[0]
        ax = axes[0]
        lo, hi = float(mg["margin"].min()), float(mg["margin"].max())
        bins = np.linspace(lo, hi, 41)
        for j, st in enumerate(steps):
            ax.hist(mg[mg["step"] == st]["margin"], bins=bins, histtype="step", lw=1.8,
                    color=cmap(j / max(1, len(steps) - 1) * 0.85), label=f"k = {st}")
        ax.set_xlabel("normalized margin (a_opt - a_t)^T X(k) a_query / ||X(k)||_F")
        ax.set_ylabel("count over (sequence, prefix, token)")
        ax.set_title("margin histograms during GD")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax = axes[1]
        s = table[table["record"] == "summary"]
        g = s[s["step"] > 0].groupby("step")[["median_margin", "grad_frac_nonsupport", "frac_positive"]].mean().reset_index()
        ax.plot(g["step"], g["frac_positive"], label="share of positive margins")
        ax.plot(g["step"], g["grad_frac_nonsupport"], label="gradient mass on non-support tokens")
        ax2 = ax.twinx()
        ax2.plot(g["step"], g["median_margin"], color="k", ls="--", label="median normalized margin")
        ax2.set_ylabel("median normalized margin")
        ax.set_xscale("log")
        ax.set_xlabel("GD step k")
        ax.set_ylabel("fraction")
        ax.set_title("separation and support-token gradient share (mean over runs)")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8)
        ax.grid(alpha=0.3, which="both")
        return save_figure(fig, outdir, "lm_margins")

    def explain(self, config, table):
        s = table[table["record"] == "summary"]
        last = int(s["step"].max())
        b = s[s["step"] == last]
        return ("Margins are taken over every (sequence, prefix, non-optimal token) row of the Att-SVM (tokens of the same "
                "type as the optimal one are excluded: their margin is identically 0) and normalized by ||X(k)||_F. "
                "'Support' rows are those at or inside the margin of the soft-margin SVM solution; the gradient mass of a "
                "row is |dL/dlogit| ||a_opt - a_t|| ||a_query||. At the last step the non-support rows carry "
                f"{100 * b['grad_frac_nonsupport'].mean():.1f}% of the gradient mass (the paper: non-support tokens have "
                "vanishing gradient). The SVM's own smallest normalized margin is "
                f"{b['svm_min_margin'].mean():.3f} on average (negative when slack is needed).")
