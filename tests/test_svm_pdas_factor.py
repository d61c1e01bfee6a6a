"""The factor kept by the working set's active-set method (:class:`attnsvm.svm.pdas.BasePDAS`):
after a rebuild (factored in place), appends and pinned rows it must equal a fresh factorization,
and its solves those of the free rows' matrix ``M_FF``; the subset QP's BLAS threads."""

import numpy as np
import scipy.linalg as sla

from attnsvm.generators import planted_problem
from attnsvm.svm import att_constraints
from attnsvm.svm.pdas import BasePDAS
from attnsvm.svm.settings import SolverSettings
from attnsvm.svm.working_set import _GramSet, _Setup


def _base(n=40, d=6):
    """A BasePDAS over the rows of a planted Att-SVM (rank d^2: 40 rows in general position)."""
    pr, sel, _ = planted_problem(n, 11, d, seed=4)
    cs = att_constraints(pr.X, pr.queries, sel)
    setup = _Setup(cs, SolverSettings())
    ws = _GramSet(setup, None)
    rng = np.random.default_rng(0)
    ws.add(rng.permutation(cs.N)[:40])
    base = BasePDAS(setup)
    return base, ws


def _check(base, ws, idx):
    """B's factor, Y = L^{-1} E_pinned, beta = L^{-1} rhs_B and both solves against fresh algebra."""
    F = ws.rows[idx]
    s = base.s
    assert set(base.rows.tolist()) == set(F.tolist()) | set(base.pinned.tolist())
    assert not set(F.tolist()) & set(base.pinned.tolist())
    M = base._mgram(base.rows, base.rows)
    L = base.L[:s, :s]
    assert np.array_equal(L, np.tril(L))
    assert np.allclose(L @ L.T, M, rtol=0, atol=1e-11 * np.abs(M).max())
    cap = base.L.shape[0]                               # the padding is the identity
    assert np.array_equal(base.L[s:], np.eye(cap)[s:])
    assert np.array_equal(base.L[:s, s:], np.zeros((s, cap - s)))
    Lf = np.linalg.cholesky(M)
    E = np.zeros((s, base.pinned.size))
    E[base.pos[base.pinned], np.arange(base.pinned.size)] = 1.0
    assert np.allclose(base.Y, sla.solve_triangular(Lf, E, lower=True), atol=1e-9)
    assert np.allclose(base.beta, sla.solve_triangular(Lf, base.setup.rhs[base.rows], lower=True), atol=1e-9)
    YtY = base._pinned_factor()
    M_FF = base._mgram(F, F)
    want = np.linalg.solve(M_FF, base.setup.rhs[F])
    assert np.allclose(base.solve(F, None, YtY), want, rtol=1e-8, atol=1e-10 * np.abs(want).max())
    r = np.random.default_rng(1).standard_normal(F.size)
    want = np.linalg.solve(M_FF, r)
    assert np.allclose(base.solve(F, r, YtY), want, rtol=1e-8, atol=1e-10 * np.abs(want).max())


def _step(base, ws, idx):
    base.set_free(ws.rows[idx], ws.G, base.setup.rhs[ws.rows], idx, ws.rows)
    _check(base, ws, idx)


def test_appends_and_pins_keep_the_factor_exact():
    base, ws = _base()
    _step(base, ws, np.arange(20))                                  # a fresh factor
    assert base.refactors == 1
    _step(base, ws, np.r_[0:3, 4:7, 8:20, 20:26])                   # rows 3 and 7 pinned, 6 appended
    _step(base, ws, np.r_[0:3, 4:20, 20:30])                        # row 7 free again, 4 more
    assert base.refactors == 1 and base.appended == 10 and base.pinned.size == 1


