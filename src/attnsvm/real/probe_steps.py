"""The probe's steps as functions: what :func:`attnsvm.real.probe.probe_heads` and the stored probe's tasks
(:mod:`attnsvm.experiments.real.probe_run`) compose.

1. :func:`prepare_probe` -- validate the arguments, one forward pass (the per-process cache of
   :mod:`attnsvm.real.cache`) and the queries (:func:`choose_queries`, per family: a random word token,
   [CLS], every word token; causal decoders a random token at position >= 1 and its prefix);
2. :func:`layer_selections` -- a layer's attention rows, selections and per-head statistics (no SVM);
3. :func:`layer_inputs` / :func:`seq_layer_inputs` -- the layer's SVM sentences validated once
   (:class:`attnsvm.real.layer.LayerInputs`), shared by every head, baseline and null head of the layer;
4. :func:`head_task` -- one head's SVM, its random baselines and their correlations (a table row);
5. :func:`null_task` -- one head's null heads (:mod:`attnsvm.real.nulls`); the verdict over the probed
   heads is :func:`attnsvm.real.verdict.add_verdict` on the table;
6. :func:`view_arrays` -- what :mod:`attnsvm.real.probe_view` shows of the first sentences.

Every step depends only on its arguments (and the cached forward pass of the same model and text), so
a head's row is the same whichever heads are probed with it, in whichever order or process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.real import cache
from attnsvm.real.layer import LayerInputs, QueryMap, corr, corr_parts, margin_ratio, summary
from attnsvm.real.minilm import load_minilm, load_model
from attnsvm.real.pretrained import PretrainedTransformer, augment, check_sentences
from attnsvm.real.nulls import (
    candidate_softmax, head_spectrum, null_heads, query_split, select_tokens, top_selection, transplant_heads,
)
from attnsvm.real.sentences import check_seed, corpus_sentences
from attnsvm.real.verdict import check_statistic, stop_level, stop_reason, t_scale
from attnsvm.svm import seq_constraints, solve
from attnsvm.svm.analysis import row_basis
from attnsvm.svm.gen_ties import gen_contradictions

QUERIES = ("word", "cls", "all")
#: the largest difference allowed between a rotary head's attention computed from its post-rotary formulation
#: (:func:`rotary_tokens`) and the model's own attention, for a float64 and a float32 model (the model's softmax
#: runs in float32: its attention is exact to about 1e-7)
ROTARY_ATTENTION_TOL = {"float64": 1e-6, "float32": 1e-4}


def check_indices(values, upper: int, name: str) -> list:
    """``values`` (None: all of ``range(upper)``; an int or a list of ints in [0, upper)) as a sorted
    list without repeats; ValidationError naming ``name`` otherwise."""
    if values is None:
        return list(range(upper))
    if isinstance(values, (int, np.integer)):
        values = [values]
    out = []
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not 0 <= v < upper:
            raise ValidationError(f"{name} must be integers in [0, {upper - 1}], got {v!r}")
        out.append(int(v))
    if not out:
        raise ValidationError(f"{name} must not be empty")
    return sorted(set(out))


def random_like(selected: np.ndarray, mask: np.ndarray, rng) -> np.ndarray:
    """Random selections with the same size per sentence: (..., n, T) bool (the top
    ``|O_i|`` candidates by uniform scores, :func:`attnsvm.real.nulls.top_selection`)."""
    return top_selection(rng.random(selected.shape), selected.sum(axis=-1), mask)


def baseline_rng(seed: int, layer: int, head: int) -> np.random.Generator:
    """The generator of one head's random baseline selections: seeded by ``(seed, layer, head)`` only."""
    return np.random.default_rng([int(seed) % (1 << 64), int(layer), int(head)])


def baselines(sel: np.ndarray, mask: np.ndarray, seed: int, layer: int, heads, draws: int) -> np.ndarray:
    """Random selections like ``sel (h, ...)``: ``(draws * h, ...)``, draw j of head k at ``j * h + k``,
    each head's draws from :func:`baseline_rng`."""
    out = np.empty((draws,) + sel.shape, dtype=bool)
    for k, h in enumerate(heads):
        rng = baseline_rng(seed, layer, h)
        for j in range(draws):
            out[j, k] = random_like(sel[k], mask, rng)
    return out.reshape((draws * sel.shape[0],) + sel.shape[1:])


