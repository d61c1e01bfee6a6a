"""Primal-dual interior-point solver of the reduced nuclear-norm SVM (numpy / scipy only).

The problem
-----------
Let ``B (d2, r2)`` be an orthonormal basis of the span of the w's and ``b_k = B^T w_k``
(rows of ``Bm (N, r2)``); on the u side ``a_k = u_k`` when ``d1 <= N`` (only inner
products ``a_k . a_l`` matter, rank deficiency is harmless) and ``a_k = P^T u_k`` with an
orthonormal basis ``P (d1, r1)`` of the u's otherwise (rows of ``A (N, r1)``). The
nuclear-norm SVM is the SDP::

    min  (tr X11 + tr X22) / 2   s.t.  a_k^T X12 b_k - s_k = rhs_k  (s_k >= 0; s_k = 0 on equality rows)
         X = [[X11, X12], [X12^T, X22]] >= 0                       (size r1 + r2)

whose optimal ``X12 = M`` gives ``W = P M B^T`` with ``||W||_* = (tr X11 + tr X22) / 2``,
and its dual::

    max  rhs^T lam   s.t.  Z = 1/2 [[I, -G], [-G^T, I]] >= 0,  lam_k >= 0 on inequality rows,
         G = G(lam) = A^T diag(lam) Bm  (r1, r2),

i.e. ``||G||_2 <= 1``. ``Z`` is never formed: with ``S = I - G^T G`` (r2 x r2) and
``C = G S^{-1}``, ``Z^{-1} = 2 [[I + C G^T, C], [C^T, S^{-1}]]``.

The method
----------
An infeasible-primal, feasible-dual path-following method with the HKM direction
and Mehrotra's predictor-corrector. The dual stays exactly feasible (``Z`` keeps its
block structure), so the only N x N work per iteration is the Schur complement::

    M_kl = <A_k, X A_l Z^{-1}>
         = 1/2 [ K1 o K2 + (K1 o K2)^T + (Bm X22 Bm^T) o (A (I + C G^T) A^T)
                 + (A X11 A^T) o (Bm S^{-1} Bm^T) ],
    K1 = Bm X12^T A^T,  K2 = A C Bm^T,

(``o`` the elementwise product), ``O(N^2 (r1 + r2) + N r1^2)`` to form and one
Cholesky factorization ``O(N^3 / 3)``; nothing of size ``r1 r2 x N`` is built, the
largest other matrix is X, ``(r1 + r2)^2``. At a central point ``X = mu Z^{-1}`` and M
is ``mu`` times the Hessian of the dual barrier ``-log det S``. The Newton solver forms only
M's lower triangle (the one the factorization reads), in blocks of rows that stay in the cache,
each Jacobi-scaled as it is formed (:func:`_factor_lower`): half the N x N x r1 products and one
pass over the N x N memory.

The primal direction is one ``(r1 + r2)`` square matrix, ``dX = 2 sigma mu Zh - X + sym(X Y)`` with
``Zh = Z^{-1} / 2`` and ``Y = -dZ Z^{-1} = [[dG Zh_21, dG Zh_22], [dG^T Zh_11, dG^T Zh_12]]`` (three
products; beyond ``r1 + r2 = 64`` from Y's rank-``2 min(r1, r2)`` factors, :meth:`_Problem.XY`). A step's
guard factorizes the next X; the factor travels with the iterate (the next Newton system reuses it).
The step bounds are one eigenvalue each of a congruent matrix (the primal one formed by LAPACK ``sygst``, or
up to ``r1 + r2 = 64`` by products with the inverse of X's factor; the dual one, up to ``r1 + r2 = 64``, from
the inverse of S's factor; beyond 64 the dual one by bisection on Cholesky tests), the dual one after a Cholesky
test of the full (capped) dual step. Beyond 64 the predictor's primal bound comes from a small exact problem
(its ``dX`` is ``-X`` plus a low-rank term, :func:`_psd_step_low_rank`), and beyond 256 the corrector's is a
Lanczos Ritz value (:data:`_PSD_STEP_DENSE_MAX`, :func:`_lanczos_min`). The dual step guard's ``G`` travels with the iterate too.
Up to 1024 rows the primal and the dual take the same step length (the dual bound is then sought below the
primal one), beyond each its own (:data:`_EQUAL_STEPS_MAX_ROWS`).

Details: rows and right-hand sides are scaled to at most 1 (then ``||M||_* >= 1`` and
the gap test is relative); the start is the Frobenius solution (primal, plus a
multiple of I) and the Frobenius multipliers scaled to ``||G|| = 1/2`` (dual); the
optimality test uses the true objective ``||X12||_*``, not ``(tr X11 + tr X22) / 2``;
rounding-level violations of the last iterates (~1e-10) are removed by the
least-Frobenius-norm correction on the nearly active rows, which makes equality rows
exact.

Why not the simpler dual barrier (Newton on ``-t rhs^T lam - log det S - sum log lam``,
which needs no X): tried first, it stalls near the curved boundary of the
spectral-norm ball, where Newton steps keep pointing out of the ball (hundreds of
steps at (n, T, d) = (64, 32, 768)); the primal iterate X removes that (~25
iterations).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

from attnsvm._validate import check_number

__all__ = ["IPMResult", "nuclear_ipm", "query_basis", "row_space_basis", "singular_values", "spectral_norm"]

#: the per-iteration trace (DEBUG level, silent by default): every record carries a dict ``record.ipm`` with
#: ``kind`` "iterate" (``N``, ``mu``, ``gap``, ``viol``, ``rp`` the largest primal residual ``|a_k^T X12 b_k - s_k -
#: rhs_k|``), "step" (``sigma``, ``mu_aff`` the affine-scaling mu, the bounds ``ap_max``, ``ad_max``, the slacks' part
#: ``ap_lp >= ap_max`` of the primal one, and the steps taken ``ap``, ``ad``) or, from :mod:`attnsvm.svm.barrier_grow`,
#: "join" / "drop" (``rows`` moved, ``N`` after); ``benchmarks/nuclear_steps.py --trace`` prints it
_log = logging.getLogger("attnsvm.svm.barrier")


def _tracing() -> bool:
    """Whether the trace (:data:`_log`) is on: its fields are computed only then."""
    return _log.isEnabledFor(logging.DEBUG)


def _trace(kind: str, **fields) -> None:
    """One record of the trace (see :data:`_log`)."""
    _log.debug("%s %s", kind, fields, extra={"ipm": dict(fields, kind=kind)})


@dataclass
class IPMResult:
    """Result of :func:`nuclear_ipm`.

    Attributes
    ----------
    status : "optimal" (relative gap <= tol, violation <= feas_tol) or "inaccurate"
        (stopped at a limit, a stall or the rounding limit; the best iterate is returned)
    W : (d1, d2) primal solution
    lam : (N,) dual multipliers (strictly dual feasible: ``||sum lam_k u_k w_k^T||_2 < 1``)
    info : dict: iterations, rel_gap, violation (relative to ``1 + max |rhs|`` of the scaled
        rows), reduced_shape ``[r1, r2]``, seconds, and ``stopped`` when a limit ended the run
    """

    status: str
    W: np.ndarray
    lam: np.ndarray
    info: dict = field(default_factory=dict)


def query_basis(V: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """Orthonormal basis ``(d2, r)`` of the span of the rows of ``V (N, d2)``.

    The rows usually repeat (one query per sample): the SVD runs on the distinct rows.
    """
    if V.size == 0:
        return np.zeros((V.shape[1], 0))
    return row_space_basis(distinct_rows(V)[0], rtol)


def distinct_rows(V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Vq (q, d), inv (N,))``: the distinct rows of ``V (N, d)`` in lexicographic order (as
    ``np.unique(V, axis=0)``) and the index of each row's in ``Vq`` (``V == Vq[inv]``); a lexsort, without
    np.unique's structured-array overhead (~0.2 ms a call, which small solves feel)."""
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
    _, s, vt = _svd(A)
    if s.size == 0 or s[0] == 0:
        return np.zeros((A.shape[1], 0))
    return vt[: int(np.sum(s > rtol * s[0]))].T.copy()


#: :class:`_Problem` works on the distinct queries when there are at most this fraction of the rows
_GROUPED_MAX = 0.75
#: ... and its maps ``Gmap`` / ``amap`` too from this many rows on (below, the sparse sum costs more than it saves)
_GROUPED_MAPS_MIN_ROWS = 256
#: ... and only from this many rows on (below, the plain products with ``Bm`` are fewer calls than the expansion
#: by the query index)
_GROUPED_MIN_ROWS = 128


def _t(a):
    """Transpose of the last two axes (a matrix, or a stack of matrices)."""
    return a.swapaxes(-1, -2)


#: the ufunc reductions of 1-D arrays in the iteration's hot spots, called directly: ``ndarray.min`` / ``max`` /
#: ``sum`` reach the same reductions through a Python-level wrapper (~1-2 us a call, which small solves feel)
_min_reduce, _max_reduce, _add_reduce = np.minimum.reduce, np.maximum.reduce, np.add.reduce


