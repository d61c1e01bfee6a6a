"""Null heads: bilinear heads with a probed head's spectrum that are not fitted to any margin.

A head's selections are the top tokens of its own bilinear scores ``x~_t^T W_h z``, so *any*
key-query matrix W separates its own selections and agrees with their Gen-SVM more than random
selections do. The question the probe asks is whether W_h agrees with the SVM of its selections
more than a bilinear head of the same spectrum does with the SVM of *its* selections. A null head
``W_r = U diag(s_h) V^T`` (key on the left, as :meth:`PretrainedTransformer.head_weights`) has

* ``s_h``: the head's nonzero singular values (its numerical rank r, at most m + 1);
* **spectrum null** (:func:`spectrum_null`, the verdict's with ``null_kind="spectrum"``, else drawn beside the
  default sink null below, descriptive): Haar-random singular
  vectors respecting the head's structure in the bias-augmented space: the key side's constant
  coordinate is a zero row of W_h, so U (d+1, r) is Haar on the first d coordinates with a zero
  last row; the query side V (d+1, r) is Haar over all d + 1 coordinates;
* **structured null** (:func:`structured_null`, reported and used in calibration): the same spectrum
  with singular vectors Haar inside the top principal subspaces of the layer's token states
  (:func:`principal_bases`): a data-aligned head that is not fitted to any margin.

A null head acts on the same token states and queries and selects by the real head's rule
applied to its own attention (``softmax`` of its scores over the candidates, weights >= the
threshold plus the argmax: :func:`own_selection`), so an untouched random head is exactly one more
draw of its null. Matching the real head's set sizes instead (each null's own top-``|O_i|`` tokens,
:func:`top_selection`, ``threshold=None``) is *not* exchangeable: the real head's sets end where its
attention drops, a null's top-``|O_i|`` set anywhere, and on random-weight models the untouched heads then
scored above their nulls (KS p 0.0015 over 24 heads; the own rule: 0.92, tests/test_probe_calibration.py).
Draw j of head h in layer l comes from :func:`null_rng` ``(seed, layer, head, j)`` only, so a row
depends neither on the order, the process nor the other heads.

**Sink null** (:func:`sink_null`, kind ``"sink"``): the head's own W with its query side rotated about the
unit mean query ``mu`` (:func:`mean_query_direction`, bias-augmented, so its constant coordinate is included):
``W_r = W R``, R Haar on the orthogonal matrices with ``R mu = mu``. Split ``W = W mu mu^T + W (I - mu mu^T)``:
the first term is the head's *query-independent* part, the key preference ``W mu`` it applies (scaled by
``mu^T z``) to every query -- the source of attention sinks such as [CLS] in encoders and position 0 / BOS in
decoders; the second is the *query-dependent* rest. ``W R mu = W mu`` keeps the first exactly, the key side
(W's column space and left singular vectors) and the spectrum stay too, and the rest is rotated at random
inside ``mu``'s orthogonal complement. *Exchangeability*: let ``G_mu = {R orthogonal: R mu = mu}`` (mu a
function of the layer's states only). If the head's W, given the layer's token states and queries, has the
same law as ``W R`` for every R in ``G_mu``, then ``W, W R_1, ..., W R_K`` (R_j i.i.d. Haar on ``G_mu``) are
exchangeable given the states (with ``R_0`` Haar, ``(W, W R_j) =d (W R_0, W R_0 R_j)`` and ``R_0, R_0 R_j``
are i.i.d. Haar), hence so are their statistics, and the predictive-t p-value is calibrated as far as the
statistics are normal. This holds for a random-weight head (Gaussian query weights and bias: ``W =d W R`` for
every orthogonal R, its layer's states depend only on the layers below) *and for a random head plus any
planted sink* ``c k mu^T`` (``(W + c k mu^T) R = W R + c k mu^T``); the spectrum null is exact for the first but
not the second (a data-aligned sink is not invariant under Haar U, V), so it calls sink-plus-random heads
beyond or below their nulls (tests/test_probe_calibration.py). The sink null therefore asks whether the
head's *query-dependent* part agrees with the SVM of its selections beyond a random rotation of it that
keeps everything the queries share. Against the structured null (data-aligned singular vectors, not the
head's own: a sink only by chance) and the transplant null (another trained head, with *its* sink, on these
states: descriptive) it keeps this head's sink and key side exactly and randomizes only what the sink
leaves.

**The sink null of a rotary head** (Llama, GPT-NeoX; probed in its post-rotary query-key space, where
``W_h = diag(1, ..., 1, 0) / sqrt(m)`` is fixed and the head's weights sit inside its keys and queries): the argument
above fails for ``W_h R``. W_h is no random draw (``W_h R`` has a nonzero last column where W_h's is zero), and the
law of a random head's post-rotary queries ``R_(p_i) q_i`` is invariant only under the rotations of the head space
that commute with every position's rotation (2 x 2 rotations within each frequency pair, any rotation of the
unrotated coordinates), of which those fixing the mean query leave little or nothing (Llama: nothing). Measured on
random-weight heads (benchmarks/rotary_sink_null.py, 5 models, m = 16): Llama heads sat above such nulls (KS p 0.005
over 120 heads, mean z 0.33). A rotary head's sink null therefore rotates what its query reads
(:func:`sink_query_states`, used when the inputs carry the head's :class:`~attnsvm.real.layer.QueryMap`): the
bias-augmented states ``S_i`` of the query tokens (the states entering the layer) about their mean, ``S_i -> R S_i``,
R Haar on the orthogonal matrices of the d state coordinates that fix the mean state (and the constant
coordinate), and each null is solved on its own queries ``(R_(p_i) A R S_i, 1)`` (``A = [W_Q^T | b_Q]``, ``R_(p_i)``
the rotation of the query's position) with the same W_h and keys. ``A R`` keeps A's action on the mean query state
and the bias: the key preference the head applies to every query at each position, where a rotary head's BOS or
position-0 sink lives. *Exchangeability* as above with A in place of W: given the states entering the layer and the
keys (W_K, independent of W_Q), a random head's W_Q has i.i.d. Gaussian entries, so ``A R =d A`` for every R of the
group (R a function of the states), whatever the bias (Llama has none) and with any planted sink ``c u mu^T`` in A
(``(A + c u mu^T) R = A R + c u mu^T``, mu the unit mean query state). Unlike the non-rotary sink null, R fixes the
constant coordinate: a rotation mixing it into the states would give a bias-free head's nulls a query bias.

**Transplant null** (:func:`transplant_heads`, descriptive only: it never enters the p-values nor the
Benjamini-Yekutieli step): other heads of the same model, their key-query matrices ``W_{l', h'}``
(:meth:`PretrainedTransformer.head_weights`, with their own score scale) applied to *this* layer's token
states and queries, selecting by the same rule. A transplanted head therefore reads the states as this
layer presents them: for a GPT-2-like decoder, the output of this layer's ``ln_1`` (its gain and bias),
not the layer norm of the head's own layer; for BERT-like encoders the hidden states entering this layer
(no normalization before attention). It asks whether a *trained* head of the same model, not fitted to
these states, agrees with the SVM of its selections as well as the head does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.real.layer import LayerInputs, corr, margin_ratio, summary
from attnsvm.real.verdict import check_statistic, null_columns

@dataclass(frozen=True)
class NullKind:
    """One kind of null head, as the probe draws it (:data:`NULLS`).

    Attributes
    ----------
    name : the kind's name (``--null-kind``, the ``kind`` of a draw, the ``null_kind`` column)
    tag : the last word of its draws' generator seed (:func:`null_rng`), distinct per kind
    prepare : ``prepare(inputs, W_h, s) -> state``, once per head and call: what every draw of the head shares
        (``inputs`` the layer's :class:`~attnsvm.real.layer.LayerInputs`, ``W_h (D, D)``, ``s (r,)`` its spectrum)
    draw : ``draw(state, rng) -> W_r (D, D)``, one null head from the draw's generator; or ``(W_r, Z_r)``, a null
        head with its own queries ``Z_r (m, D)`` on the layer's tokens (a rotary head's sink null)
    verdict : whether a verdict may use it (``probe_heads(null_kind=)``); the others are descriptive
    summary : one line on what it keeps of the head and what it randomizes (``--help``, legends, checks)
    legend : the line a table's legend adds when the verdict uses it ("" for none)
    """

    name: str
    tag: int
    prepare: Callable
    draw: Callable
    verdict: bool
    summary: str
    legend: str = ""


#: the registered null kinds by name (:func:`register_null`); the module's own are below
NULLS: dict[str, NullKind] = {}


def register_null(kind: NullKind) -> NullKind:
    """Add ``kind`` to :data:`NULLS` (a name or generator tag already taken is a ValidationError): every reader of the
    registry -- :func:`null_heads`, :func:`null_rng`, the probe's settings and columns -- then knows it."""
    if kind.name in NULLS or kind.name == "transplant":
        raise ValidationError(f"null kind {kind.name!r} is already registered")
    if kind.tag in {k.tag for k in NULLS.values()} | {_TRANSPLANT_TAG}:
        raise ValidationError(f"null kind {kind.name!r}: generator tag {kind.tag} is already taken")
    NULLS[kind.name] = kind
    return kind


