"""Every check of the real-* experiments can fail: corrupted result tables fail the matching check.

Each quick experiment runs once (module-scoped fixtures); its table passes every check that is not a
listed finding, and corrupted copies (noise, swapped columns, wrong signs, random directions instead
of the SVM, uncertified SVMs, missing comparator draws) fail the check of the claim they violate.
"""

import types

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")

from attnsvm.experiments import build_config, registry  # noqa: E402

from attnsvm.runner import run_experiment
from attnsvm.experiments.real import common as R  # noqa: E402
from attnsvm.experiments.checks import ALPHA, mark_findings  # noqa: E402
from attnsvm.metrics import correlation  # noqa: E402

#: identifiers, not measurements (kept by the noise corruption)
KEYS = {"seed", "step", "unit", "image", "token", "draw", "layer", "head", "keyword", "label"}


def _run(name, out):
    exp = registry()[name]
    cfg = build_config(exp, quick=True)
    summary = run_experiment(exp, cfg, str(out), progress=False)
    assert not summary.failed, summary.failed
    table = pd.read_parquet(out / name / "results.parquet")
    return exp, cfg, table


@pytest.fixture(scope="module")
def digits(quick_out):
    return _run("real-digits", quick_out)


@pytest.fixture(scope="module")
def embeddings(quick_out):
    pytest.importorskip("transformers")
    return _run("real-minilm-embeddings", quick_out)


@pytest.fixture(scope="module")
def heads(quick_out):
    pytest.importorskip("transformers")
    return _run("real-minilm-heads", quick_out)


def _checks(run, table=None):
    exp, cfg, real = run
    return {c.name: c for c in exp.checks(cfg, real if table is None else table)}


def _failing(run, table):
    return {name for name, c in _checks(run, table).items() if not c.passed}


def _noise(table, rng, kind):
    """Every measured number replaced by noise (uniform [0, 1] or standard normal); identifiers kept."""
    out = table.copy()
    for col in out.columns:
        if col in KEYS or not pd.api.types.is_numeric_dtype(out[col]) or pd.api.types.is_bool_dtype(out[col]):
            continue
        probability = col.startswith(("p_", "q_"))  # p-values stay p-values: uniform noise, the null's own law
        draw = rng.random(len(out)) if kind == "uniform" or probability else rng.standard_normal(len(out))
        out[col] = np.where(out[col].notna(), draw, np.nan)
    return out


def _swap(table, a, b, rows=None):
    out = table.copy()
    rows = np.ones(len(out), bool) if rows is None else rows
    out.loc[rows, [a, b]] = out.loc[rows, [b, a]].to_numpy()
    return out


def _final_mask(table, param=None):
    cur = table["kind"] == "curve"
    last = table[cur].groupby(["seed", "param"])["step"].transform("max")
    mask = pd.Series(False, index=table.index)
    mask[last.index] = table.loc[last.index, "step"] == last
    if param is not None:
        mask &= table["param"] == param
    return mask.to_numpy()


def _all_checks_pass(exp, run):
    checks = [c.to_dict() for c in exp.checks(run[1], run[2])]
    assert checks and all(c["source"] and c["threshold_reason"] for c in checks)
    marked = mark_findings(exp.name, checks, "quick")
    bad = [(c["name"], c["value"], c["threshold"]) for c in marked if not c["passed"] and not c["finding"]]
    assert not bad, bad
    # no check of the real-* experiments compares against a bare constant: each is qualitative or integrity
    assert {c["kind"] for c in checks} <= {"qualitative", "integrity"}


# ---------------------------------------------------------------- the helpers


def test_random_direction_corrs_have_the_exact_gaussian_distribution():
    from scipy.stats import ks_2samp

    rng = np.random.default_rng(0)
    W = rng.standard_normal((6, 6)) * np.arange(1, 7)  # any fixed nonzero W
    a = R.random_direction_corrs(W, 4000, np.random.default_rng(1))
    b = correlation(rng.standard_normal((4000, 6, 6)), W[None])
    assert ks_2samp(a, b).pvalue > 1e-3
    assert np.isnan(R.random_direction_corrs(None, 5, rng)).all()
    assert np.isnan(R.random_direction_corrs(np.zeros((3, 3)), 5, rng)).all()


