"""The solver pipeline: one row scaling, options per method checked before work, one result builder,
the public names (the aliases removed in 0.3 are gone), and the hand-built ConstraintSet's remaining bad cases."""

import warnings

import numpy as np
import pytest

import attnsvm
import attnsvm.svm as svm
from attnsvm.errors import ValidationError
from attnsvm.svm import ConstraintSet, att_constraints, solve
from attnsvm.svm import dispatch
from attnsvm.svm.options import (FrobeniusOptions, FrobeniusWSOptions, NuclearOptions, NuclearWSOptions, SoftOptions,
                                 VectorOptions)
from attnsvm.svm.result import build_solution, fro_certificate, support_mask
from attnsvm.svm.reductions import RowScaling

rng = np.random.default_rng(27)


def _mixed_scale_set(N=12, d1=5, d2=4, spread=60.0):
    """Rows with sizes 10^-spread .. 10^spread and right-hand sides of mixed sizes (some zero, some equalities)."""
    U = rng.standard_normal((N, d1)) * 10.0 ** rng.uniform(-spread, spread, (N, 1))
    V = rng.standard_normal((N, d2)) * 10.0 ** rng.uniform(-spread, spread, (N, 1))
    rhs = rng.uniform(0.5, 2.0, N) * 10.0 ** rng.uniform(-5, 5, N)
    rhs[:2] = 0.0
    eq = np.zeros(N, bool)
    eq[2] = True
    return ConstraintSet(U, V, rhs, eq)


# ------------------------------------------------------------------ one row scaling
@pytest.mark.parametrize("how", ["unit_rows", "row_norms", "uniform"])
def test_scaling_apply_and_invert_are_exact_inverses(how):
    cs = _mixed_scale_set(spread=60.0 if how != "uniform" else 3.0)
    if how == "unit_rows":
        sc = RowScaling.unit_rows(cs.U, cs.V, cs.rhs)
    elif how == "row_norms":
        sc = RowScaling.row_norms(np.linalg.norm(cs.U, axis=1), np.linalg.norm(cs.V, axis=1))
    else:
        sc = RowScaling.uniform(cs.U, cs.V)
    cs_s = sc.apply(cs)
    # the scaled rows are the rows times exact powers of two, labels untouched
    assert np.array_equal(np.ldexp(cs_s.U, sc.a[:, None]), cs.U)
    assert np.array_equal(np.ldexp(cs_s.V, sc.b[:, None]), cs.V)
    assert np.array_equal(np.ldexp(cs_s.rhs, sc.s), cs.rhs)
    assert np.array_equal(cs_s.is_equality, cs.is_equality) and cs_s.kind == cs.kind
    # a W of the scaled rows maps back to the same constraint values, exactly (powers of two commute)
    W_s = rng.standard_normal((cs.d1, cs.d2))
    assert np.array_equal(cs.evaluate(sc.W(W_s)), sc.margins(cs_s.evaluate(W_s)))
    lam = rng.standard_normal(cs.N)
    for objective in ("squared", "norm"):
        assert np.array_equal(sc.lam_to_n(sc.lam(lam, objective), objective), lam)
    assert np.array_equal(sc.farkas_to_n(sc.farkas(lam)), lam)
    # each constructor's promise
    if how == "unit_rows":
        assert np.abs(cs_s.U).max() < 1 and np.abs(cs_s.V).max() < 1 and np.abs(cs_s.rhs).max() <= 1
    elif how == "row_norms":
        assert sc.E == 0
        for M in (cs_s.U, cs_s.V):
            n = np.linalg.norm(M, axis=1)
            assert np.all((n >= 0.5) & (n < 1.0))
    else:
        assert np.array_equal(cs_s.rhs, cs.rhs) and np.all(sc.a == sc.a[0]) and np.abs(cs_s.U).max() < 1


def test_normalized_is_the_unit_rows_scaling():
    cs = _mixed_scale_set()
    cs_n, sc = cs.normalized()
    ref = RowScaling.unit_rows(cs.U, cs.V, cs.rhs)
    assert np.array_equal(sc.a, ref.a) and np.array_equal(sc.b, ref.b) and sc.E == ref.E
    assert np.array_equal(cs_n.U, ref.apply(cs).U) and np.array_equal(cs_n.rhs, ref.apply(cs).rhs)


