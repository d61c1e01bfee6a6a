"""The fixed-cost paths of one small solve, against their definitions: the Frobenius dual QP's active-set
method (pdas, LAPACK potrf / potrs called directly) that decides feasibility and starts the nuclear IPM."""

import numpy as np
import pytest

from attnsvm.generators import random_problem
from attnsvm.svm.constraints import att_constraints
from attnsvm.svm.qp import goldfarb_idnani, pdas


@pytest.mark.parametrize("seed", range(6))
def test_pdas_returns_the_kkt_point_of_the_dual_qp(seed):
    """``min 1/2 lam^T G lam - b^T lam, lam >= 0``: the multipliers pdas returns are dual feasible, their
    margins ``G lam`` reach ``b`` and complementarity holds, and they equal Goldfarb-Idnani's."""
    pr = random_problem(6, 8, 10, seed=seed)
    cs = att_constraints(pr.X, pr.queries, pr.optimal_tokens().index).normalized()[0]
    G, b, eq = cs.gram(), cs.rhs, cs.is_equality
    res = pdas(G, b, eq, tol=1e-10)
    assert res is not None and res.status == "optimal"
    lam, m = res.lam, G @ res.lam
    assert lam.min() >= 0 and np.min(m - b) >= -1e-9 * np.abs(b).max()
    assert np.max(np.abs(lam * (m - b))) <= 1e-9 * max(1.0, lam.max())
    ref = goldfarb_idnani(G, b, eq, tol=1e-10).lam
    np.testing.assert_allclose(lam, ref, rtol=1e-9, atol=1e-10 * np.abs(ref).max())


def test_pdas_gives_up_on_dependent_or_indefinite_free_rows():
    """No answer (None, the caller then runs Goldfarb-Idnani) when the free rows' Gram block is not
    positive definite: indefinite (potrf fails) or numerically singular (a repeated row)."""
    G = np.array([[1.0, 2.0], [2.0, 1.0]])
    assert pdas(G, np.ones(2), np.zeros(2, bool)) is None
    rng = np.random.default_rng(0)
    U = rng.standard_normal((4, 3))
    U[3] = U[2]
    G = U @ U.T
    assert pdas(G, np.ones(4), np.zeros(4, bool)) is None
