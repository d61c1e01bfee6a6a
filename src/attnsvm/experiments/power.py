"""Power of the statistical checks: the probability that a check detects a stated alternative.

A statistical check tests a claim at the preset's actual run count. Whether its pass means
anything depends on its power, computed here exactly at that run count (power is sawtooth
in ``n`` for discrete tests: it must hold at the ``n`` used, not near it):

* *the claim is the null* (a share "about 0.70", a mean ">= 0.99"): power = the probability
  that the check **fails** when the truth is the stated alternative (the claim broken by a
  stated amount). A pass with power below :data:`POWER_GOAL` is inconclusive.
* *the claim is the alternative* (paired, sign, ordering checks: a pass is significant
  evidence): power = the probability that the check **passes** when the truth is the stated
  effect. A fail with power below :data:`POWER_GOAL` is inconclusive.

Every function returns a float in [0, 1]; none reads the run it judges (a planning sigma
comes from stored results of an earlier release, see :mod:`attnsvm.experiments.claims`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "POWER_GOAL", "SHARE_SHIFT", "share_alternatives", "share_bounds", "share_power", "share_difference_passes",
    "share_difference_power", "mean_power", "ordering_power", "sign_min_wins", "sign_power", "decide",
]

#: the power a check needs for its verdict to count (below it: inconclusive)
POWER_GOAL = 0.8
#: a share claim's alternative: the spec's value moved by this much toward the side that breaks the claim
SHARE_SHIFT = 0.15
#: noncentrality above which a t test's power is 1 to double precision (and scipy's nct leaves its range)
_NC_MAX = 200.0


def _check_n(n, name="n") -> int:
    if int(n) != n or n < 1:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")
    return int(n)


def share_alternatives(op: str, target: float, shift: float = SHARE_SHIFT) -> list[float]:
    """The shares that break the claim ``share op target`` by ``shift``: ``target - shift`` for ``">="``,
    ``target + shift`` for ``"<="``, both for ``"~"``; only those inside [0, 1]."""
    if op == ">=":
        sides = [target - shift]
    elif op == "<=":
        sides = [target + shift]
    elif op == "~":
        sides = [target - shift, target + shift]
    else:
        raise ValueError(f"op must be '>=', '<=' or '~', got {op!r}")
    return [float(round(p, 12)) for p in sides if 0.0 <= p <= 1.0]


def share_bounds(n: int, op: str, target: float, alpha: float) -> tuple[int, int]:
    """The success counts ``[lo, hi]`` that pass the exact binomial check of ``share op target`` at ``n`` runs.

    ``">="``: ``lo = binom.ppf(alpha, n, target)``, ``hi = n``; ``"<="``: ``lo = 0``,
    ``hi = binom.ppf(1 - alpha, n, target)``; ``"~"``: both, at ``alpha / 2`` each.
    At the target itself the check passes with probability at least ``1 - alpha``.
    """
    from scipy.stats import binom

    n = _check_n(n)
    if op == ">=":
        return int(binom.ppf(alpha, n, target)), n
    if op == "<=":
        return 0, int(binom.ppf(1 - alpha, n, target))
    if op == "~":
        return int(binom.ppf(alpha / 2, n, target)), int(binom.ppf(1 - alpha / 2, n, target))
    raise ValueError(f"op must be '>=', '<=' or '~', got {op!r}")


def share_power(n: int, op: str, target: float, alpha: float, alternatives=None) -> tuple[float, list[float]]:
    """Probability that the share check at ``n`` runs fails, at its least favourable stated alternative.

    ``alternatives``: true shares to evaluate (default :func:`share_alternatives`). Returns
    ``(power, alternatives)``; power is the smallest fail probability over them, NaN when
    no alternative lies inside [0, 1].
    """
    from scipy.stats import binom

    lo, hi = share_bounds(n, op, target, alpha)
    alts = share_alternatives(op, target) if alternatives is None else [float(p) for p in alternatives]
    if not alts:
        return float("nan"), []
    fails = [float(binom.cdf(lo - 1, n, p) + binom.sf(hi, n, p)) for p in alts]
    return min(fails), alts


def share_difference_passes(s1, n1: int, s2, n2: int, op: str, target: float, alpha: float, tolerance: bool = True):
    """Whether the normal (Agresti-Caffo) check of ``s1/n1 - s2/n2 op target`` passes; vectorized over s1, s2.

    The rule of :func:`attnsvm.experiments.checks.share_difference_check`: the difference passes
    when it is not below ``target`` by more than ``z_{1-alpha}`` times the Agresti-Caffo
    standard error (one success and one failure added to each group). ``tolerance=False``: the
    bare bound ``diff op target`` (for a target that is already a bound with slack).
    """
    from scipy.stats import norm

    s1, s2 = np.asarray(s1, dtype=float), np.asarray(s2, dtype=float)
    diff = s1 / n1 - s2 / n2
    p1, p2 = (s1 + 1) / (n1 + 2), (s2 + 1) / (n2 + 2)
    tol = float(norm.ppf(1 - alpha)) * np.sqrt(p1 * (1 - p1) / (n1 + 2) + p2 * (1 - p2) / (n2 + 2))
    tol = tol if tolerance else 0.0 * tol
    if op == ">=":
        return diff >= target - tol
    if op == "<=":
        return diff <= target + tol
    raise ValueError(f"op must be '>=' or '<=', got {op!r}")


def share_difference_power(n1: int, n2: int, op: str, target: float, alpha: float, p1: float, p2: float,
                           tolerance: bool = True) -> float:
    """Probability that the share-difference check fails when the true shares are ``(p1, p2)``.

    Exact: the fail region of :func:`share_difference_passes` summed over every pair of counts
    ``(s1, s2)`` with its binomial probability (no normal approximation in the power itself).
    """
    from scipy.stats import binom

    n1, n2 = _check_n(n1, "n1"), _check_n(n2, "n2")
    s1, s2 = np.arange(n1 + 1)[:, None], np.arange(n2 + 1)[None, :]
    fail = ~share_difference_passes(s1, n1, s2, n2, op, target, alpha, tolerance)
    prob = binom.pmf(np.arange(n1 + 1), n1, p1)[:, None] * binom.pmf(np.arange(n2 + 1), n2, p2)[None, :]
    return float(min(max((prob * fail).sum(), 0.0), 1.0))


def mean_power(n: int, op: str, effect: float, sigma: float, alpha: float) -> float:
    """Probability that the Student-t mean check at ``n`` runs fails when the true mean is ``effect``
    beyond the target on the breaking side and the runs have standard deviation ``sigma``.

    ``">="`` fails when ``mean < target - t_{1-alpha,n-1} s / sqrt(n)``; with normal runs
    ``(mean - target) / (s / sqrt(n))`` is noncentral t with ``n - 1`` degrees of freedom and
    noncentrality ``-effect sqrt(n) / sigma``. ``"<="`` mirrors it. One run: no tolerance,
    ``Phi(effect / sigma)``; ``sigma = 0`` (runs without spread): 1.
    """
    from scipy.stats import nct, norm
    from scipy.stats import t as student_t

    n = _check_n(n)
    if op not in (">=", "<="):
        raise ValueError(f"op must be '>=' or '<=', got {op!r}")
    if not (sigma >= 0 and effect > 0):
        raise ValueError(f"sigma must be >= 0 and effect positive, got sigma={sigma!r}, effect={effect!r}")
    if sigma == 0:  # runs without spread: any shift of the mean is detected
        return 1.0
    if n == 1:
        return float(norm.cdf(effect / sigma))
    crit = float(student_t.ppf(1 - alpha, n - 1))
    nc = effect * math.sqrt(n) / sigma
    if nc > _NC_MAX:  # beyond the noncentral t's numerical range the power is 1 to double precision
        return 1.0
    return float(nct.cdf(-crit, n - 1, -nc))


def ordering_power(n: int, effect: float, sigma: float, alpha: float) -> float:
    """Probability that an ordering check (mean paired difference > margin + one-sided t tolerance)
    passes at ``n`` runs when the true mean exceeds the margin by ``effect``, runs' sd ``sigma``."""
    from scipy.stats import nct

    from scipy.stats import t as student_t

    n = _check_n(n)
    if not (sigma > 0 and effect > 0):
        raise ValueError(f"sigma and effect must be positive, got sigma={sigma!r}, effect={effect!r}")
    if n == 1:
        return 0.0
    crit = float(student_t.ppf(1 - alpha, n - 1))
    nc = effect * math.sqrt(n) / sigma
    if nc > _NC_MAX:
        return 1.0
    return float(nct.sf(crit, n - 1, nc))


