"""solve_frobenius_rhs (one set of rows, R right-hand sides) against the loop of solve_frobenius, and the
random-direction control of the Gen-SVM fit against its per-projection reference."""

from dataclasses import fields, replace

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.svm.constraints import bare_set
from attnsvm.svm.frobenius import solve_frobenius, solve_frobenius_rhs
from attnsvm.svm.language import gen_svm_fit, random_direction_control


def _same(a, b):
    """Two SVMSolutions equal to the bit: status, W, multipliers, margins and certificate."""
    assert a.status == b.status and a.formulation == b.formulation
    if a.W is None or b.W is None:
        assert a.W is None and b.W is None
    else:
        np.testing.assert_array_equal(a.W, b.W)
    np.testing.assert_array_equal(a.duals, b.duals)
    np.testing.assert_array_equal(a.margins, b.margins)
    np.testing.assert_array_equal(a.constraints.rhs, b.constraints.rhs)
    for f in fields(a.certificate):
        x, y = getattr(a.certificate, f.name), getattr(b.certificate, f.name)
        assert np.array_equal(x, y, equal_nan=True) if isinstance(x, np.ndarray) else x == y or x != x and y != y
    assert a.info["method"] == b.info["method"] and a.info["iterations"] == b.info["iterations"]


def _rows(g, N, d, rank=None):
    """Rank-one rows u_k w_k^T (N, d) of random factors; ``rank``: only that many independent rows."""
    U, V = g.standard_normal((N, d)), g.standard_normal((N, d))
    if rank is not None:                          # later rows repeat earlier ones: linearly dependent rows
        U[rank:], V[rank:] = U[: N - rank], V[: N - rank]
    return U, V


@pytest.mark.parametrize("case", ["independent", "dependent", "inequality", "mixed"])
def test_rhs_path_equals_the_loop_of_solve_frobenius(case):
    g = np.random.default_rng(3)
    N, d, R = 6, 4, 7
    U, V = _rows(g, N, d, rank=4 if case == "dependent" else None)
    eq = {"independent": np.ones(N, bool), "dependent": np.ones(N, bool), "inequality": np.zeros(N, bool),
          "mixed": np.arange(N) % 2 == 0}[case]
    cs = bare_set(U, V, np.zeros(N), eq, "fin")
    # right-hand sides of existing matrices (consistent) at very different scales, one all zero
    B = np.stack([cs.evaluate(g.standard_normal((d, d))) * 10.0 ** (3 * r - 9) for r in range(R)])
    B[2] = 0.0
    B[0] *= 1e-280                              # the far ends of float64: each rhs its own scale exponent
    B[-1] *= 1e270
    if case in ("inequality", "mixed"):
        B = np.abs(B) + 0.5                      # margin rows: a positive right-hand side
    batch = solve_frobenius_rhs(cs, B, formulation="fin")
    assert len(batch) == R
    for b, sol in zip(B, batch):
        _same(sol, solve_frobenius(replace(cs, rhs=b), formulation="fin"))
        assert sol.certified
    if case == "dependent":   # the shared factor refuses dependent rows: the robust method, as solve_frobenius
        assert {s.info["method"] for s in batch} == {"goldfarb-idnani"}
    if case == "independent":
        assert {s.info["method"] for s in batch} == {"pdas"}


def test_rhs_path_infeasible_and_methods_as_solve_frobenius():
    g = np.random.default_rng(5)
    U, V = _rows(g, 5, 3)
    U[4], V[4] = U[0], V[0]                       # row 4 repeats row 0: equal rhs needed
    cs = bare_set(U, V, np.zeros(5), np.ones(5, bool), "fin")
    B = np.stack([cs.evaluate(g.standard_normal((3, 3))) for _ in range(3)])
    B[1, 4] = B[1, 0] + 1.0                       # inconsistent: no W meets both
    for method in ("auto", "goldfarb-idnani"):
        batch = solve_frobenius_rhs(cs, B, method=method)
        assert [s.status for s in batch] == ["optimal", "infeasible", "optimal"]
        for b, sol in zip(B, batch):
            _same(sol, solve_frobenius(replace(cs, rhs=b), method=method))
        assert batch[1].certificate.farkas is not None
    with pytest.raises(ValidationError, match="pdas"):   # as solve_frobenius: pdas alone cannot do it
        solve_frobenius_rhs(cs, B, method="pdas")


def test_rhs_path_edge_sizes_and_validation():
    g = np.random.default_rng(0)
    U, V = _rows(g, 3, 2)
    cs = bare_set(U, V, np.zeros(3), np.ones(3, bool), "fin")
    assert solve_frobenius_rhs(cs, np.zeros((0, 3))) == []
    empty = bare_set(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0), np.zeros(0, bool), "fin")
    for b, sol in zip(np.zeros((2, 0)), solve_frobenius_rhs(empty, np.zeros((2, 0)))):
        _same(sol, solve_frobenius(empty))
    with pytest.raises(ValidationError, match="rhs"):
        solve_frobenius_rhs(cs, np.zeros((2, 4)))
    with pytest.raises(ValidationError, match="rhs"):
        solve_frobenius_rhs(cs, np.zeros(3))
    with pytest.raises(ValidationError, match="rhs"):
        solve_frobenius_rhs(cs, np.full((1, 3), np.nan))
    B = g.standard_normal((2, 3))
    sols = solve_frobenius_rhs(cs, B)
    B[0] = 99.0                                   # the solutions keep their own copy of the right-hand sides
    assert not np.any(sols[0].constraints.rhs == 99.0) and not sols[0].constraints.rhs.flags.writeable


def _reference_control(W, gen, fin, *, seed, n_random):
    """The control as one projection per direction (the code before the shared-rows path): slow reference."""
    W = np.asarray(W, dtype=np.float64)
    ineq = gen.constraints.select_rows(~gen.constraints.is_equality)
    tie = fin.constraints
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 17]))
    rand, projs = [], []
    for _ in range(n_random):
        Wr = ineq.combine(rng.standard_normal(ineq.N))
        if tie.N:
            proj = solve_frobenius(replace(tie, rhs=tie.evaluate(Wr)), formulation="fin")
            projs.append(proj)
            Wr = Wr - proj.W if proj.feasible else np.full_like(Wr, np.nan)
        nr = float(np.sum(Wr * Wr))
        rand.append(fin.W + (float(np.sum((W - fin.W) * Wr) / nr) if nr > 0 else 0.0) * Wr)
    return np.stack(rand), projs


def test_random_direction_control_equals_its_per_projection_reference():
    from attnsvm.language import make_lm_data, markov_language

    data = make_lm_data(markov_language(6, 20, seed=1), 4, 5, seed=2)
    g = np.random.default_rng(0)
    tested = 0
    for k in range(12):
        W = 4.0 * g.standard_normal((20, 20))
        fit = gen_svm_fit(data, W, seed=k)
        if fit["status"] != "ok" or fit["fin"].constraints.N < 2:
            continue
        rand, projs, dim = random_direction_control(W, fit["gen"], fit["fin"], seed=k, n_random=16)
        ref, ref_projs = _reference_control(W, fit["gen"], fit["fin"], seed=k, n_random=16)
        np.testing.assert_array_equal(rand, ref)
        assert len(projs) == 16 and dim == fit["dim"]
        for p, q in zip(projs, ref_projs):
            _same(p, q)
            assert p.status == "optimal"
            np.testing.assert_allclose(fit["fin"].constraints.evaluate(p.W), p.constraints.rhs, atol=1e-9)
        tested += 1
    assert tested >= 3
