"""E4 of Max-Margin Token Selection (``mm-loss-functions``): correlation, logistic and exponential losses over C."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import Field, PositiveFloat, PositiveInt

from ..generators import mm_loss
from ..metrics import correlation
from ..svm import enumerate_locally_optimal
from .base import Experiment, ExperimentConfig, Task, check, register
from .common import save_figure, subplots
from .mm_common import PAPER_MM, dense_steps, engine_train, max_dev, p_svm, rows_at


class LossConfig(ExperimentConfig):
    """E4 (``diff_loss_function.ipynb``): X_1 = [0, (1,1,C)], X_2 = [0, (1,-1,1)], p(0) = 0, NGD."""

    Cs: list[float] = Field(default_factory=lambda: [float(c) for c in range(1, 11)] + [100.0])
    losses: list[str] = Field(default_factory=lambda: ["correlation", "logistic", "exponential"])
    steps: PositiveInt = 1000
    lr: PositiveFloat = 0.1
    ngd_eps: float = Field(1e-9, ge=0, description="official notebook epsilon")
    plot_steps: PositiveInt = 200


@register
class LossFunctions(Experiment):
    name = "mm-loss-functions"
    title = "E4: correlation, logistic and exponential losses over the C grid (same limit, different paths)"
    paper = PAPER_MM
    Config = LossConfig
    quick = {"Cs": [1.0, 2.0, 10.0, 100.0]}

    def tasks(self, config):
        return [Task(loss, len(config.Cs), {"loss": loss}) for loss in config.losses] + [Task("svm", len(config.Cs), {"loss": ""})]

    def run_task(self, config, task):
        loss = task.params["loss"]
        rows = []
        if not loss:
            for C in config.Cs:
                prob = mm_loss(C)
                opt = prob.optimal_tokens().index
                sol = p_svm(prob, opt)
                lo = enumerate_locally_optimal(prob)
                rows.append(dict(record="svm", C=float(C), p0=sol.p[0], p1=sol.p[1], p2=sol.p[2],
                                 locally_optimal=";".join(",".join(str(int(a)) for a in s) for s in lo),
                                 optimal=",".join(str(int(a)) for a in opt)))
            return pd.DataFrame(rows)
        cps = dense_steps(config.steps, config.plot_steps, 10, extra=(199, 999))
        for C in config.Cs:
            prob = mm_loss(C)
            pmm = p_svm(prob, prob.optimal_tokens().index).p
            res = engine_train(prob, np.zeros((1, 3)), steps=config.steps, lr=config.lr, optimizer="ngd",
                               eps=config.ngd_eps, checkpoints=cps, loss=loss)
            P = res.p[0]
            cs = correlation(P, pmm)
            for c, st in enumerate(res.steps):
                rows.append(dict(record="train", loss=loss, C=float(C), step=int(st), p0=P[c, 0], p1=P[c, 1],
                                 p2=P[c, 2], norm=float(np.linalg.norm(P[c])), cos=float(cs[c])))
        return pd.DataFrame(rows)

    def checks(self, config, table):
        out = []
        svm = table[table["record"] == "svm"]
        out.append(check("fact 11: p^mm = (1, 0) for every C (max abs deviation over the C grid)",
                         max_dev(svm[["p0", "p1", "p2"]].to_numpy(), np.tile([1.0, 0.0, 0.0], (len(svm), 1))), "<=", 1e-8))
        ok = int(((svm["locally_optimal"] == "1,1") & (svm["optimal"] == "1,1")).sum())
        out.append(check("fact 11: alpha = (1, 1) is the only locally-optimal selection (C values where it holds)",
                         ok, "==", len(svm)))
        tr = table[table["record"] == "train"]

        def at(loss, C, step):
            r = tr[(tr["loss"] == loss) & (tr["C"] == C) & (tr["step"] == step)]
            return r.iloc[0] if len(r) else None

        spec = {("correlation", 2.0): 0.35, ("correlation", 10.0): 1.15, ("correlation", 100.0): 2.30,
                ("logistic", 2.0): -0.06, ("logistic", 10.0): -3.19}
        got = {k: at(k[0], k[1], 199) for k in spec}
        have = {k: r for k, r in got.items() if r is not None}
        if have and config.ngd_eps == 1e-9 and config.lr == 0.1:
            out.append(check("[RUN] y-offsets at iteration 200: -u +0.35/+1.15/+2.30 (C=2/10/100), logistic "
                             "-0.06/-3.19 (C=2/10) (max abs deviation)", max_dev([r.p1 for r in have.values()],
                                                                                  [spec[k] for k in have]), "<=", 0.01,
                             ", ".join(f"{k[0]} C={k[1]:g}: {r.p1:+.3f}" for k, r in have.items())))
        r = at("logistic", 100.0, 199)
        if r is not None:
            out.append(check("[RUN] logistic, C = 100: the path runs exactly along (1, -1) at iteration 200 "
                             "(|slope + 1|)", abs(r.p1 / r.p0 + 1.0), "<=", 1e-9, "input 1's gradient (~e^-100) is lost"))
        fin = {("correlation", 100.0): (0.9965, 0.084), ("logistic", 10.0): (0.9882, -0.153)}
        vals = {k: at(k[0], k[1], 999) for k in fin}
        vals = {k: r for k, r in vals.items() if r is not None}
        if vals and config.ngd_eps == 1e-9 and config.lr == 0.1:
            dirs = [np.array([r.p0, r.p1]) / np.hypot(r.p0, r.p1) for r in vals.values()]
            out.append(check("[RUN] directions at iteration 999: -u C=100 (0.9965, 0.084), logistic C=10 (0.9882, -0.153) "
                             "(max abs deviation)", max_dev(dirs, [fin[k] for k in vals]), "<=", 1e-3,
                             "; ".join(f"{k[0]} C={k[1]:g}: ({d[0]:.4f}, {d[1]:.4f})" for k, d in zip(vals, dirs))))
        mid = tr[(tr["step"] == 199) & (tr["C"] >= 2) & (tr["C"] <= 10)]
        for loss, sign, word in (("correlation", 1, "up toward (1,1)"), ("logistic", -1, "down toward (1,-1)"),
                                 ("exponential", -1, "down toward (1,-1), like logistic")):
            g = mid[mid["loss"] == loss]
            if len(g):
                out.append(check(f"E4 {loss}: the path bends {word} for every C in [2, 10] (min of sign * y-offset at "
                                 "iteration 200)", (sign * g["p1"]).min(), ">", 0.0))
        last = int(tr["step"].max())
        moderate = rows_at(tr, last)
        moderate = moderate[moderate["C"] <= 10]
        if len(moderate):
            out.append(check(f"E4: every run with C <= 10 heads toward p^mm = (1, 0) (min cos at step {last})",
                             moderate["cos"].min(), ">=", 0.98))
        return out

    def plot(self, config, table, outdir):
        tr = table[(table["record"] == "train") & (table["step"] <= config.plot_steps)]
        losses = [l for l in config.losses if (tr["loss"] == l).any()]
        colors = {"correlation": "red", "logistic": "blue", "exponential": "green"}
        fig, axes = subplots(1, len(losses), width=5.2, height=4.6)
        Cs = sorted(c for c in config.Cs if c != 100.0)
        for ax, loss in zip(axes[0], losses):
            for C in config.Cs:
                g = tr[(tr["loss"] == loss) & (tr["C"] == C)].sort_values("step")
                if not len(g):
                    continue
                if C == 100.0:
                    ax.plot(g["p0"], g["p1"], "--", color=colors.get(loss, "k"), lw=1.3, label="C = 100")
                else:
                    a = 0.25 + 0.75 * (Cs.index(C) + 1) / len(Cs)
                    ax.plot(g["p0"], g["p1"], color=colors.get(loss, "k"), alpha=a, lw=1.1,
                            label=f"C = {C:g}" if C in (Cs[0], Cs[-1]) else None)
            L = float(tr[tr["loss"] == loss]["norm"].max())
            ax.plot([0, L], [0, 0], ":", color="k", lw=1.2, label="p^mm = (1, 0)")
            ax.set_xlabel("p[0]")
            ax.set_ylabel("p[1]")
            ax.set_title(f"{loss} loss: NGD paths, first {config.plot_steps} iterations")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        return save_figure(fig, outdir, "mm_loss_functions")

    def explain(self, config, table):
        return ("Every loss has the same limit direction p^mm = (1, 0); the loss only changes the transient path. "
                "The correlation loss has a constant derivative, so the high-score input 1 dominates and the path bends "
                "toward its token (1, 1); logistic and exponential losses down-weight inputs that are already fitted "
                "and bend toward input 2's token (1, -1). For logistic C = 100 the first input's gradient (~e^-100 "
                "relative) is below float64 resolution next to the second one's, so the path is exactly (1, -1) and the "
                "drift toward (1, 0) is invisible within 1000 iterations. The exponential loss, listed in the notebook's "
                "legend but never run there, is run here and behaves like the logistic one.")