def verdict_null_kinds() -> tuple:
    """The registered kinds a verdict may use, in registration order (the default, "sink", is
    :class:`attnsvm.real.probe_config.ProbeConfig`'s, not the first)."""
    return tuple(k for k, v in NULLS.items() if v.verdict)


#: the generator tag of the transplant null's choice of source heads (not a drawn null: no registry entry)
_TRANSPLANT_TAG = 3
#: null heads of the verdict's kind (sink by default) per probed head by default (``probe_heads(null_draws=...)``,
#: ``attnsvm probe --null-draws``)
NULL_DRAWS = 8
#: how a null head selects: "threshold" (its own attention >= the probe's threshold, plus the argmax: the
#: real head's rule, so an untouched random head is exchangeable with its nulls; the default) or "matched"
#: (its own top-``|O_i|`` tokens, ``|O_i|`` the real head's set sizes)
NULL_SELECTIONS = ("threshold", "matched")


def null_rng(seed: int, layer: int, head: int, draw: int, kind: str = "spectrum") -> np.random.Generator:
    """The generator of one null draw: seeded by ``(seed, layer, head, draw, kind)`` only (a stream
    distinct from :func:`attnsvm.real.probe_steps.baseline_rng`'s, which has three words of entropy)."""
    tag = _TRANSPLANT_TAG if kind == "transplant" else NULLS[kind].tag if kind in NULLS else None
    if tag is None:
        raise ValidationError(f"kind must be one of {tuple(NULLS) + ('transplant',)}, got {kind!r}")
    return np.random.default_rng([int(seed) % (1 << 64), int(layer), int(head), int(draw), tag])


