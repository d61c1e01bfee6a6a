"""The corrector's primal step bound beyond ``_PSD_STEP_DENSE_MAX`` (svm.barrier): ``_lanczos_min`` against the
smallest eigenvalue of a known spectrum, its refusal when it does not converge, and ``_psd_step``'s dense fallback
then."""

import numpy as np
import pytest

from attnsvm.svm.ipm import linalg as ipm_linalg
from attnsvm.svm.ipm import steps as ipm_steps


def _known(rng, n, spectrum):
    """A symmetric ``(n, n)`` matrix with eigenvalues ``spectrum`` (a random orthonormal basis)."""
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (Q * spectrum) @ Q.T


@pytest.mark.parametrize("case", ["spread", "cluster", "positive"])
def test_lanczos_min_is_the_smallest_eigenvalue_to_its_tolerance(case):
    """A Ritz value is a Rayleigh quotient (>= lambda_min) and, at the residual test, within 1e-8 relative of
    lambda_min; also with a near-double smallest eigenvalue and with a positive-definite operator."""
    rng = np.random.default_rng(3)
    n = 300
    lam = np.sort(rng.uniform(-1.0, 3.0, n))
    if case == "cluster":
        lam[:3] = [-2.0, -2.0 + 1e-9, -1.999]
    elif case == "positive":
        lam = lam + 1.5 - lam[0]
    K = _known(rng, n, lam)
    K = 0.5 * (K + K.T)
    theta = ipm_steps.lanczos_min(lambda v: K @ v, rng.standard_normal(n), n)
    lmin = np.linalg.eigvalsh(K)[0]
    assert theta is not None
    assert theta >= lmin - 1e-12 * abs(lmin)
    assert theta - lmin <= 1e-8 * abs(lmin)


def test_lanczos_min_refuses_when_it_does_not_converge():
    """Too few steps for the residual test: None, not an unconverged Ritz value."""
    rng = np.random.default_rng(4)
    n = 300
    K = _known(rng, n, np.linspace(-1.0, 1.0, n))
    assert ipm_steps.lanczos_min(lambda v: K @ v, rng.standard_normal(n), 3) is None


def test_psd_step_falls_back_to_the_dense_bound_when_lanczos_refuses(monkeypatch):
    """Beyond ``_PSD_STEP_DENSE_MAX``: the Lanczos bound agrees with the dense one; when Lanczos refuses (None) the
    bound is the dense one exactly."""
    rng = np.random.default_rng(5)
    n = ipm_steps.PSD_STEP_DENSE_MAX + 40
    R = rng.standard_normal((n, n))
    X = R @ R.T / n + 0.1 * np.eye(n)
    L = ipm_linalg.chol(X)
    D = rng.standard_normal((n, n))
    D = D + D.T
    dense = min(1.0, -1.0 / ipm_steps.min_eig_congruent(L, D))
    assert dense < 1.0
    assert ipm_steps.psd_step(L, D, 1.0) == pytest.approx(dense, rel=1e-8)
    monkeypatch.setattr(ipm_steps, "lanczos_min", lambda mv, v0, k: None)
    assert ipm_steps.psd_step(L, D, 1.0) == dense
