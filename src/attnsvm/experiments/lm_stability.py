"""C3 of the causal-LM paper (``lm-stability``): softmax vs linear attention, Lipschitz estimates and stable steps."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, PositiveFloat, PositiveInt

from .base import Experiment, Task, check, register
from .common import save_figure, subplots
from .lm_language import PAPER_LM, LanguageFields, build_runs
from .lm_model import lipschitz_estimates, train_lm


class StabilityConfig(LanguageFields):
    """C3 [OURS protocol]: softmax vs linear attention, gradient Lipschitz estimates and stable steps."""

    m: PositiveInt = 10
    n: PositiveInt = Field(5, ge=2)
    d: PositiveInt = 50
    scales: list[float] = Field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0, 8.0])
    radii: list[float] = Field(default_factory=lambda: [1.0, 4.0])
    attentions: list[Literal["softmax", "linear"]] = Field(default_factory=lambda: ["softmax", "linear"])
    stability_losses: list[Literal["logistic", "l2"]] = Field(default_factory=lambda: ["logistic", "l2"])
    centers: PositiveInt = 8
    power_iters: PositiveInt = 8
    pairs: PositiveInt = 16
    eta_min: PositiveFloat = 1e-8
    eta_max: PositiveFloat = 1e8
    eta_count: PositiveInt = 65
    sweep_steps: PositiveInt = 100
    run: int = 0


@register
class LMStability(Experiment):
    name = "lm-stability"
    title = "C3: softmax vs linear attention: gradient Lipschitz estimates and the largest stable GD step"
    paper = PAPER_LM
    Config = StabilityConfig
    quick = {"d": 20, "scales": [1.0, 4.0], "radii": [1.0], "centers": 4, "power_iters": 6, "pairs": 6,
             "eta_count": 33, "sweep_steps": 40}

    def tasks(self, config):
        return [Task(f"{att}-{loss}", len(config.scales), {"attention": att, "loss": loss})
                for att in config.attentions for loss in config.stability_losses]

    def run_task(self, config, task):
        att, loss = task.params["attention"], task.params["loss"]
        rows = []
        etas = np.logspace(np.log10(config.eta_min), np.log10(config.eta_max), config.eta_count)
        for scale in config.scales:
            datas, W0 = build_runs(config, config.m, config.n, config.d, config.run + 1, scale=scale)
            data, W0 = datas[config.run], W0[config.run]
            for R in config.radii:
                power, pair = lipschitz_estimates(data, loss=loss, attention=att, radius=R, centers=config.centers,
                                                  power_iters=config.power_iters, pairs=config.pairs,
                                                  seed=1000 * config.seed + int(100 * scale))
                rows.append(dict(record="lipschitz", attention=att, loss=loss, scale=float(scale), radius=float(R),
                                 lip_power=power, lip_pairs=pair))
            B = len(etas)
            A = np.broadcast_to(data.A, (B,) + data.A.shape)
            tg = np.broadcast_to(data.targets, (B,) + data.targets.shape)
            E = np.broadcast_to(data.E, (B,) + data.E.shape)
            res = train_lm(A, tg, E, np.broadcast_to(W0, (B,) + W0.shape), steps=config.sweep_steps, lr=etas, loss=loss,
                           attention=att, track_lipschitz=True)
            L0, L1 = res["loss"][:, 0], res["loss"][:, -1]
            stable = res["finite"] & np.isfinite(L1) & (L1 <= L0) & (res["max_loss"] <= L0 * (1 + 1e-9) + 1e-12)
            for j, eta in enumerate(etas):
                rows.append(dict(record="sweep", attention=att, loss=loss, scale=float(scale), eta=float(eta),
                                 stable=bool(stable[j]), loss0=float(L0[j]), loss_final=float(L1[j]),
                                 lip_traj=float(res["lip_traj"][j])))
        return pd.DataFrame(rows)

    @staticmethod
    def _eta_max(sw):
        """Largest step of the sweep below which every step is stable (NaN if the smallest is unstable)."""
        sw = sw.sort_values("eta")
        ok = sw["stable"].astype(bool).to_numpy()
        if not ok[0]:
            return float("nan")
        first_bad = np.flatnonzero(~ok)
        j = (first_bad[0] - 1) if first_bad.size else len(ok) - 1
        return float(sw["eta"].iloc[j])

    def summary(self, table):
        lip = table[table["record"] == "lipschitz"]
        sw = table[table["record"] == "sweep"]
        rows = []
        for (att, loss, scale), g in sw.groupby(["attention", "loss", "scale"]):
            em = self._eta_max(g)
            tr = g[g["eta"] <= em]["lip_traj"].max() if em == em else np.nan
            lp = lip[(lip["attention"] == att) & (lip["loss"] == loss) & (lip["scale"] == scale)]
            rows.append(dict(attention=att, loss=loss, scale=scale, eta_max=em, lip_traj=tr,
                             lip_power=lp["lip_power"].max(), lip_pairs=lp["lip_pairs"].max()))
        return pd.DataFrame(rows)

    @staticmethod
    def _slope(x, y):
        x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.sum() < 2:
            return float("nan")
        return float(np.polyfit(x[ok], y[ok], 1)[0])

    def checks(self, config, table):
        out = []
        sm = self.summary(table)
        for loss in config.stability_losses:
            a = sm[(sm["attention"] == "softmax") & (sm["loss"] == loss)].set_index("scale").sort_index()
            b = sm[(sm["attention"] == "linear") & (sm["loss"] == loss)].set_index("scale").sort_index()
            if not (len(a) and len(b)):
                continue
            ratio = (b["lip_power"] / a["lip_power"]).dropna()
            out.append(check(f"C3 ({loss}): softmax attention's gradient Lipschitz estimate is below linear attention's at "
                             "every input scale (min ratio linear / softmax)", ratio.min(), ">=", 3.0,
                             ", ".join(f"c={c:g}: {r:.1f}" for c, r in ratio.items())))
            # scales where linear attention's threshold lies inside the sweep; softmax's value may sit at the top of
            # the grid (every step stable), which makes the ratio a lower bound
            inside = [c for c in a.index if c in b.index and b.loc[c, "eta_max"] < config.eta_max
                      and b.loc[c, "eta_max"] == b.loc[c, "eta_max"] and a.loc[c, "eta_max"] == a.loc[c, "eta_max"]]
            if inside:
                er = np.array([a.loc[c, "eta_max"] / b.loc[c, "eta_max"] for c in inside])
                cens = [">=" if a.loc[c, "eta_max"] >= config.eta_max else "" for c in inside]
                out.append(check(f"C3 ({loss}): softmax attention tolerates a larger GD step than linear attention (min over "
                                 "scales of eta_max(softmax) / eta_max(linear); '>=' = softmax stable up to the largest "
                                 "step tried)", er.min(), ">=", 3.0,
                                 ", ".join(f"c={c:g}: {q}{r:.3g}" for c, q, r in zip(inside, cens, er))))
            sw = table[(table["record"] == "sweep") & (table["loss"] == loss)]
            blow = sw[~np.isfinite(sw["loss_final"]) | (sw["loss_final"] > 10 * sw["loss0"])]
            nb = blow.groupby("attention").size()
            out.append(check(f"C3 ({loss}): softmax attention never diverges in the step sweep (runs ending non-finite or "
                             "above 10x the initial loss)", int(nb.get("softmax", 0)), "==", 0,
                             f"linear attention: {int(nb.get('linear', 0))} of {int((sw['attention'] == 'linear').sum())} "
                             "runs diverge"))
            sb = self._slope(b.index, b["lip_power"])
            lo, hi = (5.5, 6.5) if loss == "l2" else (4.0, 7.0)
            out.append(check(f"C3 ({loss}): linear attention's Lipschitz constant grows like c^6 with the input scale "
                             f"(log-log slope, expected in [{lo:g}, {hi:g}])", sb, ">=", lo,
                             f"slope {sb:.2f}; softmax slope {self._slope(a.index, a['lip_power']):.2f}"))
            out.append(check(f"C3 ({loss}): ... and not faster than c^{hi:g} (log-log slope)", sb, "<=", hi))
            lin = b.dropna(subset=["eta_max"])
            lin = lin[lin["eta_max"] < config.eta_max]
            if len(lin):
                prod = (lin["eta_max"] * lin["lip_power"]).to_numpy()
                tol = 0.3 if loss == "l2" else 1.0
                out.append(check(f"C3 ({loss}): for linear attention the largest stable step matches the GD threshold 2/L "
                                 "(max over scales of |log10(eta_max * L / 2)|)", float(np.max(np.abs(np.log10(prod / 2.0)))),
                                 "<=", tol, ", ".join(f"{p:.2f}" for p in prod)))
        return out

    def plot(self, config, table, outdir):
        sm = self.summary(table)
        fig, axes = subplots(1, 2, width=6.5, height=4.6)
        axes = axes[0]
        styles = {"softmax": "-", "linear": "--"}
        colors = {"logistic": "tab:blue", "l2": "tab:red"}
        for loss in config.stability_losses:
            for att in config.attentions:
                g = sm[(sm["attention"] == att) & (sm["loss"] == loss)].sort_values("scale")
                axes[0].plot(g["scale"], g["lip_power"], "o" + styles[att], color=colors[loss], label=f"{att}, {loss}")
                axes[1].plot(g["scale"], g["eta_max"], "s" + styles[att], color=colors[loss], label=f"{att}, {loss}")
        axes[1].axhline(config.eta_max, ls=":", color="k", lw=1, label="largest step tried (stable up to here)")
        axes[0].set_ylabel(f"gradient Lipschitz estimate (max over the balls ||X|| <= {max(config.radii):g})")
        axes[1].set_ylabel("largest stable GD step")
        for ax in axes:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("input scale c (embeddings times c)")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3, which="both")
        axes[0].set_title("local gradient Lipschitz constant")
        axes[1].set_title(f"step-size sweep ({config.sweep_steps} GD steps)")
        return save_figure(fig, outdir, "lm_stability")

    def explain(self, config, table):
        sm = self.summary(table)
        lines = ["Protocol [OURS]: the default language's sequences with the attention inputs scaled by c (the head "
                 "H = E^T is not scaled); linear attention uses the raw scores a_t^T X a_k (t <= k) as weights. "
                 "Lipschitz estimates: power iteration on finite-difference Hessian-vector products at random centers "
                 f"of the balls ||X||_F <= R (R in {config.radii}), max over centers (random pairs in the ball give the "
                 "secant ratio 'lip_pairs' in the table); along GD the ratio ||g_(k+1) - g_k|| / ||X_(k+1) - X_k|| "
                 f"(lip_traj). Step sweep: {config.eta_count} steps log-spaced in [{config.eta_min:g}, "
                 f"{config.eta_max:g}], {config.sweep_steps} GD steps from X(0); stable = finite, never above the "
                 "initial loss, and ending below it.", "", "| attention | loss | scale | L (power) | eta_max |",
                 "|---|---|---|---|---|"]
        for r in sm.sort_values(["loss", "attention", "scale"]).itertuples():
            lines.append(f"| {r.attention} | {r.loss} | {r.scale:g} | {r.lip_power:.3g} | {r.eta_max:.3g} |")
        lines.append("")
        slopes = []
        for loss in config.stability_losses:
            for att in config.attentions:
                g = sm[(sm["attention"] == att) & (sm["loss"] == loss)]
                slopes.append(f"{att}/{loss} {self._slope(g['scale'], g['lip_power']):.2f}")
        lines.append("Log-log slopes of the Lipschitz estimate against the input scale: " + ", ".join(slopes) + ". "
                     "Softmax attention is more stable than linear attention by a large constant factor (its weights "
                     "stay in the simplex, so the output is an average instead of an unnormalized sum over the prefix), "
                     "and the largest stable step is correspondingly larger. The stronger expectation of the spec, that "
                     "softmax's constant stays bounded while linear attention's grows with the input scale, is NOT "
                     "observed over this range: for key-query matrices in a ball around 0 the logits are small, the "
                     "softmax is far from saturation and behaves like a normalized linear attention, so its constant "
                     "grows at nearly the same power of the scale (the growth only slows where the logits saturate). "
                     "For linear attention with the l2 loss the objective is quadratic and the sweep's largest stable "
                     "step sits at the classical 2/L, which validates the estimator. The paper's bound "
                     "(3 n^3 R^7 exp(13 R^2)) is many orders of magnitude above the measured constants.")
        return "\n".join(lines)
