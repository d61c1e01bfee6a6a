"""The factorization of the working set's subset QP: a primal-dual active-set method on the
min-norm-point form that keeps one Cholesky factor across iterations and rounds (:class:`BasePDAS`).

Internal to the working set (:mod:`attnsvm.svm.working_set` uses :class:`BasePDAS` and
:func:`principal_submatrix`)."""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["BasePDAS", "principal_submatrix"]


def _blas(name: str):
    """BLAS routine ``name`` ("dtrsm" or "dtrsv", or LAPACK's "dpotrf") of SciPy as a ctypes function, or None where it is not
    available with 32-bit integers. Unlike SciPy's wrappers these take a leading dimension, so a block of the
    stored factor (its leading s x s part, or a trailing block) is solved where it is, without a copy."""
    import ctypes

    try:
        from scipy.linalg import cython_blas, cython_lapack
        cap = (cython_lapack if name == "dpotrf" else cython_blas).__pyx_capi__[name]
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        sig = get_name(cap)
        if sig is None or b"int *" not in sig or b"long" in sig:
            return None
        get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
        get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        ptr = get_ptr(cap, sig)
    except (ImportError, KeyError, AttributeError, ValueError):
        return None
    c, i, d, v = ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_double), ctypes.c_void_p
    args = {"dtrsm": (c, c, c, c, i, i, d, v, i, v, i), "dtrsv": (c, c, c, i, v, i, v, i), "dpotrf": (c, i, v, i, i)}[name]
    return ctypes.CFUNCTYPE(None, *args)(ptr)


_BLAS: dict = {}

#: BLAS threads for the whole-block Cholesky factorizations of :meth:`BasePDAS._refactor` (set by the
#: caller's :func:`factor_threads`; 1 outside it)
_FACTOR_THREADS = [1]


@contextlib.contextmanager
def factor_threads(n: int):
    """Within this context, :func:`caller_threads` runs with ``n`` BLAS threads (the working set records
    the caller's setting here before it limits the subset QP to one thread)."""
    _FACTOR_THREADS.append(max(int(n), 1))
    try:
        yield
    finally:
        _FACTOR_THREADS.pop()


def caller_threads():
    """A context in which BLAS runs with the threads recorded by :func:`factor_threads` (nothing changes
    when that is one): a factorization of a few thousand rows is large enough to share between threads,
    unlike the QP's triangular solves with few right-hand sides."""
    n = _FACTOR_THREADS[-1]
    if n <= 1:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=n, user_api="blas")


def _routine(name: str):
    """:func:`_blas` ``(name)``, looked up once."""
    if name not in _BLAS:
        _BLAS[name] = _blas(name)
    return _BLAS[name]


def _tri_solve(L: np.ndarray, q: int, s: int, X: np.ndarray, trans: bool = False) -> None:
    """Solve with the block ``T = L[q:s, q:s]`` of a lower factor ``L`` stored C-contiguous ``(cap, cap)``, in
    place: ``X^T := T^{-1} X^T`` (``T^{-T}`` when ``trans``) for ``X (g, s - q)`` C-contiguous (the right-hand
    sides as rows)."""
    import ctypes

    n, g = s - q, X.shape[0]
    fn = _routine("dtrsm" if g > 1 else "dtrsv")
    if fn is None or not (L.flags.c_contiguous and X.flags.c_contiguous and L.dtype == X.dtype == np.float64):
        import scipy.linalg as sla

        X[...] = sla.solve_triangular(np.ascontiguousarray(L[q:s, q:s]), X.T, lower=True, trans="T" if trans else "N",
                                      check_finite=False).T
        return
    if n == 0 or g == 0:
        return
    # column-major, L is U = L^T (upper, lda = cap) and X^T is (n, g) with ldb = n: T = U^T, T^T = U
    ci = ctypes.c_int
    lda = ctypes.byref(ci(L.shape[1]))
    a_ptr = L.ctypes.data + 8 * (q * L.shape[1] + q)
    op = b"N" if trans else b"T"
    if g > 1:
        fn(b"L", b"U", op, b"N", ctypes.byref(ci(n)), ctypes.byref(ci(g)), ctypes.byref(ctypes.c_double(1.0)), a_ptr,
           lda, X.ctypes.data, ctypes.byref(ci(n)))
    else:
        fn(b"U", op, b"N", ctypes.byref(ci(n)), a_ptr, lda, X.ctypes.data, ctypes.byref(ci(1)))


