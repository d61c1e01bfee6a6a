"""Helpers shared by the tf-* experiments (Transformers as SVMs): spec sources, the certified check at the
tf bars, two-sided tolerances, deviations of a quick preset."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnsvm.metrics import correlation
from attnsvm.experiments.checks import ALPHA, Check, majority_check  # noqa: F401  (re-exported)
from attnsvm.experiments.common import certified_check

SPEC = "transformers-as-svms.md"


def item(k: int, extra: str = "") -> str:
    """Source of a 7.2 reproduction target."""
    return f"{SPEC} 7.2 item {k}" + (f" ({extra})" if extra else "")


def section(s: str) -> str:
    """Source of any other spec section."""
    return f"{SPEC} {s}"


#: the tf-* experiments' solves judged at the nuclear gap bar (the others at the Frobenius one)
NORMS = {"nuc": "nuclear"}


def certificate_integrity(table: pd.DataFrame, prefixes, what: str = "") -> Check:
    """Integrity: every SVM the rows of ``table`` rely on is certified (:func:`~attnsvm.experiments.common.certified_check`
    on the columns ``{prefix}_*`` of :func:`~attnsvm.experiments.common.svm_record`; prefix "nuc" at the nuclear bar).

    A row without the columns counts as uncertified; an empty table fails (nothing was compared).
    """
    return certified_check(table, prefixes, what, norms=NORMS,
                           reason="spec item 6 of issue 11: a comparison needs a certified SVM (relative max "
                                  "violation <= 1e-8, relative duality gap <= 1e-8 Frobenius / 1e-6 nuclear); "
                                  "uncertified solutions are stored as NaN comparisons")


def approx_mean_check(name: str, values, lo: float, hi: float, detail: str = "", *, source: str, reason: str,
                      slack: float = 0.0, alpha: float = ALPHA, sigma: float | None = None,
                      effect: float | None = None, sigma_source: str = "", hi_is_bound: bool = False) -> Check:
    """The mean of per-run ``values`` lies in the spec's range ``[lo, hi]`` ("about x").

    Two-sided Student-t tolerance ``t_{1-alpha/2, R-1} * s / sqrt(R)`` on each side plus a fixed
    ``slack`` (rounding of the spec's figure); NaN values fail the check. ``hi_is_bound``: ``hi`` is
    already a bound with slack (the spec's "assert < hi"), so no tolerance is added on that side.

    The claim is the null. ``power``: a lower bound on the probability of failing at R runs when
    the true mean is ``effect`` outside the range (either side) and the runs' standard deviation
    is the planning ``sigma`` (the one-sided noncentral-t power at level ``alpha / 2`` of the
    effect beyond the fixed ``slack``); sigma and effect default to the stored planning entry
    (:mod:`attnsvm.experiments.planning`). Without them a pass is ``"inconclusive"``.
    """
    from attnsvm.experiments.checks import planned, record_spread, run_note
    from attnsvm.experiments.power import decide, mean_power, plan_with_run, run_sigma
    from scipy.stats import t as student_t

    vals = np.asarray(values, dtype=float).ravel()
    R = vals.size
    record_spread(name, vals, "~", lo, hi)
    if R == 0 or not np.all(np.isfinite(vals)):
        return Check(name, float("nan"), f"in [{lo:g}, {hi:g}]", False, source,
                     f"spec range [{lo:g}, {hi:g}]; {int((~np.isfinite(vals)).sum())} of {R} runs have no value",
                     "statistical", detail, claim_is="null")
    mean = float(vals.mean())
    se = float(vals.std(ddof=1) / math.sqrt(R)) if R > 1 else 0.0
    tol = (float(student_t.ppf(1 - alpha / 2, R - 1)) * se if R > 1 else 0.0) + slack
    why = (f"spec range [{lo:g}, {hi:g}]; two-sided Student-t tolerance (level {alpha:g}, {R} runs, s.e. {se:.3g})"
           + (f" plus {slack:g}" if slack else "") + f" = {tol:.3g}"
           + (f" on the low side; the upper end {hi:g} is the spec's bound (no tolerance on it)" if hi_is_bound else "")
           + f"; {reason}")
    a, b = lo - tol, (hi if hi_is_bound else hi + tol)
    passed = bool(a <= mean <= b) if not hi_is_bound else bool(a <= mean < b)
    power, alternative, inputs, p_plan, p_run = None, "", None, None, None
    sigma, effect, sigma_source = planned(name, sigma, effect, sigma_source)
    if sigma is not None and effect is not None and effect > slack:
        # the fixed slack moves the bar by a constant: the power is that of the effect beyond the slack
        inputs, p_plan, p_run = plan_with_run(dict(fn="mean", n=R, op=">=", effect=effect - slack, sigma=sigma,
                                                   alpha=alpha / 2), run_sigma(vals))
        power = mean_power(R, ">=", effect - slack, inputs["sigma"], alpha / 2)
        alternative = (f"true mean {lo - effect:g} or {hi + effect:g} ({effect:g} outside the range), planning sigma "
                       f"{sigma:g}" + (f" ({sigma_source})" if sigma_source else "") + run_note(inputs))
        why += f"; power at least {power:.3f} against {alternative}"
    else:
        why += "; power unknown (no planning sigma, or an effect within the slack)"
    return Check(name, mean, f"in [{a:.4g}, {b:.4g}" + (")" if hi_is_bound else "]"), passed, source, why,
                 "statistical", detail, verdict=decide(passed, power, "null"), power=power, alternative=alternative,
                 power_inputs=inputs, claim_is="null", power_planned=p_plan, power_judged=p_run)


def nan_corr(W, sol) -> np.ndarray:
    """``corr(W[..., :, :], sol.W)`` if ``sol`` is certified, else NaN of the same leading shape."""
    W = np.asarray(W)
    if not sol.certified:
        return np.full(W.shape[:-2], np.nan)
    return np.asarray(correlation(W, sol.W), dtype=float)