def test_paired_check_needs_the_margin_and_the_sign_test():
    kw = dict(source="s", comparator="c", units="units")
    rng = np.random.default_rng(3)
    assert R.paired_check("x", 0.5 + 0.1 * rng.standard_normal(30), **kw).passed
    assert not R.paired_check("x", rng.standard_normal(200), **kw).passed  # noise around 0
    assert not R.paired_check("x", np.zeros(50), **kw).passed  # no difference at all
    assert not R.paired_check("x", [1.0, 1.0], **kw).passed  # zero variance: t margin 0, sign test p = 1/4
    assert not R.paired_check("x", [1.0, 1.0, np.nan], **kw).passed  # a missing unit fails ...
    c = R.paired_check("x", np.r_[np.ones(9), np.nan], allow_missing=True, **kw)  # ... unless allowed
    assert c.passed and "1 without a measurement" in c.detail
    assert c.kind == "qualitative" and c.source == "s" and "level 0.01" in c.threshold_reason


def test_sign_share_check_is_exact():
    kw = dict(source="s", comparator="c", units="heads")
    assert not R.sign_share_check("x", 6, 6, **kw).passed  # 1/64 > 0.01: six units cannot pass
    assert R.sign_share_check("x", 7, 7, **kw).passed  # 1/128
    assert R.sign_share_check("x", 11, 12, **kw).passed and not R.sign_share_check("x", 10, 12, **kw).passed
    assert not R.sign_share_check("x", 0, 0, **kw).passed


def test_random_direction_check_levels():
    own = pd.Series({0: 0.9, 1: 0.8})
    nulls = pd.DataFrame({"seed": np.repeat([0, 1], 99), "corr_random_dir": np.linspace(-0.1, 0.1, 198)})
    assert R.random_direction_check("x", own, nulls, 99, source="s").passed
    assert not R.random_direction_check("x", pd.Series({0: 0.9, 1: 0.05}), nulls, 99, source="s").passed
    assert not R.random_direction_check("x", pd.Series({0: 0.9, 1: np.nan}), nulls, 99, source="s").passed
    assert not R.random_direction_check("x", own, nulls.iloc[:150], 99, source="s").passed  # draws missing
    assert not R.random_direction_check("x", own, nulls, 50, source="s").passed  # level 1/51 > 0.01


def test_uncertified_svm_is_never_compared_with(monkeypatch):
    fake = types.SimpleNamespace(status="optimal_inaccurate", certified=False, W=np.eye(3),
                                 certificate=types.SimpleNamespace(max_violation=1e-3, duality_gap=1e-2))
    monkeypatch.setattr(R, "solve_svm", lambda *a, **k: fake)
    W, rec = R.certified_svm(None, np.zeros(2, int), "nuclear")
    assert W is None and rec == {"status": "optimal_inaccurate", "violation": 1e-3, "gap": 1e-2}
    assert np.isnan(R.corr_curve(np.ones((4, 3, 3)), W)).all()
    assert not R.certified_check("c", ["optimal", "optimal_inaccurate"]).passed
    assert not R.certified_check("c", ["optimal", "error: LinAlgError"]).passed
    assert R.certified_check("c", ["optimal", "infeasible"]).passed


# ---------------------------------------------------------------- real-digits

D_ACC = "{}: test accuracy minus uniform attention (W = 0), per test image"
D_SEL = "{}: largest attention weight per training image, last step minus initialization"
D_DIR = {"W": "W: final corr(W, Frobenius Att-SVM of its selections) above random directions in every run",
         "KQ": "KQ: final corr(KQ^T, nuclear Att-SVM of its selections) above random directions in every run"}
D_BIAS = "KQ: final corr(KQ^T, nuclear Att-SVM) minus corr(KQ^T, Frobenius Att-SVM), per run"
CERT = "every SVM compared with is certified"


def _partners(pairs) -> set[str]:
    """The names of the integrity partners (every row of the column in [-1, 1]) of ``(column, what)`` pairs."""
    return {f"{what} ({col}) lies in [-1, 1] in every row (a correlation of normalized arrays)" for col, what in pairs}


#: real-digits' and real-minilm-embeddings' integrity partners
D_PARTNERS = _partners((("corr_att_fro", "corr with the Frobenius Att-SVM"),
                        ("corr_att_nuc", "corr with the nuclear Att-SVM"),
                        ("svm_fro_nuc_corr", "corr of the two SVMs"),
                        ("corr_random_dir", "corr of a random direction")))


def test_digits_real_table_passes(digits):
    _all_checks_pass(digits[0], digits)
    names = set(_checks(digits))
    assert names == {D_ACC.format("W"), D_ACC.format("KQ"), D_SEL.format("W"), D_SEL.format("KQ"),
                     D_DIR["W"], D_DIR["KQ"], D_BIAS, CERT} | D_PARTNERS


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_digits_noise_fails_every_claim(digits, kind):
    noisy = _noise(digits[2], np.random.default_rng(11), kind)
    qual = {n for n, c in _checks(digits).items() if c.kind == "qualitative"}
    assert qual <= _failing(digits, noisy)


