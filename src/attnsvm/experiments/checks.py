"""Verdicts: a claim of the theory as a measured number against a threshold with a stated origin.

Every :class:`Check` says

* ``name``: the claim, in words;
* ``source``: the paper and the place of the claim in it (``'arXiv 2308.16898 "Transformers as
  Support Vector Machines", experiment: percentage of convergence types ...'``); an internal
  spec reference given as the source (``"transformers-as-svms.md 7.2 item 5"``) is moved to
  ``spec_ref`` and replaced by its paper place (:func:`attnsvm.experiments.places.paper_source`);
* ``value`` and ``threshold``: what was measured and the bar (``">= 0.4"``);
* ``threshold_reason``: where the bar comes from: the spec's number, or a tolerance
  with its reason (a sampling interval at the run count, solver precision, ...).
  A threshold is never derived from the value this code measured;
* ``kind``: ``"spec"`` (the spec's number), ``"statistical"`` (the spec's number with a
  sampling tolerance at the run count), ``"qualitative"`` (the spec gives no number:
  a comparison against a comparator fixed in advance), ``"tolerance"`` (an exact claim
  checked to numerical precision), ``"integrity"`` (the run itself: tasks completed,
  certificates passed);
* ``verdict``: ``"pass"``, ``"fail"``, ``"inconclusive"`` (a statistical check whose power
  against its stated alternative is below :data:`attnsvm.experiments.power.POWER_GOAL`:
  a pass of a claim tested as the null, a fail of a claim tested as the alternative) or
  ``"finding"`` (a failing check listed in ``findings.txt``); ``passed`` is true only for
  ``"pass"``;
* ``power`` (statistical checks: see :mod:`attnsvm.experiments.power`; ``None`` otherwise)
  and ``alternative`` (what the power is computed against; ``""`` when none);
* ``spec_ref``: the internal spec line the claim was transcribed from (not shown to users);
* ``power_inputs``: what the power was computed from (the power function and its arguments, run counts
  included), so that the power at another preset's size can be computed without running it
  (:func:`attnsvm.experiments.power.power_from`); ``None`` without a power;
* ``detail`` (extra measurements that explain the value);
* ``claim_is``: which rule decided the verdict (:data:`CLAIM_IS` says each in words): ``"null"`` (the claim is
  the null hypothesis: a pass needs power), ``"alternative"`` (the claim is the alternative: a pass is a
  significant test at level ``alpha``, and power decides whether a fail can be a fail) or ``"exact"`` (no sampling
  test: the value against a fixed bar). A statistical check (kind ``"statistical"``, or any check with a power)
  must state ``"null"`` or ``"alternative"``: building one without it raises ValueError;
* ``power_planned`` and ``power_judged``: the power at the planning sigma alone and at the judged run's own
  spread (:func:`attnsvm.experiments.power.plan_with_run`); ``power`` itself is planned with the larger of the two
  sigmas (None where the check has no sigma: shares, signs);
* ``p_value``: for a claim tested as the alternative, the one-sided p-value of the test that decided it (the
  probability, under the null the check rejects, of a result at least as extreme); ``None`` otherwise.

Statistical claims over R runs use one-sided tests at level ``alpha = 0.01``
(:data:`ALPHA`): a share is compared with the spec's target through the exact
binomial quantile at R (:func:`share_check`), a mean through a Student-t interval
of its standard error (:func:`mean_check`), a difference of two shares through the
normal approximation with Agresti-Caffo smoothing (:func:`share_difference_check`).
The quick presets therefore test the same claims with wider, stated tolerances.

Findings are spec targets that careful measurement contradicts. They stay failing
checks; they are listed in ``findings.txt`` beside this module (one line per check:
``experiment | check name | preset | reason``) and do not change the exit status.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

__all__ = [
    "Check", "check", "share_check", "mean_check", "share_difference_check", "band_check", "integrity_check",
    "ALPHA", "KINDS", "VERDICTS", "Finding", "load_findings", "FINDINGS_FILE", "mark_findings", "count_failures",
    "count_verdicts", "counts_against", "CLAIM_IS", "CORR_TOL", "bounded_check", "correlation_range_check",
    "correlation_partners", "correlation_parts_check", "correlation_parts_checks", "majority_check",
]

#: One-sided level of every statistical check (false-alarm rate per check when the claim holds exactly).
ALPHA = 0.01
KINDS = ("spec", "statistical", "qualitative", "tolerance", "integrity")
VERDICTS = ("pass", "fail", "inconclusive", "finding")
#: the rule a check's verdict follows, in the words the report and the claims page show
CLAIM_IS = {
    "null": "the claim is the null (a pass needs power)",
    "alternative": "the claim is the alternative (a pass is a significant test at level alpha; power decides whether "
                   "a fail can be a fail)",
    "exact": "no sampling test (the value against a fixed bar: the spec's number, a numerical tolerance or the "
             "integrity of the run)",
}
_STRICT = True
FINDINGS_FILE = os.path.join(os.path.dirname(__file__), "findings.txt")
#: set to a list by :func:`attnsvm.experiments.planning.measure`: the mean checks record the spread they see
_RECORD: list | None = None


def _sd(vals) -> tuple[float, int]:
    vals = np.asarray(vals, dtype=float).ravel()
    vals = vals[np.isfinite(vals)]
    return (float(vals.std(ddof=1)) if vals.size > 1 else 0.0), int(vals.size)


def record_spread(name: str, vals, op: str, lo: float, hi: float | None = None, groups: dict | None = None) -> None:
    """Record the standard deviation of the per-run ``vals`` a mean check received (planning runs only).

    ``groups``: label -> per-run values of each group of a grouped check (each group's spread is recorded
    too, under ``"sigmas"``; ``vals`` is then ignored and the recorded sigma is the largest group's)."""
    if _RECORD is not None:
        entry = {"name": name, "op": op, "lo": float(lo), "hi": None if hi is None else float(hi)}
        if groups:
            sds = {str(k): _sd(v) for k, v in groups.items()}
            entry["sigmas"] = {k: sd for k, (sd, _) in sds.items()}
            entry["sd"], entry["runs"] = max(sd for sd, _ in sds.values()), min(n for _, n in sds.values())
        else:
            entry["sd"], entry["runs"] = _sd(vals)
        _RECORD.append(entry)


def planned(name: str, sigma, effect, sigma_source: str) -> tuple:
    """``(sigma, effect, sigma_source)``: the given ones, else the stored planning entry of the check ``name``
    (:mod:`attnsvm.experiments.planning`), else ``(None, None, "")``."""
    if sigma is not None and effect is not None:
        return sigma, effect, sigma_source
    from attnsvm.experiments.planning import lookup

    entry = lookup(name)
    if entry is None:
        return sigma, effect, sigma_source
    return (entry["sigma"], entry["effect"] if effect is None else effect,
            f"planning sigma measured on the {entry['measured']} ({entry['runs']} runs); alternative: {entry['rule']}")

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b,
}


