"""The max-margin (prompt attention) experiments: quick presets and their building blocks."""

import numpy as np
import pytest

from attnsvm.experiments import build_config, registry
from attnsvm.experiments.mm.common import engine_train, notebook_float32, p_svm
from attnsvm.experiments.mm.multi_input import E2_APPENDIX, lemma_l2_max
from attnsvm.training.paths import joint_path_2d, prompt_path_2d, split_loss
from attnsvm.generators import mm_joint, mm_multi_input, mm_single_input
from attnsvm.metrics import correlation

MM_NAMES = ["mm-single-input", "mm-multi-input", "mm-joint", "mm-loss-functions", "mm-regularization-path",
            "mm-regpath-nonlinear"]


def test_registered():
    reg = registry()
    for name in MM_NAMES:
        assert name in reg
        exp = reg[name]
        assert exp.title and exp.paper
        build_config(exp)  # defaults validate
        build_config(exp, quick=True)


# The quick presets' verdicts (every non-finding check passes, each check can fail) are tested in
# tests/test_checks_mm.py, which runs each preset once.


def test_split_loss_matches_naive_and_keeps_precision():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 3, 4)) * 3
    G = rng.standard_normal((5, 3, 4))
    for loss, naive in (("logistic", lambda u: np.logaddexp(0, -u)), ("exponential", lambda u: np.exp(-u)),
                        ("correlation", lambda u: -u)):
        s = np.exp(A - A.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ref = naive((s * G).sum(-1)).mean(-1)
        base, exc = split_loss(A, G, loss)
        np.testing.assert_allclose(base + exc, ref, rtol=1e-12, atol=1e-14)
    # deep saturation: the naive total rounds to the hard-selection loss, the excess does not
    A = np.array([[[80.0, 0.0, 5.0]]])
    G = np.array([[[1.0, 0.0, 0.5]]])
    base, exc = split_loss(A, G)
    assert base[0] == np.logaddexp(0, -1.0)
    delta = np.exp(-80.0) * 1.0 + np.exp(-75.0) * 0.5
    assert exc[0] == pytest.approx(delta / (1 + np.e), rel=1e-6)


def test_prompt_path_reaches_pmm_and_respects_cone():
    prob = mm_multi_input()
    pmm = p_svm(prob, np.zeros(3, dtype=np.int64)).p
    P, _ = prompt_path_2d(prob, [2.0, 20.0])
    c = correlation(P, pmm)
    assert c[0] == pytest.approx(0.9747, abs=5e-4)
    assert c[1] > 0.999998
    assert np.allclose(np.linalg.norm(P, axis=1), [2.0, 20.0])
    loc = mm_single_input("local")
    P, _ = prompt_path_2d(loc, [40.0], cone=(np.array([1.0, 0.0, 0.0]), np.deg2rad(5)))
    assert correlation(P[0], [1.0, 0.0, 0.0]) > 0.99999


def test_joint_path_relaxed_goes_to_prelax():
    prob = mm_joint("relaxed")
    V, P, _ = joint_path_2d(prob, [(40.0, 10.0)], grid=120)
    assert abs(P[0, 1] / P[0, 0]) < 1e-4
    assert correlation(V[0], [0.0, 1.0]) > 0.999


def test_joint_path_resolves_the_flat_p_angle():
    """At r = R = 40 the log-loss is flat in the p angle to ~1e-11; the exact refinement makes the
    answer independent of the start grid (Nelder-Mead alone moved the slope by 3e-4 between grids)."""
    prob = mm_joint("tight")
    s = [joint_path_2d(prob, [(40.0, 40.0)], grid=g)[1][0] for g in (90, 120)]
    slopes = [p[1] / p[0] for p in s]
    assert abs(slopes[0] - slopes[1]) < 1e-7
    assert 0.209 < slopes[0] < 0.25  # between the r = R = 5 value and p^mm's slope


def test_split_loss_keeps_precision_for_large_scores():
    """sigmoid(-gamma) for gamma ~ 40 keeps its relative precision (tanh form rounded it to 0)."""
    A = np.array([[[30.0, 0.0]]])
    G = np.array([[[40.0, 0.0]]])
    base, exc = split_loss(A, G)
    delta = np.exp(-30.0) * 40.0 / (1 + np.exp(-30.0))
    assert exc[0] == pytest.approx(np.exp(-40.0) * delta, rel=1e-6)


def test_positive_margin_cone_of_the_local_data():
    """E1 local data: the support token 2 stays the strongest competitor within atan(0.1) of the local ray."""
    from attnsvm.training.paths import positive_margin_half_angle

    loc = mm_single_input("local")
    pl = p_svm(loc, [1]).p
    assert positive_margin_half_angle(loc, [1], pl) == pytest.approx(np.arctan(0.1), abs=1e-12)


def test_float32_replay_matches_engine_before_saturation():
    prob = mm_multi_input()
    f32 = notebook_float32(prob, np.zeros(3), steps=30, lr=1.0, eps=1e-12, optimizer="gd")
    res = engine_train(prob, np.zeros((1, 3)), steps=30, lr=1.0, optimizer="gd", eps=0.0, checkpoints=[0, 10, 30])
    np.testing.assert_allclose(f32["p"][[0, 10, 30]], res.p[0], atol=2e-5)
    # the spec's float32 fact at iteration 200 (fact 8, GD)
    f32 = notebook_float32(prob, np.zeros(3), steps=199, lr=1.0, eps=1e-12, optimizer="gd")
    assert np.linalg.norm(f32["p"][199]) == pytest.approx(3.85, abs=0.01)


def test_lemma_l2_negative_on_random_instances():
    mx, uncertified = lemma_l2_max(40, seed=3)
    assert mx < 0 and uncertified == 0


def test_checks_can_fail_on_wrong_results(tmp_path):
    """A check is a measurement: corrupt the stored SVM solution and the fact checks fail."""
    exp = registry()["mm-joint"]
    cfg = build_config(exp, quick=True)
    table = exp.run_task(cfg, exp.tasks(cfg)[0])
    bad = table.copy()
    bad.loc[(bad["record"] == "svm") & (bad["quantity"] == "p_mm"), "x"] += 0.01
    names = {c.name: c.passed for c in exp.checks(cfg, bad)}
    assert not names["fact 9: E3 tight p^mm = (4/3, 1/3), 1/2||p||^2 = 17/18"]


def test_e2_appendix_matches_generator():
    # Appendix A prints 4 decimals: half a unit (5e-5) plus float64 representation
    assert np.max(np.abs(mm_multi_input().X - E2_APPENDIX)) <= 5e-5 + 1e-12