def _symv(G: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``G f`` for a symmetric ``G (s, s)`` (the working set's Gram matrix): BLAS ``dsymv`` reads one triangle,
    half the memory of a general product (``G.T`` is ``G`` in Fortran order: no copy)."""
    if not (G.flags.c_contiguous and G.dtype == np.float64 and G.size):
        return G @ f
    from scipy.linalg.blas import dsymv

    return dsymv(1.0, G.T, np.asarray(f, np.float64), lower=0)


def principal_submatrix(G: np.ndarray, idx: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``G[np.ix_(idx, idx)]`` for increasing indices ``idx (k,)``, written into ``out (k, k)`` when given.

    Index sets here are a matrix's rows less a few, i.e. few runs of consecutive indices: up to
    128 runs the block is copied as slices, run by run (a gather of each entry, ``np.ix_``, is
    several times slower on a few-thousand-row matrix); beyond that it is gathered, 512 rows at a time.
    """
    k = int(idx.size)
    if out is None:
        out = np.empty((k, k))
    brk = np.flatnonzero(np.diff(idx) != 1) + 1
    if brk.size >= 128:                 # gathered by bands of rows: no second k x k temporary
        for a in range(0, k, 512):
            out[a:a + 512] = G[np.ix_(idx[a:a + 512], idx)]
        return out
    starts = np.r_[0, brk].tolist()
    ends = np.r_[brk, k].tolist()
    src = idx[np.r_[0, brk]].tolist() if k else []
    runs = list(zip(starts, ends, src))
    for a, b, sa in runs:
        Gr, o = G[sa:sa + b - a], out[a:b]
        for c, d, sc in runs:
            o[:, c:d] = Gr[:, sc:sc + d - c]
    return out


class _Singular(Exception):
    """The free rows of the subset QP are (numerically) linearly dependent."""


class BasePDAS:
    """Primal-dual active-set method for the working-set QP in min-norm-point form.

    With ``A_k = u_k w_k^T`` and ``G`` their Gram matrix, the hard-margin SVM of the working set
    is solved through ``min 1/2 f^T G f s.t. b^T f = 1, f >= 0`` (``f`` free on equality rows),
    the nearest point of the (signed) convex hull of the rows to the origin. Its KKT point
    ``G f = t b + mu`` (``mu >= 0``, ``mu f = 0``) gives ``t = ||sum f_k A_k||^2``, and

    * ``t > 0``: the SVM multipliers are ``lam = f / t`` (``G lam = b + mu / t``: feasible,
      complementary), ``W = sum lam_k A_k``;
    * ``t = 0``: ``f`` is a Farkas certificate (``f >= 0``, ``b^T f = 1``, ``sum f_k A_k = 0``).

    Unlike the SVM dual, this form stays well posed up to infeasibility: on a free set F its
    system is ``f_F = M_FF^{-1} b_F / (b_F^T M_FF^{-1} b_F)`` with ``M = G + beta^2 b b^T``
    (``t = 1 / (b_F^T M_FF^{-1} b_F) - beta^2``; ``beta = 1 / max |b|`` keeps the border as
    large as G, whose scaled rows have size ~1, when the right-hand sides vary), which is
    positive definite even when the rows of F are dependent with a Farkas combination (a
    minimal infeasible set has ``rank + 1`` rows).

    Each iteration solves on the free set and frees the rows with ``f - mu / G_kk > 0``
    (``mu = G f - t b``), as :func:`attnsvm.svm.qp.pdas`. Successive free sets, within a
    round and across rounds, differ in few rows, so one factor ``M_BB = L L^T`` of a base
    set B is kept: rows entering F are appended to B (``O(|B|^2 a)``), rows leaving F stay in
    B but are *pinned* to zero through the bordered system ``[[M_BB, E_D], [E_D^T, 0]]``:
    with ``Y = L^{-1} E_D`` (columns kept up to date as B grows) only the small ``Y^T Y``
    (``|D|`` square) is factored per iteration. B is rebuilt from F when the pinned rows
    exceed a sixth of it.
    """

    def __init__(self, setup):
        cs = setup.cs
        self.setup = setup
        self.cs = cs
        self.rows = np.zeros(0, np.int64)
        self.UB, self.VB = setup.rows(self.rows)     # scaled factors of the rows of B, (s, d1) and (s, d2)
        self.L = np.zeros((0, 0))                    # (cap, cap): the factor, identity beyond s
        self.pos = np.full(cs.N, -1, np.int64)       # position of a row in B (-1: not in B)
        self.pinned = np.zeros(0, np.int64)          # rows of B held at zero (global ids)
        self.Y = np.zeros((0, 0))                    # L^{-1} E_pinned
        self.refactors = 0
        self.appended = 0
        self.why = ""                                # why the last run returned None
        self.max_rows = cs.N                         # rank + 1: more rows in B make M_BB singular
        self.last = None                             # (f, t, iteration) of the last iterate of run
        self._buf = None                             # storage of L
        top = float(np.max(np.abs(setup.rhs))) if setup.rhs.size else 0.0
        self.beta2 = 1.0 / top ** 2 if top > 0 else 1.0  # M = G + beta2 b b^T: the border as large as G
        self.beta = np.zeros(0)                      # L^{-1} rhs_B

    @property
    def s(self) -> int:
        return int(self.rows.size)

    def _mgram(self, r1: np.ndarray, r2: np.ndarray, f1=None, f2=None) -> np.ndarray:
        """``M = G + b b^T`` between rows r1 and r2 (scaled rows): ``(|r1|, |r2|)``; ``f1``, ``f2``: their
        scaled factors ``(U, V)`` when known."""
        st = self.setup
        (U1, V1), (U2, V2) = f1 or st.rows(r1), f2 or st.rows(r2)
        return (U1 @ U2.T) * (V1 @ V2.T) + self.beta2 * np.outer(st.rhs[r1], st.rhs[r2])

    def _lsolve(self, r: np.ndarray, trans: bool = False) -> np.ndarray:
        """``L^{-1} r`` (``L^{-T} r``) for ``r (s,)`` or ``(s, m)``, on the factor's leading s x s block."""
        X = np.array(r.T, dtype=np.float64, order="C", ndmin=2)      # (m, s): the right-hand sides as rows
        _tri_solve(self.L, 0, self.s, X, trans)
        return X[0] if r.ndim == 1 else X.T

    def _buffer(self, s: int, extra: int = 0) -> np.ndarray:
        """A ``(cap, cap)`` buffer for a factor of s rows and ``extra`` more to come: the current one when its
        size fits (a fresh buffer of ~100 MB costs page faults), else a new one."""
        cap = int(min(s + max(extra, s // 8, 64), max(self.max_rows, s + extra)))
        buf = self._buf
        if buf is None or buf.shape[0] < cap or buf.shape[0] > 1.3 * cap + 64:
            buf = np.zeros((cap, cap))
        return buf

    def _pad(self, buf: np.ndarray, s: int) -> None:
        """Make ``buf`` the factor: identity beyond its leading s x s block, zero beside it."""
        cap = buf.shape[0]
        buf[:s, s:] = 0.0
        buf[s:, :] = 0.0
        buf[np.arange(s, cap), np.arange(s, cap)] = 1.0
        self._buf = buf
        self.L = buf

    def _set_factor(self, L: np.ndarray, s: int, extra: int = 0) -> None:
        """Store the lower factor ``L (s, s)`` in a padded buffer (identity beyond s)."""
        buf = self._buffer(s, extra)
        if np.may_share_memory(buf, L):
            buf = np.zeros(buf.shape)
        buf[:s, :s] = L
        self._pad(buf, s)

    def _refactor(self, F: np.ndarray, G: np.ndarray, b: np.ndarray, idx: np.ndarray) -> None:
        """:meth:`rebuild` from the free rows ``F = ws_rows[idx]``, with their block of ``M`` written into the
        factor's buffer and factored there (LAPACK ``dpotrf`` with a leading dimension): no s x s temporary
        and no copy into the buffer. The old factor is overwritten: if this one fails, B is left empty (the
        next :meth:`set_free` factors afresh) and :class:`_Singular` is raised."""
        import ctypes

        potrf = _routine("dpotrf")
        s = int(idx.size)
        if potrf is None or s == 0:
            self.rebuild(F, self._mblock(G, b, idx))
            return
        buf = self._buffer(s)
        cap = buf.shape[0]
        M = self._border(principal_submatrix(G, idx, out=buf[:s, :s]), b[idx])
        info = ctypes.c_int(0)
        # column-major, the block is M^T = M (lda = cap): its upper factor U = L^T fills the C-order lower triangle
        with caller_threads():
            potrf(b"U", ctypes.byref(ctypes.c_int(s)), buf.ctypes.data, ctypes.byref(ctypes.c_int(cap)),
                  ctypes.byref(info))
        dg = np.abs(np.diag(M))
        if info.value != 0 or not dg.min() > 1e-7 * dg.max():
            self._buf = buf
            self.pos[self.rows] = -1
            self.rows = np.zeros(0, np.int64)
            self.L = np.zeros((0, 0))
            raise _Singular()
        for i in range(s - 1):                  # the C-order upper triangle still holds M
            M[i, i + 1:] = 0.0
        self._pad(buf, s)
        self._adopt(F)

    def rebuild(self, rows: np.ndarray, M_FF: np.ndarray) -> None:
        """B = rows (nothing pinned), ``M_FF (s, s)`` their block of ``M`` (overwritten)."""
        import scipy.linalg as sla

        try:    # M_FF^T is M_FF in Fortran order: LAPACK factors it in place (its upper factor is L^T)
            with caller_threads():
                L = sla.cholesky(M_FF.T, lower=False, overwrite_a=True, check_finite=False).T
        except np.linalg.LinAlgError:
            raise _Singular() from None
        dg = np.abs(np.diag(L))
        if dg.size and dg.min() <= 1e-7 * dg.max():
            raise _Singular()
        self._set_factor(L, L.shape[0])
        self._adopt(rows)

    def _adopt(self, rows: np.ndarray) -> None:
        """B := rows, nothing pinned, for the factor just stored."""
        self.pos[self.rows] = -1
        self.rows = np.asarray(rows, np.int64).copy()
        self.pos[self.rows] = np.arange(self.s)
        self.UB, self.VB = self.setup.rows(self.rows)
        self.pinned = np.zeros(0, np.int64)
        self.Y = np.zeros((self.s, 0))
        self.beta = self._lsolve(self.setup.rhs[self.rows])
        self.refactors += 1

    def append(self, new: np.ndarray, M_nn: np.ndarray) -> None:
        """Append rows ``new`` (not in B) to B: ``L -> [[L, 0], [X, L22]]``."""
        import scipy.linalg as sla

        a, s = int(new.size), self.s
        if a == 0:
            return
        fn = self.setup.rows(new)
        X = self._lsolve(self._mgram(self.rows, new, (self.UB, self.VB), fn)).T if s else np.zeros((a, 0))  # (a, s)
        try:
            L22 = sla.cholesky(M_nn - X @ X.T, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            raise _Singular() from None
        dg = np.abs(np.diag(L22))
        ref = float(np.sqrt(np.max(np.diag(M_nn))))
        if dg.min() <= 1e-7 * ref:
            raise _Singular()
        if s + a > self.L.shape[0]:
            self._set_factor(self.L[:s, :s], s, extra=a)
        self.L[s:s + a, :s] = X
        self.L[s:s + a, s:s + a] = L22
        if self.pinned.size:        # extend Y = L^{-1} E_D: the pinned rows have no entry below
            Ynew = sla.solve_triangular(L22, -X @ self.Y, lower=True, check_finite=False)
            self.Y = np.vstack([self.Y, Ynew])
        else:
            self.Y = np.zeros((s + a, 0))
        bnew = sla.solve_triangular(L22, self.setup.rhs[new] - X @ self.beta, lower=True, check_finite=False)
        self.beta = np.concatenate([self.beta, bnew])
        self.rows = np.concatenate([self.rows, new])
        self.UB, self.VB = np.concatenate([self.UB, fn[0]]), np.concatenate([self.VB, fn[1]])
        self.pos[new] = np.arange(s, s + a)
        self.appended += a

    def _unit_solve(self, p: np.ndarray) -> np.ndarray:
        """``L^{-1} E`` for the unit vectors ``E (s, m)`` at positions ``p (m,)``: ``(s, m)``.

        Column j is zero above ``p_j``, so only the factor's trailing block ``L[p_j:, p_j:]`` is
        needed. Columns are solved in groups, by increasing position: a group starts at the first
        position ``q`` left and takes the columns whose trailing block is at least 0.7 of the
        group's (``s - p_j >= 0.7 (s - q)``: at most half its work is on zero rows), in place on the
        stored factor (:func:`_tri_solve`, no copy of the block).
        """
        s, m = self.s, int(p.size)
        out = np.zeros((s, m))
        order = np.argsort(p, kind="stable")
        ps = p[order]
        tails = s - ps
        i = 0
        while i < m:
            q, n = int(ps[i]), int(tails[i])
            j = i + int(np.searchsorted(-tails[i:], -0.7 * n, side="right"))
            X = np.zeros((j - i, n))            # the columns' tails, stored transposed (Fortran (n, g))
            X[np.arange(j - i), ps[i:j] - q] = 1.0
            _tri_solve(self.L, q, s, X)
            out[q:, order[i:j]] = X.T
            i = j
        return out

    def pin(self, D: np.ndarray) -> None:
        """Pinned set := D (rows of B)."""
        keep = np.isin(self.pinned, D)
        add = D[~np.isin(D, self.pinned)]
        Y = self.Y[:, keep]
        if add.size:
            Y = np.hstack([Y, self._unit_solve(self.pos[add])])
        self.pinned = np.concatenate([self.pinned[keep], add])
        self.Y = Y

    def _mblock(self, G: np.ndarray, b: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """The block ``M_FF = G_FF + beta2 b_F b_F^T`` of the rows ``idx`` of ``G (s, s)``: ``(|idx|, |idx|)``."""
        return self._border(principal_submatrix(G, idx), b[idx])

    def _border(self, M: np.ndarray, bi: np.ndarray) -> np.ndarray:
        """``M += beta2 bi bi^T`` in place (``M (k, k)``, possibly a strided view), returned."""
        if bi.size and np.all(bi == bi[0]):
            M += self.beta2 * bi[0] * bi[0]    # equal right-hand sides (the usual 1): no outer product
        else:                                  # by bands of rows: no k x k temporary
            for a in range(0, bi.size, 512):
                M[a:a + 512] += self.beta2 * np.outer(bi[a:a + 512], bi)
        return M

    def set_free(self, F: np.ndarray, G: np.ndarray, b: np.ndarray, idx: np.ndarray, ws_rows: np.ndarray) -> None:
        """Make the free rows F (global ids; ``ws_rows[idx] == F``) exactly the unpinned rows of B."""
        if self.s == 0:
            self._refactor(F, G, b, idx)
            return
        inB = self.pos[F] >= 0
        inF = np.zeros(self.s, bool)
        inF[self.pos[F[inB]]] = True
        n_pin = int(self.s - inF.sum())
        A_idx = idx[~inB]
        # rebuild when many rows are pinned, or when B would exceed rank + 1 rows (then M_BB is singular)
        if self.s == 0 or n_pin > max(32, F.size // 6) or A_idx.size > F.size // 2 \
                or self.s + A_idx.size > self.max_rows:
            self._refactor(F, G, b, idx)
            return
        if A_idx.size:
            try:
                self.append(ws_rows[A_idx], self._mblock(G, b, A_idx))
            except _Singular:           # dependent on the pinned rows perhaps: start from F itself
                self._refactor(F, G, b, idx)
                return
            inF = np.r_[inF, np.ones(A_idx.size, bool)]
        self.pin(self.rows[~inF])

    def solve(self, F: np.ndarray, r_F: np.ndarray | None, YtY) -> np.ndarray:
        """``M_FF^{-1} r_F`` (F = the unpinned rows of B), via the bordered system; ``r_F = None``
        means the right-hand sides ``rhs_F`` (then ``L^{-1} r_B = beta - Y rhs_D`` needs no solve)."""
        import scipy.linalg as sla

        if r_F is None:
            beta = self.beta - self.Y @ self.setup.rhs[self.pinned] if self.pinned.size else self.beta
        else:
            rB = np.zeros(self.s)
            rB[self.pos[F]] = r_F
            beta = self._lsolve(rB)
        if YtY is not None:
            z = sla.cho_solve(YtY, self.Y.T @ beta, check_finite=False)
            beta = beta - self.Y @ z
        return self._lsolve(beta, trans=True)[self.pos[F]]

    def _pinned_factor(self):
        import scipy.linalg as sla

        if not self.pinned.size:
            return None
        try:
            c = sla.cho_factor(self.Y.T @ self.Y, lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            raise _Singular() from None
        return c

    def run(self, ws_rows: np.ndarray, G: np.ndarray, b: np.ndarray, eq: np.ndarray, tol: float, maxit: int = 80,
            limit: int | None = None, start: np.ndarray | None = None, max_enter: int | None = None):
        """PDAS on the min-norm-point form of the working set (``G (s, s)``, ``b``, ``eq`` in ws order).

        Returns ``(f, t, iterations)`` at a verified KKT point, or None (dependent free rows,
        cycling, a limit blocking a violated row: the caller uses the dense solvers).
        ``limit``: at most this many free rows; ``start``: the first free set (default all);
        ``max_enter``: at most this many rows enter per iteration, the most violated
        (``mu_k / sqrt(G_kk)``) first, while rows leave without limit (freeing many rows at once
        near the rank gives nearly square free sets whose multipliers swing wildly).
        """
        s = ws_rows.size
        # this run's iterate only: a run that returns before its first iterate must not leave an earlier run's
        # (another working set's rows, another size) for the caller's fallback to read
        self.last = None
        if max_enter is not None:
            maxit += 4 * (s // max_enter)
        diag = np.diag(G).copy()
        if s == 0 or np.any(diag <= 0):
            self.why = "zero row"
            return None
        free = np.ones(s, bool) if start is None else start.copy()
        free |= eq
        seen = set()
        fresh = False
        for it in range(1, maxit + 1):
            idx = np.flatnonzero(free)
            F = ws_rows[idx]
            try:
                if fresh:
                    self._refactor(F, G, b, idx)
                else:
                    self.set_free(F, G, b, idx, ws_rows)
                YtY = self._pinned_factor()
                y = self.solve(F, None, YtY)
            except _Singular:
                self.why = "dependent free rows"
                return None
            sb = float(b[idx] @ y)
            if not sb > 0:
                self.why = "b^T M^-1 b <= 0"
                return None
            f = np.zeros(s)
            f[idx] = y / sb
            t = 1.0 / sb - self.beta2
            self.last = (f, t, it)
            mu = _symv(G, f) - t * b
            new_free = eq | (f - mu / diag > 0)
            if np.array_equal(new_free, free):
                # one Newton refinement of G_FF f_F = t b_F, b_F^T f_F = 1 (see the class docstring)
                r = mu[idx]
                z = self.solve(F, r, YtY)
                c = 1.0 - float(b[idx] @ f[idx])
                g = (c + float(b[idx] @ z)) / sb
                f[idx] += -z + g * y
                t += g - self.beta2 * c
                mu = _symv(G, f) - t * b
                if _mnp_kkt_ok(f, mu, eq, free, tol):
                    return f, t, it
                if fresh:
                    self.why = "KKT not verified"
                    return None
                fresh = True                 # one more solve on a fresh factor of F
                continue
            enter = np.flatnonzero(new_free & ~free)
            n_in = enter.size
            if max_enter is not None:
                n_in = min(n_in, max_enter)
            stay = new_free & free
            if limit is not None and stay.sum() + min(n_in, 1) > limit:
                # the free set is full (rank + 1 rows): swap the free inequality row of smallest
                # f (the least needed) for the most violated row
                cand = np.flatnonzero(stay & ~eq)
                if cand.size == 0 or enter.size == 0:
                    self.why = "limit"
                    return None
                stay[cand[np.argmin(f[cand])]] = False
                n_in = 1
            elif limit is not None:
                n_in = min(n_in, int(limit - stay.sum()))
            if n_in < enter.size:       # the most violated rows enter first
                enter = enter[np.argsort(mu[enter] / np.sqrt(diag[enter]))[:n_in]]
                new_free = stay.copy()
                new_free[enter] = True
                if np.array_equal(new_free, free):
                    self.why = "limit blocks"
                    return None
            fresh = False
            key = new_free.tobytes()
            if key in seen:
                self.why = "cycling"
                return None
            seen.add(key)
            free = new_free
        self.why = "iteration limit"
        return None


def _mnp_kkt_ok(f, mu, eq, free, tol) -> bool:
    """KKT of the min-norm-point form, relative to the size of f: ``f >= 0`` and ``mu = 0`` on
    free inequality rows, ``mu >= 0`` on the others (equality rows: ``mu = 0``)."""
    ineq = ~eq
    scale = max(float(np.max(np.abs(f))), 1e-300)
    mscale = max(float(np.max(np.abs(mu[free]), initial=0.0)), 1e-300)
    if np.any(f[ineq] < -1e-9 * scale):
        return False
    # mu is a residual of size ~ eps ||G|| ||f|| on the free rows; off them it must not be negative
    return bool(np.all(mu[~free & ineq] >= -max(tol, 1e3 * mscale)))