@dataclass(frozen=True)
class Check:
    """A claim of a paper stated as a measured number against a threshold of stated origin."""

    name: str
    value: float
    threshold: str
    passed: bool
    source: str = ""
    threshold_reason: str = ""
    kind: str = "spec"
    detail: str = ""
    verdict: str = ""
    power: float | None = None
    alternative: str = ""
    spec_ref: str = ""
    power_inputs: dict | None = None
    claim_is: str = ""
    p_value: float | None = None
    power_planned: float | None = None
    power_judged: float | None = None

    def __post_init__(self):
        from attnsvm.experiments.places import is_internal, paper_source

        if is_internal(self.source):
            # the reader gets the paper and its place; the spec line stays internal (spec_ref)
            ref = "; ".join(x for x in (self.source, self.spec_ref) if x)
            object.__setattr__(self, "spec_ref", ref)
            object.__setattr__(self, "source", paper_source(self.source))
        verdict = self.verdict or ("pass" if self.passed else "fail")
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        object.__setattr__(self, "verdict", verdict)
        object.__setattr__(self, "passed", verdict == "pass")
        p = self.power
        object.__setattr__(self, "power", None if p is None or p != p else float(p))
        claim = self.claim_is
        if claim and claim not in CLAIM_IS:
            raise ValueError(f"claim_is must be one of {tuple(CLAIM_IS)}, got {claim!r}")
        tested = self.kind == "statistical" or self.power is not None
        if tested and claim not in ("null", "alternative"):
            raise ValueError(f"check {self.name!r}: a statistical check (kind {self.kind!r}, power {self.power}) "
                             "states claim_is 'null' or 'alternative'")
        object.__setattr__(self, "claim_is", claim or "exact")
        pv = self.p_value
        pv = None if pv is None or pv != pv else min(1.0, max(0.0, float(pv)))
        if pv is not None and self.claim_is != "alternative":
            raise ValueError(f"check {self.name!r}: a p_value is stated for a claim tested as the alternative only")
        object.__setattr__(self, "p_value", pv)
        for f in ("power_planned", "power_judged"):
            v = getattr(self, f)
            object.__setattr__(self, f, None if v is None or v != v else float(v))

    def to_dict(self) -> dict:
        d = asdict(self)
        v = None if self.value is None else float(self.value)
        d["value"] = None if v is None or v != v else v
        d["passed"] = bool(self.passed)
        return d


def _null_verdict(passed: bool, power) -> str:
    from attnsvm.experiments.power import decide

    return decide(bool(passed), power, "null")


def _power_note(power, alternative: str) -> str:
    if power is None or power != power:
        return f"power unknown ({alternative})" if alternative else "power unknown"
    return f"power {power:.3f} against {alternative}"


