"""Plausible-bug mutations of the experiments' results tables: what the checks must catch.

Each :class:`Mutation` rewrites a quick-preset results table of one experiment the way a plausible bug in the
measuring code would have written it (a correlation left as a raw inner product, a margin not divided by the
norm of the iterate, a sign flip, an off-by-one checkpoint, ...). ``tests/test_mutations.py`` re-judges every
mutated table with the experiment's own :meth:`~attnsvm.experiments.base.Experiment.checks` and requires each
check named in ``caught_by`` to **fail** (verdict ``"fail"``, not inconclusive), on quick tables stored under
``tests/data/quick``. :func:`mutations_section` lists them on the claims page
(:func:`attnsvm.experiments.claims.claims_page`).

A mutation only rewrites columns; it never reads a check, and ``caught_by`` names checks by the start of their
name (the names carry measured sizes only after that start).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

__all__ = ["Mutation", "MUTATIONS", "mutations_section"]

#: the factor of a raw inner product over a correlation: ||A|| ||B||. Most stored tables keep no norms of the SVMs, so
#: their mutations use 5, the audit's factor of issue 40 (the trained iterates' norms at the quick preset are larger);
#: real-minilm-heads stores its norms and its mutation uses them (:func:`_raw_inner_product_heads`)
RAW_FACTOR = 5.0


@dataclass(frozen=True)
class Mutation:
    """A plausible bug, as a rewrite of an experiment's results table.

    ``name``: short id; ``experiment``: the experiment whose quick table it rewrites; ``bug``: the bug in words;
    ``apply(table) -> table``: the rewrite (a new DataFrame; the input is left alone); ``caught_by``: the starts of
    the names of the checks that must fail on the rewritten table."""

    name: str
    experiment: str
    bug: str
    apply: Callable[[pd.DataFrame], pd.DataFrame]
    caught_by: tuple[str, ...]


def _scale(cols, factor=RAW_FACTOR):
    def f(t):
        t = t.copy()
        for c in cols:
            if c in t.columns:
                t[c] = t[c] * factor
        return t
    return f


def _raw_err(t):
    """tf-multi-token stores 1 - corr: a raw inner product there is 1 - RAW_FACTOR corr."""
    t = t.copy()
    for c in ("err_eq", "err_svm", "err_1token", "err_rand_eq"):
        t[c] = 1.0 - RAW_FACTOR * (1.0 - t[c])
    return t


def _run_keys(t) -> list[str]:
    """The columns that name one run of lm-margins: its language (when the table has one) and its run id."""
    return [k for k in ("language", "run") if k in t.columns]


def _unnormalized_margins(t):
    """Every margin of lm-margins multiplied by ||X(k)||_F of its run and step (the division left out)."""
    t = t.copy()
    s = t[t["record"] == "summary"]
    keys = _run_keys(t) + ["step"]
    norm = s.set_index(keys)["norm"]
    key = pd.MultiIndex.from_frame(t[keys].astype({"run": int, "step": int}))
    factor = norm.reindex(key).to_numpy(np.float64)
    for c in ("margin", "median_margin", "min_margin"):
        t[c] = t[c] * factor
    return t


def _negate(cols):
    def f(t):
        t = t.copy()
        for c in cols:
            t[c] = -t[c]
        return t
    return f


def _checkpoint_ahead(t):
    """lm-margins' summary rows: the row of each checkpoint carries the measurements of the next one (the last keeps
    its own): the measurement taken after the step the row names."""
    t = t.copy()
    s = t[t["record"] == "summary"].sort_values(_run_keys(t) + ["step"])
    measured = [c for c in s.columns if c not in ("record", "language", "run", "step", "task")]
    nxt = s.groupby(_run_keys(t))[measured].shift(-1)
    t.loc[nxt.index, measured] = nxt.fillna(s[measured]).to_numpy()
    return t


def _shifted(col):
    """Each run carries the label of the next larger value of ``col`` (the largest value's runs the smallest's)."""
    def f(t):
        t = t.copy()
        vals = sorted(t[col].unique())
        t[col] = t[col].map(dict(zip(vals, vals[1:] + vals[:1])))
        return t
    return f


#: tf-convergence-types: each run labelled with the next larger d
_d_shifted = _shifted("d")


def _learns_nothing(t):
    """lm-cosine and lm-near-ties: every checkpoint of a run holds its X(0) measurements (a model whose parameters
    never change)."""
    t = t.copy()
    tr = t[t["step"].notna()] if "step" in t.columns else t.iloc[0:0]
    # record: the main and the cycle runs (lm-cosine); delta: the language of lm-near-ties
    key = [k for k in ("record", "m", "n", "d", "delta", "run") if k in t.columns]
    first = tr.sort_values("step").groupby(key, dropna=False).transform("first")
    for c in ("cos", "cos_hard", "norm", "loss"):
        if c in t.columns:
            t.loc[tr.index, c] = first[c].to_numpy()
    return t


def _margins_learn_nothing(t):
    """lm-margins: every checkpoint of a run holds its X(0) measurements (a model whose parameters never change): the
    summary rows' measurements and the histogram rows' margins."""
    t = t.copy()
    s = t[t["record"] == "summary"].sort_values(_run_keys(t) + ["step"])
    measured = [c for c in s.columns if c not in ("record", "language", "run", "step", "task")]
    first = s.groupby(_run_keys(t))[measured].transform("first")
    t.loc[first.index, measured] = first.to_numpy()
    mg = t[t["record"] == "margin"]
    if len(mg):
        keys = _run_keys(t) + [k for k in ("seq", "query", "token") if k in t.columns]
        start = mg.sort_values("step").groupby(keys)["margin"].transform("first")
        t.loc[start.index, "margin"] = start.to_numpy()
    return t


def _doubled_step(t):
    """lm-stability: the step recorded is twice the step GD took."""
    t = t.copy()
    for c in ("eta", "eta_max", "eta_unstable"):
        if c in t.columns:
            t[c] = t[c] * 2.0
    return t


def _shuffled_runs_at_last_step(t):
    """lm-margins: the summary rows of the last checkpoint get their run ids in another order (runs collected
    out of order), so the paired comparisons with earlier checkpoints pair different runs."""
    t = t.copy()
    s = t[t["record"] == "summary"]
    last = s[s["step"] == s["step"].max()]
    runs = np.sort(last["run"].unique())
    perm = dict(zip(runs, np.roll(runs, 1)))
    t.loc[last.index, "run"] = last["run"].map(perm).to_numpy()
    return t


def _rank_plus_one(t):
    """tf-svm-rank: one added to both ranks on every fifth instance (seed divisible by 5)."""
    t = t.copy()
    sel = (t["seed"] % 5 == 0) & t["rank_fro"].notna()
    t.loc[sel, "rank_fro"] += 1.0
    t.loc[sel, "rank_nuc"] += 1.0
    return t


def _path_stuck(t):
    """tf-regpath-*, mm-regpath-nonlinear: every radius holds the smallest radius's correlations (every ``corr_*``
    column; a path that never leaves its start)."""
    t = t.copy()
    first = t[t["R"] == t["R"].min()].set_index("seed")
    for c in [c for c in t.columns if c.startswith("corr_")]:
        t[c] = t["seed"].map(first[c]).to_numpy()
    return t


def _radius_not_applied(t):
    """tf-regpath-*: the largest radius's points 1.5 times outside the ball (the projection skipped)."""
    t = t.copy()
    t.loc[t["R"] == t["R"].max(), "budget"] *= 1.5
    return t


