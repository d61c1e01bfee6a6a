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
    "share_difference_power", "mean_power", "ordering_power", "sign_min_wins", "sign_power", "majority_power",
    "random_direction_power", "band_power", "band_false_fail", "power_from", "CORR_EFFECT", "LEVEL_CORR",
    "STANDARDIZED_EFFECT", "MAJORITY_WIN", "decide", "run_sigma", "plan_with_run",
]

#: the power a check needs for its verdict to count (below it: inconclusive)
POWER_GOAL = 0.8
#: a share claim's alternative: the spec's value moved by this much toward the side that breaks the claim
SHARE_SHIFT = 0.15
#: the stated effect of an ordering of correlations or cosines (a paired difference on the correlation scale):
#: Cohen's "small" correlation 0.1
CORR_EFFECT = 0.1
#: the stated alternative of a random-direction control: the trained matrix correlates 0.3 with its SVM in every
#: run (Cohen's "medium" correlation), a matrix only moderately aligned with the direction the theory predicts
LEVEL_CORR = 0.3
#: the stated effect of an ordering of a quantity without a natural scale (a normalized margin, a norm, a trend
#: whose size shrinks with the quantity): the mean difference 0.8 standard deviations (Cohen's "large" d)
STANDARDIZED_EFFECT = 0.8
#: the stated alternative of a run-level majority or sign test: each unit wins with chance 1/2 moved by
#: :data:`SHARE_SHIFT` toward the claim
MAJORITY_WIN = 0.5 + SHARE_SHIFT
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


def majority_power(n: int, p_win: float, alpha: float) -> float:
    """Probability that a majority check (successes above the one-sided level-``alpha`` binomial quantile under
    1/2, :func:`attnsvm.experiments.checks.majority_check`) passes at ``n`` runs when each run succeeds
    with ``p_win``. The same rule as the exact sign test: passing needs at least :func:`sign_min_wins` successes."""
    return sign_power(n, p_win, alpha)


def random_direction_power(runs: int, draws: int, effect: float, sigma: float, alpha: float) -> float:
    """Probability that the random-direction control passes: every one of ``runs`` runs beats all of its ``draws``
    random directions, when each run's correlation is ``effect`` and the random directions' correlations are
    independent normal with mean 0 and standard deviation ``sigma`` (the planning sigma).

    Per run ``Phi(effect / sigma) ** draws``; over the runs its ``runs``-th power. A control with too few
    draws (level ``1 / (draws + 1)`` above ``alpha``) cannot pass: 0.
    """
    from scipy.stats import norm

    runs, draws = _check_n(runs, "runs"), _check_n(draws, "draws")
    if not (sigma >= 0 and effect > 0):
        raise ValueError(f"sigma must be >= 0 and effect positive, got sigma={sigma!r}, effect={effect!r}")
    if 1.0 / (draws + 1) > alpha:
        return 0.0
    if sigma == 0:
        return 1.0
    return float(math.exp(runs * draws * float(norm.logcdf(effect / sigma))))


def _band_ok(band: float, ns, sigmas) -> tuple[np.ndarray, np.ndarray]:
    ns = np.asarray([_check_n(n) for n in np.atleast_1d(ns)], dtype=float)
    sigmas = np.asarray(np.atleast_1d(sigmas), dtype=float)
    if ns.shape != sigmas.shape or ns.size == 0:
        raise ValueError(f"ns and sigmas must be non-empty and of one length, got {ns.size} and {sigmas.size}")
    if not (band > 0 and np.all(sigmas >= 0)):
        raise ValueError(f"band must be positive and sigmas >= 0, got band={band!r}, sigmas={sigmas.tolist()!r}")
    return ns, sigmas


def band_power(band: float, effect: float, ns, sigmas) -> float:
    """Probability that a band check (every group's mean within ``band`` of its target, no sampling tolerance on
    top: :func:`attnsvm.experiments.checks.band_check`) fails when one group's true mean lies ``effect`` beyond
    the band and the others are at their targets, at the least favourable group.

    ``ns (G,)``: runs per group; ``sigmas (G,)``: each group's planning sigma. With normal runs, group ``g``'s
    mean is ``N(target + band + effect, sigma_g^2 / n_g)`` and leaves the band with probability
    ``q_g = Phi(effect sqrt(n_g) / sigma_g) + Phi(-(2 band + effect) sqrt(n_g) / sigma_g)``; a group at its target
    leaves it with ``f_h = 2 Phi(-band sqrt(n_h) / sigma_h)``. Groups are independent:
    power ``= min_g 1 - (1 - q_g) prod_{h != g} (1 - f_h)``. ``sigma = 0``: that group never errs (``q = 1``,
    ``f = 0``).
    """
    from scipy.stats import norm

    ns, sigmas = _band_ok(band, ns, sigmas)
    if not effect > 0:
        raise ValueError(f"effect must be positive, got {effect!r}")
    z = np.divide(np.sqrt(ns), sigmas, out=np.full(ns.shape, np.inf), where=sigmas > 0)
    q = norm.cdf(effect * z) + norm.cdf(-(2 * band + effect) * z)
    stay = 1.0 - 2.0 * norm.cdf(-band * z)                       # (G,) a group at its target stays in the band
    others = np.array([np.prod(np.delete(stay, g)) for g in range(ns.size)])
    return float(min(1.0, max(0.0, float(np.min(1.0 - (1.0 - q) * others)))))


