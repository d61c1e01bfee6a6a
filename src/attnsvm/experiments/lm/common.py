"""Settings and qualitative checks shared by the causal-LM experiments ``lm-*`` (causal-language-modeling.md)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from attnsvm.errors import ValidationError
from attnsvm.experiments.base import ExperimentConfig
from attnsvm.experiments.checks import ALPHA, check
from attnsvm.language import make_lm_data, markov_language

PAPER_LM = ("On the similarity between attention and SVM on the token separation and selection behavior (anonymous; "
            "a withdrawn ICLR 2024 submission, OpenReview forum 1Yq7zIOfj0)")

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


class CycleFields(LanguageFields):
    """Fields of the runs on the cycle language (:func:`attnsvm.language.cycle_language`), which meets Theorem
    3.14/3.15's assumption by construction; a subclass defines ``cycle_runs`` (0: none) and ``m, n, d``."""

    cycle_vocab: PositiveInt = Field(16, ge=3, description="cycle language: token types V (n <= V - 1, d >= V)")
    cycle_rho: float = Field(0.4, gt=0, lt=0.5, description="cycle language: <e_q, e_f(q)> of successive types")

    @model_validator(mode="after")
    def _cycle_sizes(self):
        if getattr(self, "cycle_runs", 0) and not (self.n <= self.cycle_vocab - 1 and self.d >= self.cycle_vocab):
            raise ValidationError(f"the cycle language needs n <= cycle_vocab - 1 and d >= cycle_vocab, got n = "
                                  f"{self.n}, d = {self.d}, cycle_vocab = {self.cycle_vocab}")
        return self


def _run_seeds(seed: int, run: int) -> dict:
    base = 1000 * int(seed) + int(run)
    return {"language": base, "sample": base, "init": base}


def build_runs(cfg, m: int, n: int, d: int, runs: int, scale: float = 1.0, language=None):
    """The per-run data of a configuration: languages, sequences, inits (run r has its own seeds).

    ``language(seed)``: the run's language (default: the config's random Markov language)."""
    datas, inits = [], []
    for r in range(runs):
        s = _run_seeds(cfg.seed, r)
        lang = (markov_language(cfg.vocab, d, successors=cfg.successors, order=cfg.order,
                                concentration=cfg.concentration, seed=s["language"]) if language is None
                else language(s["language"]))
        datas.append(make_lm_data(lang, m, n, seed=s["sample"], scale=scale))
        g = np.random.default_rng(np.random.SeedSequence([s["init"], d, 3]))
        inits.append(cfg.init_scale * g.standard_normal((d, d)))
    return datas, np.stack(inits)


# ------------------------------------------------------------------ qualitative checks of the lm-* experiments


def _plan_sigma(name: str, sigma, sigma_source: str, label: str | None = None) -> tuple:
    """``(sigma, sigma_source)``: the given sigma, else the stored planning sigma of the check ``name`` (group
    ``label``: its own sigma when the planning entry has one) and where it was measured."""
    if sigma is None:
        from attnsvm.experiments.planning import lookup

        entry = lookup(name)
        if entry is not None:
            sigma = entry.get("sigmas", {}).get(label, entry["sigma"]) if label is not None else entry["sigma"]
            sigma_source = f"planning sigma measured on the {entry['measured']} ({entry['runs']} runs)"
    return sigma, sigma_source


