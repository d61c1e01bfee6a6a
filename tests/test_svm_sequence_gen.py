"""The sequence SVM of self-attention with selected *sets* (Gen form) and padding masks.

Checked: the rows equal a slow per-query reference built with plain loops; singleton sets
give exactly the rows of the single-selection form; padding changes nothing whatever the
padded tokens hold; the causal form only uses earlier tokens; the solutions are certified,
satisfy the KKT conditions (margins, ties, dual feasibility), and the working-set method
agrees with the dense one; malformed selections are errors that name the query.
"""

import numpy as np
import pytest

from attnsvm.errors import ValidationError
from attnsvm.svm import solve_seq_svm
from attnsvm.svm import seq_constraints


def _instance(seed=0, n=4, T=6, d=8, pad_value=None, causal=False):
    """Tokens (n, T, d), a padding mask (lengths 3..T) and random selected sets per real query."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    lengths = np.array([T] + list(rng.integers(3, T + 1, n - 1)))
    valid = np.arange(T)[None, :] < lengths[:, None]
    if pad_value is not None:
        X[~valid] = pad_value
    sel = np.zeros((n, T, T), bool)
    for i in range(n):
        for k in range(lengths[i]):
            hi = k + 1 if causal else lengths[i]
            size = min(hi, int(rng.integers(1, 3)))
            sel[i, k, rng.choice(hi, size=size, replace=False)] = True
    return X, valid, sel


def _reference_rows(X, sel, valid, causal):
    """Slow reference with plain loops: per sample and real query, ties between consecutive
    selected tokens, then every other candidate against the first selected token."""
    n, T, _ = X.shape
    out = []
    for i in range(n):
        for k in range(T):
            if not valid[i, k]:
                continue
            chosen = [t for t in range(T) if sel[i, k, t]]
            for a, b in zip(chosen[:-1], chosen[1:]):
                out.append((i, k, a, b, 0.0, True, X[i, a] - X[i, b], X[i, k]))
            for t in range(T):
                if valid[i, t] and not sel[i, k, t] and (not causal or t <= k):
                    out.append((i, k, chosen[0], t, 1.0, False, X[i, chosen[0]] - X[i, t], X[i, k]))
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_rows_match_the_per_query_reference(seed, causal):
    X, valid, sel = _instance(seed, causal=causal)
    cs = seq_constraints(X, sel, causal, valid)
    ref = _reference_rows(X, sel, valid, causal)
    assert cs.N == len(ref) and cs.kind == ("causal" if causal else "seq")
    for r, (i, k, a, b, rhs, eq, u, v) in enumerate(ref):
        assert (cs.sample[r], cs.query[r], cs.token[r], cs.other[r]) == (i, k, a, b)
        assert cs.rhs[r] == rhs and cs.is_equality[r] == eq
        np.testing.assert_array_equal(cs.U[r], u)
        np.testing.assert_array_equal(cs.V[r], v)


@pytest.mark.parametrize("causal", [False, True])
def test_queries_mask_keeps_only_the_rows_of_those_queries(causal):
    """queries=valid changes nothing; a sub-mask of queries drops exactly the other queries' rows (the
    candidates stay all valid tokens); a padded query is refused."""
    X, valid, sel = _instance(5, causal=causal)
    full = seq_constraints(X, sel, causal, valid)
    same = seq_constraints(X, sel, causal, valid, queries=valid)
    for name in ("U", "V", "rhs", "is_equality", "sample", "query", "token", "other"):
        np.testing.assert_array_equal(getattr(same, name), getattr(full, name))
    queries = valid & (np.random.default_rng(0).random(valid.shape) < 0.5)
    queries[0, 1] = True
    cs = seq_constraints(X, sel, causal, valid, queries=queries)
    keep = queries[full.sample, full.query]
    assert cs.N == int(keep.sum()) and 0 < cs.N < full.N
    assert not np.any(~queries[cs.sample, cs.query])  # no row of a non-query position
    for name in ("U", "V", "rhs", "is_equality", "sample", "query", "token", "other"):
        np.testing.assert_array_equal(getattr(cs, name), getattr(full, name)[keep])
    pad = np.argwhere(~valid)[0]
    bad = queries.copy()
    bad[tuple(pad)] = True
    with pytest.raises(ValidationError, match="padding"):
        seq_constraints(X, sel, causal, valid, queries=bad)


@pytest.mark.parametrize("causal", [False, True])
def test_singleton_sets_are_the_single_selection_form(causal):
    rng = np.random.default_rng(3)
    n, T, d = 3, 5, 6
    X = rng.standard_normal((n, T, d))
    hi = np.arange(T)[None, :] + 1 if causal else np.full((1, T), T)
    select = (rng.random((n, T)) * hi).astype(int)
    sets = np.zeros((n, T, T), bool)
    sets[np.arange(n)[:, None], np.arange(T)[None, :], select] = True
    a, b = seq_constraints(X, select, causal), seq_constraints(X, sets, causal)
    for name in ("U", "V", "rhs", "is_equality", "sample", "query", "token", "other"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_padding_changes_nothing(causal):
    X0, valid, sel = _instance(2, pad_value=0.0, causal=causal)
    X1 = X0.copy()
    X1[~valid] = 1e3 * np.random.default_rng(9).standard_normal(X1[~valid].shape)
    s0 = solve_seq_svm(X0, sel, causal=causal, valid=valid)
    s1 = solve_seq_svm(X1, sel, causal=causal, valid=valid)
    assert s0.status == s1.status == "optimal"
    np.testing.assert_allclose(s1.W, s0.W, rtol=0, atol=1e-10 * np.abs(s0.W).max())


@pytest.mark.parametrize("norm", ["fro", "nuclear"])
@pytest.mark.parametrize("causal", [False, True])
def test_solution_is_certified_and_satisfies_kkt(norm, causal):
    # d large enough (d^2 = 144 > N) that the sets are separable
    X, valid, sel = _instance(4, n=3, T=5, d=12, causal=causal)
    sol = solve_seq_svm(X, sel, causal=causal, norm=norm, valid=valid)
    assert sol.status == "optimal" and sol.certified
    cs, m = sol.constraints, sol.margins
    ineq = ~cs.is_equality
    assert m[ineq].min() >= 1 - 1e-8                               # every margin
    assert np.abs(m[cs.is_equality]).max(initial=0) <= 1e-8        # ties hold
    assert sol.duals[ineq].min() >= -1e-12                         # dual feasibility
    assert np.all(np.abs(sol.duals[ineq] * (m[ineq] - 1)) <= 1e-7)  # complementary slackness
    # the causal form never looks ahead: support tokens lie at or before their query
    if causal:
        assert np.all(cs.other <= cs.query) and np.all(cs.token <= cs.query)


def test_working_set_agrees_with_dense():
    X, valid, sel = _instance(5, n=6, T=7, d=10)
    dense = solve_seq_svm(X, sel, valid=valid, method="dense")
    ws = solve_seq_svm(X, sel, valid=valid, method="working_set")
    assert dense.status == ws.status == "optimal"
    assert abs(ws.objective - dense.objective) <= 1e-9 * dense.objective


def test_infeasible_sets_get_a_farkas_certificate():
    # two queries equal, the same two tokens, opposite selections: no W separates both
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    X = x[None]                                                    # (1, 3, 2): query 0 and query 2 are equal
    sel = np.zeros((1, 3, 3), bool)
    sel[0, 0, 0] = sel[0, 1, 1] = sel[0, 2, 1] = True
    sol = solve_seq_svm(X, sel)
    assert sol.status == "infeasible" and sol.certificate.farkas is not None


def test_malformed_selections_are_errors():
    X, valid, sel = _instance(6, causal=True)
    bad = sel.copy()
    bad[0, 2] = False
    with pytest.raises(ValidationError, match=r"select\[0, 2\] must mark at least one token"):
        seq_constraints(X, bad, True, valid)
    bad = sel.copy()
    bad[0, 1, 4] = True
    with pytest.raises(ValidationError, match=r"select\[0, 1, 4\] .*after the query"):
        seq_constraints(X, bad, True, valid)
    i = int(np.flatnonzero(~valid.all(axis=1))[0])
    t = int(np.flatnonzero(~valid[i])[0])
    bad = sel.copy()
    bad[i, 0, t] = True
    with pytest.raises(ValidationError, match=rf"select\[{i}, 0, {t}\] .*padding"):
        seq_constraints(X, bad, False, valid)
    single = np.zeros(valid.shape, int)
    single[i, 0] = t
    with pytest.raises(ValidationError, match="is padding"):
        seq_constraints(X, single, False, valid)
    with pytest.raises(ValidationError, match="valid must"):
        seq_constraints(X, single, False, valid[:, :-1])