def band_false_fail(band: float, ns, sigmas) -> float:
    """Probability that a band check fails when every group's true mean is its target (the spec's values):
    ``1 - prod_g (1 - 2 Phi(-band sqrt(n_g) / sigma_g))``, normal runs, groups independent. ``ns, sigmas (G,)``."""
    from scipy.stats import norm

    ns, sigmas = _band_ok(band, ns, sigmas)
    z = np.divide(np.sqrt(ns), sigmas, out=np.full(ns.shape, np.inf), where=sigmas > 0)
    return float(min(1.0, max(0.0, 1.0 - float(np.prod(1.0 - 2.0 * norm.cdf(-band * z))))))


def power_from(inputs: dict, scale: float = 1.0) -> float | None:
    """The power of a check from its recorded ``power_inputs`` (``Check.power_inputs``), with every run count
    multiplied by ``scale`` (rounded, at least 1): the power at another preset's size, computed without running
    it. ``inputs["fn"]`` names the power function (``share``, ``share_difference``, ``mean``, ``ordering``,
    ``paired``, ``sign``, ``random_direction``, ``band``, ``product``: ``parts``, the inputs of independent groups
    that must all pass); None for an unknown one. Power is sawtooth in ``n``: the result holds at the scaled count
    only.
    """
    def sc(n):
        return max(1, int(round(float(n) * scale)))

    fn = inputs.get("fn")
    a = inputs.get("alpha")
    if fn == "share":
        p, _ = share_power(sc(inputs["n"]), inputs["op"], inputs["target"], a, inputs.get("alternatives"))
        return p
    if fn == "share_difference":
        return share_difference_power(sc(inputs["n1"]), sc(inputs["n2"]), inputs["op"], inputs["target"], a,
                                      inputs["p1"], inputs["p2"], inputs.get("tolerance", True))
    if fn == "mean":
        return mean_power(sc(inputs["n"]), inputs["op"], inputs["effect"], inputs["sigma"], a)
    if fn == "ordering":
        return ordering_power(sc(inputs["n"]), inputs["effect"], inputs["sigma"], a)
    if fn == "paired":
        from scipy.stats import norm

        n = sc(inputs["n"])
        e, s = inputs["effect"], inputs["sigma"]
        return max(0.0, ordering_power(n, e, s, a) + sign_power(n, float(norm.cdf(e / s)), a) - 1.0)
    if fn == "sign":
        return sign_power(sc(inputs["n"]), inputs["p_win"], a)
    if fn == "band":
        return band_power(inputs["band"], inputs["effect"], [sc(n) for n in inputs["ns"]], inputs["sigmas"])
    if fn == "product":  # every independent group must pass (an intersection): the product of the groups' powers
        parts = [power_from(part, scale) for part in inputs["parts"]]
        return None if any(p is None for p in parts) else float(np.prod(parts))
    if fn == "random_direction":
        return random_direction_power(sc(inputs["runs"]), int(inputs["draws"]), inputs["effect"], inputs["sigma"], a)
    return None


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


def run_sigma(values) -> float | None:
    """The judged run's own spread: the sample standard deviation (ddof 1) of the finite ``values (R,)``; None with
    fewer than two."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    return float(v.std(ddof=1)) if v.size > 1 else None


def plan_with_run(inputs: dict, sigma_run) -> tuple[dict, float | None, float | None]:
    """Power planned with the larger of the planning sigma and the judged run's own spread.

    ``inputs``: a check's power inputs (:func:`power_from`) with its planning ``sigma`` (``fn`` mean, ordering,
    paired or random_direction) or ``sigmas`` (``fn`` band, one per group); ``sigma_run``: the run's own spread
    (a number, or a list per group for band; None: unknown). Returns ``(inputs_used, power_planned, power_judged)``:
    ``inputs_used`` has ``sigma`` (``sigmas``) = the larger of the two, with ``sigma_planned`` and ``sigma_judged``
    beside it (the power at ``inputs_used`` is therefore at most both others, for these power functions);
    ``power_judged`` is the power at the run's own spread (None when unknown, or a zero spread where the power
    function needs a positive one)."""
    key = "sigmas" if inputs.get("fn") == "band" else "sigma"
    planned_power = power_from(inputs)
    if sigma_run is None or (key == "sigmas" and any(s is None for s in sigma_run)):
        return dict(inputs, sigma_planned=inputs[key], sigma_judged=None), planned_power, None
    run = [float(s) for s in sigma_run] if key == "sigmas" else float(sigma_run)
    judged = None
    positive = all(s > 0 for s in run) if key == "sigmas" else run > 0
    if positive or inputs.get("fn") in ("mean", "band"):
        judged = power_from(dict(inputs, **{key: run}))
    used = ([max(a, b) for a, b in zip(inputs[key], run)] if key == "sigmas" else max(float(inputs[key]), run))
    return dict(inputs, **{key: used}, sigma_planned=inputs[key], sigma_judged=run), planned_power, judged
