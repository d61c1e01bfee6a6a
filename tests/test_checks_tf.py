"""Every verdict of the tf-* experiments can fail: corrupted result tables fail the matching check.

The quick preset of each tf-* experiment runs once (module fixture); its results table is then
corrupted in ways that violate one claim each (swapped columns, wrong signs, a random direction
instead of the SVM, uncertified SVMs, noise) and ``experiment.checks`` is recomputed on the copy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnsvm.experiments import build_config, registry

from attnsvm.runner import run_experiment
from attnsvm.experiments.checks import load_findings

NAMES = ("tf-trajectories", "tf-local-convergence", "tf-svm-rank", "tf-convergence-types", "tf-lambda-head",
         "tf-feasibility", "tf-multi-token", "tf-seq-causal")

#: columns that identify a run (never "measured"): the noise test leaves them alone
KEYS = {"instance", "param", "step", "seed", "d", "n", "T", "protocol", "lam", "sample", "mode", "status", "task"}


@pytest.fixture(scope="module")
def quick(quick_out):
    out = quick_out
    res = {}
    for name in NAMES:
        exp = registry()[name]
        cfg = build_config(exp, quick=True)
        summary = run_experiment(exp, cfg, str(out), progress=False)
        assert not summary.failed, (name, summary.failed)
        table = pd.read_parquet(out / name / "results.parquet").drop(columns="task")
        res[name] = (exp, cfg, table, summary)
    return res


def verdicts(exp, cfg, table) -> dict:
    return {c.name: c for c in exp.checks(cfg, table)}


def assert_fails(entry, table, *names):
    exp, cfg, _, _ = entry
    got = verdicts(exp, cfg, table)
    for name in names:
        assert name in got, (exp.name, name, sorted(got))
        assert not got[name].passed, (exp.name, name, got[name])


def last(table, by=("seed",)):
    return table["step"] == table.groupby(list(by))["step"].transform("max")


# ------------------------------------------------------------------------------------------ the real tables
@pytest.mark.parametrize("name", NAMES)
def test_quick_table_passes_every_check_with_a_stated_origin(quick, name):
    exp, cfg, table, summary = quick[name]
    listed = {f.check for f in load_findings() if f.experiment == name and f.applies("quick")}
    checks = exp.checks(cfg, table)
    assert len(checks) >= 5, name
    assert any(c.name == "every SVM used is certified" for c in checks) or name == "tf-lambda-head"
    for c in checks:
        assert c.source.strip() and c.threshold_reason.strip(), (name, c.name)
        if c.name in listed:
            assert not c.passed, f"{name}: finding {c.name!r} now passes: remove it from findings.txt"
        else:
            # a pass, or a pass whose power is below 0.8 (inconclusive, stated with its power), never a fail
            assert c.verdict in ("pass", "inconclusive"), (name, c)
            assert c.verdict == "pass" or (c.power is None or c.power < 0.8), (name, c)
    # the runner's verdicts are the same ones
    assert not summary.failed_checks, summary.failed_checks
    assert exp.deviations(cfg) and all({"spec", "here", "reason"} <= set(d) for d in exp.deviations(cfg))


#: checks that noise may pass more often than not, and why that is acceptable (each one fails on the
#: targeted corruptions below, and a noise-proof partner check of the same claim fails on noise)
NOISE_EXEMPT = {
    # tolerance-free orderings of two means: noise passes them with probability about 1/2; the run-level
    # majority checks ("runs in which ...") are their noise-proof form
    "mean 1-corr to W_fin + R W_svm below that to the Gen-SVM direction",
    "mean 1-corr to the Gen-SVM direction below that to the 1-token SVM",
    # one-sided spec bars that U(0, 1) noise satisfies; their two-sided partners ("about 2.5", "about
    # 0.16, research figure", ...) fail on noise
    "accurate: mean nuclear rank, n=5, T=5, d >= 4 (below 3.5)",
    "mean 1-corr(W, 1-token SVM) (>= 0.1)",
    # "does not decrease": noise means are flat in lambda; the endpoint checks (1.2 -> 4.0) fail on noise
    "mean |O_i| increases along the lambda grid (per-seed rise between neighbouring lambdas)",
    # target 0.44 lies within the sampling reach of the noise mean 0.5 at 100 instances; the same item's
    # targets at d = 20 and d = 100 (0.63, 0.91) fail on noise
    "n=6, T=8: mean share of active constraints at d=8 (about 0.44)",
}
NOISE_DRAWS = 20


def noisy(table: pd.DataFrame, rng) -> pd.DataFrame:
    """Every measured number replaced by U(0, 1) noise, every measured flag by a fair coin, every
    measured label by a random one of its values; identifiers and certificates kept."""
    t = table.copy()
    for col in t.columns:
        if col in KEYS or col.endswith(("_certified", "_status", "_violation", "_gap")):
            continue
        if pd.api.types.is_bool_dtype(t[col]):
            t[col] = rng.random(len(t)) < 0.5
        elif pd.api.types.is_numeric_dtype(t[col]):
            t[col] = rng.random(len(t))
        else:
            vals = t[col].dropna().unique()
            if len(vals):
                t[col] = rng.choice(vals, len(t))
    return t


@pytest.mark.parametrize("name", NAMES)
def test_noise_fails_every_claim(quick, name):
    """Recompute the checks on the quick table with its measurements replaced by noise: every claim
    (integrity checks aside) fails in most noise draws, unless exempted above with its reason."""
    exp, cfg, table, _ = quick[name]
    passes: dict[str, int] = {}
    for seed in range(NOISE_DRAWS):
        for c in exp.checks(cfg, noisy(table, np.random.default_rng(seed))):
            if c.kind != "integrity":
                passes[c.name] = passes.get(c.name, 0) + int(c.passed)
    assert passes, name
    exempt = {n for n in passes if any(n.endswith(x) for x in NOISE_EXEMPT)}
    survivors = {n: k for n, k in passes.items() if k > NOISE_DRAWS // 2 and n not in exempt}
    assert not survivors, (name, survivors)


# ------------------------------------------------------------------------------------------ E1
def test_trajectories_corruptions(quick):
    entry = quick["tf-trajectories"]
    t = entry[2]
    sw = t.copy()
    sw[["corr_fro", "corr_nuc"]] = t[["corr_nuc", "corr_fro"]].to_numpy()      # W compared with the wrong SVM
    assert_fails(entry, sw, "vis1: corr(W(k), W^mm) at the last step", "vis1: corr(KQ^T(k), W^mm_*) at the last step",
                 "vis2: corr(W(k), W^mm) at the last step", "vis2: corr(KQ^T(k), W^mm_*) at the last step")
    rnd = t.copy()
    rnd[["corr_fro", "corr_nuc"]] = np.random.default_rng(0).normal(0, 0.5, (len(t), 2))   # random directions
    assert_fails(entry, rnd, "vis1: corr(W(k), W^mm) at the last step", "vis2: corr(KQ^T(k), W^mm_*) at the last step")
    same = t.assign(corr_svms=1.0, rank_nuc=t.rank_fro)                         # the two SVMs coincide
    assert_fails(entry, same, "vis1: |corr(W^mm, W^mm_*) - 0.89| (the two SVMs differ)",
                 "vis2: |corr(W^mm, W^mm_*) - 0.936| (the two SVMs differ)", "vis1: rank W^mm_*")
    assert_fails(entry, t.assign(rank_fro=1.0), "vis1: rank W^mm", "vis2: rank W^mm")
    assert_fails(entry, t.assign(nuc_certified=False), "every SVM used is certified")


# ------------------------------------------------------------------------------------------ E2
def test_local_convergence_corruptions(quick):
    entry = quick["tf-local-convergence"]
    t = entry[2]
    sw = t.copy()
    sw[["corr_fro", "corr_nuc"]] = t[["corr_nuc", "corr_fro"]].to_numpy()
    assert_fails(entry, sw, "mean corr(W, W^mm_alpha) at the last step", "mean corr(KQ^T, W^mm_*alpha) at the last step",
                 "mean corr(W, W^mm_alpha) at step 1000")
    rnd = t.assign(corr_fro=np.random.default_rng(1).normal(0, 0.1, len(t)))   # a random direction instead of the SVM
    assert_fails(entry, rnd, "mean corr(W, W^mm_alpha) at the last step", "cross: mean corr(KQ^T, W^mm_alpha) at the last step")
    close = t.assign(corr_nuc=np.where(t.param == "W", 0.99, t.corr_nuc))     # W as close to both SVMs
    assert_fails(entry, close, "cross: mean corr(W, W^mm_*alpha) at the last step")
    far = t.assign(corr_fro=np.where(t.param == "KQ", 0.5, t.corr_fro))       # cross-correlation far below 0.85
    assert_fails(entry, far, "cross: mean corr(KQ^T, W^mm_alpha) at the last step")
    slow = t.assign(max_softmax=np.where(t.step <= 300, 0.6, t.max_softmax))
    assert_fails(entry, slow, "mean max softmax (W) at step 300", "mean max softmax (K,Q) at step 100")
    assert_fails(entry, t.assign(is_global=True), "share of W runs selecting the optimal tokens",
                 "share of (K,Q) runs selecting the optimal tokens")
    assert_fails(entry, t.assign(is_global=False), "share of W runs selecting the optimal tokens")
    bad = t.copy()
    bad.loc[bad.seed == bad.seed.min(), "fro_certified"] = False
    assert_fails(entry, bad, "every SVM used is certified")


# ------------------------------------------------------------------------------------------ E3
def test_svm_rank_corruptions(quick):
    entry = quick["tf-svm-rank"]
    t = entry[2]
    acc = t.protocol == "accurate"
    up = t.assign(rank_nuc=np.where(acc, t.rank_fro + 1, t.rank_nuc))
    assert_fails(entry, up, "accurate: share of feasible instances with rank(W^mm_*) <= rank(W^mm)")
    n5 = t.assign(rank_nuc=np.where(acc & t.feasible, 5.0, t.rank_nuc))       # nuclear rank = n, as SCS suggests
    assert_fails(entry, n5, "accurate: mean nuclear rank, n=5, T=5, d >= 4 (below 3.5)",
                 "accurate: mean nuclear rank, n=5, T=5, d >= 4 (about 2.5)",
                 "accurate: mean nuclear rank, n=5, T=5, d >= 10 (table 9.1)")
    low = t.assign(rank_fro=np.where(acc, t.rank_fro - 1, t.rank_fro))
    assert_fails(entry, low, "accurate: mean |rank(W^mm) - min(n, d)| for d >= max(n, 10)")
    inf = t.assign(feasible=np.where(acc & (t.d >= 10), False, t.feasible))
    assert_fails(entry, inf, "accurate: share feasible when d >= max(T-1, n)")
    assert_fails(entry, t.assign(nuc_certified=False), "every SVM used is certified")
    one = t.assign(rank_fro=np.where(acc, t.rank_fro, 1.0))                    # research: everything rank 1
    assert_fails(entry, one, "research: largest |mean Frobenius rank - n| for d >= max(n, 10), panel (a)",
                 "research: largest |mean Frobenius rank - spec| for n=5, T=5")
    swap = t.copy()
    r = ~acc
    swap.loc[r, ["rank_fro", "rank_nuc"]] = t.loc[r, ["rank_nuc", "rank_fro"]].to_numpy() + np.array([0, 1])
    assert_fails(entry, swap, "research: largest mean nuclear rank - mean Frobenius rank for d <= n")


def test_svm_rank_research_protocol_is_in_the_default_config():
    exp = registry()["tf-svm-rank"]
    assert set(exp.Config().protocols) == {"accurate", "research"}
    assert {t.params["protocol"] for t in exp.tasks(exp.Config())} == {"accurate", "research"}


# ------------------------------------------------------------------------------------------ E4
def test_convergence_types_corruptions(quick):
    entry = quick["tf-convergence-types"]
    t = entry[2]
    assert_fails(entry, t.assign(type="global"), "global share at d=2 (about 2%)", "global share at d=10 (about 70%)")
    loc = t.assign(type=np.where((t.d >= 30) & (t["type"] == "global"), "local", t["type"]))
    assert_fails(entry, loc, "global share at d=30 (>= 90%)", "global share at d=50 (>= 90%)",
                 "global share at d=50 minus at d=4 (over-parameterization helps)")
    nei = t.assign(type=np.where(t.d == 4, "neither", t["type"]))
    assert_fails(entry, nei, "local-incl-global share at d=4 (>= 95%)")
    swapped = t.assign(d=t.d.map({4: 50, 50: 4}).fillna(t.d).astype(int))    # d labels swapped: no trend
    assert_fails(entry, swapped, "global share at d=50 minus at d=4 (over-parameterization helps)")
    rnd = t.assign(corr=np.random.default_rng(2).normal(0, 0.1, len(t)))
    assert_fails(entry, rnd, "mean corr(W, W^mm_alpha) over classified runs")
    assert_fails(entry, t.assign(svm_certified=False), "every SVM used is certified")


# ------------------------------------------------------------------------------------------ feasibility
def test_feasibility_corruptions(quick):
    entry = quick["tf-feasibility"]
    t = entry[2]
    flip = t.assign(feasible_opt=~t.feasible_opt.astype(bool))
    assert_fails(entry, flip, "P(feasible), optimal tokens, d >= max(T-1, n)",
                 "n=5, T=5: P(feasible, optimal tokens) at d=1 (about 0)",
                 "n=5, T=5: P(feasible, optimal tokens) at d=3 (about 0.94)",
                 "n=6, T=8: P(feasible, optimal tokens) at d=2 (about 0.19)",
                 "n=6, T=8: P(feasible, optimal tokens) at d=4 (about 0.976)")
    half = t.assign(feasible_opt=np.where(t.d == 2, True, t.feasible_opt))
    assert_fails(entry, half, "n=5, T=5: P(feasible, optimal tokens) at d=2 (about 0.33)")
    assert_fails(entry, t.assign(feasible_random=False), "n=6, T=8: P(feasible, random selection) for d >= 6",
                 "P(feasible), random selection, d >= max(T-1, n)")
    rev = t.assign(support_fraction=1 - t.support_fraction)                    # share falls with d
    assert_fails(entry, rev, "n=6, T=8: mean share of active constraints at d=8 (about 0.44)",
                 "n=6, T=8: mean share of active constraints at d=100 (about 0.91)")
    assert_fails(entry, t.assign(support_fraction=0.63), "n=6, T=8: mean share of active constraints at d=8 (about 0.44)",
                 "n=6, T=8: mean share of active constraints at d=100 (about 0.91)")
    assert_fails(entry, t.assign(infeasibility_certified=False), "share of infeasible instances that carry a certificate")
    assert_fails(entry, t.assign(svm_certified=False), "every SVM used is certified")
    assert_fails(entry, t.assign(svm_violation=np.where(t.feasible_opt, 1e-3, np.nan)),
                 "every feasible verdict has a W within relative violation 1e-8")


# ------------------------------------------------------------------------------------------ E6
def test_lambda_head_corruptions(quick):
    entry = quick["tf-lambda-head"]
    t = entry[2]
    lams = sorted(t.lam.unique())
    rev = t.assign(lam=t.lam.map(dict(zip(lams, lams[::-1]))))                 # lambda axis reversed
    assert_fails(entry, rev, "mean |O_i| at lambda=0.05 (about 1.2)", "mean |O_i| at lambda=2 (about 4.0)",
                 "mean |O_i| increases along the lambda grid (per-seed rise between neighbouring lambdas)")
    assert_fails(entry, t.assign(selected=1), "mean |O_i| at lambda=2 (about 4.0)")
    for lam in lams:
        assert_fails(entry, t.assign(match=np.where(t.lam == lam, False, t.match)),
                     f"share of runs with O_i = supp(s*) for every sample at lambda={lam:g}")
    # a flat curve is not "increasing": the trend test fails (it used to pass as "no significant drop")
    flat = t.assign(selected=2.0)
    assert_fails(entry, flat, "mean |O_i| increases along the lambda grid (per-seed rise between neighbouring lambdas)")
    assert_fails(entry, t.assign(max_abs_diff=t.max_abs_diff * 100), "largest median over lambda of max_t |s_t - s*_t|")


# ------------------------------------------------------------------------------------------ E5
def test_multi_token_corruptions(quick):
    entry = quick["tf-multi-token"]
    t = entry[2]
    ds = entry[1].ds
    sw = t.copy()
    sw[["err_eq", "err_svm"]] = t[["err_svm", "err_eq"]].to_numpy()
    assert_fails(entry, sw, *[f"d={d}: mean 1-corr to W_fin + R W_svm below that to the Gen-SVM direction" for d in ds],
                 "runs in which W_fin + R W_svm fits better than the Gen-SVM direction")
    sw2 = t.copy()
    sw2[["err_svm", "err_1token"]] = t[["err_1token", "err_svm"]].to_numpy()
    assert_fails(entry, sw2, *[f"d={d}: mean 1-corr to the Gen-SVM direction below that to the 1-token SVM" for d in ds],
                 "runs in which the Gen-SVM direction fits better than the 1-token SVM")
    far = t.assign(err_eq=t.err_eq + 0.3)                                       # the equivalence does not fit
    assert_fails(entry, far, "d=4: mean 1-corr(W, W_fin + R W_svm) (<= 0.07)", "d=6: mean 1-corr(W, W_fin + R W_svm) (<= 0.02)",
                 "d=10: mean 1-corr(W, W_fin + R W_svm) (<= 0.01)",
                 "median 1-corr(W, W_fin + R W_svm), runs with max masked prob < 1e-12")
    one = t.assign(err_1token=0.001)                                            # the 1-token SVM would explain W
    assert_fails(entry, one, *[f"d={d}: mean 1-corr(W, 1-token SVM) (>= 0.1)" for d in ds],
                 "d=4: mean 1-corr(W, 1-token SVM) (about 0.16, research figure)")
    assert_fails(entry, t.assign(err_1token=0.9), "d=10: mean 1-corr(W, 1-token SVM) (about 0.12, research figure)")
    assert_fails(entry, t.assign(max_masked=1e-3), "median 1-corr(W, W_fin + R W_svm), runs with max masked prob < 1e-12")
    acc10 = np.sort(t[(t.d == 10) & (t.status == "accepted")].seed.unique())
    few = t[~((t.d == 10) & t.seed.isin(acc10[::2]))]                           # half the accepted runs lost
    assert_fails(entry, few, "d=10: accepted runs")
    assert_fails(entry, t.assign(fin_certified=np.where(t.status == "accepted", False, None)), "every SVM used is certified")


CONTROL = "W_fin + R W_svm fits GD's final iterate better than random directions of its subspace fitted the same way (control)"


def multi_token_fits(ds):
    """The W_fin + R W_svm fit checks of tf-multi-token and the control that decides each of them."""
    per_d = {f"d={d}: {CONTROL}": [f"d={d}: mean 1-corr to W_fin + R W_svm below that to the Gen-SVM direction"]
             + [f"d={d}: mean 1-corr(W, W_fin + R W_svm) (<= {cap:g})" for k, cap in ((4, 0.07), (6, 0.02), (10, 0.01))
                if k == d] for d in ds}
    return {**per_d, CONTROL: ["median 1-corr(W, W_fin + R W_svm), runs with max masked prob < 1e-12",
                               "runs in which W_fin + R W_svm fits better than the Gen-SVM direction"]}


def test_multi_token_fits_are_decided_by_the_random_direction_control(quick):
    """W_fin + R W_svm is fitted to GD's own iterate: its fit checks pass only when it beats random directions
    of its subspace fitted the same way; when the control wins, the control fails and no fit check passes."""
    exp, cfg, t, _ = quick["tf-multi-token"]
    pairs = multi_token_fits(cfg.ds)
    clean = verdicts(exp, cfg, t)
    for control, fits in pairs.items():
        assert clean[control].verdict == "pass", clean[control]
        assert all(clean[f].verdict == "pass" for f in fits), [clean[f] for f in fits]
    for spoiled in (t.assign(err_rand_eq=t["err_eq"] - 0.01),          # the random directions fit better
                    t.assign(err_rand_eq=t["err_eq"]),                 # ... exactly as well
                    t.assign(gen_dim=1),                               # no run has a control
                    t.drop(columns="err_rand_eq")):                    # a table without the control
        got = verdicts(exp, cfg, spoiled)
        for control, fits in pairs.items():
            assert got[control].verdict == "fail", got[control]
            for f in fits:
                assert not got[f].passed and got[f].verdict == "inconclusive", got[f]


# ------------------------------------------------------------------------------------------ E8
def test_seq_causal_corruptions(quick):
    entry = quick["tf-seq-causal"]
    t = entry[2]
    rnd = t.assign(corr=np.random.default_rng(3).normal(0, 0.1, len(t)))
    assert_fails(entry, rnd, "full: mean corr(W, sequence SVM of the selection) at the last step",
                 "causal: mean corr(W, sequence SVM of the selection) at the last step")
    assert_fails(entry, t.assign(corr=-t["corr"]), "full: mean corr(W, sequence SVM of the selection) at the last step")
    assert_fails(entry, t.assign(max_softmax=0.5), "full: mean max softmax at the last step",
                 "causal: mean max softmax at the last step")
    assert_fails(entry, t.assign(feasible=False), "full: share of runs whose selection is SVM-feasible",
                 "causal: share of runs whose selection is SVM-feasible")
    assert_fails(entry, t.assign(svm_certified=False), "every SVM used is certified")


def test_multi_token_control_power_at_the_preset_run_count():
    """The control is an ordering (claim is the alternative): its power against the stated effect at the planning
    sigma (stored, measured on shifted seeds) is >= 0.8 at the quick and full run counts, and drawn tables confirm
    it: from the alternative they pass at the computed rate, from no ordering at most at the level."""
    import math

    from attnsvm.experiments.checks import ALPHA
    from attnsvm.experiments.lm.common import ordering_check
    from attnsvm.experiments.planning import lookup
    from attnsvm.experiments.power import ordering_power
    from attnsvm.experiments.tf.multi_token import CONTROL_EFFECT

    exp = registry()["tf-multi-token"]
    quick_n, full_n = build_config(exp, quick=True).accepted, build_config(exp).accepted
    rng = np.random.default_rng(11)
    draws = 2000
    for d in build_config(exp, quick=True).ds:
        entry = lookup(f"d={d}: {CONTROL}")
        assert entry is not None and entry["effect"] == CONTROL_EFFECT, d
        sigma = entry["sigma"]
        # a few runs per d have a one-dimensional subspace and no control: the power must hold below the preset n too
        assert all(ordering_power(n, CONTROL_EFFECT, sigma, ALPHA) >= 0.8 for n in range(quick_n - 5, quick_n + 1))
        assert ordering_power(full_n - 25, CONTROL_EFFECT, sigma, ALPHA) >= 0.8
        power = ordering_power(quick_n, CONTROL_EFFECT, sigma, ALPHA)
        kw = dict(source="test", reason="r", effect=CONTROL_EFFECT, sigma=sigma)
        alt = [ordering_check("c", v, **kw).passed for v in CONTROL_EFFECT + sigma * rng.standard_normal((draws, quick_n))]
        assert abs(np.mean(alt) - power) <= 3 * math.sqrt(max(power * (1 - power), 1e-4) / draws), (d, power)
        null = [ordering_check("c", v, **kw).passed for v in sigma * rng.standard_normal((draws, quick_n))]
        assert np.mean(null) <= ALPHA + 3 * math.sqrt(ALPHA / draws)
