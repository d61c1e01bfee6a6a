"""Attention as an SVM in causal language modeling: a synthetic language and the experiments C1-C3.

Spec: ``causal-language-modeling.md`` (the anonymous paper "On the similarity between
attention and SVM on the token separation and selection behavior"). Every prefix of every
sequence is its own token-selection problem: the query is the last prefix token, the keys
and values are the prefix tokens, the head is the tied output embedding ``H = E^T``.

Pieces (choices marked [OURS] in the spec are configurable):

* :func:`markov_language` / :class:`MarkovLanguage`: a random sparse Markov chain over V
  token types (each context has ``successors`` likely next types with Dirichlet weights,
  order 1 or 2) with random unit embeddings ``E (V, d)``; seeded and deterministic.
* :func:`make_lm_data`: m sequences of length n, their embeddings ``A (m, n, d)`` and
  next-token targets.
* :func:`prefix_scores`, :func:`lm_constraints`, :func:`soft_margin_svm`: the token scores
  ``gamma_{l,k,t} = -loss(H^T a_{l,t}, target_{l,k})``, the optimal token of each prefix and
  the (soft-margin) Att-SVM with ``C = 10`` and the norm objective ``||W||_F + C sum xi``,
  built as rank-one constraints ``(a_opt - a_t)^T W a_k >= 1 - xi`` (never a Kronecker product).
* :func:`lm_loss_grad` / :func:`train_lm`: the causal one-layer model with softmax or linear
  attention, per-vocabulary logistic (the paper's loss), cross-entropy or l2 loss, closed-form
  float64 gradients batched over runs, plain GD.

Registered experiments: ``lm-cosine`` (C1), ``lm-margins`` (C2), ``lm-stability`` (C3).

Indexing: position k = 0..n-1; the prefix ending at k (tokens 0..k, query ``a_k``) predicts
token k+1, so positions 0..n-2 carry a target. The logit of key t for query k is
``a_t^T W a_k`` (paper convention ``x^T W z``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, PositiveFloat, PositiveInt

from ..errors import ValidationError
from .base import Experiment, ExperimentConfig, Task, check, register

PAPER_LM = "On the similarity between attention and SVM on the token separation and selection behavior (anonymous)"
LOSSES = ("logistic", "cross_entropy", "l2")


# ============================================================================ synthetic language


@dataclass(frozen=True)
class MarkovLanguage:
    """A random sparse Markov chain over ``V`` token types with unit embeddings.

    Attributes
    ----------
    V, d, order, successors : sizes
    start : (V,) start distribution
    trans1 : (V, V) first-order transition probabilities (row = previous type)
    trans2 : (V * V, V) second-order table (row ``V * a + b`` for the context (a, b)); None for order 1
    E : (V, d) embeddings, unit rows
    seed : the seed that generated it
    """

    V: int
    d: int
    order: int
    successors: int
    start: np.ndarray
    trans1: np.ndarray
    trans2: np.ndarray | None
    E: np.ndarray
    seed: int

    def next_probs(self, prev2, prev1) -> np.ndarray:
        """Next-type distributions (k, V) given the two previous types (``prev2`` ignored for order 1 or if < 0)."""
        prev1 = np.asarray(prev1)
        if self.order == 1 or prev2 is None:
            return self.trans1[prev1]
        prev2 = np.asarray(prev2)
        rows = self.trans2[self.V * np.maximum(prev2, 0) + prev1]
        return np.where((prev2 >= 0)[:, None], rows, self.trans1[prev1])

    def sample(self, m: int, n: int, seed: int = 0) -> np.ndarray:
        """m sequences of n token types, shape (m, n) int64 (deterministic in ``seed``)."""
        if m < 1 or n < 2:
            raise ValidationError(f"need m >= 1 sequences of length n >= 2, got m = {m}, n = {n}")
        g = np.random.default_rng(np.random.SeedSequence([self.seed, 7, int(seed)]))
        out = np.empty((m, n), dtype=np.int64)
        out[:, 0] = _draw(g, np.broadcast_to(self.start, (m, self.V)))
        for j in range(1, n):
            prev2 = out[:, j - 2] if j >= 2 else np.full(m, -1)
            out[:, j] = _draw(g, self.next_probs(prev2 if self.order == 2 else None, out[:, j - 1]))
        return out

    def log_prob(self, tokens) -> float:
        """Log-likelihood of sequences (m, n) under the chain (for tests and diagnostics)."""
        tokens = np.asarray(tokens)
        lp = np.log(self.start[tokens[:, 0]]).sum()
        for j in range(1, tokens.shape[1]):
            prev2 = tokens[:, j - 2] if j >= 2 else np.full(len(tokens), -1)
            P = self.next_probs(prev2 if self.order == 2 else None, tokens[:, j - 1])
            lp += np.log(P[np.arange(len(tokens)), tokens[:, j]]).sum()
        return float(lp)


def _draw(g, P) -> np.ndarray:
    """One categorical draw per row of ``P (k, V)``."""
    c = np.cumsum(P, axis=1)
    c[:, -1] = 1.0
    u = g.random(P.shape[0])
    return (u[:, None] > c).sum(1).astype(np.int64)


def _sparse_rows(g, rows: int, V: int, k: int, concentration: float) -> np.ndarray:
    P = np.zeros((rows, V))
    for r in range(rows):
        succ = g.choice(V, size=k, replace=False)
        P[r, succ] = g.dirichlet(np.full(k, concentration))
    return P


def markov_language(V: int = 8, d: int = 100, *, successors: int = 2, order: int = 1, concentration: float = 1.0,
                    seed: int = 0) -> MarkovLanguage:
    """A seeded random sparse Markov language [OURS default of the causal-LM spec].

    Parameters
    ----------
    V : number of token types (>= 2)
    d : embedding dimension
    successors : likely next types per context (1 <= successors <= V), Dirichlet(concentration) weights
    order : 1 (next type depends on the last one) or 2 (on the last two)
    seed : the chain, the start distribution and the embeddings depend only on (seed, V, d, ...)
    """
    if V < 2 or d < 1:
        raise ValidationError(f"need V >= 2 types and d >= 1, got V = {V}, d = {d}")
    if not 1 <= successors <= V:
        raise ValidationError(f"successors must lie in [1, V = {V}], got {successors}")
    if order not in (1, 2):
        raise ValidationError(f"order must be 1 or 2, got {order}")
    if not concentration > 0:
        raise ValidationError(f"concentration must be > 0, got {concentration}")
    g = np.random.default_rng(np.random.SeedSequence([int(seed), V, successors, order]))
    start = g.dirichlet(np.ones(V))
    trans1 = _sparse_rows(g, V, V, successors, concentration)
    trans2 = _sparse_rows(g, V * V, V, successors, concentration) if order == 2 else None
    ge = np.random.default_rng(np.random.SeedSequence([int(seed), V, d, 11]))
    E = ge.standard_normal((V, d))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    return MarkovLanguage(V, d, order, successors, start, trans1, trans2, E, int(seed))


@dataclass(frozen=True)
class LMData:
    """Sequences of a language ready for training.

    tokens : (m, n) int types; A : (m, n, d) attention inputs (embeddings times ``scale``);
    targets : (m, n) next type at each position, -1 at the last position; E : (V, d) head (H = E^T).
    """

    tokens: np.ndarray
    A: np.ndarray
    targets: np.ndarray
    E: np.ndarray

    @property
    def shape(self):
        return self.A.shape


def make_lm_data(lang: MarkovLanguage, m: int, n: int, seed: int = 0, scale: float = 1.0) -> LMData:
    """Sample m sequences of length n; inputs are the embeddings times ``scale``, the head stays ``E^T``."""
    tokens = lang.sample(m, n, seed)
    targets = np.full((m, n), -1, dtype=np.int64)
    targets[:, :-1] = tokens[:, 1:]
    return LMData(tokens, scale * lang.E[tokens], targets, lang.E.copy())


# ============================================================================ losses and scores


def _token_loss_np(Z, y, loss: str):
    """Per-position loss of logits ``Z (..., V)`` for targets ``y (...)`` (numpy)."""
    V = Z.shape[-1]
    oh = np.eye(V)[y]
    if loss == "logistic":
        b = 2.0 * oh - 1.0
        return np.logaddexp(0.0, -b * Z).sum(-1)
    if loss == "cross_entropy":
        mx = Z.max(-1, keepdims=True)
        return (mx[..., 0] + np.log(np.exp(Z - mx).sum(-1))) - np.take_along_axis(Z, y[..., None], -1)[..., 0]
    if loss == "l2":
        return ((Z - oh) ** 2).sum(-1)
    raise ValidationError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")


def prefix_scores(data: LMData, loss: str = "logistic") -> np.ndarray:
    """Token scores ``gamma[l, k, t] = -loss(H^T a_{l,t}, target_{l,k})`` for ``t <= k <= n-2``.

    The score of key t for the prefix ending at k is the (negated) loss of attending to t
    alone. Entries outside the causal candidate set or at the last position are ``-inf``.
    Shape (m, n, n) indexed [sequence, query position, key position].
    """
    m, n, d = data.A.shape
    Z = data.A @ data.E.T  # (m, n, V): logits of attending fully to each token
    gamma = np.full((m, n, n), -np.inf)
    for k in range(n - 1):
        y = np.repeat(data.targets[:, k][:, None], k + 1, axis=1)
        gamma[:, k, :k + 1] = -_token_loss_np(Z[:, :k + 1], y, loss)
    return gamma


def optimal_prefix_tokens(gamma: np.ndarray) -> np.ndarray:
    """``select[l, k] = argmax_t gamma[l, k, t]`` (the last position, without target, selects itself)."""
    m, n, _ = gamma.shape
    sel = np.argmax(gamma, axis=-1)
    sel[:, n - 1] = n - 1
    return sel.astype(np.int64)


def lm_constraints(data: LMData, loss: str = "logistic", select=None, tol: float = 1e-12):
    """Rank-one Att-SVM rows of every prefix: ``(a_opt - a_t)^T W a_k >= 1`` for ``t <= k``, ``t != opt``.

    Prefixes without a target (the last position) are dropped, and so are the rows of tokens
    identical to the selected one (same type: ``u = 0``, they would only add the constant
    ``C`` to a soft-margin objective). Built by :func:`attnsvm.svm.constraints.seq_constraints`
    (causal) and filtered.

    Returns
    -------
    ConstraintSet (kind "causal") with ``sample = l``, ``query = k``, ``token = opt``, ``other = t``.
    """
    from ..svm.constraints import seq_constraints

    m, n, _ = data.A.shape
    if select is None:
        select = optimal_prefix_tokens(prefix_scores(data, loss))
    cs = seq_constraints(data.A, select, causal=True)
    keep = (cs.query <= n - 2) & (np.linalg.norm(cs.U, axis=1) > tol)
    return cs.select_rows(keep)


def soft_margin_svm(data: LMData, C: float = 10.0, loss: str = "logistic", squared: bool = False, cs=None):
    """Soft-margin Att-SVM of the paper's Definition 4.1 over every prefix.

    ``min ||W||_F + C sum xi`` (``||W||_F^2`` with ``squared``) s.t.
    ``(a_opt - a_t)^T W a_k >= 1 - xi``, solved by :func:`attnsvm.svm.soft.solve_soft`
    on the rank-one rows of :func:`lm_constraints`.
    """
    from ..svm.soft import solve_soft

    cs = lm_constraints(data, loss) if cs is None else cs
    if cs.N == 0:
        raise ValidationError("the soft-margin SVM has no rows: every prefix token has the type of its optimal token")
    return solve_soft(cs, float(C), norm="fro", squared=squared)


# ============================================================================ model and training


def _torch():
    import torch

    torch.set_num_threads(1)
    return torch


def lm_loss_grad(W, A, targets, E, *, loss: str = "logistic", attention: str = "softmax", want_coef: bool = False):
    """Mean loss and its gradient in W of the causal one-layer model, batched over runs.

    Parameters
    ----------
    W : (R, d, d) torch float64; A : (R, m, n, d); targets : (R, m, n) int64 (-1 = no target);
    E : (R, V, d) tied head (logits ``E o``)
    loss : "logistic" (per vocabulary entry, label +1 for the true type and -1 otherwise),
        "cross_entropy" or "l2" (``||E o - onehot||^2``)
    attention : "softmax" (``s = softmax(a_t^T W a_k, t <= k)``) or "linear" (``s = a_t^T W a_k``, t <= k)
    want_coef : also return the logit coefficients ``c (R, m, n, n)`` (dL/dlogit)

    Returns
    -------
    (L (R,), G (R, d, d)[, c])
    """
    torch = _torch()
    R, m, n, d = A.shape
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    Af = A.reshape(R, m * n, d)
    Q = torch.bmm(Af, W.transpose(1, 2)).reshape(R, m, n, d)  # row k = W a_k
    logits = torch.matmul(Q, A.transpose(-1, -2))  # [.., k, t] = a_t^T W a_k
    if attention == "softmax":
        s = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
    elif attention == "linear":
        s = logits * mask
    else:
        raise ValidationError(f"attention must be 'softmax' or 'linear', got {attention!r}")
    o = torch.matmul(s, A)  # (R, m, n, d)
    V = E.shape[1]
    Z = torch.bmm(o.reshape(R, m * n, d), E.transpose(1, 2)).reshape(R, m, n, V)
    valid = targets >= 0
    y = torch.where(valid, targets, torch.zeros_like(targets))
    oh = torch.nn.functional.one_hot(y, V).to(Z.dtype)
    if loss == "logistic":
        b = 2.0 * oh - 1.0
        per = torch.nn.functional.softplus(-b * Z).sum(-1)
        gZ = -b * torch.sigmoid(-b * Z)
    elif loss == "cross_entropy":
        lse = torch.logsumexp(Z, -1)
        per = lse - (Z * oh).sum(-1)
        gZ = torch.softmax(Z, -1) - oh
    elif loss == "l2":
        diff = Z - oh
        per = (diff * diff).sum(-1)
        gZ = 2.0 * diff
    else:
        raise ValidationError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    vf = valid.to(Z.dtype)
    cnt = vf.sum((1, 2)).clamp(min=1.0)
    L = (per * vf).sum((1, 2)) / cnt
    gZ = gZ * (vf / cnt[:, None, None]).unsqueeze(-1)
    gO = torch.bmm(gZ.reshape(R, m * n, V), E).reshape(R, m, n, d)
    beta = torch.matmul(gO, A.transpose(-1, -2))  # [.., k, t] = dL/ds_kt
    if attention == "softmax":
        # pairwise form c_t = s_t sum_tau s_tau (beta_t - beta_tau): exact when s is saturated
        D = beta.unsqueeze(-1) - beta.unsqueeze(-2)
        c = s * torch.matmul(D, s.unsqueeze(-1)).squeeze(-1)
    else:
        c = beta * mask
    U = torch.matmul(c, A)  # (R, m, n, d): sum_t c_kt a_t
    G = torch.bmm(U.reshape(R, m * n, d).transpose(1, 2), Af)
    return (L, G, c) if want_coef else (L, G)


def train_lm(A, targets, E, W0, *, steps: int, lr, loss: str = "logistic", attention: str = "softmax",
             checkpoints=None, track_lipschitz: bool = False):
    """Plain GD ``W <- W - lr grad L(W)`` on R independent runs (float64, closed-form gradients).

    Parameters
    ----------
    A : (R, m, n, d); targets : (R, m, n); E : (R, V, d) (numpy or torch); W0 : (R, d, d)
    lr : float or (R,) per-run step sizes
    checkpoints : steps to record W and the loss at (default: 0 and ``steps``)
    track_lipschitz : record ``max_k ||g_{k+1} - g_k|| / ||W_{k+1} - W_k||`` along the run

    Returns
    -------
    dict: ``steps`` (C,), ``W`` (R, C, d, d), ``loss`` (R, C), ``finite`` (R,) bool (no overflow),
    ``lip_traj`` (R,) (if tracked), ``max_loss`` (R,) the largest loss along the run.
    """
    torch = _torch()
    t = lambda x, dt=torch.float64: torch.as_tensor(np.array(x), dtype=dt) if not torch.is_tensor(x) else x  # noqa: E731
    A, E, W = t(A), t(E), t(W0).clone()
    targets = t(targets, torch.int64)
    R = A.shape[0]
    lr_t = torch.as_tensor(np.broadcast_to(np.asarray(lr, dtype=np.float64), (R,)).copy()).reshape(R, 1, 1)
    cps = sorted({0, int(steps)} if checkpoints is None else {int(c) for c in checkpoints if 0 <= c <= steps})
    rec = np.zeros(steps + 1, bool)
    rec[cps] = True
    Ws = np.empty((R, len(cps)) + tuple(W.shape[1:]))
    Ls = np.empty((R, len(cps)))
    finite = torch.ones(R, dtype=torch.bool)
    lip = torch.zeros(R, dtype=torch.float64)
    max_loss = torch.full((R,), -np.inf, dtype=torch.float64)
    prev_g = prev_W = None
    c = 0
    with torch.no_grad():
        for k in range(steps + 1):
            L, G = lm_loss_grad(W, A, targets, E, loss=loss, attention=attention)
            ok = torch.isfinite(L) & torch.isfinite(G).reshape(R, -1).all(1)
            finite &= ok
            max_loss = torch.maximum(max_loss, torch.where(ok, L, torch.full_like(L, np.inf)))
            if track_lipschitz and prev_g is not None:
                dW = torch.linalg.vector_norm((W - prev_W).reshape(R, -1), dim=1)
                dg = torch.linalg.vector_norm((G - prev_g).reshape(R, -1), dim=1)
                ratio = torch.where((dW > 0) & ok, dg / dW.clamp(min=1e-300), torch.zeros_like(dW))
                lip = torch.maximum(lip, torch.nan_to_num(ratio, nan=0.0, posinf=0.0))
            if rec[k]:
                Ws[:, c] = W.numpy()
                Ls[:, c] = L.numpy()
                c += 1
            if k == steps:
                break
            # a diverged run is frozen (its later values stay non-finite / unchanged)
            G = torch.where(finite.reshape(R, 1, 1), G, torch.zeros_like(G))
            if track_lipschitz:
                prev_g, prev_W = G.clone(), W.clone()
            W = W - lr_t * G
    out = {"steps": np.array(cps), "W": Ws, "loss": Ls, "finite": finite.numpy().copy(),
           "max_loss": max_loss.numpy().copy()}
    if track_lipschitz:
        out["lip_traj"] = lip.numpy().copy()
    return out


def _checkpoints(steps: int, count: int) -> list[int]:
    pts = np.unique(np.round(np.logspace(0, np.log10(max(steps, 1)), count)).astype(int))
    return sorted({0, steps, *[int(p) for p in pts if p <= steps]})


def _mat_cos(A, B) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    num = np.einsum("...ij,ij->...", A, B)
    na = np.linalg.norm(A.reshape(A.shape[:-2] + (-1,)), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / (na * np.linalg.norm(B))
    return np.where(na > 0, out, 0.0)


def _save(fig, outdir, stem: str) -> list[str]:
    import matplotlib.pyplot as plt

    paths = []
    for ext in ("png", "pdf"):
        path = os.path.join(outdir, f"{stem}.{ext}")
        fig.savefig(path, dpi=130 if ext == "png" else None, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


# ============================================================================ shared run builder


class LanguageFields(ExperimentConfig):
    """Fields shared by the causal-LM experiments (the [OURS] choices of the spec)."""

    vocab: PositiveInt = Field(8, ge=2, description="token types V")
    successors: PositiveInt = Field(2, description="likely next types per context")
    order: Literal[1, 2] = 1
    concentration: PositiveFloat = 1.0
    loss: Literal["logistic", "cross_entropy"] = "logistic"
    C: PositiveFloat = 10.0
    squared: bool = Field(False, description="soft-margin objective ||W||^2 instead of the paper's ||W||")
    steps: PositiveInt = 1000
    lr: PositiveFloat = 10.0
    init_scale: float = Field(1e-3, ge=0, description="X(0) = init_scale * N(0, 1) entrywise")
    seed: int = 0


def _run_seeds(seed: int, run: int) -> dict:
    base = 1000 * int(seed) + int(run)
    return {"language": base, "sample": base, "init": base}


def build_runs(cfg, m: int, n: int, d: int, runs: int, scale: float = 1.0):
    """The per-run data of a configuration: languages, sequences, inits (run r has its own seeds)."""
    datas, inits = [], []
    for r in range(runs):
        s = _run_seeds(cfg.seed, r)
        lang = markov_language(cfg.vocab, d, successors=cfg.successors, order=cfg.order,
                               concentration=cfg.concentration, seed=s["language"])
        datas.append(make_lm_data(lang, m, n, seed=s["sample"], scale=scale))
        g = np.random.default_rng(np.random.SeedSequence([s["init"], d, 3]))
        inits.append(cfg.init_scale * g.standard_normal((d, d)))
    return datas, np.stack(inits)


def _stack(datas):
    return (np.stack([x.A for x in datas]), np.stack([x.targets for x in datas]), np.stack([x.E for x in datas]))


def train_runs(cfg, datas, W0, checkpoints, attention: str = "softmax"):
    """GD on every run of ``datas`` at once (the engine's ``train_sequence`` for the cross-entropy loss)."""
    A, tg, E = _stack(datas)
    if cfg.loss == "cross_entropy" and attention == "softmax" and len({x.E.tobytes() for x in datas}) == 1:
        from ..train import train_sequence

        n = A.shape[2]
        # train_sequence averages over all n positions including the one without target: rescale the step
        res = train_sequence(A, tg, H=E[0].T, causal=True, loss="cross_entropy", optimizer="gd",
                             lr=cfg.lr * n / (n - 1), steps=cfg.steps, init=W0, checkpoints=checkpoints)
        return {"steps": res.steps, "W": res.W, "loss": res.loss * n / (n - 1)}
    return train_lm(A, tg, E, W0, steps=cfg.steps, lr=cfg.lr, loss=cfg.loss, attention=attention,
                    checkpoints=checkpoints)


# ============================================================================ C1: cosine similarity


class CosineConfig(LanguageFields):
    """C1: cos(X(k), X_soft^mm) during GD; default m = 10, n = 5, d = 100, vary one at a time, 5 runs."""

    m: PositiveInt = 10
    n: PositiveInt = Field(5, ge=2)
    d: PositiveInt = 100
    vary_m: list[int] = Field(default_factory=lambda: [5, 10, 20, 40])
    vary_n: list[int] = Field(default_factory=lambda: [3, 5, 8, 12])
    vary_d: list[int] = Field(default_factory=lambda: [25, 50, 100, 200])
    runs: PositiveInt = 5
    n_checkpoints: PositiveInt = 30


def _c1_configs(cfg) -> list[tuple[int, int, int]]:
    seen = []
    for (m, n, d) in ([(x, cfg.n, cfg.d) for x in cfg.vary_m] + [(cfg.m, x, cfg.d) for x in cfg.vary_n]
                      + [(cfg.m, cfg.n, x) for x in cfg.vary_d] + [(cfg.m, cfg.n, cfg.d)]):
        if (m, n, d) not in seen:
            seen.append((m, n, d))
    return seen


def _svm_rows(sols, m, n, d):
    from ..svm.frobenius import solve_frobenius

    rows = []
    for r, sol in enumerate(sols):
        cs = sol.constraints
        hard = solve_frobenius(cs)  # exact: optimal, or a Farkas certificate of infeasibility
        rows.append(dict(record="svm", m=m, n=n, d=d, run=r, n_rows=int(cs.N), n_slack=int((sol.slack > 1e-6).sum()),
                         hard_feasible=bool(hard.feasible),
                         objective=float(sol.objective), norm=float(sol.norm_value),
                         max_violation=float(sol.certificate.max_violation),
                         stationarity=float(sol.certificate.stationarity_residual),
                         solver_status=str(sol.info.get("solver_status", ""))))
    return rows


@register
class LMCosine(Experiment):
    name = "lm-cosine"
    title = "C1: cosine similarity between GD's X(k) and the soft-margin Att-SVM (C = 10), varying m, n, d"
    paper = PAPER_LM
    Config = CosineConfig
    quick = {"vary_m": [5, 10], "vary_n": [3, 5], "vary_d": [25, 50], "d": 50, "runs": 3, "steps": 300,
             "n_checkpoints": 12}

    def tasks(self, config):
        return [Task(f"m{m}-n{n}-d{d}", config.runs, {"m": m, "n": n, "d": d}) for m, n, d in _c1_configs(config)]

    def run_task(self, config, task):
        m, n, d = task.params["m"], task.params["n"], task.params["d"]
        datas, W0 = build_runs(config, m, n, d, config.runs)
        sols = [soft_margin_svm(x, config.C, config.loss, config.squared) for x in datas]
        cps = _checkpoints(config.steps, config.n_checkpoints)
        res = train_runs(config, datas, W0, cps)
        rows = _svm_rows(sols, m, n, d)
        for r, sol in enumerate(sols):
            cs = _mat_cos(res["W"][r], sol.W)
            nrm = np.linalg.norm(res["W"][r].reshape(len(res["steps"]), -1), axis=1)
            for c, st in enumerate(res["steps"]):
                rows.append(dict(record="train", m=m, n=n, d=d, run=r, step=int(st), cos=float(cs[c]),
                                 norm=float(nrm[c]), loss=float(res["loss"][r, c])))
        return pd.DataFrame(rows)

    @staticmethod
    def _curves(table):
        tr = table[table["record"] == "train"]
        return tr.groupby(["m", "n", "d", "step"])["cos"].agg(["mean", "sem", "count"]).reset_index()

    def checks(self, config, table):
        out = []
        cur = self._curves(table)
        last = int(cur["step"].max())
        fin = cur[cur["step"] == last].set_index(["m", "n", "d"])
        start = cur[cur["step"] == 0].set_index(["m", "n", "d"])
        key = (config.m, config.n, config.d)
        if key in fin.index:
            out.append(check(f"C1 default (m, n, d) = {key}: mean cos(X(k), X_soft^mm) at step {last} is high",
                             fin.loc[key, "mean"], ">=", 0.6,
                             f"mean {fin.loc[key, 'mean']:.3f} +- {fin.loc[key, 'sem']:.3f} (s.e.) over "
                             f"{int(fin.loc[key, 'count'])} runs"))
        rise = (fin["mean"] - start["mean"]).dropna()
        out.append(check("C1: the similarity rises during training in every configuration (min over configs of the mean "
                         "cos gained from X(0))", rise.min(), ">=", 0.4,
                         ", ".join(f"{k}: {fin.loc[k, 'mean']:.2f}" for k in fin.index)))
        out.append(check("C1: final mean cos over every configuration (worst configuration)", fin["mean"].min(), ">=", 0.45))
        svm = table[table["record"] == "svm"]
        out.append(check("C1: every soft-margin SVM solved to optimality (max constraint violation)",
                         svm["max_violation"].max(), "<=", 1e-6,
                         f"solver status: {sorted(set(svm['solver_status']))}"))
        return out

    def plot(self, config, table, outdir):
        plt = _plt()
        cur = self._curves(table)
        panels = (("m", config.vary_m, dict(n=config.n, d=config.d)), ("n", config.vary_n, dict(m=config.m, d=config.d)),
                  ("d", config.vary_d, dict(m=config.m, n=config.n)))
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), sharey=True)
        for ax, (var, values, fixed) in zip(axes, panels):
            for v in values:
                sel = cur[(cur[var] == v) & np.logical_and.reduce([cur[k] == x for k, x in fixed.items()])]
                sel = sel[sel["step"] > 0].sort_values("step")
                if not len(sel):
                    continue
                line, = ax.plot(sel["step"], sel["mean"], label=f"{var} = {v}")
                sem = sel["sem"].fillna(0.0)
                ax.fill_between(sel["step"], sel["mean"] - sem, sel["mean"] + sem, color=line.get_color(), alpha=0.25)
            ax.set_xscale("log")
            ax.set_xlabel("GD step k")
            ax.set_title(f"vary {var} (" + ", ".join(f"{k} = {x}" for k, x in fixed.items()) + ")")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3, which="both")
        axes[0].set_ylabel("cos(X(k), X_soft^mm)  (mean +- s.e.)")
        fig.tight_layout()
        return _save(fig, outdir, "lm_cosine")

    def explain(self, config, table):
        svm = table[table["record"] == "svm"]
        frac = float((svm["n_slack"] > 0).mean()) if len(svm) else float("nan")
        infeas = float((~svm["hard_feasible"].astype(bool)).mean()) if len(svm) and "hard_feasible" in svm else np.nan
        return (f"Synthetic language [OURS]: order-{config.order} Markov chain over V = {config.vocab} types, "
                f"{config.successors} likely successors per type (Dirichlet({config.concentration:g}) weights), random "
                f"unit embeddings, tied head H = E^T, {config.loss} loss (the paper's per-vocabulary logistic loss unless "
                f"changed), plain GD with step {config.lr:g} from X(0) = {config.init_scale:g} N(0, 1). The optimal "
                "token of a prefix is the one whose embedding alone gives the lowest loss for the true next token. "
                f"The hard-margin Att-SVM is infeasible in {100 * infeas:.0f}% of the runs (exact solver: Farkas "
                "certificate; the same token types recur in prefixes with different next tokens), which is why the "
                f"paper uses the soft-margin SVM (C = {config.C:g}, objective ||W||_F + C sum xi); its solution has "
                f"positive slack in {100 * frac:.0f}% of the runs. The similarity rises from ~0 "
                "to the values shown but does not reach 1: prefixes whose target type does not occur in the prefix have "
                "no clear optimal token (a mixture of tokens fits them better than any single one), so GD keeps a finite "
                "component there that the SVM direction does not describe; longer sequences have more such prefixes.")


