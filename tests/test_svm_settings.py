"""The solver settings (attnsvm.svm.settings): every method of a norm accepts the same settings at every
size N, each setting is checked once per solve, the removed ``tol`` is refused naming ``feas_tol``, and
the nuclear solvers' Frobenius start, feasibility phase and interior-point method receive the caller's
``feas_tol``."""

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.svm import ConstraintSet, att_constraints, dispatch, solve, solve_svm_batch
from attnsvm.svm import nuclear as nuclear_mod
from attnsvm.svm import settings as settings_mod
from attnsvm.svm import working_set as ws_mod

#: a value of every setting of each norm, none of them a default
SETTINGS = {"fro": dict(feas_tol=3e-10, support_tol=2e-6, time_limit=50.0, max_memory="4G"),
            "nuclear": dict(feas_tol=3e-10, gap_tol=2e-9, support_tol=2e-5, time_limit=50.0, max_memory="4G")}
#: the methods of each norm (``method`` of solve)
METHODS = {"fro": ("auto", "dense", "working_set", "pdas", "goldfarb-idnani"),
           "nuclear": ("auto", "dense", "working_set")}


def _rows(N: int, d: int = 3) -> ConstraintSet:
    """N random rank-one rows (cheap at N = 20000: no solve runs on them)."""
    rng = np.random.default_rng(N)
    return ConstraintSet(rng.standard_normal((N, d)), rng.standard_normal((N, d)), np.ones(N))


@pytest.fixture
def received(monkeypatch):
    """Replace every solver by one that records the options object it gets (no solve runs)."""
    calls = []
    fake = {key: dispatch.Solver(s.name, s.options, lambda cs, **kw: calls.append(kw["options"]))
            for key, s in dispatch.SOLVERS.items()}
    monkeypatch.setattr(dispatch, "SOLVERS", fake)
    return calls


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_every_method_accepts_the_same_settings_at_every_size(norm, received):
    seen = set()
    for N in (10, 900, 20000):
        cs = _rows(N)
        for method in METHODS[norm]:
            received.clear()
            solve(cs, norm, method=method, **SETTINGS[norm])
            (opts,) = received
            got = {name: getattr(opts.settings, name) for name in SETTINGS[norm]}
            assert got == dict(SETTINGS[norm], max_memory=4 * 2**30), (N, method)      # max_memory held in bytes
            seen.add(type(opts).__name__)
            # and a bad value of each is refused, naming the setting and its range, whatever N and method
            for name, bad in (("feas_tol", 1.0), ("support_tol", -1e-3), ("time_limit", 0.0)):
                with pytest.raises(ValidationError, match=f"{name} must be .*(>|<)"):
                    solve(cs, norm, method=method, **dict(SETTINGS[norm], **{name: bad}))
    assert len(seen) == 2                        # a dense and a working-set method each received them


def test_a_setting_a_norm_does_not_have_is_refused_at_every_size(received):
    for N in (10, 900, 20000):
        with pytest.raises(ValidationError, match="unknown solver option 'gap_tol' for norm='fro'"):
            solve(_rows(N), "fro", gap_tol=1e-9)
    assert received == []


def test_the_settings_object_can_be_given_whole(received):
    st = settings_mod.SolverSettings(**SETTINGS["nuclear"])
    for N in (10, 20000):
        received.clear()
        solve(_rows(N), "nuclear", settings=st)
        assert received[0].settings == st
    with pytest.raises(ValidationError, match="not both"):
        solve(_rows(10), "nuclear", settings=st, feas_tol=1e-9)
    with pytest.raises(ValidationError, match="gap_tol is not a setting of norm='fro'"):
        solve(_rows(10), "fro", settings=st)
    with pytest.raises(ValidationError, match="settings must be a SolverSettings"):
        solve(_rows(10), "fro", settings={"feas_tol": 1e-9})


def _count_checks(monkeypatch) -> dict:
    counts: dict = {}
    check = settings_mod.check_setting

    def counting(name, value):
        counts[name] = counts.get(name, 0) + 1
        return check(name, value)

    monkeypatch.setattr(settings_mod, "check_setting", counting)
    return counts


#: the names a check of a setting goes by: the settings, their deprecated names (``tol``, also the dense QPs' name
#: of ``feas_tol`` and the interior point's old name of ``gap_tol``) and the interior point's ``max_iter``
SETTING_NAMES = (*settings_mod.SolverSettings.names(), *settings_mod.REMOVED_SETTINGS, "max_iter")