def haar_frame(rng: np.random.Generator, n: int, r: int) -> np.ndarray:
    """(n, r) orthonormal columns, Haar-distributed (QR of a Gaussian with the signs of R's diagonal fixed)."""
    if not 0 <= r <= n:
        raise ValidationError(f"r must lie in [0, n] = [0, {n}], got {r}")
    G = rng.standard_normal((n, r))
    Q, R = np.linalg.qr(G)
    sign = np.sign(np.diag(R))
    sign[sign == 0] = 1.0
    return Q * sign[None, :]


def head_spectrum(W: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """The nonzero singular values of ``W (D, D)`` (those above ``rtol`` times the largest), descending: (r,)."""
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or not np.all(np.isfinite(W)):
        raise ValidationError(f"W must be a finite square (D, D) matrix, got shape {W.shape}")
    s = np.linalg.svd(W, compute_uv=False)
    return s[s > rtol * s[0]] if s.size and s[0] > 0 else s[:0]


def spectrum_null(s: np.ndarray, D: int, rng: np.random.Generator) -> np.ndarray:
    """One spectrum null head: ``W_r (D, D) = U diag(s) V^T`` with U Haar on the first D - 1
    coordinates (last row zero: the key side's constant coordinate) and V Haar on all D.

    Parameters
    ----------
    s : (r,) singular values (:func:`head_spectrum`), r <= D - 1
    D : d + 1, the bias-augmented dimension
    rng : the draw's generator (:func:`null_rng`)
    """
    s = np.asarray(s, dtype=np.float64)
    r = s.shape[0]
    if r > D - 1:
        raise ValidationError(f"s must have at most D - 1 = {D - 1} values, got {r}")
    U = np.zeros((D, r))
    U[: D - 1] = haar_frame(rng, D - 1, r)
    V = haar_frame(rng, D, r)
    return (U * s[None, :]) @ V.T


def mean_query_direction(Z: np.ndarray) -> np.ndarray:
    """The unit mean query ``mu (D,) = mean_i z_i / ||mean_i z_i||`` of the bias-augmented queries ``Z (m, D)``
    (float64; their constant coordinate included, so the mean of real queries is never zero)."""
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] < 1 or not np.all(np.isfinite(Z)):
        raise ValidationError(f"Z must be a finite (m, D) array of queries with m >= 1, got shape {Z.shape}")
    zbar = Z.mean(axis=0)
    nz = np.linalg.norm(zbar)
    if not nz > 0:
        raise ValidationError("Z must have a nonzero mean query (bias-augmented queries have a constant coordinate 1)")
    return zbar / nz


