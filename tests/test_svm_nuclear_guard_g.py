"""The dual iterate after a step (svm/ipm/newton.py ``take_step``): G is the step guard's, on grouped rows too, and the
Cholesky factor of S handed on with it is that G's."""

import numpy as np
import pytest

import attnsvm.svm.ipm.driver as b
import attnsvm.svm.barrier_grow as bg
from attnsvm.generators import planted_problem
from attnsvm.svm import att_constraints
from attnsvm.svm.nuclear import nuclear_certificate
from attnsvm.svm.settings import SolverSettings


def _case(seed=2, n=40, T=16, d=6):
    pr, sel, _ = planted_problem(n, T, d, seed=seed)
    return att_constraints(pr.X, pr.Z, sel)


class _Spy:
    def __init__(self, monkeypatch, module):
        self.made = []
        real = b.Dual
        made = self.made

        class Dual(real):
            def __init__(self, A, Bm, lam, L=None, G=None):
                super().__init__(A, Bm, lam, L, G)
                made.append((A, Bm, lam.copy(), L is not None, G is not None, self))

        monkeypatch.setattr(module, "Dual", Dual)


@pytest.mark.parametrize("grown", [True, False])
def test_the_dual_after_a_step_takes_the_guards_g_and_its_factor(monkeypatch, grown):
    cs = _case(2)
    cs_n, sc = cs.normalized()
    spy = _Spy(monkeypatch, b)          # both loops make their duals in the driver (PathState.evaluate)
    if grown:
        start = np.zeros(cs.N, bool)
        start[: cs.N // 5] = True
        res, _ = bg.nuclear_ipm_grow(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality, start, settings=SolverSettings(gap_tol=1e-9))
    else:
        res = b.nuclear_ipm(cs_n.U, cs_n.V, cs_n.rhs, cs_n.is_equality)
    assert res.status == "optimal"
    after_step = [m for m in spy.made if m[3]]
    assert len(after_step) >= 10
    grouped = 0
    for A, Bm, lam, _, given_G, du in after_step:
        assert given_G                                  # the guard's G came with its factor, grouped rows or not
        G0 = A.T @ (lam[:, None] * Bm)                  # the ungrouped sum: equal up to rounding
        np.testing.assert_allclose(du.G, G0, rtol=0, atol=1e-12 * max(1.0, np.abs(G0).max()))
        S = np.eye(G0.shape[1]) - du.G.T @ du.G        # L is the Cholesky factor of S at that very G
        np.testing.assert_allclose(du.L @ du.L.T, S, rtol=0, atol=1e-13)
        grouped += not np.array_equal(du.G, G0)        # differs in the last bits: the per-query sum was used
    if grown:
        assert grouped > 0
    W, lam = sc.W(res.W), sc.lam(res.lam, "norm")
    if grown:
        return
    cert, _ = nuclear_certificate(cs, W, lam)
    assert cert.max_violation <= 1e-9 and cert.duality_gap <= 1e-8