def _validate(source: str, reason: str, kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"check kind must be one of {KINDS}, got {kind!r}")
    if not str(source).strip():
        raise ValueError("a check needs a source (the spec section its claim comes from)")
    if not str(reason).strip():
        raise ValueError("a check needs a threshold_reason (the spec's number, or a tolerance and why)")


def run_note(inputs: dict | None) -> str:
    """The alternative's note on the judged run's own spread (:func:`attnsvm.experiments.power.plan_with_run`)."""
    run = (inputs or {}).get("sigma_judged")
    if run is None:
        return ""
    run = ", ".join(f"{x:.4g}" for x in run) if isinstance(run, list) else f"{run:.4g}"
    return f"; planned with the larger of the planning sigma and this run's own ({run})"


def check(name: str, value: float, op: str, bound: float, detail: str = "", *, source: str = "", reason: str = "",
          kind: str = "spec", power: float | None = None, alternative: str = "", claim_is: str | None = None,
          spec_ref: str = "", power_inputs: dict | None = None, p_value: float | None = None,
          power_planned: float | None = None, power_judged: float | None = None) -> Check:
    """Compare ``value`` with ``bound`` (``op`` in <, <=, >, >=, ==); NaN never passes.

    ``source`` and ``reason`` are required (the empty defaults exist only so that a
    missing one is caught by :func:`_validate` with a clear message). A statistical
    comparison passes its ``power`` against ``alternative`` and ``claim_is`` (``"null"`` or
    ``"alternative"``, :func:`attnsvm.experiments.power.decide`) to get its verdict; a claim tested as the
    alternative states the ``p_value`` of its test (kept only when given). Without ``claim_is`` the check is exact
    (``claim_is = "exact"``): a statistical kind then raises ValueError.
    """
    if _STRICT:
        _validate(source, reason, kind)
    if op not in _OPS:
        raise ValueError(f"op must be one of {tuple(_OPS)}, got {op!r}")
    value = float(value)
    passed = bool(_OPS[op](value, bound)) if value == value else False
    verdict = ""
    if claim_is is not None:
        from attnsvm.experiments.power import decide

        verdict = decide(passed, power, claim_is) if value == value else "fail"
        reason = f"{reason}; {_power_note(power, alternative)}"
    return Check(name=name, value=value, threshold=f"{op} {bound:g}", passed=passed, source=source,
                 threshold_reason=reason, kind=kind, detail=detail, verdict=verdict, power=power,
                 alternative=alternative, spec_ref=spec_ref, power_inputs=power_inputs if power is not None else None,
                 claim_is=claim_is or "", p_value=p_value if claim_is == "alternative" else None,
                 power_planned=power_planned, power_judged=power_judged)


def integrity_check(name: str, value: float, op: str, bound: float, detail: str = "", *, reason: str) -> Check:
    """A check on the run itself (every task completed, every SVM certified): source "attnsvm"."""
    return check(name, value, op, bound, detail, source="attnsvm (integrity of the run)", reason=reason,
                 kind="integrity")


#: how far a stored correlation or cosine may exceed 1 in magnitude: <A, B> / (||A|| ||B||) in float64 is off by a few
#: units of 2^-52 per entry summed (below 1e-12 for the arrays of these experiments, at most ~10^4 entries); 1e-9
#: leaves three orders of magnitude for that rounding. A raw inner product of arrays whose norms' product is not 1
#: (the bug this guards against) leaves [-1, 1] by the factor ||A|| ||B||
CORR_TOL = 1e-9


def bounded_check(name: str, values, bound: float, detail: str = "", *, reason: str, bug: str) -> Check:
    """Integrity partner of a measured quantity: every row's ``|value| <= bound`` (a bound the quantity obeys by
    construction, e.g. a correlation's 1). ``values (N,)``: the rows (NaN rows, comparisons refused for an
    uncertified SVM, are skipped and counted in the detail; no finite row at all fails). ``bug``: the plausible
    error the bound catches, stated as the check's ``alternative``.

    Value: the largest ``|value|`` over the finite rows."""
    vals = np.asarray(values, dtype=float).ravel()
    finite = vals[np.isfinite(vals)]
    value = float(np.abs(finite).max()) if finite.size else float("nan")
    skipped = int(vals.size - finite.size)
    extra = f"{finite.size} rows" + (f" ({skipped} without a value skipped)" if skipped else "")
    return check(name, value, "<=", bound, (detail + "; " if detail else "") + extra,
                 source="attnsvm (integrity of the run)", reason=reason, kind="integrity",
                 alternative=f"a plausible bug: {bug}")