# ------------------------------------------------------------------ one result builder
def _att(n=6, T=5, d=4, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, T, d))
    Z = r.standard_normal((n, d))
    return att_constraints(X, Z, np.zeros(n, int))


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_dense_and_working_set_share_the_certificate_and_agree(norm):
    cs = _att()
    dense = solve(cs, norm, method="dense")
    ws = solve(cs, norm, method="working_set")
    assert dense.certified and ws.certified
    assert abs(dense.norm_value - ws.norm_value) <= 1e-8 * dense.norm_value
    # the dense solution's certificate is exactly what certify() computes from its W and multipliers
    again = svm.certify(cs, dense.W, dense.duals, norm)
    for k in ("max_violation", "duality_gap", "stationarity_residual", "dual_infeasibility", "complementarity"):
        assert getattr(again, k) == getattr(dense.certificate, k), k
    # the working set's certificate (computed on its rows only) matches the full recomputation to rounding
    full = svm.certify(cs, ws.W, ws.duals, norm)
    assert abs(full.duality_gap - ws.certificate.duality_gap) <= 1e-12
    assert abs(full.max_violation - ws.certificate.max_violation) <= 1e-12


def test_fro_certificate_fails_a_W_that_is_not_the_multipliers_combination():
    cs = _att()
    sol = solve(cs, "fro", method="dense")
    cs_n, sc = cs.normalized()
    lam_n = sc.lam_to_n(sol.duals, "squared")
    W_n = sc.W_to_n(sol.W)
    m = cs_n.evaluate(W_n)
    good = fro_certificate(violation=0.0, U=cs_n.U, V=cs_n.V, b=cs_n.rhs, eq=cs_n.is_equality, lam=lam_n,
                           slack=m - cs_n.rhs, W=W_n)
    bad = fro_certificate(violation=0.0, U=cs_n.U, V=cs_n.V, b=cs_n.rhs, eq=cs_n.is_equality, lam=lam_n,
                          slack=m - cs_n.rhs, W=1.01 * W_n)
    assert good.stationarity_residual <= 1e-10 and good.duality_gap <= 1e-10
    assert bad.stationarity_residual > 5e-3 and bad.duality_gap > 5e-3


def test_build_solution_support_is_the_active_inequality_rows():
    U = np.eye(4)
    cs = ConstraintSet(U, np.ones((4, 1)), np.ones(4), np.array([False, False, False, True]))
    margins = np.array([1.0, 1.0 + 1e-9, 2.0, 1.0])       # active, active within support_tol, slack, equality
    assert support_mask(margins, cs, 1e-6).tolist() == [True, True, False, False]
    sol = build_solution(cs, status="optimal", formulation="custom", norm="fro", W=np.zeros((4, 1)), norm_value=0.0,
                         margins=margins, duals=np.zeros(4), certificate=svm.Certificate())
    assert sol.support.tolist() == [True, True, False, False] and sol.objective == 0.0


@pytest.mark.parametrize("method", ["dense", "working_set"])
def test_infeasible_results_come_from_the_one_builder(method):
    U = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    cs = ConstraintSet(U, np.ones((3, 1)), np.ones(3))
    sol = solve(cs, "fro", method=method)
    assert sol.status == "infeasible" and sol.W is None and np.all(np.isnan(sol.margins))
    f = sol.certificate.farkas
    assert abs(float(cs.rhs @ f) - 1.0) <= 1e-12 and np.linalg.norm(cs.combine(f)) <= 1e-12
    assert sorted(sol.certificate.offending) == [0, 1] and len(sol.certificate.offending_labels) == 2


