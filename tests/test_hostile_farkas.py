""""infeasible" only with a proof (issue 43): Farkas multipliers must combine the rows to exactly zero.

The near-degenerate pair ``u_1 = (1, 0)``, ``u_2 = (-1, eps)``, ``w = (1, 0)``, rhs 1 is feasible for every eps > 0
(``W = [[1, 0], [2.000002 / eps, 0]]``) while the float multipliers (1/2, 1/2) leave a relative residual of eps / 2:
before the exact check, both norms called it "infeasible" at eps = 1e-9, 1e-12 and 1e-14. Every "infeasible" below is
re-verified independently (sympy's exact null space of the rows' matrices ``u_k w_k^T``).
"""

from fractions import Fraction

import numpy as np
import pytest
import sympy

from attnsvm.errors import ValidationError
from attnsvm.svm import ConstraintSet, gen_constraints, solve
from attnsvm.svm.farkas import exact_farkas, norm_lower_bound


def _exact_rows(cs, rows, differences=False):
    """The matrices ``vec(u_k w_k^T)`` of ``rows`` as exact rationals (sympy), ``(d1 d2, s)``; with
    ``differences`` the u's are the exact token differences the builder rounded."""
    cols = []
    pairs = cs.token_differences(rows) if differences else None
    for j, k in enumerate(rows):
        if pairs is not None:
            u = [Fraction(float(a)) - Fraction(float(b)) for a, b in zip(pairs[0][j], pairs[1][j])]
        else:
            u = [Fraction(float(x)) for x in cs.U[k]]
        w = [Fraction(float(x)) for x in cs.V[k]]
        cols.append([sympy.Rational(a.numerator, a.denominator) * sympy.Rational(b.numerator, b.denominator)
                     for a in u for b in w])
    return sympy.Matrix(cols).T


def _independently_infeasible(cs, sol, differences=False) -> bool:
    """An exact null vector of the certificate's rows with the Farkas signs (>= 0 on inequality rows) and
    ``rhs^T f > 0`` (sympy; the null space of the proof's rows is a line here, else the check is skipped)."""
    rows = np.asarray(sol.certificate.offending)      # every row of the proof (a multiplier may round to 0)
    null = _exact_rows(cs, rows, differences).nullspace()
    assert len(null) >= 1, "the certificate's rows are exactly independent: no Farkas multipliers on them"
    if len(null) > 1:
        return False
    v = [null[0][i] for i in range(len(rows))]
    f = sol.certificate.farkas[rows]
    if sum(float(x) * y for x, y in zip(v, f)) < 0:
        v = [-x for x in v]
    eq = cs.is_equality[rows]
    rhs = [sympy.Rational(Fraction(float(r)).numerator, Fraction(float(r)).denominator) for r in cs.rhs[rows]]
    return all(x >= 0 for x, e in zip(v, eq) if not e) and sum(r * x for r, x in zip(rhs, v)) > 0


def _pair(eps):
    return ConstraintSet(np.array([[1.0, 0.0], [-1.0, eps]]), np.array([[1.0, 0.0], [1.0, 0.0]]), np.ones(2))


@pytest.mark.parametrize("eps", [1e-6, 1e-9, 1e-12, 1e-14])
@pytest.mark.parametrize("norm", ["fro", "nuclear"])
@pytest.mark.parametrize("method", ["dense", "working_set"])
def test_the_near_degenerate_pair_is_never_called_infeasible(eps, norm, method):
    cs = _pair(eps)
    W = np.array([[1.0, 0.0], [2.000002 / eps, 0.0]])
    margins = [Fraction(1) * Fraction(W[0, 0]), -Fraction(W[0, 0]) + Fraction(eps) * Fraction(W[1, 0])]
    assert all(m >= 1 for m in margins)              # feasible, exactly: the data admit a W
    sol = solve(cs, norm, method=method)
    assert sol.status != "infeasible"
    if sol.status == "undecided":
        bound = sol.certificate.norm_lower_bound
        assert 0 < bound <= np.linalg.norm(W)        # proven and true: the feasible W is at least that large
        assert "exact" in sol.info["farkas_unproven"]
        assert sol.W is None and not sol.feasible
    else:
        assert sol.feasible and np.all(cs.evaluate(sol.W) >= 1 - 1e-8 * np.abs(sol.W).sum())


def test_exact_farkas_refuses_the_float_certificate_of_the_pair_and_proves_a_true_one():
    cs = _pair(1e-14)
    proof = exact_farkas(cs.U, cs.V, cs.rhs, cs.is_equality, np.array([0.5, 0.5]))
    assert not proof.proven and proof.farkas is None
    u = np.array([[0.3, 0.6], [-0.3, -0.6]])        # exact negatives: infeasible
    proof = exact_farkas(u, np.ones((2, 3)), np.ones(2), np.zeros(2, bool), np.array([0.5, 0.5 + 1e-12]))
    assert proof.proven and np.allclose(proof.farkas, [0.5, 0.5], rtol=0, atol=1e-15)
    # a zero row with rhs > 0 alone; with rhs 0 it proves nothing
    assert exact_farkas(np.zeros((1, 2)), np.ones((1, 2)), np.ones(1), np.zeros(1, bool), np.ones(1)).proven
    assert not exact_farkas(np.zeros((1, 2)), np.ones((1, 2)), np.zeros(1), np.zeros(1, bool), np.ones(1)).proven


