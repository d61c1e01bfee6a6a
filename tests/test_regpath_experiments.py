"""tf-regpath-w / tf-regpath-kq: the regularization-path theorems' checks pass on a small seeded run, and fail on
tables a plausible bug would have written (a path that does not converge, raw inner products, the radius not
applied, the wrong norm's SVM, a search that never finds the minimizer); the library's lowest-loss path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnsvm.experiments import build_config, registry
from attnsvm.generators import random_problem
from attnsvm.training.regpath import lowest_loss_path, path_loss, regularization_path

NAMES = ("tf-regpath-w", "tf-regpath-kq")
#: a small seeded run: 8 instances, the smallest and the largest radius of the quick preset
SMALL = {"instances": 8, "chunk": 8}


@pytest.fixture(scope="module")
def runs():
    out = {}
    for name in NAMES:
        exp = registry()[name]
        radii = exp.quick["radii"]
        cfg = build_config(exp, overrides={**SMALL, "radii": [radii[0], radii[-1]]})
        table = pd.concat([exp.run_task(cfg, t) for t in exp.tasks(cfg)], ignore_index=True)
        out[name] = (exp, cfg, table)
    return out


def _checks(entry, table=None) -> dict:
    exp, cfg, t = entry
    return {c.name: c for c in exp.checks(cfg, t if table is None else table)}


def _one(checks: dict, part: str):
    got = [c for n, c in checks.items() if part in n]
    assert len(got) == 1, (part, sorted(checks))
    return got[0]


@pytest.mark.parametrize("name", NAMES)
def test_small_seeded_run_passes_every_check(runs, name):
    checks = _checks(runs[name])
    assert len(checks) == 9
    for c in checks.values():
        # statistical checks may lack power at 8 instances (inconclusive); none may fail
        assert c.verdict in ("pass", "inconclusive"), (c.name, c.verdict, c.value, c.threshold)
        if c.power is None:
            assert c.verdict == "pass", (c.name, c.verdict)
    assert all(c.source.startswith(("arXiv 2308.16898", "attnsvm")) for c in checks.values())
    assert {c.claim_is for c in checks.values()} >= {"null", "alternative", "exact"}


@pytest.mark.parametrize("name", NAMES)
def test_a_path_that_does_not_converge_fails(runs, name):
    """Every radius holds the smallest radius's measurements (a path stuck at its start)."""
    exp, cfg, t = runs[name]
    bad = t.copy()
    first = bad[bad.R == bad.R.min()].set_index("seed")
    for col in ("corr_fro", "corr_nuc"):
        bad[col] = bad.seed.map(first[col]).to_numpy()
    checks = _checks(runs[name], bad)
    assert _one(checks, "mean corr(").verdict == "fail"
    rise = _one(checks, "rises from the smallest")
    assert rise.verdict != "pass" and rise.value == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_raw_inner_products_fail_the_integrity_partners(runs, name):
    exp, cfg, t = runs[name]
    bad = t.copy()
    bad[["corr_fro", "corr_nuc"]] *= 5.0
    checks = _checks(runs[name], bad)
    partners = [c for n, c in checks.items() if "lies in [-1, 1]" in n]
    assert len(partners) == 2 and all(c.verdict == "fail" for c in partners)


@pytest.mark.parametrize("name", NAMES)
def test_the_radius_not_applied_fails_the_boundary_check(runs, name):
    exp, cfg, t = runs[name]
    bad = t.copy()
    bad.loc[bad.R == bad.R.max(), "budget"] *= 1.5
    assert _one(_checks(runs[name], bad), "the path lies on the ball's boundary").verdict == "fail"


@pytest.mark.parametrize("name", NAMES)
def test_the_other_norms_svm_fails(runs, name):
    """The correlations with the two SVMs swapped (the path compared with the wrong norm's Att-SVM)."""
    exp, cfg, t = runs[name]
    bad = t.copy()
    bad[["corr_fro", "corr_nuc"]] = t[["corr_nuc", "corr_fro"]].to_numpy()
    checks = _checks(runs[name], bad)
    assert _one(checks, "mean corr(").verdict == "fail"
    gap = _one(checks, "correlates more with")
    assert gap.value < 0 and gap.verdict != "pass"


@pytest.mark.parametrize("name", NAMES)
def test_a_search_that_misses_the_minimizer_fails(runs, name):
    """The path's loss above the SVM direction's in every instance: the search found no minimizer."""
    exp, cfg, t = runs[name]
    bad = t.copy()
    bad["loss"] = bad["svm_loss"] + 1e-3
    checks = _checks(runs[name], bad)
    assert _one(checks, "share of instances whose path point").verdict == "fail"
    assert _one(checks, "mean corr(").verdict == "fail"     # no instance left: nothing measured


def test_lowest_loss_path_keeps_the_lowest_chain_and_stays_in_the_ball():
    probs = [random_problem(3, 4, 5, s) for s in range(3)]
    path, chain = lowest_loss_path(probs, [2.0, 8.0], "W", restarts=4, steps_per_radius=60, seed=3)
    assert path.W.shape == (3, 2, 5, 5) and chain.shape == (3, 2)
    assert np.all(path.norm <= np.array([2.0, 8.0]) * (1 + 1e-12))
    # the kept point is no worse than a single warm-started chain (chain 0 of the first radius starts at zero)
    single = regularization_path(probs, [2.0, 8.0], "W", steps_per_radius=60)
    assert np.all(path.loss[:, 0] <= single.loss[:, 0] + 1e-12)
    # the reported loss is the loss at the kept point
    assert np.allclose(path_loss(probs, path.W[:, 1]), path.loss[:, 1], rtol=0, atol=1e-14)
    again, chain2 = lowest_loss_path(probs, [2.0, 8.0], "W", restarts=4, steps_per_radius=60, seed=3)
    assert np.array_equal(again.W, path.W) and np.array_equal(chain, chain2)   # seeded


def test_path_loss_rejects_bad_points():
    from attnsvm.errors import ValidationError

    p = random_problem(3, 4, 5, 0)
    with pytest.raises(ValidationError, match="W must be a finite array"):
        path_loss([p], np.full((1, 5, 5), np.nan))
    with pytest.raises(ValidationError, match="W must be a finite array"):
        path_loss([p, p], np.zeros((1, 5, 5)))
    with pytest.raises(ValidationError, match="restarts"):
        lowest_loss_path(p, [1.0], restarts=0)
    with pytest.raises(ValidationError, match="increasing"):
        lowest_loss_path(p, [2.0, 1.0])
    with pytest.raises(ValidationError, match="param"):
        lowest_loss_path(p, [1.0], param="p")


def test_kq_path_step_is_a_fraction_of_the_factors_scale():
    """(K, Q) at a large radius: the step lr * sqrt(R) keeps the chain near its start after one step (a step of lr * R,
    the factors' scale times sqrt(R), throws it across the ball from R = 1 / lr^2 on)."""
    p = random_problem(3, 4, 5, 1)
    R = 400.0
    g = np.random.default_rng(0)
    K, Q = g.standard_normal((2, 5, 5))
    K *= np.sqrt(R) / np.linalg.norm(K)
    Q *= np.sqrt(R) / np.linalg.norm(Q)
    one = regularization_path(p, [R], "KQ", steps_per_radius=1, lr=0.1, init=(K, Q))
    moved = np.linalg.norm(one.K[0, 0] - K) / np.linalg.norm(K)
    assert moved <= 0.1 + 1e-9, moved