def _ordering_plan(name: str, margin: float, effect, sigma, sigma_source: str, standardized, effect_reason: str,
                   label: str | None = None, *, with_source: bool = True):
    """``(effect, sigma, alternative)`` of an ordering: a standardized effect (sigma 1), else the stated ``effect``
    with the given ``sigma`` or the stored planning sigma of the check ``name`` (group ``label``: its own sigma
    when the planning entry has one, :func:`_plan_sigma`); ``(None, None, "")`` without an effect.
    ``with_source=False`` leaves out where the sigma was measured (said once for all groups)."""
    why = f"; {effect_reason}" if effect_reason else ""
    if standardized is not None:
        return float(standardized), 1.0, (f"a mean difference {standardized:g} standard deviations above the margin "
                                          f"{margin:g}{why}")
    if effect is None:
        return None, None, ""
    sigma, sigma_source = _plan_sigma(name, sigma, sigma_source, label)
    if sigma is None:
        return float(effect), None, f"true mean difference {margin + effect:g} (margin + {effect:g}{why}); no planning sigma"
    return float(effect), float(sigma), (f"true mean difference {margin + effect:g} (margin + {effect:g}{why}), "
                                         f"planning sigma {sigma:g}"
                                         + (f" ({sigma_source})" if sigma_source and with_source else ""))


def _run_own(inputs: dict) -> str:
    """A group's own spread, when its power was planned with it (:func:`attnsvm.experiments.power.plan_with_run`)."""
    run = inputs.get("sigma_judged")
    if run is None:
        return ""
    return ", this run's own " + (", ".join(f"{x:.4g}" for x in run) if isinstance(run, list) else f"{run:.4g}")


def _shared_plan(name: str, sigma, sigma_source: str, standardized, effect_reason: str, parts: list) -> str:
    """The head of a grouped ordering's alternative: what its groups share, said once (the effect's reason, where
    the planning sigmas were measured, that each group's power used the larger of its planning sigma and its own
    spread); the groups' own numbers follow it."""
    said = [effect_reason] if effect_reason else []
    if standardized is None:
        _, source = _plan_sigma(name, sigma, sigma_source)
        if source:
            said.append(source.replace("planning sigma measured", "planning sigmas measured", 1))
    if any(p.get("sigma_judged") is not None for p in parts):
        said.append("each planned with the larger of its planning sigma and this run's own")
    return "in every group" + (f" ({'; '.join(said)})" if said else "") + ": "


def _t_p_value(excess: float, se: float, R: int) -> float | None:
    """One-sided p-value of a mean ``excess`` over the margin with standard error ``se`` at ``R`` runs (Student t,
    ``R - 1`` degrees of freedom); runs without spread: 0 above the margin, 1 otherwise; one run: None (no test)."""
    from scipy.stats import t as student_t

    if R < 2:
        return None
    if se == 0:
        return 0.0 if excess > 0 else 1.0
    return float(student_t.sf(excess / se, R - 1))


