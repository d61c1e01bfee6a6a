"""mm-regpath-nonlinear: the nonlinear-head regularization path's checks pass on a small seeded run and fail on tables
a plausible bug would have written (the linear part's tokens, a path stuck at its start, instances outside the
assumption); the path solver with a head; the first-order assumption read off the data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnsvm.experiments import build_config, registry
from attnsvm.experiments.mm.regpath_nonlinear import first_order_gap, nonlinear_instance
from attnsvm.problem import TokenProblem
from attnsvm.training.models import LambdaHead, ReLUHead
from attnsvm.training.regpath import lowest_loss_path, path_loss, regularization_path

NAME = "mm-regpath-nonlinear"


@pytest.fixture(scope="module")
def run():
    exp = registry()[NAME]
    cfg = build_config(exp, quick=True, overrides={"instances": 10, "chunk": 10})
    table = pd.concat([exp.run_task(cfg, t) for t in exp.tasks(cfg)], ignore_index=True)
    return exp, cfg, table


def _checks(run, table=None) -> dict:
    """The checks of the run (or of ``table`` judged with the run's config), by name."""
    exp, cfg, t = run
    return {c.name: c for c in exp.checks(cfg, t if table is None else table)}


def _one(checks: dict, part: str):
    """The one check whose name contains ``part``."""
    (got,) = [c for n, c in checks.items() if part in n]
    return got


def test_small_seeded_run_passes_every_check(run):
    checks = _checks(run)
    assert len(checks) == 11
    for c in checks.values():
        # statistical checks may lack power at 10 instances (inconclusive); none may fail
        assert c.verdict in ("pass", "inconclusive"), (c.name, c.verdict, c.value, c.threshold)
        if c.power is None and c.claim_is != "alternative":
            assert c.verdict == "pass", (c.name, c.verdict)
    assert all(c.source.startswith(('arXiv 2306.13596', "attnsvm")) for c in checks.values())
    assert any("nonlinear head" in c.source for c in checks.values())
    mean = _one(checks, "mean corr(p(R), p^mm(alpha_h))")
    assert mean.value >= 0.99


def test_the_linear_parts_tokens_fail(run):
    """The path compared with the p-SVM of the tokens the head's linear part picks (a head scored as if linear)."""
    exp, cfg, t = run
    assert t.differs.any()          # the seeded instances include ones where the two selections differ
    bad = t.copy()
    bad[["corr_h", "corr_lin"]] = t[["corr_lin", "corr_h"]].to_numpy()
    checks = _checks(run, bad)
    assert _one(checks, "every instance's corr(p(R)").verdict == "fail"
    assert _one(checks, "mean corr(p(R), p^mm(alpha_h))").value < 0.99
    assert _one(checks, "correlates more with p^mm(alpha_h)").value < 0


def test_a_path_stuck_at_its_start_fails(run):
    exp, cfg, t = run
    bad = t.copy()
    first = bad[bad.R == bad.R.min()].set_index("seed")
    for col in ("corr_h", "corr_lin"):
        bad[col] = bad.seed.map(first[col]).to_numpy()
    checks = _checks(run, bad)
    assert _one(checks, "every instance's corr(p(R)").verdict == "fail"
    assert _one(checks, "rises from the smallest").value == 0.0


def test_instances_outside_the_assumption_are_left_out_and_counted(run):
    exp, cfg, t = run
    bad = t.copy()
    bad["assumption"] = False
    checks = _checks(run, bad)
    assert _one(checks, "meet the theorem's assumption (a unique").verdict == "fail"
    assert _one(checks, "mean corr(p(R)").verdict == "fail"    # nothing left to measure
    assert _one(checks, "every instance's corr(p(R)").verdict == "fail"
    # one instance outside: it is dropped from the convergence checks, not counted as converged
    one = t.copy()
    s0 = int(t.seed.iloc[0])
    one.loc[one.seed == s0, "assumption"] = False
    kept, total = exp.minimizers(one)
    assert s0 not in kept and total == t.seed.nunique() - 1


def test_an_interior_point_fails_the_boundary_check(run):
    exp, cfg, t = run
    bad = t.copy()
    bad.loc[bad.R == bad.R.max(), "budget"] *= 0.9      # a chain that stalled inside the ball
    assert _one(_checks(run, bad), "the path lies on the ball's boundary").verdict == "fail"


def _direct_loss(p: TokenProblem, V: np.ndarray, W: np.ndarray) -> float:
    """Mean logistic loss of f_i = 1^T ReLU(V^T X_i^T softmax(X_i W z_i)), written out in numpy."""
    logits = np.einsum("ntd,de,ne->nt", p.X, W, p.Z)
    s = np.exp(logits - logits.max(1, keepdims=True))
    s /= s.sum(1, keepdims=True)
    a = np.einsum("nt,ntd->nd", s, p.X)
    f = np.maximum(a @ V, 0.0).sum(1)
    return float(np.mean(np.logaddexp(0.0, -p.Y * f)))


def test_path_solver_with_a_head_minimizes_the_heads_loss():
    p, V = nonlinear_instance(2, 4, 6, 6, 3)
    head = ReLUHead(V)
    W = np.random.default_rng(0).standard_normal((6, 6))
    assert np.isclose(path_loss([p], W[None], head=head)[0], _direct_loss(p, V, W), rtol=1e-12, atol=0)
    path, chain = lowest_loss_path([p], [2.0, 6.0], "W", restarts=4, steps_per_radius=80, seed=1, head=head)
    assert np.allclose(path.loss[0], [_direct_loss(p, V, w) for w in path.W[0]], rtol=1e-12, atol=0)
    assert np.all(path.loss[0] <= path_loss([p], np.zeros((1, 6, 6)), head=head)[0])   # better than W = 0
    # the head is used: the same search with a linear head (v = V 1) reaches a different loss
    lin = TokenProblem(p.X, p.Z, Y=p.Y, v=V.sum(1))
    other = regularization_path(lin, [2.0], "W", steps_per_radius=80)
    assert not np.isclose(other.loss[0, 0], path.loss[0, 0])


def test_first_order_gap_reads_the_heads_token_scores():
    """Orthonormal tokens and the lambda head: q_t = v^T x_t - 2 lam x_a^T x_t, so the gap is
    min_t v^T (x_a - x_t) - 2 lam: strict for small lam, not for large lam (a mixture beats the vertex)."""
    X = np.eye(4)[None]                                           # (1, T = 4, d = 4)
    p = TokenProblem(X, np.ones((1, 4)) / 2.0, Y=np.ones(1))
    v = np.array([1.0, 0.5, 0.2, 0.0])
    assert np.isclose(first_order_gap(p, LambdaHead(v, 0.1), np.array([0])), 0.5 - 0.2)
    assert first_order_gap(p, LambdaHead(v, 1.0), np.array([0])) < 0
    # the ReLU head with Y = +1: the best token's gap is positive
    q, V = nonlinear_instance(2, 4, 6, 6, 0)
    from attnsvm.tokens import nonlinear_scores, relu_head

    best = nonlinear_scores(q.X, q.Y, relu_head(V)).argmax(1)
    assert first_order_gap(q, ReLUHead(V), best) > 0