def _swap(a, b):
    def f(t):
        t = t.copy()
        t[[a, b]] = t[[b, a]].to_numpy()
        return t
    return f


_RANGE = "lies in [-1, 1] in every row"
_PARTS = "equals <A, B> / (||A|| ||B||) of its stored parts in every row"


def _raw_inner_product_heads(t):
    """real-minilm-heads with its correlations left as raw inner products, at the model's own factor: ``corr`` times
    ``norm_head norm_svm`` and ``corr_restricted`` times ``norm_head_restricted norm_svm`` (the stored norms: what the
    bug writes, exactly); the random selections' and the null heads' columns, whose SVMs' norms the table does not
    store, times the same head's factor (``corr_random`` the unrestricted one; ``corr_random_restricted``,
    ``null_mean`` and ``null_sd`` the restricted one); ``advantage`` their difference again. The stored parts are
    left alone."""
    t = t.copy()
    full = (t["norm_head"] * t["norm_svm"]).to_numpy(np.float64)
    restricted = (t["norm_head_restricted"] * t["norm_svm"]).to_numpy(np.float64)
    for cols, factor in ((("corr", "corr_random"), full),
                         (("corr_restricted", "corr_random_restricted", "null_mean", "null_sd"), restricted)):
        for c in cols:
            if c in t.columns:
                t[c] = t[c].to_numpy(np.float64) * factor
    t["advantage"] = t["corr_restricted"] - t["corr_random_restricted"]
    return t


