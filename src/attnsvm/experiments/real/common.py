"""Real data: digit patches, MiniLM token states, and MiniLM's pretrained heads.

* ``real-digits``: sklearn's 8x8 digits as patch tokens with a mean-token ([CLS]-style)
  query; W and (K, Q) attention classifiers trained with normalized GD; their
  selected patches, the Att-SVM of those selections (Frobenius for W, nuclear and
  Frobenius for (K, Q)), correlation over training, test accuracy, selected patches drawn.
* ``real-minilm-embeddings``: MiniLM token states of one layer for a generated
  sentiment task, [CLS] as the query; the same analysis, with the selected words.
* ``real-minilm-heads``: every pretrained head's selections on English sentences and
  the correlation of its key-query matrix with the nuclear-norm Gen-SVM of those
  selections, against random selections of the same sizes.

The specs give no numbers for real data: every check transfers a qualitative claim of
transformers-as-svms.md (GD selects tokens; W / (K, Q) point along the Frobenius / nuclear
SVM of their selections; a pretrained head's key-query matrix correlates with the SVM of
its own selections) and compares the measurement with a comparator fixed in advance and
measured on the same units: uniform attention, the initialization, Gaussian random
directions, the other norm's SVM, random selections of the same sizes. The margin is a
sampling interval over those units (:func:`paired_check`, :func:`sign_share_check`) or a
permutation level (:func:`random_direction_check`), so a table of noise fails every check.
Every SVM a comparison uses is certified (``SVMSolution.certified``); an uncertified one is
never compared with (its correlations are NaN) and fails the integrity check.

All three need the ``real`` extra (``pip install 'attnsvm[real]'``); without it the
tasks fail with that install hint.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnsvm.metrics import correlation, softmax_of
from attnsvm.problem import TokenProblem
from attnsvm.svm import solve_svm
from attnsvm.training.train import train
from attnsvm.experiments.checks import ALPHA, Check, integrity_check
from attnsvm.experiments.power import LEVEL_CORR

PARAMS = ("W", "KQ")
#: the SVM in each parameterization's own norm (the implicit bias the theory predicts)
OWN_SVM = {"W": "att_fro", "KQ": "att_nuc"}
#: the correlation columns of real-digits and real-minilm-embeddings, reported together as integrity partners
#: (:func:`~attnsvm.experiments.checks.correlation_partners`)
CORR_PARTNERS = {
    "corr_att_fro": "corr with the Frobenius Att-SVM",
    "corr_att_nuc": "corr with the nuclear Att-SVM",
    "svm_fro_nuc_corr": "corr of the two SVMs",
    "corr_random_dir": "corr of a random direction",
}
#: real-minilm-heads' correlation columns (one row per head; NaN for a head without a certified SVM)
HEAD_PARTNERS = {
    "corr": "corr(W_h, nuclear Gen-SVM of its selections)",
    "corr_restricted": "corr_restricted(W_h, nuclear Gen-SVM of its selections)",
    "corr_random": "corr(W_h, nuclear Gen-SVM of random selections)",
    "corr_random_restricted": "corr_restricted(W_h, nuclear Gen-SVM of random selections)",
}
#: real-minilm-heads' correlation columns stored with the parts they divide (column -> its inner product, the head's
#: Frobenius norm, the SVM's; :func:`attnsvm.real.layer.corr_parts`): recomputed by
#: :func:`~attnsvm.experiments.checks.correlation_parts_checks`
HEAD_PARTS = {
    "corr": ("inner", "norm_head", "norm_svm"),
    "corr_restricted": ("inner_restricted", "norm_head_restricted", "norm_svm"),
}
#: the SVMs solved per parameterization (the (K, Q) Frobenius SVM is the comparator of its bias)
SVMS = {"W": ("att_fro",), "KQ": ("att_nuc", "att_fro")}
_NORM = {"att_fro": "fro", "att_nuc": "nuclear"}
#: statuses that carry a certificate: optimal (certificate passes) or infeasible (Farkas multipliers)
_CERTIFIED = ("optimal", "infeasible")

SRC_SELECT = "transformers-as-svms.md 4 thm 4 and 7.3 (GD on W / (K,Q) selects tokens; claim on real data)"
SRC_ACCURACY = ("transformers-as-svms.md 3.1 and 4 thm 4 (attention selects the high-score tokens of the head; "
                "claim on real data)")
SRC_DIRECTION = {
    "W": "transformers-as-svms.md 4 thm 1, 4 and 7.3 (W -> Frobenius Att-SVM of its selections; claim on real data)",
    "KQ": "transformers-as-svms.md 4 thm 2 and 7.3 ((K,Q) -> nuclear Att-SVM of its selections; claim on real data)",
}
SRC_BIAS = ("transformers-as-svms.md 2.2 and 7.3 ((K,Q) follows the nuclear-norm, not the Frobenius SVM; "
            "claim on real data)")
#: the worker-process state the MiniLM experiments share (:meth:`Experiment.shared_state`): the loaded model
#: (:func:`attnsvm.real.minilm.load_minilm`, float64) and the last forward pass (:mod:`attnsvm.real.cache`)
MINILM_STATE = "the shipped MiniLM, float64 (model and last forward pass)"
SRC_HEADS = ("transformers-as-svms.md 2.4 and 4 thm 2, 8 ((K,Q) points along the nuclear-norm Gen-SVM of its "
             "selections; claim on a pretrained model)")


# ---------------------------------------------------------------- helpers


def attention_maps(problem: TokenProblem, Ws: np.ndarray) -> np.ndarray:
    """Attention of every checkpoint: Ws (C, d, d) -> (C, n, T) (:func:`attnsvm.metrics.softmax_of`)."""
    return softmax_of(Ws, problem.X, problem.queries)


def _accuracy(problem: TokenProblem, att: np.ndarray) -> np.ndarray:
    """Accuracy of ``sign(v^T X^T s)`` per checkpoint: att (C, n, T) -> (C,)."""
    return np.mean(_correct(problem, att), axis=-1)


def _correct(problem: TokenProblem, att: np.ndarray) -> np.ndarray:
    """Per-sample correctness of ``sign(v^T X^T s)``: att (..., n, T) -> (..., n) float (1.0 / 0.0)."""
    f = np.einsum("...nt,nt->...n", att, problem.X @ problem.v)
    return (np.sign(f) == problem.Y).astype(np.float64)


def uniform_correct(problem: TokenProblem) -> np.ndarray:
    """Per-sample correctness with uniform attention (W = 0: the head on the mean token): (n,)."""
    return (np.sign(problem.X.mean(axis=1) @ problem.v) == problem.Y).astype(np.float64)


def corr_curve(Ws: np.ndarray, W) -> np.ndarray:
    """corr(W(k), W_svm) per checkpoint: Ws (C, d, d) -> (C,); NaN without a (certified) SVM."""
    if W is None:
        return np.full(Ws.shape[0], np.nan)
    return np.asarray(correlation(Ws, W[None]), dtype=np.float64)


def certified_svm(problem: TokenProblem, alpha: np.ndarray, norm: str):
    """Att-SVM of the selection ``alpha (n,)``: ``(W or None, record)``.

    W is returned only when the solution is certified (``sol.certified``); ``record`` holds the
    status ("optimal" = certified, "optimal_inaccurate", "infeasible" or "error: ...") and the
    certificate's relative largest violation and duality gap (NaN when there is none).
    """
    try:
        sol = solve_svm(problem, alpha, norm)
    except Exception as exc:  # noqa: BLE001 - a failing solve is recorded (integrity check), not fatal
        return None, {"status": f"error: {type(exc).__name__}", "violation": float("nan"), "gap": float("nan")}
    cert = sol.certificate
    rec = {"status": sol.status, "violation": float(cert.max_violation), "gap": float(cert.duality_gap)}
    return (sol.W if sol.certified else None), rec


def random_direction_corrs(W, draws: int, rng: np.random.Generator) -> np.ndarray:
    """corr(G_k, W) for ``draws`` standard Gaussian matrices G_k of W's shape: (draws,) (NaN if W is None).

    Sampled exactly without forming G: by rotation invariance ``<G, W / ||W||> = z ~ N(0, 1)`` and
    ``||G||^2 = z^2 + c`` with ``c ~ chi^2(D - 1)`` independent (D = W.size), so
    ``corr = z / sqrt(z^2 + c)`` whatever the (nonzero) W.
    """
    if W is None or not np.any(W):
        return np.full(draws, np.nan)
    z = rng.standard_normal(draws)
    c = rng.chisquare(W.size - 1, draws)
    return z / np.sqrt(z * z + c)


def image_ids(images: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Index in ``reference (N, 8, 8)`` of each image of ``images (n, 8, 8)`` (first match): (n,) int.

    The seeds' train / test splits overlap, so per-image comparisons pool the seeds by image.
    """
    first: dict[bytes, int] = {}
    for i, im in enumerate(np.ascontiguousarray(reference, dtype=np.float64)):
        first.setdefault(im.tobytes(), i)
    return np.array([first[im.tobytes()] for im in np.ascontiguousarray(images, dtype=np.float64)], dtype=np.int64)