@functools.lru_cache(maxsize=64)
def _eye(n: int) -> np.ndarray:
    """The identity ``(n, n)``, read-only and cached (``np.eye`` costs a few us a call, which small solves feel)."""
    out = np.eye(n)
    out.flags.writeable = False
    return out


def _sym(T):
    return 0.5 * (T + _t(T))


class _Dual:
    """Dual quantities at ``lam``: G, the Cholesky factor L of S and its inverse ``Li = L^{-1}``, S^{-1}, C,
    ``Zh = Z^{-1} / 2`` and, when first asked for, ``AC = A C (N, r2)``; ``L`` and ``G`` when already known at
    ``lam`` (the step guard computed them)."""

    def __init__(self, A, Bm, lam, L=None, G=None):
        self.A = A
        self.G = A.T @ (lam[:, None] * Bm) if G is None else G
        self.L = _chol_S(self.G) if L is None else L
        if self.L is None:
            raise np.linalg.LinAlgError("dual iterate left the spectral-norm ball")
        self.Li = _tri_inv(self.L)
        Lit = self.Li.T
        self.Si = Lit @ Lit.T            # S^{-1} = L^{-T} L^{-1}; a product with its own transpose: exactly symmetric
        self.C = self.G @ self.Si
        self.Zh = _z_half(self.G, self.C, self.Si)

    @functools.cached_property
    def AC(self) -> np.ndarray:
        """``A C = (A G) S^{-1}`` (N, r2): read only without the distinct queries (:meth:`_Problem.schur_parts`,
        the Newton system's ``A(Z^{-1})``), where it is two N x r x r products an iteration."""
        return (self.A @ self.G) @ self.Si


def _z_half(G, C, Si):
    """``Z^{-1} / 2 = [[I + C G^T, C], [C^T, S^{-1}]]`` (r1 + r2 square, or a stack of them) from
    ``G, C (..., r1, r2)`` and the symmetric ``Si (..., r2, r2)``; exactly symmetric (the leading block
    ``sym(C G^T) + I`` is formed in place)."""
    r1 = G.shape[-2]
    n = r1 + Si.shape[-1]
    Zh = np.empty(G.shape[:-2] + (n, n))
    T = C @ _t(G)
    Z11 = Zh[..., :r1, :r1]
    np.add(T, _t(T), out=Z11)
    Z11 *= 0.5
    Z11 += _eye(r1)                     # on every matrix of a stack; adding 0 off the diagonal changes nothing
    Zh[..., :r1, r1:] = C
    Zh[..., r1:, :r1] = _t(C)
    Zh[..., r1:, r1:] = Si
    return Zh


def _chol(S):
    """Lower Cholesky factor of the symmetric ``S (n, n)``, or None if S is not (numerically) positive
    definite (LAPACK potrf directly: numpy's wrapper costs ~25 us a call, which small solves feel)."""
    if S.shape[0] == 0:
        return np.zeros((0, 0))
    L, info = sla.lapack.dpotrf(S, lower=1, clean=1)
    if info != 0 or not _finite_positive(L.diagonal()):
        return None
    return L


def _finite_positive(d) -> bool:
    """Whether the diagonal ``d`` of a Cholesky factor that potrf accepted (info 0) is finite and positive (a
    NaN or inf anywhere in the factor reaches the diagonal entry of its row, so the diagonal decides). potrf
    stops at a pivot ``<= 0``, so each entry is positive, NaN or inf: one sum tells (NaN and inf propagate)."""
    return bool(0.0 < float(_add_reduce(d)) < np.inf)


def _eig_min(K) -> float:
    """Smallest eigenvalue of the symmetric ``K (n, n)`` (its lower triangle; LAPACK syevr directly, the first
    eigenvalue only, with its workspace sizes given: fewer calls than syevd's query)."""
    n = K.shape[0]
    w, _, _, _, info = sla.lapack.dsyevr(K, compute_v=0, range="I", il=1, iu=1, lower=1, lwork=max(1, 26 * n),
                                          liwork=max(1, 10 * n))
    if info != 0:
        raise np.linalg.LinAlgError(f"eigenvalues did not converge (syevr info {info})")
    return float(w[0])


def _svd(M):
    """The thin SVD ``(U (m, k), s (k,), Vt (k, n))``, ``k = min(m, n)``, of a non-empty ``M (m, n)``: LAPACK gesdd
    directly (what ``np.linalg.svd(M, full_matrices=False)`` computes, ~10 us a call less), numpy's if it does
    not converge."""
    u, s, vt, info = sla.lapack.dgesdd(M, compute_uv=1, full_matrices=0)
    if info != 0:
        return np.linalg.svd(M, full_matrices=False)
    return u, s, vt


def singular_values(M) -> np.ndarray:
    """The singular values of ``M (m, n)``, largest first: ``(min(m, n),)`` (LAPACK gesdd directly, numpy's
    SVD if it does not converge; ``np.linalg.norm(M, 2)`` and ``np.linalg.svd`` cost ~10-20 us more a call,
    which small solves feel)."""
    if M.size == 0:
        return np.zeros(0)
    s, info = sla.lapack.dgesdd(M, compute_uv=0)[1::2]
    if info != 0:
        return np.linalg.svd(M, compute_uv=False)
    return s


def _nuclear_norm(M) -> float:
    """``||M||_*`` of ``M (r1, r2)``: the sum of its singular values."""
    return float(_add_reduce(singular_values(M))) if M.size else 0.0


def spectral_norm(M) -> float:
    """``||M||_2`` of ``M (m, n)``: its largest singular value (0 for an empty M)."""
    return float(singular_values(M)[0]) if M.size else 0.0


def _chol_S(G):
    """Lower Cholesky factor of ``S = I - G^T G``, or None if S is not positive definite."""
    return _chol(_eye(G.shape[1]) - G.T @ G)


#: :func:`_lmi_step` computes the exact step from one eigenvalue up to this reduced size ``r1 + r2``, and
#: bisects on Cholesky tests of the ``r2 x r2`` matrix ``S(alpha)`` beyond
_LMI_EIG_MAX = 64


def _lmi_step(G, dG, cap, rtol=1e-3, L=None, Li=None):
    """Largest ``alpha <= cap`` with ``||G + alpha dG||_2 < 1`` (``G, dG (r1, r2)``; ``L`` the Cholesky
    factor of ``S = I - G^T G`` and ``Li`` its inverse, if known).

    The dual LMI ``[[I, G], [G^T, I]] > 0`` is linear in alpha: with its Cholesky factor
    ``[[I, 0], [G^T, L]]`` the step bound is ``-1 / lambda_min`` of the congruent direction
    ``K = [[0, E], [E^T, -L^{-1} (dG^T G + G^T dG) L^{-T}]]``, ``E = dG L^{-T}`` (exact; used up to
    ``r1 + r2 =`` :data:`_LMI_EIG_MAX`, :func:`_lmi_step_eig`). Beyond, ``S(alpha) = S0 - alpha S1 - alpha^2 S2``:
    the admissible alphas form an interval containing 0 (a line through a norm ball), found by bisection
    (relative precision ``rtol``) on Cholesky tests of the smaller ``r2 x r2`` matrix. Both first test
    ``alpha = cap`` with one Cholesky factorization of ``S(cap)`` (``rtol`` applies to the bisection only).
    """
    r1, r2 = G.shape
    if r1 + r2 <= _LMI_EIG_MAX:
        return _lmi_step_eig(G, dG, cap, L, Li)
    GtD = G.T @ dG
    S1 = GtD + GtD.T
    S0 = -(G.T @ G)
    S0.flat[:: r2 + 1] += 1.0
    S2 = dG.T @ dG

    def ok(a):
        return _chol(S0 - a * S1 - a * a * S2) is not None

    if ok(cap):                 # the whole step is feasible (often, late in the run): no eigenvalue needed
        return cap
    lo, hi = 0.0, cap
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _lmi_step_eig(G, dG, cap, L=None, Li=None):
    """:func:`_lmi_step` up to ``r1 + r2 =`` :data:`_LMI_EIG_MAX`, in few calls: the test of ``alpha = cap`` is
    one Cholesky factorization of ``S(cap) = I - (G + cap dG)^T (G + cap dG)``; else ``-1 / lambda_min`` of
    ``K = [[0, E], [E^T, -(E^T F + F^T E)]]`` with ``E^T = L^{-1} dG^T`` and ``F^T = L^{-1} G^T`` (one triangular
    solve of both, or one product with ``Li = L^{-1}`` when given), since
    ``L^{-1} (dG^T G + G^T dG) L^{-T} = E^T F + F^T E``; only K's lower triangle is formed."""
    r1, r2 = G.shape
    if _chol_S(G + cap * dG) is not None:      # the whole step is feasible (often, late in the run)
        return cap
    if Li is None:
        L = _chol_S(G) if L is None else L
        if L is None:
            return 0.0
        EF = _trsm(L, np.concatenate([dG, G]).T)              # (r2, 2 r1): [E^T, F^T]
    else:
        EF = Li @ np.concatenate([dG, G]).T
    Et = EF[:, :r1]
    H = Et @ EF[:, r1:].T                                      # E^T F
    K = np.empty((r1 + r2, r1 + r2))
    K[:r1, :r1] = 0.0
    K[r1:, :r1] = Et
    np.add(H, H.T, out=K[r1:, r1:])
    K[r1:, r1:] *= -1.0
    lmin = _eig_min(K)                                         # reads the lower triangle
    return cap if lmin >= -1.0 / cap else -1.0 / lmin