def test_digits_swapped_and_wrong_columns_fail(digits):
    t = digits[2]
    assert {D_ACC.format("W"), D_ACC.format("KQ")} <= _failing(digits, _swap(t, "correct_final", "correct_uniform"))
    assert {D_SEL.format("W"), D_SEL.format("KQ")} <= _failing(digits, _swap(t, "maxatt_final", "maxatt_init"))
    kq = (t["param"] == "KQ").to_numpy()
    assert D_BIAS in _failing(digits, _swap(t, "corr_att_nuc", "corr_att_fro", kq))
    flipped = t.copy()
    for col in ("corr_att_fro", "corr_att_nuc"):
        flipped[col] = -flipped[col]
    assert {D_DIR["W"], D_DIR["KQ"]} <= _failing(digits, flipped)
    # an accuracy that did not move from uniform attention
    same = t.copy()
    same["correct_final"] = same["correct_uniform"]
    assert {D_ACC.format("W"), D_ACC.format("KQ")} <= _failing(digits, same)


def test_digits_random_direction_instead_of_the_svm_fails(digits):
    exp, cfg, t = digits
    rng = np.random.default_rng(5)
    for param, col in (("W", "corr_att_fro"), ("KQ", "corr_att_nuc")):
        bad = t.copy()
        rows = _final_mask(t, param)
        d = int(t.loc[rows].shape[0])
        bad.loc[rows, col] = R.random_direction_corrs(np.ones((20, 20)), d, rng)
        assert D_DIR[param] in _failing(digits, bad)
        gone = t.copy()
        gone.loc[rows, col] = np.nan  # no certified SVM: no comparison
        assert D_DIR[param] in _failing(digits, gone)
    few = t[~((t["kind"] == "null") & (t["draw"] >= 50))]  # too few random draws for level 0.01
    assert {D_DIR["W"], D_DIR["KQ"]} <= _failing(digits, few)


def test_digits_uncertified_svm_fails(digits):
    t = digits[2].copy()
    row = np.flatnonzero(_final_mask(t, "KQ"))[0]
    t.loc[row, "att_nuc_status"] = "optimal_inaccurate"
    assert CERT in _failing(digits, t)


# ---------------------------------------------------------------- real-minilm-embeddings

E_KW = "{}: argmax attention on the sentiment word, last step minus initialization, per test sentence"


def test_embeddings_real_table_passes(embeddings):
    _all_checks_pass(embeddings[0], embeddings)
    assert set(_checks(embeddings)) == {E_KW.format("W"), E_KW.format("KQ"), D_DIR["W"], D_DIR["KQ"], CERT} | D_PARTNERS


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_embeddings_noise_fails_every_claim(embeddings, kind):
    noisy = _noise(embeddings[2], np.random.default_rng(12), kind)
    qual = {n for n, c in _checks(embeddings).items() if c.kind == "qualitative"}
    assert qual <= _failing(embeddings, noisy)


def test_embeddings_corruptions_fail(embeddings):
    t = embeddings[2]
    assert {E_KW.format("W"), E_KW.format("KQ")} <= _failing(embeddings, _swap(t, "keyword_final", "keyword_init"))
    flipped = t.copy()
    flipped["corr_att_fro"], flipped["corr_att_nuc"] = -t["corr_att_fro"], -t["corr_att_nuc"]
    assert {D_DIR["W"], D_DIR["KQ"]} <= _failing(embeddings, flipped)
    rng = np.random.default_rng(6)
    for param, col in (("W", "corr_att_fro"), ("KQ", "corr_att_nuc")):
        bad = t.copy()
        rows = _final_mask(t, param)
        bad.loc[rows, col] = R.random_direction_corrs(np.ones((384, 384)), int(rows.sum()), rng)
        assert D_DIR[param] in _failing(embeddings, bad)
    unc = t.copy()
    unc.loc[np.flatnonzero(_final_mask(t, "W"))[0], "att_fro_status"] = "error: LinAlgError"
    assert CERT in _failing(embeddings, unc)


# ---------------------------------------------------------------- real-minilm-heads

_SECONDARY = "secondary (any bilinear head passes it): "
H_SHARE = (_SECONDARY + "share of heads whose corr_restricted with their own selections' SVM beats the random "
           "selections' (a head without both SVMs counts as not)")
