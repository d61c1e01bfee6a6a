"""The synthetic language of the causal-LM experiments ``lm-*``, its data and their shared settings.

Spec ``causal-language-modeling.md`` (the anonymous paper "On the similarity between
attention and SVM on the token separation and selection behavior"); choices marked [OURS]
there are the fields of :class:`LanguageFields`. A random sparse Markov chain over V token
types (each context has ``successors`` likely next types with Dirichlet weights, order 1
or 2) with random unit embeddings ``E (V, d)``; seeded and deterministic.

Indexing: position k = 0..n-1; the prefix ending at k (tokens 0..k, query ``a_k``) predicts
token k+1, so positions 0..n-2 carry a target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from ..errors import ValidationError
from .base import ExperimentConfig
from .checks import ALPHA, check

PAPER_LM = "On the similarity between attention and SVM on the token separation and selection behavior (anonymous)"


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
    """``rows`` distributions over V types, each on k random types with Dirichlet(concentration) weights."""
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


# ------------------------------------------------------------------ settings and data of a run


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


# ------------------------------------------------------------------ qualitative checks of the lm-* experiments


def ordering_check(name: str, diffs, margin: float = 0.0, detail: str = "", *, source: str, reason: str,
                   alpha: float | None = None):
    """A qualitative claim "A exceeds B by more than ``margin``" tested on per-run paired differences.

    ``diffs (R,)`` holds ``a_r - b_r`` for the R runs (comparator B fixed in advance: a random
    direction, an earlier checkpoint, the other attention). The check passes when the mean
    difference exceeds ``margin`` by the one-sided ``1 - alpha`` Student-t tolerance of its
    standard error (``t_{1-alpha, R-1} s / sqrt(R)``; one run: no tolerance), i.e. when the runs
    are significant evidence of the ordering. NaN values fail the check (never dropped).

    Returns
    -------
    Check of kind "qualitative"; value = the mean difference, threshold ``> margin + tolerance``.
    """
    import math

    from scipy.stats import t as student_t

    alpha = ALPHA if alpha is None else alpha
    vals = np.asarray(diffs, dtype=float).ravel()
    R = vals.size
    if R == 0 or not np.all(np.isfinite(vals)):
        bad = int((~np.isfinite(vals)).sum())
        return check(name, float("nan"), ">", margin, (detail + "; " if detail else "") + f"{bad} of {R} runs without a value",
                     source=source, reason=reason, kind="qualitative")
    mean = float(vals.mean())
    se = float(vals.std(ddof=1) / math.sqrt(R)) if R > 1 else 0.0
    tol = float(student_t.ppf(1 - alpha, R - 1)) * se if R > 1 else 0.0
    why = (f"{reason}; margin {margin:g} plus the one-sided Student-t tolerance {tol:.3g} of the mean paired difference "
           f"(level {alpha:g}, {R} runs, s.e. {se:.3g})")
    return check(name, mean, ">", margin + tol, (detail + "; " if detail else "") + f"{R} runs, min {vals.min():.4g}, "
                 f"max {vals.max():.4g}", source=source, reason=why, kind="qualitative")


def preset_deviations(exp, config) -> list[dict]:
    """A deviations row for the config values that differ from the experiment's full protocol.

    The quick preset (fewer runs, sizes or steps) or user overrides: the checks test the same
    claims, with the wider tolerances of fewer runs.
    """
    default = exp.Config()
    now = config.model_dump()
    diff = {k: v for k, v in now.items() if getattr(default, k) != v}
    if not diff:
        return []
    quick = all(k in exp.quick and exp.quick[k] == v for k, v in diff.items())
    return [{"spec": "full protocol: " + "; ".join(f"{k} = {getattr(default, k)}" for k in diff),
             "here": "; ".join(f"{k} = {v}" for k, v in diff.items()),
             "reason": ("quick preset (seconds instead of minutes)" if quick else "config overrides")
             + ": the same claims, with the wider statistical tolerances of fewer runs"}]


def grouped_ordering_check(name: str, groups: dict, margin: float = 0.0, detail: str = "", *, source: str,
                           reason: str, alpha: float | None = None):
    """:func:`ordering_check` in every group (e.g. every configuration) at once.

    ``groups`` maps a label to the per-run differences of that group. Value: the smallest over
    the groups of (mean difference - its Student-t tolerance); passes when it exceeds ``margin``,
    i.e. when every group on its own is significant evidence of the ordering. A group without
    values (or with NaN) fails the check.
    """
    parts, worst, ok = [], float("inf"), True
    for label, diffs in groups.items():
        c = ordering_check(str(label), diffs, 0.0, source=source, reason=reason, alpha=alpha)
        bound = float(c.threshold.split()[-1])
        excess = c.value - bound if c.value == c.value else float("nan")
        ok &= excess == excess
        worst = min(worst, excess) if excess == excess else worst
        parts.append(f"{label}: {c.value:.3g} (tol {bound:.2g})")
    value = worst if ok and groups else float("nan")
    why = (f"{reason}; in every group the mean paired difference minus its one-sided Student-t tolerance (level "
           f"{ALPHA if alpha is None else alpha:g}) must exceed the margin {margin:g}")
    return check(name, value, ">", margin, (detail + "; " if detail else "") + ", ".join(parts), source=source,
                 reason=why, kind="qualitative")



def every_run_check(name: str, diffs, min_runs: int = 3, detail: str = "", *, source: str, reason: str):
    """A qualitative ordering "A exceeds B in every run" on per-run paired differences ``diffs (R,)``.

    For claims about each run's trajectory when only a few runs have the comparator: value = the
    smallest difference, passes when it is > 0 in every one of at least ``min_runs`` runs (a random
    ordering passes with probability 2^-R). Fewer runs, or a NaN, fail the check.
    """
    vals = np.asarray(diffs, dtype=float).ravel()
    R = vals.size
    value = float(vals.min()) if R >= min_runs and np.all(np.isfinite(vals)) else float("nan")
    why = (f"{reason}; an ordering in every run (no tolerance): at least {min_runs} runs, where a random ordering passes "
           f"with probability 2^-R")
    return check(name, value, ">", 0.0, (detail + "; " if detail else "") + f"{R} runs"
                 + (f", mean {vals.mean():.4g}" if R else ""), source=source, reason=why, kind="qualitative")


def uncertified(frame, prefix: str, norm: str = "fro"):
    """Rows (bool Series) of ``frame`` whose solve ``prefix`` is used but not certified.

    Reads the stored ``{prefix}_used``, ``{prefix}_certified``, ``{prefix}_status``,
    ``{prefix}_violation`` and ``{prefix}_gap`` columns: a used solve counts as certified only if
    its flag is set, its status is "optimal" and its relative violation and gap meet the package's
    thresholds (:data:`attnsvm.svm.solution.CERTIFIED_VIOLATION` / ``CERTIFIED_GAP``; NaN fails).
    """
    from ..svm.solution import CERTIFIED_GAP, CERTIFIED_VIOLATION

    import pandas as pd

    used = frame[f"{prefix}_used"].astype(bool) if f"{prefix}_used" in frame else pd.Series(True, index=frame.index)
    status_ok = frame[f"{prefix}_status"].astype(str).str.split(",").map(lambda s: set(s) == {"optimal"})
    viol, gap = frame[f"{prefix}_violation"].astype(float), frame[f"{prefix}_gap"].astype(float)
    ok = (frame[f"{prefix}_certified"].astype(bool) & status_ok & (viol <= CERTIFIED_VIOLATION)
          & (gap <= CERTIFIED_GAP.get(norm, CERTIFIED_GAP["fro"])))
    return used & ~ok