def correlation_range_check(what: str, values, detail: str = "") -> Check:
    """Integrity partner of a correlation (or cosine) check: ``|corr| <= 1 + CORR_TOL`` in every row of ``values (N,)``
    (:func:`bounded_check`), named ``"<what> lies in [-1, 1] in every row ..."``; fails on a raw inner product."""
    return bounded_check(f"{what} lies in [-1, 1] in every row (a correlation of normalized arrays)", values,
                         1.0 + CORR_TOL, detail,
                         reason=f"a correlation <A, B> / (||A|| ||B||) lies in [-1, 1] (Cauchy-Schwarz); tolerance "
                                f"{CORR_TOL:g} for float64 rounding (below 1e-12 at these sizes)",
                         bug="a raw inner product <A, B> instead of the correlation (the arrays not normalized): "
                             "the value is ||A|| ||B|| times the correlation")


def correlation_partners(table, columns: dict) -> list[Check]:
    """:func:`correlation_range_check` of every column of ``table`` named in ``columns`` (column -> what it holds, in
    words) that the table has: the integrity partners of an experiment's correlation checks."""
    return [correlation_range_check(f"{what} ({col})", table[col].to_numpy(np.float64))
            for col, what in columns.items() if col in table.columns]


def correlation_parts_check(what: str, corr, inner, norm_a, norm_b, detail: str = "") -> Check:
    """Integrity partner of a correlation stored with the parts it was computed from: in every row of the arrays
    ``corr, inner, norm_a, norm_b (N,)``, ``corr`` equals ``inner / (norm_a norm_b)`` to :data:`CORR_TOL`.

    Unlike :func:`correlation_range_check`, this catches a raw inner product whatever the norms' product: a value
    left unnormalized is ``norm_a norm_b`` times the correlation, off the recomputed one by ``|corr| |1 - norm_a
    norm_b|`` (MiniLM's heads: norms' products 0.03-0.2, inside [-1, 1]). A row whose ``corr`` and recomputed value
    are both NaN (no certified SVM: no comparison made) is skipped and counted in the detail; a row where only one of
    them is NaN disagrees (value inf); no row with both finite fails (value NaN).

    Value: the largest ``|corr - inner / (norm_a norm_b)|`` over the rows."""
    c, i, a, b = (np.asarray(x, dtype=np.float64).ravel() for x in (corr, inner, norm_a, norm_b))
    if not c.shape == i.shape == a.shape == b.shape:
        raise ValueError(f"corr, inner, norm_a and norm_b must have one length, got {c.size}, {i.size}, {a.size}, "
                         f"{b.size}")
    with np.errstate(divide="ignore", invalid="ignore"):
        again = i / (a * b)
    again = np.where(np.isfinite(again), again, np.nan)  # a zero norm: no correlation (corr is NaN there too)
    both, neither = np.isfinite(c) & np.isfinite(again), np.isnan(c) & np.isnan(again)
    odd = int(np.sum(~both & ~neither))
    value = float("inf") if odd else (float(np.abs(c - again)[both].max()) if both.any() else float("nan"))
    extra = f"{int(both.sum())} rows" + (f" ({int(neither.sum())} without a value skipped)" if neither.any() else "")
    extra += f"; {odd} rows with a value on one side only" if odd else ""
    return check(f"{what} equals <A, B> / (||A|| ||B||) of its stored parts in every row", value, "<=", CORR_TOL,
                 (detail + "; " if detail else "") + extra, source="attnsvm (integrity of the run)",
                 reason=f"the correlation recomputed from the inner product and the two Frobenius norms stored beside "
                        f"it; tolerance {CORR_TOL:g} for float64 rounding (the same float64 operations: 0 here)",
                 kind="integrity",
                 alternative="a plausible bug: a raw inner product <A, B> instead of the correlation (the arrays not "
                             "normalized): the value is ||A|| ||B|| times the correlation, which [-1, 1] does not "
                             "catch when ||A|| ||B|| < 1")


def correlation_parts_checks(table, parts: dict, names: dict) -> list[Check]:
    """:func:`correlation_parts_check` of every correlation column of ``table`` named in ``parts`` (column -> the
    columns of its inner product and its two norms); ``names``: column -> what it holds, in words. A table without
    some part's column gets the check failed (value NaN, the missing columns in its detail), never skipped."""
    out = []
    for col, cols in parts.items():
        missing = [c for c in (col, *cols) if c not in table.columns]
        what = f"{names[col]} ({col})"
        if missing:
            nan = np.full(len(table), np.nan)
            out.append(correlation_parts_check(what, nan, nan, nan, nan,
                                               f"the table stores no {', '.join(missing)}: nothing to recompute"))
            continue
        out.append(correlation_parts_check(what, *(table[c].to_numpy(np.float64) for c in (col, *cols))))
    return out


