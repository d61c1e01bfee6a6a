"""The public entry point for constraint sets (attnsvm.svm.solve) and validation at the boundary only."""

import numpy as np
import pytest

import attnsvm.svm as svm
from attnsvm.errors import ValidationError
from attnsvm.problem import TokenProblem


def _problem(seed=0, n=6, T=4, d=7):
    rng = np.random.default_rng(seed)
    return TokenProblem(rng.standard_normal((n, T, d)), rng.standard_normal((n, d)))


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_solve_equals_the_formulation_solvers(norm):
    p = _problem()
    sel = np.zeros(p.n, int)
    a = svm.solve(svm.att_constraints(p.X, p.Z, sel), norm)
    b = svm.solve_svm(p, sel, norm=norm)
    assert a.status == b.status == "optimal" and a.formulation == "att"
    np.testing.assert_array_equal(a.W, b.W)
    np.testing.assert_array_equal(a.duals, b.duals)


def test_solve_soft_margin_and_options():
    p = _problem(1)
    sel = np.zeros(p.n, int)
    cs = svm.att_constraints(p.X, p.Z, sel)
    a = svm.solve(cs, C=2.0)
    b = svm.solve_soft_svm(p, sel, 2.0)
    assert a.formulation == "soft" and a.slack is not None
    np.testing.assert_array_equal(a.W, b.W)
    ws = svm.solve(cs, method="working_set")
    assert ws.info["method"] == "working-set" and ws.certified
    np.testing.assert_allclose(ws.W, svm.solve(cs).W, rtol=0, atol=1e-9 * np.abs(ws.W).max())
    assert svm.solve(cs, formulation="mine").formulation == "mine"


def test_solve_validates_its_arguments():
    p = _problem()
    cs = svm.att_constraints(p.X, p.Z, np.zeros(p.n, int))
    with pytest.raises(ValidationError, match="constraints must be a ConstraintSet"):
        svm.solve(p)
    with pytest.raises(ValidationError, match="norm must be"):
        svm.solve(cs, "spectral")
    with pytest.raises(ValidationError, match="squared applies to the soft margin"):
        svm.solve(cs, squared=True)
    with pytest.raises(ValidationError, match="unknown solver option 'nope'"):
        svm.solve(cs, nope=1)
    with pytest.raises(ValidationError, match="C"):
        svm.solve(cs, C=-1.0)


def test_public_names_are_exported_with_docstrings():
    for name in svm.__all__:
        obj = getattr(svm, name)
        if callable(obj):
            assert obj.__doc__, name
    for name in ("solve", "certify", "att_constraints", "gen_constraints", "seq_constraints", "fin_constraints",
                 "prompt_constraints", "v_constraints", "lm_constraints", "soft_margin_svm"):
        assert name in svm.__all__
    # the helpers around the solvers live in two public submodules (their old names here were removed in 0.3)
    assert "prefix_scores" in svm.language.__all__ and "matrix_rank" in svm.analysis.__all__
    assert not (set(svm.analysis.__all__) | set(svm.language.__all__)) & set(svm.__all__) - {
        "lm_constraints", "soft_margin_svm"}


def test_arrays_are_validated_once_on_the_solver_path(monkeypatch):
    """solve_svm(problem): the TokenProblem holds validated float64 arrays, so no layer below converts
    them again (the builders' validation is for raw arrays at the public boundary)."""
    import attnsvm.svm.api as api
    import attnsvm.svm.constraints as constraints
    calls = []

    def counting(orig):
        def wrapper(value, name, *args, **kwargs):
            calls.append(name)
            return orig(value, name, *args, **kwargs)
        return wrapper

    for mod in (api, constraints):
        monkeypatch.setattr(mod, "as_float_array", counting(mod.as_float_array))
    p = _problem()
    O = np.zeros((p.n, p.T), bool)
    O[:, :2] = True
    svm.solve_svm(p, np.zeros(p.n, int))
    svm.solve_gen_svm(p, O)
    assert calls == []
    probs = np.full((p.n, p.T), 0.25)
    svm.svm_equivalence(p, O, probs, np.eye(p.d))
    assert calls == ["W", "probs"]
    calls.clear()
    svm.att_constraints(p.X, p.Z, np.zeros(p.n, int))        # the public builder validates its raw input once
    assert calls == ["X", "Z"]


def test_public_boundary_messages_are_unchanged():
    p = _problem()
    with pytest.raises(ValidationError, match=r"select must"):
        svm.solve_svm(p, np.zeros(p.n + 1, int))
    valid = np.ones((p.n, p.T), bool)
    valid[0, 0] = False
    with pytest.raises(ValidationError, match=r"selected token 0 of sample 0 is padding"):
        svm.solve_svm(p, np.zeros(p.n, int), valid=valid)
    with pytest.raises(ValidationError, match="at least one token per sample"):
        svm.solve_gen_svm(p, np.zeros((p.n, p.T), bool))
    with pytest.raises(ValidationError, match="probs must be > 0"):
        svm.solve_fin(p, np.ones((p.n, p.T), bool), np.zeros((p.n, p.T)))
    with pytest.raises(ValidationError, match="keys must be finite"):
        svm.solve_p_svm(p.X * 1e300, np.eye(p.d) * 1e300, np.zeros(p.n, int))