def _tri_inv(L):
    """``L^{-1}`` of the lower triangular ``L (n, n)`` (LAPACK trtri directly). trtri reads the lower triangle and
    keeps L's entries above the diagonal, which are zero for the factors of :func:`_chol` (the step bounds'
    products with ``L^{-1}`` need them zero)."""
    if L.shape[0] == 0:
        return np.zeros((0, 0))
    Li, info = sla.lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"triangular inverse failed (trtri info {info})")
    return Li


def _trsm(L, B, trans: int = 0):
    """``L^{-1} B`` (``L^{-T} B`` with ``trans=1``) for lower triangular ``L`` (LAPACK trtrs directly:
    scipy's wrapper costs ~60 us a call)."""
    X, info = sla.lapack.dtrtrs(L, B, lower=1, trans=trans)
    if info != 0:
        raise np.linalg.LinAlgError(f"triangular solve failed (trtrs info {info})")
    return X


def _potrs(F, B, lower: bool):
    """``(F F^T)^{-1} B`` (lower) or ``(F^T F)^{-1} B`` (upper) from a Cholesky factor F (LAPACK potrs directly)."""
    X, info = sla.lapack.dpotrs(F, B, lower=int(lower))
    if info != 0:
        raise np.linalg.LinAlgError(f"Cholesky solve failed (potrs info {info})")
    return X


#: :func:`_min_eig_congruent` forms ``L^{-1} dX L^{-T}`` as two products with a given ``L^{-1}`` up to this size
#: (fewer calls than sygst when X's factor serves two step bounds), by sygst beyond
_CONGRUENT_BY_INVERSE_MAX = 64


def _min_eig_congruent(L, dX, Li=None) -> float:
    """Smallest eigenvalue of ``L^{-1} dX L^{-T}`` (dX symmetric): the step bound of :func:`_psd_step`
    (``Li @ dX @ Li^T`` when ``Li = L^{-1}`` is given, else LAPACK sygst forms the lower triangle of the
    congruent matrix in one call)."""
    if Li is not None:
        return _eig_min((Li @ dX) @ Li.T)
    K, info = sla.lapack.dsygst(dX, L, itype=1, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"congruence failed (sygst info {info})")
    if K.shape[0] <= 64:  # the full solver: less call overhead than the subset solver
        return _eig_min(K)
    return float(sla.eigh(K, lower=True, eigvals_only=True, subset_by_index=[0, 0], check_finite=False)[0])


#: :func:`_psd_step` finds ``lambda_min(L^{-1} dX L^{-T})`` densely (sygst and a subset eigensolver) up to this size,
#: by Lanczos (:func:`_lanczos_min`) beyond. Measured on the correctors' directions of exported real-minilm-heads
#: instances (benchmarks/nuclear_steps.py --export; one thread, loaded machine): at n = 202 dense 1.5-1.9 ms a call,
#: ARPACK 2.5-2.7; at n = 315 dense 5.8-6.1, ARPACK 3.6-4.5 (Ritz values within 2.5e-10 relative of the dense ones).
#: :func:`_lanczos_min` on 48 correctors' directions of layer 3's 16-sentence Gen-SVMs (n = 315): 1.1-1.3 ms a call
#: against dense 4.2-5.1 and ARPACK with ``L^{-1}`` 2.8-3.9 (its trtri included), 15.5 steps on average. On random
#: symmetric directions (a dense spectrum at its lower end) it takes 25-38 steps and the dense solver is faster up to
#: n = 315: the threshold stays where ARPACK put it
_PSD_STEP_DENSE_MAX = 256

#: :func:`_lanczos_min` accepts a Ritz pair whose residual is at most this times ``max(|theta|, eps^(2/3))``
#: (ARPACK's test, at the tolerance :func:`_psd_step` called ARPACK's ``eigsh`` with before)
_LANCZOS_TOL = 1e-8


def _lanczos_min(mv, v0, max_steps: int) -> float | None:
    """Smallest Ritz value of the symmetric operator ``mv`` (a function of ``v (n,)``) from the start ``v0 (n,)``:
    Lanczos with full reorthogonalization, the tridiagonal ``T_j`` solved (LAPACK stev) after every step, stopped
    at the first ``j`` whose smallest Ritz pair ``(theta, T_j s = theta s)`` has residual
    ``||mv(y) - theta y|| = beta_j |s_j| <=`` :data:`_LANCZOS_TOL` ``max(|theta|, eps^(2/3))``; None if none does
    within ``max_steps`` (``<= n``) steps. A Ritz value is a Rayleigh quotient: ``theta >= lambda_min``.

    One pass of classical Gram-Schmidt against all earlier vectors keeps them orthonormal (a few hundred entries,
    some tens of vectors: cheap next to the products), so no spurious copies of converged Ritz values appear."""
    n = v0.shape[0]
    Q = np.empty((max_steps + 1, n))
    alpha, beta = np.empty(max_steps), np.empty(max_steps)
    Q[0] = v0 / np.linalg.norm(v0)
    floor = np.finfo(float).eps ** (2.0 / 3.0)
    for j in range(max_steps):
        w = mv(Q[j])
        alpha[j] = a = float(Q[j] @ w)
        w -= a * Q[j]
        if j:
            w -= beta[j - 1] * Q[j - 1]
        Qj = Q[: j + 1]
        w -= (Qj @ w) @ Qj
        beta[j] = b = float(np.linalg.norm(w))
        if j:
            theta, s, info = sla.lapack.dstev(alpha[: j + 1], beta[:j], compute_v=1)
            if info != 0:
                return None
        else:                                     # T_1 = [alpha_0] (stev needs a subdiagonal)
            theta, s = alpha[:1], np.ones((1, 1))
        if b * abs(s[j, 0]) <= _LANCZOS_TOL * max(abs(theta[0]), floor):
            return float(theta[0])
        Q[j + 1] = w / b
    return None


def _psd_step(L, dX, cap, Li=None):
    """Largest ``alpha <= cap`` with ``X + alpha dX >= 0`` for ``X = L L^T > 0`` (dX symmetric; ``Li = L^{-1}``
    if known).

    Beyond :data:`_PSD_STEP_DENSE_MAX` the smallest eigenvalue is a Lanczos Ritz value (:func:`_lanczos_min`, from a
    fixed start; products by two triangular solves with L, or by ``Li`` when given): a Rayleigh quotient, so
    ``>= lambda_min`` and the bound may exceed the exact one by about the Lanczos tolerance (1e-8 relative). The step
    taken stays inside the cone regardless: :func:`_step_lengths` takes ``gamma <= 0.99`` of the bound and its guard
    factorizes ``X + alpha dX`` by Cholesky, shortening the step until that succeeds. If Lanczos does not converge
    within ``min(n, 200)`` steps, the dense computation decides."""
    n = L.shape[0]
    if n <= _PSD_STEP_DENSE_MAX:
        lmin = _min_eig_congruent(L, dX, Li)
    else:
        if Li is not None:
            Lit = Li.T

            def mv(v):
                return Li @ (dX @ (Lit @ v))
        else:
            Lf = np.asfortranarray(L)             # BLAS trsv reads it in place (a C-ordered one is copied a call)
            trsv = sla.blas.dtrsv

            def mv(v):
                return trsv(Lf, dX @ trsv(Lf, v, lower=1, trans=1), lower=1, overwrite_x=1)

        v0 = np.random.default_rng(0).standard_normal(n)         # a fixed start: the same bound for the same input
        lmin = _lanczos_min(mv, v0, min(n, 200))
        if lmin is None:
            lmin = _min_eig_congruent(L, dX)
    if lmin >= 0:
        return cap
    return min(cap, -1.0 / lmin)


def _psd_step_low_rank(L, F, Vt, cap):
    """Largest ``alpha <= cap`` with ``X + alpha dX >= 0`` for ``X = L L^T > 0`` (n x n) and the predictor's
    direction ``dX = sym(F Vt) - X`` (``F (n, m)``, ``Vt (m, n)``, ``2 m < n``; :meth:`_Problem.XY_factors`).

    ``L^{-1} dX L^{-T} = -I + (a b^T + b a^T) / 2`` with ``[a, b] = L^{-1} [F, Vt^T]``: a rank-``2 m``
    perturbation of ``-I``. With the thin QR ``[a, b] = W R`` its eigenvalues are ``-1 + `` those of
    ``(R_a R_b^T + R_b R_a^T) / 2`` (``R = [R_a, R_b]``, 2m square) and ``-1`` (``n > 2 m``), so
    ``lambda_min = -1 + min(0, mu_min)`` (exact; one triangular solve of n x 2m, a QR and a 2m eigenvalue
    problem instead of the n x n congruence and eigenvalue). ``lambda_min <= -1``, so the bound is ``<= 1``."""
    m = F.shape[1]
    R = np.linalg.qr(_trsm(L, np.concatenate([F, Vt.T], axis=1)), mode="r")       # (2m, 2m)
    H = R[:, :m] @ R[:, m:].T                       # R_a R_b^T; the lower triangle of H + H^T is read
    mu = _eig_min(H + H.T) * 0.5
    return min(cap, -1.0 / (-1.0 + min(0.0, mu)))