def share_check(name: str, successes, total, op: str, target: float, detail: str = "", *, source: str,
                reason: str = "", alpha: float = ALPHA, alternatives=None, spec_ref: str = "") -> Check:
    """A share ``successes / total`` of runs against the spec's ``target`` with a binomial tolerance.

    ``op`` ``">="``: passes when observing this few successes is not significant evidence
    (one-sided, level ``alpha``) that the true share is below ``target``, i.e. when
    ``successes >= binom.ppf(alpha, total, target)``. ``"<="`` mirrors it; ``"~"`` is
    two-sided (level ``alpha`` split over both tails). The threshold shown is that
    count as a share; ``value`` is the observed share.

    The claim is the null: ``power`` is the exact binomial probability of failing at
    ``total`` runs when the true share is the spec's value moved by
    :data:`~attnsvm.experiments.power.SHARE_SHIFT` toward the side that breaks the claim
    (``alternatives`` overrides; for ``"~"`` the smaller power of the two sides inside [0, 1]).
    A pass with power below 0.8 is ``"inconclusive"``.
    """
    from attnsvm.experiments.power import share_bounds, share_power

    successes, total = int(successes), int(total)
    if total <= 0:
        return Check(name, float("nan"), f"{op} {target:g}", False, source, "no runs to measure a share on",
                     "statistical", detail, spec_ref=spec_ref, claim_is="null")
    share = successes / total
    base = (f"spec target {target:g}; exact binomial {'one-sided' if op != '~' else 'two-sided'} tolerance at "
            f"{total} runs, level {alpha:g}")
    reason = f"{base}; {reason}" if reason else base
    lo, hi = share_bounds(total, op, target, alpha)
    passed = lo <= successes <= hi
    thr = {">=": f">= {lo / total:.4g}", "<=": f"<= {hi / total:.4g}"}.get(op, f"in [{lo / total:.4g}, {hi / total:.4g}]")
    _validate(source, reason, "statistical")
    power, alts = share_power(total, op, target, alpha, alternatives)
    alternative = (" or ".join(f"true share {p:g}" for p in alts) + f" (spec {target:g} moved toward breaking the claim)"
                   if alts else "")
    return Check(name, share, thr, bool(passed), source, f"{reason}; {_power_note(power, alternative)}",
                 "statistical", (detail + "; " if detail else "") + f"{successes}/{total}",
                 verdict=_null_verdict(passed, power), power=power, alternative=alternative, spec_ref=spec_ref,
                 power_inputs=dict(fn="share", n=total, op=op, target=target, alpha=alpha, alternatives=alts)
                 if alts else None, claim_is="null")


def majority_check(name: str, successes, total, detail: str = "", *, source: str, reason: str,
                   alpha: float = ALPHA, p_win: float | None = None) -> Check:
    """An ordering holds in more runs than chance would give: ``successes`` above the one-sided
    level-``alpha`` binomial quantile under probability 1/2 (what unrelated numbers give).

    The claim is the alternative. ``power``: the exact probability of passing at ``total`` runs when each
    run succeeds with ``p_win`` (default :data:`~attnsvm.experiments.power.MAJORITY_WIN`, chance moved by
    0.15 toward the claim; :func:`~attnsvm.experiments.power.majority_power`). A fail with power below 0.8
    is ``"inconclusive"``.
    """
    from scipy.stats import binom

    from attnsvm.experiments.power import MAJORITY_WIN, decide, majority_power

    successes, total = int(successes), int(total)
    if total <= 0:
        return Check(name, float("nan"), "> 0.5", False, source, "no runs", "statistical", detail, claim_is="alternative")
    k = int(binom.ppf(1 - alpha, total, 0.5))
    p_win = MAJORITY_WIN if p_win is None else float(p_win)
    power = majority_power(total, p_win, alpha)
    alternative = f"each run succeeds with probability {p_win:g} (chance 1/2 moved toward the claim)"
    passed = bool(successes > k)
    p_value = float(binom.sf(successes - 1, total, 0.5))  # P(at least this many successes | fair coin)
    why = (f"more often than a fair coin: binomial 1 - {alpha:g} quantile under 1/2 at {total} runs; {reason}; "
           f"power {power:.3f} against {alternative}")
    return Check(name, successes / total, f"> {k / total:.4g}", passed, source, why, "statistical",
                 (detail + "; " if detail else "") + f"{successes}/{total}", verdict=decide(passed, power, "alternative"),
                 power=power, alternative=alternative, power_inputs=dict(fn="sign", n=total, p_win=p_win, alpha=alpha),
                 claim_is="alternative", p_value=p_value)


def _one_sided(op: str, value: float, target: float, tol: float) -> tuple[float, bool]:
    """The bound ``target -+ tol`` of a one-sided test and whether ``value`` passes it."""
    if op == ">=":
        return target - tol, bool(value >= target - tol)
    if op == "<=":
        return target + tol, bool(value <= target + tol)
    raise ValueError(f"op must be '>=' or '<=', got {op!r}")