def sink_null(W: np.ndarray, mu: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One sink null head ``W_r (D, D) = W R``: R a Haar-random orthogonal matrix of the query space that fixes
    ``mu`` (see the module docstring: ``W_r mu = W mu`` exactly, the same spectrum and key side).

    ``R = mu mu^T + B Q B^T`` with ``B (D, D - 1)`` an orthonormal basis of ``mu``'s orthogonal complement and Q
    Haar on O(D - 1) (:func:`haar_frame`); float64.

    Parameters
    ----------
    W : (D, D) the head's bias-augmented key-query matrix (key on the left)
    mu : (D,) a unit vector, the mean query direction (:func:`mean_query_direction`)
    rng : the draw's generator (:func:`null_rng` of kind "sink")
    """
    W = np.asarray(W, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or not np.all(np.isfinite(W)):
        raise ValidationError(f"W must be a finite square (D, D) matrix, got shape {W.shape}")
    D = W.shape[0]
    if mu.shape != (D,) or not np.all(np.isfinite(mu)) or abs(np.linalg.norm(mu) - 1.0) > 1e-9:
        raise ValidationError(f"mu must be a unit vector of shape (D,) = ({D},), got shape {mu.shape}")
    B = np.linalg.qr(mu[:, None], mode="complete")[0][:, 1:]  # (D, D - 1), orthonormal, orthogonal to mu
    Q = haar_frame(rng, D - 1, D - 1)
    Wmu = W @ mu
    return np.outer(Wmu, mu) + ((W @ B) @ Q) @ B.T


def sink_query_states(S: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A rotary head's sink null (see the module docstring): its query tokens' states rotated at random about their
    mean, ``S R^T``, R Haar on the orthogonal matrices of the d state coordinates that fix the mean state, the
    constant coordinate untouched (so ``R`` fixes the unit mean query of :func:`mean_query_direction` too).

    ``R = u u^T + B Q B^T`` on the first d coordinates, u the unit mean of ``S[:, :d]``, ``B (d, d - 1)`` an
    orthonormal basis of its orthogonal complement, Q Haar on O(d - 1) (:func:`haar_frame`); float64.

    Parameters
    ----------
    S : (m, d + 1) bias-augmented states of each sentence's query token (last coordinate 1), d >= 1
    rng : the draw's generator (:func:`null_rng` of kind "sink")

    Returns
    -------
    (m, d + 1) the rotated states (last coordinate as in S)
    """
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] < 1 or S.shape[1] < 2 or not np.all(np.isfinite(S)):
        raise ValidationError(f"S must be a finite (m, d + 1) array of query states with m, d >= 1, got shape "
                              f"{S.shape}")
    xbar = S[:, :-1].mean(axis=0)
    nx = np.linalg.norm(xbar)
    if not nx > 0:
        raise ValidationError("S must have a nonzero mean query state")
    d = xbar.size
    B = np.linalg.qr((xbar / nx)[:, None], mode="complete")[0][:, 1:]  # (d, d - 1), orthogonal to the mean
    Q = haar_frame(rng, d - 1, d - 1)
    out = S.copy()
    X = S[:, :-1]
    out[:, :-1] = np.outer(X @ xbar, xbar) / nx ** 2 + ((X @ B) @ Q.T) @ B.T
    return out


def _sink_prepare(inputs: LayerInputs, W_h: np.ndarray, s: np.ndarray):
    """What every sink null draw of a head shares: ``(W_h, mu)`` (:func:`sink_null`), or for a rotary head
    (``inputs.query_map``) ``(W_h, query_map)`` (:func:`sink_query_states`)."""
    W = np.asarray(W_h, dtype=np.float64)
    if inputs.query_map is not None:
        return W, inputs.query_map
    return W, mean_query_direction(inputs.Z)


