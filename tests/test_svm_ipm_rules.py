"""The interior-point method's control rules (svm/ipm): one definition each, read by the single solve, the growing
row set and the batch, on floats and on arrays alike; and the IPM modules use one another's public names only."""

import ast
import pathlib

import numpy as np
import pytest

from attnsvm.svm import ipm
from attnsvm.svm.settings import SolverSettings

SVM = pathlib.Path(ipm.__file__).parent.parent


def test_the_rules_give_the_same_answer_on_floats_and_on_arrays():
    gaps = np.array([1e-12, 5e-11, 2e-10, 1e-9, 3e-9, np.inf])
    viols = np.array([0.0, 2e-11, 1e-10, 5e-11, 1e-12, 1.0])
    since = np.array([0, 1, 0, 3, 4, 12])
    merits = np.array([1e-12, 5e-8, 1e-7, 2e-7, 1e-3, np.inf])
    shorter = np.array([0.0, 0.3, 0.95, 1.0, 1e-10, 0.5])
    mu_aff, mu = np.array([-1.0, 0.0, 0.3, 2.0, 1e-12, 0.7]), np.array([1.0, 1.0, 0.9, 1.0, 1e-9, 0.7])
    for k in range(6):
        assert ipm.is_optimal(gaps[k], viols[k], 1e-9, 1e-10) == ipm.is_optimal(gaps, viols, 1e-9, 1e-10)[k]
        assert ipm.stops_at_optimum(gaps[k], since[k], 1e-9) == ipm.stops_at_optimum(gaps, since, 1e-9)[k]
        assert ipm.stall_limit(float(merits[k])) == ipm.stall_limit(merits)[k]
        assert ipm.next_gamma(float(shorter[k])) == ipm.next_gamma(shorter)[k]           # bit for bit
        assert ipm.centering(float(mu_aff[k]), float(mu[k])) == ipm.centering(mu_aff, mu)[k]


@pytest.mark.parametrize(("merit", "limit"), [(0.0, 4), (9.99e-8, 4), (1e-7, 10), (1.0, 10), (np.inf, 10)])
def test_a_run_near_the_optimum_stalls_sooner(merit, limit):
    assert ipm.stall_limit(merit) == limit


def test_the_step_fraction_grows_from_090_to_099_with_the_shorter_step():
    assert ipm.GAMMA_START == 0.95
    assert ipm.next_gamma(0.0) == 0.9 and ipm.next_gamma(1.0) == pytest.approx(0.99, abs=1e-15)
    assert ipm.centering(2.0, 1.0) == 1.0 and ipm.centering(-1.0, 1.0) == 0.0 and ipm.centering(0.5, 1.0) == 0.125


def _imported_private_names(path: pathlib.Path) -> list:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnsvm"):
            out += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return out


@pytest.mark.parametrize("name", sorted(p.relative_to(SVM).as_posix() for p in (SVM / "ipm").glob("*.py"))
                         + ["barrier.py", "barrier_grow.py", "barrier_batch.py", "torch_backend.py"])
def test_the_ipm_modules_import_public_names_only(name):
    assert _imported_private_names(SVM / name) == []


def test_the_private_name_check_sees_a_private_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from attnsvm.svm.ipm.problem import _hidden, Problem\n")
    assert _imported_private_names(bad) == ["attnsvm.svm.ipm.problem._hidden"]


class _CountingBackend:
    """A Newton backend (the interface of :class:`attnsvm.svm.ipm.problem.NumpyNewton`) that counts its systems and
    the problems it saw, and solves them as the default one does."""

    name = "counting"

    def __init__(self):
        self.calls, self.problems = 0, []

    def solver(self, pb, x, du, diag):
        self.calls += 1
        if not self.problems or self.problems[-1] is not pb:
            self.problems.append(pb)
        return ipm.NUMPY_NEWTON.solver(pb, x, du, diag)


def _att_case(seed):
    from attnsvm.generators import planted_problem
    from attnsvm.svm import att_constraints

    pr, sel, _ = planted_problem(12, 6, 5, seed=seed)
    return att_constraints(pr.X, pr.queries, sel).normalized()[0]


def test_a_backend_passed_to_the_ipm_solves_every_newton_system_and_changes_nothing():
    cs = _att_case(3)
    plain = ipm.nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality)
    be = _CountingBackend()
    res = ipm.nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, backend=be)
    assert res.info["device"] == "counting" and "device" not in plain.info
    assert be.calls == res.info["iterations"] - 1 and len(be.problems) == 1      # one system a step
    assert np.array_equal(res.W, plain.W) and np.array_equal(res.lam, plain.lam)


def test_the_growing_row_set_hands_the_backend_each_changed_problem():
    from attnsvm.svm.barrier_grow import nuclear_ipm_grow

    cs = _att_case(2)
    start = np.zeros(cs.N, bool)
    start[: cs.N // 5] = True
    plain, _ = nuclear_ipm_grow(cs.U, cs.V, cs.rhs, cs.is_equality, start, settings=SolverSettings(gap_tol=1e-9))
    be = _CountingBackend()
    res, _ = nuclear_ipm_grow(cs.U, cs.V, cs.rhs, cs.is_equality, start, settings=SolverSettings(gap_tol=1e-9),
                              backend=be)
    assert sum(k > 0 for k in res.info["joined"]) >= 1                          # rows joined: the problem changed
    assert len(be.problems) >= 2 and be.calls > 0
    assert np.array_equal(res.W, plain.W) and np.array_equal(res.lam, plain.lam)


def test_the_former_module_still_serves_its_public_names():
    from attnsvm.svm import barrier

    for name in barrier.__all__:
        assert getattr(barrier, name) is getattr(ipm, name)
    assert {"nuclear_ipm", "IPMResult", "singular_values", "spectral_norm", "row_space_basis"} <= set(barrier.__all__)


def test_query_basis_is_a_deprecated_alias_that_still_answers():
    from attnsvm.svm import barrier

    V = np.repeat(np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]), 3, axis=0)
    with pytest.warns(DeprecationWarning, match="query_basis"):
        B = barrier.query_basis(V)
    assert B.shape == (3, 2) and np.allclose(B.T @ B, np.eye(2)) and np.allclose(V - V @ B @ B.T, 0.0)
    assert not hasattr(ipm, "query_basis")