def _count_validators(monkeypatch) -> dict:
    """Count the calls of every validator (:mod:`attnsvm._validate`'s ``check_*``, :func:`attnsvm.memory.parse_size`)
    from every module of the package, by the name of what it checks, for the names of :data:`SETTING_NAMES`."""
    import importlib
    import pkgutil
    import sys

    import attnsvm._validate as validate
    import attnsvm.memory as memory
    import attnsvm.svm

    for m in pkgutil.walk_packages(attnsvm.svm.__path__, "attnsvm.svm."):
        if m.name != "attnsvm.svm.torch_backend":          # (imports torch; only for a device)
            importlib.import_module(m.name)                  # the lazily imported solvers too
    counts: dict = {}

    def counted(fn):
        def wrapper(value, name, *a, **kw):
            if name in SETTING_NAMES:
                counts[name] = counts.get(name, 0) + 1
            return fn(value, name, *a, **kw)
        return wrapper

    originals = [getattr(validate, n) for n in dir(validate) if n.startswith("check_")] + [memory.parse_size]
    for mod in [m for name, m in sys.modules.items() if name == "attnsvm" or name.startswith("attnsvm.")]:
        for fn in originals:
            for attr, val in list(vars(mod).items()):
                if val is fn:
                    monkeypatch.setattr(mod, attr, counted(fn))
    return counts


#: every method of each norm that solves one set, and a second problem whose nuclear working set runs more
#: than one round (its later rounds run the dense solve on a subset)
SOLVE_METHODS = {"fro": ("dense", "working_set", "pdas", "goldfarb-idnani"), "nuclear": ("dense", "working_set")}


@pytest.mark.parametrize("norm,method", [(n, m) for n, ms in SOLVE_METHODS.items() for m in ms])
def test_each_setting_is_checked_once_per_solve(norm, method, monkeypatch):
    """One check of each setting per solve (:func:`~attnsvm.svm.settings.check_setting`), and no validator
    called on a setting's name anywhere else during the solve: the inner entry points (the interior-point method,
    the dense QPs, the memory checks) do not check again."""
    from attnsvm.problem import TokenProblem

    rng = np.random.default_rng(5)
    p = TokenProblem(rng.standard_normal((8, 4, 6)), rng.standard_normal((8, 6)))
    cs = att_constraints(p.X, p.queries, np.zeros(8, int))
    counts = _count_checks(monkeypatch)
    validators = _count_validators(monkeypatch)
    sol = solve(cs, norm, method=method, **SETTINGS[norm])      # a real solve, through every inner layer
    assert sol.status == "optimal"
    once = {name: 1 for name in settings_mod.SolverSettings.names()}
    assert counts == once, counts
    assert validators == once, validators


def test_a_working_set_of_several_rounds_checks_each_setting_once(monkeypatch):
    """The nuclear working set round by round (its grown first run turned off, two rows joining per round): each
    round's dense solve of a subset (Frobenius start, interior-point method, memory check) checks nothing again."""
    rng = np.random.default_rng(1)
    X, Z = rng.standard_normal((30, 6, 12)), rng.standard_normal((30, 12))
    cs = att_constraints(X, Z, rng.integers(0, 6, 30))
    monkeypatch.setattr(nuclear_mod, "solve_nuclear_grown", lambda *a, **kw: None)
    validators = _count_validators(monkeypatch)
    sol = solve(cs, "nuclear", method="working_set", batch=2, **SETTINGS["nuclear"])
    assert sol.status == "optimal" and sol.info["rounds"] > 1, sol.info.get("rounds")
    assert validators == {name: 1 for name in settings_mod.SolverSettings.names()}, validators


def test_the_validator_count_sees_a_check_inside_a_solve(monkeypatch):
    """The counting of :func:`_count_validators` reaches the inner modules: a check added to the interior-point
    method's core, or the direct callers' QP entry, is counted."""
    from attnsvm.svm.ipm import driver

    core = driver.nuclear_ipm_unchecked
    monkeypatch.setattr(driver, "nuclear_ipm_unchecked", lambda *a, **kw: driver.check_number(
        kw["feas_tol"], "feas_tol", low=0.0) and core(*a, **kw))
    monkeypatch.setattr(nuclear_mod, "nuclear_ipm_unchecked", driver.nuclear_ipm_unchecked)
    validators = _count_validators(monkeypatch)
    rng = np.random.default_rng(5)
    cs = att_constraints(rng.standard_normal((8, 4, 6)), rng.standard_normal((8, 6)), np.zeros(8, int))
    solve(cs, "nuclear", method="dense", **SETTINGS["nuclear"])
    assert validators["feas_tol"] == 2
    validators.clear()
    from attnsvm.svm import qp

    qp.solve_gram_qp(np.eye(2), np.ones(2), np.zeros(2, bool), tol=1e-9)
    assert validators == {"tol": 1}