H_MEAN = _SECONDARY + "corr_restricted(W_h, nuclear Gen-SVM of its selections) minus random-selection baseline, per head"
H_RAW = _SECONDARY + "corr(W_h, nuclear Gen-SVM of its selections) minus random-selection baseline, per head"
H_CERT = "every SVM compared with is certified (heads and baselines)"
H_ANY = ("heads beyond their spectrum null (Benjamini-Yekutieli over the probed heads at FDR 0.05): at least one "
         "rejects the global null that no head agrees with its selections' SVM more than a bilinear head of its spectrum")
H_MAJ = ("share of heads beyond their spectrum null (the claim 'the heads are max-margin token selectors' read as: most "
         "heads agree with their SVM beyond a same-spectrum bilinear head)")
H_PARTNERS = _partners((("corr", "corr(W_h, nuclear Gen-SVM of its selections)"),
                        ("corr_restricted", "corr_restricted(W_h, nuclear Gen-SVM of its selections)"),
                        ("corr_random", "corr(W_h, nuclear Gen-SVM of random selections)"),
                        ("corr_random_restricted", "corr_restricted(W_h, nuclear Gen-SVM of random selections)")))
#: the partners that recompute corr and corr_restricted from the parts stored beside them
H_PARTNERS |= {f"{what} ({col}) equals <A, B> / (||A|| ||B||) of its stored parts in every row" for col, what in
               (("corr", "corr(W_h, nuclear Gen-SVM of its selections)"),
                ("corr_restricted", "corr_restricted(W_h, nuclear Gen-SVM of its selections)"))}


def test_heads_real_table_passes(heads):
    _all_checks_pass(heads[0], heads)
    names = set(_checks(heads))
    assert {H_SHARE, H_MEAN, H_RAW, H_CERT} | H_PARTNERS <= names
    assert names - {H_SHARE, H_MEAN, H_RAW, H_CERT} - H_PARTNERS == ({H_ANY, H_MAJ} if "p_upper" in heads[2].columns
                                                                     else set())


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_heads_noise_fails_every_claim(heads, kind):
    noisy = _noise(heads[2], np.random.default_rng(13), kind)
    verdicts = {H_ANY, H_MAJ} if "p_upper" in noisy.columns else set()
    assert {H_SHARE, H_MEAN, H_RAW} | verdicts <= _failing(heads, noisy)


def test_heads_verdict_checks_fail_when_no_head_stands_out(heads):
    """The verdict checks: heads whose p-values are uniform (no head beyond its null) fail both."""
    t = heads[2].copy()
    if "p_upper" not in t.columns:
        pytest.skip("this run has no null heads (null_draws = 0)")
    rng = np.random.default_rng(21)
    t["p_upper"] = rng.uniform(0.2, 1.0, len(t))
    t["p_lower"] = 1.0 - t["p_upper"]
    assert {H_ANY, H_MAJ} <= _failing(heads, t)
    half = t.copy()  # one head far beyond its null: the global null falls, a majority does not follow
    half.loc[half.index[0], "p_upper"] = 1e-12
    failing = _failing(heads, half)
    assert H_MAJ in failing and H_ANY not in failing


def test_heads_swapped_baseline_fails_whatever_the_stored_advantage(heads):
    t = _swap(_swap(heads[2], "corr_restricted", "corr_random_restricted"), "corr", "corr_random")
    t["advantage"] = 1.0  # the stored column does not decide: the checks recompute the difference
    assert {H_SHARE, H_MEAN, H_RAW} <= _failing(heads, t)
    same = heads[2].copy()
    same["corr_random_restricted"] = same["corr_restricted"]
    assert {H_SHARE, H_MEAN} <= _failing(heads, same)


def test_heads_infeasible_or_uncertified_svms(heads):
    t = heads[2].copy()
    t["corr_restricted"] = np.nan  # no SVM: no head counts as closer, no mean to test
    assert {H_SHARE, H_MEAN} <= _failing(heads, t)
    u = heads[2].copy()
    u.loc[u.index[0], "random_status"] = "optimal_inaccurate"
    assert H_CERT in _failing(heads, u)
    # one infeasible head (certified by Farkas) is allowed by the integrity check but counts as not closer
    v = heads[2].copy()
    v.loc[v.index[0], ["svm_status", "corr_restricted", "corr"]] = ["infeasible", np.nan, np.nan]
    c = _checks(heads, v)
    assert c[H_CERT].passed and c[H_SHARE].value <= (len(v) - 1) / len(v)


def test_alpha_is_the_package_level():
    assert ALPHA == 0.01
