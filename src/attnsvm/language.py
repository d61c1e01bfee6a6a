"""The synthetic language of causal language modeling: a sparse Markov chain, its sequences and data.

Spec ``causal-language-modeling.md`` (the anonymous paper "On the similarity between
attention and SVM on the token separation and selection behavior", a withdrawn ICLR 2024 submission, OpenReview forum
1Yq7zIOfj0); choices marked [OURS]
there are the fields of ``attnsvm.experiments.lm.common.LanguageFields``. A random sparse Markov chain over V token
types (each context has ``successors`` likely next types with Dirichlet weights, order 1
or 2) with random unit embeddings ``E (V, d)``; seeded and deterministic.

Indexing: position k = 0..n-1; the prefix ending at k (tokens 0..k, query ``a_k``) predicts
token k+1, so positions 0..n-2 carry a target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm.errors import ValidationError

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


def cycle_language(V: int = 16, d: int = 100, *, rho: float = 0.4, seed: int = 0) -> MarkovLanguage:
    """A deterministic cycle language whose prefixes meet Assumption 3.10 / Theorem 3.15 by construction.

    The chain follows one random cycle ``f`` through all V types (``successors = 1``: the next type is
    ``f(q)`` of the last type q; random start type). The unit embeddings have the Gram matrix
    ``E E^T = I + rho (P + P^T)`` (``P`` the cycle's permutation: ``<e_q, e_{f(q)}> = rho``, every other pair
    orthogonal; positive definite for ``rho < 1/2``, so ``d >= V`` is needed). With the tied head ``H = E^T``,
    a token of type u alone gives the logits ``z = G[:, u]``, so for the target ``y = f(q)`` of a prefix
    ending at q:

    * the query token q scores best (``z_y = rho`` with label +1);
    * every other type u with ``u, f(u) != y`` gives the *same* logits up to a relabelling of the types
      that leaves the loss unchanged: the non-optimal scores tie exactly (Theorem 3.15 with delta = 0),
      whenever the prefix holds neither y nor ``f(y)``, i.e. for sequences of length ``n <= V - 1``;
    * the hard-margin Att-SVM is feasible: the target is a function of the query type and the
      embeddings are linearly independent.

    Parameters
    ----------
    V : number of token types (>= 3); d : embedding dimension (>= V); rho : in (0, 1/2); seed : int

    Returns
    -------
    MarkovLanguage with ``order = 1``, ``successors = 1``, ``trans1 (V, V)`` the cycle, ``E (V, d)``.
    """
    if V < 3:
        raise ValidationError(f"V must be >= 3 (a cycle whose neighbours differ), got {V}")
    if d < V:
        raise ValidationError(f"d must be >= V = {V} (linearly independent embeddings), got {d}")
    if not 0 < rho < 0.5:
        raise ValidationError(f"rho must lie in (0, 1/2) (positive definite Gram matrix), got {rho}")
    g = np.random.default_rng(np.random.SeedSequence([int(seed), V, 23]))
    order = g.permutation(V)
    succ = np.empty(V, dtype=np.int64)
    succ[order] = np.roll(order, -1)                    # f(order[i]) = order[i + 1]
    trans1 = np.zeros((V, V))
    trans1[np.arange(V), succ] = 1.0
    P = trans1.T                                        # P[f(u), u] = 1
    G = np.eye(V) + rho * (P + P.T)
    L = np.linalg.cholesky(G)                           # G = L L^T
    ge = np.random.default_rng(np.random.SeedSequence([int(seed), V, d, 29]))
    Q, _ = np.linalg.qr(ge.standard_normal((d, V)))     # (d, V) orthonormal columns
    E = L @ Q.T                                         # (V, d): E E^T = L L^T = G, unit rows
    return MarkovLanguage(V, d, 1, 1, np.full(V, 1.0 / V), trans1, None, E, int(seed))


def scaled_cycle_language(V: int = 16, d: int = 100, *, rho: float = 0.4, eps: float = 0.0,
                          seed: int = 0) -> MarkovLanguage:
    """The cycle language of :func:`cycle_language` with the embedding of type u scaled by ``1 + eps r_u``.

    ``r (V,)`` is drawn uniformly from [-1, 1] (seeded by ``seed`` and V only, so the languages of one seed at
    different ``eps`` share the cycle, the embedding directions and ``r``: a family in ``eps``). The Gram matrix
    becomes ``S (I + rho (P + P^T)) S`` with ``S = diag(1 + eps r)``: the same pairs are orthogonal, so the query
    token still carries the only logit of the target among the prefix tokens, but a token of type u alone now
    gives logits that depend on ``s_u`` and its cycle neighbours' scales, and the non-optimal scores no longer tie
    (``eps = 0``: exactly :func:`cycle_language`, exact ties). How far apart they are for a sequence length is
    measured by :func:`attnsvm.svm.language.language_score_spread`; :func:`attnsvm.svm.language.near_tie_language`
    picks ``eps`` for a wanted spread delta (Theorem 3.15 of the causal-LM paper).

    Parameters
    ----------
    V, d, rho, seed : as :func:`cycle_language`
    eps : scale perturbation in [0, 1) (the scales ``1 + eps r_u`` stay positive, the Gram matrix positive definite)

    Returns
    -------
    MarkovLanguage with ``E (V, d)`` rows of norm ``1 + eps r_u``; ``trans1 (V, V)`` the cycle of
    :func:`cycle_language` (same ``seed``).
    """
    if not 0 <= eps < 1:
        raise ValidationError(f"eps must lie in [0, 1) (positive embedding scales), got {eps}")
    base = cycle_language(V, d, rho=rho, seed=seed)
    r = np.random.default_rng(np.random.SeedSequence([int(seed), V, 31])).uniform(-1.0, 1.0, V)
    E = (1.0 + float(eps) * r)[:, None] * base.E
    return MarkovLanguage(V, d, 1, 1, base.start, base.trans1, None, E, int(seed))


def chain_sequences(lang: MarkovLanguage, n: int) -> np.ndarray:
    """Every sequence of length ``n`` a deterministic order-1 chain emits: one per start type, shape (V, n) int64.

    The chain must have ``order = 1`` and one successor per type (every row of ``trans1`` one-hot), as
    :func:`cycle_language` and :func:`scaled_cycle_language`; row u starts at type u.
    """
    if lang.order != 1 or not np.all(np.isclose(lang.trans1.max(1), 1.0)):
        raise ValidationError("chain_sequences needs a deterministic order-1 chain (one successor per type)")
    if n < 2:
        raise ValidationError(f"need sequences of length n >= 2, got n = {n}")
    succ = lang.trans1.argmax(1)
    out = np.empty((lang.V, n), dtype=np.int64)
    out[:, 0] = np.arange(lang.V)
    for j in range(1, n):
        out[:, j] = succ[out[:, j - 1]]
    return out


def lm_data_of(lang: MarkovLanguage, tokens, scale: float = 1.0) -> LMData:
    """:class:`LMData` of given sequences ``tokens (m, n)`` of the language (as :func:`make_lm_data` builds them)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    targets = np.full(tokens.shape, -1, dtype=np.int64)
    targets[:, :-1] = tokens[:, 1:]
    return LMData(tokens, scale * lang.E[tokens], targets, lang.E.copy())


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
    return lm_data_of(lang, lang.sample(m, n, seed), scale)


#: the per-position losses of the causal language model
LM_LOSSES = ("logistic", "cross_entropy", "l2")


def token_loss(Z, y, loss: str):
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
    raise ValidationError(f"loss must be one of {', '.join(LM_LOSSES)}, got {loss!r}")
