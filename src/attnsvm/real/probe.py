"""Probe a pretrained transformer's heads: selected tokens vs the nuclear-norm Gen-SVM.

For every layer l and head h of MiniLM-L6 (6 x 12 heads), or of any local model directory
that :func:`attnsvm.real.minilm.load_model` reads (``model=DIR``; the families are in
:mod:`attnsvm.real.adapters`):

1. **Selections.** One batched forward pass (hidden states and attention maps of all
   layers). Each sentence i has one query token ``q_i``: a random word token
   (``query="word"``, seeded, never [CLS]/[SEP]) or ``[CLS]`` (``query="cls"``; in
   MiniLM it mostly attends to itself). The head's attention row ``a_i = A[i, h, q_i, :]``
   gives the selected set ``O_i = {t : a_it >= threshold}`` plus the argmax token.
2. **SVM.** Tokens are the hidden states *entering* layer l, augmented with a
   constant 1 (the key-bias convention of :mod:`attnsvm.real.minilm`), the query is
   ``z_i = x~_{i q_i}``. The nuclear-norm Gen-SVM of the selections (the implicit
   bias of the (K, Q) parameterization) is solved on the first ``svm_sentences``
   sentences by :func:`head_svm`: the Gen-SVM rows of the real tokens only
   (:func:`attnsvm.svm.gen_constraints` with ``valid`` = the attention
   mask) and the exact interior-point solver of :func:`attnsvm.svm.solve` (norm "nuclear";
   beyond ~800 rows inside the working set, which certifies over all rows) (relative duality
   gap <= 1e-9, certified by the dual multipliers).
3. **Baseline.** For each head, ``baseline_draws`` random selections of the same
   sizes (per sentence, uniformly among its real tokens) get the same SVM. They are drawn from a
   generator of their own per (seed, layer, head) (:func:`baseline_rng`), so a head's row does not
   depend on which other heads are probed with it, nor in which order or process.
4. **Scores.** ``corr = <W_h, W_svm> / (||W_h|| ||W_svm||)`` with W_h the head's
   key-query matrix (385 x 385, key on the left). Because the sentences only reveal
   how W acts on their token differences and queries, ``corr_restricted`` compares
   ``P_U W_h P_Z`` (W_h projected onto the span of the token differences on the left
   and the queries on the right, the part of W_h these sentences can see) with the
   SVM solution, which lies in that span. Both are reported for the random baseline.
5. **Verdict.** ``null_draws`` spectrum null heads per head (:mod:`attnsvm.real.nulls`: the head's
   singular values, Haar-random singular vectors, selecting by their own attention with the same
   threshold) get the same SVM and score; the head's ``corr_restricted`` against theirs gives the
   p-values, Benjamini-Yekutieli over the probed heads gives the verdict (:mod:`attnsvm.real.verdict`).

Every word token a query (``query="all"``): each sentence's word tokens (not [CLS]/[SEP] or other
special tokens; for causal decoders every non-special token at position >= 1) are all queries, each
selecting ``{t : A[i, h, k, t] >= threshold}`` plus the argmax among its candidates (the real tokens;
for decoders the real tokens up to and including the query). Each head's SVM is then the sequence
Gen-SVM of all these (query, selection) pairs on the first ``svm_sentences`` sentences
(:func:`attnsvm.svm.seq_constraints` with ``queries`` = the word tokens, ``valid`` = the real tokens,
``causal`` for decoders; :func:`head_seq_svm`), the random baselines draw, per (sentence, query), a set
of the same size uniformly among that query's candidates, B spans all the queries used, and the
``frac_*``, ``mean_selected`` and ``max_attention`` statistics are over all (sentence, query) pairs.
It has ~T times the rows of one query per sentence: 8 MiniLM corpus sentences give 190 queries and
5490 rows per head, ~14 s per SVM on one core (layer 5; the working-set method), so keep ``svm_sentences`` small.

Causal decoders (GPT-2-like): the tokens are the states after the layer norm before attention
(``ln_1``), the query is a random non-special token at position >= 1, and its candidates are the
real tokens up to it (itself included); the selections, the random baselines, the Gen-SVM rows
(``valid`` = candidates) and the span P of the token differences all use those candidates only,
which is the causal Gen-SVM of one query per sentence. ``query="cls"`` is refused for them.

Why a subset for the SVM: with m sentences of ~20 tokens the Gen-SVM has N ~ 19 m
rows of dimension 385. Up to 800 rows the dense interior-point method solves it (~30
iterations of O(N^2 (385 + m) + N^3 / 3)); beyond, the working-set method (:func:`head_svm`,
method "auto") solves the exact SVM of a growing subset of rows with the same interior-point
method and checks all N margins, which grows more slowly but still faster than m (measured
with ``python benchmarks/probe_scale.py``, layer 3, one thread, CPU seconds per certified
SVM: ~1-2 s at m = 48, ~5 s at m = 128, ~14-25 s at m = 256; at m = 1000 (N = 16919 rows) the
12 heads of layer 3 took 19-219 s each, 1148 s together, with working sets of 650-3850 rows;
random selections need about twice the working set and take many times longer, the interior
point's cost growing as the cube of the working set). With ``--out`` each head is stored as it
finishes (``attnsvm.experiments.real.probe_run``), so a long probe can be stopped,
resumed and shared among processes.
The default m = 48 probes all 72 heads and their 72 baselines (256 sentences) in about 4
to 8 minutes on one core. The heads of a layer share only the tokens, queries and the bases
P, B; each selection is its own SDP. Selections and their statistics always use all
sentences. :func:`attnsvm.real.agreement.agreement_curve` (``attnsvm probe --curve``) shows how
the agreement changes with m.

Infeasible selections: in layer 0 a token's state depends only on its id and position,
so two sentences that start alike repeat tokens *and* queries exactly; when the head
(or a random baseline) selects differently in them, no W separates the selections.
The SVM is then reported "infeasible" (Farkas certificate from the exact solver) and
its correlations are NaN.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.svm import gen_constraints, seq_constraints, solve
from attnsvm.svm.analysis import row_basis
from attnsvm.real.layer import LayerInputs, corr as _corr, summary as _summary
from attnsvm.real.minilm import PretrainedTransformer, augment, check_sentences, load_minilm, load_model
from attnsvm.real.nulls import NULL_DRAWS, NULL_SELECTIONS, null_heads, select_tokens, top_selection  # noqa: F401
from attnsvm.real.verdict import add_verdict, null_columns
from attnsvm.real.sentences import check_seed, corpus_sentences

QUERIES = ("word", "cls", "all")
_LAST_FORWARD: dict = {}  # the last forward pass (per process), reused by repeated probes of the same text


@dataclass
class ProbeResult:
    """Per-head results of :func:`probe_heads`.

    Attributes
    ----------
    table : pandas.DataFrame, one row per (layer, head) with columns
        ``layer, head, corr, corr_restricted, corr_random, corr_random_restricted,
        advantage`` (corr_restricted - corr_random_restricted), ``mean_selected``
        (mean ``|O_i|`` over all sentences), ``frac_cls, frac_sep, frac_self, frac_prev,
        frac_next`` (where the argmax goes), ``max_attention`` (mean of the largest
        attention weight), ``svm_status, svm_gap, svm_violation, svm_rank,
        svm_nuclear`` (the head's SVM: status "optimal" (certified) / "optimal_inaccurate" /
        "infeasible", relative duality gap, the certificate's relative largest violation,
        numerical rank, nuclear norm; correlations with an SVM that is not certified are NaN),
        ``svm_support`` (its number of support tokens, the sum of ``support``),
        ``random_status`` (statuses of the baseline SVMs, comma-separated)
        and ``random_gap`` (their largest relative duality gap); ``svm_seconds`` and ``random_seconds``
        (the solver's wall time of the head's SVM and of its baselines' SVMs together)
    sentences : list of str
    queries : (n,) int query token of each sentence; for ``query="all"`` the (n, T) bool mask of the
        query positions (the word tokens)
    tokens : list of token lists
    selected : dict ``(layer, head) -> (n, T) bool`` selections on all sentences; for ``query="all"``
        ``(n, T, T) bool`` indexed ``[sentence, query, token]`` (rows of non-query positions all False)
    seconds : dict of timings (forward, svm, total)
    config : dict of the arguments
    attention : dict ``(layer, head) -> (k, T) float``: the head's attention row from the query of
        each of the first k sentences (``k = min(view_sentences, n)``; zero on padding), what
        :mod:`attnsvm.real.probe_view` shades the tokens with
    support : dict ``(layer, head) -> (m_svm, T) bool``: the support tokens of the head's SVM on its
        ``m_svm = config["svm_sentences"]`` sentences, :meth:`attnsvm.svm.SVMSolution.support_tokens`
        (non-selected tokens whose margin row is active, ``|margin - 1| <= support_tol`` relative;
        the rows that can carry a positive multiplier). All False when the SVM is infeasible;
        empty when no SVM was solved (``svm_sentences=0``)
    candidates : (k, T) bool or None: the tokens each of the first k sentences' query can select
        (the real tokens; for causal decoders those up to the query)

    For ``query="all"``, ``attention``, ``support`` and ``candidates`` (what the probe view shows)
    are those of each sentence's *first* query (its first word token; ``argmax`` of ``queries[i]``):
    attention ``(k, T)`` and candidates ``(k, T)`` of that query's row, support ``(m_svm, T)`` the
    support tokens of that query's rows in the head's sequence SVM.
    """

    table: object
    sentences: list
    queries: np.ndarray
    tokens: list
    selected: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    attention: dict = field(default_factory=dict)
    support: dict = field(default_factory=dict)
    candidates: np.ndarray | None = None
    #: ``(layer, head) -> (k, T, T) float32``: the head's whole attention matrix ``[query, token]`` on each of
    #: the first k sentences (zero on padding), what the probe view's sentence and query chooser shows
    matrices: dict = field(default_factory=dict)
    #: whether the forward pass was reused from the previous probe of the same text (its time is then ~0)
    forward_cached: bool = False


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


def _baselines(sel: np.ndarray, mask: np.ndarray, seed: int, layer: int, heads, draws: int) -> np.ndarray:
    """Random selections like ``sel (h, ...)``: ``(draws * h, ...)``, draw j of head k at ``j * h + k``,
    each head's draws from :func:`baseline_rng`."""
    out = np.empty((draws,) + sel.shape, dtype=bool)
    for k, h in enumerate(heads):
        rng = baseline_rng(seed, layer, h)
        for j in range(draws):
            out[j, k] = random_like(sel[k], mask, rng)
    return out.reshape((draws * sel.shape[0],) + sel.shape[1:])


def head_svm(X: np.ndarray, Z: np.ndarray, mask: np.ndarray, selected: np.ndarray, *, method: str = "auto",
             **solver_options):
    """Nuclear-norm Gen-SVM of one head's selections on padded sentences.

    Parameters
    ----------
    X : (n, T, d) tokens (padded positions are ignored but must be finite)
    Z : (n, d) queries
    mask : (n, T) bool, real tokens
    selected : (n, T) bool, the sets O_i (inside ``mask``, at least one token per sentence)
    method : "auto" (default: the dense interior-point solver up to
        :data:`attnsvm.svm.dispatch.AUTO_DENSE_MAX_N` rows, the working set around it beyond),
        "dense" or "working_set" (see :func:`attnsvm.svm.solve`). Measured on MiniLM (layer 3, one
        thread, benchmarks/probe_scale.py): the working set took 0.8x the dense time at 48 sentences
        (N ~ 900 rows), 0.3-0.4x at 128 and 0.06-0.2x at 256, with the same certified optimum
    **solver_options : passed to :func:`attnsvm.svm.solve` (norm "nuclear")

    Returns
    -------
    SVMSolution (``W (d, d)``, formulation "gen", norm "nuclear"; status "infeasible" with
    a Farkas certificate if no W separates the selections).
    """
    return solve(gen_constraints(X, Z, selected, valid=mask), "nuclear", formulation="gen", method=method,
                 **solver_options)


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
    method, **solver_options : as :func:`head_svm`

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
    :class:`~attnsvm.real.minilm.PretrainedTransformer` as it is; anything else is a ValidationError."""
    if model is None:
        return load_minilm()
    if isinstance(model, PretrainedTransformer):
        return model
    import os

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
        pass (0 when it came from the cache)
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


def prepare_probe(sentences=None, *, n_sentences: int = 256, layers=None, heads=None, query: str = "word",
                  threshold: float = 0.1, seed: int = 0, max_length: int | None = None, model=None,
                  max_memory=None) -> ProbeSetup:
    """Validate a probe's arguments, run (or reuse) the forward pass and choose the queries
    (arguments as :func:`probe_heads`). The forward pass of the last (model, sentences, max_length)
    is cached per process, so the head and null tasks of one probe share it."""
    if query not in QUERIES:
        raise ValidationError(f"query must be one of {QUERIES}, got {query!r}")
    if not 0.0 < float(threshold) <= 1.0:
        raise ValidationError(f"threshold must lie in (0, 1], got {threshold!r}")
    if sentences is None:
        sentences = corpus_sentences(n_sentences, seed)
    sentences = check_sentences(sentences)
    model = resolve_model(model, max_memory)
    max_length = model.probe_max_length(max_length)
    seed = check_seed(seed)
    causal = model.family.causal
    if causal and query == "cls":
        raise ValidationError(f"query 'cls' is not available for the causal decoder {model.name}: the first token "
                              "sees only itself; use query='word' (--query word)")
    layers = check_indices(layers, model.n_layers, "layers")
    heads = check_indices(heads, model.n_heads, "heads")
    t0 = time.perf_counter()
    key = (id(model), tuple(sentences), int(max_length))
    cached = _LAST_FORWARD.get("key") == key
    if cached:  # experiments probe one layer or head per task on the same sentences
        fw = _LAST_FORWARD["forward"]
    else:
        fw = model.forward(sentences, max_length=max_length, attentions=True, max_memory=max_memory)
        _LAST_FORWARD.clear()
        _LAST_FORWARD.update(key=key, forward=fw, model=model)  # holding the model keeps its id unique
    t_forward = time.perf_counter() - t0
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
    return ProbeSetup(model, fw, list(sentences), layers, heads, causal, q, cand, qmask, cand3, query,
                      float(threshold), int(seed), int(max_length), max_memory, t_forward, cached)


def layer_tokens(setup: ProbeSetup, layer: int) -> np.ndarray:
    """(n, T, d + 1) the bias-augmented states entering ``layer`` (padding zero)."""
    fw = setup.fw
    return augment(fw.layer_input(layer)) * fw.mask[:, :, None]


def head_selections(setup: ProbeSetup, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """One query per sentence (``query`` "word" or "cls"): the attention rows ``A (h, n, T)`` of the
    probed heads from each sentence's query and their selections ``(h, n, T)`` bool
    (:func:`select_tokens` over the candidates)."""
    n = len(setup.q)
    A = setup.fw.attentions[layer][np.arange(n), :, setup.q, :]  # (n, H, T): row of each sentence's query
    A = A[:, setup.heads].transpose(1, 0, 2)  # (h, n, T)
    return A, select_tokens(A, setup.cand, setup.threshold)


def layer_inputs(setup: ProbeSetup, layer: int, m_svm: int) -> LayerInputs:
    """The first ``m_svm`` sentences of ``layer`` for the SVMs (one query per sentence), validated once."""
    X = layer_tokens(setup, layer)[:m_svm]
    return LayerInputs.build(X, X[np.arange(m_svm), setup.q[:m_svm]], setup.cand[:m_svm])


def probe_heads(sentences=None, *, n_sentences: int = 256, layers=None, heads=None, query: str = "word",
                threshold: float = 0.1, svm_sentences: int = 48, baseline_draws: int = 1, seed: int = 0,
                max_length: int | None = None, model=None, progress=None, max_memory=None,
                view_sentences: int = 4, null_draws: int = None, structured_draws: int = 0,
                null_selection: str = "threshold") -> ProbeResult:
    """Probe the heads of a pretrained transformer, MiniLM-L6 by default (see the module docstring).

    Parameters
    ----------
    model : None (the shipped MiniLM), a model directory (str or path: see
        :func:`attnsvm.real.minilm.load_model`; BERT-like encoders and GPT-2-like decoders) or a
        loaded :class:`attnsvm.real.minilm.PretrainedTransformer`
    sentences : list of str, optional (default: ``corpus_sentences(n_sentences, seed)``)
    n_sentences : number of corpus sentences when ``sentences`` is None
    layers, heads : indices to probe (default all: 0..5, 0..11)
    query : "word" (a random word token per sentence), "cls" (encoders only) or "all" (every
        word token of every sentence is a query: see the module docstring). For causal
        decoders the query is a random non-special token at position >= 1 and its candidates
        are the real tokens up to it (itself included): selections, random baselines and the
        Gen-SVM rows all use those candidates only (the causal Gen-SVM of one query per sentence)
    threshold : attention weight that counts as selected
    svm_sentences : sentences entering each SVM (the first ones); 0 skips the SVMs. Time grows
        faster than quadratically with it (see the module docstring)
    baseline_draws : random selections per head
    max_length : truncation length (warns when a sentence is cut); None: the smaller of 128 and the
        model's position limit (:meth:`~attnsvm.real.pretrained.PretrainedTransformer.probe_max_length`)
    progress : optional callable ``progress(message)``
    max_memory : bytes or a size such as "8G" for the forward pass and every SVM (default: the
        package limit, :mod:`attnsvm.memory`); work that would not fit is refused before it starts
    view_sentences : the first sentences whose attention rows are kept (``ProbeResult.attention``, for
        :mod:`attnsvm.real.probe_view`); changes no other output
    null_draws : spectrum null heads per head (:mod:`attnsvm.real.nulls`; default :data:`NULL_DRAWS`; 0: none,
        and no verdict). Query "word" or "cls" only: ``query="all"`` reports no nulls yet
    structured_draws : structured null heads per head (reported as ``structured_mean``; default 0)
    null_selection : "threshold" (default: a null head selects by its own attention >= ``threshold``, the
        real head's rule) or "matched" (its own top-``|O_i|`` tokens with the real head's sizes); see
        :data:`attnsvm.real.nulls.NULL_SELECTIONS`

    With null heads the table also has, per head, ``p_upper, p_lower`` (:data:`attnsvm.real.verdict.P_METHOD`),
    ``p_upper_mc, p_lower_mc`` (exact Monte Carlo), ``q_upper, q_lower`` (Benjamini-Yekutieli over the
    probed heads), ``verdict`` ("beyond null", "not distinguishable", "below null", "no SVM"),
    ``verdict_reason``, ``null_mean, null_sd, z_null`` (descriptive), ``n_null`` (certified draws used),
    ``n_null_dropped``, ``null_kind`` ("spectrum"), ``structured_mean``, ``null_seconds``, ``selected_all``.

    Returns
    -------
    ProbeResult
    """
    import pandas as pd

    t_start = time.perf_counter()
    if null_draws is None:
        null_draws = NULL_DRAWS if query != "all" else 0
    if query == "all":
        null_draws = structured_draws = 0  # nulls of the sequence SVM: not implemented yet
    if not isinstance(svm_sentences, (int, np.integer)) or svm_sentences < 0:
        raise ValidationError(f"svm_sentences must be an integer >= 0, got {svm_sentences!r}")
    if not isinstance(baseline_draws, (int, np.integer)) or baseline_draws < 1:
        raise ValidationError(f"baseline_draws must be an integer >= 1, got {baseline_draws!r}")
    if null_selection not in NULL_SELECTIONS:
        raise ValidationError(f"null_selection must be one of {NULL_SELECTIONS}, got {null_selection!r}")
    for name, v in (("null_draws", null_draws), ("structured_draws", structured_draws)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValidationError(f"{name} must be an integer >= 0, got {v!r}")
    if isinstance(view_sentences, (bool, np.bool_)) or not isinstance(view_sentences, (int, np.integer)) \
            or view_sentences < 0:
        raise ValidationError(f"view_sentences must be an integer >= 0, got {view_sentences!r}")
    say = progress or (lambda msg: None)
    setup = prepare_probe(sentences, n_sentences=n_sentences, layers=layers, heads=heads, query=query,
                          threshold=threshold, seed=seed, max_length=max_length, model=model, max_memory=max_memory)
    model, fw, sentences, layers, heads = setup.model, setup.fw, setup.sentences, setup.layers, setup.heads
    causal, q, cand, qmask, cand3, t_forward = setup.causal, setup.q, setup.cand, setup.qmask, setup.cand3, setup.t_forward
    n, T = fw.mask.shape
    lengths = fw.lengths
    m_svm = min(int(svm_sentences), n)
    null_threshold = float(threshold) if null_selection == "threshold" else None
    k_view = min(int(view_sentences), n)
    idx = np.arange(n)
    rows, selected, attention, support, nulls, matrices = [], {}, {}, {}, {}, {}
    t_svm = t_null = 0.0
    for l in layers:
        view = fw.attentions[l][:k_view][:, heads] * fw.mask[:k_view, None, :, None] * fw.mask[:k_view, None, None, :]
        for k, h in enumerate(heads):  # (k, T, T) [sentence, query, token], for the view's chooser
            matrices[(l, h)] = np.asarray(view[:, k], dtype=np.float32)
        del view
        X = layer_tokens(setup, l)
        if query == "all":
            Aall = fw.attentions[l][:, heads].transpose(1, 0, 2, 3)  # (h, n, T, T) [head, sentence, query, token]
            sel = select_tokens(Aall, cand3, threshold) & qmask[None, :, :, None]  # (h, n, T, T)
            amall = np.where(cand3, Aall, -1.0).argmax(axis=-1)  # (h, n, T)
            qi, qk = np.nonzero(qmask)  # all (sentence, query) pairs
            A = Aall[:, idx, q]  # (h, n, T): each sentence's first query, for the view
            pair_stats = [(amall[k][qi, qk], qk, lengths[qi], sel[k][qi, qk].sum(axis=1),
                           np.where(cand3[qi, qk], Aall[k][qi, qk], 0).max(axis=1)) for k in range(len(heads))]
            for k, h in enumerate(heads):
                selected[(l, h)] = sel[k]
                attention[(l, h)] = np.where(fw.mask[:k_view], A[k, :k_view], 0.0)
            del Aall, amall
            sols = None
            if m_svm >= 1:
                say(f"layer {l}: solving {len(heads) * (1 + baseline_draws)} nuclear-norm sequence Gen-SVMs on "
                    f"{m_svm} sentences ({int(qmask[:m_svm].sum())} queries)")
                t1 = time.perf_counter()
                Xs, vs, qs, cs = X[:m_svm], fw.mask[:m_svm], qmask[:m_svm], cand3[:m_svm]
                ms = cs.any(axis=1)  # the tokens some query sees
                first = np.argmax(ms, axis=1)
                diffs = (Xs - Xs[np.arange(m_svm), first][:, None, :])[ms]
                P, B = row_basis(diffs), row_basis(Xs[qs])  # the spans the SVMs live in
                rand = _baselines(sel[:, :m_svm], cs, seed, l, heads, baseline_draws)
                sols = []
                for o in np.concatenate([sel[:, :m_svm], rand]):
                    s_o = _summary(head_seq_svm(Xs, vs, qs, o, causal=causal, max_memory=max_memory))
                    if s_o["support"].ndim == 3:  # the support of each sentence's first query, for the view
                        s_o["support"] = s_o["support"][np.arange(m_svm), q[:m_svm]]
                    sols.append(s_o)
                t_svm += time.perf_counter() - t1
        else:
            A, sel = head_selections(setup, l)  # (h, n, T) attention rows from the queries, selections
            sel_all = (sel == cand)[:, :m_svm].all(axis=-1)  # (h, m): the selection is every candidate
            am = np.where(cand, A, -1.0).argmax(axis=-1)  # (h, n)
            for k, h in enumerate(heads):
                selected[(l, h)] = sel[k]
                attention[(l, h)] = np.where(fw.mask[:k_view], A[k, :k_view], 0.0)
            sols = None
            if m_svm >= 1:
                say(f"layer {l}: solving {len(heads) * (1 + baseline_draws)} nuclear-norm Gen-SVMs on {m_svm} sentences"
                    + (f" and {len(heads) * (null_draws + structured_draws)} of null heads" if null_draws or
                       structured_draws else ""))
                t1 = time.perf_counter()
                inp = layer_inputs(setup, l, m_svm)  # X validated once for all the layer's SVMs
                P, B = inp.P, inp.B  # (385, r1), (385, r2): the spans the SVMs live in
                rand = _baselines(sel[:, :m_svm], inp.cand, seed, l, heads, baseline_draws)
                # sols[k]: head k; sols[len(heads) * (j + 1) + k]: draw j of its random baseline
                sols = [_summary(inp.svm(o, max_memory=max_memory)) for o in np.concatenate([sel[:, :m_svm], rand])]
                t_svm += time.perf_counter() - t1
                t1 = time.perf_counter()
                for k, h in enumerate(heads):
                    if null_draws or structured_draws:
                        Wh = model.head_weights(l, h)
                        sizes = sel[k, :m_svm].sum(axis=1)
                        nulls[(l, h)] = [null_heads(inp, Wh, sizes, seed=seed, layer=l, head=h, draws=dr, kind=kind,
                                                    max_memory=max_memory, threshold=null_threshold)
                                         for kind, dr in (("spectrum", null_draws), ("structured", structured_draws))]
                t_null += time.perf_counter() - t1
            pair_stats = [(am[k], q, lengths, sel[k].sum(axis=1), np.where(cand, A[k], 0).max(axis=1))
                          for k in range(len(heads))]
        for k, h in enumerate(heads):
            Wh = model.head_weights(l, h)
            row = {"layer": l, "head": h}
            # per (sentence, query) pair: argmax token, query position, sentence length, |O|, largest attention
            a_k, q_k, len_k, size_k, max_k = pair_stats[k]
            row["mean_selected"] = float(size_k.mean())
            row["frac_cls"] = float(np.mean(a_k == 0))
            row["frac_sep"] = float(np.mean(a_k == len_k - 1))
            row["frac_self"] = float(np.mean(a_k == q_k))
            row["frac_prev"] = float(np.mean(a_k == q_k - 1))
            row["frac_next"] = float(np.mean(a_k == q_k + 1))
            row["max_attention"] = float(max_k.mean())
            if sols is not None:
                Wr = P @ (P.T @ Wh @ B) @ B.T
                sol = sols[k]
                support[(l, h)] = sol["support"]
                draws = [sols[len(heads) * (j + 1) + k] for j in range(baseline_draws)]
                row["corr"] = _corr(Wh, sol["W"])
                row["corr_restricted"] = _corr(Wr, sol["W"])
                row["corr_random"] = float(np.mean([_corr(Wh, d["W"]) for d in draws]))
                row["corr_random_restricted"] = float(np.mean([_corr(Wr, d["W"]) for d in draws]))
                row["advantage"] = row["corr_restricted"] - row["corr_random_restricted"]
                row["svm_status"] = sol["status"]
                row["svm_gap"] = sol["gap"]
                row["svm_violation"] = sol["violation"]
                sv = np.linalg.svd(sol["W"], compute_uv=False) if sol["W"] is not None else np.zeros(1)
                row["svm_rank"] = int(np.sum(sv > 1e-3 * sv[0])) if sv[0] > 0 else 0
                row["svm_nuclear"] = sol["nuclear"]
                row["svm_support"] = int(np.asarray(sol["support"]).sum())
                row["random_status"] = ",".join(d["status"] for d in draws)
                row["random_gap"] = float(np.max([d["gap"] for d in draws]))
                row["svm_seconds"] = sol["seconds"]
                row["random_seconds"] = float(np.sum([d["seconds"] for d in draws]))
                if query != "all":  # every sentence's selection is all its candidates: no margin row, W = 0
                    row["selected_all"] = bool(np.all(sel_all[k]))
                if (l, h) in nulls:
                    row.update(null_columns(row["corr_restricted"] if sol["W"] is not None else float("nan"),
                                            *nulls[(l, h)]))
            rows.append(row)
    table = pd.DataFrame(rows)
    if nulls:
        table = add_verdict(table)
    cfg = dict(n_sentences=n, layers=layers, heads=heads, query=query, threshold=float(threshold),
               svm_sentences=m_svm, baseline_draws=int(baseline_draws), seed=int(setup.seed),
               max_length=int(setup.max_length))
    if query != "all" and m_svm >= 1:
        cfg.update(null_draws=int(null_draws), structured_draws=int(structured_draws), null_selection=null_selection)
    if getattr(model, "name", "") != "MiniLM":  # the default model's config stays as it was
        cfg.update(model=model.path, family=model.family.name)
    seconds = {"forward": t_forward, "forward_cached": setup.cached, "svm": t_svm, "nulls": t_null,
               "total": time.perf_counter() - t_start}
    return ProbeResult(table, list(sentences), qmask.copy() if query == "all" else q, fw.tokens, selected, seconds, cfg,
                       attention, support, cand[:k_view].copy(), matrices, setup.cached)


def format_table(table, columns=None) -> str:
    """Plain-text table of a probe (one line per head): with null heads the verdict first, the
    random-selection baseline after it (secondary)."""
    if columns is None:
        names = (("layer", "head", "mean_selected", "corr_restricted", "null_mean", "p_upper", "q_upper", "verdict",
                  "corr_random_restricted", "svm_status", "svm_gap") if "verdict" in table.columns else
                 ("layer", "head", "mean_selected", "frac_cls", "corr", "corr_restricted", "corr_random_restricted",
                  "advantage", "svm_status", "svm_gap"))
        columns = [c for c in names if c in table.columns]
    width = {c: 19 if c == "verdict" else 12 for c in columns}
    head = "  ".join(f"{c:>{width[c]}}" for c in columns)
    lines = [head]
    for _, r in table[columns].astype(object).iterrows():  # object: integer columns stay integers
        cells = []
        for c in columns:
            v = r[c]
            if isinstance(v, (float, np.floating)):
                fmt = ".1e" if c in ("svm_gap", "svm_violation", "random_gap", "p_upper", "p_lower", "q_upper",
                                     "q_lower") else ".4f"
                cells.append(f"{v:>{width[c]}{fmt}}")
            else:
                cells.append(f"{str(v):>{width[c]}}")
        lines.append("  ".join(cells))
    return "\n".join(lines)