def head_seq_svm(X: np.ndarray, mask: np.ndarray, queries: np.ndarray, selected: np.ndarray, *, causal: bool = False,
                 method: str = "auto", **solver_options):
    """Nuclear-norm sequence Gen-SVM of one head's selections from many queries per sentence.

    Parameters
    ----------
    X : (n, T, d) tokens (padded positions are ignored but must be finite); the query k of
        sentence i is the token ``X[i, k]``
    mask : (n, T) bool, real tokens (the candidates; causal: those up to the query)
    queries : (n, T) bool, the query positions (inside ``mask``)
    selected : (n, T, T) bool ``[sentence, query, token]``, a non-empty set of candidates per query
    causal : the candidates of query k are the real tokens ``t <= k``
    method : "auto" (default: the dense interior-point solver up to
        :data:`attnsvm.svm.dispatch.AUTO_DENSE_MAX_N` rows, the working set around it beyond),
        "dense" or "working_set" (see :func:`attnsvm.svm.solve`)
    **solver_options : passed to :func:`attnsvm.svm.solve` (norm "nuclear"), e.g. ``device``

    Returns
    -------
    SVMSolution (``W (d, d)``, formulation "seq" or "causal", norm "nuclear"), from
    :func:`attnsvm.svm.seq_constraints` ``(X, selected, causal, valid=mask, queries=queries)``.
    """
    return solve(seq_constraints(X, selected, causal, valid=mask, queries=queries), "nuclear", method=method,
                 **solver_options)


def resolve_model(model, max_memory=None) -> PretrainedTransformer:
    """The model a probe runs on: None -> the shipped MiniLM, a directory (str or path) -> :func:`load_model`
    (refused before loading when it would not fit ``max_memory``), a loaded
    :class:`~attnsvm.real.pretrained.PretrainedTransformer` as it is; anything else is a ValidationError."""
    if model is None:
        return load_minilm()
    if isinstance(model, PretrainedTransformer):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise ValidationError(f"model must be None, a model directory or a loaded PretrainedTransformer, got "
                              f"{type(model).__name__}")
    return load_model(model, max_memory=max_memory)


@dataclass
class ProbeSetup:
    """What every step of a probe shares (:func:`prepare_probe`): the model, one forward pass and the queries.

    Attributes
    ----------
    model : PretrainedTransformer; fw : its Forward on ``sentences`` (attentions included)
    sentences : list of str; layers, heads : sorted index lists; causal : decoder or not
    q : (n,) int query token of each sentence (``query="all"``: each sentence's first query)
    cand : (n, T) bool, the tokens the query of each sentence can select
    qmask : (n, T) bool query positions (``query="all"`` only, else None)
    cand3 : (n, T, T) bool candidates per (sentence, query) (``query="all"`` only, else None)
    query, threshold, seed, max_length, max_memory : the arguments; t_forward : seconds of the forward
        pass (about 0 when it came from the cache)
    """

    model: object
    fw: object
    sentences: list
    layers: list
    heads: list
    causal: bool
    q: np.ndarray
    cand: np.ndarray
    qmask: np.ndarray | None
    cand3: np.ndarray | None
    query: str
    threshold: float
    seed: int
    max_length: int
    max_memory: object
    t_forward: float
    cached: bool = False
    #: the seed of the queries' draw (``seed`` unless another was asked for: another query draw on the same sentences)
    query_seed: int | None = None


def choose_queries(fw, query: str, causal: bool, seed: int):
    """Each sentence's query and candidates (the rule per family).

    Parameters
    ----------
    fw : Forward (``mask (n, T)``, ``special (n, T)`` or None)
    query : "word" (a random token strictly between [CLS] and [SEP], seeded), "cls" (token 0) or "all"
        (every word token: not special, and for decoders at position >= 1)
    causal : a decoder: the query is a random non-special token at position >= 1 (else the last real token),
        its candidates the real tokens up to it

    Returns
    -------
    q : (n,) int; cand : (n, T) bool; qmask : (n, T) bool or None; cand3 : (n, T, T) bool or None
    (the last two for ``query="all"`` only, ``cand3[i, k]`` the candidates of query k)
    """
    n, T = fw.mask.shape
    lengths = fw.lengths
    rng = np.random.default_rng(seed)
    qmask = cand3 = None
    if query == "all":  # every word token is a query; q: each sentence's first one (what the view shows)
        pos = np.arange(T)
        if fw.special is not None:
            qmask = fw.mask & ~fw.special & ((pos[None, :] >= 1) if causal else True)
        else:  # the tokens strictly between [CLS] and [SEP]
            qmask = fw.mask & (pos[None, :] >= 1) & ((pos[None, :] < lengths[:, None] - 1) if not causal else True)
        q = qmask.argmax(axis=1)
        cand3 = np.broadcast_to(fw.mask[:, None, :], (n, T, T))  # [sentence, query, token]
        if causal:
            cand3 = cand3 & np.tri(T, dtype=bool)[None]
        cand3 = cand3 & qmask[:, :, None]  # no candidates (hence no selections) at non-query positions
        cand = cand3[np.arange(n), q]
    elif causal:  # a random non-special token with at least one token before it (else the last real token)
        pos = np.arange(T)
        special = fw.special if fw.special is not None else np.zeros_like(fw.mask)
        allowed = fw.mask & ~special & (pos[None, :] >= 1)
        none = ~allowed.any(axis=1)
        allowed[none, np.maximum(lengths[none] - 1, 0)] = True
        q = np.where(allowed, rng.random((n, T)), -1.0).argmax(axis=1)
        cand = fw.mask & (pos[None, :] <= q[:, None])  # the tokens the query sees
    elif query == "cls":
        q = np.zeros(n, dtype=np.int64)
        cand = fw.mask
    else:
        q = rng.integers(1, np.maximum(lengths - 1, 2))  # a token strictly between [CLS] and [SEP]
        cand = fw.mask
    return q, cand, qmask, cand3


