"""``LayerInputs.restrict`` (real/layer.py): the part ``P P^T W B B^T`` of a head W that the layer's sentences see,
against the projectors themselves."""

import numpy as np

from attnsvm.real.layer import LayerInputs


def test_restrict_is_the_projection_on_the_layers_bases():
    """Equal to ``(P P^T) W (B B^T)`` with the projectors formed explicitly; a projection (idempotent); W's parts
    outside the bases vanish; a ``W = P M B^T`` is kept."""
    rng = np.random.default_rng(0)
    m, T, d = 5, 6, 40
    X = np.concatenate([rng.standard_normal((m, T, d)), np.ones((m, T, 1))], axis=-1)
    inp = LayerInputs.build(X, X[:, 2], np.ones((m, T), bool))
    D = d + 1
    P, B = inp.P, inp.B
    assert P.shape[1] < D and B.shape[1] < D
    W = rng.standard_normal((D, D))
    R = inp.restrict(W)
    np.testing.assert_allclose(R, (P @ P.T) @ W @ (B @ B.T), rtol=0, atol=1e-12 * np.abs(W).max())
    np.testing.assert_allclose(inp.restrict(R), R, rtol=0, atol=1e-12 * np.abs(W).max())
    np.testing.assert_allclose(inp.restrict(W - R), 0.0, atol=1e-12 * np.abs(W).max())
    Win = P @ rng.standard_normal((P.shape[1], B.shape[1])) @ B.T
    np.testing.assert_allclose(inp.restrict(Win), Win, rtol=0, atol=1e-12 * np.abs(Win).max())