def ordering_check(name: str, diffs, margin: float = 0.0, detail: str = "", *, source: str, reason: str,
                   alpha: float | None = None, effect: float | None = None, sigma: float | None = None,
                   sigma_source: str = "", spec_ref: str = "", standardized: float | None = None,
                   effect_reason: str = "", record: bool = True):
    """A qualitative claim "A exceeds B by more than ``margin``" tested on per-run paired differences.

    ``diffs (R,)`` holds ``a_r - b_r`` for the R runs (comparator B fixed in advance: a random
    direction, an earlier checkpoint, the other attention). The check passes when the mean
    difference exceeds ``margin`` by the one-sided ``1 - alpha`` Student-t tolerance of its
    standard error (``t_{1-alpha, R-1} s / sqrt(R)``; one run: no tolerance), i.e. when the runs
    are significant evidence of the ordering. NaN values fail the check (never dropped).

    The claim is the alternative: a pass is significant evidence. ``power`` is the probability
    of passing at R runs when the true mean difference exceeds the margin by ``effect`` (stated
    with ``effect_reason``) and the runs' standard deviation is ``sigma``, by default the stored
    planning sigma of the check ``name`` (measured on shifted seeds, never the run judged;
    :mod:`attnsvm.experiments.planning`); ``standardized=d``: the effect is ``d`` standard deviations
    (for quantities without a natural scale; no planning sigma needed). See
    :func:`attnsvm.experiments.power.ordering_power`. A fail with power below 0.8 is
    ``"inconclusive"``; with unknown power it stays a fail. ``record``: report the spread to a planning
    run (:func:`attnsvm.experiments.checks.record_spread`).

    Returns
    -------
    Check of kind "qualitative"; value = the mean difference, threshold ``> margin + tolerance``.
    """
    import math

    from scipy.stats import t as student_t

    from attnsvm.experiments.checks import record_spread, run_note
    from attnsvm.experiments.power import ordering_power, plan_with_run, run_sigma

    alpha = ALPHA if alpha is None else alpha
    vals = np.asarray(diffs, dtype=float).ravel()
    R = vals.size
    if record and effect is not None and standardized is None:
        record_spread(name, vals, ">", effect)
    effect, sigma, alternative = _ordering_plan(name, margin, effect, sigma, sigma_source, standardized, effect_reason)
    inputs, p_plan, p_run = None, None, None
    if sigma is not None:
        # a standardized effect is in units of the runs' own spread: no planning sigma to compare the run's with
        inputs, p_plan, p_run = plan_with_run(dict(fn="ordering", n=max(R, 1), effect=effect, sigma=sigma,
                                                   alpha=alpha), None if standardized is not None else run_sigma(vals))
        alternative += run_note(inputs)
    power = ordering_power(max(R, 1), effect, inputs["sigma"], alpha) if sigma is not None else None
    if R == 0 or not np.all(np.isfinite(vals)):
        bad = int((~np.isfinite(vals)).sum())
        return check(name, float("nan"), ">", margin, (detail + "; " if detail else "") + f"{bad} of {R} runs without a value",
                     source=source, reason=reason, kind="qualitative", spec_ref=spec_ref, claim_is="alternative")
    mean = float(vals.mean())
    se = float(vals.std(ddof=1) / math.sqrt(R)) if R > 1 else 0.0
    tol = float(student_t.ppf(1 - alpha, R - 1)) * se if R > 1 else 0.0
    p_value = _t_p_value(mean - margin, se, R)
    why = (f"{reason}; margin {margin:g} plus the one-sided Student-t tolerance {tol:.3g} of the mean paired difference "
           f"(level {alpha:g}, {R} runs, s.e. {se:.3g})")
    return check(name, mean, ">", margin + tol, (detail + "; " if detail else "") + f"{R} runs, min {vals.min():.4g}, "
                 f"max {vals.max():.4g}", source=source, reason=why, kind="qualitative", power=power,
                 alternative=alternative, claim_is="alternative", spec_ref=spec_ref, power_inputs=inputs, p_value=p_value,
                 power_planned=p_plan, power_judged=p_run)


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
                           reason: str, alpha: float | None = None, effect=None, sigma: float | None = None,
                           sigma_source: str = "", spec_ref: str = "", standardized: float | None = None,
                           effect_reason: str = ""):
    """:func:`ordering_check` in every group (e.g. every configuration) at once.

    ``groups`` maps a label to the per-run differences of that group. Value: the smallest over
    the groups of (mean difference - its Student-t tolerance); passes when it exceeds ``margin``,
    i.e. when every group on its own is significant evidence of the ordering. A group without
    values (or with NaN) fails the check. Power (claim is the alternative): the product over the
    independent groups of :func:`ordering_power` at each group's run count (every group must pass),
    with ``effect`` (a number, or label -> number: each group's stated effect) and each group's
    planning sigma (the stored entry's ``sigmas`` for the label, else its largest group's), or a
    ``standardized`` effect. ``power_inputs``: ``fn="product"`` with one ``fn="ordering"`` part per group, each
    carrying its group's ``label`` (so that another preset's power can be planned group by group:
    :func:`attnsvm.experiments.claims.full_power`).
    """
    from attnsvm.experiments.checks import record_spread
    from attnsvm.experiments.power import ordering_power

    from attnsvm.experiments.checks import run_note
    from attnsvm.experiments.power import plan_with_run, run_sigma

    alpha_ = ALPHA if alpha is None else alpha
    power, alternative, power_planned, power_judged, inputs = None, "", None, None, None
    if groups and (effect is not None or standardized is not None):
        if effect is not None and standardized is None:
            record_spread(name, None, ">", min(effect.values()) if isinstance(effect, dict) else effect,
                          groups=groups)
        powers, plans, runs, alts, parts_in = [], [], [], [], []
        several = len(groups) > 1  # what every group shares (the effect's reason, where sigma was measured) once
        for label, v in groups.items():
            e = effect.get(label) if isinstance(effect, dict) else effect
            e, sg, alt = _ordering_plan(name, margin, e, sigma, sigma_source, standardized,
                                        "" if several else effect_reason, str(label), with_source=not several)
            if sg is None:
                powers.append(None)
            else:
                inp, p_plan, p_run = plan_with_run(
                    dict(fn="ordering", n=max(np.asarray(v).size, 1), effect=e, sigma=sg, alpha=alpha_,
                         label=str(label)), None if standardized is not None else run_sigma(v))
                powers.append(ordering_power(inp["n"], e, inp["sigma"], alpha_))
                parts_in.append(inp)
                plans.append(p_plan)
                runs.append(p_run)
                alt += run_note(inp) if not several else _run_own(inp)
            alts.append(f"{label}: {alt}")
        if all(p is not None for p in powers):
            power = float(np.prod(powers))
            power_planned = float(np.prod(plans))
            power_judged = float(np.prod(runs)) if all(p is not None for p in runs) else None
            inputs = dict(fn="product", parts=parts_in, groups=len(parts_in))
        alternative = (_shared_plan(name, sigma, sigma_source, standardized, effect_reason, parts_in) + "; ".join(alts)
                       if several else alts[0])
    parts, worst, ok, p_value = [], float("inf"), True, 0.0
    for label, diffs in groups.items():
        c = ordering_check(str(label), diffs, 0.0, source=source, reason=reason, alpha=alpha, record=False)
        bound = float(c.threshold.split()[-1])
        excess = c.value - bound if c.value == c.value else float("nan")
        ok &= excess == excess
        worst = min(worst, excess) if excess == excess else worst
        # every group must pass (an intersection-union test): its p-value is the largest group's
        v = np.asarray(diffs, dtype=float).ravel()
        p_g = _t_p_value(float(v.mean()) - margin, float(v.std(ddof=1) / np.sqrt(v.size)), v.size) \
            if v.size > 1 and np.all(np.isfinite(v)) else None
        p_value = max(p_value, 1.0 if p_g is None else p_g)
        parts.append(f"{label}: {c.value:.3g} (tol {bound:.2g})")
    value = worst if ok and groups else float("nan")
    why = (f"{reason}; in every group the mean paired difference minus its one-sided Student-t tolerance (level "
           f"{alpha_:g}) must exceed the margin {margin:g}")
    return check(name, value, ">", margin, (detail + "; " if detail else "") + ", ".join(parts), source=source,
                 reason=why, kind="qualitative", power=power, alternative=alternative, claim_is="alternative",
                 spec_ref=spec_ref, p_value=p_value if groups else None, power_planned=power_planned,
                 power_judged=power_judged, power_inputs=inputs)


def decided_by_control(fit, control):
    """A fit comparison (e.g. ``W_fin + R W_svm`` against another comparator) decided by its random-direction control.

    ``W_fin + R W_svm`` is fitted to GD's own iterate, so its fit says something about the SVM only when it
    beats random directions fitted the same way: when ``control`` does not pass, a passing ``fit`` becomes
    ``"inconclusive"`` (the comparison is not evidence); a failing fit stays a fail.
    """
    from attnsvm.experiments.checks import Check

    if control.verdict == "pass" or fit.verdict != "pass":
        return fit
    return Check(fit.name, fit.value, fit.threshold, False, fit.source,
                 fit.threshold_reason + "; decided by the random-direction control, which did not pass",
                 fit.kind, fit.detail, verdict="inconclusive", power=None,
                 alternative="random directions fitted the same way (the control did not pass)", spec_ref=fit.spec_ref,
                 claim_is=fit.claim_is, p_value=fit.p_value)