def mean_check(name: str, values, op: str, target: float, detail: str = "", *, source: str, reason: str = "",
               alpha: float = ALPHA, sigma: float | None = None, effect: float | None = None,
               sigma_source: str = "", spec_ref: str = "") -> Check:
    """The mean of per-run ``values`` against the spec's ``target`` with a Student-t tolerance.

    ``">="`` passes when ``mean >= target - t_{1-alpha, R-1} * s / sqrt(R)`` (the mean is not
    significantly below the target); ``"<="`` mirrors it. NaN values fail the check (a
    run without a measurement is not silently dropped).

    The claim is the null: ``power`` is the probability of failing at R runs when the true
    mean is ``effect`` beyond the target on the breaking side and the runs' standard deviation
    is the planning ``sigma`` (from ``sigma_source``: stored results of an earlier release,
    never the run judged; :func:`~attnsvm.experiments.power.mean_power`). Without a planning
    sigma the power is unknown and a pass is ``"inconclusive"``.
    """
    from scipy.stats import t as student_t

    from attnsvm.experiments.power import mean_power, plan_with_run, run_sigma

    vals = np.asarray(values, dtype=float).ravel()
    R = vals.size
    record_spread(name, vals, op, target)
    if R == 0 or not np.all(np.isfinite(vals)):
        bad = int((~np.isfinite(vals)).sum())
        return Check(name, float("nan"), f"{op} {target:g}", False, source,
                     f"spec target {target:g}; {bad} of {R} runs have no finite value", "statistical", detail,
                     spec_ref=spec_ref, claim_is="null")
    mean = float(vals.mean())
    se = float(vals.std(ddof=1) / math.sqrt(R)) if R > 1 else 0.0
    tol = float(student_t.ppf(1 - alpha, R - 1)) * se if R > 1 else 0.0
    base = f"spec target {target:g}; one-sided Student-t tolerance {tol:.3g} (level {alpha:g}, {R} runs, s.e. {se:.3g})"
    reason = f"{base}; {reason}" if reason else base
    _validate(source, reason, "statistical")
    bound, passed = _one_sided(op, mean, target, tol)
    power, alternative = None, ""
    sigma, effect, sigma_source = planned(name, sigma, effect, sigma_source)
    inputs, p_plan, p_run = None, None, None
    if sigma is not None and effect is not None:
        inputs, p_plan, p_run = plan_with_run(dict(fn="mean", n=R, op=op, effect=effect, sigma=sigma, alpha=alpha),
                                              run_sigma(vals))
        power = mean_power(R, op, effect, inputs["sigma"], alpha)
        alt = target - effect if op == ">=" else target + effect
        alternative = f"true mean {alt:g} (target {'-' if op == '>=' else '+'} {effect:g}), planning sigma {sigma:g}"
        alternative += (f" ({sigma_source})" if sigma_source else "") + run_note(inputs)
    elif effect is not None:
        alternative = f"true mean {target - effect if op == '>=' else target + effect:g}; no planning sigma stated"
    return Check(name, mean, f"{op} {bound:.4g}", bool(passed), source, f"{reason}; {_power_note(power, alternative)}",
                 "statistical", detail, verdict=_null_verdict(passed, power), power=power, alternative=alternative,
                 spec_ref=spec_ref, power_inputs=inputs, claim_is="null", power_planned=p_plan, power_judged=p_run)


def share_difference_check(name: str, s1, n1, s2, n2, op: str, target: float, detail: str = "", *, source: str,
                           reason: str = "", alpha: float = ALPHA, p1: float | None = None, p2: float | None = None,
                           tolerance: bool = True, spec_ref: str = "") -> Check:
    """``s1/n1 - s2/n2`` against ``target`` with a normal tolerance (Agresti-Caffo: one success
    and one failure added to each group for the standard error).

    The claim is the null: ``power`` is the exact probability (enumerating every pair of counts)
    that the check fails when the true shares are the named pair ``(p1, p2)``
    (:func:`~attnsvm.experiments.power.share_difference_power`); without a pair it is unknown
    and a pass is ``"inconclusive"``. ``tolerance=False``: the spec's bar is already a bound with
    slack, so no sampling tolerance is added on top of it (the power is that of the bare bound).
    """
    from attnsvm.experiments.power import share_difference_passes, share_difference_power

    s1, n1, s2, n2 = int(s1), int(n1), int(s2), int(n2)
    if n1 <= 0 or n2 <= 0:
        return Check(name, float("nan"), f"{op} {target:g}", False, source, "no runs", "statistical", detail,
                     spec_ref=spec_ref, claim_is="null")
    diff = s1 / n1 - s2 / n2
    q1, q2 = (s1 + 1) / (n1 + 2), (s2 + 1) / (n2 + 2)
    se = math.sqrt(q1 * (1 - q1) / (n1 + 2) + q2 * (1 - q2) / (n2 + 2))
    from scipy.stats import norm

    tol = float(norm.ppf(1 - alpha)) * se if tolerance else 0.0
    base = (f"spec target {target:g}; one-sided normal tolerance {tol:.3g} (level {alpha:g}, "
            f"{n1} and {n2} runs, Agresti-Caffo s.e. {se:.3g})" if tolerance else
            f"spec bound {target:g}, already a bound with slack: no sampling tolerance on top of it")
    reason = f"{base}; {reason}" if reason else base
    _validate(source, reason, "statistical")
    bound = target - tol if op == ">=" else target + tol
    passed = bool(share_difference_passes(s1, n1, s2, n2, op, target, alpha, tolerance))
    power, alternative = None, ""
    if p1 is not None and p2 is not None:
        power = share_difference_power(n1, n2, op, target, alpha, p1, p2, tolerance)
        alternative = f"true shares {p1:g} and {p2:g} (difference {p1 - p2:g})"
    return Check(name, diff, f"{op} {bound:.4g}", passed, source, f"{reason}; {_power_note(power, alternative)}",
                 "statistical", (detail + "; " if detail else "") + f"{s1}/{n1} - {s2}/{n2}",
                 verdict=_null_verdict(passed, power), power=power, alternative=alternative, spec_ref=spec_ref,
                 power_inputs=None if power is None else dict(fn="share_difference", n1=n1, n2=n2, op=op, target=target,
                                                              alpha=alpha, p1=p1, p2=p2, tolerance=tolerance), claim_is="null")