def _lp_step(x, dx, cap):
    """Largest ``alpha <= cap`` with ``x + alpha dx >= 0`` (x > 0): ``-1 / min_k (dx_k / x_k)``."""
    if x.size == 0:
        return cap
    m = float(_min_reduce(dx / x))
    if m != m:
        raise np.linalg.LinAlgError("the direction is not finite")
    return cap if m * cap >= -1.0 else -1.0 / m


def _blocks(X11, X12, X22):
    """``[[X11, X12], [X12^T, X22]]`` of matrices or stacks of them (one allocation; np.block costs
    ~80 us a call)."""
    r1 = X11.shape[-1]
    n = r1 + X22.shape[-1]
    X = np.empty(X12.shape[:-2] + (n, n))
    X[..., :r1, :r1] = X11
    X[..., :r1, r1:] = X12
    X[..., r1:, :r1] = _t(X12)
    X[..., r1:, r1:] = X22
    return X


#: :meth:`_Problem.XY` forms ``X Y`` as one product up to this reduced size ``r1 + r2``, from the low-rank factors
#: of :meth:`_Problem.XY_factors` beyond (at the probe's r1 + r2 = 315, k = 16: about 5x fewer multiply-adds).
#: The small solves keep their arithmetic: the growing set's IPM (:mod:`attnsvm.svm.barrier_grow`) stalled on
#: tests/test_svm_nuclear_grow.py's all-rows start (6 x 6) with the factored product's last-bit differences
_XY_DENSE_MAX = 64


class _Problem:
    """Reduced data and the linear maps of the SDP."""

    def __init__(self, A, Bm, rhs, eq, groups=None):
        # A (N, r1), Bm (N, r2), rhs, eq (N,); or stacks (R, N, r1), (R, N, r2), (R, N) of a batch
        # (:mod:`attnsvm.svm.barrier_batch`): the linear maps below work on both
        self.A, self.Bm, self.rhs, self.eq = A, Bm, rhs, eq
        self.ineq = ~eq
        # the inequality rows as an index: a slice (views, no copies) when every row is one (a single problem)
        self.I = slice(None) if eq.ndim == 1 and not eq.any() else self.ineq
        self.viol_scale = 1.0 + (float(np.max(np.abs(rhs))) if rhs.ndim == 1 and rhs.size else 0.0)
        self.N, self.r1 = A.shape[-2:]
        self.r2 = Bm.shape[-1]
        n_in = self.ineq.sum(axis=-1)
        self.n_tot = self.r1 + self.r2 + (int(n_in) if np.ndim(n_in) == 0 else n_in)  # the barrier parameter's divisor
        # rows sharing a query: Bm = Bq[qidx] exactly; products with Bm on the left then cost q/N
        self.Bq = self.qidx = self.E = None
        if groups is not None and self.N >= _GROUPED_MIN_ROWS and groups[0].shape[0] <= _GROUPED_MAX * self.N:
            self.Bq, self.qidx = groups
            if self.N >= _GROUPED_MAPS_MIN_ROWS:
                from scipy.sparse import csr_matrix

                q = self.Bq.shape[0]      # E (q, N): E[i, k] = 1 when row k has query i (sums rows per query)
                self.E = csr_matrix((np.ones(self.N), (self.qidx, np.arange(self.N))), shape=(q, self.N))

    def newton_solver(self, x, du, diag):
        """Solver of the Newton system ``(M + diag(diag)) dlam = r``, M the Schur complement (:meth:`schur`)
        at the iterate ``x``: a function of ``r (N,)`` (numpy / scipy; :mod:`attnsvm.svm.torch_backend`
        replaces this method to run it on a torch device)."""
        parts = self.schur_parts(x.X11, x.X12, x.X22, du)
        # the N x N triangle's memory is kept for the next iteration's system (a fresh one costs ~0.1 CPU-s of
        # page faults at 6000 rows): a solver is used only until the next one is made (one _NewtonSystem a step)
        buf = getattr(self, "_schur_buf", None)
        if buf is None or buf.shape[0] != self.N:
            buf = self._schur_buf = np.empty((self.N, self.N))
        return _factor_lower(functools.partial(self.schur_block, parts), self.N, diag, buf)

    def Gmap(self, lam):
        """``G = A^T diag(lam) Bm`` (r1, r2): ``(E diag(lam) A)^T Bq`` on the distinct queries (``q r1 r2``
        instead of ``N r1 r2``) when :attr:`E` groups the rows."""
        if self.E is None:
            return _t(self.A) @ (lam[..., None] * self.Bm)
        return (self.E @ (lam[:, None] * self.A)).T @ self.Bq

    def amap(self, T12):
        """``a_k^T T12 b_k`` for all rows: shape (N,) (``(Bq T12^T)`` on the distinct queries, expanded by the
        query index, when :attr:`E` groups the rows)."""
        if self.E is None:
            return np.einsum("...kj,...kj->...k", self.A @ T12, self.Bm)
        return np.einsum("kj,kj->k", self.A, (self.Bq @ T12.T)[self.qidx])

    def Y(self, dG, du):
        """``Y = -dZ Z^{-1}`` (r1 + r2 square, or a stack) with ``dZ = -1/2 [[0, dG], [dG^T, 0]]``: with
        ``Zh = Z^{-1} / 2`` (``du.Zh``), ``Y = [[dG Zh_21, dG Zh_22], [dG^T Zh_11, dG^T Zh_12]]``."""
        r1, Zh = self.r1, du.Zh
        return np.concatenate([dG @ Zh[..., r1:, :], _t(dG) @ Zh[..., :r1, :]], axis=-2)

    def XY_factors(self, X, dG, du, Y=None):
        """``(F, Vt)`` with ``X Y = F Vt`` (``F (n, 2k)``, ``Vt (2k, n)``, ``k = min(r1, r2)``, n = r1 + r2; or
        stacks) for the symmetric ``X`` and ``Y = -dZ Z^{-1}`` of :meth:`Y` (``Y`` when already computed for this
        ``dG``). Y's two row blocks have rank <= k: with ``r2 <= r1``, ``X Y = (X[:, :r1] dG) Zh_2. + X[:, r1:] Y_2.``
        (``Zh_2.``, ``Y_2.`` the last r2 rows of Zh and Y), so ``F = [X[:, :r1] dG, X[:, r1:]]`` and
        ``Vt = [Zh_2.; Y_2.]``; mirrored when ``r1 < r2``. Only one row block of ``Y`` is read (formed when not
        given)."""
        r1, Zh = self.r1, du.Zh
        if dG.shape[-1] <= r1:
            Yb = _t(dG) @ Zh[..., :r1, :] if Y is None else Y[..., r1:, :]        # Y's last r2 rows
            F = np.concatenate([X[..., :, :r1] @ dG, X[..., :, r1:]], axis=-1)
            Vt = np.concatenate([Zh[..., r1:, :], Yb], axis=-2)
        else:
            Yt = dG @ Zh[..., r1:, :] if Y is None else Y[..., :r1, :]            # Y's first r1 rows
            F = np.concatenate([X[..., :, r1:] @ _t(dG), X[..., :, :r1]], axis=-1)
            Vt = np.concatenate([Zh[..., :r1, :], Yt], axis=-2)
        return F, Vt

    def XY(self, X, dG, du, Y=None, factors=None):
        """``sym(X Y)`` (r1 + r2 square, exactly symmetric; or a stack) for the symmetric ``X`` and
        ``Y = -dZ Z^{-1}`` of :meth:`Y` (``Y`` when already computed for this ``dG``), as ``sym(F Vt)`` from
        :meth:`XY_factors` (``factors`` when already computed): ``2 n k (r1 + r2 + n)`` multiply-adds instead of
        ``n^3 + 2 r1 r2 n``; up to ``n =`` :data:`_XY_DENSE_MAX` (and without ``factors``) as ``X Y``, the
        product small solves were measured with."""
        if factors is None and X.shape[-1] <= _XY_DENSE_MAX:
            T = X @ (self.Y(dG, du) if Y is None else Y)
        else:
            F, Vt = self.XY_factors(X, dG, du, Y) if factors is None else factors
            T = F @ Vt
        T = T + _t(T)
        T *= 0.5
        return T

    def _take_rows(self, F, idx):
        """``F[idx]`` (rows of a matrix by an index; :mod:`attnsvm.svm.torch_backend` overrides it)."""
        return F[idx]

    def _take_cols(self, F, idx):
        """``F[:, idx]`` (columns of a matrix by an index: ``take``, fancy indexing along columns is much
        slower; :mod:`attnsvm.svm.torch_backend` overrides it)."""
        return F.take(idx, axis=1)

    @staticmethod
    def _transposed(F):
        """The transpose of ``F (q, N)`` as a row-major copy (its row blocks are then contiguous)."""
        return np.ascontiguousarray(F.T)

    def schur_parts(self, X11, X12, X22, du) -> dict:
        """The factors of the Schur complement at an iterate, each ``O(N r (r1 + r2))`` to form, from which
        :meth:`schur_block` forms any block of M (see :meth:`schur`): ``(N, r)`` matrices, and on the distinct
        queries (when rows share them, :attr:`qidx`) ``(q, N)`` / ``(N, q)`` / ``(q, q)`` ones."""
        A, Bm = self.A, self.Bm
        if self.qidx is None:                                             # K1 = Bm P1^T, P1 = A X12
            parts = {"AZ": A + du.AC @ _t(du.G), "AX": A @ X11, "A": A}  # A (I + C G^T), A X11
            parts.update(P1=A @ X12, AC=du.AC, Bm=Bm, BX=Bm @ X22, BS=Bm @ du.Si)
        else:
            # the (q, N) factors as (Bq X12^T) A^T and (Bq C^T) A^T (q r1 r2 + q r1 N multiply-adds, not
            # N r1 r2 + q r2 N each), A (I + C G^T) from Zh's leading block: no N x r x r product but A X11's
            # and A (I + C G^T)'s, and no A C (the dual's AC is never formed)
            Bq = self.Bq
            F1, F2 = (Bq @ _t(X12)) @ _t(A), (Bq @ _t(du.C)) @ _t(A)    # F1 = Bq P1^T, F2 = Bq (A C)^T
            parts = {"AZ": A @ du.Zh[..., :self.r1, :self.r1], "AX": A @ X11, "A": A,
                     "F1": F1, "F1T": self._transposed(F1), "F2": F2, "F2T": self._transposed(F2),
                     "H22": (Bq @ X22) @ _t(Bq), "HS": (Bq @ du.Si) @ _t(Bq)}
        return parts

    def schur_block(self, parts: dict, I: slice, J: slice):
        """The block ``M[..., I, J]`` of the Schur complement (:meth:`schur`) from :meth:`schur_parts`; with
        ``K1 = Bm X12^T A^T``, ``K2 = A C Bm^T``::

            2 M[I, J] = K1[I, J] o K2[I, J] + K1[J, I]^T o K2[J, I]^T
                        + (A (I + C G^T) A^T)[I, J] o (Bm X22 Bm^T)[I, J] + (A X11 A^T)[I, J] o (Bm S^{-1} Bm^T)[I, J]

        (``C G^T = G S^{-1} G^T``). On the distinct queries the factors with ``Bm`` are rows and columns of the
        ``(q, N)``, ``(N, q)`` and ``(q, q)`` parts picked by the query index; else they are products with ``Bm``.
        Two ``|I| x |J| x r1`` products either way."""
        p = parts
        A = p["A"]
        AJt = _t(A[..., J, :])
        if self.qidx is None:
            Bm = p["Bm"]
            BJt = _t(Bm[..., J, :])
            S = Bm[..., I, :] @ _t(p["P1"][..., J, :])
            S *= p["AC"][..., I, :] @ BJt
            S2 = p["P1"][..., I, :] @ BJt
            S2 *= Bm[..., I, :] @ _t(p["AC"][..., J, :])
            H22, HS = p["BX"][..., I, :] @ BJt, p["BS"][..., I, :] @ BJt
        else:
            qI, qJ = self.qidx[I], self.qidx[J]
            rows, cols = self._take_rows, self._take_cols
            S = rows(p["F1"][:, J], qI)                                # K1[I, J]
            S *= cols(p["F2T"][I], qJ)                                 # K2[I, J]
            S2 = cols(p["F1T"][I], qJ)                                 # K1[J, I]^T
            S2 *= rows(p["F2"][:, J], qI)                              # K2[J, I]^T
            H22, HS = cols(rows(p["H22"], qI), qJ), cols(rows(p["HS"], qI), qJ)
        S += S2
        T = p["AZ"][..., I, :] @ AJt                                   # A (I + C G^T) A^T
        T *= H22
        S += T
        T = p["AX"][..., I, :] @ AJt                                   # A X11 A^T
        T *= HS
        S += T
        S *= 0.5
        return S

    def schur(self, X11, X12, X22, du):
        """``M_kl = <A_k, X A_l Z^{-1}>`` (N x N, or a stack), see the module docstring: the whole matrix of
        :meth:`schur_block`.

        The factors with ``Bm`` on the left are computed on the distinct queries (``Bq``) and expanded when
        rows share queries, which leaves two N x N x r products (``A H A^T``) per call instead of eight.
        """
        return self.schur_block(self.schur_parts(X11, X12, X22, du), slice(None), slice(None))