def _raw_inner_product(name: str, experiment: str, bug: str, columns: list[str], caught: dict[str, str],
                       note: str = "") -> Mutation:
    """Mutation ``raw-inner-product-<name>``: ``columns`` of ``experiment``'s table times :data:`RAW_FACTOR`, caught by
    the integrity partners of the columns in ``caught`` (column -> what it holds, the start of the partner's name);
    ``note`` follows the factor in the bug's words."""
    return Mutation(f"raw-inner-product-{name}", experiment, f"{bug} (x{RAW_FACTOR:g}){note}", _scale(columns),
                    tuple(f"{what} ({col}) {_RANGE}" for col, what in caught.items()))

MUTATIONS: tuple[Mutation, ...] = (
    Mutation("raw-inner-product-convergence-types", "tf-convergence-types",
             f"corr(W, W^mm_alpha) left as the raw inner product <W, W^mm_alpha> (x{RAW_FACTOR:g})",
             _scale(["corr"]), (f"corr(W, W^mm_alpha) (corr) {_RANGE}",)),
    Mutation("raw-inner-product-seq-causal", "tf-seq-causal",
             f"corr(W, W^mm) left as the raw inner product (x{RAW_FACTOR:g})", _scale(["corr"]),
             (f"corr(W, W^mm) (corr) {_RANGE}",)),
    Mutation("raw-inner-product-local-convergence", "tf-local-convergence",
             f"corr with both SVMs left as raw inner products (x{RAW_FACTOR:g})", _scale(["corr_fro", "corr_nuc"]),
             (f"corr(W, W^mm_alpha) (corr_fro) {_RANGE}", f"corr(KQ^T, W^mm_star) (corr_nuc) {_RANGE}")),
    Mutation("raw-inner-product-trajectories", "tf-trajectories",
             f"corr with both SVMs left as raw inner products (x{RAW_FACTOR:g})", _scale(["corr_fro", "corr_nuc"]),
             (f"corr with the Frobenius SVM (corr_fro) {_RANGE}", f"corr with the nuclear SVM (corr_nuc) {_RANGE}")),
    Mutation("raw-inner-product-multi-token", "tf-multi-token",
             f"1 - corr computed from the raw inner product (1 - {RAW_FACTOR:g} corr)", _raw_err,
             (f"corr(W, W_fin + R W_svm) (1 - err_eq) {_RANGE}",)),
    Mutation("raw-inner-product-lm-cosine", "lm-cosine",
             f"cosines left as raw inner products (x{RAW_FACTOR:g})", _scale(["cos", "cos_eq", "cos_rand_eq",
                                                                             "cos_hard"]),
             (f"cosine with the soft-margin SVM (cos) {_RANGE}",)),
    Mutation("unnormalized-margins", "lm-margins", "margins not divided by ||X(k)||_F", _unnormalized_margins,
             ("C2: every normalized margin lies in [-2, 2]",)),
    Mutation("sign-flip-correlation", "tf-seq-causal", "the sign of corr(W, W^mm) flipped", _negate(["corr"]),
             ("full: mean corr(W, sequence SVM of the selection) at the last step",
              "causal: mean corr(W, sequence SVM of the selection) at the last step")),
    Mutation("off-by-one-checkpoint", "lm-margins",
             "each checkpoint's summary holds the next checkpoint's measurements", _checkpoint_ahead,
             ("C2: the mean margin at the start is near 0",)),
    Mutation("labels-shifted-one-interval", "tf-convergence-types",
             "each run labelled with the next larger d (the largest d's runs with the smallest)", _d_shifted,
             ("global share at d=2",)),
    Mutation("constant-model", "lm-cosine", "a model that learns nothing: every checkpoint holds X(0)'s measurements",
             _learns_nothing, ("C1: the final similarity to the soft-margin SVM is above 0.5",)),
    Mutation("margins-constant-model", "lm-margins",
             "a model that learns nothing: every checkpoint holds X(0)'s measurements", _margins_learn_nothing,
             ("C2 (Markov default): the largest non-support coefficient shrinks",
              "C2 (cycle language): the largest non-support coefficient shrinks")),
    Mutation("doubled-step-size", "lm-stability", "the step recorded is twice the step GD took", _doubled_step,
             ("C3 (l2): linear attention's largest stable step is the GD threshold 2/L",)),
    Mutation("shuffled-run-ids", "lm-margins", "the last checkpoint's runs carry each other's ids (rotated by one)",
             _shuffled_runs_at_last_step, ("C2: the non-support pairs' share of the gradient mass keeps falling",)),
    Mutation("off-by-one-rank", "tf-svm-rank", "rank + 1 on a fifth of the instances (seed divisible by 5)",
             _rank_plus_one, ("accurate: mean |rank(W^mm) - min(n, d)|",)),
    Mutation("raw-inner-product-regpath-w", "tf-regpath-w",
             f"corr with both SVMs left as raw inner products (x{RAW_FACTOR:g})", _scale(["corr_fro", "corr_nuc"]),
             (f"corr(W_R, W^mm) (corr_fro) {_RANGE}", f"corr(W_R, W^mm_*) (corr_nuc) {_RANGE}")),
    Mutation("radius-not-applied-regpath-w", "tf-regpath-w",
             "the projection onto the ball skipped at the largest radius (points 1.5 R from 0)", _radius_not_applied,
             ("the path lies on the ball's boundary at every radius",)),
    Mutation("raw-inner-product-near-ties", "lm-near-ties",
             f"cos(X(k), X^mm) left as the raw inner product (x{RAW_FACTOR:g})", _scale(["cos_hard"]),
             (f"Theorem 3.15: cosine with the hard-margin SVM (cos_hard) {_RANGE}",)),
    Mutation("delta-labels-shifted", "lm-near-ties",
             "each run labelled with the next larger delta (the largest delta's runs with 0)", _shifted("delta"),
             ("Theorem 3.15: every run meets the assumption at its delta",)),
    Mutation("constant-model-near-ties", "lm-near-ties",
             "a model that learns nothing: every checkpoint holds X(0)'s measurements", _learns_nothing,
             ("Theorem 3.15 at delta = 0: the cosine with the hard-margin SVM X^mm rises",
              "Theorem 3.15 at delta = 0.1: ||X(k)||_F rises")),
    Mutation("path-does-not-converge-regpath-kq", "tf-regpath-kq",
             "a path that never leaves its start: every radius holds the smallest radius's correlations", _path_stuck,
             ("mean corr(K_R Q_R^T, W^mm_*) at the largest R",)),
    Mutation("wrong-norm-svm-regpath-kq", "tf-regpath-kq",
             "the (K, Q) path compared with the Frobenius Att-SVM instead of the nuclear one (columns swapped)",
             _swap("corr_fro", "corr_nuc"), ("mean corr(K_R Q_R^T, W^mm_*) at the largest R",
                                              "at the largest R, K_R Q_R^T correlates more with W^mm_*")),
    Mutation("linearized-head-tokens-regpath-nonlinear", "mm-regpath-nonlinear",
             "the optimal tokens scored with the head's linear part (1^T V^T x) instead of h: the path compared with "
             "the p-SVM of the wrong tokens (columns swapped)", _swap("corr_h", "corr_lin"),
             ("every instance's corr(p(R), p^mm(alpha_h)) at the largest R",)),
    Mutation("path-does-not-converge-regpath-nonlinear", "mm-regpath-nonlinear",
             "a path that never leaves its start: every radius holds the smallest radius's correlations", _path_stuck,
             ("every instance's corr(p(R), p^mm(alpha_h)) at the largest R",)),
    Mutation("raw-inner-product-regpath-nonlinear", "mm-regpath-nonlinear",
             f"corr with both p-SVMs left as raw inner products (x{RAW_FACTOR:g})", _scale(["corr_h", "corr_lin"]),
             (f"corr(p(R), p^mm(alpha_h)) (corr_h) {_RANGE}", f"corr(p(R), p^mm(alpha_lin)) (corr_lin) {_RANGE}")),
    Mutation("raw-inner-product-minilm-heads", "real-minilm-heads",
             "corr(W_h, SVM) left as raw inner products at MiniLM's own factor: corr and corr_restricted times the "
             "stored ||W_h||_F ||W_svm||_F and ||W_r||_F ||W_svm||_F (0.028-0.14 and 0.0025-0.021 on the quick "
             "preset's heads, so every value stays inside [-1, 1] and the range partners pass), the random "
             "selections' and the null heads' columns times the same head's factor, the advantage their difference",
             _raw_inner_product_heads,
             (f"corr(W_h, nuclear Gen-SVM of its selections) (corr) {_PARTS}",
              f"corr_restricted(W_h, nuclear Gen-SVM of its selections) (corr_restricted) {_PARTS}")),
    _raw_inner_product("minilm-embeddings", "real-minilm-embeddings",
                       "corr with the Att-SVMs, of the two SVMs and of the random directions left as raw inner products",
                       ["corr_att_fro", "corr_att_nuc", "svm_fro_nuc_corr", "corr_random_dir"],
                       {"corr_att_fro": "corr with the Frobenius Att-SVM", "corr_att_nuc": "corr with the nuclear Att-SVM",
                        "svm_fro_nuc_corr": "corr of the two SVMs"}),
    _raw_inner_product("mm-single-input", "mm-single-input", "cos with both p-SVMs left as raw inner products",
                       ["cos_global", "cos_local"],
                       {"cos_global": "cos(p, p^mm_global)", "cos_local": "cos(p, p^mm_local)"}),
    _raw_inner_product("mm-multi-input", "mm-multi-input",
                       "cos(p, p^mm) and cos(W, W^mm) left as raw inner products", ["cos", "cos_wmm"],
                       {"cos": "cos(p, p^mm)", "cos_wmm": "cos(W, W^mm)"}),
    _raw_inner_product("mm-joint", "mm-joint", "cos with p^mm, p^relax and v^mm left as raw inner products",
                       ["cos_p_mm", "cos_p_relax", "cos_v_mm"],
                       {"cos_p_mm": "cos(p, p^mm)", "cos_p_relax": "cos(p, p^relax)", "cos_v_mm": "cos(v, v^mm)"}),
    _raw_inner_product("mm-loss-functions", "mm-loss-functions", "cos(p, p^mm) left as the raw inner product",
                       ["cos"], {"cos": "cos(p, p^mm)"}),
    _raw_inner_product("mm-regularization-path", "mm-regularization-path",
                       "the paths' cosines left as raw inner products",
                       ["cos", "cos_target", "cos_global", "cos_local", "cos_v", "cos_p_mm", "cos_p_relax"],
                       {"cos": "cos(p(R), p^mm) on the p-path, cos(W(R), W^mm) on the W-path",
                        "cos_local": "local path: cos(p(R), p^mm_local)", "cos_v": "joint path: cos(v, v^mm)"}),
)


def mutations_section() -> str:
    """The claims page's section on the mutations: one row per mutation, with the checks that catch it."""
    lines = ["## Plausible-bug mutations", "",
             "Each row rewrites an experiment's quick-preset results table the way a plausible bug would have written "
             "it (`attnsvm.experiments.mutations`); `tests/test_mutations.py` re-judges the rewritten table with the "
             "experiment's own checks and requires every check named here to fail (not inconclusive). The quick "
             "tables are stored under `tests/data/quick` (see its README for the command that made them).", "",
             "| mutation | experiment | the bug | checks that fail (name starts) |", "|---|---|---|---|"]
    for m in MUTATIONS:
        lines.append(f"| {m.name} | {m.experiment} | {m.bug.replace('|', chr(92) + '|')} | "
                     + "; ".join(c.replace("|", "\\|") for c in m.caught_by) + " |")
    return "\n".join(lines) + "\n"
