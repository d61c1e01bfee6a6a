"""The nuclear IPM's per-iteration helpers after the fixed-cost pass (issue 28): the same arithmetic in fewer calls."""

import numpy as np
import pytest

from attnsvm.svm.ipm import linalg as ipm_linalg


def _spd(rng, n):
    F = rng.standard_normal((n, n))
    return F @ F.T + n * np.eye(n)


@pytest.mark.parametrize("order", ["C", "F"])
def test_factor_lower_adds_the_diagonal_in_every_block(order, monkeypatch):
    """``_factor_lower`` adds ``diag`` on the diagonal of each block of rows (the diagonal of block ``[i0, i1)``
    sits at columns ``i0 + k``), also when ``form`` returns a non-contiguous block: the answer is that of
    ``M + diag(diag)``, and a retry after a failed factorization sees the diagonal again."""
    monkeypatch.setattr(ipm_linalg, "SCHUR_BLOCK_ROWS", 9)
    rng = np.random.default_rng(7)
    N = 40
    M0 = _spd(rng, N) * np.outer(d := rng.uniform(0.5, 50.0, N), d)
    diag = rng.uniform(1.0, 1e3, N) * d * d
    b = rng.standard_normal(N)
    ref = np.linalg.solve(M0 + np.diag(diag), b)

    def form(I, J):
        return np.array(M0[I, J], order=order)

    x = ipm_linalg.factor_lower(form, N, diag)(b)
    np.testing.assert_allclose(x, ref, rtol=1e-9)
    real, calls = ipm_linalg.sla.lapack.dpotrf, []

    def flaky(a, **kw):
        calls.append(1)
        out, info = real(a, **kw)
        return (out, 3) if len(calls) == 1 else (out, info)   # the first one "fails" after overwriting

    monkeypatch.setattr(ipm_linalg.sla.lapack, "dpotrf", flaky)
    x = ipm_linalg.factor_lower(form, N, diag)(b)
    assert len(calls) == 2
    # the retry adds a shift of 1e-14 (relative to the unit Jacobi-scaled diagonal) on every block's diagonal
    np.testing.assert_allclose(x, ref, rtol=1e-9)
