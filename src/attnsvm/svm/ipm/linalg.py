"""Dense linear algebra of the interior-point method: LAPACK calls, row bases and the blocked Newton solver.

The hot paths call LAPACK directly (potrf, syevr, gesdd, trtri, trtrs, potrs): the numpy / scipy wrappers cost
tens of microseconds a call, which small solves feel."""

from __future__ import annotations

import functools

import numpy as np
import scipy.linalg as sla


def distinct_rows(V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Vq (q, d), inv (N,))``: the distinct rows of ``V (N, d)`` in lexicographic order (as
    ``np.unique(V, axis=0)``) and the index of each row's in ``Vq`` (``V == Vq[inv]``); a lexsort, without
    np.unique's structured-array overhead, which small solves feel."""
    N = V.shape[0]
    if N == 0:
        return V[:0].copy(), np.zeros(0, np.intp)
    order = np.lexsort(V.T[::-1])
    Vs = V[order]
    new = np.empty(N, bool)
    new[0] = True
    np.any(Vs[1:] != Vs[:-1], axis=1, out=new[1:])
    inv = np.empty(N, np.intp)
    inv[order] = np.cumsum(new) - 1
    return Vs[new], inv


def row_space_basis(A: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Orthonormal basis ``(d, r)`` of the row space of ``A (m, d)`` (SVD, relative cut ``rtol``)."""
    if A.size == 0:
        return np.zeros((A.shape[1], 0))
    _, s, vt = svd(A)
    if s.size == 0 or s[0] == 0:
        return np.zeros((A.shape[1], 0))
    return vt[: int(np.sum(s > rtol * s[0]))].T.copy()


def mT(a):
    """Transpose of the last two axes (a matrix, or a stack of matrices)."""
    return a.swapaxes(-1, -2)


#: the ufunc reductions of 1-D arrays in the iteration's hot spots, called directly: ``ndarray.min`` / ``max`` /
#: ``sum`` reach the same reductions through a Python-level wrapper, which small solves feel
min_reduce, max_reduce, add_reduce = np.minimum.reduce, np.maximum.reduce, np.add.reduce


@functools.lru_cache(maxsize=64)
def eye(n: int) -> np.ndarray:
    """The identity ``(n, n)``, read-only and cached (a fresh ``np.eye`` a call is overhead small solves feel)."""
    out = np.eye(n)
    out.flags.writeable = False
    return out


def sym(T):
    return 0.5 * (T + mT(T))


def z_half(G, C, Si):
    """``Z^{-1} / 2 = [[I + C G^T, C], [C^T, S^{-1}]]`` (r1 + r2 square, or a stack of them) from
    ``G, C (..., r1, r2)`` and the symmetric ``Si (..., r2, r2)``; exactly symmetric (the leading block
    ``sym(C G^T) + I`` is formed in place)."""
    r1 = G.shape[-2]
    n = r1 + Si.shape[-1]
    Zh = np.empty(G.shape[:-2] + (n, n))
    T = C @ mT(G)
    Z11 = Zh[..., :r1, :r1]
    np.add(T, mT(T), out=Z11)
    Z11 *= 0.5
    Z11 += eye(r1)                     # on every matrix of a stack; adding 0 off the diagonal changes nothing
    Zh[..., :r1, r1:] = C
    Zh[..., r1:, :r1] = mT(C)
    Zh[..., r1:, r1:] = Si
    return Zh


def chol(S):
    """Lower Cholesky factor of the symmetric ``S (n, n)``, or None if S is not (numerically) positive
    definite (LAPACK potrf directly: numpy's wrapper costs more than a small factorization)."""
    if S.shape[0] == 0:
        return np.zeros((0, 0))
    L, info = sla.lapack.dpotrf(S, lower=1, clean=1)
    if info != 0 or not finite_positive(L.diagonal()):
        return None
    return L


def finite_positive(d) -> bool:
    """Whether the diagonal ``d`` of a Cholesky factor that potrf accepted (info 0) is finite and positive (a
    NaN or inf anywhere in the factor reaches the diagonal entry of its row, so the diagonal decides). potrf
    stops at a pivot ``<= 0``, so each entry is positive, NaN or inf: one sum tells (NaN and inf propagate)."""
    return bool(0.0 < float(add_reduce(d)) < np.inf)


def eig_min(K) -> float:
    """Smallest eigenvalue of the symmetric ``K (n, n)`` (its lower triangle; LAPACK syevr directly, the first
    eigenvalue only, with its workspace sizes given: fewer calls than syevd's query)."""
    n = K.shape[0]
    w, _, _, _, info = sla.lapack.dsyevr(K, compute_v=0, range="I", il=1, iu=1, lower=1, lwork=max(1, 26 * n),
                                          liwork=max(1, 10 * n))
    if info != 0:
        raise np.linalg.LinAlgError(f"eigenvalues did not converge (syevr info {info})")
    return float(w[0])


def svd(M):
    """The thin SVD ``(U (m, k), s (k,), Vt (k, n))``, ``k = min(m, n)``, of a non-empty ``M (m, n)``: LAPACK gesdd
    directly (what ``np.linalg.svd(M, full_matrices=False)`` computes, with less call overhead), numpy's if it does
    not converge."""
    u, s, vt, info = sla.lapack.dgesdd(M, compute_uv=1, full_matrices=0)
    if info != 0:
        return np.linalg.svd(M, full_matrices=False)
    return u, s, vt


def singular_values(M) -> np.ndarray:
    """The singular values of ``M (m, n)``, largest first: ``(min(m, n),)`` (LAPACK gesdd directly, numpy's
    SVD if it does not converge; ``np.linalg.norm(M, 2)`` and ``np.linalg.svd`` cost more call overhead,
    which small solves feel)."""
    if M.size == 0:
        return np.zeros(0)
    s, info = sla.lapack.dgesdd(M, compute_uv=0)[1::2]
    if info != 0:
        return np.linalg.svd(M, compute_uv=False)
    return s


def nuclear_norm(M) -> float:
    """``||M||_*`` of ``M (r1, r2)``: the sum of its singular values."""
    return float(add_reduce(singular_values(M))) if M.size else 0.0


def spectral_norm(M) -> float:
    """``||M||_2`` of ``M (m, n)``: its largest singular value (0 for an empty M)."""
    return float(singular_values(M)[0]) if M.size else 0.0


def chol_S(G):
    """Lower Cholesky factor of ``S = I - G^T G``, or None if S is not positive definite."""
    return chol(eye(G.shape[1]) - G.T @ G)


def tri_inv(L):
    """``L^{-1}`` of the lower triangular ``L (n, n)`` (LAPACK trtri directly). trtri reads the lower triangle and
    keeps L's entries above the diagonal, which are zero for the factors of :func:`chol` (the step bounds'
    products with ``L^{-1}`` need them zero)."""
    if L.shape[0] == 0:
        return np.zeros((0, 0))
    Li, info = sla.lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"triangular inverse failed (trtri info {info})")
    return Li


def trsm(L, B, trans: int = 0):
    """``L^{-1} B`` (``L^{-T} B`` with ``trans=1``) for lower triangular ``L`` (LAPACK trtrs directly:
    scipy's wrapper costs more than a small solve)."""
    X, info = sla.lapack.dtrtrs(L, B, lower=1, trans=trans)
    if info != 0:
        raise np.linalg.LinAlgError(f"triangular solve failed (trtrs info {info})")
    return X


def potrs(F, B, lower: bool):
    """``(F F^T)^{-1} B`` (lower) or ``(F^T F)^{-1} B`` (upper) from a Cholesky factor F (LAPACK potrs directly)."""
    X, info = sla.lapack.dpotrs(F, B, lower=int(lower))
    if info != 0:
        raise np.linalg.LinAlgError(f"Cholesky solve failed (potrs info {info})")
    return X


def blocks(X11, X12, X22):
    """``[[X11, X12], [X12^T, X22]]`` of matrices or stacks of them (one allocation; np.block costs
    more than the copies)."""
    r1 = X11.shape[-1]
    n = r1 + X22.shape[-1]
    X = np.empty(X12.shape[:-2] + (n, n))
    X[..., :r1, :r1] = X11
    X[..., :r1, r1:] = X12
    X[..., r1:, :r1] = mT(X12)
    X[..., r1:, r1:] = X22
    return X


#: rows of one block of :func:`factor_lower` (a block of all its columns stays in the cache)
SCHUR_BLOCK_ROWS = 128


def chol_upper_in_place(Mf):
    """The upper Cholesky factor ``U (U^T U = Mf)`` of the Fortran-ordered ``Mf (N, N)`` from its upper
    triangle, written over it (LAPACK potrf), or None when Mf is not (numerically) positive definite."""
    F, info = sla.lapack.dpotrf(Mf, lower=0, clean=0, overwrite_a=1)
    return F if info == 0 and finite_positive(F.diagonal()) else None


def factor_lower(form, N: int, diag, buf=None):
    """A solver of ``(M + diag(diag)) r = b`` for a symmetric positive semidefinite ``M (N, N)`` (the Newton
    system's Schur matrix, the clean-up's Gram matrix), from M's lower triangle formed block of rows by block
    of rows by ``form(I, J)`` (``M[I, J]``, ``J`` the columns up to the block's diagonal): ``diag (N,)`` is added
    to the diagonal and each block Jacobi-scaled as it is formed (one pass over memory; potrf reads only this
    triangle), then the triangle is factorized in place, in ``buf (N, N)`` (C order) when given, which the
    solver then owns. When the factorization fails the triangle is formed again with a growing diagonal
    shift (1e-14, then x99), the last resort an eigenvalue solve (of the triangle)."""
    if buf is None:                     # C order: its lower triangle is the upper one of buf.T (Fortran order)
        buf = np.empty((N, N))
    sc = np.empty(N)
    flat = buf.reshape(-1)              # a view (buf is C-contiguous): its diagonal is flat[::N + 1]

    def fill(shift):
        for i0 in range(0, N, SCHUR_BLOCK_ROWS):
            i1 = min(N, i0 + SCHUR_BLOCK_ROWS)
            B = np.ascontiguousarray(form(slice(i0, i1), slice(0, i1)))
            dg = B.reshape(-1)[i0::i1 + 1]          # the view B[k, i0 + k], k < i1 - i0 (strided, no index arrays)
            dg += diag[i0:i1]
            t = np.where(dg > 0, dg, 1.0)
            np.sqrt(t, out=t)
            s = np.divide(1.0, t, out=sc[i0:i1])
            B *= s[:, None]
            np.multiply(B, sc[None, :i1], out=buf[i0:i1, :i1])
            if shift:
                flat[i0 * (N + 1):i1 * (N + 1):N + 1] += shift

    reg = shift = 0.0
    for _ in range(8):
        shift += reg
        fill(shift)
        F = chol_upper_in_place(buf.T)
        if F is not None:
            return lambda r: sc * potrs(F, sc * r, lower=False)
        reg = 1e-14 if reg == 0 else reg * 99
    fill(0.0)
    w, Q = np.linalg.eigh(buf, UPLO="L")          # reads the lower triangle
    cut = 1e-13 * max(float(w.max()), 1e-300)
    winv = np.where(w > cut, 1.0 / np.maximum(w, cut), 0.0)
    return lambda r: sc * (Q @ (winv * (Q.T @ (sc * r))))
