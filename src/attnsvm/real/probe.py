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
   sentences by :meth:`attnsvm.real.layer.LayerInputs.svm`: the Gen-SVM rows of the real tokens only
   (:func:`attnsvm.svm.gen_constraints` with ``valid`` = the attention
   mask) and the exact interior-point solver of :func:`attnsvm.svm.solve` (norm "nuclear";
   beyond ~800 rows inside the working set, which certifies over all rows) (relative duality
   gap <= 1e-9, certified by the dual multipliers).
3. **Baseline.** For each head, ``baseline_draws`` random selections of the same
   sizes (per sentence, uniformly among its real tokens) get the same SVM. They are drawn from a
   generator of their own per (seed, layer, head) (:func:`~attnsvm.real.probe_steps.baseline_rng`), so a
   head's row does not depend on which other heads are probed with it, nor in which order or process.
4. **Scores.** ``corr = <W_h, W_svm> / (||W_h|| ||W_svm||)`` with W_h the head's
   key-query matrix (385 x 385, key on the left). Because the sentences only reveal
   how W acts on their token differences and queries, ``corr_restricted`` compares
   ``P_U W_h P_Z`` (W_h projected onto the span of the token differences on the left
   and the queries on the right, the part of W_h these sentences can see) with the
   SVM solution, which lies in that span. Both are reported for the random baseline.
5. **Verdict.** ``null_draws`` null heads of ``null_kind`` per head (:mod:`attnsvm.real.nulls`; by default the
   sink null: the head's own W with its query side rotated at random about the mean query, keeping its
   query-independent key preference such as a [CLS] sink; "spectrum": the head's singular values with
   Haar-random singular vectors), each selecting by its own attention with the same threshold, get the same
   SVM and score; the head's ``corr_restricted`` against theirs gives the p-values, Benjamini-Yekutieli over
   the probed heads gives the verdict (:mod:`attnsvm.real.verdict`). With the sink null, spectrum nulls are
   drawn beside it (``spectrum_draws``), descriptive only.
6. **Transplant** (``transplant_draws``, descriptive only): other heads of the model applied to this
   layer's states (:func:`attnsvm.real.nulls.transplant_heads`), in columns of their own outside the verdict.

The steps are functions of :mod:`attnsvm.real.probe_steps` (forward pass through the one cache of
:mod:`attnsvm.real.cache`, queries per family, each layer's SVM inputs built once, head task, null
task, view); :func:`probe_heads` composes them and the stored probe's tasks
(:mod:`attnsvm.experiments.real.probe_run`) call them.

Every word token a query (``query="all"``): each sentence's word tokens (not [CLS]/[SEP] or other
special tokens; for causal decoders every non-special token at position >= 1) are all queries, each
selecting ``{t : A[i, h, k, t] >= threshold}`` plus the argmax among its candidates (the real tokens;
for decoders the real tokens up to and including the query). Each head's SVM is then the sequence
Gen-SVM of all these (query, selection) pairs on the first ``svm_sentences`` sentences
(:func:`attnsvm.svm.seq_constraints` with ``queries`` = the word tokens, ``valid`` = the real tokens,
``causal`` for decoders; :func:`~attnsvm.real.probe_steps.head_seq_svm`), the random baselines draw, per
(sentence, query), a set of the same size uniformly among that query's candidates, B spans all the queries used, and the
``frac_*``, ``mean_selected`` and ``max_attention`` statistics are over all (sentence, query) pairs.
It has ~T times the rows of one query per sentence (8 MiniLM corpus sentences give 190 queries and
5490 rows per head), so keep ``svm_sentences`` small.

Causal decoders (GPT-2-like): the tokens are the states after the layer norm before attention
(``ln_1``), the query is a random non-special token at position >= 1, and its candidates are the
real tokens up to it (itself included); the selections, the random baselines, the Gen-SVM rows
(``valid`` = candidates) and the span P of the token differences all use those candidates only,
which is the causal Gen-SVM of one query per sentence. ``query="cls"`` is refused for them.