# ------------------------------------------------------------------ options per method
def test_unknown_option_names_it_and_lists_the_valid_ones():
    cs = _att()
    with pytest.raises(ValidationError, match="unknown solver option 'nope' for norm='fro' .*feas_tol, support_tol, "
                       "time_limit, max_memory, method, batch"):
        solve(cs, nope=1)
    with pytest.raises(ValidationError, match="unknown solver option 'gap_tol' for norm='fro'"):
        solve(cs, gap_tol=1e-9)
    with pytest.raises(ValidationError, match="unknown solver option 'method' for the soft-margin solver"):
        solve(cs, C=1.0, method="dense")
    with pytest.raises(ValidationError, match="unknown solver option 'solver' for the v-SVM solver"):
        svm.solve_v_svm(rng.standard_normal((3, 2, 2)), np.ones(3), np.zeros(3, int), solver="ipm")


BAD_OPTIONS = [
    (FrobeniusOptions, "feas_tol", 0.0), (FrobeniusOptions, "method", "simplex"), (FrobeniusOptions, "support_tol", 1.0),
    (FrobeniusOptions, "max_memory", "lots"), (VectorOptions, "feas_tol", float("nan")),
    (NuclearOptions, "solver", "mosek"), (NuclearOptions, "gap_tol", 1e-3), (NuclearOptions, "time_limit", -1.0),
    (FrobeniusWSOptions, "batch", 0), (FrobeniusWSOptions, "per_group", 1.5), (FrobeniusWSOptions, "max_rounds", True),
    (FrobeniusWSOptions, "verbose", "yes"), (NuclearWSOptions, "gap_tol", 0.0), (NuclearWSOptions, "solver", "x"),
    (SoftOptions, "support_tol", -0.1),
]


@pytest.mark.parametrize("cls,name,value", BAD_OPTIONS)
def test_each_option_is_checked_by_its_dataclass(cls, name, value):
    with pytest.raises(ValidationError, match=name):
        cls.parse({name: value}, "x")
    assert cls.parse({}, "x") == cls()                  # the defaults are valid


def test_options_are_checked_before_any_solver_runs(monkeypatch):
    calls = []
    fake = {key: dispatch.Solver(s.name, s.options, lambda cs, **kw: calls.append(kw))
            for key, s in dispatch.SOLVERS.items()}
    monkeypatch.setattr(dispatch, "SOLVERS", fake)
    cs = _att()
    for norm, kw in (("fro", {"feas_tol": 2.0}), ("fro", {"batch": -1}), ("nuclear", {"gap_tol": 1.0}),
                     ("nuclear", {"method": "working_set", "max_rounds": 0})):
        with pytest.raises(ValidationError):
            solve(cs, norm, **kw)
    assert calls == []
    solve(cs, "nuclear", method="working_set", batch=8)   # valid: the solver gets the checked options object
    assert calls and calls[0]["formulation"] == "att"
    assert calls[0]["options"] == NuclearWSOptions(batch=8) and calls[0]["options"].settings.gap_tol == 1e-8


def test_a_solver_takes_its_options_object_or_keywords_not_both():
    from attnsvm.svm.frobenius import solve_frobenius

    cs = _att()
    a = solve_frobenius(cs, options=FrobeniusOptions(method="goldfarb-idnani"))
    b = solve_frobenius(cs, method="goldfarb-idnani")
    assert a.info["method"] == b.info["method"] == "goldfarb-idnani" and np.array_equal(a.W, b.W)
    with pytest.raises(ValidationError, match="not both"):
        solve_frobenius(cs, options=FrobeniusOptions(), tol=1e-9)
    with pytest.raises(ValidationError, match="options must be a FrobeniusOptions"):
        solve_frobenius(cs, options=NuclearOptions())
    with pytest.raises(ValidationError, match="unknown solver option 'gap_tol' for solve_frobenius"):
        solve_frobenius(cs, gap_tol=1e-9)


def test_auto_takes_the_working_set_for_its_options_and_dense_otherwise():
    cs = _att()
    assert solve(cs).info["method"] in ("pdas", "goldfarb-idnani")
    assert solve(cs, batch=4).info["method"] == "working-set"


# ------------------------------------------------------------------ public names
#: the names retired from attnsvm.svm in 0.2 and removed in 0.3 -> their public module
REMOVED = {
    **{name: "attnsvm.svm.analysis" for name in (
        "support_indices", "is_locally_optimal", "all_support_vectors", "enumerate_locally_optimal",
        "separation_delta", "matrix_rank", "row_basis")},
    **{name: "attnsvm.svm.language" for name in (
        "prefix_scores", "optimal_prefix_tokens", "prefix_problem", "prefix_softmax", "gen_svm_fit",
        "random_direction_control", "score_ties")},
}