def prepare_probe(sentences=None, *, n_sentences: int = 256, layers=None, heads=None, query: str = "word",
                  threshold: float = 0.1, seed: int = 0, max_length: int | None = None, model=None,
                  max_memory=None, query_seed: int | None = None) -> ProbeSetup:
    """Validate a probe's arguments, run (or reuse, :func:`attnsvm.real.cache.forward`) the forward pass and
    choose the queries (:func:`choose_queries` seeded by ``query_seed``, None: ``seed``; arguments as
    :func:`attnsvm.real.probe.probe_heads`)."""
    if query not in QUERIES:
        raise ValidationError(f"query must be one of {QUERIES}, got {query!r}")
    if not 0.0 < float(threshold) <= 1.0:
        raise ValidationError(f"threshold must lie in (0, 1], got {threshold!r}")
    if sentences is None:
        if isinstance(n_sentences, (bool, np.bool_)) or not isinstance(n_sentences, (int, np.integer)) \
                or n_sentences < 1:
            raise ValidationError(f"n_sentences (--n-sentences) must be an integer >= 1, got {n_sentences!r}")
        sentences = corpus_sentences(n_sentences, seed)
    sentences = check_sentences(sentences)
    model = resolve_model(model, max_memory)
    max_length = model.probe_max_length(max_length)
    seed = check_seed(seed)
    causal = model.family.causal
    if causal and query == "cls":
        raise ValidationError(f"query 'cls' is not available for the causal decoder {model.name}: the first token "
                              "sees only itself; use query='word' (--query word)")
    if model.family.rotary and query == "all":
        raise ValidationError(f"query 'all' is not available for the rotary model {model.name}: its sequence SVM "
                              "needs each token's key to be its query, and a rotary head's post-rotary keys and "
                              "queries differ; use query='word' (--query word)")
    layers = check_indices(layers, model.n_layers, "layers")
    heads = check_indices(heads, model.n_heads, "heads")
    fw, cached, t_forward = cache.forward(model, sentences, max_length=max_length, max_memory=max_memory)
    query_seed = seed if query_seed is None else check_seed(query_seed)
    q, cand, qmask, cand3 = choose_queries(fw, query, causal, query_seed)
    return ProbeSetup(model, fw, list(sentences), layers, heads, causal, q, cand, qmask, cand3, query,
                      float(threshold), int(seed), int(max_length), max_memory, t_forward, cached, int(query_seed))


def layer_tokens(setup: ProbeSetup, layer: int) -> np.ndarray:
    """(n, T, d + 1) the bias-augmented states entering ``layer`` (padding zero)."""
    fw = setup.fw
    return augment(fw.layer_input(layer)) * fw.mask[:, :, None]


def rotary_tokens(setup: ProbeSetup, layer: int, head: int, m_svm: int) -> tuple[np.ndarray, np.ndarray]:
    """A rotary head's SVM tokens and queries on the first ``m_svm`` sentences, in its post-rotary query-key space
    (:meth:`attnsvm.real.pretrained.PretrainedTransformer.rotary_states`): ``X (m, T, m_h + 1)`` the bias-augmented
    rotated keys (padding zero) and ``Z (m, m_h + 1)`` each sentence's bias-augmented rotated query, so that
    ``X[i, t] @ head_weights(layer, head) @ Z[i]`` is the model's score of key t for the query of sentence i."""
    fw = setup.fw
    K, Q = setup.model.rotary_states(fw.layer_input(layer)[:m_svm], layer, head)
    X = augment(K) * fw.mask[:m_svm, :, None]
    return X, augment(Q[np.arange(m_svm), setup.q[:m_svm]])


