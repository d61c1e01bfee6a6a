"""Verdicts: a claim of the theory as a measured number against a threshold with a stated origin.

Every :class:`Check` says

* ``name``: the claim, in words;
* ``source``: where the claim comes from (``"transformers-as-svms.md 7.2 item 5"``);
* ``value`` and ``threshold``: what was measured and the bar (``">= 0.4"``);
* ``threshold_reason``: where the bar comes from: the spec's number, or a tolerance
  with its reason (a sampling interval at the run count, solver precision, ...).
  A threshold is never derived from the value this code measured;
* ``kind``: ``"spec"`` (the spec's number), ``"statistical"`` (the spec's number with a
  sampling tolerance at the run count), ``"qualitative"`` (the spec gives no number:
  a comparison against a comparator fixed in advance), ``"tolerance"`` (an exact claim
  checked to numerical precision), ``"integrity"`` (the run itself: tasks completed,
  certificates passed);
* ``passed``; ``detail`` (extra measurements that explain the value).

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
    "Check", "check", "share_check", "mean_check", "share_difference_check", "integrity_check",
    "ALPHA", "KINDS", "Finding", "load_findings", "FINDINGS_FILE", "mark_findings", "count_failures",
]

#: One-sided level of every statistical check (false-alarm rate per check when the claim holds exactly).
ALPHA = 0.01
KINDS = ("spec", "statistical", "qualitative", "tolerance", "integrity")
_STRICT = True
FINDINGS_FILE = os.path.join(os.path.dirname(__file__), "findings.txt")

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

    def to_dict(self) -> dict:
        d = asdict(self)
        v = None if self.value is None else float(self.value)
        d["value"] = None if v is None or v != v else v
        d["passed"] = bool(self.passed)
        return d


def _validate(source: str, reason: str, kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"check kind must be one of {KINDS}, got {kind!r}")
    if not str(source).strip():
        raise ValueError("a check needs a source (the spec section its claim comes from)")
    if not str(reason).strip():
        raise ValueError("a check needs a threshold_reason (the spec's number, or a tolerance and why)")


def check(name: str, value: float, op: str, bound: float, detail: str = "", *, source: str = "", reason: str = "",
          kind: str = "spec") -> Check:
    """Compare ``value`` with ``bound`` (``op`` in <, <=, >, >=, ==); NaN never passes.

    ``source`` and ``reason`` are required (the empty defaults exist only so that a
    missing one is caught by :func:`_validate` with a clear message).
    """
    if _STRICT:
        _validate(source, reason, kind)
    if op not in _OPS:
        raise ValueError(f"op must be one of {tuple(_OPS)}, got {op!r}")
    value = float(value)
    passed = bool(_OPS[op](value, bound)) if value == value else False
    return Check(name=name, value=value, threshold=f"{op} {bound:g}", passed=passed, source=source,
                 threshold_reason=reason, kind=kind, detail=detail)


def integrity_check(name: str, value: float, op: str, bound: float, detail: str = "", *, reason: str) -> Check:
    """A check on the run itself (every task completed, every SVM certified): source "attnsvm"."""
    return check(name, value, op, bound, detail, source="attnsvm (integrity of the run)", reason=reason,
                 kind="integrity")


def share_check(name: str, successes, total, op: str, target: float, detail: str = "", *, source: str,
                reason: str = "", alpha: float = ALPHA) -> Check:
    """A share ``successes / total`` of runs against the spec's ``target`` with a binomial tolerance.

    ``op`` ``">="``: passes when observing this few successes is not significant evidence
    (one-sided, level ``alpha``) that the true share is below ``target``, i.e. when
    ``successes >= binom.ppf(alpha, total, target)``. ``"<="`` mirrors it; ``"~"`` is
    two-sided (level ``alpha`` split over both tails). The threshold shown is that
    count as a share; ``value`` is the observed share.
    """
    from scipy.stats import binom

    successes, total = int(successes), int(total)
    if total <= 0:
        return Check(name, float("nan"), f"{op} {target:g}", False, source, "no runs to measure a share on",
                     "statistical", detail)
    share = successes / total
    base = (f"spec target {target:g}; exact binomial {'one-sided' if op != '~' else 'two-sided'} tolerance at "
            f"{total} runs, level {alpha:g}")
    reason = f"{base}; {reason}" if reason else base
    if op == ">=":
        k = int(binom.ppf(alpha, total, target))
        passed, thr = successes >= k, f">= {k / total:.4g}"
    elif op == "<=":
        k = int(binom.ppf(1 - alpha, total, target))
        passed, thr = successes <= k, f"<= {k / total:.4g}"
    elif op == "~":
        lo, hi = int(binom.ppf(alpha / 2, total, target)), int(binom.ppf(1 - alpha / 2, total, target))
        passed, thr = lo <= successes <= hi, f"in [{lo / total:.4g}, {hi / total:.4g}]"
    else:
        raise ValueError(f"op must be '>=', '<=' or '~', got {op!r}")
    _validate(source, reason, "statistical")
    return Check(name, share, thr, bool(passed), source, reason, "statistical",
                 (detail + "; " if detail else "") + f"{successes}/{total}")


def _one_sided(op: str, value: float, target: float, tol: float) -> tuple[float, bool]:
    """The bound ``target -+ tol`` of a one-sided test and whether ``value`` passes it."""
    if op == ">=":
        return target - tol, bool(value >= target - tol)
    if op == "<=":
        return target + tol, bool(value <= target + tol)
    raise ValueError(f"op must be '>=' or '<=', got {op!r}")


def mean_check(name: str, values, op: str, target: float, detail: str = "", *, source: str, reason: str = "",
               alpha: float = ALPHA) -> Check:
    """The mean of per-run ``values`` against the spec's ``target`` with a Student-t tolerance.

    ``">="`` passes when ``mean >= target - t_{1-alpha, R-1} * s / sqrt(R)`` (the mean is not
    significantly below the target); ``"<="`` mirrors it. NaN values fail the check (a
    run without a measurement is not silently dropped).
    """
    from scipy.stats import t as student_t

    vals = np.asarray(values, dtype=float).ravel()
    R = vals.size
    if R == 0 or not np.all(np.isfinite(vals)):
        bad = int((~np.isfinite(vals)).sum())
        return Check(name, float("nan"), f"{op} {target:g}", False, source,
                     f"spec target {target:g}; {bad} of {R} runs have no finite value", "statistical", detail)
    mean = float(vals.mean())
    se = float(vals.std(ddof=1) / math.sqrt(R)) if R > 1 else 0.0
    tol = float(student_t.ppf(1 - alpha, R - 1)) * se if R > 1 else 0.0
    base = f"spec target {target:g}; one-sided Student-t tolerance {tol:.3g} (level {alpha:g}, {R} runs, s.e. {se:.3g})"
    reason = f"{base}; {reason}" if reason else base
    _validate(source, reason, "statistical")
    bound, passed = _one_sided(op, mean, target, tol)
    return Check(name, mean, f"{op} {bound:.4g}", bool(passed), source, reason, "statistical", detail)


def share_difference_check(name: str, s1, n1, s2, n2, op: str, target: float, detail: str = "", *, source: str,
                           reason: str = "", alpha: float = ALPHA) -> Check:
    """``s1/n1 - s2/n2`` against ``target`` with a normal tolerance (Agresti-Caffo: one success
    and one failure added to each group for the standard error)."""
    from scipy.stats import norm

    s1, n1, s2, n2 = int(s1), int(n1), int(s2), int(n2)
    if n1 <= 0 or n2 <= 0:
        return Check(name, float("nan"), f"{op} {target:g}", False, source, "no runs", "statistical", detail)
    diff = s1 / n1 - s2 / n2
    p1, p2 = (s1 + 1) / (n1 + 2), (s2 + 1) / (n2 + 2)
    se = math.sqrt(p1 * (1 - p1) / (n1 + 2) + p2 * (1 - p2) / (n2 + 2))
    tol = float(norm.ppf(1 - alpha)) * se
    base = (f"spec target {target:g}; one-sided normal tolerance {tol:.3g} (level {alpha:g}, "
            f"{n1} and {n2} runs, Agresti-Caffo s.e. {se:.3g})")
    reason = f"{base}; {reason}" if reason else base
    _validate(source, reason, "statistical")
    bound, passed = _one_sided(op, diff, target, tol)
    return Check(name, diff, f"{op} {bound:.4g}", bool(passed), source, reason, "statistical",
                 (detail + "; " if detail else "") + f"{s1}/{n1} - {s2}/{n2}")


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

    ``preset`` is ``quick``, ``full`` or ``any`` (the presets whose runs show the finding).
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
            out.append(Finding(*parts))
    return out


def mark_findings(experiment: str, checks: list[dict], preset: str, findings: list[Finding] | None = None) -> list[dict]:
    """Annotate check dicts of ``experiment`` with ``finding`` (bool) and ``finding_reason``.

    A failing check listed in the findings file (for this preset) is a finding: it stays
    failed but does not count against the exit status. A listed check that passes is
    flagged ``finding_resolved`` so that the report says the finding no longer holds.
    """
    findings = load_findings() if findings is None else findings
    listed = {f.check: f for f in findings if f.experiment == experiment and f.applies(preset)}
    out = []
    for c in checks:
        c = dict(c)
        f = listed.get(c["name"])
        c["finding"] = bool(f is not None and not c["passed"])
        c["finding_resolved"] = bool(f is not None and c["passed"])
        c["finding_reason"] = f.reason if f is not None else ""
        out.append(c)
    return out


def count_failures(checks: list[dict]) -> tuple[int, int]:
    """``(failed, findings)``: failed checks that count against the exit status, and failing findings."""
    failed = sum(1 for c in checks if not c["passed"] and not c.get("finding"))
    found = sum(1 for c in checks if not c["passed"] and c.get("finding"))
    return failed, found
