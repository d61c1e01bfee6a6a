"""The norm registry (attnsvm.svm.norms): a toy norm, registered from this file alone, solves through
``attnsvm.svm.solve`` and is certified, reported and checked like the shipped ones.

The toy is ``||W||_s = 2 ||W||_F`` (same minimizer as the Frobenius SVM, twice its value; multipliers of the
norm objective, dual ball ``||S||_F / 2 <= 1``). What it touches: its :class:`Norm` in ``NORMS``
(attnsvm/svm/norms.py), its solver and certifier in ``SOLVERS`` / ``CERTIFIERS`` (attnsvm/svm/dispatch.py)
and the module with its solver (here, this test). A shipped norm therefore touches three files; the
certificate (result.py), the statuses (solution.py), the settings (settings.py, options.py), the memory
estimate and ``certify`` (api.py) and the soft margin (soft.py) read the registry.
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.svm import CERTIFIED_GAP, ConstraintSet, att_constraints, certify, solve
from attnsvm.svm import dispatch, norms
from attnsvm.svm.frobenius import row_sizes, solve_frobenius
from attnsvm.svm.norms import Norm, ObjectiveTerms, combine_rows
from attnsvm.svm.options import FrobeniusOptions, SolverOptions
from attnsvm.svm.result import build_solution, hard_certificate
from attnsvm.svm.settings import NORM_SETTINGS
from attnsvm.svm.solution import relative_violation, status_from

SCALE = 2.0


def _toy_objective(U, V, b, lam, lam_f, W, residual) -> ObjectiveTerms:
    nW = float(np.linalg.norm(W))
    S = combine_rows(U, V, lam)
    S_f = combine_rows(U, V, lam_f)
    grad = SCALE * W / nW if nW > 0 else W                     # the gradient of 2 ||W||_F
    den = max(float(np.linalg.norm(grad)), float(np.linalg.norm(S)), 1e-300)
    res = float(np.linalg.norm(S - grad)) / den if residual is None else residual
    dual = float(b @ lam_f) / max(1.0, float(np.linalg.norm(S_f)) / SCALE)
    return ObjectiveTerms(primal=SCALE * nW, dual=dual, stationarity=res, scale=SCALE * nW, value=SCALE * nW)


TOY = Norm(name="toy", title="twice Frobenius", value=lambda W: SCALE * float(np.linalg.norm(W)),
           dual=lambda S: float(np.linalg.norm(S)) / SCALE, multipliers="norm", objective=_toy_objective,
           certified_gap=1e-8, certified_stationarity=1e-8, support_tol=1e-6, gap_tol=None, solution_arrays=7)


@dataclass(frozen=True)
class ToyOptions(SolverOptions):
    NORM: ClassVar[str] = "toy"


def _toy_certify(cs: ConstraintSet, W, lam):
    cs_n, sc = cs.normalized()
    W_n, lam_n = sc.W_to_n(np.asarray(W, float)), sc.lam_to_n(np.asarray(lam, float), TOY.multipliers)
    m_n = cs_n.evaluate(W_n)
    viol = relative_violation(m_n, cs_n.rhs, cs_n.is_equality, row_sizes(cs_n) * float(np.linalg.norm(W_n)))
    cert, _ = hard_certificate("toy", violation=viol, U=cs_n.U, V=cs_n.V, b=cs_n.rhs, eq=cs_n.is_equality,
                               lam=lam_n, slack=m_n - cs_n.rhs, W=W_n)
    return cert, sc.margins(m_n)


def _solve_toy(cs: ConstraintSet, *, formulation: str, options: ToyOptions):
    """The toy norm's dense solver: the Frobenius W (the same minimizer), its multipliers mapped to the toy's
    norm objective (``2 W / ||W||_F = sum mu_k u_k w_k^T``: ``mu = 2 lam / ||W||_F``)."""
    fro = solve_frobenius(cs, formulation=formulation, options=FrobeniusOptions(settings=options.settings))
    assert fro.status == "optimal"
    mu = SCALE * fro.duals / fro.norm_value
    cert, margins = _toy_certify(cs, fro.W, mu)
    return build_solution(cs, status=status_from(cert, "toy"), formulation=formulation, norm="toy", W=fro.W,
                          norm_value=TOY.value(fro.W), margins=margins, duals=mu, certificate=cert,
                          support_tol=options.settings.support_tol, info={"method": "toy"})


@pytest.fixture
def toy(monkeypatch):
    """Register the toy norm for one test: the three entries a norm needs (``NORMS`` in norms.py, ``SOLVERS``
    and ``CERTIFIERS`` in dispatch.py), and nothing else."""
    monkeypatch.setitem(norms.NORMS, "toy", TOY)
    monkeypatch.setitem(dispatch.SOLVERS, ("toy", "dense"), dispatch.Solver("the toy solver", ToyOptions, _solve_toy))
    monkeypatch.setitem(dispatch.CERTIFIERS, "toy", _toy_certify)
    # files a shipped norm touches: 3 (norms.py for NORMS, dispatch.py for SOLVERS and CERTIFIERS, the module
    # of its solver, here this test); the tests below pass with nothing else changed
    return TOY


def _problem(seed=3, n=6, T=4, d=5):
    rng = np.random.default_rng(seed)
    X, Z = rng.standard_normal((n, T, d)), rng.standard_normal((n, d))
    return att_constraints(X, Z, rng.integers(0, T, n))


def test_a_toy_norm_solves_and_is_certified_through_the_registry(toy):
    cs = _problem()
    sol = solve(cs, "toy", support_tol=1e-6)
    fro = solve(cs, "fro")
    assert sol.norm == "toy" and sol.status == "optimal" and sol.certified
    assert np.array_equal(sol.W, fro.W)
    assert sol.norm_value == pytest.approx(2.0 * fro.norm_value, rel=1e-14)
    assert sol.certificate.duality_gap <= 1e-10 and sol.certificate.stationarity_residual <= 1e-10
    # the public per-norm constants and the settings follow the registry
    assert CERTIFIED_GAP["toy"] == 1e-8 and NORM_SETTINGS["toy"] == ("feas_tol", "support_tol", "time_limit",
                                                                      "max_memory")
    assert dispatch.accepted_options("toy") == NORM_SETTINGS["toy"]
    # certify() reproduces the solver's certificate through CERTIFIERS
    assert certify(cs, sol.W, sol.duals, "toy").duality_gap == sol.certificate.duality_gap


def test_a_toy_norm_is_checked_like_the_shipped_ones(toy):
    cs = _problem()
    with pytest.raises(ValidationError, match="gap_tol"):
        solve(cs, "toy", gap_tol=1e-9)                        # not a setting of a norm without gap_tol
    with pytest.raises(ValidationError, match="has no method 'working_set'"):
        solve(cs, "toy", method="working_set")
    with pytest.raises(ValidationError, match="Frobenius QP method"):
        solve(cs, "toy", method="pdas")
    with pytest.raises(ValidationError, match="has no soft margin"):
        solve(cs, "toy", C=1.0)
    # a wrong pair (W scaled) fails the toy's own stationarity test, so the status is not "optimal"
    sol = solve(cs, "toy")
    assert status_from(certify(cs, 1.01 * sol.W, sol.duals, "toy"), "toy") == "optimal_inaccurate"


def test_the_per_norm_constants_are_the_registrys_with_their_former_values():
    from attnsvm.svm import CERTIFIED_STATIONARITY
    from attnsvm.svm.api import SOLUTION_ARRAYS

    # the same keys and values as the dicts they were (and equal to them, as mappings)
    assert CERTIFIED_GAP == {"fro": 1e-8, "nuclear": 1e-6} and CERTIFIED_STATIONARITY == {"fro": 1e-8}
    assert SOLUTION_ARRAYS == {"fro": 7, "nuclear": 9}
    assert NORM_SETTINGS == {"fro": ("feas_tol", "support_tol", "time_limit", "max_memory"),
                             "nuclear": ("feas_tol", "gap_tol", "support_tol", "time_limit", "max_memory"),
                             "soft": ("support_tol", "max_memory")}
    assert CERTIFIED_GAP.get("nope", 1.0) == 1.0 and repr(CERTIFIED_GAP) == "{'fro': 1e-08, 'nuclear': 1e-06}"


def test_unknown_norms_are_refused_and_the_registry_is_unchanged_after_the_fixture():
    cs = _problem()
    assert "toy" not in norms.NORMS and "toy" not in CERTIFIED_GAP
    with pytest.raises(ValidationError, match="norm must be 'fro' or 'nuclear', got 'toy'"):
        solve(cs, "toy")
