"""Hostile cases, aliasing (issue 12): a TokenProblem owns read-only copies of its arrays.

The caller's arrays stay as they were (writable), and changing them or any view of them
afterwards never changes the problem (nor the SVM solved from it).
"""

import numpy as np
import pytest

from attnsvm import TokenProblem
from attnsvm.svm import solve_svm

rng = np.random.default_rng(12)
X0 = rng.standard_normal((3, 4, 5))
Z0 = rng.standard_normal((3, 5))
Y0 = np.array([1.0, -1.0, 1.0])
v0 = rng.standard_normal(5)


def test_caller_array_stays_writable_and_later_writes_do_not_leak():
    X = X0.copy()
    p = TokenProblem(X, Z0)
    assert X.flags.writeable
    X[:] = 0.0                      # raised ValueError before the fix (caller's array frozen)
    assert np.array_equal(p.X, X0)


def test_view_taken_before_does_not_change_the_problem():
    X = X0.copy()
    view = X[:, :, :]
    p = TokenProblem(X, Z0)
    view[:] = 0.0                   # changed the problem before the fix
    assert np.array_equal(p.X, X0)
    assert not np.shares_memory(p.X, X)


@pytest.mark.parametrize("field", ["Z", "Y", "v", "W"])
def test_every_array_is_copied(field):
    arrays = {"Z": Z0.copy(), "Y": Y0.copy(), "v": v0.copy(), "W": np.eye(5)}
    if field == "W":
        p = TokenProblem(X0, Y=arrays["Y"], v=arrays["v"], W=arrays["W"])
    else:
        p = TokenProblem(X0, arrays["Z"], Y=arrays["Y"], v=arrays["v"])
    before = getattr(p, field).copy()
    a = arrays[field]
    assert a.flags.writeable
    a[...] = 7.0
    assert np.array_equal(getattr(p, field), before)
    assert not np.shares_memory(getattr(p, field), a)


def test_problem_arrays_are_read_only():
    p = TokenProblem(X0, Z0, Y=Y0, v=v0)
    for name in ("X", "Z", "Y", "v"):
        arr = getattr(p, name)
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[...] = 0.0
    assert not p.queries.flags.writeable


def test_read_only_view_of_a_writable_base_is_copied():
    base = X0.copy()
    view = base.view()
    view.setflags(write=False)
    p = TokenProblem(view, Z0)
    base[:] = 0.0
    assert np.array_equal(p.X, X0)


def test_other_dtypes_and_non_contiguous_inputs_are_copied_as_float64():
    Xf = np.asfortranarray(X0.astype(np.float32))
    p = TokenProblem(Xf, Z0[:, ::1])
    assert p.X.dtype == np.float64 and p.X.flags.c_contiguous
    Xf[:] = 0
    assert np.allclose(p.X, X0.astype(np.float32))
    Xs = np.repeat(X0, 2, axis=2)[:, :, ::2]          # a strided view
    p2 = TokenProblem(Xs, Z0)
    Xs[...] = 0.0
    assert np.array_equal(p2.X, X0)


def test_replace_copies_and_the_solution_does_not_follow_the_caller():
    X = X0.copy()
    p = TokenProblem(X, Z0)
    q = p.replace(name="other")
    assert not np.shares_memory(q.X, p.X)
    before = solve_svm(p, np.zeros(3, int))
    X *= 10.0
    after = solve_svm(p, np.zeros(3, int))
    assert before.status == after.status
    if before.feasible:
        assert np.array_equal(before.W, after.W)