def band_check(name: str, groups: dict, targets: dict, band: float, detail: str = "", *, source: str, reason: str = "",
               sigmas: dict | None = None, effect: float | None = None, sigma_source: str = "",
               spec_ref: str = "") -> Check:
    """Every group's mean within the spec's own tolerance ``band`` of its target: ``max_g |mean_g - target_g| <=
    band``, with no sampling tolerance on top (the spec states the band at its own run count).

    ``groups``: label -> per-run values ``(R_g,)``; ``targets``: label -> the spec's value (same labels). NaN
    values fail the check. The claim is the null: ``power`` (:func:`~attnsvm.experiments.power.band_power`)
    is the probability of failing when one group's true mean lies ``effect`` beyond the band and the others
    are at their targets (default: the stored planning rule for a bar, ``effect = band``: the deviation bar
    doubled), each group's runs having its planning sigma (``sigmas``: label -> sigma, default the stored
    planning entry's per-group sigmas, measured on shifted seeds, never the run judged), at the least
    favourable group. Without a sigma for every group the power is unknown and a pass is
    ``"inconclusive"``. The reason also gives the false-fail rate at the spec's values
    (:func:`~attnsvm.experiments.power.band_false_fail`): with a fixed band it is not ``alpha``.
    """
    from attnsvm.experiments.power import band_false_fail, band_power

    labels = list(groups)
    if not labels or set(labels) != set(targets):
        raise ValueError(f"groups and targets must have the same non-empty labels, got {labels} and {list(targets)}")
    if not band > 0:
        raise ValueError(f"band must be positive, got {band!r}")
    vals = {k: np.asarray(groups[k], dtype=float).ravel() for k in labels}
    record_spread(name, None, "<=", band, groups=vals)
    ns = [v.size for v in vals.values()]
    base = (f"spec tolerance +-{band:g} around each of {len(labels)} spec values, as stated: no sampling tolerance on "
            "top of it")
    reason = f"{base}; {reason}" if reason else base
    _validate(source, reason, "statistical")
    bad = sum(int((~np.isfinite(v)).sum()) for v in vals.values())
    if min(ns) == 0 or bad:
        return Check(name, float("nan"), f"<= {band:g}", False, source, f"{reason}; {bad} runs without a value or an "
                     "empty group", "statistical", detail, spec_ref=spec_ref, claim_is="null")
    devs = {k: abs(float(vals[k].mean()) - float(targets[k])) for k in labels}
    worst = max(devs, key=devs.get)
    value = devs[worst]
    passed = bool(value <= band)
    rule = "stated"
    if sigmas is None or effect is None:
        from attnsvm.experiments.planning import lookup

        entry = lookup(name)
        if entry is not None:
            sigmas = entry.get("sigmas") if sigmas is None else sigmas
            if effect is None:
                effect, rule = entry["effect"], entry["rule"]
            sigma_source = sigma_source or f"planning sigmas measured on the {entry['measured']}"
    power, alternative, inputs, p_plan, p_run = None, "", None, None, None
    if effect is not None and sigmas is not None and all(str(k) in sigmas for k in labels):
        from attnsvm.experiments.power import plan_with_run, run_sigma

        sig = [float(sigmas[str(k)]) for k in labels]
        inputs, p_plan, p_run = plan_with_run(
            dict(fn="band", band=band, effect=effect, ns=ns, sigmas=sig, labels=[str(k) for k in labels]),
            [run_sigma(vals[k]) if vals[k].size > 1 else 0.0 for k in labels])
        power = band_power(band, effect, ns, inputs["sigmas"])
        alternative = (f"one group's true mean {effect:g} beyond the band (off its spec value by {band + effect:g}; "
                       f"{rule}), planning sigmas " + ", ".join(f"{k}: {s:g}" for k, s in zip(labels, sig))
                       + (f" ({sigma_source})" if sigma_source else "") + run_note(inputs))
        reason += f"; false-fail rate at the spec's values {band_false_fail(band, ns, sig):.3f} (normal runs)"
    elif effect is not None:
        alternative = f"one group's true mean {effect:g} beyond the band; no planning sigma for every group"
    return Check(name, value, f"<= {band:g}", passed, source, f"{reason}; {_power_note(power, alternative)}",
                 "statistical", (detail + "; " if detail else "") + f"largest at {worst}",
                 verdict=_null_verdict(passed, power), power=power, alternative=alternative, spec_ref=spec_ref,
                 power_inputs=inputs, claim_is="null", power_planned=p_plan, power_judged=p_run)