def test_subset_qp_runs_on_one_blas_thread(monkeypatch):
    """The working set's subset QP limits BLAS to one thread and restores the caller's setting."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from attnsvm.svm import working_set as wsm

    def blas_threads():
        return max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")

    seen = []
    inner = wsm._subset_qp

    def spy(*a, **k):
        seen.append(blas_threads())
        return inner(*a, **k)

    monkeypatch.setattr(wsm, "_subset_qp", spy)
    pr, sel, _ = planted_problem(30, 11, 6, seed=2)
    with threadpool_limits(limits=2, user_api="blas"):
        assert blas_threads() == 2
        sol = wsm.solve_frobenius_ws(att_constraints(pr.X, pr.queries, sel), batch=16)
        assert blas_threads() == 2
    assert sol.certified and len(seen) >= 2 and set(seen) == {1}


def _factored_base(n=40, d=6, free=30):
    """A BasePDAS whose factor holds ``free`` rows (a padded buffer: identity beyond them)."""
    base, ws = _base(n, d)
    _step(base, ws, np.arange(free))
    assert base.L.shape[0] > base.s
    return base, ws


def test_unit_solve_equals_a_fresh_triangular_solve():
    """``L^{-1} E`` for unit vectors, solved on trailing blocks in groups, equals the full solve."""
    from attnsvm.svm.pdas import _blas

    base, _ = _factored_base()
    s = base.s
    L = base.L[:s, :s]
    rng = np.random.default_rng(3)
    for p in (np.array([0]), np.array([s - 1]), np.array([s - 1, 0, 17]), rng.permutation(s)[:12],
              np.arange(s)):
        E = np.zeros((s, p.size))
        E[p, np.arange(p.size)] = 1.0
        want = sla.solve_triangular(L, E, lower=True)
        got = base._unit_solve(p)
        assert got.shape == (s, p.size)
        assert np.allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())
        assert np.all(got[np.arange(s)[:, None] < p[None, :]] == 0.0)      # exactly zero above p
    assert _blas("dtrsm") is not None        # the in-place BLAS path is the one tested above


def test_tri_solve_blas_and_fallback_equal_scipy():
    """_tri_solve (BLAS dtrsm / dtrsv on a block of the stored factor, or the copying fallback) solves with
    L[q:s, q:s] and its transpose like scipy, for one and several right-hand sides."""
    from attnsvm.svm import pdas

    base, _ = _factored_base()
    s = base.s
    rng = np.random.default_rng(5)
    for q in (0, 7):
        Lq = base.L[q:s, q:s]
        for g in (1, 4):
            X = rng.standard_normal((g, s - q))
            for trans in (False, True):
                want = sla.solve_triangular(Lq, X.T, lower=True, trans="T" if trans else "N").T
                for fns in ({"dtrsm": pdas._blas("dtrsm"), "dtrsv": pdas._blas("dtrsv")},
                            {"dtrsm": None, "dtrsv": None}):
                    Y = X.copy()
                    pdas._BLAS.clear()
                    pdas._BLAS.update(fns)
                    try:
                        pdas._tri_solve(base.L, q, s, Y, trans)
                    finally:
                        pdas._BLAS.clear()
                    assert np.allclose(Y, want, rtol=0, atol=1e-12 * np.abs(want).max())
    assert pdas._blas("dtrsm") is not None and pdas._blas("dtrsv") is not None


def test_principal_block_equals_fancy_indexing():
    """principal_submatrix (copies by runs of consecutive indices, or a gather beyond 128 runs) is G[ix_(idx, idx)]."""
    from attnsvm.svm.pdas import principal_submatrix

    rng = np.random.default_rng(2)
    G = rng.standard_normal((300, 300))
    for idx in (np.arange(300), np.arange(0), np.array([5]), np.r_[0:40, 41:90, 200:300], np.r_[3:299],
                np.sort(rng.permutation(300)[:250]), np.arange(0, 300, 2)):
        want = G[np.ix_(idx, idx)]
        assert np.array_equal(principal_submatrix(G, idx), want)
        out = np.full((idx.size + 3, idx.size + 5), np.nan)
        principal_submatrix(G, idx, out=out[:idx.size, :idx.size])           # into a strided view
        assert np.array_equal(out[:idx.size, :idx.size], want)
        assert np.isnan(out[idx.size:]).all() and np.isnan(out[:, idx.size:]).all()
    G = rng.standard_normal((1200, 1200))
    idx = np.arange(0, 1200, 2)                                     # 600 runs, gathered in two bands
    out = np.empty((idx.size, idx.size))
    principal_submatrix(G, idx, out=out)
    assert np.array_equal(out, G[np.ix_(idx, idx)])


def test_gram_set_keep_then_add_equals_a_fresh_gram():
    """The working set's Gram matrix after keep() (cut when read or when rows are added) is that of its rows."""
    from attnsvm.svm.constraints import row_gram

    base, ws = _base()
    rng = np.random.default_rng(6)
    for _ in range(3):
        ws.keep(rng.random(ws.size) > 0.2)
        ws.keep(rng.random(ws.size) > 0.1)                          # two cuts before the next read
        out = np.setdiff1d(np.arange(base.setup.cs.N), ws.rows)
        ws.add(rng.permutation(out)[:7])
        U, V = base.setup.rows(ws.rows)
        assert np.allclose(ws.G, row_gram(U, V), rtol=0, atol=1e-13)
        ws.keep(rng.random(ws.size) > 0.3)
        U, V = base.setup.rows(ws.rows)
        assert np.allclose(ws.G, row_gram(U, V), rtol=0, atol=1e-13)