def test_the_batch_and_soft_paths_check_their_settings_once(monkeypatch):
    rng = np.random.default_rng(6)
    X, Z = rng.standard_normal((2, 5, 4, 6)), rng.standard_normal((2, 5, 6))
    counts = _count_checks(monkeypatch)
    validators = _count_validators(monkeypatch)
    solve_svm_batch(X, Z, np.zeros((2, 5), int), norm="nuclear", feas_tol=1e-10, max_memory="4G")
    once = {name: 1 for name in settings_mod.SolverSettings.names()}
    assert counts == once, counts
    assert validators == once, validators
    counts.clear()
    validators.clear()
    solve(att_constraints(X[0], Z[0], np.zeros(5, int)), "nuclear", C=1.0, support_tol=1e-6, max_memory="4G")
    assert counts == once, counts
    assert validators == once, validators


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
def test_tol_is_removed_and_names_feas_tol_for_every_method(norm, received):
    """``tol`` (the name of ``feas_tol``, deprecated) is refused in 0.3 by every method at every size, in one
    line naming ``tol`` and its replacement, before any solver runs; ``feas_tol`` reaches the solver."""
    for N in (10, 900):
        for method in METHODS[norm]:
            received.clear()
            with pytest.raises(ValidationError, match=r"'tol': removed in 0\.3: use feas_tol") as err:
                solve(_rows(N), norm, method=method, tol=1e-9)
            assert "\n" not in str(err.value) and received == []
            solve(_rows(N), norm, method=method, feas_tol=1e-9)
            assert received[0].settings.feas_tol == 1e-9
    with pytest.raises(ValidationError, match=r"'tol': removed in 0\.3: use feas_tol"):
        solve(_rows(10), norm, tol=1e-9, feas_tol=1e-9)
    with pytest.raises(ValidationError, match=r"'tol': removed in 0\.3: use feas_tol"):
        solve(_rows(10), norm, settings=settings_mod.SolverSettings(), tol=1e-9)


def test_tol_is_removed_from_the_batched_solve_too():
    rng = np.random.default_rng(7)
    X, Z = rng.standard_normal((6, 4, 5)), rng.standard_normal((6, 5))
    with pytest.raises(ValidationError, match=r"'tol': removed in 0\.3: use feas_tol"):
        solve_svm_batch(X[None], Z[None], np.zeros((1, 6), int), tol=1e-9)
    ok = solve_svm_batch(X[None], Z[None], np.zeros((1, 6), int), feas_tol=1e-9)
    assert list(ok.status) == list(solve_svm_batch(X[None], Z[None], np.zeros((1, 6), int)).status)


def test_the_nuclear_start_feasibility_and_ipm_receive_feas_tol(monkeypatch):
    rng = np.random.default_rng(8)
    X, Z = rng.standard_normal((8, 4, 6)), rng.standard_normal((8, 6))
    cs = att_constraints(X, Z, np.zeros(8, int))
    seen = []
    qp, ipm, fro_ws = nuclear_mod.frobenius_qp, nuclear_mod.nuclear_ipm_unchecked, ws_mod.solve_frobenius_ws
    monkeypatch.setattr(nuclear_mod, "frobenius_qp",
                        lambda cs_n, settings, *a: seen.append(("start", settings.feas_tol)) or qp(cs_n, settings, *a))
    monkeypatch.setattr(nuclear_mod, "nuclear_ipm_unchecked",
                        lambda *a, **kw: seen.append(("ipm", kw["feas_tol"], kw["gap_tol"])) or ipm(*a, **kw))
    monkeypatch.setattr(ws_mod, "solve_frobenius_ws", lambda cs, **kw: seen.append(
        ("feasibility", kw["options"].settings.feas_tol)) or fro_ws(cs, **kw))
    assert solve(cs, "nuclear", method="dense", feas_tol=2e-10, gap_tol=3e-9).status == "optimal"
    assert seen == [("start", 2e-10), ("ipm", 2e-10, 3e-9)]
    seen.clear()
    assert solve(cs, "nuclear", method="working_set", feas_tol=2e-10).status == "optimal"
    assert seen[0] == ("feasibility", 2e-10)


#: the modules of the solver pipeline below :mod:`attnsvm.svm.settings`: they take the settings' values from
#: their caller, so none may carry a tolerance default of its own
_INNER = ("ipm", "barrier_batch.py", "barrier_grow.py", "qp.py", "nuclear.py", "frobenius.py", "working_set.py",
          "pdas.py")