def _selection_sets(s: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Argmax token (n,) and selected sets (n, T) from final attention s (n, T)."""
    alpha = s.argmax(axis=1)
    O = s >= threshold
    O[np.arange(len(alpha)), alpha] = True
    return alpha, O


def mean_curve(ax, table, x, y, label, **kw):
    if y not in table.columns or not table[y].notna().any():
        return
    g = table.groupby(x)[y]
    m, sd = g.mean(), g.std().fillna(0.0)
    ax.plot(m.index, m.values, label=label, **kw)
    ax.fill_between(m.index, (m - sd).values, (m + sd).values, alpha=0.15, color=ax.lines[-1].get_color())


#: the direction panel's curves: (param, column, line style); labelled ``"<param> vs <norm>"``
DIRECTION_CURVES = (("W", "corr_att_fro", "-"), ("KQ", "corr_att_nuc", "-"), ("KQ", "corr_att_fro", ":"))


def curve_panel(ax, cur: pd.DataFrame, lines, ylabel: str, *, hline=None, title: str | None = None) -> None:
    """One panel of mean curves (+- sd) over the training step of the curve rows ``cur``.

    lines : (param, column, label, line style or None) per curve; hline : optional (value, label), a grey
    dotted reference line; the x axis is the step, a legend closes the panel."""
    for param, key, label, ls in lines:
        mean_curve(ax, cur[cur["param"] == param], "step", key, label, **({} if ls is None else {"ls": ls}))
    if hline is not None:
        ax.axhline(hline[0], color="grey", ls=":", label=hline[1])
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    ax.legend(fontsize=7)


def direction_lines():
    """The :func:`curve_panel` lines of the direction panel: W and KQ against their SVMs."""
    return [(param, key, f"{param} vs {key[5:]}", style) for param, key, style in DIRECTION_CURVES]


def final_rows_of(table: pd.DataFrame) -> pd.DataFrame:
    cur = table[table["kind"] == "curve"]
    last = cur.groupby(["seed", "param"])["step"].transform("max")
    return cur[cur["step"] == last]


def train_param(problem: TokenProblem, param: str, config, seed: int):
    """Train one parameterization, solve the SVMs of its final selections and draw the random directions.

    Returns ``(res, alpha, O, svms, extra, nulls)``: ``svms`` maps each key of ``SVMS[param]`` to
    its certified W or None; ``extra`` holds the per-run columns (SVM statuses, relative violations
    and gaps, the correlation of the two SVMs); ``nulls`` the random-direction rows.
    """
    res = train(problem, param=param, steps=config.steps, lr=config.lr, seed=seed, record_every=config.record_every)
    alpha, O = _selection_sets(res.softmax[0, -1], config.select_threshold)
    svms, extra = {}, {}
    for key in SVMS[param]:
        svms[key], rec = certified_svm(problem, alpha, _NORM[key])
        for field, val in rec.items():
            extra[f"{key}_{field}"] = val
    a, b = svms.get("att_fro"), svms.get("att_nuc")
    extra["svm_fro_nuc_corr"] = float(correlation(a, b)) if a is not None and b is not None else float("nan")
    key = OWN_SVM[param]
    rng = np.random.default_rng([int(seed), 7919, PARAMS.index(param)])
    nulls = pd.DataFrame({"kind": "null", "seed": seed, "param": param, "svm": key,
                          "draw": np.arange(config.null_draws),
                          "corr_random_dir": random_direction_corrs(svms[key], config.null_draws, rng)})
    return res, alpha, O, svms, extra, nulls


def curve_rows(seed, param, result, train_p, test_p, svms, extra=None):
    Ws = result.W[0]
    att_tr = result.softmax[0]
    att_te = attention_maps(test_p, Ws)
    rows = pd.DataFrame({
        "kind": "curve", "seed": seed, "param": param, "step": result.steps, "loss": result.loss[0],
        "norm": result.norm[0], "max_softmax": att_tr.max(axis=2).mean(axis=1),
        "train_acc": _accuracy(train_p, att_tr), "test_acc": _accuracy(test_p, att_te),
    })
    for key in ("att_fro", "att_nuc"):
        rows[f"corr_{key}"] = corr_curve(Ws, svms.get(key))
    for key, val in (extra or {}).items():
        rows[key] = val
    return rows


def sample_rows(seed, param, split, unit, problem: TokenProblem, att0: np.ndarray, att1: np.ndarray,
                 keyword=None) -> pd.DataFrame:
    """Per-sample comparison rows: ``att0``/``att1`` (n, T) attention at initialization / last step.

    Columns ``unit`` (the sample's id: the image of the dataset, or the sentence), correctness at the
    last step and with uniform attention, the largest attention weight at initialization and at the
    last step, and (``keyword (n,)`` given) whether the argmax is the keyword at both.
    """
    out = pd.DataFrame({"kind": "sample", "seed": seed, "param": param, "split": split, "unit": unit,
                        "correct_final": _correct(problem, att1), "correct_uniform": uniform_correct(problem),
                        "maxatt_init": att0.max(axis=1), "maxatt_final": att1.max(axis=1)})
    if keyword is not None:
        out["keyword_init"] = (att0.argmax(axis=1) == keyword).astype(np.float64)
        out["keyword_final"] = (att1.argmax(axis=1) == keyword).astype(np.float64)
    return out


# ---------------------------------------------------------------- checks


def _no_measurement(name, source, units, why, detail="") -> Check:
    return Check(name, float("nan"), "> margin", False, source, f"no test possible: {why}", "qualitative",
                 detail or f"no {units}", claim_is="alternative")


def paired_check(name: str, diffs, *, source: str, comparator: str, units: str, allow_missing: bool = False,
                  detail: str = "", effect: float | None = None, sigma: float | None = None,
                  sigma_source: str = "", spec_ref: str = "", effect_reason: str = "") -> Check:
    """The claim "measurement > comparator" from per-unit paired differences ``diffs (n,)``.

    Passes when the mean difference exceeds its one-sided Student-t margin at level ALPHA
    (``t_{1-ALPHA, n-1} * s / sqrt(n)``) *and* the exact one-sided sign test over the non-zero
    differences rejects chance (1/2) at level ALPHA (the sign test keeps small or discrete samples,
    where the t margin degenerates, honest). On noise (exchangeable measurement and comparator)
    it fails with probability >= 1 - ALPHA. Missing (NaN) units fail the check unless
    ``allow_missing`` (then they are dropped and counted in the detail).

    The claim is the alternative. ``power``: a lower bound on the probability of passing when
    the differences are normal with mean ``effect`` and the planning ``sigma`` (Bonferroni:
    power of the t test plus power of the sign test at ``P(win) = Phi(effect / sigma)``, minus 1;
    :mod:`attnsvm.experiments.power`); ``sigma`` defaults to the stored planning sigma of the check
    ``name`` (:mod:`attnsvm.experiments.planning`), ``effect_reason`` says why the effect. A fail with
    power below 0.8 is ``"inconclusive"``.
    """
    from scipy.stats import binom
    from scipy.stats import t as student_t

    from attnsvm.experiments.checks import planned, record_spread

    d = np.asarray(diffs, dtype=np.float64).ravel()
    if effect is not None:
        record_spread(name, d, ">", effect)
        sigma, effect, sigma_source = planned(name, sigma, effect, sigma_source)
    missing = int((~np.isfinite(d)).sum())
    if missing and not allow_missing:
        return _no_measurement(name, source, units, f"{missing} of {d.size} {units} have no measurement", detail)
    d = d[np.isfinite(d)]
    n = d.size
    extra = f"{n} {units}" + (f" ({missing} without a measurement dropped)" if missing else "")
    detail = f"{detail}; {extra}" if detail else extra
    if n < 2:
        return _no_measurement(name, source, units, f"fewer than 2 {units} with a measurement", detail)
    mean = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n))
    margin = float(student_t.ppf(1 - ALPHA, n - 1)) * se
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    p_sign = float(binom.sf(pos - 1, pos + neg, 0.5)) if pos + neg else 1.0
    passed = bool(mean > margin and p_sign <= ALPHA)
    # both tests must reject (an intersection-union test): the p-value is the larger of the two
    p_t = float(student_t.sf(mean / se, n - 1)) if se > 0 else (0.0 if mean > 0 else 1.0)
    p_value = max(p_t, p_sign)
    power, alternative, inputs, p_plan, p_run = None, "", None, None, None
    if effect is not None and sigma is not None:
        from attnsvm.experiments.checks import run_note
        from attnsvm.experiments.power import plan_with_run, power_from, run_sigma

        inputs, p_plan, p_run = plan_with_run(dict(fn="paired", n=n, effect=effect, sigma=sigma, alpha=ALPHA),
                                              run_sigma(d))
        power = power_from(inputs)
        alternative = (f"normal differences with mean {effect:g}" + (f" ({effect_reason})" if effect_reason else "")
                       + f" and planning sigma {sigma:g}" + (f" ({sigma_source})" if sigma_source else "")
                       + run_note(inputs))
    reason = (f"comparator fixed in advance: {comparator}, on the same {units}; margin = one-sided Student-t bound "
              f"at level {ALPHA:g} of the mean paired difference over {n} {units} (s.e. {se:.3g}); the exact "
              f"one-sided sign test over the {pos + neg} non-zero differences must also reject chance at level "
              f"{ALPHA:g} ({pos} positive, {neg} negative, p = {p_sign:.2g})")
    if power is not None:
        from attnsvm.experiments.power import decide

        reason += f"; power at least {power:.3f} against {alternative}"
        return Check(name, mean, f"> {margin:.4g}", passed, source, reason, "qualitative", detail,
                     verdict=decide(passed, power, "alternative"), power=power, alternative=alternative,
                     spec_ref=spec_ref, power_inputs=inputs, claim_is="alternative", p_value=p_value,
                     power_planned=p_plan, power_judged=p_run)
    return Check(name, mean, f"> {margin:.4g}", passed, source, reason, "qualitative", detail, spec_ref=spec_ref,
                 claim_is="alternative", p_value=p_value)


def sign_share_check(name: str, wins: int, total: int, *, source: str, comparator: str, units: str,
                      detail: str = "", p_win: float | None = None, spec_ref: str = "") -> Check:
    """Share of ``total`` units where the measurement beats the comparator, tested against chance (1/2).

    Passes when ``wins`` is at least the smallest k with ``P(Binomial(total, 1/2) >= k) <= ALPHA``
    (exact one-sided sign test); needs ``total >= log2(1 / ALPHA)`` units to be able to pass.
    The claim is the alternative: ``power`` is the exact probability of passing when each unit
    wins with ``p_win`` (:func:`attnsvm.experiments.power.sign_power`); a fail with power below
    0.8 is ``"inconclusive"``.
    """
    from scipy.stats import binom

    wins, total = int(wins), int(total)
    if total <= 0:
        return _no_measurement(name, source, units, f"no {units}", detail)
    ks = np.arange(total + 2)
    ok = binom.sf(ks - 1, total, 0.5) <= ALPHA
    k_min = int(ks[ok][0]) if ok.any() else total + 1
    reason = (f"comparator fixed in advance: {comparator}; chance share 1/2; exact one-sided binomial sign test at "
              f"level {ALPHA:g} over {total} {units}: at least {k_min} must win"
              + ("" if k_min <= total else f" (impossible with {total} {units}: at least "
                                               f"{math.ceil(math.log2(1 / ALPHA))} are needed)"))
    d = f"{wins}/{total}"
    power, alternative, verdict = None, "", ""
    if p_win is not None:
        from attnsvm.experiments.power import decide, sign_power

        power = sign_power(total, p_win, ALPHA)
        alternative = f"each unit wins with probability {p_win:g}"
        verdict = decide(wins >= k_min, power, "alternative")
        reason += f"; power {power:.3f} against {alternative}"
    return Check(name, wins / total, f">= {k_min / total:.4g}", wins >= k_min, source, reason, "qualitative",
                 f"{detail}; {d}" if detail else d, verdict=verdict, power=power, alternative=alternative,
                 spec_ref=spec_ref, power_inputs=None if power is None else dict(fn="sign", n=total, p_win=p_win,
                                                                                  alpha=ALPHA),
                 claim_is="alternative", p_value=float(binom.sf(wins - 1, total, 0.5)))


def _exchangeable_p(wins: int, total: int, level: float) -> float | None:
    """P(at least ``wins`` of ``total`` runs beat all their random directions) when each run does so with probability
    ``level`` (a matrix exchangeable with its random directions); None without runs."""
    from scipy.stats import binom

    return float(binom.sf(wins - 1, total, level)) if total > 0 else None


def random_direction_check(name: str, own: pd.Series, nulls: pd.DataFrame, draws: int, *, source: str,
                            detail: str = "", effect: float | None = None, sigma: float | None = None,
                            sigma_source: str = "", plan_key: str | None = None) -> Check:
    """Every run's correlation with its SVM beats all ``draws`` Gaussian random directions' correlations.

    ``own``: the run's final correlation, indexed by seed; ``nulls``: rows with ``seed`` and
    ``corr_random_dir``. If the trained matrix carried no information about the SVM's direction
    it would be exchangeable with the random directions and beat all of them with probability
    ``1 / (draws + 1)`` per run; a run passes at that level, the check when every run passes.
    A run with fewer than ``draws`` finite random-direction values, or without an SVM, fails.

    The claim is the alternative. ``power`` (``effect`` given): the probability of passing when every run's
    correlation is ``effect`` and the random directions' correlations are normal around 0 with the planning
    ``sigma`` (default: the stored planning entry of ``name``, the spread of the random directions'
    correlations on shifted seeds; :func:`attnsvm.experiments.power.random_direction_power`). A fail with
    power below 0.8 is ``"inconclusive"``. ``plan_key``: the planning entry's name (default ``name``; the
    experiments that share this check's name store their spreads under their own key).
    """
    from attnsvm.experiments.checks import planned, record_spread

    level = 1.0 / (draws + 1)
    if effect is not None:
        record_spread(plan_key or name, nulls["corr_random_dir"].to_numpy(np.float64), ">", effect)
        sigma, effect, sigma_source = planned(plan_key or name, sigma, effect, sigma_source)
    wins, total, lines = 0, 0, []
    for seed, corr in own.items():
        total += 1
        null = nulls.loc[nulls["seed"] == seed, "corr_random_dir"].to_numpy(np.float64)
        null = null[np.isfinite(null)]
        ok = bool(np.isfinite(corr) and null.size >= draws and corr > null.max())
        wins += ok
        top = f"{null.max():.3f}" if null.size else "none"
        lines.append(f"seed {seed}: {corr:.3f} vs largest random {top}")
    reason = (f"comparator fixed in advance: {draws} standard Gaussian random directions per run, correlated with the "
              f"same SVM; a matrix carrying no information about the SVM's direction beats all of them with "
              f"probability 1/{draws + 1} = {level:.3g} per run, so a run passes at that level; every run must pass")
    if level > ALPHA:
        reason += f" (too few draws: the level {level:.3g} exceeds {ALPHA:g}, so the check fails)"
    passed = total > 0 and wins == total and level <= ALPHA
    d = f"{wins}/{total} runs; " + "; ".join(lines)
    power, alternative, verdict, inputs, p_plan, p_run = None, "", "", None, None, None
    if effect is not None and sigma is not None and total > 0:
        from attnsvm.experiments.checks import run_note
        from attnsvm.experiments.power import decide, plan_with_run, random_direction_power, run_sigma

        inputs, p_plan, p_run = plan_with_run(dict(fn="random_direction", runs=total, draws=draws, effect=effect,
                                                   sigma=sigma, alpha=ALPHA),
                                              run_sigma(nulls["corr_random_dir"].to_numpy(np.float64)))
        power = random_direction_power(total, draws, effect, inputs["sigma"], ALPHA)
        alternative = (f"every run's correlation {effect:g} (Cohen's medium correlation), random directions' "
                       f"correlations normal around 0 with planning sigma {sigma:g}"
                       + (f" ({sigma_source})" if sigma_source else "") + run_note(inputs))
        verdict = decide(bool(passed), power, "alternative")
        reason += f"; power {power:.3f} against {alternative}"
    return Check(name, wins / total if total else float("nan"), ">= 1", bool(passed), source, reason, "qualitative",
                 f"{detail}; {d}" if detail else d, verdict=verdict, power=power, alternative=alternative,
                 power_inputs=inputs, claim_is="alternative", p_value=_exchangeable_p(wins, total, level),
                 power_planned=p_plan, power_judged=p_run)


def certified_check(name: str, statuses, detail: str = "") -> Check:
    """Integrity: every SVM a comparison uses is certified (optimal with a passing certificate, or infeasible
    with Farkas multipliers); value = number that is not (NaN, failing, when there is no SVM)."""
    statuses = [str(s) for s in statuses]
    bad = [s for s in statuses if s not in _CERTIFIED]
    counts = ", ".join(f"{statuses.count(k)} {k}" for k in sorted(set(statuses)))
    detail = f"{len(statuses)} SVMs: {counts}" + (f"; {detail}" if detail else "")
    value = float(len(bad)) if statuses else float("nan")  # no SVM at all: nothing was certified
    return integrity_check(name, value, "==", 0.0, detail,
                           reason="an SVM whose certificate fails (relative violation > 1e-8 or relative gap > "
                                  "1e-8 Frobenius / 1e-6 nuclear) is never compared with; none may be needed")


def run_statuses(fin: pd.DataFrame) -> list[str]:
    """Statuses of the SVMs of every run (final rows)."""
    out = []
    for param, keys in SVMS.items():
        sub = fin[fin["param"] == param]
        for key in keys:
            col = f"{key}_status"
            out += list(sub[col]) if col in sub.columns else ["missing"] * len(sub)
    return out


def nanmean(x) -> float:
    """Mean of the finite entries (NaN, without a warning, when there is none)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def per_unit(samples: pd.DataFrame, a: str, b: str) -> np.ndarray:
    """Paired differences ``a - b`` averaged per unit (a unit seen in several seeds counts once)."""
    if samples.empty:
        return np.array([])
    d = samples[a].astype(np.float64) - samples[b].astype(np.float64)
    return d.groupby(samples["unit"].to_numpy()).mean().to_numpy()


def direction_checks(config, table: pd.DataFrame, fin: pd.DataFrame, experiment: str = "") -> list[Check]:
    """The random-direction controls of W and KQ^T (one check each); ``experiment`` keys their planning entries."""
    nulls = table[table["kind"] == "null"]
    out = []
    for param in PARAMS:
        key = OWN_SVM[param]
        own = fin[fin["param"] == param].set_index("seed")[f"corr_{key}"].astype(np.float64)
        norm = "Frobenius" if key == "att_fro" else "nuclear"
        label = "W" if param == "W" else "KQ^T"
        name = f"{param}: final corr({label}, {norm} Att-SVM of its selections) above random directions in every run"
        out.append(random_direction_check(
            name, own, nulls[(nulls["param"] == param) & (nulls["svm"] == key)], config.null_draws,
            source=SRC_DIRECTION[param], effect=LEVEL_CORR, plan_key=f"{experiment}: {name}" if experiment else None))
    return out


def deviation_quick(exp, config) -> list[dict]:
    """The quick preset's departures from the full config (a deviation too)."""
    full = exp.Config()
    out = []
    for key, val in exp.quick.items():
        if getattr(config, key) == val and getattr(full, key) != val:
            out.append({"spec": f"{key} = {getattr(full, key)} (this experiment's full configuration; no spec number)",
                        "here": f"{key} = {val} (quick preset)",
                        "reason": "quick preset: smaller, so the same checks run with wider sampling margins"})
    return out


NO_PROTOCOL = "no real-data protocol (the specs' experiments use synthetic data; transformers-as-svms.md 5)"