#: rows of one block of :func:`_factor_lower` (a block of all its columns stays in the cache)
_SCHUR_BLOCK_ROWS = 128


def _chol_upper_in_place(Mf):
    """The upper Cholesky factor ``U (U^T U = Mf)`` of the Fortran-ordered ``Mf (N, N)`` from its upper
    triangle, written over it (LAPACK potrf), or None when Mf is not (numerically) positive definite."""
    F, info = sla.lapack.dpotrf(Mf, lower=0, clean=0, overwrite_a=1)
    return F if info == 0 and _finite_positive(F.diagonal()) else None


def _factor_lower(form, N: int, diag, buf=None):
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
        for i0 in range(0, N, _SCHUR_BLOCK_ROWS):
            i1 = min(N, i0 + _SCHUR_BLOCK_ROWS)
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
        F = _chol_upper_in_place(buf.T)
        if F is not None:
            return lambda r: sc * _potrs(F, sc * r, lower=False)
        reg = 1e-14 if reg == 0 else reg * 99
    fill(0.0)
    w, Q = np.linalg.eigh(buf, UPLO="L")          # reads the lower triangle
    cut = 1e-13 * max(float(w.max()), 1e-300)
    winv = np.where(w > cut, 1.0 / np.maximum(w, cut), 0.0)
    return lambda r: sc * (Q @ (winv * (Q.T @ (sc * r))))


def _violation(pb, marg):
    """Largest constraint violation (|.| on equality rows), relative to ``1 + max |rhs|``."""
    d = pb.rhs - marg
    if isinstance(pb.I, slice):                 # inequality rows only
        return max(float(_max_reduce(d)), 0.0) / pb.viol_scale
    return float(np.max(np.where(pb.eq, np.abs(d), np.maximum(d, 0.0)))) / pb.viol_scale


def _clean_primal(pb, M, lam, feas_tol):
    """Remove the last rounding-level violations of M (equality rows and violated or nearly
    active inequality rows) by the least-Frobenius-norm correction ``sum_k mu_k a_k b_k^T``.

    Returns the corrected M, its violation and its relative gap against ``lam``.
    """
    marg = pb.amap(M)
    slack = marg - pb.rhs
    near = pb.eq | (slack <= 1e3 * feas_tol)
    target = np.where(pb.eq, -slack, np.maximum(-slack, 0.0))[near]
    if not near.any() or not np.any(target):
        nuc = _nuclear_norm(M)
        return M, _violation(pb, marg), (nuc - float(pb.rhs @ lam)) / max(1.0, nuc)
    An, Bn = pb.A[near], pb.Bm[near]
    if pb.qidx is None:
        def gram(I, J):
            return (An[I] @ An[J].T) * (Bn[I] @ Bn[J].T)
    else:                               # (Bm Bm^T)[k, l] from the distinct queries
        Hq, qn = pb.Bq @ pb.Bq.T, pb.qidx[near]

        def gram(I, J):
            return (An[I] @ An[J].T) * Hq[qn[I]].take(qn[J], axis=1)
    # the Jacobi-scaled Cholesky of the Newton systems (regularized or eigen-solved when singular) of the Gram
    # matrix (An An^T) o (Bn Bn^T) rather than an SVD least-squares solve; the result is checked below. The Gram
    # matrix depends on the near rows only: the last iterations often clean up with the same ones, whose factor
    # the problem keeps (one, replaced when the rows change)
    key = near.tobytes()
    cached = getattr(pb, "_clean_factor", None)
    if cached is not None and cached[0] == key:
        solve = cached[1]
    else:
        n = int(near.sum())
        pb._clean_factor = None         # the old factor's memory goes before the new one is formed
        solve = _factor_lower(gram, n, np.zeros(n))
        pb._clean_factor = (key, solve)
    mu = solve(target)
    M2 = M + An.T @ (mu[:, None] * Bn)
    nuc2 = _nuclear_norm(M2)
    return M2, _violation(pb, pb.amap(M2)), (nuc2 - float(pb.rhs @ lam)) / max(1.0, nuc2)