# ============================================================================ C2: margins


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
        torch = _torch()
        datas, W0 = build_runs(config, config.m, config.n, config.d, config.runs)
        data, W0 = datas[r], W0[r:r + 1]
        cs = lm_constraints(data, config.loss)
        sol = soft_margin_svm(data, config.C, config.loss, config.squared, cs=cs)
        support = (sol.margins <= 1.0 + 1e-6)
        steps = sorted(set(_checkpoints(config.steps, config.n_checkpoints)) | {s for s in config.hist_steps
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
        plt = _plt()
        mg = table[table["record"] == "margin"]
        steps = sorted(mg["step"].unique())
        cmap = plt.get_cmap("plasma")
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
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
        fig.tight_layout()
        return _save(fig, outdir, "lm_margins")

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


# ============================================================================ C3: stability


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


def _ball(g, count, d, R):
    """Uniform samples in the Frobenius ball of radius R in R^{d x d}."""
    X = g.standard_normal((count, d * d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    rad = R * g.random(count) ** (1.0 / (d * d))
    return (X * rad[:, None]).reshape(count, d, d)


def lipschitz_estimates(data: LMData, *, loss, attention, radius, centers, power_iters, pairs, seed=0):
    """Gradient Lipschitz estimates of the mean loss in the ball ``||W||_F <= radius``.

    * ``power``: max over random centers W of the local constant, estimated by power iteration on
      finite-difference Hessian-vector products ``(grad(W + h u) - grad(W)) / h``;
    * ``pairs``: max over random pairs (x, y) in the ball of ``||grad x - grad y|| / ||x - y||``.
    """
    torch = _torch()
    g = np.random.default_rng(np.random.SeedSequence([seed, 5]))
    d = data.A.shape[-1]
    k = centers

    def grad(Ws):
        Ws = torch.as_tensor(Ws)
        B = Ws.shape[0]
        A = torch.as_tensor(data.A).unsqueeze(0).expand(B, -1, -1, -1)
        tg = torch.as_tensor(data.targets).unsqueeze(0).expand(B, -1, -1)
        E = torch.as_tensor(data.E).unsqueeze(0).expand(B, -1, -1)
        return lm_loss_grad(Ws, A, tg, E, loss=loss, attention=attention)[1].numpy()

    Wc = _ball(g, k, d, radius)
    u = g.standard_normal((k, d, d))
    u /= np.linalg.norm(u.reshape(k, -1), axis=1).reshape(k, 1, 1)
    h = 1e-5 * max(1.0, radius)
    g0 = grad(Wc)
    est = np.zeros(k)
    for _ in range(power_iters):
        Hu = (grad(Wc + h * u) - g0) / h
        est = np.linalg.norm(Hu.reshape(k, -1), axis=1)
        u = Hu / np.maximum(est, 1e-300).reshape(k, 1, 1)
    X, Y = _ball(g, pairs, d, radius), _ball(g, pairs, d, radius)
    ratio = np.linalg.norm((grad(X) - grad(Y)).reshape(pairs, -1), axis=1) / np.linalg.norm((X - Y).reshape(pairs, -1), axis=1)
    return float(est.max()), float(ratio.max())


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
        plt = _plt()
        sm = self.summary(table)
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
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
        fig.tight_layout()
        return _save(fig, outdir, "lm_stability")

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