@dataclass(frozen=True)
class Finding:
    """A spec target that careful measurement contradicts (listed in ``findings.txt``)."""

    experiment: str
    check: str
    preset: str
    reason: str

    def applies(self, preset: str) -> bool:
        """Whether the finding covers a run of ``preset`` ("quick", "full" or "custom")."""
        return self.preset == "any" or self.preset == preset or preset == "custom"


def load_findings(path: str | None = None) -> list[Finding]:
    """Read the findings file: ``experiment | check name | preset | reason`` per line, ``#`` comments.

    ``preset`` is ``quick``, ``full`` or ``any`` (the presets whose runs show the finding). Only vetted
    findings are accepted: the reason gives two independent measurements and the paper's own words
    with their place (``measured: ...; independently: ...; paper: "..." (place)``); ValueError otherwise.
    """
    path = path or FINDINGS_FILE
    out: list[Finding] = []
    if not os.path.isfile(path):
        return out
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(" | ")]
            if len(parts) != 4 or parts[2] not in ("quick", "full", "any") or not all(parts):
                raise ValueError(f"{path}:{lineno}: expected 'experiment | check name | quick|full|any | reason'")
            if not all(key in parts[3] for key in ("measured:", "independently:", "paper:")):
                raise ValueError(f"{path}:{lineno}: a finding is vetted: its reason gives 'measured: ...; independently: "
                                 "... (another method or solver); paper: \"the paper's words\" (place)'")
            out.append(Finding(*parts))
    return out


def mark_findings(experiment: str, checks: list[dict], preset: str, findings: list[Finding] | None = None) -> list[dict]:
    """Annotate check dicts of ``experiment`` with ``finding`` (bool), ``finding_reason`` and the verdict.

    A failing check listed in the findings file (for this preset) is a finding: its verdict
    becomes ``"finding"``, it stays not passed but does not count against the exit status. A
    listed check that passes is flagged ``finding_resolved`` so that the report says the
    finding no longer holds. Dicts without a verdict get one from ``passed``; ``power`` and
    ``alternative`` default to ``None`` and ``""``.
    """
    findings = load_findings() if findings is None else findings
    listed = {f.check: f for f in findings if f.experiment == experiment and f.applies(preset)}
    out = []
    for c in checks:
        c = dict(c)
        verdict = c.get("verdict") or ("pass" if c["passed"] else "fail")
        f = listed.get(c["name"])
        c["finding"] = bool(f is not None and verdict == "fail")
        c["finding_resolved"] = bool(f is not None and verdict == "pass")
        c["finding_reason"] = f.reason if f is not None else ""
        c["verdict"] = "finding" if c["finding"] else verdict
        c["passed"] = c["verdict"] == "pass"
        c.setdefault("power", None)
        c.setdefault("alternative", "")
        out.append(c)
    return out


def _verdict(c: dict) -> str:
    return c.get("verdict") or ("pass" if c["passed"] else ("finding" if c.get("finding") else "fail"))


def counts_against(c: dict) -> bool:
    """Whether a check dict changes the exit status: only a ``"fail"`` (not inconclusive, not a finding)."""
    return _verdict(c) == "fail"


def count_verdicts(checks: list[dict]) -> dict[str, int]:
    """How many check dicts have each verdict: ``{"pass": P, "fail": F, "inconclusive": I, "finding": K}``."""
    out = dict.fromkeys(VERDICTS, 0)
    for c in checks:
        out[_verdict(c)] += 1
    return out


def count_failures(checks: list[dict]) -> tuple[int, int]:
    """``(failed, findings)``: failed checks that count against the exit status, and failing findings."""
    counts = count_verdicts(checks)
    return counts["fail"], counts["finding"]