def _literal_tolerance_defaults(root) -> list:
    """``(file, function, parameter)`` for every parameter named like a setting (tol, feas_tol, gap_tol,
    support_tol) whose default is a float literal, in the files of ``_INNER`` under ``root`` (attnsvm/svm)."""
    import ast

    found = []
    files = [p for name in _INNER for p in ((root / name).rglob("*.py") if (root / name).is_dir() else [root / name])
             if p.exists()]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = [*zip(pos[len(pos) - len(a.defaults):], a.defaults), *zip(a.kwonlyargs, a.kw_defaults)]
            found += [(path.name, node.name, arg.arg) for arg, d in pairs
                      if arg.arg in ("tol", "feas_tol", "gap_tol", "support_tol")
                      and isinstance(d, ast.Constant) and isinstance(d.value, float)]
    return found


def test_no_inner_solver_function_has_a_tolerance_default_of_its_own(tmp_path):
    from pathlib import Path

    import attnsvm.svm

    assert _literal_tolerance_defaults(Path(attnsvm.svm.__file__).parent) == []
    # the scan sees a literal default (the check can fail)
    (tmp_path / "qp.py").write_text("def pdas(G, *, tol: float = 1e-10):\n    pass\n")
    assert _literal_tolerance_defaults(tmp_path) == [("qp.py", "pdas", "tol")]


def test_the_ipm_defaults_are_the_settings_defaults():
    """nuclear_ipm and nuclear_ipm_grow without tolerances run at the settings' defaults of a dense nuclear solve
    and of the working set's subsets (defined once: SolverSettings and the norm's gap_tol)."""
    from attnsvm.svm.barrier_grow import nuclear_ipm_grow
    from attnsvm.svm.ipm import nuclear_ipm

    rng = np.random.default_rng(5)
    cs = att_constraints(rng.standard_normal((10, 4, 5)), rng.standard_normal((10, 5)), np.zeros(10, int))
    dense = settings_mod.SolverSettings().resolved("nuclear", "dense")
    grown = settings_mod.SolverSettings().resolved("nuclear", "working_set")
    assert dense.feas_tol == settings_mod.FEAS_TOL and dense.gap_tol != grown.gap_tol
    a = nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality)
    b = nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, gap_tol=dense.gap_tol, feas_tol=dense.feas_tol)
    assert np.array_equal(a.W, b.W) and a.info["iterations"] == b.info["iterations"]
    start = np.ones(cs.N, bool)
    c, _ = nuclear_ipm_grow(cs.U, cs.V, cs.rhs, cs.is_equality, start)
    d, _ = nuclear_ipm_grow(cs.U, cs.V, cs.rhs, cs.is_equality, start, settings=grown)
    assert np.array_equal(c.W, d.W) and c.info["iterations"] == d.info["iterations"]


def test_the_ipm_tol_warns_and_maps_to_gap_tol():
    """nuclear_ipm's ``tol`` (its gap tolerance, not solve's ``feas_tol``) is now ``gap_tol``: the old keyword warns,
    names the mapping and gives the same result; both at once, or another keyword, are refused."""
    from attnsvm.svm.ipm import nuclear_ipm

    rng = np.random.default_rng(9)
    cs = att_constraints(rng.standard_normal((8, 4, 5)), rng.standard_normal((8, 5)), np.zeros(8, int))
    a = nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, gap_tol=1e-8)
    with pytest.warns(DeprecationWarning, match="'tol' is deprecated .*maps to 'gap_tol' .*gap_tol=1e-08") as rec:
        b = nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, tol=1e-8)
    assert rec[0].filename == __file__
    assert np.array_equal(a.W, b.W) and np.array_equal(a.lam, b.lam)
    with pytest.raises(ValidationError, match="give gap_tol only"):
        nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, tol=1e-8, gap_tol=1e-8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'gaptol'"):
        nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, gaptol=1e-8)
    with pytest.raises(ValidationError, match="gap_tol must be"):
        nuclear_ipm(cs.U, cs.V, cs.rhs, cs.is_equality, gap_tol=float("nan"))


def test_max_memory_is_held_in_bytes_and_an_int_limit_is_not_parsed_again():
    """The checked ``max_memory`` is a byte count, which :func:`attnsvm.memory.max_memory` takes as it is; a byte
    count that is not a positive int still goes through the parser (and is refused)."""
    from attnsvm import memory

    assert settings_mod.SolverSettings(max_memory="4G").max_memory == 4 * 2**30
    assert settings_mod.SolverSettings(max_memory=1.5e9).max_memory == 1_500_000_000
    assert settings_mod.SolverSettings().max_memory is None
    assert memory.max_memory(4096) == 4096
    for bad in (0, -1, True, "lots"):
        with pytest.raises(ValidationError, match="max_memory"):
            memory.max_memory(bad)
        with pytest.raises(ValidationError, match="max_memory"):
            settings_mod.SolverSettings(max_memory=bad)