def rotary_query_map(setup: ProbeSetup, layer: int, head: int, m_svm: int) -> QueryMap:
    """A rotary head's queries on the first ``m_svm`` sentences as a function of its query tokens' states
    (:class:`attnsvm.real.layer.QueryMap`): ``S (m, d + 1)`` the bias-augmented states entering ``layer`` at each
    sentence's query token, ``A = [W_Q^T | b_Q] (m_h, d + 1)`` the head's pre-rotary query map and ``R (m, m_h,
    m_h)`` the rotation of each query's position, so that ``(R_i A S_i, 1)`` is :func:`rotary_tokens`' ``Z[i]``
    (what the rotary sink null rotates: :func:`attnsvm.real.nulls.sink_query_states`)."""
    fw, model = setup.fw, setup.model
    q = setup.q[:m_svm]
    S = augment(fw.layer_input(layer)[np.arange(m_svm), q])
    _, WQ, _, bQ = model.key_query(layer, head)
    return QueryMap(S, np.concatenate([WQ.T, bQ[:, None]], axis=1), model.rotations(fw.mask.shape[1])[q])


def head_selections(setup: ProbeSetup, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """One query per sentence (``query`` "word" or "cls"): the attention rows ``A (h, n, T)`` of the
    probed heads from each sentence's query and their selections ``(h, n, T)`` bool
    (:func:`select_tokens` over the candidates)."""
    n = len(setup.q)
    A = setup.fw.attentions[layer][np.arange(n), :, setup.q, :]  # (n, H, T): row of each sentence's query
    A = A[:, setup.heads].transpose(1, 0, 2)  # (h, n, T)
    return A, select_tokens(A, setup.cand, setup.threshold)


@dataclass
class LayerSelections:
    """A layer's selections for the probed heads (:func:`layer_selections`), no SVM.

    Attributes
    ----------
    A : (h, n, T) attention row of each sentence's query (``query="all"``: its first query)
    sel : (h, n, T) bool selections; ``query="all"``: (h, n, T, T) ``[head, sentence, query, token]``
    stats : list of h dicts with keys ``mean_selected``, ``frac_cls``, ``frac_sep``, ``frac_self``,
        ``frac_prev``, ``frac_next`` and ``max_attention`` (over all (sentence, query) pairs), ``sel_first`` and
        ``sel_last`` (the share of pairs whose selected set holds position 0 -- [CLS] in encoders, the first token
        (BOS) in decoders -- and the sentence's last real token -- [SEP] in encoders)
    """

    A: np.ndarray
    sel: np.ndarray
    stats: list


def _pair_stats(am, qk, lengths, sel, largest) -> dict:
    """The statistics of one head over its (sentence, query) pairs: argmax token, query position, sentence
    length and largest attention, each (pairs,), and the selections ``sel (pairs, T)`` bool."""
    sizes = sel.sum(axis=1)
    return {"mean_selected": float(sizes.mean()), "frac_cls": float(np.mean(am == 0)),
            "frac_sep": float(np.mean(am == lengths - 1)), "frac_self": float(np.mean(am == qk)),
            "frac_prev": float(np.mean(am == qk - 1)), "frac_next": float(np.mean(am == qk + 1)),
            "max_attention": float(largest.mean()), "sel_first": float(sel[:, 0].mean()),
            "sel_last": float(sel[np.arange(sel.shape[0]), lengths - 1].mean())}


def layer_selections(setup: ProbeSetup, layer: int) -> LayerSelections:
    """The probed heads' attention rows, selections and statistics in ``layer`` (see :class:`LayerSelections`)."""
    fw, heads = setup.fw, setup.heads
    lengths = fw.lengths
    if setup.query == "all":
        n = len(setup.q)
        Aall = fw.attentions[layer][:, heads].transpose(1, 0, 2, 3)  # (h, n, T, T) [head, sentence, query, token]
        sel = select_tokens(Aall, setup.cand3, setup.threshold) & setup.qmask[None, :, :, None]  # (h, n, T, T)
        amall = np.where(setup.cand3, Aall, -1.0).argmax(axis=-1)  # (h, n, T)
        qi, qk = np.nonzero(setup.qmask)  # all (sentence, query) pairs
        A = Aall[:, np.arange(n), setup.q]  # (h, n, T): each sentence's first query, for the view
        stats = [_pair_stats(amall[k][qi, qk], qk, lengths[qi], sel[k][qi, qk],
                             np.where(setup.cand3[qi, qk], Aall[k][qi, qk], 0).max(axis=1)) for k in range(len(heads))]
        return LayerSelections(A, sel, stats)
    A, sel = head_selections(setup, layer)
    am = np.where(setup.cand, A, -1.0).argmax(axis=-1)  # (h, n)
    stats = [_pair_stats(am[k], setup.q, lengths, sel[k], np.where(setup.cand, A[k], 0).max(axis=1))
             for k in range(len(heads))]
    return LayerSelections(A, sel, stats)


def check_rotary_attention(setup: ProbeSetup, layer: int, head: int, X: np.ndarray, Z: np.ndarray) -> None:
    """Refuse a rotary head whose post-rotary formulation does not give the model's own attention: ``X (m, T, D)``
    and ``Z (m, D)`` (:func:`rotary_tokens`), softmax of ``X[i] W_h Z[i]`` over each query's candidates against the
    forward pass's attention row of that query, within :data:`ROTARY_ATTENTION_TOL` (a rotary layout or position
    the formulation does not match would exceed it)."""
    m = X.shape[0]
    cand = setup.cand[:m]
    W = setup.model.head_weights(layer, head)
    own = candidate_softmax(np.einsum("ntd,nd->nt", X, Z @ W.T), cand)
    model = setup.fw.attentions[layer][np.arange(m), head, setup.q[:m]]
    gap = float(np.abs(np.where(cand, own - model, 0.0)).max())
    tol = ROTARY_ATTENTION_TOL["float64" if "float64" in str(setup.model.torch_dtype) else "float32"]
    if not gap <= tol:
        raise ValidationError(f"the rotary head {layer}.{head} of {setup.model.name}: its post-rotary keys and queries "
                              f"give attention {gap:.3g} away from the model's own (more than {tol:g}); its rotary "
                              "layout or positions are not those the probe reads (rotate-half, positions 0..T-1)")


def layer_inputs(setup: ProbeSetup, layer: int, m_svm: int, head: int | None = None) -> LayerInputs:
    """The first ``m_svm`` sentences of ``layer`` for the SVMs (one query per sentence), validated once.

    A rotary model's SVMs are per head (``head`` required): its tokens and queries are the head's post-rotary keys
    and queries (:func:`rotary_tokens`), with the head's query map (:func:`rotary_query_map`, what its sink null
    rotates); other models' are the layer's states, shared by its heads (``head`` unused)."""
    if setup.model.family.rotary:
        if head is None:
            raise ValidationError(f"head: the rotary model {setup.model.name} is probed per head (its tokens are "
                                  "the head's post-rotary keys); give the head")
        X, Z = rotary_tokens(setup, layer, head, m_svm)
        check_rotary_attention(setup, layer, head, X, Z)
        return LayerInputs.build(X, Z, setup.cand[:m_svm], rotary_query_map(setup, layer, head, m_svm))
    X = layer_tokens(setup, layer)[:m_svm]
    return LayerInputs.build(X, X[np.arange(m_svm), setup.q[:m_svm]], setup.cand[:m_svm])


@dataclass
class SeqLayerInputs:
    """The SVM sentences of one layer with every word token a query (``query="all"``): the arrays of
    :func:`head_seq_svm` and the bases P (token differences the queries see), B (the queries).

    Attributes
    ----------
    X : (m, T, D) tokens; valid : (m, T) real tokens; qmask : (m, T) query positions;
    cand : (m, T, T) candidates per (sentence, query); causal : decoder; q : (m,) each sentence's first query;
    P : (D, r1); B : (D, r2)
    """

    X: np.ndarray
    valid: np.ndarray
    qmask: np.ndarray
    cand: np.ndarray
    causal: bool
    q: np.ndarray
    P: np.ndarray
    B: np.ndarray

    def restrict(self, W: np.ndarray) -> np.ndarray:
        """``P P^T W B B^T`` (D, D)."""
        return self.P @ (self.P.T @ W @ self.B) @ self.B.T

    def svm(self, selected: np.ndarray, **solver_options):
        """The sequence Gen-SVM of ``selected (m, T, T)`` (:func:`head_seq_svm`)."""
        return head_seq_svm(self.X, self.valid, self.qmask, selected, causal=self.causal, **solver_options)


def seq_layer_inputs(setup: ProbeSetup, layer: int, m_svm: int) -> SeqLayerInputs:
    """The first ``m_svm`` sentences of ``layer`` for the sequence SVMs of ``query="all"``."""
    X = layer_tokens(setup, layer)[:m_svm]
    vs, qs, cs = setup.fw.mask[:m_svm], setup.qmask[:m_svm], setup.cand3[:m_svm]
    ms = cs.any(axis=1)  # the tokens some query sees
    first = np.argmax(ms, axis=1)
    diffs = (X - X[np.arange(m_svm), first][:, None, :])[ms]
    return SeqLayerInputs(X, vs, qs, cs, setup.causal, setup.q[:m_svm], row_basis(diffs), row_basis(X[qs]))


def _solved(inp, selected, solver_options) -> dict:
    """:func:`attnsvm.real.layer.summary` of ``inp.svm(selected)``; support reduced to ``(m, T)`` (a sequence
    SVM: that of each sentence's first query, what the view shows)."""
    s = summary(inp.svm(selected, **solver_options))
    if s["support"].ndim == 3:
        s["support"] = s["support"][np.arange(s["support"].shape[0]), inp.q]
    return s


def head_task(setup: ProbeSetup, inp, layer: int, head: int, selected: np.ndarray, *, baseline_draws: int = 1,
              **solver_options) -> tuple[dict, np.ndarray]:
    """One head's SVM and its random baselines' SVMs, and their agreement with the head.

    Parameters
    ----------
    setup : the probe (model, seed); inp : the layer's SVM sentences (:func:`layer_inputs`, or
        :func:`seq_layer_inputs` for ``query="all"``), m sentences
    selected : the head's selections on those m sentences, (m, T) bool (``query="all"``: (m, T, T))
    baseline_draws : random selections of the same sizes (:func:`baseline_rng` of (seed, layer, head)); 0: none (the
        ``*random*`` columns NaN, ``random_status`` "")
    **solver_options : passed to the solver (``max_memory``, ``device``, ...)

    Returns
    -------
    row : dict ``corr, corr_restricted, corr_random, corr_random_restricted, advantage``, the parts of the first
        two (:func:`attnsvm.real.layer.corr_parts`: ``inner`` = <W_h, W_svm>, ``inner_restricted`` = <W_r, W_svm>
        with W_r the restricted W_h, ``norm_head`` = ||W_h||_F, ``norm_head_restricted`` = ||W_r||_F, ``norm_svm``
        = ||W_svm||_F; NaN without a certified SVM), ``svm_status, svm_gap,
        svm_violation, svm_rank, svm_nuclear, svm_support, random_status, random_gap, svm_seconds,
        random_seconds`` (and with one query per sentence ``selected_all``,
        :func:`attnsvm.real.nulls.query_split` ``qi_share, qi_first_logit`` on the m SVM sentences and
        :func:`attnsvm.real.layer.margin_ratio` ``margin_ratio``, descriptive: NaN without a certified SVM, and
        ``svm_contradictions``, the direct contradictions among the SVM's rows,
        :func:`attnsvm.svm.gen_ties.gen_contradictions`: more than 0 proves it infeasible)
    support : (m, T) bool, the SVM's support tokens
    """
    Wh = setup.model.head_weights(layer, head)
    sol = _solved(inp, selected, solver_options)
    rand = baselines(selected[None], inp.cand, setup.seed, layer, [head], baseline_draws)
    draws = [_solved(inp, o, solver_options) for o in rand]
    Wr = inp.restrict(Wh)
    nan = float("nan")  # no baseline drawn (baseline_draws = 0): its columns hold no number
    row = {"corr": corr(Wh, sol["W"]), "corr_restricted": corr(Wr, sol["W"]),
           "corr_random": float(np.mean([corr(Wh, d["W"]) for d in draws])) if draws else nan,
           "corr_random_restricted": float(np.mean([corr(Wr, d["W"]) for d in draws])) if draws else nan}
    row["advantage"] = row["corr_restricted"] - row["corr_random_restricted"]
    # the parts corr and corr_restricted divide, for a check that recomputes them (a raw inner product would differ)
    row["inner"], row["norm_head"], row["norm_svm"] = corr_parts(Wh, sol["W"])
    row["inner_restricted"], row["norm_head_restricted"], _ = corr_parts(Wr, sol["W"])
    row.update(svm_status=sol["status"], svm_gap=sol["gap"], svm_violation=sol["violation"])
    sv = np.linalg.svd(sol["W"], compute_uv=False) if sol["W"] is not None else np.zeros(1)
    row["svm_rank"] = int(np.sum(sv > 1e-3 * sv[0])) if sv[0] > 0 else 0
    row.update(svm_nuclear=sol["nuclear"], svm_support=int(np.asarray(sol["support"]).sum()),
               random_status=",".join(d["status"] for d in draws),
               random_gap=float(np.max([d["gap"] for d in draws])) if draws else nan, svm_seconds=sol["seconds"],
               random_seconds=float(np.sum([d["seconds"] for d in draws])))
    if selected.ndim == 2:  # every sentence's selection is all its candidates: no margin row, W = 0
        row["selected_all"] = bool(np.all((selected == inp.cand).all(axis=-1)))
        row.update(query_split(Wh, inp.X, inp.Z, inp.cand))  # the sink: the query-independent part of its scores
        # descriptive beside corr_restricted: the share of the largest normalized margin the head attains
        row["margin_ratio"] = margin_ratio(inp.scores(Wh), selected, inp.cand, Wr,
                                           sol["W"] if sol["status"] == "optimal" else None)
        # why a head has no SVM, where two of its rows say it (0 wherever an SVM exists: a direct contradiction proves
        # there is none, tests/test_svm_gen_ties.py)
        row["svm_contradictions"] = len(gen_contradictions(inp.X, inp.Z, selected, valid=inp.cand))
    return row, sol["support"]


def check_transplant(model, draws: int) -> None:
    """Refuse transplanted heads (``draws`` > 0) on a rotary model: each of its heads is read in its own post-rotary
    query-key space, where every head's W is the same scaled identity, so no other head's W means anything there."""
    if draws and model.family.rotary:
        raise ValidationError(f"transplant_draws: the rotary model {model.name} has no transplant null (every head "
                              "is the scaled identity in its own post-rotary query-key space); use 0")


def transplant_sources(model, layer: int, head: int, draws: int, seed: int) -> list:
    """The other heads ``[(source layer, source head), ...]`` (``draws`` of them, at most all ``L H - 1``)
    whose key-query matrices are transplanted onto ``(layer, head)``'s states: a permutation of the other
    heads from :func:`attnsvm.real.nulls.null_rng` ``(seed, layer, head, 0, "transplant")``, its first
    ``draws`` (so more draws extend the list)."""
    from attnsvm.real.nulls import null_rng

    others = [(l, h) for l in range(model.n_layers) for h in range(model.n_heads) if (l, h) != (layer, head)]
    order = null_rng(seed, layer, head, 0, "transplant").permutation(len(others))
    return [others[i] for i in order[:draws]]


def row_statistic(row: dict, statistic: str = "corr_restricted") -> float:
    """The statistic a head's verdict compares with its nulls (:data:`attnsvm.real.verdict.STATISTICS`): the
    ``statistic`` column (default ``corr_restricted``) of a :func:`head_task` row when its SVM is certified and not
    every candidate is selected, else NaN (no verdict: "no SVM")."""
    check_statistic(statistic)
    every = row.get("selected_all", False)
    every = bool(every) if every is not None and every == every else False  # NaN / None: not known, not all
    ok = row.get("svm_status") == "optimal" and not every
    return float(row.get(statistic, float("nan"))) if ok else float("nan")


def head_statistic(setup: ProbeSetup, inp: LayerInputs, layer: int, head: int, selected: np.ndarray,
                   statistic: str = "corr_restricted", **solver_options) -> float:
    """:func:`row_statistic` of the head without its baselines: the head's SVM on ``selected (m, T)`` and
    ``statistic`` (``corr_restricted`` or ``margin_ratio``) computed exactly as :func:`head_task` does (same value),
    for a null task that runs apart from its head's task."""
    check_statistic(statistic)
    sol = _solved(inp, selected, solver_options)
    Wh = setup.model.head_weights(layer, head)
    Wr = inp.restrict(Wh)
    every = bool(np.all((selected == inp.cand).all(axis=-1)))
    row = {"svm_status": sol["status"], "corr_restricted": corr(Wr, sol["W"]), "selected_all": every}
    if statistic == "margin_ratio":
        row["margin_ratio"] = margin_ratio(inp.scores(Wh), selected, inp.cand, Wr,
                                           sol["W"] if sol["status"] == "optimal" else None)
    return row_statistic(row, statistic)


@dataclass(frozen=True)
class NullDraws:
    """What a head's null task draws (:func:`null_task`): ``verdict`` nulls of ``kind`` (the verdict's), ``spectrum``
    spectrum nulls beside a verdict of another kind (all drawn; descriptive), ``structured`` structured and
    ``transplant`` transplanted heads (descriptive), each selecting by ``selection`` ("threshold": its own attention
    >= the probe's threshold, or "matched": its own top-``|O_i|`` tokens); ``statistic``: the verdict's statistic
    (:data:`attnsvm.real.verdict.STATISTICS`), which early stopping reads."""

    verdict: int
    kind: str = "spectrum"
    spectrum: int = 0
    structured: int = 0
    transplant: int = 0
    selection: str = "threshold"
    statistic: str = "corr_restricted"

    @classmethod
    def of(cls, config) -> "NullDraws":
        """The draws of a :class:`attnsvm.real.probe_config.ProbeConfig`."""
        return cls(int(config.null_draws), config.null_kind,
                   int(config.null_draws if config.spectrum_draws is None else config.spectrum_draws),
                   int(config.structured_draws), int(config.transplant_draws), config.null_selection,
                   config.statistic)


def null_task(setup: ProbeSetup, inp: LayerInputs, layer: int, head: int, selected: np.ndarray,
              draws: NullDraws | None = None, *, null_draws: int | None = None, real: float | None = None,
              tested: int | None = None, **solver_options) -> list[dict]:
    """One head's null heads on the layer's SVM sentences (:class:`NullDraws`: its verdict nulls of their kind,
    spectrum nulls beside another kind, structured heads, :func:`attnsvm.real.nulls.null_heads`, and transplanted
    heads, :func:`transplant_sources`, :func:`attnsvm.real.nulls.transplant_heads`).

    Parameters
    ----------
    selected : (m, T) bool, the head's selections on the m SVM sentences (their sizes, for "matched")
    draws : what to draw; ``null_draws=K`` alone is ``NullDraws(K)`` (K spectrum nulls)
    real : None (draw all ``draws.verdict`` verdict nulls) or the head's statistic (:func:`row_statistic` of
        ``draws.statistic``, NaN without a certified SVM): the verdict draws are made in order and stop as soon as
        :func:`attnsvm.real.verdict.stop_reason` (on :func:`attnsvm.real.verdict.t_scale`) says no further draw
        can change any verdict (none drawn for a head without a certified SVM). Draw j is the same whether or not
        the draws stop later.
    tested : the number of heads probed with nulls (Benjamini-Yekutieli's m): the draws stop at
        :func:`attnsvm.real.verdict.stop_level` ``(tested)`` = 0.05 / c(m); None: at 0.05 (valid for any m)

    Returns
    -------
    list of the draws' dicts (``kind`` "spectrum", "sink", "structured" or "transplant"; a transplant also has
    ``source`` "L<l>-H<h>")
    """
    if (draws is None) == (null_draws is None):
        raise ValidationError("null_task takes draws (a NullDraws) or null_draws (an int), exactly one of them")
    draws = NullDraws(int(null_draws)) if draws is None else draws
    null_draws, null_kind, null_selection = draws.verdict, draws.kind, draws.selection
    spectrum_draws, structured_draws, transplant_draws = draws.spectrum, draws.structured, draws.transplant
    threshold = setup.threshold if null_selection == "threshold" else None
    Wh = setup.model.head_weights(layer, head)
    sizes = selected.sum(axis=1)
    out = []
    if real is None:
        out += null_heads(inp, Wh, sizes, seed=setup.seed, layer=layer, head=head, draws=null_draws,
                          kind=null_kind, threshold=threshold, **solver_options)
    else:  # sequentially, one draw at a time, until the stopping rule holds
        level, s = stop_level(tested), head_spectrum(Wh)  # the head's spectrum once, not once per draw
        for j in range(int(null_draws)):
            vals = t_scale([real] + [d[draws.statistic] for d in out], draws.statistic)
            if stop_reason(float(vals[0]), vals[1:], int(null_draws) - j, level) is not None:
                break
            out += null_heads(inp, Wh, sizes, seed=setup.seed, layer=layer, head=head, draws=1, start=j,
                              kind=null_kind, threshold=threshold, spectrum=s, **solver_options)
    if spectrum_draws and null_kind != "spectrum":  # the spectrum null beside the verdict's
        out += null_heads(inp, Wh, sizes, seed=setup.seed, layer=layer, head=head, draws=spectrum_draws,
                          kind="spectrum", threshold=threshold, **solver_options)
    if structured_draws:  # (none by default: no principal bases to compute)
        out += null_heads(inp, Wh, sizes, seed=setup.seed, layer=layer, head=head, draws=structured_draws,
                          kind="structured", threshold=threshold, **solver_options)
    if transplant_draws:
        check_transplant(setup.model, transplant_draws)
        src = transplant_sources(setup.model, layer, head, int(transplant_draws), setup.seed)
        out += transplant_heads(inp, [(f"L{l}-H{h}", setup.model.head_weights(l, h)) for l, h in src], sizes,
                                threshold=threshold, **solver_options)
    return out


def view_arrays(setup: ProbeSetup, view_sentences: int) -> dict:
    """What the probe view shows, from the forward pass only (no SVM).

    Returns
    -------
    dict with ``selected`` ``{(layer, head): (n, T) bool}`` (``query="all"``: (n, T, T)), ``attention``
    ``{(layer, head): (k, T)}`` (the first k = min(view_sentences, n) sentences' query rows, zero on padding),
    ``matrices`` ``{(layer, head): (k, T, T) float32}`` (whole attention matrices, zero on padding),
    ``candidates`` (k, T) bool, ``stats`` ``{(layer, head): dict}`` (:class:`LayerSelections`)
    """
    fw = setup.fw
    n = len(setup.q)
    k_view = min(int(view_sentences), n)
    out = {"selected": {}, "attention": {}, "matrices": {}, "stats": {}, "candidates": setup.cand[:k_view].copy()}
    for l in setup.layers:
        view = fw.attentions[l][:k_view][:, setup.heads] * fw.mask[:k_view, None, :, None] \
            * fw.mask[:k_view, None, None, :]
        ls = layer_selections(setup, l)
        for k, h in enumerate(setup.heads):  # (k, T, T) [sentence, query, token], for the view's chooser
            out["matrices"][(l, h)] = np.asarray(view[:, k], dtype=np.float32)
            out["selected"][(l, h)] = ls.sel[k]
            out["attention"][(l, h)] = np.where(fw.mask[:k_view], ls.A[k, :k_view], 0.0)
            out["stats"][(l, h)] = ls.stats[k]
        del view
    return out

