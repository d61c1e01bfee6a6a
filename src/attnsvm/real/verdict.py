"""A head's verdict against its null heads: p-values, Benjamini-Yekutieli, and plain words.

For each probed head the statistic (:data:`STATISTICS`) is ``corr_restricted`` by default (the head's key-query
matrix against the nuclear Gen-SVM of its selections, :mod:`attnsvm.real.probe`) or ``margin_ratio`` (the head's
own normalized margin on its selections over the SVM's, :func:`attnsvm.real.layer.margin_ratio`, taken on its log
scale: :func:`statistic_pvalues`); its K null heads (:mod:`attnsvm.real.nulls`) give K values of the same
statistic. Two p-values per head:

* **exact Monte Carlo** (:func:`mc_pvalues`): ``(1 + #{null >= real}) / (K + 1)`` and the lower tail
  alike; valid for any null distribution but never below ``1 / (K + 1)``;
* **predictive t** (:func:`t_pvalues`, the verdict's method): if the K null values are normal, the
  real value of a head drawn from the same null satisfies
  ``(real - mean) / (sd sqrt(1 + 1/K)) ~ t_{K-1}`` exactly; its tails give p-values that can be
  small with few draws. Its calibration on random-weight heads is what
  ``tests/test_probe_calibration.py`` and ``benchmarks/planted_heads.py`` show.

The heads share the token states, so their p-values are not independent: :func:`by_adjust` is the
Benjamini-Yekutieli step-up (valid under any dependence). :func:`verdicts` names each head:
"beyond null" (upper q <= level), "below null" (lower q <= level), "not distinguishable",
or "no SVM" with the reason.
"""

from __future__ import annotations

import numpy as np

from attnsvm.errors import ValidationError

VERDICTS = ("beyond null", "not distinguishable", "below null", "no SVM")
#: the verdict's p-value method (the ``p_method`` column)
P_METHOD = "predictive t"
LEVEL = 0.05
#: the statistics a verdict may compare a head with its nulls by (``ProbeConfig.statistic``, ``attnsvm probe
#: --statistic``; the first is the default): ``corr_restricted`` (:func:`attnsvm.real.layer.corr` of the restricted W
#: with the SVM) and ``margin_ratio`` (:func:`attnsvm.real.layer.margin_ratio`, its predictive t on the log scale)
STATISTICS = ("corr_restricted", "margin_ratio")
#: the p-value method of a margin-ratio comparison where every ratio is positive
P_METHOD_LOG = "predictive t on log(margin_ratio)"
#: the p-value method where a margin ratio is <= 0 (no log): the exact Monte Carlo ranks of :func:`mc_pvalues`
P_METHOD_RANKS = "exact Monte Carlo ranks"
#: ``p_note`` where the p-values have nothing to note (a word, not "": an empty string reads back from CSV as NaN)
NO_NOTE = "none"


def check_statistic(statistic: str) -> str:
    """``statistic`` if it is one of :data:`STATISTICS`, else a ValidationError naming it."""
    if statistic not in STATISTICS:
        raise ValidationError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    return statistic


def t_scale(values, statistic: str = "corr_restricted") -> np.ndarray:
    """``values`` of ``statistic`` on the scale the predictive t takes them on, float64, same shape.

    ``corr_restricted``: unchanged. ``margin_ratio``: ``log``, because its null values are skewed to the right
    (docs/guide/probe.md, "Which statistic is consistent as m grows"); a ratio ``<= 0`` (no positive margin: some
    selected token at or below an unselected one) has no log and maps to ``-inf``, NaN (no certified SVM) stays NaN.
    """
    v = np.asarray(values, dtype=np.float64)
    if check_statistic(statistic) == "corr_restricted":
        return v.copy()
    out = np.full(v.shape, np.nan)
    pos, nonpos = np.isfinite(v) & (v > 0), np.isfinite(v) & (v <= 0)
    out[pos] = np.log(v[pos])
    out[nonpos] = -np.inf
    return out


def statistic_pvalues(real: float, nulls, statistic: str = "corr_restricted") -> tuple[float, float, float, str]:
    """The verdict's p-values ``(p_upper, p_lower, z, method)`` of a head's ``real`` value of ``statistic`` against its
    null heads' values ``nulls (K,)`` (NaN: dropped).

    ``corr_restricted``: :func:`t_pvalues` (method :data:`P_METHOD`). ``margin_ratio``: :func:`t_pvalues` on
    :func:`t_scale` (the logs; ``z`` on that scale; method :data:`P_METHOD_LOG`), unless the head's or a null's ratio
    is ``<= 0``: a ratio without a positive margin has no log, so its p-values are then the exact Monte Carlo ranks
    of the raw ratios (:func:`mc_pvalues`, valid for any null distribution and never below ``1 / (K + 1)``; the order
    of the ratios is that of their logs; method :data:`P_METHOD_RANKS`, ``z`` NaN). NaN p-values as
    :func:`t_pvalues` where the head has no value or too few nulls do.
    """
    v, r = t_scale(nulls, statistic).ravel(), float(t_scale([real], statistic)[0])
    if statistic == "corr_restricted":
        return (*t_pvalues(real, v[np.isfinite(v)]), P_METHOD)
    if r == -np.inf or np.any(v == -np.inf):
        raw = np.asarray(nulls, dtype=np.float64).ravel()
        return (*mc_pvalues(float(real), raw[np.isfinite(raw)]), float("nan"), P_METHOD_RANKS)
    return (*t_pvalues(r, v[np.isfinite(v)]), P_METHOD_LOG)