def test_symv_equals_the_matrix_product():
    """_symv (BLAS dsymv on one triangle of the symmetric Gram matrix) is G @ f; other inputs go through @."""
    from attnsvm.svm.pdas import _symv

    base, ws = _base()
    G = ws.G
    f = np.random.default_rng(7).standard_normal(G.shape[0])
    assert np.allclose(_symv(G, f), G @ f, rtol=1e-14, atol=1e-14 * np.abs(G @ f).max())
    Gv = np.asfortranarray(G)                                          # not C-contiguous: the plain product
    assert np.array_equal(_symv(Gv, f), Gv @ f)
    assert _symv(np.zeros((0, 0)), np.zeros(0)).shape == (0,)


def test_refactor_in_place_and_its_failure_leave_a_usable_factor():
    """The in-buffer factorization (LAPACK dpotrf with a leading dimension) equals a fresh one, also over an
    old factor's buffer; dependent free rows (40 rows, rank + 1 = 37) raise _Singular and leave B empty, and the
    next set_free factors afresh. Without dpotrf the copying rebuild does the same."""
    from attnsvm.svm import pdas

    for fn in ("ctypes", None):
        pdas._BLAS.clear()
        if fn is None:
            pdas._BLAS["dpotrf"] = None
        try:
            base, ws = _base()
            _step(base, ws, np.arange(30))
            _step(base, ws, np.r_[0:5, 8:30, 30:34])                     # appends and pins on that factor
            buf = base._buf
            _step(base, ws, np.r_[0:2, 34:40])                          # mostly new rows: a new factor, same buffer
            assert base.refactors == 2 and (fn is None or base._buf is buf)
            try:
                base.set_free(ws.rows, ws.G, base.setup.rhs[ws.rows], np.arange(40), ws.rows)
                raise AssertionError("dependent free rows were factored")
            except pdas._Singular:
                pass
            if fn is not None:
                assert base.s == 0
            _step(base, ws, np.arange(10, 35))
            assert base.pinned.size == 0
        finally:
            pdas._BLAS.clear()


def test_a_run_that_stops_before_its_first_iterate_leaves_no_earlier_iterate():
    """``BasePDAS.last`` is the iterate of the last run only. A run that returns None before iterating (here a zero
    row) left the previous run's iterate, sized for another working set, and the working set's fallback read it
    (``ValueError: operands could not be broadcast together with shapes (1597,) (1607,)`` in 9 of the at-scale
    probe's null tasks, layer 0 of MiniLM)."""
    base, ws = _base()
    n = 20  # fewer rows than the rank (36): the run reaches a KKT point
    rows, b, eq = ws.rows[:n], base.setup.rhs[ws.rows[:n]], np.zeros(n, bool)
    assert base.run(rows, ws.G[:n, :n], b, eq, 1e-10) is not None and base.last[0].shape == (n,)
    k = n - 5
    G = ws.G[:k, :k].copy()
    G[0, 0] = 0.0  # a zero row: the run returns before its first iterate
    assert base.run(rows[:k], G, b[:k], eq[:k], 1e-10) is None and base.why == "zero row"
    assert base.last is None
