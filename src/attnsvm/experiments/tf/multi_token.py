"""E5 of Transformers as SVMs: a ReLU head selects several tokens; GD follows W_fin + R W_svm."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import PositiveFloat, PositiveInt

from attnsvm.errors import ValidationError
from attnsvm.generators import relu_head_instance
from attnsvm.metrics import one_minus_correlation
from attnsvm.training.models import ReLUHead
from attnsvm.svm import solve_svm, svm_equivalence
from attnsvm.svm.language import random_direction_control
from attnsvm.training.train import train
from attnsvm.experiments.base import Experiment, ExperimentConfig, Task, register
from attnsvm.experiments.checks import check, correlation_range_check, integrity_check, mean_check, record_spread
from attnsvm.experiments.common import config_deviations, seed_chunks, svm_record
from attnsvm.experiments.lm.common import decided_by_control, ordering_check
from attnsvm.experiments.planning import lookup
from attnsvm.plotting import label_axes, save_figure, subplots
from attnsvm.experiments.tf.common import approx_mean_check, certificate_integrity, item, majority_check, section

#: 7.2 item 6: upper bounds on the mean final 1-corr(W, W_fin + R W_svm) per d
EQ_CAP = {4: 0.07, 6: 0.02, 10: 0.01}
#: 5 E5 table (stored research figure, 500 runs per d): final mean 1-corr(W, 1-token SVM)
ONE_TOKEN_FIGURE = {4: 0.16, 6: 0.15, 8: 0.14, 10: 0.12}
#: the W_fin + R W_svm fits that only the random-direction control makes informative (check names, per d and pooled)
CONTROL_SOURCE = item(6, "; control of the W_fin + R W_svm comparator (W_fin is W's own projection)")
#: the control's stated alternative: W_fin + R W_svm closer to W than the control by 0.1 in mean 1-corr
CONTROL_EFFECT = 0.1
#: reading precision of a value read off a log-scale figure: +-0.1 decade
FIGURE_FACTOR = 10 ** 0.1


class Config(ExperimentConfig):
    n: PositiveInt = 3
    T: PositiveInt = 4
    ds: list[PositiveInt] = [4, 6, 8, 10]
    accepted: PositiveInt = 500
    #: seeds tried per d (acceptance falls with d: about 19%, 9%, 4.4% and 1.6% at d = 4, 6, 8, 10)
    attempts: dict[PositiveInt, PositiveInt] = {4: 3200, 6: 6400, 8: 13600, 10: 36000}
    default_attempts: PositiveInt = 4000
    chunk: PositiveInt = 2000
    steps: PositiveInt = 2000
    lr: PositiveFloat = 0.1
    record_every: PositiveInt = 100
    select_threshold: PositiveFloat = 1e-3
    mask_threshold: PositiveFloat = 1e-6
    #: random directions of the control of the W_fin + R W_svm fit (mean over them per run)
    n_random: PositiveInt = 16


def _reject_reason(problem, s, config) -> str | None:
    if np.all(problem.Y > 0):
        return "all labels +1"
    if np.any((s > config.mask_threshold) & (s <= config.select_threshold)):
        return "ambiguous selection"
    if not np.any(s <= config.mask_threshold):
        return "finite solution (no masked token)"
    return None


@register
class MultiToken(Experiment):
    name = "tf-multi-token"
    order = 7
    title = "E5: multi-token selection with a ReLU head; W(k) vs W_fin + R W_svm, the Gen-SVM and the 1-token SVM"
    paper = "Transformers as Support Vector Machines, multi_token_converge (ReLU head, 500 accepted runs per d)"
    Config = Config
    quick = {"ds": [4, 6, 10], "accepted": 50, "attempts": {4: 400, 6: 500, 10: 3700}, "chunk": 1850}

    def tasks(self, config):
        return [Task(f"d{d:02d}-seeds-{c[0]:05d}", len(c), {"d": d, "seeds": c})
                for d in config.ds
                for c in seed_chunks(range(1, config.attempts.get(d, config.default_attempts) + 1), config.chunk)]

    def run_task(self, config, task):
        d, seeds = task.params["d"], task.params["seeds"]
        pairs = [relu_head_instance(config.n, config.T, d, s) for s in seeds]
        rows = []
        # the research code skips a seed whose labels are all +1 before training it
        skip = [bool(np.all(p.Y > 0)) for p, _ in pairs]
        rows += [{"d": d, "seed": s, "status": "all labels +1", "step": -1} for s, k in zip(seeds, skip) if k]
        keep = [k for k, sk in enumerate(skip) if not sk]
        if not keep:
            return pd.DataFrame(rows)
        problems = [pairs[k][0] for k in keep]
        seeds = [seeds[k] for k in keep]
        V = np.stack([pairs[k][1] for k in keep])
        res = train(problems, param="W", head=ReLUHead(V), seed=seeds, steps=config.steps, lr=config.lr,
                    record_every=config.record_every)
        for r, (problem, seed) in enumerate(zip(problems, seeds)):
            s = res.softmax[r, -1]
            reason = _reject_reason(problem, s, config)
            selected = s > config.select_threshold
            if reason is None:
                try:
                    eq = svm_equivalence(problem, selected, s, res.W[r, -1], norm="fro")
                    one = solve_svm(problem, select=s.argmax(axis=-1), norm="fro")
                    if not one.feasible:
                        raise ValidationError("1-token SVM infeasible")
                except ValidationError:
                    reason = "SVM infeasible"
            if reason is not None:
                rows.append({"d": d, "seed": seed, "status": reason, "step": -1})
                continue
            traj = res.W[r]
            nan = np.full(len(res.steps), np.nan)
            ok_svm, ok_eq, ok_one = eq.svm.certified, eq.svm.certified and eq.fin.certified, one.certified
            e_eq = one_minus_correlation(traj, eq.W_eq) if ok_eq else nan
            e_svm = one_minus_correlation(traj, eq.W_svm) if ok_svm else nan
            e_one = one_minus_correlation(traj, one.W) if ok_one else nan
            # the control (final iterate only): W_fin + R' W_rand with random directions of W_svm's subspace
            e_rand, dim = nan.copy(), 0
            if ok_eq:
                W_rand, _, dim = random_direction_control(traj[-1], eq.svm, eq.fin, seed=seed,
                                                          n_random=config.n_random)
                e_rand[-1] = float(one_minus_correlation(W_rand, traj[-1]).mean())
            masked = float(s[~selected].max())
            cert = {**svm_record(eq.svm, "gen"), **svm_record(eq.fin, "fin"), **svm_record(one, "one")}
            for c, step in enumerate(res.steps):
                rows.append({"d": d, "seed": seed, "status": "accepted", "step": int(step), "err_eq": e_eq[c],
                             "err_svm": e_svm[c], "err_1token": e_one[c],
                             "err_rand_eq": e_rand[c], "gen_dim": dim, "max_masked": masked,
                             "mean_selected": float(selected.sum(axis=1).mean()), **cert})
        return pd.DataFrame(rows)

    def _accepted(self, config, table):
        acc = table[table.status == "accepted"]
        keep = []
        for d, sub in acc.groupby("d"):
            seeds = np.sort(sub.seed.unique())[: config.accepted]
            keep.append(sub[sub.seed.isin(seeds)])
        return pd.concat(keep) if keep else acc

    @staticmethod
    def _control_check(prefix: str, final: pd.DataFrame):
        """The random-direction control of the W_fin + R W_svm fit on the final rows ``final`` (one per run).

        Per run: 1-corr(W, W_fin + R' W_rand) (mean over the random directions) minus 1-corr(W, W_fin + R W_svm);
        the fit beats its control when the mean paired difference is significantly positive. Runs whose
        W_svm subspace beyond the tie rows is one-dimensional are left out (there the control is W_svm itself).
        """
        rand = final["err_rand_eq"] if "err_rand_eq" in final else pd.Series(np.nan, index=final.index)
        dim = final["gen_dim"] if "gen_dim" in final else pd.Series(0, index=final.index)
        use = final["err_eq"].notna() & (dim >= 2)
        diffs = (rand - final["err_eq"])[use].to_numpy(np.float64)
        name = (f"{prefix}W_fin + R W_svm fits GD's final iterate better than random directions of its subspace "
                "fitted the same way (control)")
        record_spread(name, diffs, ">", CONTROL_EFFECT)
        entry = lookup(name)
        plan = {} if entry is None else dict(
            sigma=entry["sigma"], effect=CONTROL_EFFECT,
            sigma_source=f"planning sigma measured on the {entry['measured']} ({entry['runs']} runs)")
        return ordering_check(
            name, diffs, 0.0,
            f"{int(use.sum())} of {len(final)} runs with a control ({int((final['err_eq'].notna() & (dim < 2)).sum())} "
            f"with a one-dimensional subspace left out); mean 1-corr {final['err_eq'][use].mean():.4g} vs "
            f"{rand[use].mean():.4g}", source=CONTROL_SOURCE,
            reason="comparator: W_fin + R' W_rand with random directions (Gaussian combinations of the Gen-SVM's "
                   "margin rows projected off the tie rows, mean over 16 per run); W_fin is W's own projection onto "
                   "the tie rows, so only the direction of the remainder tests the SVM; the W_fin + R W_svm fit "
                   "checks pass only when this control passes; margin 0", **plan)

    def checks(self, config, table):
        acc = self._accepted(config, table)
        final = acc[acc.step == acc.step.max()] if len(acc) else acc
        src = item(6)
        out = []
        for d in config.ds:
            f = final[final.d == d]
            out.append(integrity_check(f"d={d}: accepted runs", float(f.seed.nunique()), ">=", config.accepted,
                                       f"seeds tried: {int((table.d == d).groupby(table.seed).any().sum())}",
                                       reason="the spec's run count per d (accepted runs); fewer means the seed "
                                              "budget `attempts` is too small"))
            cols = ["err_eq", "err_svm", "err_1token"]
            m = f[cols].mean() if len(f) else pd.Series(np.nan, cols)
            control = self._control_check(f"d={d}: ", f)
            out.append(control)
            out.append(decided_by_control(check(
                f"d={d}: mean 1-corr to W_fin + R W_svm below that to the Gen-SVM direction",
                m.err_svm - m.err_eq, ">", 0, f"{m.err_eq:.4g} vs {m.err_svm:.4g}", source=src,
                reason="spec: ordering svm-eq < Gen-SVM direction < 1token of the mean 1-corr at k = 2000"), control))
            out.append(check(f"d={d}: mean 1-corr to the Gen-SVM direction below that to the 1-token SVM",
                             m.err_1token - m.err_svm, ">", 0, f"{m.err_svm:.4g} vs {m.err_1token:.4g}", source=src,
                             reason="spec: ordering svm-eq < Gen-SVM direction < 1token of the mean 1-corr at k = 2000"))
            if d in EQ_CAP:
                out.append(decided_by_control(mean_check(
                    f"d={d}: mean 1-corr(W, W_fin + R W_svm) (<= {EQ_CAP[d]:g})", f.err_eq, "<=", EQ_CAP[d],
                    f"{len(f)} runs", source=src,
                    reason=f"spec: about <= {EQ_CAP[d]:g} at d = {d} (measured 0.052 / 0.013 at d = 4 / "
                           "6 with 50 runs; figure 0.0055 at d = 10)"), control))
            out.append(mean_check(f"d={d}: mean 1-corr(W, 1-token SVM) (>= 0.1)", f.err_1token, ">=", 0.1,
                                  f"{len(f)} runs", source=src, reason="spec: 1token stays >= 0.1"))
            if d in ONE_TOKEN_FIGURE:
                v = ONE_TOKEN_FIGURE[d]
                out.append(approx_mean_check(f"d={d}: mean 1-corr(W, 1-token SVM) (about {v:g}, research figure)",
                                             f.err_1token, v / FIGURE_FACTOR, v * FIGURE_FACTOR, f"{len(f)} runs",
                                             source=section("5 E5 table (stored figure, 500 runs per d)"),
                                             reason=f"value {v:g} read off a log-scale figure: reading precision "
                                                    "+-0.1 decade (factor 1.26)"))
        pooled = self._control_check("", final)
        out.append(pooled)
        deep = final[final.max_masked < 1e-12] if len(final) else final
        out.append(decided_by_control(check(
            "median 1-corr(W, W_fin + R W_svm), runs with max masked prob < 1e-12",
            float(deep.err_eq.median()) if len(deep) else np.nan, "<", 1e-2, f"{len(deep)} of {len(final)} runs",
            source=src, reason="spec: about 1e-3, assert < 1e-2"), pooled))
        ok = final.dropna(subset=["err_eq", "err_svm", "err_1token"]) if len(final) else final
        out.append(decided_by_control(majority_check(
            "runs in which W_fin + R W_svm fits better than the Gen-SVM direction",
            int((ok.err_eq < ok.err_svm).sum()), len(ok), "pooled over d", source=src,
            reason="run-level form of the ordering svm-eq < Gen-SVM direction"), pooled))
        out.append(majority_check("runs in which the Gen-SVM direction fits better than the 1-token SVM",
                                  int((ok.err_svm < ok.err_1token).sum()), len(ok), "pooled over d", source=src,
                                  reason="run-level form of the ordering Gen-SVM direction < 1token"))
        out.append(certificate_integrity(final, ("gen", "fin", "one"), "Gen-SVM, W_fin and 1-token SVM of every "
                                                                         "accepted run"))
        out += [correlation_range_check(f"{what} (1 - {col})", 1.0 - table[col].to_numpy(np.float64))
                for col, what in (("err_eq", "corr(W, W_fin + R W_svm)"), ("err_svm", "corr(W, Gen-SVM direction)"),
                                  ("err_1token", "corr(W, 1-token SVM)"), ("err_rand_eq", "corr(W, W_fin + R' W_rand)"))
                if col in table.columns]
        return out

    def deviations(self, config):
        out = [{"spec": "init from the notebook's unseeded global torch stream",
                "here": "the same distribution (U(-1/sqrt(d), 1/sqrt(d))) from torch.Generator().manual_seed(seed)",
                "reason": "reproducible runs"},
               {"spec": "ITN = 2001 updates, W recorded after updates 1, 101, ..., 2001",
                "here": f"{config.steps} updates, W recorded after 0, {config.record_every}, ..., {config.steps}",
                "reason": "one update of difference at the last checkpoint; the spec states its targets at k = 2000"},
               {"spec": "seeds tried until 500 runs are accepted",
                "here": "a fixed seed budget per d (`attempts`), the first `accepted` accepted seeds are used",
                "reason": "independent tasks; the budget is checked (integrity check 'accepted runs')"},
               {"spec": "SVMs by cvxpy", "here": "attnsvm's exact, certified solvers",
                "reason": "spec 8: accurate solutions"}]
        out += config_deviations(config, {
            "accepted": ("500 accepted runs per d", "wider Student-t tolerances"),
            "ds": ("d in {4, 6, 8, 10}", "targets at the missing d are not checked")})
        return out

    def plot(self, config, table, outdir):
        acc = self._accepted(config, table)
        fig, axes = subplots(2, len(config.ds), width=3.6, height=3.2)
        for k, d in enumerate(config.ds):
            sub = acc[acc.d == d]
            if sub.empty:
                continue
            g = sub.groupby("step")
            ax = axes[0, k]
            ax.semilogy(g.err_eq.mean().index, g.err_eq.mean(), "-", label="W_fin + R W_svm")
            ax.semilogy(g.err_svm.mean().index, g.err_svm.mean(), ":", label="Gen-SVM direction")
            ax.semilogy(g.err_1token.mean().index, g.err_1token.mean(), "--", label="1-token SVM")
            label_axes(ax, "iteration", "mean 1 - correlation", f"d = {d}", legend=6)
            fin = sub[sub.step == sub.step.max()]
            ax = axes[1, k]
            ax.loglog(np.maximum(fin.max_masked, 1e-300), np.maximum(fin.err_eq, 1e-16), ".", ms=3)
            ax.set_xlabel("max masked softmax probability")
            ax.set_ylabel("final 1 - corr(W, W_fin + R W_svm)")
        return save_figure(fig, outdir, "multi_token")

    def explain(self, config, table):
        lines = ["Runs are rejected (and the next seed tried) as in the research code: all labels +1; an ambiguous "
                 "probability in (mask_threshold, select_threshold]; no masked token (finite solution); or an "
                 "infeasible SVM. Rejection sampling changes the effective data distribution.", "",
                 "| d | seeds tried | accepted (used) | all labels +1 | ambiguous | finite | SVM infeasible |",
                 "|---|---|---|---|---|---|---|"]
        first = table.drop_duplicates(["d", "seed"])
        for d, sub in first.groupby("d"):
            c = sub.status.value_counts()
            used = min(int(c.get("accepted", 0)), config.accepted)
            lines.append(f"| {d} | {len(sub)} | {c.get('accepted', 0)} ({used}) | {c.get('all labels +1', 0)} | "
                         f"{c.get('ambiguous selection', 0)} | {c.get('finite solution (no masked token)', 0)} | "
                         f"{c.get('SVM infeasible', 0)} |")
        acc = self._accepted(config, table)
        fin = acc[acc.step == acc.step.max()] if len(acc) and "err_rand_eq" in acc else acc.iloc[:0]
        if len(fin):
            use = fin.err_eq.notna() & (fin.gen_dim >= 2)
            lines += ["", "W_fin is W's own projection onto the tie rows, so the fit W_fin + R W_svm holds partly by "
                      "construction; its control fits random directions of W_svm's subspace the same way "
                      f"({config.n_random} per run). Measured mean final 1-corr, W_fin + R W_svm vs the control, on "
                      f"{int(use.sum())} runs with a control: "
                      + ", ".join(f"d = {d}: {g.err_eq.mean():.4g} vs {g.err_rand_eq.mean():.4g}"
                                  for d, g in fin[use].groupby("d")) + "."]
        return "\n".join(lines)