def mc_pvalues(real: float, nulls) -> tuple[float, float]:
    """Exact Monte Carlo p-values ``(p_upper, p_lower)`` of ``real`` against the finite values of
    ``nulls (K,)``; ``(nan, nan)`` when ``real`` is not finite or no null value is."""
    v = np.asarray(nulls, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not np.isfinite(real) or v.size == 0:
        return float("nan"), float("nan")
    k = v.size
    return float((1 + np.sum(v >= real)) / (k + 1)), float((1 + np.sum(v <= real)) / (k + 1))


def null_moments(nulls) -> tuple[float, float, int]:
    """``(mean, sd (ddof 1), K)`` of the finite values of ``nulls (K,)`` (NaN where undefined)."""
    v = np.asarray(nulls, dtype=np.float64)
    v = v[np.isfinite(v)]
    mean = float(v.mean()) if v.size else float("nan")
    sd = float(v.std(ddof=1)) if v.size >= 2 else float("nan")
    return mean, sd, int(v.size)


def t_pvalues(real: float, nulls) -> tuple[float, float, float]:
    """Predictive-t p-values ``(p_upper, p_lower, z)`` of ``real`` against ``nulls (K,)`` (finite values).

    ``t = (real - mean) / (sd sqrt(1 + 1/K))`` with ``K - 1`` degrees of freedom; ``z = (real - mean) / sd``
    is descriptive. NaN when ``real`` is not finite, fewer than 3 null values remain, or they are all equal.
    """
    mean, sd, k = null_moments(nulls)
    if not np.isfinite(real) or k < 3 or not sd > 0:
        return float("nan"), float("nan"), float("nan")
    pu, pl = _predictive_t(real, mean, sd, k)
    return float(pu), float(pl), float((real - mean) / sd)


def _predictive_t(real, mean, sd, k: int):
    """The predictive-t tails ``(p_upper, p_lower)`` of ``real`` given the mean and sd (ddof 1) of k null values;
    arrays broadcast."""
    from scipy import stats

    t = (real - mean) / (sd * np.sqrt(1.0 + 1.0 / k))
    return stats.t.sf(t, k - 1), stats.t.cdf(t, k - 1)


def by_power(draws: int, effect: float, *, heads: int = 72, standing_out: int = 7, reps: int = 2000,
             level: float = LEVEL, seed: int = 0) -> dict:
    """Monte Carlo power of the verdict (predictive t, :func:`t_pvalues`, then :func:`by_adjust`) under a stated
    alternative: ``heads`` heads, each with ``draws`` null values i.i.d. N(0, 1); ``standing_out`` of them sit
    ``effect`` null standard deviations above their null mean, the others are one more draw of their null.

    Returns ``{"power": mean share of the standing-out heads called beyond null, "any": share of replications
    calling at least one of them, "fdr": mean share of false calls among the calls (0 without calls)}`` over
    ``reps`` seeded replications.
    """
    for name, v, lo in (("draws", draws, 3), ("heads", heads, 1), ("standing_out", standing_out, 0), ("reps", reps, 1)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValidationError(f"{name} must be an integer >= {lo}, got {v!r}")
    if standing_out > heads or not np.isfinite(effect):
        raise ValidationError(f"standing_out must be <= heads ({heads}) and effect finite, got {standing_out}, {effect}")
    rng = np.random.default_rng(seed)
    nulls = rng.standard_normal((reps, heads, draws))
    real = rng.standard_normal((reps, heads))
    real[:, :standing_out] = effect
    pu, _ = _predictive_t(real, nulls.mean(axis=-1), nulls.std(axis=-1, ddof=1), draws)
    called = np.array([by_adjust(p) <= level for p in pu])  # (reps, heads)
    true = called[:, :standing_out]
    fdr = called[:, standing_out:].sum(axis=1) / np.maximum(called.sum(axis=1), 1)
    return {"power": float(true.mean()) if standing_out else float("nan"),
            "any": float(true.any(axis=1).mean()) if standing_out else float("nan"), "fdr": float(fdr.mean())}


def reachable_pvalues(real: float, nulls, remaining: int) -> tuple[float, float]:
    """The smallest predictive-t p-values ``(p_upper, p_lower)`` (:func:`t_pvalues`) that ``real`` can still
    get once up to ``remaining`` more null values are drawn, whatever they are (any real numbers, any of them
    dropped), given the finite values of ``nulls (k,)`` drawn so far. A proven bound, not an estimate.

    With k values kept and r more kept (``0 <= r <= remaining``, n = k + r >= 3), the final
    ``t = (real - mean_n) / (sd_n sqrt(1 + 1/n))``: for a fixed sum of the r new values, ``sd_n`` is smallest
    when they are equal, so the largest t (the smallest ``p_upper``) over all new values is that of r equal
    values v, ``N(v) / sqrt(Q(v))`` with N linear and Q quadratic in v, whose only critical point is closed
    form; its supremum is the larger of that point and the limits ``v -> +-inf`` (and 0, which spread-out
    values approach when real is below the mean). ``p_lower`` is the same for ``-real, -nulls``. The minimum
    over r is returned; 0 when no bound holds (the values so far all equal, or none).
    """
    from scipy import stats

    if isinstance(remaining, (bool, np.bool_)) or not isinstance(remaining, (int, np.integer)) or remaining < 0:
        raise ValidationError(f"remaining must be an integer >= 0, got {remaining!r}")
    v = np.asarray(nulls, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if not np.isfinite(real):
        return float("nan"), float("nan")
    k = v.size
    out = []
    for sign in (1.0, -1.0):  # upper tail, then lower tail (mirrored)
        x, a = sign * v, sign * float(real)
        best = 1.0
        mu = float(x.mean()) if k else 0.0
        y = x - mu
        q0 = float(np.sum(y * y)) if k and np.ptp(x) > 0 else 0.0  # (k - 1) sd_k^2
        for r in range(int(remaining) + 1):
            n = k + r
            if n < 3:  # no p-value with fewer than 3 values: that outcome rejects nothing
                continue
            if k == 0 or q0 <= 0.0:
                best = 0.0  # nothing bounds the final t
                break
            n0, n1, q2 = a - mu, -r / n, r * k / n
            if r == 0:
                tq = n0 / np.sqrt(q0)
            else:  # sup over v of (n0 + n1 v) / sqrt(q0 + q2 v^2)
                cand = [abs(n1) / np.sqrt(q2), 0.0]
                if n0 != 0.0:
                    w = n1 * q0 / (n0 * q2)
                    cand.append((n0 + n1 * w) / np.sqrt(q0 + q2 * w * w))
                tq = max(cand)
            t = tq * np.sqrt(n - 1) / np.sqrt(1.0 + 1.0 / n)
            best = min(best, float(stats.t.sf(t, n - 1)))
        out.append(best)
    return out[0], out[1]


#: the weakest stopping level, for when no number of tested heads is known: Benjamini-Yekutieli's q is at least
#: ``c(m) p >= p`` for every number of heads m, so a head whose p stays above it is never rejected
STOP_LEVEL = LEVEL


def harmonic(m: int) -> float:
    """``c(m) = sum_{k <= m} 1/k``, Benjamini-Yekutieli's correction for ``m`` tests (``c(0) = c(1) = 1``)."""
    if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)) or m < 0:
        raise ValidationError(f"m must be an integer >= 0, got {m!r}")
    return float(np.sum(1.0 / np.arange(1, max(int(m), 1) + 1)))


def stop_level(tested: int | None, level: float = LEVEL) -> float:
    """The p-value level above which a head's null draws may stop when ``tested`` heads enter the
    Benjamini-Yekutieli step at FDR ``level``: ``level / c(tested)`` (:func:`harmonic`; None: ``level``).

    Proof. With m p-values, BY rejects the k* smallest, ``k* = max{k : N(t_k) >= k}``, where
    ``t_k = k level / (m c(m))`` and ``N(t)`` counts the p-values ``<= t``; a head is rejected iff
    ``p <= t_{k*}``. Every ``t_k <= t_m = level / c(m)``. (i) A head with ``p > level / c(m)`` has ``p > t_{k*}``:
    it is never rejected. (ii) It counts in no ``N(t_k)``, so its exact value leaves k* and hence every
    other head's rejection unchanged. So if every value a head's p can still reach exceeds ``level / c(m)``,
    stopping its draws changes no verdict, in either tail (each tail has its own BY step). This needs m, the
    heads *with* a p-value, to be ``>= tested``: a head without a certified SVM (or with fewer than 3 kept null
    draws) has no p-value, m is then smaller, ``level / c(m)`` larger, and the proof does not cover a head
    stopped between the two. :func:`stop_undetermined` checks the finished table exactly, whatever m is.
    """
    if tested is None:
        return float(level)
    return float(level) / harmonic(tested)


def stop_reason(real: float, nulls, remaining: int, level: float = STOP_LEVEL) -> str | None:
    """Why a head's verdict null draws (of its ``null_kind``) may stop now, or None to draw on.

    ``real`` is the head's corr_restricted (NaN: no certified SVM, so no verdict can use a null), ``nulls (k,)``
    the draws so far (NaN: dropped), ``remaining`` the draws still planned, ``level`` the stopping level
    (:func:`stop_level` of the number of tested heads; the default :data:`STOP_LEVEL` holds for any number).
    Stops when both smallest reachable p-values (:func:`reachable_pvalues`) exceed ``level``: the head's verdict
    is then "not distinguishable" whatever the rest would give, and every other head's verdict is that of the
    full run (the proof in :func:`stop_level`). Its p-values are those of the k draws made; below ``level``
    their law is that of the full run's (a stopped head's are above it either way). Never stops before 3 draws
    are kept (a head with fewer has no p-value and would leave the Benjamini-Yekutieli step, changing the
    others' q).

    A head far *above* its nulls is never stopped: its verdict would be stable, but its exact p moves the
    BY step-up of the others unless it stays below the smallest threshold ``level / (m c(m))`` whatever the
    remaining draws are, and a single further draw near 1 (corr_restricted is a cosine, bounded by 1 only)
    spreads the nulls so far that p_upper rises towards 0.5: no such bound holds before the last draw.

    ``-inf`` (the head's or a null's margin ratio <= 0 on :func:`t_scale`: its p-values are then the exact Monte
    Carlo ranks, :func:`statistic_pvalues`, which no bound of the predictive t covers) never stops.
    """
    v = np.asarray(nulls, dtype=np.float64).ravel()
    if real == -np.inf or np.any(v == -np.inf):
        return None
    if not np.isfinite(real):
        return "no certified head SVM: no null head can give a p-value"
    if remaining <= 0 or np.isfinite(v).sum() < 3:  # fewer than 3 kept: its p-value would be NaN, out of BY
        return None
    pu, pl = reachable_pvalues(real, v, int(remaining))
    if min(pu, pl) > level:
        return (f"stopped after {v.size} of {v.size + int(remaining)} draws: any further draws leave "
                f"p_upper >= {pu:.2g} and p_lower >= {pl:.2g} (> {level:.3g})")
    return None


def null_columns(real: float, spectrum: list, structured: list | None = None, planned: int | None = None,
                 tested: int | None = None, kind: str = "spectrum", statistic: str = "corr_restricted",
                 margin_ratio: float | None = None) -> dict:
    """The null columns of one head's row from its real value of ``statistic`` and its null draws
    (:func:`attnsvm.real.nulls.null_heads` dicts): p-values (:func:`statistic_pvalues`; the method in ``p_method``,
    and the exact Monte Carlo ones as ``p_upper_mc, p_lower_mc``), null mean / sd (of the statistic's raw values),
    the descriptive z (on the predictive t's scale, :func:`t_scale`: the logs for ``margin_ratio``), draws used and
    dropped (no certified SVM), the structured nulls' mean of ``corr_restricted`` (NaN if none), ``statistic``.

    ``statistic``: one of :data:`STATISTICS`, the draws' key the verdict reads. ``margin_ratio``: the head's
    :func:`attnsvm.real.layer.margin_ratio` (None: ``real`` when ``statistic`` is "margin_ratio", else unknown):
    whatever the statistic, the row also has ``p_margin_ratio``, the upper margin-ratio p-value of
    :func:`statistic_pvalues` (before multiple testing; NaN where it has none), and ``p_note``: words on what the
    p-values could not do (:data:`NO_NOTE` when nothing): a ratio <= 0 (ranks instead of the t), or draws without a margin
    ratio (stored before null heads recorded one: no margin-ratio p-value); :data:`NO_NOTE` when nothing.

    ``planned``: the verdict draws the probe asked for (None: as many as given). With it the row also has
    ``null_planned`` and ``null_stop``: "all drawn", or why the draws stopped early (:func:`stop_reason` at
    :func:`stop_level` ``(tested)`` on the :func:`t_scale` values, recomputed from the draws in order, so it is the
    reason the draws stopped for), and ``null_reach_upper, null_reach_lower``: the smallest p-values the full draws
    could have given (:func:`reachable_pvalues`; the p-values themselves when all were drawn, NaN without a p-value),
    which :func:`stop_undetermined` uses.

    ``tested``: the number of heads probed with nulls (the stopping level's m; None: the level of any m).
    ``kind``: the null kind of the draws in ``spectrum`` (the verdict's null; the ``null_kind`` column:
    "spectrum" or "sink", :data:`attnsvm.real.nulls.NULL_KINDS`)."""
    check_statistic(statistic)
    missing = [d for d in spectrum if statistic not in d]  # draws stored before they recorded this statistic
    v = np.array([d.get(statistic, np.nan) for d in spectrum], float)
    ok = np.isfinite(v)
    vt, rt = t_scale(v, statistic), float(t_scale([real], statistic)[0])
    stop = {}
    if planned is not None:
        done = len(spectrum)
        why = "all drawn" if done >= planned else stop_reason(rt, vt, int(planned) - done, stop_level(tested))
        stop = {"null_planned": int(planned), "null_stop": why or f"{done} of {int(planned)} drawn"}
    pu, pl, z, method = statistic_pvalues(real, v, statistic)
    if planned is not None:
        reach = (pu, pl)
        if len(spectrum) < planned and np.isfinite(pu):
            reach = reachable_pvalues(rt, vt, int(planned) - len(spectrum))
        stop.update(null_reach_upper=float(reach[0]), null_reach_lower=float(reach[1]))
    mu, ml = mc_pvalues(real, v[ok])
    mean, sd, k = null_moments(v[ok])
    sv = np.array([d["corr_restricted"] for d in (structured or [])], float)
    sv = sv[np.isfinite(sv)]
    mr = real if statistic == "margin_ratio" else (float("nan") if margin_ratio is None else float(margin_ratio))
    notes = []
    if spectrum and not any("margin_ratio" in d for d in spectrum):
        p_mr, mr_method = float("nan"), ""
        notes.append("the null heads have no margin ratio (stored before null heads recorded null_margin_ratio): "
                     "no margin-ratio p-value" + (" and no verdict on it" if statistic == "margin_ratio" else ""))
    else:
        p_mr, _, _, mr_method = statistic_pvalues(mr, [d.get("margin_ratio", np.nan) for d in spectrum],
                                                  "margin_ratio")
    if mr_method == P_METHOD_RANKS and np.isfinite(p_mr):
        notes.append("a margin ratio <= 0 (the head or a null does not separate its selections by a positive margin, "
                     "so it has no log): the margin-ratio p-values are the exact Monte Carlo ranks, never below "
                     f"1/(K + 1) = {1.0 / (k + 1):.2g}" if statistic == "margin_ratio" else
                     "a margin ratio <= 0 (no positive margin, no log): p_margin_ratio is the exact Monte Carlo rank")
    if missing and len(missing) < len(spectrum):
        notes.append(f"{len(missing)} null draws have no {statistic} (dropped)")
    return {"p_upper": pu, "p_lower": pl, "p_upper_mc": mu, "p_lower_mc": ml, "p_method": method,
            "statistic": statistic, "null_mean": mean, "null_sd": sd, "z_null": z, "n_null": k,
            "n_null_dropped": int((~ok).sum()), "null_kind": str(kind),
            "structured_mean": float(sv.mean()) if sv.size else float("nan"),
            "null_seconds": float(np.nansum([d["seconds"] for d in spectrum + list(structured or [])])),
            "p_margin_ratio": float(p_mr), "p_note": "; ".join(notes) or NO_NOTE, **stop}


def reference_columns(kind: str, draws: list) -> dict:
    """Descriptive columns of a head's nulls of ``kind`` drawn beside the verdict's null (the spectrum nulls beside
    the sink null's verdict): ``<kind>_mean, <kind>_sd`` (NaN where undefined) and ``n_<kind>`` (certified draws)
    of their ``corr_restricted`` (:func:`attnsvm.real.nulls.null_heads` dicts)."""
    v = np.array([d["corr_restricted"] for d in draws], float)
    mean, sd, k = null_moments(v[np.isfinite(v)])
    return {f"{kind}_mean": mean, f"{kind}_sd": sd, f"n_{kind}": k}


def spectrum_columns(spectrum: list) -> dict:
    """:func:`reference_columns` of spectrum nulls: ``spectrum_mean, spectrum_sd, n_spectrum``."""
    return reference_columns("spectrum", spectrum)


def transplant_columns(real: float, transplants: list) -> dict:
    """Descriptive columns of one head's transplanted heads (:func:`attnsvm.real.nulls.transplant_heads`
    dicts; never used by the verdict): ``transplant_mean, transplant_sd`` of their ``corr_restricted``,
    ``transplant_above`` (the share of them the head's ``real`` value is above, NaN without any),
    ``n_transplant`` (certified draws), ``n_transplant_dropped``, ``transplant_sources`` ("L<l>-H<h>", comma-
    separated, in order, dropped ones included), ``transplant_seconds``."""
    v = np.array([d["corr_restricted"] for d in transplants], float)
    ok = np.isfinite(v)
    mean, sd, k = null_moments(v[ok])
    above = float(np.mean(real > v[ok])) if k and np.isfinite(real) else float("nan")
    return {"transplant_mean": mean, "transplant_sd": sd, "transplant_above": above, "n_transplant": k,
            "n_transplant_dropped": int((~ok).sum()),
            "transplant_sources": ",".join(str(d.get("source", "")) for d in transplants),
            "transplant_seconds": float(np.nansum([d["seconds"] for d in transplants]))}


def by_adjust(p) -> np.ndarray:
    """Benjamini-Yekutieli adjusted p-values (q-values) of ``p (m,)``; NaN entries stay NaN and do
    not count in m. ``q_(i) = min_{j >= i} min(1, m c(m) p_(j) / j)``, ``c(m) = sum_{k<=m} 1/k``:
    rejecting ``q <= alpha`` controls the false discovery rate at alpha under any dependence."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1:
        raise ValidationError(f"p must be a 1-d array of p-values, got shape {p.shape}")
    ok = np.isfinite(p)
    if np.any((p[ok] < 0) | (p[ok] > 1)):
        raise ValidationError("p must lie in [0, 1]")
    q = np.full(p.shape, np.nan)
    m = int(ok.sum())
    if m == 0:
        return q
    pv = p[ok]
    order = np.argsort(pv, kind="stable")
    c = np.sum(1.0 / np.arange(1, m + 1))
    adj = pv[order] * m * c / np.arange(1, m + 1)
    adj = np.minimum.accumulate(adj[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    q[ok] = out
    return q


def stop_undetermined(p, reach, level: float = LEVEL) -> np.ndarray:
    """Heads whose Benjamini-Yekutieli rejection the stopped null draws leave open: ``(m,)`` bool.

    Parameters
    ----------
    p : (m,) the heads' p-values in one tail (NaN: no p-value, outside BY)
    reach : (m,) the smallest p-value each head's full draws could have given (``null_reach_upper`` or
        ``null_reach_lower`` of :func:`null_columns`; equal to p for a head that drew all, NaN where unknown)
    level : the FDR level

    A head that stopped early has a full-draw p somewhere in ``[reach, 1]``, every other head's p is its full-draw
    p. BY's rejected set only grows when a p-value falls (step-up: ``N(t_k)`` grows), so every outcome's rejected
    set lies between that of the stopped heads at 1 and that of the stopped heads at ``reach``; a head is
    undetermined iff the two differ on it. All False proves the verdicts equal those of the full draws, for
    any number of heads with p-values (the check :func:`stop_level`'s proof needs when some head has none).
    """
    p = np.asarray(p, dtype=np.float64)
    r = np.asarray(reach, dtype=np.float64)
    if p.ndim != 1 or r.shape != p.shape:
        raise ValidationError(f"p and reach must be 1-d arrays of one shape, got {p.shape} and {r.shape}")
    stopped = np.isfinite(p) & np.isfinite(r) & (r < p)
    lo, hi = np.where(stopped, r, p), np.where(stopped, 1.0, p)
    return (by_adjust(lo) <= level) != (by_adjust(hi) <= level)


def no_svm_reason(status: str, selected_all: bool = False, contradictions=None) -> str:
    """Plain words for a head whose SVM cannot be compared (``status`` of its SVM; ``contradictions``: the number of
    direct contradictions among its selections, :func:`attnsvm.svm.gen_ties.gen_contradictions`, None or NaN: not
    counted)."""
    if selected_all:
        return "all candidates selected: W = 0"
    count = int(contradictions) if contradictions is not None and contradictions == contradictions else 0
    direct = (f"; {count} direct contradiction{'s' if count != 1 else ''} among its rows: two sentences with the same "
              "query state and the same two key states, one asking them to tie and the other to differ by a margin "
              "(or by opposite margins), as context-free states such as a first layer's embeddings make them"
              ) if count > 0 else ""
    if status == "infeasible":
        return ("infeasible: the Gen-SVM asks every selected token of a sentence to tie (equal scores) and beat the "
                "sentence's other tokens by a margin, and no key-query matrix does that on these sentences (Farkas "
                "certificate); the head's own scores need not tie, so the head has no SVM to be compared with"
                + direct)
    if count > 0:  # not certified by the solver, yet proven infeasible by two rows
        return f"SVM not certified (status {status}), and none exists" + direct
    return f"SVM not certified (status {status})"


def verdicts(q_upper, q_lower, status, *, selected_all=None, contradictions=None,
             level: float = LEVEL) -> tuple[list, list]:
    """Verdict and reason per head.

    Parameters
    ----------
    q_upper, q_lower : (h,) BY-adjusted p-values (:func:`by_adjust`)
    status : (h,) the status of each head's SVM ("optimal" = certified)
    selected_all : (h,) bool, optional: every sentence's selection is all its candidates (no margin row)
    contradictions : (h,) optional: direct contradictions among each head's Gen-SVM rows (NaN: not counted), named in
        the reason of a head without an SVM
    level : the FDR level

    Returns
    -------
    verdict : list of h strings in :data:`VERDICTS`; reason : list of h strings
    """
    qu, ql = np.asarray(q_upper, float), np.asarray(q_lower, float)
    status = list(status)
    if not (qu.shape == ql.shape == (len(status),)):
        raise ValidationError("q_upper, q_lower and status must have one entry per head")
    if not 0 < level < 1:
        raise ValidationError(f"level must lie in (0, 1), got {level!r}")
    sel_all = np.zeros(len(status), bool) if selected_all is None else np.asarray(selected_all, bool)
    direct = np.full(len(status), np.nan) if contradictions is None else np.asarray(contradictions, float)
    out, why = [], []
    for k, st in enumerate(status):
        if sel_all[k] or st != "optimal":
            out.append("no SVM")
            why.append(no_svm_reason(st, bool(sel_all[k]), direct[k]))
        elif not (np.isfinite(qu[k]) and np.isfinite(ql[k])):
            out.append("not distinguishable")
            why.append("too few certified null heads for a p-value")
        elif qu[k] <= level:
            out.append("beyond null")
            why.append(f"upper q {qu[k]:.2g} <= {level}")
        elif ql[k] <= level:
            out.append("below null")
            why.append(f"lower q {ql[k]:.2g} <= {level}")
        else:
            out.append("not distinguishable")
            why.append(f"upper q {qu[k]:.2g}, lower q {ql[k]:.2g} > {level}")
    return out, why


def add_verdict(table, level: float = LEVEL):
    """``table`` (pandas, one row per head with ``p_upper, p_lower, svm_status`` and optionally
    ``selected_all``) with ``q_upper, q_lower`` (BY over its rows), ``verdict`` and
    ``verdict_reason`` set; a copy. Rows without p-values count as absent from BY. With the columns
    ``null_reach_upper, null_reach_lower`` (draws that may stop early, :func:`null_columns`) also
    ``null_stop_proven``: False for a head whose verdict :func:`stop_undetermined` leaves open (its reason says so).
    q-values of heads that are not rejected may differ from the full draws' (only rejections are proven). With
    ``p_note`` (:func:`null_columns`: what the p-values could not do) a head's note is appended to its reason."""
    t = table.copy()
    if t.empty or "p_upper" not in t.columns:
        return t
    t["q_upper"] = by_adjust(t["p_upper"].to_numpy(float))
    t["q_lower"] = by_adjust(t["p_lower"].to_numpy(float))
    sel_all = t["selected_all"].to_numpy(bool) if "selected_all" in t.columns else None
    direct = t["svm_contradictions"].to_numpy(float) if "svm_contradictions" in t.columns else None
    t["verdict"], t["verdict_reason"] = verdicts(t["q_upper"], t["q_lower"], t["svm_status"].astype(str),
                                                 selected_all=sel_all, contradictions=direct, level=level)
    if "p_note" in t.columns:  # what the p-values could not do (null_columns), in words beside the verdict
        note = t["p_note"].fillna(NO_NOTE).astype(str)
        has = ~note.isin(["", NO_NOTE]) & (t["verdict"] != "no SVM")
        t.loc[has, "verdict_reason"] = t.loc[has, "verdict_reason"] + "; " + note[has]
    if "null_reach_upper" in t.columns:  # null draws that stopped early: prove the verdicts are the full ones
        open_ = stop_undetermined(t["p_upper"].to_numpy(float), t["null_reach_upper"].to_numpy(float), level) | \
            stop_undetermined(t["p_lower"].to_numpy(float), t["null_reach_lower"].to_numpy(float), level)
        t["null_stop_proven"] = ~open_
        t.loc[open_, "verdict_reason"] = t.loc[open_, "verdict_reason"] + (
            "; NOT proven: null draws that stopped early could change it (fewer heads have p-values than the "
            "stopping level assumed): rerun with all draws (--no-null-stop)")
    return t


#: the stable verdict's words (``stable_verdict``): the verdict where the two largest m agree, else the last
STABLE_VERDICTS = {"beyond null": "beyond", "below null": "below", "not distinguishable": "not distinguishable",
                   "no SVM": "no SVM"}
DEPENDS = "depends on sample size"


def add_verdict_by_m(table, level: float = LEVEL):
    """``table`` with one row per head and number of SVM sentences (columns ``layer, head, m`` and those of
    :func:`add_verdict`): :func:`add_verdict` at each m (Benjamini-Yekutieli over the heads at that m), then
    ``stable_verdict`` per head (:func:`stable_verdicts`); a copy, rows in the input's order."""
    import pandas as pd

    if table.empty or "p_upper" not in table.columns:
        return table.copy()
    if "m" not in table.columns:
        raise ValidationError("table must have an 'm' column (the number of SVM sentences of each row)")
    parts = [add_verdict(g, level) for _, g in table.groupby("m", sort=True)]
    t = pd.concat(parts).loc[table.index]
    return stable_verdicts(t)


def stable_verdicts(table):
    """``table`` (columns ``layer, head, m, verdict``) with ``stable_verdict`` on every row of a head: the verdict
    at its two largest m (:data:`STABLE_VERDICTS`: "beyond", "below", "not distinguishable", "no SVM") when they
    agree, else :data:`DEPENDS`; with one m, that m's verdict. A conjunction over nested samples (the first m
    sentences are inside the first m' > m), so it is conservative: a head is called stable only where both of
    the largest samples give the same answer. A copy."""
    t = table.copy()
    out = {}
    for key, g in t.groupby(["layer", "head"], sort=False):
        last = g.sort_values("m", kind="stable")["verdict"].tolist()[-2:]
        out[key] = STABLE_VERDICTS.get(last[-1], DEPENDS) if len(set(last)) == 1 else DEPENDS
    t["stable_verdict"] = [out[(r.layer, r.head)] for r in t[["layer", "head"]].itertuples()]
    return t


def verdict_counts(table) -> dict:
    """``{verdict: number of rows}`` for every verdict in :data:`VERDICTS` (0 when absent)."""
    if "verdict" not in table.columns:
        return {v: 0 for v in VERDICTS}
    vc = table["verdict"].value_counts()
    return {v: int(vc.get(v, 0)) for v in VERDICTS}


def verdict_summary(table) -> str:
    """Per layer: heads beyond null / not distinguishable / below null / no SVM, the mean of the verdict's statistic
    (its ``statistic`` column; corr_restricted without one) against the verdict nulls' mean (their ``null_kind``:
    spectrum, or sink with the spectrum nulls' mean beside it, for corr_restricted), and the random-selection
    baseline (secondary); then all heads.
    Without a ``verdict`` column (no null heads) only the agreement and the baseline."""
    def mean(col) -> str:  # words where no head has a value (never "nan")
        v = float(col.mean()) if col.notna().any() else float("nan")
        return f"{v:.4f}" if np.isfinite(v) else "none (no head has a value)"

    lines = []
    groups = list(table.groupby("layer")) + [("all", table)]
    for layer, g in groups:
        lab = f"layer {int(layer)}" if layer != "all" else "all layers"
        base = (f"random-selection baseline {mean(g['corr_random_restricted'])} "
                f"({int((g['advantage'] > 0).sum())}/{len(g)} above)" if "corr_random_restricted" in g.columns else "")
        if "verdict" in g.columns:
            c = verdict_counts(g)
            kind = str(g["null_kind"].iloc[0]) if "null_kind" in g.columns and g["null_kind"].notna().any() \
                else "spectrum"
            stat = str(g["statistic"].dropna().iloc[0]) if "statistic" in g.columns and g["statistic"].notna().any() \
                else "corr_restricted"
            also = (f" (spectrum nulls {mean(g['spectrum_mean'])}, descriptive)"
                    if kind != "spectrum" and "spectrum_mean" in g.columns and stat == "corr_restricted" else "")
            lines.append(f"{lab}: {c['beyond null']} beyond null, {c['not distinguishable']} not distinguishable, "
                         f"{c['below null']} below null, {c['no SVM']} no SVM of {len(g)}; {stat} "
                         f"{mean(g[stat])} vs {kind} nulls {mean(g['null_mean'])}{also}; "
                         f"secondary: {base}")
        else:
            lines.append(f"{lab}: corr_restricted {mean(g['corr_restricted'])}, {base} (no null heads: no verdict)")
    if "null_stop_proven" in table.columns and not table["null_stop_proven"].astype(bool).all():
        bad = table[~table["null_stop_proven"].astype(bool)]
        lines.append(f"WARNING: {len(bad)} verdict(s) NOT proven equal to those of all null draws ("
                     + ", ".join(f"L{int(r.layer)}-H{int(r.head)}" for r in bad.itertuples())
                     + "): rerun with all draws (--no-null-stop)")
    return "\n".join(lines)


#: what the verdict columns mean, printed under the probe's table
LEGEND = (
    "columns: corr_restricted = cosine of the head's W_h (projected on the span its sentences reveal) with the "
    "nuclear Gen-SVM of its own selections; null_mean = the verdict's statistic for its null heads (null_kind); "
    "p_upper = predictive-t p-value of the head above its nulls; q_upper = Benjamini-Yekutieli over the probed heads; verdict: "
    "'beyond null' (q_upper <= 0.05), 'below null' (q_lower <= 0.05), 'not distinguishable', 'no SVM' (no "
    "certified SVM: infeasible or all candidates selected); sel_first = share of queries whose selection holds "
    "position 0 ([CLS] / BOS); margin_ratio = the head's own margin on its selections over the SVM's, both at nuclear "
    "norm 1 (1: max-margin); p_margin_ratio = its predictive-t p-value on the log against the null heads' margin ratios "
    "(the verdict's p_upper where statistic = margin_ratio, else reported beside it); statistic = what the verdict "
    "compares (corr_restricted by default); corr_random_restricted = random selections of the same sizes (secondary "
    "baseline)."
)
