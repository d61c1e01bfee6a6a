"""Exact solvers of the Frobenius dual QP given only the Gram matrix.

The primal is ``min 1/2 ||W||_F^2  s.t.  <W, A_k> >= b_k`` (``==`` on equality rows)
with rank-one ``A_k = u_k w_k^T``. Everything is expressed through the Gram matrix
``G = (U U^T) * (V V^T)`` (N, N): the primal solution is ``W = sum_k lam_k A_k`` and the
constraint values are ``G @ lam``.

Two exact active-set methods:

* :func:`pdas`: a primal-dual active-set (semismooth Newton) method. Each iteration
  solves one linear system on the free set; a handful of iterations is typical. It
  needs the free rows to be linearly independent and is the fast path, also batched
  over many independent instances (:func:`pdas_batch`).
* :func:`goldfarb_idnani`: the dual method of Goldfarb and Idnani (1983) specialised
  to an identity Hessian and written with Gram entries only. It adds one violated
  constraint at a time, keeps the active normals linearly independent, handles
  linearly dependent constraints and equalities, and ends either optimal or with a
  Farkas certificate of infeasibility: ``lam`` (>= 0 on inequality rows) with
  ``sum_k lam_k A_k = 0`` and ``b^T lam = 1``.

:func:`solve_gram_qp` tries the fast path and falls back to the robust one.

Each public function checks its ``tol`` (the ``feas_tol`` setting, default
:data:`~attnsvm.svm.settings.FEAS_TOL`) for direct callers; the solvers behind :func:`attnsvm.svm.solve`,
which checked ``feas_tol`` once, call its ``unchecked`` attribute (the same function without the check
and without a default, e.g. ``solve_gram_qp.unchecked(G, b, eq, tol=tol, method=method)``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

from attnsvm._validate import check_choice, check_number
from attnsvm.svm.settings import FEAS_TOL

__all__ = ["QPResult", "solve_gram_qp", "goldfarb_idnani", "pdas", "pdas_rhs", "pdas_batch"]


@dataclass
class QPResult:
    """Result of a Gram-matrix QP solve.

    Attributes
    ----------
    status : "optimal" or "infeasible"
    lam : (N,) multipliers (optimal) ; zeros when infeasible
    farkas : (N,) Farkas multipliers with ``sum lam_k A_k ~ 0`` and ``b^T lam = 1``
        (infeasible only), else None
    iterations : int
    method : str
    """

    status: str
    lam: np.ndarray
    farkas: np.ndarray | None = None
    iterations: int = 0
    method: str = ""
    info: dict = field(default_factory=dict)


def _check_tol(tol) -> None:
    """``tol`` must be a finite number in (0, 1) (NaN would make every test pass)."""
    check_number(tol, "tol", low=0.0, high=1.0, low_open=True, high_open=True)


def _checks_tol(core):
    """The public function of ``core``: ``tol`` (default :data:`~attnsvm.svm.settings.FEAS_TOL`) checked
    (:func:`_check_tol`), then ``core``. ``core``, whose ``tol`` has no default, stays reachable as the
    function's ``unchecked`` attribute for the solvers behind :func:`attnsvm.svm.solve`, which pass the
    ``feas_tol`` it checked once."""

    @functools.wraps(core)
    def checked(*args, tol: float = FEAS_TOL, **kw):
        _check_tol(tol)
        return core(*args, tol=tol, **kw)

    checked.unchecked = core
    return checked


def _tol_b(b: np.ndarray, tol: float) -> float:
    return tol * max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)


def kkt_ok(G, b, eq, lam, tol) -> bool:
    """Whether multipliers ``lam (s,)`` solve the Gram QP ``G (s, s)``, ``b (s,)``, ``eq (s,)`` to ``tol``
    (relative to ``max(1, max |b|)``): dual feasible, primal feasible, complementary. Internal, shared with
    :mod:`attnsvm.svm.working_set` (its subset QP's check)."""
    m = G @ lam
    btol = _tol_b(b, tol)
    ineq = ~eq
    if np.any(lam[ineq] < -btol * 1e-3):
        return False
    viol = np.where(eq, np.abs(m - b), np.maximum(b - m, 0.0))
    if np.any(viol > btol):
        return False
    # complementary slackness (relative to the multiplier size)
    slack = np.where(ineq, m - b, 0.0)
    scale = max(1.0, float(np.max(np.abs(lam))))
    return bool(np.all(np.abs(lam * slack) <= btol * scale))


@_checks_tol
def pdas(G: np.ndarray, b: np.ndarray, eq: np.ndarray, *, tol: float, maxit: int = 60):
    """Primal-dual active-set method for ``min 1/2 lam^T G lam - b^T lam``, ``lam >= 0`` off ``eq``.

    Parameters
    ----------
    G : (N, N) PSD Gram matrix
    b : (N,) right-hand sides
    eq : (N,) bool, rows with a free-sign multiplier (equality constraints)

    Returns
    -------
    QPResult or None when the free rows become linearly dependent or it cycles
    (the caller then uses :func:`goldfarb_idnani`).
    """
    N = b.size
    if N == 0:
        return QPResult("optimal", np.zeros(0), iterations=0, method="pdas")
    diag = np.diag(G).copy()
    if np.any(diag <= 0):
        return None
    free = eq | (b > 0)
    seen = set()
    for it in range(1, maxit + 1):
        idx = free.nonzero()[0]
        lam = np.zeros(N)
        if idx.size:
            x = _free_solve(G.take(idx, 0).take(idx, 1), b[idx])  # G[np.ix_(idx, idx)] in fewer calls
            if x is None:
                return None
            lam[idx] = x
        mu = G @ lam - b
        new_free = eq | (lam - mu / diag > 0)
        if np.array_equal(new_free, free):
            if kkt_ok(G, b, eq, lam, tol):
                return QPResult("optimal", lam, iterations=it, method="pdas")
            return None
        key = new_free.tobytes()
        if key in seen:
            return None
        seen.add(key)
        free = new_free
    return None


def _free_solve(Gff: np.ndarray, bf: np.ndarray):
    """Solve ``Gff x = bf`` on a free set: ``Gff (s, s)`` SPD, ``bf (s,)`` or ``(s, R)`` (R right-hand sides,
    one factor); one refinement step. None when ``Gff`` is not numerically positive definite (dependent rows).

    LAPACK potrf / potrs directly: what sla.cho_factor / cho_solve call, without their wrappers'
    cost (~10 us a call, which small solves feel); potrf's info > 0 is cho_factor's LinAlgError.
    """
    c, info = sla.lapack.dpotrf(Gff, lower=1, clean=0)
    if info != 0:
        return None
    dg = np.abs(c.diagonal())
    if dg.min() <= 1e-7 * dg.max():  # numerically dependent free rows
        return None
    x = sla.lapack.dpotrs(c, bf, lower=1)[0]                 # columnwise the bits of one right-hand side
    # G x by columns when R > 1: a matrix product sums in another order than Gff @ x of one right-hand side
    Gx = Gff @ x if x.ndim == 1 else np.stack([Gff @ xr for xr in x.T], axis=1)
    x += sla.lapack.dpotrs(c, bf - Gx, lower=1)[0]  # one refinement step
    return x


@_checks_tol
def pdas_rhs(G: np.ndarray, B: np.ndarray, eq: np.ndarray, *, tol: float) -> list:
    """:func:`pdas` of one Gram matrix with R right-hand sides: the result of ``pdas(G, B[r], eq)`` for each r.

    Parameters
    ----------
    G : (N, N), B : (R, N), eq : (N,) bool

    When every row is an equality the free set is every row for every right-hand side (pdas
    stops after its first iteration), so one Cholesky factor of G serves all R (:func:`_free_solve`);
    otherwise each right-hand side runs :func:`pdas`.

    Returns
    -------
    list of R QPResult, or None where pdas fails (dependent rows: the caller uses :func:`goldfarb_idnani`)
    """
    B = np.asarray(B, dtype=np.float64)
    R, N = B.shape
    if N == 0 or not np.all(eq):
        return [pdas.unchecked(G, b, eq, tol=tol) for b in B]
    if R == 0 or np.any(np.diag(G) <= 0):
        return [None] * R
    X = _free_solve(G.copy(), B.T)
    if X is None:
        return [None] * R
    out = []
    for r in range(R):
        lam = np.ascontiguousarray(X[:, r])
        out.append(QPResult("optimal", lam, iterations=1, method="pdas") if kkt_ok(G, B[r], eq, lam, tol) else None)
    return out


@_checks_tol
def pdas_batch(G: np.ndarray, b: np.ndarray, eq: np.ndarray, *, tol: float, maxit: int = 40):
    """Batched :func:`pdas` over R independent instances of equal size.

    Parameters
    ----------
    G : (R, N, N)
    b : (R, N)
    eq : (R, N) bool

    Returns
    -------
    lam : (R, N) multipliers
    ok : (R,) bool, instances that converged to a verified KKT point (the others
        must be solved by :func:`goldfarb_idnani`)
    """
    R, N = b.shape
    lam = np.zeros((R, N))
    ok = np.zeros(R, bool)
    if N == 0:
        return lam, np.ones(R, bool)
    diag = np.einsum("rkk->rk", G)
    pending = np.flatnonzero(np.all(diag > 0, axis=1))
    free = eq | (b > 0)
    eye = np.eye(N)
    for _ in range(maxit):
        if pending.size == 0:
            break
        f = free[pending]
        Gp = G[pending]
        mask = f[:, :, None] & f[:, None, :]
        A = np.where(mask, Gp, 0.0) + eye * (~f)[:, :, None]
        rhs = np.where(f, b[pending], 0.0)
        try:
            x = np.linalg.solve(A, rhs[..., None])[..., 0]
        except np.linalg.LinAlgError:
            # singular somewhere: solve one by one and drop the failures
            x = np.zeros_like(rhs)
            good = np.ones(pending.size, bool)
            for j in range(pending.size):
                try:
                    x[j] = np.linalg.solve(A[j], rhs[j])
                except np.linalg.LinAlgError:
                    good[j] = False
            pending, x, f, Gp = pending[good], x[good], f[good], Gp[good]
            if pending.size == 0:
                break
            rhs = np.where(f, b[pending], 0.0)
            A = np.where(f[:, :, None] & f[:, None, :], Gp, 0.0) + eye * (~f)[:, :, None]
        x += np.linalg.solve(A, (rhs - np.einsum("rij,rj->ri", A, x))[..., None])[..., 0]
        x = np.where(f, x, 0.0)
        mu = np.einsum("rij,rj->ri", Gp, x) - b[pending]
        new_free = eq[pending] | (x - mu / diag[pending] > 0)
        same = np.all(new_free == f, axis=1)
        lam[pending] = x
        done = pending[same]
        for r in done:
            ok[r] = kkt_ok(G[r], b[r], eq[r], lam[r], tol)
        free[pending] = new_free
        pending = pending[~same]
    return lam, ok


def _cholesky_delete(L: np.ndarray, k: int) -> np.ndarray:
    """Cholesky factor after deleting row and column k of ``L L^T``: L (s, s) -> (s - 1, s - 1).

    Deleting row k of L keeps ``M M^T`` equal to the reduced Gram matrix; Givens rotations
    on column pairs (j, j + 1), j >= k, restore the triangle. Unlike a fresh Cholesky of a
    nearly dependent active set, this never takes the square root of a rounding error.
    """
    s = L.shape[0]
    M = np.delete(L, k, axis=0)
    for j in range(k, s - 1):
        a, b = M[j, j], M[j, j + 1]
        r = float(np.hypot(a, b))
        if r == 0.0:
            continue
        c, sn = a / r, b / r
        cj, cj1 = M[j:, j].copy(), M[j:, j + 1].copy()
        M[j:, j] = c * cj + sn * cj1
        M[j:, j + 1] = c * cj1 - sn * cj
    return M[:, : s - 1]


def _zero_row_farkas(diag: np.ndarray, b: np.ndarray, eq: np.ndarray, btol: float) -> tuple[np.ndarray, QPResult | None]:
    """Rows whose matrix A_k is zero, and the infeasibility they prove on their own.

    Such a row reads ``0 >= b_k`` (or ``0 == b_k``). Returns the (N,) bool mask of zero rows
    and an "infeasible" QPResult when one of them is violated beyond ``btol``, else None.
    """
    N = b.size
    gscale = float(diag.max()) if N else 1.0
    zero = diag <= 1e-28 * max(gscale, 1e-300)
    bad0 = zero & np.where(eq, np.abs(b) > btol, b > btol)
    if not np.any(bad0):
        return zero, None
    k = int(np.flatnonzero(bad0)[np.argmax(np.abs(b[bad0]))])
    f = np.zeros(N)
    f[k] = 1.0 / b[k]
    return zero, QPResult("infeasible", np.zeros(N), farkas=f, iterations=0, method="goldfarb-idnani",
                          info={"offending": [k]})


def _most_violated(viol: np.ndarray, free: np.ndarray, eq: np.ndarray, diag: np.ndarray, btol: float,
                   sg: np.ndarray) -> int | None:
    """The next constraint to add: equalities first, then the most violated inequality.

    ``viol = m - b`` (N,); ``free`` (N,) bool marks usable inactive rows. Violation is scaled by
    ``||A_k||``. An equality violated from above gets ``sg[p] = -1``. None: all satisfied.
    """
    cand = eq & free & (np.abs(viol) > btol)
    if cand.any():
        idx = np.flatnonzero(cand)
        p = int(idx[np.argmax(np.abs(viol[idx]) / np.sqrt(diag[idx]))])
        if viol[p] > 0:
            sg[p] = -1.0
        return p
    cand = ~eq & free & (viol < -btol)
    if not cand.any():
        return None
    idx = np.flatnonzero(cand)
    return int(idx[np.argmin(viol[idx] / np.sqrt(diag[idx]))])


def _step_direction(G: np.ndarray, diag: np.ndarray, L: np.ndarray, a: np.ndarray, sg: np.ndarray,
                    p: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Dual direction for adding row p to active set ``a`` (s,): ``(lvec, r, zz)``.

    ``lvec = L^{-1} g`` and ``r = L^{-T} lvec`` (both (s,)) with g the sign-adjusted Gram column,
    and ``zz`` the squared norm of A_p's part orthogonal to the active rows.
    """
    s = a.size
    if not s:
        return np.zeros(0), np.zeros(0), diag[p]
    g = G[a, p] * sg[a] * sg[p]
    lvec = sla.solve_triangular(L[:s, :s], g, lower=True, check_finite=False)
    r = sla.solve_triangular(L[:s, :s], lvec, lower=True, trans="T", check_finite=False)
    return lvec, r, diag[p] - lvec @ lvec


def _blocking_multiplier(u: np.ndarray, r: np.ndarray, a: np.ndarray, eq: np.ndarray) -> tuple[float, int]:
    """Largest dual step before an active inequality's multiplier reaches zero: ``(t1, kpos)``.

    ``kpos`` is the position in ``a`` of the blocking row; ``(inf, -1)`` when none blocks.
    """
    if not a.size:
        return np.inf, -1
    rtol = 1e-11 * max(1.0, float(np.max(np.abs(r))))
    cand_j = (~eq[a]) & (r > rtol)
    if not cand_j.any():
        return np.inf, -1
    jj = np.flatnonzero(cand_j)
    ratios = u[a[jj]] / r[jj]
    q = int(np.argmin(ratios))
    return max(float(ratios[q]), 0.0), int(jj[q])


def _unbounded_dual_farkas(b: np.ndarray, p: int, a: np.ndarray, r: np.ndarray, sg: np.ndarray,
                           it: int) -> QPResult:
    """The "infeasible" result when the dual step is unbounded: the step direction is a Farkas vector."""
    N = b.size
    f = np.zeros(N)
    f[p] = 1.0
    if a.size:
        f[a] = -r
    f = f * sg
    bf = float(b @ f)
    f = f / bf if bf > 0 else f / max(np.abs(f).sum(), 1e-300)
    offending = [int(k) for k in np.flatnonzero(np.abs(f) > 1e-9 * np.abs(f).max())]
    return QPResult("infeasible", np.zeros(N), farkas=f, iterations=it, method="goldfarb-idnani",
                    info={"offending": offending})


def _polish_active(G: np.ndarray, b: np.ndarray, eq: np.ndarray, active: list[int], sg: np.ndarray,
                   lam: np.ndarray) -> np.ndarray:
    """Exact solve of the active system with one refinement step; ``lam`` (N,) kept if it fails."""
    if not active:
        return lam
    a = np.array(active)
    Gaa = G[np.ix_(a, a)]
    try:
        c = sla.cho_factor(Gaa, lower=True, check_finite=False)
        x = sla.cho_solve(c, b[a], check_finite=False)
        x += sla.cho_solve(c, b[a] - Gaa @ x, check_finite=False)
        if np.all((x * sg[a] >= 0) | eq[a]):
            lam = np.zeros(b.size)
            lam[a] = x
    except np.linalg.LinAlgError:
        pass
    return lam


@_checks_tol
def goldfarb_idnani(G: np.ndarray, b: np.ndarray, eq: np.ndarray, *, tol: float,
                    maxit: int | None = None) -> QPResult:
    """Goldfarb-Idnani dual active-set method with an identity Hessian, in Gram form.

    Solves ``min 1/2 ||W||^2 s.t. <W, A_k> >= b_k`` (``==`` on ``eq``) where only
    ``G[k, l] = <A_k, A_l>`` is known. Exact up to rounding; linearly dependent
    constraints are handled; infeasibility ends with a Farkas certificate.

    Parameters
    ----------
    G : (N, N), b : (N,), eq : (N,) bool

    Returns
    -------
    QPResult with ``lam (N,)`` such that ``W = sum lam_k A_k``; or status
    "infeasible" with ``farkas (N,)``: ``lam >= 0`` on inequality rows,
    ``sum lam_k A_k = 0`` (up to rounding), ``b^T lam = 1``.
    """
    N = b.size
    maxit = maxit or (20 * N + 100)
    diag = np.diag(G).copy()
    btol = _tol_b(b, tol)
    zero, infeasible = _zero_row_farkas(diag, b, eq, btol)
    if infeasible is not None:
        return infeasible
    usable = ~zero
    sg = np.ones(N)
    u = np.zeros(N)  # multipliers of the sign-adjusted constraints
    m = np.zeros(N)  # current constraint values <W, A_k> (original signs)
    active: list[int] = []
    is_active = np.zeros(N, bool)
    L = np.zeros((max(N, 1), max(N, 1)))
    it = 0

    while True:
        p = _most_violated(m - b, usable & ~is_active, eq, diag, btol, sg)
        if p is None:
            break
        s_p = sg[p] * (m[p] - b[p])
        while True:
            it += 1
            if it > maxit:
                raise RuntimeError("Goldfarb-Idnani did not terminate (numerical cycling)")
            s = len(active)
            a = np.array(active, dtype=np.int64)
            lvec, r, zz = _step_direction(G, diag, L, a, sg, p)
            t1, kpos = _blocking_multiplier(u, r, a, eq)
            dependent = zz <= 1e-12 * diag[p]
            t2 = np.inf if dependent else -s_p / zz
            t = min(t1, t2)
            if not np.isfinite(t):
                return _unbounded_dual_farkas(b, p, a, r, sg, it)
            if not dependent:
                dc = np.zeros(s + 1)
                dc[:s] = -r * sg[a]
                dc[s] = sg[p]
                rows = np.append(a, p)
                m += t * (dc @ G[rows])
            if s:
                u[a] -= t * r
            u[p] += t
            if t == t2:
                active.append(p)
                is_active[p] = True
                L[s, :s] = lvec
                L[s, s] = np.sqrt(zz)
                break
            k = active.pop(kpos)
            is_active[k] = False
            u[k] = 0.0
            L[: s - 1, : s - 1] = _cholesky_delete(L[:s, :s], kpos)
            s_p += t * zz if not dependent else 0.0
    lam = _polish_active(G, b, eq, active, sg, u * sg)
    return QPResult("optimal", lam, iterations=it, method="goldfarb-idnani")


@_checks_tol
def solve_gram_qp(G: np.ndarray, b: np.ndarray, eq: np.ndarray, *, tol: float,
                  method: str = "auto") -> QPResult:
    """Solve the Frobenius dual QP given its Gram matrix (see module docstring).

    Parameters
    ----------
    G : (N, N), b : (N,), eq : (N,) bool
    method : "auto" (fast path, then the robust one), "pdas" or "goldfarb-idnani"
    """
    check_choice(method, "method", ("auto", "pdas", "goldfarb-idnani"))
    if method in ("auto", "pdas"):
        res = pdas.unchecked(G, b, eq, tol=tol)
        if res is not None or method == "pdas":
            if res is None:
                raise RuntimeError("pdas failed (dependent constraints or cycling)")
            return res
    return goldfarb_idnani.unchecked(G, b, eq, tol=tol)