def sign_min_wins(n: int, alpha: float) -> int:
    """Smallest ``k`` with ``P(Binomial(n, 1/2) >= k) <= alpha`` (``n + 1`` when none)."""
    from scipy.stats import binom

    n = _check_n(n)
    ks = np.arange(n + 2)
    ok = binom.sf(ks - 1, n, 0.5) <= alpha
    return int(ks[ok][0]) if ok.any() else n + 1


def sign_power(n: int, p_win: float, alpha: float) -> float:
    """Probability that the exact one-sided sign test at ``n`` units passes when each unit wins with ``p_win``."""
    from scipy.stats import binom

    k = sign_min_wins(n, alpha)
    return float(binom.sf(k - 1, n, p_win)) if k <= n else 0.0


def decide(passed: bool, power, claim_is: str) -> str:
    """The verdict of a statistical check: ``"pass"``, ``"fail"`` or ``"inconclusive"``.

    ``claim_is="null"``: a pass with power below :data:`POWER_GOAL` (or unknown) is inconclusive.
    ``claim_is="alternative"``: a fail with power below :data:`POWER_GOAL` is inconclusive; with
    unknown power it stays a fail. A fail (resp. pass) stands as it is: unknown power always
    gives the stricter verdict.
    """
    known = power is not None and power == power
    if claim_is == "null":
        return ("pass" if known and power >= POWER_GOAL else "inconclusive") if passed else "fail"
    if claim_is == "alternative":
        return "pass" if passed else ("inconclusive" if known and power < POWER_GOAL else "fail")
    raise ValueError(f"claim_is must be 'null' or 'alternative', got {claim_is!r}")