Why a subset for the SVM: with m sentences of ~20 tokens the Gen-SVM has N ~ 19 m rows of
dimension 385. Up to :data:`attnsvm.svm.dispatch.AUTO_DENSE_MAX_N` rows the dense interior-point
method solves it (per iteration O(N^2 (385 + m) + N^3 / 3)); beyond, the working-set method
(:meth:`~attnsvm.real.layer.LayerInputs.svm`, method "auto") solves the exact SVM of a growing subset of rows with the same
interior-point method and checks all N margins. Its cost grows with the working set, and random
selections need larger working sets than the heads. ``python benchmarks/probe_scale.py`` and
``python benchmarks/probe_cost.py`` measure it (the figures are in the probe guide,
docs/guide/probe.md). With ``--out`` each head is stored as it finishes
(``attnsvm.experiments.real.probe_run``), so a long probe can be stopped, resumed and shared among
processes. The heads of a layer share only the tokens, queries and the bases P, B; each selection
is its own SDP. Selections and their statistics always use all sentences.
``svm_sentences`` with several values (``attnsvm probe --svm-sentences 48,128,512``) and
:func:`attnsvm.real.agreement.agreement_curve` show how the agreement changes with m.

Infeasible selections: in layer 0 a token's state depends only on its id and position,
so two sentences that start alike repeat tokens *and* queries exactly; when the head
(or a random baseline) selects differently in them, no W separates the selections.
The SVM is then reported "infeasible" (Farkas certificate from the exact solver) and
its correlations are NaN.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.real.probe_steps import ProbeSetup, resolve_model, view_arrays
from attnsvm.real.pretrained import PretrainedTransformer
from attnsvm.real.probe_config import ProbeConfig, probe_config
from attnsvm.real.probe_tasks import combine, result_settings, run_in_process, setup_of