def _sink_draw(state, rng: np.random.Generator):
    """One sink null head: ``W_h R`` (:func:`sink_null`), or for a rotary head ``(W_h, Z_r)``, its own queries of
    the rotated query states (:func:`sink_query_states`, :meth:`attnsvm.real.layer.QueryMap.queries`)."""
    W, what = state
    if isinstance(what, np.ndarray):
        return sink_null(W, what, rng)
    return W, what.queries(sink_query_states(what.S, rng))


def query_split(W: np.ndarray, X: np.ndarray, Z: np.ndarray, cand: np.ndarray, mu: np.ndarray | None = None) -> dict:
    """How much of a head's scores is query-independent, and the sink it gives position 0.

    The scores ``x_t^T W z_i`` split into ``x_t^T W mu (mu^T z_i)`` (the query-independent part, W's action on
    the mean query direction mu) and the rest; softmax ignores a per-query constant, so each part is centred over
    the query's candidates first.

    Parameters
    ----------
    W : (D, D) the head's key-query matrix (key on the left)
    X : (m, T, D) bias-augmented tokens; Z : (m, D) the queries; cand : (m, T) bool, the candidates
    mu : (D,) the unit mean query (default :func:`mean_query_direction` ``(Z)``)

    Returns
    -------
    dict ``qi_share``: ``||S0||^2 / (||S0||^2 + ||S1||^2)`` of the centred parts S0 (query-independent) and S1 (the
    rest) over all candidates, in [0, 1] (0 when both are zero); ``qi_first_logit``: the mean over queries of the
    query-independent score of position 0 minus the mean of the other candidates' (0 where position 0 is the only
    candidate)
    """
    W = np.asarray(W, dtype=np.float64)
    X, Z, cand = np.asarray(X, dtype=np.float64), np.asarray(Z, dtype=np.float64), np.asarray(cand, bool)
    mu = mean_query_direction(Z) if mu is None else np.asarray(mu, dtype=np.float64)
    s0 = np.einsum("ntd,d->nt", X, W @ mu) * (Z @ mu)[:, None]  # (m, T)
    s = np.einsum("ntd,nd->nt", X, Z @ W.T)
    k = np.maximum(cand.sum(axis=1, keepdims=True), 1)
    c0 = np.where(cand, s0 - np.where(cand, s0, 0).sum(axis=1, keepdims=True) / k, 0.0)
    c = np.where(cand, s - np.where(cand, s, 0).sum(axis=1, keepdims=True) / k, 0.0)
    a, b = float(np.sum(c0 ** 2)), float(np.sum((c - c0) ** 2))
    others = cand.copy()
    others[:, 0] = False
    n_o = others.sum(axis=1)
    adv = s0[:, 0] - np.where(others, s0, 0).sum(axis=1) / np.maximum(n_o, 1)
    return {"qi_share": a / (a + b) if a + b > 0 else 0.0,
            "qi_first_logit": float(np.mean(np.where((n_o > 0) & cand[:, 0], adv, 0.0)))}