def _random_set(rng, scales):
    N, d1, d2 = int(rng.integers(3, 24)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    e = rng.integers(-scales, scales + 1, size=(N, 2))
    U = rng.standard_normal((N, d1)) * 10.0 ** e[:, :1]
    V = rng.standard_normal((N, d2)) * 10.0 ** e[:, 1:]
    if rng.random() < 0.3:                           # an exact dependency: a row and its negative
        U[1] = -U[0]
        V[1] = V[0]
    return ConstraintSet(U, V, np.ones(N))


@pytest.mark.parametrize("scales,method", [(150, "dense"), (0, "dense"), (55, "working_set"), (0, "working_set")])
def test_random_sets_at_any_row_scale_are_infeasible_only_with_an_exact_proof(scales, method):
    rng = np.random.default_rng(43 + scales)
    counts = {}
    for _ in range(40):
        cs = _random_set(rng, scales)
        try:
            sol = solve(cs, "fro", method=method)
        except ValidationError:                       # a W or multipliers beyond float64's range: said so
            counts["refused"] = counts.get("refused", 0) + 1
            continue
        counts[sol.status] = counts.get(sol.status, 0) + 1
        if sol.status == "infeasible":
            assert _independently_infeasible(cs, sol)
        elif sol.status == "undecided":
            assert sol.certificate.norm_lower_bound >= 0
    assert counts.get("infeasible", 0) >= 5           # the test sees proofs, not only refusals
    assert counts.get("optimal", 0) + counts.get("optimal_inaccurate", 0) >= 5


def _cycle(seed=0, d=4):
    """Three sentences of two tokens each, the tokens p, q, r shared and one query: select p over q, q over r and
    r over p. The rows' exact differences sum to zero (infeasible); their float64 roundings need not."""
    rng = np.random.default_rng(seed)
    p, q, r = rng.standard_normal((3, d)) * [[1.0], [3.0], [0.1]]
    X = np.stack([np.stack([p, q]), np.stack([q, r]), np.stack([r, p])])
    Z = np.tile(rng.standard_normal(d), (3, 1))
    sel = np.zeros((3, 2), bool)
    sel[:, 0] = True
    return X, Z, sel


def test_a_cycle_of_token_differences_is_proven_on_the_exact_differences():
    for seed in range(6):
        X, Z, sel = _cycle(seed)
        cs = gen_constraints(X, Z, sel)
        if not np.any(cs.U.sum(axis=0) != 0):
            continue                                  # the roundings cancel: not the case this test is about
        sol = solve(cs, "fro")
        assert sol.status == "infeasible"
        assert _independently_infeasible(cs, sol, differences=True)
        # the same rounded rows typed in by hand: no tokens behind them, the exact rows are independent
        hand = ConstraintSet(cs.U, cs.V, cs.rhs)
        assert solve(hand, "fro").status != "infeasible"
        return
    pytest.fail("no seed gave rows whose float sum is nonzero")


def test_token_differences_are_given_only_for_rows_that_round_them():
    X, Z, sel = _cycle(1)
    cs = gen_constraints(X, Z, sel)
    Xa, Xb = cs.token_differences(np.arange(cs.N))
    np.testing.assert_array_equal(Xa - Xb, cs.U)
    assert ConstraintSet(cs.U, cs.V, cs.rhs).token_differences(np.arange(cs.N)) is None
    assert cs.select_rows(np.array([True, False, True])).token_differences(np.arange(2)) is not None
    scaled = cs.with_rows(cs.U * 2.0, cs.V, cs.rhs)
    assert scaled.token_differences(np.arange(cs.N)) is None


def test_the_norm_bound_is_below_every_feasible_w():
    rng = np.random.default_rng(7)
    for _ in range(30):
        N, d1, d2 = 6, 3, 2
        U, V = rng.standard_normal((N, d1)), rng.standard_normal((N, d2))
        W = rng.standard_normal((d1, d2)) * 10.0 ** rng.uniform(-3, 3)
        rhs = np.einsum("kd,de,ke->k", U, W, V) - rng.uniform(0, 1, N)     # W satisfies every row
        f = rng.uniform(0, 1, N)
        bound = norm_lower_bound(U, V, rhs, np.zeros(N, bool), f)
        assert bound <= np.linalg.norm(W)
    # a negative multiplier on an inequality row proves nothing
    assert norm_lower_bound(U, V, rhs, np.zeros(N, bool), -f) == 0.0
