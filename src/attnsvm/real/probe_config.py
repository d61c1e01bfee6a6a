"""The probe's settings, one default and one validation each: :class:`ProbeConfig`.

Every way of running the probe reads this one object: :func:`attnsvm.real.probe.probe_heads` (in this
process), the stored probe's tasks (:mod:`attnsvm.experiments.real.probe_run`, resumable from disk) and
``attnsvm probe`` (which builds it from its options). A setting is defaulted and checked here only; the
steps below it take the validated values.

What is *not* a setting: the memory limit (``max_memory``, a property of the machine, passed explicitly on
both paths: an argument of :func:`~attnsvm.real.probe.probe_heads`, and handed by the runner to each stored
task's ``run_task``, never through ``$ATTNSVM_MAX_MEMORY``; never part of a stored probe's identity), a progress
callback, and a loaded model object (``model`` here is a directory or None;
:func:`attnsvm.real.probe.probe_heads` also takes a loaded :class:`~attnsvm.real.pretrained.PretrainedTransformer`
beside the config).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationError as _PydError
from pydantic import field_validator, model_validator

from attnsvm.errors import ValidationError
from attnsvm.real.nulls import NULL_DRAWS, NULL_SELECTIONS, verdict_null_kinds
from attnsvm.real.verdict import STATISTICS

#: the query rules (:func:`attnsvm.real.probe_steps.choose_queries`)
QUERIES = ("word", "cls", "all")
#: sentences entering each head's SVM by default (the first ones of the probe's sentences)
SVM_SENTENCES = 48


class ProbeConfig(BaseModel):
    """The settings of one probe (see :func:`attnsvm.real.probe.probe_heads` for what each does).

    Attributes
    ----------
    sentences : list of str or None (None: ``n_sentences`` corpus sentences, :func:`attnsvm.real.sentences.corpus_sentences`)
    n_sentences : int >= 1, corpus sentences when ``sentences`` is None
    layers, heads : lists of indices, or None for all of the model's (checked against the model when it is loaded)
    query : "word", "cls" or "all"
    threshold : attention weight in (0, 1] that counts as selected
    svm_sentences : int >= 0 (0: no SVM), or a list of several values >= 1 (sorted, without repeats: every head at
        each m; see :attr:`svm_sizes`); default :data:`SVM_SENTENCES`
    baseline_draws : int >= 1 random selections per head
    baseline_max_m : the random baselines only at m <= this (None: at every m); the secondary baseline is most of a
        head task's cost at large m and answers nothing the nulls do not
    seed : int (the corpus sentences, the queries, the baselines' and nulls' draws)
    query_seed : int or None, another draw of the queries on the same sentences (None: ``seed``), for a head's
        spread over query draws
    max_length : int >= 1 or None (the smaller of 128 and the model's position limit)
    model : None (the shipped MiniLM) or a model directory
    view_sentences : int >= 0 sentences per head kept for the page
    null_draws : int >= 0 verdict nulls per head (default :data:`attnsvm.real.nulls.NULL_DRAWS`; 0 with ``query="all"``,
        which has no nulls yet)
    null_kind : the verdict's null (default "sink", :func:`attnsvm.real.nulls.sink_null`: it keeps the head's
        query-independent key preference, the attention sink every trained head shares, and passed the spectrum
        null's calibration, tests/test_probe_sink_calibration.py), a kind of :data:`attnsvm.real.nulls.NULLS` that a
        verdict may use (:func:`attnsvm.real.nulls.verdict_null_kinds`)
    statistic : what the verdict compares a head with its nulls by, one of
        :data:`attnsvm.real.verdict.STATISTICS`: "corr_restricted" (default) or "margin_ratio"
        (:func:`attnsvm.real.layer.margin_ratio`, the predictive t on its log; consistent as m grows, blind to heads
        whose attention falls off gradually: docs/guide/probe.md, "Which statistic is consistent as m grows")
    spectrum_draws : int >= 0 or None, spectrum nulls drawn beside a verdict of another kind, for the descriptive
        ``spectrum_*`` columns (None: ``null_draws``; all drawn, never stopped early)
    null_stop : draw the verdict nulls one at a time and stop once no further draw can change any verdict
    structured_draws, transplant_draws : int >= 0, descriptive nulls per head (0 with ``query="all"``)
    null_selection : one of :data:`attnsvm.real.nulls.NULL_SELECTIONS`
    device : None (numpy) or a torch device such as "cuda" for the nuclear solves
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)

    sentences: list[str] | None = None
    n_sentences: PositiveInt = 256
    layers: list[int] | None = None
    heads: list[int] | None = None
    query: Literal["word", "cls", "all"] = "word"
    threshold: float = Field(0.1, gt=0.0, le=1.0)
    svm_sentences: int | list[int] = SVM_SENTENCES
    baseline_draws: PositiveInt = 1
    baseline_max_m: PositiveInt | None = None
    seed: int = 0
    query_seed: int | None = None
    max_length: PositiveInt | None = None
    model: str | None = None
    view_sentences: NonNegativeInt = 4
    null_draws: NonNegativeInt = NULL_DRAWS
    null_kind: str = "sink"
    statistic: str = STATISTICS[0]
    spectrum_draws: NonNegativeInt | None = None
    null_stop: bool = True
    structured_draws: NonNegativeInt = 0
    transplant_draws: NonNegativeInt = 0
    null_selection: str = "threshold"
    device: str | None = None

    @field_validator("svm_sentences", mode="before")
    @classmethod
    def _svm_sentences(cls, v):
        values = list(v) if isinstance(v, (list, tuple)) else [v]
        if not values or any(isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < 0
                             for x in values):
            raise ValueError(f"svm_sentences must be an integer >= 0 or a list of them, got {v!r}")
        values = sorted({int(x) for x in values})
        if len(values) == 1:
            return values[0]
        if values[0] < 1:
            raise ValueError(f"svm_sentences as a list must hold integers >= 1, got {v!r}")
        return values

    @field_validator("null_kind")
    @classmethod
    def _null_kind(cls, v):
        if v not in verdict_null_kinds():  # the registry as it is now (a kind registered later is known)
            raise ValueError(f"null_kind must be one of {verdict_null_kinds()}, got {v!r}")
        return v

    @field_validator("null_selection", "statistic")
    @classmethod
    def _one_of(cls, v, info):
        choices = {"null_selection": NULL_SELECTIONS, "statistic": STATISTICS}[info.field_name]
        if v not in choices:
            raise ValueError(f"{info.field_name} must be one of {choices}, got {v!r}")
        return v

    @field_validator("layers", "heads", mode="before")
    @classmethod
    def _indices(cls, v):
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            return [int(v)]
        return v

    @model_validator(mode="before")
    @classmethod
    def _query_all(cls, data):
        # nulls of the sequence SVM are not implemented yet: query "all" draws none
        if isinstance(data, dict) and data.get("query") == "all":
            data = {**data, "null_draws": 0, "structured_draws": 0, "transplant_draws": 0}
        return data

    # ------------------------------------------------------------------ derived values
    @property
    def svm_sizes(self) -> list[int]:
        """The numbers of SVM sentences m asked for, ascending (one value: a list of one)."""
        return list(self.svm_sentences) if isinstance(self.svm_sentences, list) else [int(self.svm_sentences)]

    @property
    def several_m(self) -> bool:
        """Whether several m were asked for (then the table has an ``m`` column and ``stable_verdict``)."""
        return isinstance(self.svm_sentences, list)

    def sizes_for(self, n: int) -> list[int]:
        """The numbers of SVM sentences for a probe of ``n`` sentences: each m clipped to n, without repeats."""
        return sorted({min(int(m), int(n)) for m in self.svm_sizes})

    def baselines_at(self, m: int) -> int:
        """The random baseline draws of a head task at ``m`` SVM sentences (0 above :attr:`baseline_max_m`)."""
        return int(self.baseline_draws) if self.baseline_max_m is None or m <= self.baseline_max_m else 0

    @property
    def has_nulls(self) -> bool:
        """Whether null heads are drawn: one query per sentence, SVMs, and some null draws."""
        return self.query != "all" and max(self.svm_sizes) >= 1 and \
            (self.null_draws + self.structured_draws + self.transplant_draws) > 0

    @property
    def has_verdict(self) -> bool:
        """Whether the table gets a verdict (verdict nulls or structured nulls are drawn)."""
        return self.has_nulls and bool(self.null_draws or self.structured_draws)

    @property
    def tested(self) -> int | None:
        """Heads probed with nulls (the stopping level's m), known once layers and heads are explicit."""
        return None if self.layers is None or self.heads is None else len(self.layers) * len(self.heads)


def probe_config(config: ProbeConfig | dict | None = None, **settings) -> ProbeConfig:
    """A validated :class:`ProbeConfig` from a config, a dict or keyword settings (the config's values overridden
    by ``settings``); a setting outside its range is a :class:`attnsvm.errors.ValidationError` naming it."""
    base = {} if config is None else (config.model_dump() if isinstance(config, ProbeConfig) else dict(config))
    if isinstance(config, ProbeConfig) and not settings:
        return config
    try:
        return ProbeConfig(**{**base, **settings})
    except _PydError as exc:
        err = exc.errors()[0]
        name = ".".join(str(x) for x in err.get("loc", ())) or "probe settings"
        msg = str(err.get("msg", exc)).removeprefix("Value error, ")
        got = err.get("input")
        raise ValidationError(f"{name}: {msg}" + ("" if name in msg or isinstance(got, dict) else f", got {got!r}")) \
            from None
