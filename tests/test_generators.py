import numpy as np
import pytest

from attnsvm import ValidationError, random_problem
from attnsvm.generators import (GENERATORS, mm_joint, mm_loss, mm_multi_input, mm_single_input, orthonormal_problem,
                                tf_visualization1, tf_visualization2)


@pytest.mark.parametrize("rng", ["numpy", "torch"])
def test_random_problem_is_deterministic_and_unit_norm(rng):
    a, b = random_problem(6, 8, 10, seed=3, rng=rng), random_problem(6, 8, 10, seed=3, rng=rng)
    assert a == b
    assert a != random_problem(6, 8, 10, seed=4, rng=rng)
    np.testing.assert_allclose(np.linalg.norm(a.X, axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(a.Z, axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(a.v), 1.0, rtol=1e-6)
    assert set(np.unique(a.Y)) <= {-1.0, 1.0}


def test_numpy_stream_is_pinned():
    # PCG64 is identical on every platform: pin a few numbers so a change of the draw order is caught.
    p = random_problem(2, 3, 4, seed=0)
    gen = np.random.Generator(np.random.PCG64(0))
    v = gen.standard_normal(4)
    np.testing.assert_allclose(p.v, v / np.linalg.norm(v), rtol=1e-15)
    y = gen.standard_normal(2)
    np.testing.assert_array_equal(p.Y, np.where(y > 0, 1.0, -1.0))


def test_torch_stream_replays_research_code():
    import torch

    g = torch.Generator()
    g.manual_seed(7)
    v = torch.randn(5, generator=g)
    v /= torch.norm(v)
    Y = 2 * torch.ones(3) * (torch.randn(3, generator=g) > 0) - 1
    X = torch.randn((3, 4, 5), generator=g)
    X /= torch.norm(X, dim=-1, keepdim=True)
    Z = torch.randn((3, 5), generator=g)
    Z /= torch.norm(Z, dim=-1, keepdim=True)
    p = random_problem(3, 4, 5, seed=7, rng="torch")
    np.testing.assert_array_equal(p.X, X.double().numpy())
    np.testing.assert_array_equal(p.Z, Z.double().numpy())
    np.testing.assert_array_equal(p.Y, Y.double().numpy())
    np.testing.assert_array_equal(p.v, v.double().numpy())


def test_self_mode_and_bad_sizes():
    p = random_problem(3, 4, 5, mode="self")
    assert p.mode == "self" and p.query_index == 0 and p.Z is None
    for kwargs, match in [(dict(n=0, T=4, d=5), "n must"), (dict(n=2, T=1, d=5), "T must"), (dict(n=2, T=4, d=0), "d must"),
                          (dict(n=2, T=4, d=5, seed=-1), "seed"), (dict(n=2, T=4, d=5, mode="x"), "mode"),
                          (dict(n=2, T=4, d=5, rng="x"), "rng"), (dict(n=2.5, T=4, d=5), "n must")]:
        with pytest.raises(ValidationError, match=match):
            random_problem(**kwargs)


def test_visualization_instances_match_spec():
    v1, v2 = tf_visualization1(), tf_visualization2()
    assert v1.shape == (2, 3, 2) and v2.shape == (2, 5, 2)
    assert v1.optimal_tokens().index.tolist() == [0, 2]
    assert v2.optimal_tokens().index.tolist() == [0, 0]
    np.testing.assert_allclose(v2.X[0, 0], [1.0, 0.5])
    np.testing.assert_allclose(v2.X[1, 0], [1.0, -0.5])


def test_max_margin_instances_match_spec():
    g = mm_single_input("global")
    assert g.optimal_tokens().index.tolist() == [0]
    np.testing.assert_array_equal(g.X[0, 2], [0, 0, 0.9])
    np.testing.assert_array_equal(mm_single_input("local").X[0, 2], [0, 0, 0])
    m = mm_multi_input()
    # appendix A of the max-margin spec (4 decimals)
    np.testing.assert_allclose(m.X[0, 0], [0.7748, -0.2305, 1.0], atol=5e-5)
    np.testing.assert_allclose(m.X[2, 6], [-0.7134, -0.2770, 0.5], atol=5e-5)
    np.testing.assert_allclose(m.X[1, 2], [-0.9633, 1.2779, 0.5], atol=5e-5)
    assert m.optimal_tokens().index.tolist() == [0, 0, 0]
    t, r = mm_joint("tight"), mm_joint("relaxed")
    np.testing.assert_array_equal(t.X[2, 1], [0.5, 1.0])
    np.testing.assert_array_equal(r.X[2, 1], [0.5, 1.5])
    assert mm_loss(10).X[0, 1, 2] == 10.0
    for bad in (lambda: mm_single_input("x"), lambda: mm_joint("x"), lambda: mm_loss(-1)):
        with pytest.raises(ValidationError):
            bad()


def test_orthonormal_tokens():
    p = orthonormal_problem(3, 4, 8, seed=1)
    for i in range(3):
        np.testing.assert_allclose(p.X[i] @ p.X[i].T, np.eye(4), atol=1e-12)
    with pytest.raises(ValidationError, match="d >= T"):
        orthonormal_problem(2, 5, 3)


def test_every_registered_generator_runs():
    for name, (func, sized, _) in GENERATORS.items():
        p = func(2, 3, 4) if sized else func()
        assert p.n >= 1, name
