"""E4 of Max-Margin Token Selection (``mm-loss-functions``): correlation, logistic and exponential losses over C."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from pydantic import Field, PositiveFloat, PositiveInt

from attnsvm.generators import mm_loss
from attnsvm.metrics import correlation
from attnsvm.experiments.base import Experiment, ExperimentConfig, Task, check, register
from attnsvm.experiments.checks import correlation_partners
from attnsvm.plotting import label_axes, save_figure, subplots
from attnsvm.experiments.mm.common import (
    PAPER_MM, SUPPORT_REASON, certificate_check, certified_solution, config_deviations, constraint_rows, dense_steps,
    engine_train, exact_check, fact, locally_optimal_from_rows, num, p_svm, pick, rounding_check, spec_src,
    svm_record, uncertified,
)


#: the cosine columns, reported together as integrity partners
#: (:func:`~attnsvm.experiments.checks.correlation_partners`)
PARTNERS = {
    "cos": "cos(p, p^mm)",
}


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
    order = 4
    title = "E4: correlation, logistic and exponential losses over the C grid (same limit, different paths)"
    paper = PAPER_MM
    Config = LossConfig
    quick = {"Cs": [1.0, 2.0, 3.0, 5.0, 10.0, 100.0]}

    def tasks(self, config):
        return ([Task(loss, len(config.Cs), {"loss": loss}) for loss in config.losses]
                + [Task("svm", len(config.Cs), {"loss": ""})])

    def run_task(self, config, task):
        loss = task.params["loss"]
        rows = []
        if not loss:
            for C in config.Cs:
                prob = mm_loss(C)
                gamma = prob.scores()
                opt = prob.optimal_tokens().index
                # every selection alpha in T^n (4 here): its p-SVM, certificate and margin constraints
                for alpha in itertools.product(range(prob.T), repeat=prob.n):
                    sol = p_svm(prob, alpha)
                    p = certified_solution(sol)
                    a0, a1 = (int(a) for a in alpha)
                    rows.append(dict(record="svm", C=float(C), a0=a0, a1=a1, p0=p[0], p1=p[1], p2=p[2],
                                     optimal=float(tuple(alpha) == tuple(int(a) for a in opt)), **svm_record(sol)))
                    if sol.feasible:
                        rows += constraint_rows(sol, gamma, alpha, C=float(C), a0=a0, a1=a1)
            return pd.DataFrame(rows)
        cps = dense_steps(config.steps, config.plot_steps, 10, extra=(199, 999))
        probs = [mm_loss(C) for C in config.Cs]
        # one batched run per C (independent runs: the engine batches them, each with its own data)
        res = engine_train(probs, np.zeros((len(probs), 3)), steps=config.steps, lr=config.lr, optimizer="ngd",
                           eps=config.ngd_eps, checkpoints=cps, loss=loss)
        for k, (C, prob) in enumerate(zip(config.Cs, probs)):
            pmm = certified_solution(p_svm(prob, prob.optimal_tokens().index))
            P = res.p[k]
            cs = correlation(P, pmm)
            for c, st in enumerate(res.steps):
                rows.append(dict(record="train", loss=loss, C=float(C), step=int(st), p0=P[c, 0], p1=P[c, 1],
                                 p2=P[c, 2], norm=float(np.linalg.norm(P[c])), cos=float(cs[c])))
        return pd.DataFrame(rows)

    def _notebook_protocol(self, config) -> bool:
        return config.steps >= 999 and config.lr == 0.1 and config.ngd_eps == 1e-9

    def checks(self, config, table):
        out = []
        rec = table["record"] if "record" in table else pd.Series([], dtype=object)
        svm = table[rec == "svm"]
        cons = table[rec == "constraint"]
        out.append(certificate_check(svm, 4 * len(config.Cs), "p-SVM of each of the 4 selections for every C"))
        pairs = []
        for C in config.Cs:
            r = pick(svm, C=float(C), a0=1, a1=1)
            pairs += [(num(r, "p0"), 1.0), (num(r, "p1"), 0.0), (num(r, "p2"), 0.0)]
        out.append(exact_check("fact 11: p^mm = (1, 0) for every C (the optimal selection alpha = (1, 1))", pairs,
                               source=fact(11)))
        miss, found = 0.0, []
        for C in config.Cs:
            for a0, a1 in itertools.product(range(2), repeat=2):
                srow = pick(svm, C=float(C), a0=a0, a1=a1)
                c = cons[(cons["C"] == float(C)) & (cons["a0"] == a0) & (cons["a1"] == a1)]
                lo = locally_optimal_from_rows(c) if srow is not None and not uncertified(
                    svm[(svm["C"] == float(C)) & (svm["a0"] == a0) & (svm["a1"] == a1)]).any() else float("nan")
                miss += float("nan") if lo != lo else float((lo == 1.0) != ((a0, a1) == (1, 1)))
                if lo == 1.0:
                    found.append(f"C={C:g}: ({a0}, {a1})")
        out.append(check("fact 11: alpha = (1, 1) is the only locally-optimal selection, for every C (selections that "
                         "differ)", miss, "==", 0, "; ".join(found), source=fact(11),
                         reason="exact set over the 4 selections per C; locally optimal per spec 3.6 [REC] from the stored "
                                "margins and scores; " + SUPPORT_REASON))
        tr = table[rec == "train"]

        def at(loss, C, step):
            return pick(tr, loss=loss, C=float(C), step=step)

        if self._notebook_protocol(config):
            spec = {("correlation", 2.0): "0.35", ("correlation", 10.0): "1.15", ("correlation", 100.0): "2.30",
                    ("logistic", 2.0): "-0.06", ("logistic", 10.0): "-3.19"}
            need = [k for k in spec if k[0] in config.losses and k[1] in config.Cs]
            out.append(rounding_check("[RUN] E4 y-offsets at iteration 200: -u +0.35 / +1.15 / +2.30 (C = 2 / 10 / 100), "
                                      "logistic -0.06 / -3.19 (C = 2 / 10)",
                                      [(num(at(k[0], k[1], 199), "p1"), spec[k]) for k in need],
                                      source=spec_src("8 E4 outcome [RUN]")))
            if "logistic" in config.losses and 100.0 in config.Cs:
                r = at("logistic", 100.0, 199)
                out.append(check("[RUN] E4 logistic, C = 100: the path runs exactly along (1, -1) at iteration 200 "
                                 "(|p[1] + p[0]|)", abs(num(r, "p1") + num(r, "p0")), "<=", 0.005,
                                 f"p = ({num(r, 'p0'):.6f}, {num(r, 'p1'):.6f})", source=spec_src("8 E4 outcome [RUN]"),
                                 reason="the table's precision (offsets to 2 decimals: half a unit 0.005); input 1's "
                                        "pull is ~e^-50 relative"))
            fin = {("correlation", 100.0): ("0.9965", "0.084"), ("logistic", 10.0): ("0.9882", "-0.153")}
            pairs = []
            for k, (dx, dy) in fin.items():
                if k[0] in config.losses and k[1] in config.Cs:
                    r = at(k[0], k[1], 999)
                    nrm = np.hypot(num(r, "p0"), num(r, "p1"))
                    pairs += [(num(r, "p0") / nrm, dx), (num(r, "p1") / nrm, dy)]
            out.append(rounding_check("[RUN] E4 directions at iteration 999: -u, C = 100: (0.9965, 0.084); logistic, "
                                      "C = 10: (0.9882, -0.153)", pairs, source=spec_src("8 E4 outcome [RUN]")))
        mids = [C for C in config.Cs if 2 <= C <= 10]
        for loss, sign, word, src in (
                ("correlation", 1, "up toward (1, 1)", "6 Role of the loss; 8 E4 outcome"),
                ("logistic", -1, "down toward (1, -1)", "6 Role of the loss; 8 E4 outcome"),
                ("exponential", -1, "down toward (1, -1), like logistic", "8 E4 outcome [RUN] (exponential ~ logistic)")):
            if loss not in config.losses:
                continue
            vals = np.array([sign * num(at(loss, C, 199), "p1") for C in sorted(mids)])
            value = float(min(vals.min(), np.diff(vals).min())) if len(vals) >= 2 else float("nan")
            out.append(check(f"E4 {loss}: the path bends {word} for every C in [2, 10], more for larger C (min over C "
                             "of sign * y-offset at iteration 200 and of its increments in C)", value, ">", 0.0,
                             ", ".join(f"C={C:g}: {v:+.4f}" for C, v in zip(sorted(mids), vals)), source=spec_src(src),
                             reason="the sign of the transient offset and its growth with the score C (the spec gives "
                                    "the direction; its table grows with C)", kind="qualitative"))
        last = int(config.steps)
        bad, n_runs = 0.0, 0
        for loss in config.losses:
            for C in config.Cs:
                c0, c1 = num(at(loss, C, 199), "cos"), num(at(loss, C, last), "cos")
                n_runs += 1
                if c0 != c0 or c1 != c1:
                    bad = float("nan")
                elif c1 < c0 or (c0 < 1.0 - 1e-12 and not c1 > c0):
                    bad += 1.0
        out.append(check("E4: every run heads toward p^mm = (1, 0): cos(p, p^mm) increases from iteration 200 to the last "
                         "step (runs that do not)", bad, "==", 0, f"{n_runs} runs, last step {last}",
                         source=spec_src("8 E4 outcome [RUN]"),
                         reason="strict increase, except runs already at p^mm (1 - cos <= 1e-12: C = 1, symmetric)",
                         kind="qualitative"))
        out += correlation_partners(table, PARTNERS)
        return out

    def deviations(self, config):
        out = [{"spec": "notebook runs the -u and logistic losses (the exp branch is never run)",
                "here": "also the exponential loss", "reason": "spec 8 E4: 'Exponential loss behaves like logistic [RUN]'"},
               {"spec": "notebook float32 autograd", "here": "float64, the engine's pairwise gradient",
                "reason": "spec 7 item 9"}]
        out += config_deviations(config, {"Cs": ("C in {1, ..., 10, 100}", "fewer C values on the grid")})
        if not self._notebook_protocol(config):
            out.append({"spec": "notebook protocol (eta 0.1, epsilon 1e-9, 1000 steps)", "here": "a different protocol",
                        "reason": "the [RUN] figures are not checked"})
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
            label_axes(ax, "p[0]", "p[1]", f"{loss} loss: NGD paths, first {config.plot_steps} iterations", legend=8,
                       grid="major")
        return save_figure(fig, outdir, "mm_loss_functions")

    def explain(self, config, table):
        tr = table[table["record"] == "train"]
        last = int(config.steps)
        lines = ["The theory gives every loss the same limit direction p^mm = (1, 0); the loss changes the transient path. "
                 "The correlation loss has a constant derivative, so the high-score input 1 dominates and the path bends "
                 "toward its token (1, 1); logistic and exponential losses down-weight inputs that are already fitted "
                 "and bend toward input 2's token (1, -1). Measured y-offsets at iteration 200:"]
        for loss in config.losses:
            vals = [(C, num(pick(tr, loss=loss, C=float(C), step=199), "p1")) for C in config.Cs]
            lines.append(f"* {loss}: " + ", ".join(f"C={C:g}: {v:+.3f}" for C, v in vals))
        r0, r1 = pick(tr, loss="logistic", C=100.0, step=199), pick(tr, loss="logistic", C=100.0, step=last)
        if r0 is not None and r1 is not None:
            lines.append(
                f"Logistic, C = 100: at iteration 200 |p[1] + p[0]| = {abs(num(r0, 'p1') + num(r0, 'p0')):.1e}, i.e. the "
                "path runs along (1, -1): along that line input 1's two tokens get equal logits, its loss derivative is "
                f"~e^-50, and input 2 drives p alone. cos(p, p^mm) moves from {num(r0, 'cos'):.12f} to "
                f"{num(r1, 'cos'):.12f} by step {last}: toward p^mm, but invisibly slowly. The exponential loss, listed "
                "in the notebook's legend but never run there, is run here.")
        return "\n\n".join(lines)
