"""Padded sequences: ``valid (n, T)`` in the Att-SVM / Gen-SVM constraint builders.

Checked: a padded instance gives exactly the rows (and so the Frobenius and nuclear
solutions) of the unpadded one, whatever the padded entries hold; with variable
lengths it equals the stacked per-sample instances; the API entry points pass
``valid`` through; padded selections and malformed masks are errors.
"""

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.problem import TokenProblem
from attnsvm.svm import solve_gen_svm, solve_svm
from attnsvm.svm import ConstraintSet, att_constraints, gen_constraints
from attnsvm.svm.frobenius import solve_frobenius
from attnsvm.svm.nuclear import solve_nuclear


def _instance(seed=0, n=5, T=7, d=6, pad_value=None):
    """Random tokens (n, T, d) with lengths 3..T, queries (n, d), mask and a Gen-SVM selection."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    Z = rng.standard_normal((n, d))
    lengths = np.array([T] + list(rng.integers(3, T + 1, n - 1)))
    mask = np.arange(T)[None, :] < lengths[:, None]
    if pad_value is not None:
        X[~mask] = pad_value
    sel = np.zeros((n, T), bool)
    sel[np.arange(n), rng.integers(0, lengths)] = True
    sel[0, [1, 2]] = True  # a tie: equality rows
    return X, Z, mask, lengths, sel


def _stack(sets, n, T):
    """Concatenate per-sample constraint sets (sample i of the result is set i)."""
    cat = lambda name: np.concatenate([getattr(c, name) for c in sets])  # noqa: E731
    sample = np.concatenate([np.full(c.N, i) for i, c in enumerate(sets)])
    return ConstraintSet(cat("U"), cat("V"), cat("rhs"), cat("is_equality"), sample, cat("query"), cat("token"),
                         cat("other"), sets[0].kind, (n, T))


def _same_rows(a, b):
    for name in ("U", "V", "rhs", "is_equality", "sample", "token", "other"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("kind", ["gen", "att"])
def test_padded_rows_equal_the_unpadded_instance(kind):
    X, Z, mask, lengths, sel = _instance(pad_value=1e3)
    n, T, _ = X.shape
    if kind == "gen":
        padded = gen_constraints(X, Z, sel, valid=mask)
        parts = [gen_constraints(X[i:i + 1, :L], Z[i:i + 1], sel[i:i + 1, :L]) for i, L in enumerate(lengths)]
    else:
        a = sel.argmax(axis=1)
        padded = att_constraints(X, Z, a, valid=mask)
        parts = [att_constraints(X[i:i + 1, :L], Z[i:i + 1], a[i:i + 1]) for i, L in enumerate(lengths)]
    ref = _stack(parts, n, T)
    _same_rows(padded, ref)
    assert padded.N == mask.sum() - n and not np.isin(padded.other[padded.sample == 1], np.flatnonzero(~mask[1])).any()
    for solve in (solve_frobenius, solve_nuclear):
        p, r = solve(padded), solve(ref)
        assert p.status == r.status == "optimal"
        np.testing.assert_allclose(p.W, r.W, atol=1e-9 * max(1.0, np.abs(r.W).max()))
        assert p.certificate.max_violation <= 1e-9 and p.certificate.duality_gap <= 1e-8


def test_equal_lengths_and_padding_content():
    rng = np.random.default_rng(3)
    n, L, T, d = 4, 4, 7, 5
    X0 = rng.standard_normal((n, L, d))
    Z = rng.standard_normal((n, d))
    sel0 = np.zeros((n, L), bool)
    sel0[:, 1] = True
    sel0[2, 3] = True
    mask = np.zeros((n, T), bool)
    mask[:, :L] = True
    sel = np.zeros((n, T), bool)
    sel[:, :L] = sel0
    sols = []
    for fill in (0.0, -50.0):  # what the padding holds must not matter
        X = np.full((n, T, d), fill)
        X[:, :L] = X0
        _same_rows(gen_constraints(X, Z, sel, valid=mask), gen_constraints(X0, Z, sel0))
        sols.append(solve_gen_svm(TokenProblem(X, Z), sel, "nuclear", valid=mask))
    ref = solve_gen_svm(TokenProblem(X0, Z), sel0, "nuclear")
    for s in sols:
        np.testing.assert_allclose(s.W, ref.W, atol=1e-9)
    # without valid, the padding tokens do constrain W
    assert gen_constraints(X, Z, sel).N == n * (T - 1) > gen_constraints(X, Z, sel, valid=mask).N
    # Att-SVM through solve_svm
    X = np.zeros((n, T, d))
    X[:, :L] = X0
    a = np.array([1, 0, 3, 2])
    fro = solve_svm(TokenProblem(X, Z), a, "fro", valid=mask)
    np.testing.assert_allclose(fro.W, solve_svm(TokenProblem(X0, Z), a, "fro").W, atol=1e-10)


def test_all_valid_is_the_default():
    X, Z, mask, lengths, sel = _instance(seed=1)
    full = np.ones_like(mask)
    _same_rows(gen_constraints(X, Z, sel, valid=full), gen_constraints(X, Z, sel))
    a = sel.argmax(axis=1)
    _same_rows(att_constraints(X, Z, a, valid=full), att_constraints(X, Z, a))


def test_bad_valid_is_rejected():
    X, Z, mask, lengths, sel = _instance(seed=2)
    i = int(np.flatnonzero(lengths < X.shape[1])[0])
    bad = sel.copy()
    bad[i, -1] = True  # a padded token selected
    with pytest.raises(ValidationError, match="padding"):
        gen_constraints(X, Z, bad, valid=mask)
    a = sel.argmax(axis=1)
    a[i] = X.shape[1] - 1
    with pytest.raises(ValidationError, match="padding"):
        att_constraints(X, Z, a, valid=mask)
    with pytest.raises(ValidationError, match="padding"):
        solve_svm(TokenProblem(X, Z), a, "fro", valid=mask)
    with pytest.raises(ValidationError, match="valid must have shape"):
        gen_constraints(X, Z, sel, valid=mask[:, :-1])
    with pytest.raises(ValidationError, match="valid must be a boolean mask"):
        gen_constraints(X, Z, sel, valid=mask * 0.5)
    empty = sel & False
    with pytest.raises(ValidationError, match="at least one"):
        gen_constraints(X, Z, empty, valid=mask)
    prompt = TokenProblem(X, W=np.eye(X.shape[2]))
    with pytest.raises(ValidationError, match="prompt"):
        solve_svm(prompt, a * 0, "fro", valid=mask)