@dataclass
class ProbeResult:
    """Per-head results of :func:`probe_heads`.

    Attributes
    ----------
    table : pandas.DataFrame, one row per (layer, head) with columns
        ``layer, head, corr, corr_restricted, corr_random, corr_random_restricted,
        advantage`` (corr_restricted - corr_random_restricted), ``inner, inner_restricted, norm_head,
        norm_head_restricted, norm_svm`` (the parts corr and corr_restricted divide,
        :func:`attnsvm.real.layer.corr_parts`; NaN without a certified SVM), ``mean_selected``
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

    def to_pandas(self):
        """The per-head table (:attr:`table`, one row per head, and per m with several), a copy: a
        ``pandas.DataFrame`` the caller may change."""
        return self.table.copy()

    def _repr_html_(self) -> str:
        """Jupyter's view: the verdict summary and the main columns per head, words instead of nan
        (:func:`attnsvm.real.probe_view.notebook_html`)."""
        from attnsvm.real.probe_view import notebook_html

        return notebook_html(self)


def probe_heads(sentences=None, config: ProbeConfig | dict | None = None, *, model=None, progress=None,
                max_memory=None, **settings) -> ProbeResult:
    """Probe the heads of a pretrained transformer, MiniLM-L6 by default (see the module docstring).

    Parameters
    ----------
    config : a :class:`attnsvm.real.probe_config.ProbeConfig` (or a dict of its settings); ``settings`` (its field
        names, below) override it; every setting is defaulted and validated there, once
    model : None (the shipped MiniLM), a model directory (str or path: see
        :func:`attnsvm.real.minilm.load_model`; BERT-like encoders, GPT-2-like and rotary Llama/GPT-NeoX decoders) or a
        loaded :class:`attnsvm.real.pretrained.PretrainedTransformer`
    sentences : list of str, optional (default: ``corpus_sentences(n_sentences, seed)``)
    n_sentences : number of corpus sentences when ``sentences`` is None
    layers, heads : indices to probe (default all: 0..5, 0..11)
    query : "word" (a random word token per sentence), "cls" (encoders only) or "all" (every
        word token of every sentence is a query: see the module docstring). For causal
        decoders the query is a random non-special token at position >= 1 and its candidates
        are the real tokens up to it (itself included): selections, random baselines and the
        Gen-SVM rows all use those candidates only (the causal Gen-SVM of one query per sentence)
    threshold : attention weight that counts as selected
    svm_sentences : sentences entering each SVM (the first ones); 0 skips the SVMs; a list of several
        values (each >= 1): every head is probed at each m (one row per head and m, column ``m``; support kept
        for the largest), the verdict is Benjamini-Yekutieli over the heads at each m and ``stable_verdict`` says
        where the two largest m agree (:func:`attnsvm.real.verdict.add_verdict_by_m`). Time grows
        faster than quadratically with it (see the module docstring)
    baseline_draws : random selections per head
    max_length : truncation length (warns when a sentence is cut); None: the smaller of 128 and the
        model's position limit (:meth:`~attnsvm.real.pretrained.PretrainedTransformer.probe_max_length`)
    progress : optional callable ``progress(message)``
    max_memory : bytes or a size such as "8G" for the forward pass and every SVM (default: the
        package limit, :mod:`attnsvm.memory`); work that would not fit is refused before it starts
    view_sentences : the first sentences whose attention rows are kept (``ProbeResult.attention``, for
        :mod:`attnsvm.real.probe_view`); changes no other output
    null_draws : null heads of ``null_kind`` per head, the verdict's (:mod:`attnsvm.real.nulls`; sink null heads
        by default; default :data:`NULL_DRAWS`; 0: none, and no verdict). Query "word" or "cls" only:
        ``query="all"`` reports no nulls yet
    null_stop : draw a head's verdict nulls (of ``null_kind``) one at a time and stop once no further draw can
        change any head's verdict (:func:`attnsvm.real.verdict.stop_reason` at :func:`attnsvm.real.verdict.stop_level` of
        the number of probed heads, checked on the finished table: ``null_stop_proven``; none for a head
        without a certified SVM);
        the row says why (``null_stop``) and how many were planned (``null_planned``). Default True, as
        ``attnsvm probe`` (False: all ``null_draws`` for every head)
    null_kind : the verdict's null (:data:`attnsvm.real.nulls.VERDICT_NULL_KINDS`): "sink" (the default of
        :class:`attnsvm.real.probe_config.ProbeConfig`: :func:`attnsvm.real.nulls.sink_null`, the head's W with its
        query side rotated about the mean query, keeping its attention sink) or "spectrum"; with "sink"
        ``spectrum_draws`` spectrum nulls (None, the default: as many as ``null_draws``) are drawn too, all of them,
        and reported beside it (``spectrum_mean, spectrum_sd, n_spectrum``; outside the verdict)
    statistic : what the verdict compares each head with its nulls by (:data:`attnsvm.real.verdict.STATISTICS`):
        "corr_restricted" (the default) or "margin_ratio" (the head's own normalized margin on its selections over
        the SVM's, :func:`attnsvm.real.layer.margin_ratio`; the predictive t on its log, the exact Monte Carlo
        ranks where a ratio is <= 0); ``p_margin_ratio`` is reported whatever the statistic
    structured_draws : structured null heads per head (reported as ``structured_mean``; default 0)
    null_selection : "threshold" (default: a null head selects by its own attention >= ``threshold``, the
        real head's rule) or "matched" (its own top-``|O_i|`` tokens with the real head's sizes); see
        :data:`attnsvm.real.nulls.NULL_SELECTIONS`
    transplant_draws : other heads of the model transplanted onto each head's states (descriptive only,
        outside the verdict: :func:`attnsvm.real.nulls.transplant_heads`; default 0). Query "word" or "cls"
    device : None (numpy) or a torch device such as "cuda" for the nuclear solves' dense algebra
        (``device`` of :func:`attnsvm.svm.solve`; needs torch, and CUDA for "cuda")

    With null heads the table also has, per head, ``p_upper, p_lower`` (:data:`attnsvm.real.verdict.P_METHOD`),
    ``p_upper_mc, p_lower_mc`` (exact Monte Carlo), ``q_upper, q_lower`` (Benjamini-Yekutieli over the
    probed heads), ``verdict`` ("beyond null", "not distinguishable", "below null", "no SVM"),
    ``verdict_reason``, ``null_mean, null_sd, z_null`` (descriptive), ``n_null`` (certified draws used),
    ``n_null_dropped``, ``null_kind`` ("spectrum" or "sink"), ``statistic`` (the verdict's), ``p_method``,
    ``p_margin_ratio`` (the margin ratio's upper p-value, whatever the statistic), ``p_note`` (what the p-values could
    not do, in words; "none" when nothing), ``structured_mean``, ``null_seconds``, ``selected_all``;
    with transplanted heads also :func:`attnsvm.real.verdict.transplant_columns` (``transplant_mean``, ...).

    The steps are the functions of :mod:`attnsvm.real.probe_steps`: one forward pass
    (:func:`~attnsvm.real.probe_steps.prepare_probe`), per layer the selections and the SVM sentences
    validated once, per head :func:`~attnsvm.real.probe_steps.head_task` and
    :func:`~attnsvm.real.probe_steps.null_task`, then the verdict over all the probed heads.

    Returns
    -------
    ProbeResult
    """
    import pandas as pd

    t_start = time.perf_counter()
    loaded = None
    if model is not None and not isinstance(model, (str, os.PathLike)):
        loaded = resolve_model(model)  # a loaded model (a ValidationError for anything else)
    elif model is not None:
        settings["model"] = os.fspath(model)
    if sentences is not None:
        settings["sentences"] = list(sentences) if not isinstance(sentences, str) else sentences
    config = probe_config(config, **settings)
    solver = solver_options(max_memory, config.device)
    setup = setup_of(config, model=loaded, max_memory=max_memory)
    config = config.model_copy(update={"layers": setup.layers, "heads": setup.heads})  # explicit: the tasks' list
    view = view_arrays(setup, config.view_sentences)
    rows, support, secs = run_in_process(config, setup, solver, progress)
    table = combine(config, pd.DataFrame(rows)).drop(columns=["part"], errors="ignore")
    seconds = {"forward": setup.t_forward, "forward_cached": setup.cached, "svm": secs["svm"], "nulls": secs["nulls"],
               "total": time.perf_counter() - t_start}
    return result_of(setup, table, view, support, seconds, result_settings(config, setup))


def probe(model=None, texts=None, *, tokenizer=None, layers=None, heads=None, null_draws=None, svm_sentences=None,
          progress=None, max_memory=None, **settings) -> ProbeResult:
    """Probe a model's heads from Python or a notebook: ``attnsvm.probe(model, ["a sentence", ...])``.

    The same probe as :func:`probe_heads` (and ``attnsvm probe``), for the model in any form a notebook has it.

    Parameters
    ----------
    model : None (the shipped MiniLM), a model directory (str or path, written by ``save_pretrained``), a loaded
        :class:`attnsvm.real.pretrained.PretrainedTransformer`, or a ``transformers`` model object already loaded
        (BERT-like, GPT-2-like or rotary, e.g. ``BertModel``, ``GPT2Model``, ``LlamaModel``, or one with a task
        head) with its tokenizer as ``tokenizer`` (:meth:`attnsvm.real.pretrained.PretrainedTransformer.from_model`:
        both are copied, the caller's objects stay as they were)
    texts : list of str (one sentence each), a single str (one sentence), or None: ``n_sentences`` sentences of
        the shipped English corpus
    tokenizer : the tokenizer of a model object (only with one)
    layers, heads : int or list of indices (None: all of the model's)
    null_draws : verdict null heads per head (None: the default, :data:`attnsvm.real.nulls.NULL_DRAWS`; 0: no
        verdict)
    svm_sentences : sentences in each head's SVM, the first ones (None: the default, 48; clipped to the number
        of texts); a list of several probes every head at each
    progress, max_memory : as :func:`probe_heads`
    settings : any other setting of :class:`attnsvm.real.probe_config.ProbeConfig` (``threshold``, ``query``,
        ``seed``, ``n_sentences``, ``null_kind``, ...)

    Returns
    -------
    ProbeResult : ``.table`` one row per head (:meth:`ProbeResult.to_pandas` for a copy); shown in Jupyter
        as the verdict summary and the main columns (:meth:`ProbeResult._repr_html_`)

    Examples
    --------
    >>> import attnsvm                                                          # doctest: +SKIP
    >>> from transformers import AutoModel, AutoTokenizer                       # doctest: +SKIP
    >>> model = AutoModel.from_pretrained("path/to/bert")                       # doctest: +SKIP
    >>> tok = AutoTokenizer.from_pretrained("path/to/bert")                     # doctest: +SKIP
    >>> res = attnsvm.probe(model, ["The cat sat on the mat.", "Dogs bark."], tokenizer=tok, layers=0,
    ...                     heads=[0, 1], svm_sentences=2, null_draws=2)        # doctest: +SKIP
    >>> res.to_pandas()[["layer", "head", "verdict"]]                           # doctest: +SKIP
    """
    if model is not None and not isinstance(model, (str, os.PathLike, PretrainedTransformer)):
        model = PretrainedTransformer.from_model(model, tokenizer, max_memory=max_memory)
    elif tokenizer is not None:
        raise ValidationError("tokenizer is only for a transformers model object: a model directory or a "
                              "PretrainedTransformer brings its own tokenizer")
    if isinstance(texts, str):
        texts = [texts]
    given = {"layers": layers, "heads": heads, "null_draws": null_draws, "svm_sentences": svm_sentences}
    settings.update({k: v for k, v in given.items() if v is not None})
    return probe_heads(texts, model=model, progress=progress, max_memory=max_memory, **settings)


def solver_options(max_memory=None, device=None) -> dict:
    """The options every SVM of a probe gets: ``max_memory``, and ``device`` when one is asked for (checked
    here: a ValidationError when torch, or CUDA for a "cuda" device, is missing)."""
    out = {"max_memory": max_memory}
    if device is not None:
        from attnsvm.svm import gen_constraints, solve

        # the solver checks ``device`` before any work: a one-row SVM asks it now, before the forward pass
        solve(gen_constraints(np.eye(2)[None], np.array([[1.0, 0.0]]), np.array([[True, False]])), "nuclear",
              device=device)
        out["device"] = device
    return out


def result_of(setup: ProbeSetup, table, view: dict, support: dict, seconds: dict, cfg: dict) -> ProbeResult:
    """The :class:`ProbeResult` of a probe's table and its view arrays
    (:func:`~attnsvm.real.probe_steps.view_arrays`)."""
    return ProbeResult(table, list(setup.sentences), setup.qmask.copy() if setup.query == "all" else setup.q,
                       setup.fw.tokens, view["selected"], seconds, cfg, view["attention"], support,
                       view["candidates"], view["matrices"], setup.cached)

def format_table(table, columns=None) -> str:
    """Plain-text table of a probe (one line per head): with null heads the verdict first, the
    random-selection baseline after it (secondary). A value that is no number reads "no SVM" in the row of a
    head without one (no finite ``corr_restricted``), else "none"."""
    from attnsvm.real.probe_view import SCIENTIFIC, main_columns

    if columns is None:
        columns = main_columns(table)
    width = {c: 22 if c == "stable_verdict" else 19 if c == "verdict" else 12 for c in columns}
    head = "  ".join(f"{c:>{width[c]}}" for c in columns)
    lines = [head]
    for _, r in table[columns].astype(object).iterrows():  # object: integer columns stay integers
        cells = []
        no_svm = "corr_restricted" in table.columns and not np.isfinite(float(table.at[r.name, "corr_restricted"]))
        for c in columns:
            v = r[c]
            if isinstance(v, (float, np.floating)) and not np.isfinite(v):  # words, never nan / inf
                cells.append(f"{'no SVM' if no_svm else 'none':>{width[c]}}")
            elif isinstance(v, (float, np.floating)):
                fmt = ".1e" if c in SCIENTIFIC else ".4f"
                cells.append(f"{v:>{width[c]}{fmt}}")
            else:
                cells.append(f"{str(v):>{width[c]}}")
        lines.append("  ".join(cells))
    return "\n".join(lines)