def test_public_names_are_few_and_the_removed_ones_are_gone():
    """The names deprecated in 0.2 are no longer served by attnsvm.svm (0.3): AttributeError, ImportError; their
    public module serves each."""
    import importlib

    assert len(svm.__all__) <= 28
    for name, where in REMOVED.items():
        assert name not in svm.__all__
        with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
            getattr(svm, name)
        with pytest.raises(ImportError):
            exec(f"from attnsvm.svm import {name}", {})
        assert callable(getattr(importlib.import_module(where), name))
        assert name in importlib.import_module(where).__all__
    assert not hasattr(svm, "DEPRECATED")
    with pytest.raises(AttributeError):
        svm.no_such_name  # noqa: B018
    from attnsvm.svm import constraints
    assert not {"att_rows", "gen_rows", "fin_rows", "prompt_rows", "v_rows"} & set(constraints.__all__)


def test_the_facade_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in ("matrix_rank", "is_locally_optimal", "support_indices", "enumerate_locally_optimal"):
            assert callable(getattr(attnsvm, name))


# ------------------------------------------------------------------ ConstraintSet: the remaining bad cases
U0, V0, R0 = rng.standard_normal((6, 4)), rng.standard_normal((6, 3)), np.ones(6)
MORE_BAD_SETS = {
    "V longer": (dict(V=np.vstack([V0, V0[:1]])), "ConstraintSet.V must have N = 6 rows"),
    "rhs longer": (dict(rhs=np.ones(7)), r"ConstraintSet.rhs must have shape \(N,\) = \(6,\)"),
    "+inf in V": (dict(V=np.where(np.eye(6, 3) > 0, np.inf, V0)), "ConstraintSet.V must be finite"),
    "nan in is_equality": (dict(is_equality=np.r_[np.nan, np.zeros(5)]), "ConstraintSet.is_equality must be a boolean"),
    "text rhs": (dict(rhs=["a"] * 6), "ConstraintSet.rhs must be a numeric array"),
    "None U": (dict(U=None), "ConstraintSet.U must be a numeric array"),
    "None rhs": (dict(rhs=None), "ConstraintSet.rhs must be a numeric array"),
    "scalar rhs": (dict(rhs=1.0), r"ConstraintSet.rhs must have shape \(N,\)"),
    "string U": (dict(U="abc"), "ConstraintSet.U must be a numeric array"),
    "dict V": (dict(V={"a": 1}), "ConstraintSet.V must be a numeric array"),
    "complex V": (dict(V=V0 + 1j), "ConstraintSet.V must be real"),
    "complex is_equality": (dict(is_equality=np.zeros(6) + 0j), "ConstraintSet.is_equality must be a boolean"),
    "is_equality 2-D": (dict(is_equality=np.zeros((6, 1), bool)), "ConstraintSet.is_equality must have shape"),
    "nan label": (dict(sample=np.r_[np.nan, np.zeros(5)]), "ConstraintSet.sample must hold integer labels"),
    "bool label": (dict(query=np.zeros(6, bool)), "ConstraintSet.query must hold integer labels"),
    "label 2-D": (dict(other=np.zeros((6, 1), int)), "ConstraintSet.other must have shape"),
    "empty kind": (dict(kind=""), "ConstraintSet.kind must be a non-empty string"),
    "negative shape": (dict(shape=(-1, 2)), "ConstraintSet.shape must be a pair"),
    "float shape": (dict(shape=(6.0, 2)), "ConstraintSet.shape must be a pair"),
}


@pytest.mark.parametrize("case", list(MORE_BAD_SETS))
def test_more_bad_hand_built_sets_name_the_field(case):
    kw, match = MORE_BAD_SETS[case]
    with pytest.raises(ValidationError, match=match):
        ConstraintSet(**{"U": U0, "V": V0, "rhs": R0, **kw})