def principal_bases(X: np.ndarray, mask: np.ndarray, Z: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k principal subspaces of a layer's token states, for :func:`structured_null`.

    Parameters
    ----------
    X : (n, T, D) bias-augmented token states (last coordinate 1 on real tokens)
    mask : (n, T) bool, the real tokens
    Z : (n, D) the queries
    k : subspace dimension (clipped to what the data spans)

    Returns
    -------
    key_basis : (D, k1) orthonormal, last row zero: the top right singular vectors of the centred
        real tokens' first D - 1 coordinates (the directions token differences vary along)
    query_basis : (D, k2) orthonormal: the top right singular vectors of the (uncentred, augmented)
        queries (their constant coordinate included)
    """
    toks = np.asarray(X, dtype=np.float64)[np.asarray(mask, bool)][:, :-1]
    D = toks.shape[1] + 1
    c = toks - toks.mean(axis=0, keepdims=True)
    _, sk, Vk = np.linalg.svd(c, full_matrices=False)
    k1 = int(min(k, np.sum(sk > 1e-10 * max(sk[0], 1e-300)))) if sk.size else 0
    key = np.zeros((D, k1))
    key[: D - 1] = Vk[:k1].T
    _, sq, Vq = np.linalg.svd(np.asarray(Z, dtype=np.float64), full_matrices=False)
    k2 = int(min(k, np.sum(sq > 1e-10 * max(sq[0], 1e-300)))) if sq.size else 0
    return key, Vq[:k2].T.copy()


def structured_null(s: np.ndarray, key_basis: np.ndarray, query_basis: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    """One structured null head ``W_r (D, D) = U diag(s) V^T`` with ``U = key_basis @ Haar`` and
    ``V = query_basis @ Haar`` (:func:`principal_bases`); ``s (r,)`` is truncated to the smaller
    subspace dimension if the data span fewer than r directions."""
    s = np.asarray(s, dtype=np.float64)
    r = min(s.shape[0], key_basis.shape[1], query_basis.shape[1])
    U = key_basis @ haar_frame(rng, key_basis.shape[1], r)
    V = query_basis @ haar_frame(rng, query_basis.shape[1], r)
    return (U * s[None, :r]) @ V.T


def select_tokens(att_rows: np.ndarray, mask: np.ndarray, threshold: float) -> np.ndarray:
    """Selected sets from attention rows.

    Parameters
    ----------
    att_rows : (..., n, T) attention of each sentence's query over its tokens
    mask : (n, T) real tokens
    threshold : a token is selected when its attention is >= threshold (the argmax always is)

    Returns
    -------
    selected : (..., n, T) bool
    """
    a = np.where(mask, att_rows, -1.0)
    sel = (a >= threshold) & mask
    am = a.argmax(axis=-1)
    np.put_along_axis(sel, am[..., None], True, axis=-1)
    return sel


def top_selection(scores: np.ndarray, sizes: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each sentence's top ``sizes[i]`` tokens among ``mask`` by ``scores``: (..., n, T) bool.

    The rule of :func:`attnsvm.real.probe_steps.random_like` (which applies it to uniform scores): rank the
    candidates by decreasing score (padding last), keep the first ``sizes`` of them.

    Parameters
    ----------
    scores : (..., n, T) float
    sizes : (..., n) int, 1 <= sizes <= the candidates of the sentence
    mask : (n, T) or (..., n, T) bool, the candidates
    """
    scores = np.where(mask, scores, -np.inf)
    order = np.argsort(-scores, axis=-1, kind="stable")
    ranks = np.argsort(order, axis=-1, kind="stable")
    return (ranks < np.asarray(sizes)[..., None]) & mask


def candidate_softmax(scores: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """A head's attention from its scores: ``softmax`` of ``scores (m, T)`` over the candidates ``cand (m, T)``
    (at least one per row), zero elsewhere: (m, T) float64."""
    s = np.where(cand, scores, -np.inf)
    a = np.exp(s - s.max(axis=-1, keepdims=True))
    return a / a.sum(axis=-1, keepdims=True)


def own_selection(scores: np.ndarray, cand: np.ndarray, threshold: float) -> np.ndarray:
    """A head's selections by its own attention: ``softmax`` of ``scores (m, T)`` over the candidates
    ``cand (m, T)`` (:func:`candidate_softmax`), tokens with weight >= ``threshold`` plus the argmax
    (:func:`select_tokens`): (m, T) bool."""
    return select_tokens(candidate_softmax(scores, cand), cand, threshold)


def null_heads(inputs: LayerInputs, W_h: np.ndarray, sizes: np.ndarray, *, seed: int, layer: int, head: int,
               draws: int, kind: str = "spectrum", start: int = 0, threshold: float | None = None,
               spectrum: np.ndarray | None = None, **solver_options) -> list[dict]:
    """Null heads number ``start`` to ``start + draws - 1`` of one head and the agreement of each with the SVM of its
    own selections.

    Parameters
    ----------
    inputs : the layer's SVM sentences (:class:`attnsvm.real.layer.LayerInputs`, m sentences)
    W_h : (D, D) the head's key-query matrix (key on the left, last row zero)
    sizes : (m,) int, the head's selection size |O_i| in each SVM sentence
    seed, layer, head : the draws' generators (:func:`null_rng`)
    kind : "spectrum", "structured" (singular vectors inside the top 2r principal directions of
        the layer's tokens and queries, :func:`principal_bases`) or "sink" (``W_h R``, R a Haar rotation of the
        query space fixing the unit mean query of these m sentences, :func:`sink_null`; ``spectrum`` unused)
    threshold : None: each null selects its own top-``sizes`` tokens ("matched"); a float: each null selects
        by its own attention, >= threshold plus the argmax (:func:`own_selection`, "threshold": the real
        head's rule; ``sizes`` is then only validated)
    spectrum : (r,) ``head_spectrum(W_h)`` when the caller has it (one SVD per head instead of one per call,
        for draws made one at a time); None: computed here
    **solver_options : passed to :meth:`LayerInputs.svm`

    Returns
    -------
    list of dicts ``{"draw", "kind", "status", "corr_restricted", "margin_ratio", "mean_selected", "seconds"}``
    (``margin_ratio``: :func:`attnsvm.real.layer.margin_ratio` of the null's W on its own selections against their
    SVM, exactly as the probe computes the head's); a draw whose SVM is not certified (or selects every candidate,
    W = 0) has both NaN (dropped).
    """
    if kind not in NULLS:
        raise ValidationError(f"kind must be one of {tuple(NULLS)}, got {kind!r}")
    if isinstance(draws, (bool, np.bool_)) or not isinstance(draws, (int, np.integer)) or draws < 0:
        raise ValidationError(f"draws must be an integer >= 0, got {draws!r}")
    sizes = np.asarray(sizes)
    if sizes.shape != (inputs.m,) or np.any(sizes < 1) or np.any(sizes > inputs.cand.sum(axis=1)):
        raise ValidationError(f"sizes must be (m,) = ({inputs.m},) integers in [1, candidates of the sentence]")
    D = inputs.X.shape[2]
    if spectrum is None:
        s = head_spectrum(W_h)
    else:
        s = np.asarray(spectrum, dtype=np.float64)
        if s.ndim != 1 or s.size > D - 1 or not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise ValidationError(f"spectrum must be the head's (r,) positive singular values, r <= D - 1 = {D - 1}")
    null = NULLS[kind]
    state = null.prepare(inputs, W_h, s)
    out = []
    for j in range(int(start), int(start) + int(draws)):
        Wr, own = null.draw(state, null_rng(seed, layer, head, j, kind)), inputs
        if isinstance(Wr, tuple):  # a null head with its own queries (a rotary head's sink null)
            Wr, own = Wr[0], inputs.with_queries(Wr[1])
        out.append({"draw": j, "kind": kind, **_bilinear_draw(own, Wr, sizes, threshold, solver_options)})
    return out


def _bilinear_draw(inputs: LayerInputs, Wr: np.ndarray, sizes, threshold, solver_options) -> dict:
    """One bilinear head ``Wr (D, D)`` on the layer's SVM sentences: its selections (own top-``sizes`` or own
    attention >= ``threshold``), their SVM, ``corr_restricted`` and ``margin_ratio`` (NaN when not certified or
    every candidate is selected)."""
    sc = inputs.scores(Wr)
    sel = top_selection(sc, sizes, inputs.cand) if threshold is None else own_selection(sc, inputs.cand, threshold)
    every = bool((sel == inputs.cand).all())  # all candidates selected: no margin row, W = 0
    sol = summary(inputs.svm(sel, **solver_options))
    R = inputs.restrict(Wr)
    return {"status": "all selected" if every else sol["status"],
            "corr_restricted": float("nan") if every else corr(R, sol["W"]),
            "margin_ratio": float("nan") if every else margin_ratio(sc, sel, inputs.cand, R, sol["W"]),
            "mean_selected": float(sel.sum(axis=1).mean()), "seconds": sol["seconds"]}


def transplant_heads(inputs: LayerInputs, sources: list, sizes: np.ndarray, *, threshold: float | None = None,
                     **solver_options) -> list[dict]:
    """Other heads applied to this layer's states, each against the SVM of its own selections.

    Descriptive only (see the module docstring): each ``(label, W)`` of ``sources``, ``W: (D, D)``,
    acts on this layer's SVM sentences and selects like a null head (``threshold`` and ``sizes`` as in
    :func:`null_heads`); the row gives the agreement of W with the SVM of its selections.

    Returns
    -------
    list of dicts ``{"draw", "kind": "transplant", "source", "status", "corr_restricted", "mean_selected",
    "seconds"}``, one per source, in order
    """
    sizes = np.asarray(sizes)
    if sizes.shape != (inputs.m,) or np.any(sizes < 1) or np.any(sizes > inputs.cand.sum(axis=1)):
        raise ValidationError(f"sizes must be (m,) = ({inputs.m},) integers in [1, candidates of the sentence]")
    D = inputs.X.shape[2]
    out = []
    for j, (label, W) in enumerate(sources):
        W = np.asarray(W, dtype=np.float64)
        if W.shape != (D, D):
            raise ValidationError(f"the transplanted head {label!r} must be (D, D) = ({D}, {D}), got {W.shape}")
        out.append({"draw": j, "kind": "transplant", "source": str(label),
                    **_bilinear_draw(inputs, W, sizes, threshold, solver_options)})
    return out


def head_against_nulls(inputs: LayerInputs, W: np.ndarray, sizes: np.ndarray, *, seed: int, layer: int, head: int,
                       draws: int, selected: np.ndarray | None = None, threshold: float | None = None,
                       kind: str = "spectrum", statistic: str = "corr_restricted", **solver_options) -> dict:
    """One bilinear head against its null heads of ``kind`` (:data:`NULL_KINDS`; default the spectrum null),
    without a model.

    ``W: (D, D)``; its selections are ``selected: (m, T)`` bool (default: its own top-``sizes`` tokens, as
    a null selects). Returns the agreement of W with the SVM of its selections, its margin ratio and
    :func:`attnsvm.real.verdict.null_columns` of ``statistic`` (:data:`attnsvm.real.verdict.STATISTICS`: the
    p-values before multiple testing; ``p_margin_ratio`` whatever the statistic). The calibration tests
    and ``benchmarks/planted_heads.py`` apply it to structured and partially planted heads.

    Returns
    -------
    dict with ``corr_restricted``, ``margin_ratio``, ``svm_status`` and the null columns
    """
    check_statistic(statistic)
    sizes = np.asarray(sizes)
    if selected is not None:
        sel = np.asarray(selected, bool)
    elif threshold is None:
        sel = top_selection(inputs.scores(W), sizes, inputs.cand)
    else:
        sel = own_selection(inputs.scores(W), inputs.cand, threshold)
    sol = summary(inputs.svm(sel, **solver_options))
    R = inputs.restrict(W)
    out = {"corr_restricted": corr(R, sol["W"]), "margin_ratio": margin_ratio(inputs.scores(W), sel, inputs.cand, R,
                                                                             sol["W"]), "svm_status": sol["status"]}
    out.update(null_columns(out[statistic], null_heads(inputs, W, sel.sum(axis=1), seed=seed, layer=layer, head=head,
                                                       draws=draws, threshold=threshold, kind=kind, **solver_options),
                            kind=kind, statistic=statistic, margin_ratio=out["margin_ratio"]))
    return out


# ---------------------------------------------------------------- the registered kinds
register_null(NullKind(
    "spectrum", 1, prepare=lambda inputs, W_h, s: (s, inputs.X.shape[2]),
    draw=lambda state, rng: spectrum_null(state[0], state[1], rng), verdict=True,
    summary="spectrum null heads (the head's singular values, Haar-random singular vectors, selecting by their own "
            "attention >= threshold)"))
register_null(NullKind(
    "structured", 2,
    prepare=lambda inputs, W_h, s: (s,) + principal_bases(inputs.X, inputs.cand, inputs.Z, 2 * max(s.size, 1)),
    draw=lambda state, rng: structured_null(*state, rng), verdict=False,
    summary="structured null heads (the head's singular values, singular vectors Haar inside the top principal "
            "subspaces of the layer's tokens and queries)"))
register_null(NullKind(
    "sink", 4, prepare=_sink_prepare, draw=_sink_draw, verdict=True,
    summary="sink null heads (the head's own W with its query side rotated at random about the mean query: its "
            "query-independent key preference, e.g. an attention sink on [CLS], kept exactly)",
    legend="null_kind sink: null_mean, p_upper, q_upper and the verdict are against sink null heads (the head's own W "
           "with its query side rotated at random about the mean query: its query-independent key preference, e.g. a "
           "[CLS] sink, kept exactly); spectrum_mean = the spectrum nulls' mean (descriptive); qi_share = the "
           "query-independent share of the head's scores, sel_first = share of queries selecting position 0."))

#: the registered kinds (:data:`NULLS`) at import
NULL_KINDS = tuple(NULLS)
#: the kinds a verdict can use (``probe_heads(null_kind=...)``, ``attnsvm probe --null-kind``; default "sink")
VERDICT_NULL_KINDS = verdict_null_kinds()
#: the kinds of :func:`null_rng` streams: the drawn nulls and the transplant's choice of source heads
RNG_KINDS = NULL_KINDS + ("transplant",)