def _start(pb, lam_init, M_init):
    """Interior starting point: a dual point with ``||G|| = 1/2`` from the given multipliers and a
    primal X built around the given M (typically the Frobenius solution), plus ``eps0 I``.

    ``X = [P; Q] diag(sv) [P; Q]^T + eps0 I`` (``M0 = P diag(sv) Q^T``) has trace ``2 sum(sv) + eps0 (r1 + r2)``;
    ``eps0 = 2 sum(sv) / (r1 + r2)`` gives the identity the same share of it as M0's part, whatever the shape
    (for ``r1 = r2`` it is the mean singular value ``sum(sv) / r1``, bit for bit). The mean singular value on
    unequal shapes gave the identity ``(r1 + r2) / (2 min(r1, r2))`` times M0's share: at the 16-sentence
    Gen-SVMs of real-minilm-heads (r1, r2 = 299, 16: ten times) the first iterations' steps stayed short
    (docs/guide/performance.md has the measured iterations)."""
    I = pb.ineq
    y = np.zeros(pb.N) if lam_init is None else np.asarray(lam_init, float).copy()
    y[I] = np.maximum(y[I], 0.0)
    y[I] += 0.05 * (float(np.max(np.abs(y))) if np.any(y) else 1.0)
    nG = spectral_norm(pb.Gmap(y))
    lam = y * (0.5 / nG) if nG > 0 else np.zeros(pb.N)
    M0 = np.zeros((pb.r1, pb.r2)) if M_init is None else M_init
    m0 = pb.amap(M0)
    # scale M0 so that every inequality it satisfies holds with some room
    ok = I & (m0 > 0) & (pb.rhs > 0)
    need = float(np.max(pb.rhs[ok] / m0[ok])) if ok.any() else 1.0
    M0 = M0 * (1.1 * max(1.0, need))
    Pm, sv, Qmt = _svd(M0)
    eps0 = 2.0 * float(sv.sum()) / (pb.r1 + pb.r2) if sv.size else 0.0
    eps0 = max(eps0, 1e-3 * max(1.0, float(np.abs(pb.rhs).max())))
    X11 = (Pm * sv) @ Pm.T + eps0 * _eye(pb.r1)
    X22 = (Qmt.T * sv) @ Qmt + eps0 * _eye(pb.r2)
    s = np.maximum(pb.amap(M0) - pb.rhs, 0.1 * eps0)[I]
    return lam, X11, M0.copy(), X22, s


@dataclass
class _Reduction:
    """The reduced, scaled problem of :func:`nuclear_ipm` and the maps back to the caller's rows.

    ``pb`` holds the live rows (``u_k w_k^T != 0``) in the bases: ``A (N', r1)`` (``U`` itself, or
    ``U P`` with ``P (d1, r1)`` when ``d1 > N``) and ``Bm = V B`` with ``B (d2, r2)``, rows divided
    by ``su``, ``sv`` and right-hand sides by ``sr`` (all at most 1).
    """

    pb: _Problem
    B: np.ndarray
    P: np.ndarray | None
    live: np.ndarray
    su: float
    sv: float
    sr: float

    def M_init(self, W_init) -> np.ndarray | None:
        """A primal start ``W_init (d1, d2)`` in the reduced, scaled coordinates: ``(r1, r2)``."""
        if W_init is None:
            return None
        W_init = np.asarray(W_init, float)
        return (W_init if self.P is None else self.P.T @ W_init) @ self.B * (self.su * self.sv / self.sr)

    def W(self, X12: np.ndarray) -> np.ndarray:
        """The reduced solution ``X12 (r1, r2)`` as ``W (d1, d2)``."""
        W = (X12 * (self.sr / (self.su * self.sv))) @ self.B.T
        if self.P is not None:
            W = self.P @ W
        return W


def _reduce(U, V, rhs, eq, info: dict) -> _Reduction | None:
    """Setup: bases of the u's and w's, the live rows and the scaling; None when no live row
    constrains anything (then W = 0 is optimal). Records ``reduced_shape`` in ``info``.

    Rows with equal w's (one query per sample) get bit-identical rows of ``Bm``: they are mapped
    once per distinct w, which lets :meth:`_Problem.schur` work on the distinct queries."""
    N, d1 = U.shape
    if V.size:
        Vq, qinv = distinct_rows(V)
    else:
        Vq, qinv = V, np.zeros(0, np.int64)
    B = row_space_basis(Vq) if V.size else np.zeros((V.shape[1], 0))
    Bq = Vq @ B
    # the u side: the rows themselves when d1 <= N (rank deficiency is harmless), else a basis
    P = None if d1 <= N else row_space_basis(U)
    A = U if P is None else U @ P
    info["reduced_shape"] = [int(A.shape[1]), int(B.shape[1])]
    # rows with u_k w_k^T = 0 constrain nothing (the caller has checked that they hold)
    na, nb = np.linalg.norm(A, axis=1), np.linalg.norm(Bq, axis=1)[qinv]
    live = (na > 0) & (nb > 0)
    trivial = np.where(eq, rhs == 0, rhs <= 0)
    if A.shape[1] == 0 or B.shape[1] == 0 or trivial[live].all():
        return None
    # scale rows and right-hand sides to at most 1: then ||M||_* >= 1 and the gap test is relative
    su = float(np.max(na[live]))
    sv = float(np.max(nb[live]))
    sr = float(np.max(np.abs(rhs[live])))
    if live.all():                      # every distinct query is used: its index stays (np.unique's answer)
        used, qidx = slice(None), qinv
    else:
        used, qidx = np.unique(qinv[live], return_inverse=True)
        qidx = np.asarray(qidx).ravel()
    Bq = Bq[used] / sv
    return _Reduction(_Problem(A[live] / su, Bq[qidx], rhs[live] / sr, eq[live], groups=(Bq, qidx)),
                      B, P, live, su, sv, sr)


class _Iterate:
    """The primal-dual iterate: ``X = [[X11, X12], [X12^T, X22]]`` (r1 + r2 square; the blocks are views
    of X), slacks ``s`` of the inequality rows and multipliers ``lam`` (N',); ``LX`` the lower Cholesky
    factor of X when the step that made the iterate computed it (else None)."""

    G = None        #: ``G(lam)`` (r1, r2) when the step that made the iterate computed it (the step guard's ``pb.Gmap``)

    def __init__(self, lam, X11, X12, X22, s):
        self.lam, self.s = lam, s
        self._set_X(_blocks(X11, X12, X22), X11.shape[0], None)

    @classmethod
    def full(cls, lam, X, r1: int, s, LX=None, G=None) -> _Iterate:
        """The iterate of the full, exactly symmetric ``X`` (r1 + r2 square)."""
        x = cls.__new__(cls)
        x.lam, x.s, x.G = lam, s, G
        x._set_X(X, r1, LX)
        return x

    def _set_X(self, X, r1, LX):
        self.X, self.LX = X, LX
        self.X11, self.X12, self.X22 = X[:r1, :r1], X[:r1, r1:], X[r1:, r1:]


def _measure(pb: _Problem, x: _Iterate, du: _Dual, best, tol: float, feas_tol: float):
    """Gap, violation and barrier parameter of the iterate; keeps the best iterate so far.

    Returns ``(best, merit, mu, (nuc, dobj, gap, viol))`` with ``best = (merit, gap, violation,
    X12, lam)`` (the violation after the least-norm clean-up near the end).
    """
    G = du.G
    marg = pb.amap(x.X12)
    viol = _violation(pb, marg)
    nuc = _nuclear_norm(x.X12)
    dobj = float(pb.rhs @ x.lam)
    gap = (nuc - dobj) / max(1.0, abs(nuc))
    Xc = x.X12
    if abs(gap) <= 10 * tol and viol > feas_tol:
        # near the end rounding leaves violations of ~1e-10: try the least-norm correction. Only there: a gap below
        # -10 tol means (weak duality) a violation far above rounding, whose least-norm correction over many nearly
        # singular rows (an all-rows start: hundreds of rows, r1 r2 unknowns) is a regularized solve whose answer
        # moves with the last bits and made the merit, and the stall test on it, a lottery
        Xc, viol_c, gap_c = _clean_primal(pb, x.X12, x.lam, feas_tol)
        if viol_c < viol:
            gap, viol = gap_c, viol_c
        else:
            Xc = x.X12
    merit = max(gap, viol)
    if best is None or merit < best[0]:
        best = (merit, gap, viol, Xc.copy(), x.lam.copy())
    pobj = 0.5 * float(_add_reduce(x.X.diagonal()))        # X.trace(): the same reduction, without its wrapper
    mu = (pobj - float(np.vdot(x.X12, G)) + float(x.s @ x.lam[pb.I])) / pb.n_tot
    return best, merit, mu, (nuc, dobj, gap, viol)


def _trace_iterate(pb: _Problem, x: _Iterate, mu: float, gap: float, viol: float) -> None:
    """The trace's "iterate" record (see :data:`_log`)."""
    r = pb.amap(x.X12) - pb.rhs
    r[pb.I] -= x.s
    _trace("iterate", N=int(pb.N), mu=mu, gap=gap, viol=viol, rp=float(np.max(np.abs(r))) if r.size else 0.0)


