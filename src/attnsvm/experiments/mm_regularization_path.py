"""Regularization paths of the prompt model (``mm-regularization-path``): p-only, local (cone), joint, and W."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from pydantic import Field, PositiveFloat, PositiveInt

from ..generators import mm_multi_input, mm_single_input
from ..metrics import correlation
from ..svm import solve_svm
from ..train import regularization_path
from .base import Experiment, ExperimentConfig, Task, check, register
from .common import save_figure, subplots
from .mm_common import PAPER_MM, e2_as_cross_attention, joint_svms, max_dev, p_svm
from .mm_paths import joint_path_2d, prompt_path_2d


class RegPathConfig(ExperimentConfig):
    """Regularization paths of the prompt model (spec sections 3.10 and 6)."""

    radii: list[float] = Field(default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 20.0])
    local_radii: list[float] = Field(default_factory=lambda: [2.0, 5.0, 10.0, 20.0, 40.0, 80.0])
    cone_half_angle_deg: PositiveFloat = 5.0
    wide_cone_half_angle_deg: PositiveFloat = 45.0
    joint_pairs: list[list[float]] = Field(default_factory=lambda: [[5, 5], [10, 10], [20, 20], [40, 40], [20, 10],
                                                                     [40, 10], [10, 20]])
    joint_grid: PositiveInt = 360
    w_radii: list[float] = Field(default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 20.0])
    w_steps_per_radius: PositiveInt = 500


@register
class RegularizationPath(Experiment):
    name = "mm-regularization-path"
    title = "Regularization paths: p-only -> p^mm, local (cone) -> local p^mm, joint -> (v^mm, p^relax)"
    paper = PAPER_MM
    Config = RegPathConfig
    quick = {"joint_pairs": [[5, 5], [20, 20], [40, 40], [40, 10], [10, 20]], "joint_grid": 120,
             "w_steps_per_radius": 150, "local_radii": [5.0, 20.0, 80.0], "radii": [2.0, 5.0, 10.0, 20.0]}

    def tasks(self, config):
        return [Task("p-path", len(config.radii), {"part": "p"}), Task("local-path", len(config.local_radii), {"part": "local"}),
                Task("joint-path", 2 * len(config.joint_pairs), {"part": "joint"}),
                Task("w-path", len(config.w_radii), {"part": "w"})]

    def run_task(self, config, task):
        part = task.params["part"]
        rows = []
        if part == "p":
            prob = mm_multi_input()
            pmm = p_svm(prob, np.zeros(prob.n, dtype=np.int64)).p
            P, F = prompt_path_2d(prob, config.radii)
            for R, p, f in zip(config.radii, P, F):
                rows.append(dict(record="p-path", dataset="multi", R=float(R), p0=p[0], p1=p[1], p2=p[2],
                                 cos=float(correlation(p, pmm)), excess_loss=f))
        elif part == "local":
            prob = mm_single_input("local")
            pg = p_svm(prob, [0]).p
            pl = p_svm(prob, [1]).p
            h = np.deg2rad(config.cone_half_angle_deg)
            w = np.deg2rad(config.wide_cone_half_angle_deg)
            for region, cone, target in (("global", None, pg), ("cone", (pl, h), pl), ("wide-cone", (pl, w), pl)):
                P, F = prompt_path_2d(prob, config.local_radii, cone=cone)
                for R, p, f in zip(config.local_radii, P, F):
                    rows.append(dict(record="local-path", dataset="single-local", region=region, R=float(R), p0=p[0],
                                     p1=p[1], p2=p[2], cos_target=float(correlation(p, target)),
                                     cos_global=float(correlation(p, pg)), cos_local=float(correlation(p, pl)),
                                     excess_loss=f))
        elif part == "joint":
            for kind in ("tight", "relaxed"):
                prob, vs, pm, pr = joint_svms(kind)
                pairs = [tuple(float(x) for x in pr_) for pr_ in config.joint_pairs]
                V, P, F = joint_path_2d(prob, pairs, grid=config.joint_grid)
                for (r, R), v, p, f in zip(pairs, V, P, F):
                    rows.append(dict(record="joint-path", dataset=kind, r=r, R=R, v0=v[0], v1=v[1], p0=p[0], p1=p[1],
                                     slope=float(p[1] / p[0]), cos_v=float(correlation(v, vs.v)),
                                     cos_p_mm=float(correlation(p, pm.p)), cos_p_relax=float(correlation(p, pr.p)),
                                     log_loss=f))
        else:
            torch.set_num_threads(1)
            cross, _ = e2_as_cross_attention()
            Wmm = solve_svm(cross).W
            res = regularization_path(cross, config.w_radii, param="W", steps_per_radius=config.w_steps_per_radius)
            cw = correlation(res.W[0], Wmm)
            for R, c, nrm, L in zip(res.radii, cw, res.norm[0], res.loss[0]):
                rows.append(dict(record="w-path", dataset="multi-as-W", R=float(R), cos=float(c), norm=float(nrm),
                                 loss=float(L)))
        return pd.DataFrame(rows)

    def checks(self, config, table):
        out = []
        pp = table[table["record"] == "p-path"].set_index("R")
        spec = {2.0: (0.9747, 5e-4), 5.0: (0.9934, 5e-4), 10.0: (0.99890, 5e-5), 20.0: (0.999999, 2e-6)}
        have = [R for R in spec if R in pp.index]
        if have:
            dev = max(abs(pp.loc[R, "cos"] - spec[R][0]) / spec[R][1] for R in have)
            out.append(check("[RUN] p-path on the E2 data: cos(p(R), p^mm) = 0.9747 / 0.9934 / 0.99890 / 0.999999 at "
                             "R = 2 / 5 / 10 / 20 (max deviation in units of the tolerance)", dev, "<=", 1.0,
                             ", ".join(f"R={R:g}: {pp.loc[R, 'cos']:.6f}" for R in have)))
        if len(pp) >= 2:
            c = pp.sort_index()["cos"].to_numpy()
            out.append(check("p-path: cos(p(R), p^mm) increases with R (min successive increment)",
                             float(np.min(np.diff(c))), ">", 0.0))
        lp = table[table["record"] == "local-path"]
        if len(lp):
            Rm = lp["R"].max()
            g = lp[(lp["R"] == Rm) & (lp["region"] == "global")].iloc[0]
            c = lp[(lp["R"] == Rm) & (lp["region"] == "cone")].iloc[0]
            out.append(check(f"local data, unrestricted path at R = {Rm:g}: converges to the global p^mm (cos)",
                             g.cos_global, ">=", 0.999))
            out.append(check(f"local data, path restricted to a {config.cone_half_angle_deg:g} deg cone around the local "
                             f"p^mm at R = {Rm:g}: converges to the local p^mm (cos)", c.cos_local, ">=", 0.999))
            cs = lp[lp["region"] == "cone"].sort_values("R")["cos_local"].to_numpy()
            if len(cs) >= 2:
                out.append(check("local (cone) path: cos(p(R), p^mm_local) is non-decreasing in R (min successive "
                                 "increment; equal while the minimizer sits on the cone boundary)",
                                 float(np.min(np.diff(cs))), ">=", -1e-12))
        jp = table[table["record"] == "joint-path"]
        if len(jp):
            def row(kind, r, R):
                t = jp[(jp["dataset"] == kind) & (jp["r"] == r) & (jp["R"] == R)]
                return t.iloc[0] if len(t) else None

            a, b = row("tight", 5.0, 5.0), row("tight", 40.0, 40.0)
            if a is not None and b is not None:
                out.append(check("[RUN] joint path, tight: p slope 0.209 at r=R=5 and 0.242 at r=R=40 (max abs deviation)",
                                 max_dev([a.slope, b.slope], [0.209, 0.242]), "<=", 0.005,
                                 f"{a.slope:.4f} -> {b.slope:.4f} (p^mm slope 0.25)"))
            rel = {(5.0, 5.0): 0.097, (10.0, 10.0): 0.048, (20.0, 20.0): 0.024, (10.0, 20.0): 0.113}
            got = {k: row("relaxed", *k) for k in rel}
            got = {k: v for k, v in got.items() if v is not None}
            if got:
                out.append(check("[RUN] joint path, relaxed: p slope 0.097 / 0.048 / 0.024 at r=R=5/10/20 and 0.113 at "
                                 "(r, R) = (10, 20) (max abs deviation)", max_dev([v.slope for v in got.values()],
                                                                                  [rel[k] for k in got]), "<=", 0.005,
                                 ", ".join(f"(r,R)={k}: {v.slope:.4f}" for k, v in got.items())))
            for (r, R), bound in (((20.0, 10.0), 0.002), ((40.0, 10.0), 1e-4)):
                v = row("relaxed", r, R)
                if v is not None:
                    out.append(check(f"[RUN] joint path, relaxed, (r, R) = ({r:g}, {R:g}): p slope -> p^relax's 0 "
                                     f"(spec {0.0008 if r == 20 else 0.0:g})", abs(v.slope), "<=", bound))
            big = jp[jp["r"] == jp["r"].max()]
            out.append(check("joint path: v direction -> v^mm = (0, 1) at the largest r (min cos over both datasets)",
                             big["cos_v"].min(), ">=", 0.999))
        wp = table[table["record"] == "w-path"]
        if len(wp):
            w = wp.sort_values("R")
            out.append(check(f"engine W-path (E2 data as cross-attention with a fixed query): cos(W(R), W^mm) at "
                             f"R = {w['R'].iloc[-1]:g}", w["cos"].iloc[-1], ">=", 0.999,
                             ", ".join(f"R={R:g}: {c:.5f}" for R, c in zip(w["R"], w["cos"]))))
        return out

    def plot(self, config, table, outdir):
        fig, axes = subplots(1, 3, width=16 / 3, height=4.6)
        axes = axes[0]
        ax = axes[0]
        pp = table[table["record"] == "p-path"].sort_values("R")
        if len(pp):
            ax.plot(pp["R"], 1 - pp["cos"], "o-", color="red", label="p-path (E2 data) vs p^mm")
        lp = table[table["record"] == "local-path"].sort_values("R")
        names = {"global": "unrestricted", "cone": f"{config.cone_half_angle_deg:g} deg cone",
                 "wide-cone": f"{config.wide_cone_half_angle_deg:g} deg cone"}
        for region, col, ls in (("global", "global", "--"), ("cone", "local", "-."), ("wide-cone", "local", ":")):
            g = lp[lp["region"] == region]
            if len(g):
                ax.plot(g["R"], np.maximum(1 - g[f"cos_{col}"], 1e-17), "s" + ls,
                        label=f"E1 local data, {names[region]} path vs p^mm_{col}")
        wp = table[table["record"] == "w-path"].sort_values("R")
        if len(wp):
            ax.plot(wp["R"], np.maximum(1 - wp["cos"], 1e-17), "^:", color="k", label="engine W-path vs W^mm")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius R")
        ax.set_ylabel("1 - cos(solution(R), SVM direction)")
        ax.set_title("p-only, local and W regularization paths")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
        jp = table[table["record"] == "joint-path"]
        for ax, kind, target, tname in ((axes[1], "tight", 0.25, "p^mm"), (axes[2], "relaxed", 0.0, "p^relax")):
            g = jp[jp["dataset"] == kind]
            diag = g[g["r"] == g["R"]].sort_values("R")
            ax.plot(diag["R"], diag["slope"], "o-", color="red", label="p slope, r = R")
            other = g[g["r"] != g["R"]]
            for row in other.itertuples():
                ax.plot([row.R], [row.slope], "x", ms=9, label=f"p slope, (r, R) = ({row.r:g}, {row.R:g})")
            ax.axhline(target, ls="--", color="red", lw=1, label=f"{tname} slope {target:g}")
            if kind == "relaxed":
                ax.axhline(0.2, ls="--", color="0.5", lw=1, label="p^mm slope 0.2")
            ax.set_xscale("log")
            ax.set_xlabel("radius R of p")
            ax.set_ylabel("slope p[1] / p[0] of the path")
            ax.set_title(f"joint (v, p) path, E3 {kind} data")
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3, which="both")
        return save_figure(fig, outdir, "mm_regularization_path")

    def explain(self, config, table):
        return ("The p-only and local paths minimize the logistic loss exactly on the circle ||p|| = R inside the 2-D key "
                "span (grid scan plus bounded 1-D refinement in the angle). The loss is split exactly into the loss of "
                "the hard selection plus an excess computed with log1p/expm1 from the saturation-exact "
                "delta = sum_t s_t (gamma_a - gamma_t), so the p-paths stay meaningful far beyond R * margin ~ 35 "
                "(the local path is run to R = 80). The joint path minimizes over both "
                "angles (grid plus Nelder-Mead). The local path needs a *narrow* cone: on the E1 local data the "
                "non-support token 0 has a higher score (1) than the selected token 1 (0.9), so once it overtakes the "
                "support token 2 as the strongest competitor (5.7 deg above the local ray) leaking attention onto it "
                "lowers the loss; a cone wider than that is minimized at its boundary (the wide-cone rows), a 5 deg "
                "cone converges to the local p^mm. Pitfall 8: evaluated naively (softplus of u) the loss differences vanish once R * margin exceeds ~35 "
                "and the numerical optimum becomes meaningless; the joint path (two angles, log of the naive loss) "
                "therefore stops at r, R = 40. "
                "The joint path needs r to grow at least about as fast as R: with R = 2r the relaxed slope sits between "
                "p^relax and p^mm. The engine's attnsvm.train.regularization_path has no prompt parameterization, so "
                "the p-paths use the exact angle solver here and the engine's W-path is run on the equivalent "
                "cross-attention problem (fixed query z), whose Frobenius W-SVM is rank one (q^mm z^T).")
