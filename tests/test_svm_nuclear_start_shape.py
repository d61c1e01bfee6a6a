"""The nuclear IPM's start and step rule on unequal reduced shapes (r1 >> r2, as real-minilm-heads' 16-sentence
Gen-SVMs: (299, 16)): the start's identity takes the same share of tr X as the Frobenius point's part, and row sets
of a few hundred rows take equal primal and dual steps; each against the rule it replaced."""

import numpy as np
import pytest

from attnsvm.generators import random_problem
from attnsvm.svm.ipm import driver as ipm_driver
from attnsvm.svm.ipm import linalg as ipm_linalg
from attnsvm.svm.ipm import problem as ipm_problem
from attnsvm.svm.constraints import att_constraints
from attnsvm.svm.frobenius import frobenius_qp
from attnsvm.svm.settings import SolverSettings


def _problem(n, T, d, seed):
    """The row-normalized Att-SVM of ``random_problem(n, T, d)`` with its Frobenius start ``(cs, lam0, W0)``."""
    pr = random_problem(n, T, d, seed=seed)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index).normalized()[0]
    res, _ = frobenius_qp(cs, SolverSettings())
    return cs, res.lam, cs.combine(res.lam)


def _solve(cs, lam0, W0):
    res = ipm_driver.nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, lam_init=lam0, W_init=W0)
    assert res.status == "optimal"
    return res


def _identity_part(X11, M0, X22):
    """``eps0`` of a start ``X = [P; Q] diag(sv) [P; Q]^T + eps0 I`` (``M0 = P diag(sv) Q^T``)."""
    P, sv, Qt = np.linalg.svd(M0, full_matrices=False)
    PQ = np.vstack([P, Qt.T])
    return ipm_linalg.blocks(X11, M0, X22) - (PQ * sv) @ PQ.T, sv


def _mean_sv_start(real):
    """The start of fd4c291: the identity's multiple ``eps0`` was the mean singular value of M0
    (``sum(sv) / min(r1, r2)``, at least ``1e-3 max(1, max |rhs|)``), the slacks floored at ``0.1 eps0``; formed
    from ``real``'s start by replacing its identity part, whatever that is."""
    def start(pb, lam_init, M_init):
        lam, X11, M0, X22, s = real(pb, lam_init, M_init)
        E, sv = _identity_part(X11, M0, X22)
        eps_old = max(sv.sum() / min(pb.r1, pb.r2), 1e-3 * max(1.0, float(np.abs(pb.rhs).max())))
        shift = eps_old - float(np.mean(np.diag(E)))
        return (lam, X11 + shift * np.eye(pb.r1), M0, X22 + shift * np.eye(pb.r2),
                np.maximum(pb.amap(M0) - pb.rhs, 0.1 * eps_old)[pb.ineq])
    return start


@pytest.mark.parametrize("shape, square", [((12, 26, 200), False), ((6, 8, 6), True)])
def test_the_starts_identity_has_the_trace_share_of_the_frobenius_point(shape, square):
    """``X = [P; Q] diag(sv) [P; Q]^T + eps0 I`` with ``eps0 (r1 + r2) = 2 sum(sv)`` (= tr of the first part), on a
    tall reduced shape and on a square one (where it is the mean singular value)."""
    cs, lam0, W0 = _problem(*shape, seed=0)
    info: dict = {}
    red = ipm_problem.reduce_problem(cs.U, cs.V, cs.rhs, cs.is_equality, info)
    pb = red.pb
    lam, X11, M0, X22, s = ipm_problem.start_point(pb, lam0[red.live], red.M_init(W0))
    X = ipm_linalg.blocks(X11, M0, X22)
    E, sv = _identity_part(X11, M0, X22)
    eps0 = float(np.mean(np.diag(E)))
    np.testing.assert_allclose(E, eps0 * np.eye(pb.r1 + pb.r2), atol=1e-12 * sv.sum())
    assert eps0 * (pb.r1 + pb.r2) == pytest.approx(2 * sv.sum(), rel=1e-12)
    assert (pb.r1 == pb.r2) == square
    if square:
        assert eps0 == pytest.approx(sv.mean(), rel=1e-12)
    assert np.all(s > 0) and np.linalg.eigvalsh(X)[0] > 0


def test_the_trace_share_start_takes_fewer_iterations_than_the_mean_singular_value_on_a_tall_shape(monkeypatch):
    """On reduced shape (200, 12) the mean singular value gave the identity (r1 + r2) / (2 r2) ~ 8.8 times the
    Frobenius point's share of tr X; the trace-share start needs fewer iterations to the same certified optimum."""
    probs = [_problem(12, 26, 200, seed=s) for s in range(3)]
    new = [_solve(*p) for p in probs]
    monkeypatch.setattr(ipm_driver, "start_point", _mean_sv_start(ipm_problem.start_point))
    old = [_solve(*p) for p in probs]
    assert new[0].info["reduced_shape"] == [200, 12]
    for a, b in zip(new, old):
        np.testing.assert_allclose(np.linalg.norm(a.W, "nuc"), np.linalg.norm(b.W, "nuc"), rtol=1e-8)
    assert sum(r.info["iterations"] for r in new) < sum(r.info["iterations"] for r in old)


def test_a_few_hundred_rows_take_fewer_iterations_under_the_default_limit_than_with_separate_steps(monkeypatch):
    """280-row Att-SVMs (reduced (30, 20)): the default ``_EQUAL_STEPS_MAX_ROWS`` gives them equal primal and dual
    steps (which ``test_the_ipm_takes_equal_steps_on_small_row_sets_only`` ties to the limit), and those take fewer
    iterations than separate steps (the limit set below their rows) to the same certified optimum; with a default
    below 280 both sides would take the same steps."""
    probs = [_problem(20, 15, 30, seed=s) for s in range(3)]
    assert probs[0][0].N == 280
    default = [_solve(*p) for p in probs]
    monkeypatch.setattr(ipm_driver, "EQUAL_STEPS_MAX_ROWS", 0)
    separate = [_solve(*p) for p in probs]
    for a, b in zip(default, separate):
        np.testing.assert_allclose(np.linalg.norm(a.W, "nuc"), np.linalg.norm(b.W, "nuc"), rtol=1e-8)
    assert sum(r.info["iterations"] for r in default) < sum(r.info["iterations"] for r in separate)