def _stopping_test(best, since_best: int, tol: float, feas_tol: float, t0: float, time_limit) -> tuple[bool, bool, str]:
    """``(optimal, stop, reason)``: whether the best iterate meets the tolerances, whether to stop,
    and the ``info["stopped"]`` reason ("" when the optimum needs no further iteration)."""
    optimal = best[1] <= tol and best[2] <= feas_tol
    # go on while it pays: up to a gap 10x below tol, stop at the first iteration without progress
    if optimal and (best[1] <= 0.1 * tol or since_best >= 1):
        return optimal, True, ""
    if time_limit is not None and time.perf_counter() - t0 > time_limit:
        return optimal, True, "time limit"
    if since_best >= (4 if best[0] < 1e-7 else 10):
        return optimal, True, "stalled"
    return optimal, False, ""


class _NewtonSystem:
    """The factorized Schur complement at an iterate and the HKM directions it gives; ``equal_steps``: the
    primal and the dual take the same step length (:meth:`max_steps`)."""

    def __init__(self, pb: _Problem, x: _Iterate, du: _Dual, equal_steps: bool = False):
        I = pb.I
        self.pb, self.x, self.du, self.equal_steps = pb, x, du, equal_steps
        self.factors = None                                       # the predictor's X Y = F Vt (see :meth:`direction`)
        if x.LX is None:
            x.LX = _chol(x.X)
            if x.LX is None:
                raise np.linalg.LinAlgError("primal iterate X is not positive definite")
        self.LX = x.LX
        self.lamI = x.lam[I]
        self.s_lam = x.s / self.lamI                              # (N_ineq,): s / lam, the diagonal's entries
        if isinstance(I, slice):                                   # every row an inequality
            diag = self.s_lam
        else:
            diag = np.zeros(pb.N)
            diag[I] = self.s_lam
        self.solve = pb.newton_solver(x, du, diag)
        # L^{-1} of X's factor for the primal step bounds of small X (see :func:`_min_eig_congruent`)
        self.LXi = _tri_inv(self.LX) if self.LX.shape[0] <= _CONGRUENT_BY_INVERSE_MAX else None
        # A(Z^{-1}) = 2 a_k^T C b_k: on the distinct queries when the maps group rows (no A C), else from A C
        self.g = 2.0 * (np.einsum("kj,kj->k", du.AC, pb.Bm) if pb.E is None else pb.amap(du.C))

    def direction(self, rvec, sig_mu, corr):
        """``(dlam, dG, dX, ds)`` (``dX`` r1 + r2 square, exactly symmetric) for the right-hand side
        ``rvec`` (N',), centering ``sig_mu`` and the second-order correction ``corr = (cX, cs)`` (or None)."""
        pb, x, du, I, lamI = self.pb, self.x, self.du, self.pb.I, self.lamI
        dlam = self.solve(rvec)
        dG = pb.Gmap(dlam)
        self.Y = pb.Y(dG, du)                                     # kept: the corrector reuses the predictor's
        n = x.X.shape[0]
        factors = pb.XY_factors(x.X, dG, du, self.Y) if n > _XY_DENSE_MAX else None
        # the predictor's X Y = F Vt, kept for its primal step bound (_psd_step_low_rank) when 2 m < r1 + r2
        pred = factors is not None and sig_mu == 0.0 and corr is None and 2 * factors[0].shape[1] < n
        self.factors = factors if pred else None
        dX = pb.XY(x.X, dG, du, self.Y, factors)                  # dX = 2 sig_mu Zh - X + sym(X Y)
        dX -= x.X
        if sig_mu:
            dX += (2.0 * sig_mu) * du.Zh
        ds = -x.s - self.s_lam * dlam[I]
        if sig_mu:
            ds += sig_mu / lamI
        if corr is not None:
            dX += corr[0]
            ds += corr[1]
        return dlam, dG, dX, ds

    def max_steps(self, d):
        """Largest primal and dual steps in (0, 1] that keep X, s and the dual feasible; with :attr:`equal_steps`
        the same step ``(a, a)``, the dual bound sought below the primal one only (its full-step Cholesky test
        then passes more often)."""
        dlam, dG, dX, ds = d
        cap = self.lp_cap = _lp_step(self.x.s, ds, 1.0)
        if self.factors is not None:                        # the predictor's: low rank + -X (beyond 64 only)
            ap = _psd_step_low_rank(self.LX, *self.factors, cap)
        else:
            ap = _psd_step(self.LX, dX, cap, self.LXi)
        cap = ap if self.equal_steps else 1.0
        ad = _lmi_step(self.du.G, dG, _lp_step(self.lamI, dlam[self.pb.I], cap), L=self.du.L, Li=self.du.Li)
        return (ad, ad) if self.equal_steps else (ap, ad)


def _mehrotra_direction(nw: _NewtonSystem, mu: float):
    """Newton direction: the predictor (affine scaling), Mehrotra's centering parameter sigma and
    the corrector. Returns ``(d, sigma)`` with d as :meth:`_NewtonSystem.direction`."""
    pb, x, du, I, lamI = nw.pb, nw.x, nw.du, nw.pb.I, nw.lamI
    G, n_tot, r1 = du.G, pb.n_tot, pb.r1
    # predictor (affine scaling direction) and Mehrotra's centering parameter
    da = nw.direction(pb.rhs.copy(), 0.0, None)
    Ya = nw.Y
    ap, ad = nw.max_steps(da)
    dlam_a, dG_a, dX_a, ds_a = da
    xz = (0.5 * (x.X.trace() + ap * dX_a.trace())
          - float(np.vdot(x.X12 + ap * dX_a[:r1, r1:], G + ad * dG_a)))
    mu_a = (xz + float((x.s + ap * ds_a) @ (lamI + ad * dlam_a[I]))) / n_tot
    sigma = min(1.0, max(0.0, mu_a / mu)) ** 3
    nw.mu_aff = mu_a
    # corrector: second-order terms of X Z = sigma mu I and s lam = sigma mu
    cX = pb.XY(dX_a, dG_a, du, Ya)
    cs = -(ds_a * dlam_a[I]) / lamI
    rvec = pb.rhs - sigma * mu * nw.g - pb.amap(cX[:r1, r1:])
    rvec[I] += sigma * mu / lamI + cs
    return nw.direction(rvec, sigma * mu, (cX, cs)), sigma


def _step_lengths(nw: _NewtonSystem, d, gamma: float) -> tuple[float, float]:
    """Primal and dual step lengths: ``gamma`` times the largest feasible ones, then shortened
    until the dual stays inside the ball and X positive definite despite rounding. Leaves the
    Cholesky factors at the step in ``nw.L_next`` (of S) and ``nw.LX_next`` (of X), and X in
    ``nw.X_next``."""
    pb, x = nw.pb, nw.x
    ap, ad = nw.max_steps(d)
    nw.bounds = (ap, ad)
    ap, ad = gamma * ap, gamma * ad
    dlam, dG, dX, ds = d
    # guard against rounding at the boundary: the dual stays inside the ball, X positive definite
    for _ in range(60):
        nw.G_next = pb.Gmap(x.lam + ad * dlam)
        nw.L_next = _chol_S(nw.G_next)
        if nw.L_next is not None:
            break
        ad *= 0.7
    else:
        ad, nw.L_next, nw.G_next = 0.0, nw.du.L, nw.du.G
    for _ in range(60):
        nw.X_next = x.X + ap * dX
        nw.LX_next = _chol(nw.X_next)
        if nw.LX_next is not None:
            break
        ap *= 0.7
    else:
        ap, nw.X_next, nw.LX_next = 0.0, x.X, nw.LX
    return ap, ad


def _take_step(nw: _NewtonSystem, d, ap: float, ad: float) -> _Iterate:
    """The iterate after the steps ``ap`` (primal) and ``ad`` (dual) of :func:`_step_lengths`."""
    x = nw.x
    dlam, dG, dX, ds = d
    # G at the new lam: the guard's (pb.Gmap; on grouped rows the per-query sum, which _Dual's A^T diag(lam) Bm equals
    # up to rounding at N r1 r2 multiply-adds), the one the guard's Cholesky factor L_next of S belongs to. Measured
    # against a545b24 (benchmarks/nuclear_steps.py --baseline-rev, the probe's grown rounds of layer 3, one thread,
    # loaded): at 512 sentences 86.6 vs 91.6 CPU-s for heads 3, 0 and their nulls, same iterations; head 3's null at
    # 1000, 95.5 vs 97.3 CPU-s (34 iterations against 33: the last bits of G move the path)
    return _Iterate.full(x.lam + ad * dlam, nw.X_next, nw.pb.r1, x.s + ap * ds, nw.LX_next, nw.G_next)


def ipm_step(pb: _Problem, x: _Iterate, du: _Dual, mu: float, gamma: float, verbose: bool, equal_steps: bool = False):
    """One Mehrotra predictor-corrector step from ``x``: ``(next iterate, L_next, next gamma)``, or None
    when neither step length reaches 1e-10 (no progress). Raises ``LinAlgError`` / ``ValueError`` at
    the numerical limit (the caller keeps its best iterate). ``equal_steps``: one step length for the
    primal and the dual (before the step guard), else each its own."""
    nw = _NewtonSystem(pb, x, du, equal_steps)
    d, sigma = _mehrotra_direction(nw, mu)
    ap, ad = _step_lengths(nw, d, gamma)
    if max(ap, ad) < 1e-10:
        return None
    if verbose:
        print(f"        sigma {sigma:.2e} step primal {ap:.3f} dual {ad:.3f}", flush=True)
    if _tracing():
        _trace("step", sigma=sigma, mu_aff=nw.mu_aff, ap_max=nw.bounds[0], ad_max=nw.bounds[1], ap=ap, ad=ad,
               ap_lp=nw.lp_cap)
    return _take_step(nw, d, ap, ad), nw.L_next, 0.9 + 0.09 * min(ap, ad)


def next_step(pb, x, du, mu, gamma, verbose, info, equal_steps: bool = False):
    """:func:`ipm_step`, or None when the path ends here, with ``info["stopped"]`` saying why (a numerical
    limit, or no progress); the caller keeps its best iterate."""
    try:
        step = ipm_step(pb, x, du, mu, gamma, verbose, equal_steps)
    except (np.linalg.LinAlgError, sla.LinAlgError, ValueError) as exc:
        info["stopped"] = f"numerical limit ({type(exc).__name__})"
        return None
    if step is None:
        info["stopped"] = "no progress"
    return step


#: :func:`nuclear_ipm` takes equal primal and dual step lengths up to this many (live) rows, separate ones beyond.
#: Measured (docs/guide/performance.md): equal steps took fewer iterations on every tried shape of 42 to 990 rows
#: (random and planted Att-SVMs, real-minilm-heads' 299-row Gen-SVMs), more on 4 of 6 planted sets of 1380 to 1500;
#: the growing set of :mod:`attnsvm.svm.barrier_grow`, whose new rows leave the primal infeasible, keeps separate
#: ones (with equal steps it stalled where they converged)
_EQUAL_STEPS_MAX_ROWS = 1024


def _iterate(pb: _Problem, x: _Iterate, tol: float, feas_tol: float, max_iter: int, time_limit, verbose: bool,
             info: dict, t0: float):
    """The path-following loop (equal primal and dual step lengths up to :data:`_EQUAL_STEPS_MAX_ROWS` rows). Returns
    ``(best, status, iterations, last iterate)``; sets ``info["stopped"]`` when a limit, a stall or rounding
    ended the run."""
    best = None                     # (merit, gap, violation, X12, lam)
    status = "inaccurate"
    gamma = 0.95
    it = since_best = 0
    L_next = None                   # Cholesky factor of S at the next dual iterate, from the step guard
    for it in range(1, max_iter + 1):
        try:
            du = _Dual(pb.A, pb.Bm, x.lam, L_next, x.G)
        except np.linalg.LinAlgError:       # rounding pushed the dual onto the boundary: keep the best
            info["stopped"] = "numerical limit"
            break
        best, merit, mu, (nuc, dobj, gap, viol) = _measure(pb, x, du, best, tol, feas_tol)
        if verbose:
            print(f"it {it:3d} |M|_* {nuc:.12g} dual {dobj:.12g} gap {gap:.2e} viol {viol:.2e} mu {mu:.2e}")
        if _tracing():
            _trace_iterate(pb, x, mu, gap, viol)
        since_best = 0 if best[0] == merit else since_best + 1
        optimal, stop, reason = _stopping_test(best, since_best, tol, feas_tol, t0, time_limit)
        if optimal:
            status = "optimal"
        if stop:
            if reason:
                info["stopped"] = reason
            break
        step = next_step(pb, x, du, mu, gamma, verbose, info, pb.N <= _EQUAL_STEPS_MAX_ROWS)
        if step is None:
            break
        x, L_next, gamma = step
    else:
        info["stopped"] = "iteration limit"
    return best, status, it, x


def ipm_arrays(U, V, rhs, is_equality):
    """The IPM's inputs as arrays: ``(U (N, d1), V (N, d2), rhs (N,), eq (N,) bool, N, d1, d2)``."""
    U = np.asarray(U, float)
    V = np.asarray(V, float)
    N, d1 = U.shape
    return U, V, np.asarray(rhs, float), np.asarray(is_equality, bool), N, d1, V.shape[1]


def nuclear_ipm(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, is_equality: np.ndarray, *,
                lam_init: np.ndarray | None = None, W_init: np.ndarray | None = None, tol: float = 1e-9,
                feas_tol: float = 1e-10, max_iter: int = 80, time_limit: float | None = None,
                verbose: bool = False, backend=None) -> IPMResult:
    """Solve ``min ||W||_* s.t. u_k^T W w_k >= rhs_k`` (``==`` on equality rows).

    Steps: :func:`_reduce` (bases, live rows, scaling), :func:`_start` (interior point),
    :func:`_iterate` (per iteration :func:`_measure` and :func:`_stopping_test`, then the
    Newton direction :func:`_mehrotra_direction` on the factorized :class:`_NewtonSystem` and
    :func:`_step_lengths`), and the final clean-up and map back to W.

    Parameters
    ----------
    U : (N, d1), V : (N, d2), rhs : (N,), is_equality : (N,) bool
        A feasible constraint set (feasibility is decided by the caller).
    lam_init : (N,) optional multipliers to start from (e.g. the Frobenius dual)
    W_init : (d1, d2) optional primal point to start from (e.g. the Frobenius solution)
    tol : relative duality gap ``(||W||_* - rhs^T lam) / max(1, ||W||_*)`` at which the result counts
        as optimal (the iteration goes on towards ``tol / 10`` while every step still gains)
    feas_tol : target constraint violation of W relative to ``1 + max |rhs|``
    max_iter, time_limit : limits; the best iterate is then returned with status "inaccurate"
    verbose : print one line per iteration
    backend : None (default: numpy / scipy) or an object whose ``attach(pb)`` replaces the
        :meth:`_Problem.newton_solver` of the reduced problem, e.g.
        :class:`attnsvm.svm.torch_backend.TorchNewton` (the Schur complement, its factorization and the
        Newton solves on a torch device); everything else, the stopping test and the result are the same

    Returns
    -------
    IPMResult with ``W (d1, d2)`` (``W = P M B^T``) and ``lam (N,)`` (strictly dual feasible).
    """
    check_number(tol, "tol", low=0.0, high=1.0, low_open=True, high_open=True)
    check_number(feas_tol, "feas_tol", low=0.0, high=1.0, low_open=True, high_open=True)
    check_number(max_iter, "max_iter", low=1, integer=True)
    check_number(time_limit, "time_limit", low=0.0, low_open=True, allow_none=True)
    t0 = time.perf_counter()
    U, V, rhs, eq, N, d1, d2 = ipm_arrays(U, V, rhs, is_equality)
    info: dict = {"method": "primal-dual interior point (HKM, Mehrotra)"}
    red = _reduce(U, V, rhs, eq, info)
    lam = np.zeros(N)
    if red is None:
        info.update(iterations=0, rel_gap=0.0, violation=0.0, seconds=time.perf_counter() - t0)
        return IPMResult("optimal", np.zeros((d1, d2)), lam, info)
    pb = red.pb
    if backend is not None:
        backend.attach(pb)
        info["device"] = backend.name
    x = _Iterate(*_start(pb, None if lam_init is None else np.asarray(lam_init, float)[red.live],
                         red.M_init(W_init)))
    best, status, it, x = _iterate(pb, x, tol, feas_tol, max_iter, time_limit, verbose, info, t0)
    if best is None:                # no iterate was evaluated (the start left the domain by rounding)
        best = (np.inf, np.inf, _violation(pb, pb.amap(x.X12)), x.X12, np.zeros(pb.N))
    return _result(red, best, status, it, info, N, tol, feas_tol, time.perf_counter() - t0)


def _result(red: _Reduction, best, status: str, iterations: int, info: dict, N: int, tol: float, feas_tol: float,
            seconds: float) -> IPMResult:
    """The :class:`IPMResult` of the best iterate ``best = (merit, gap, violation, X12, lam)``: the
    least-norm clean-up of its last violations, then W and the multipliers of the caller's N rows."""
    merit, gap, viol, X12, lam_l = best
    X12, viol2, gap2 = _clean_primal(red.pb, X12, lam_l, feas_tol)
    if viol2 < viol:
        info["cleaned"] = {"violation": [float(viol), float(viol2)], "rel_gap": [float(gap), float(gap2)]}
        viol, gap = viol2, gap2
        if status != "optimal" and gap <= tol and viol <= feas_tol:
            status = "optimal"
    lam = np.zeros(N)
    lam[red.live] = lam_l / (red.su * red.sv)
    info.update(iterations=iterations, rel_gap=float(gap), violation=float(viol), seconds=seconds)
    return IPMResult(status, red.W(X12), lam, info)
