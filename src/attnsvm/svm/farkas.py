"""Proofs of infeasibility: a Farkas certificate checked in exact arithmetic.

The rows ``u_k^T W w_k >= rhs_k`` (``=`` on equality rows) admit no W if and only if there are
multipliers ``f`` (``f_k >= 0`` on inequality rows, any sign on equality rows) with
``sum_k f_k u_k w_k^T = 0`` and ``rhs^T f > 0`` (Farkas' lemma). A solver's multipliers are
floats: their combination ``S = sum_k f_k u_k w_k^T`` is small, not zero. That proves less than
infeasibility: every W satisfying the rows has ``<W, S> >= rhs^T f``, so ``||W||_F >= rhs^T f /
||S||_F`` (:func:`norm_lower_bound`), and a system within rounding of an infeasible one may be
feasible with a W of norm ``1 / eps``. Example: ``u_1 = (1, 0)``, ``u_2 = (-1, e)``, ``w_1 = w_2 =
(1, 0)``, rhs 1: the multipliers (1/2, 1/2) leave ``||S|| = e / 2`` (relative residual 5e-15 at
``e = 1e-14``), yet ``W = [[1, 0], [2 / e, 0]]`` satisfies both rows.

:func:`exact_farkas` therefore claims infeasibility only with a proof on the data as given. Every
float64 is a rational (an integer times a power of two), so each row is ``u_k = 2^a_k Ũ_k``,
``w_k = 2^b_k Ṽ_k`` with integer vectors Ũ_k, Ṽ_k, and ``g_k = f_k 2^(a_k + b_k)`` must solve the
integer system ``sum_k g_k Ũ_k Ṽ_k^T = 0``. On the rows J that the float multipliers combine:

1. ``|J| + 2`` random rank-one functionals ``phi_t(A) = p_t^T A q_t`` (integer p_t, q_t) turn the
   ``d1 d2`` equations into a small integer system E (``(|J| + 2, |J|)``) whose null space contains
   that of the full system (equal to it for all but a negligible set of p, q);
2. E's null space, exactly: E of full column rank modulo the prime 2^31 - 1 proves it trivial (a rank can only
   drop modulo a prime); else fraction-free Gauss-Jordan on Python integers;
3. the null vector nearest the float multipliers (the only one when the null space is a line), with
   exact sign and ``rhs^T f > 0`` checks;
4. the full system checked exactly: ``||sum_k g_k Ũ_k Ṽ_k^T||_F^2 = g^T ((Ũ Ũ^T) * (Ṽ Ṽ^T)) g = 0``,
   or the matrix itself, whichever is cheaper.

Step 4 is what proves: steps 1-3 only choose the candidate, so a bad draw of p, q or a float guess
can cost a proof, never make a false one. A set too large for exact arithmetic within
:data:`EXACT_BUDGET` is not proven that way.

Robustly infeasible sets (zero inside the hull of the rows' matrices, as in random over-determined selections)
have a cheaper proof that needs no exact arithmetic and no bound on the rows: :func:`_robust_proof` shows that
exact multipliers exist near the float ones (the rows span every matrix entry they touch, with a smallest singular
value that outweighs the float multipliers' residual). It is tried first; what neither proves is "undecided"
(the solvers then report the norm bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable
from fractions import Fraction
from math import gcd

import numpy as np

__all__ = ["FarkasProof", "exact_farkas", "norm_lower_bound", "EXACT_BUDGET", "EXACT_MAX_ROWS"]

#: at most this many rows take part in an exact proof: the elimination costs ``|J|^3`` operations on integers of
#: ``|J|`` times ~200 bits, seconds at a few tens of rows and minutes beyond this limit on random dense rows
#: (exactly dependent rows such as repeated tokens give far smaller integers; the timings:
#: docs/guide/performance.md, "Solver design decisions and their measurements")
EXACT_MAX_ROWS = 64
#: at most this many big-integer multiply-adds in the final exact check (step 4: a few seconds)
EXACT_BUDGET = 2.0e7
_U = 2.0 ** -53                                     # unit roundoff of float64
_TINY = 2.0 ** -1074                                # the smallest subnormal: rounding below the normal range


@dataclass(frozen=True)
class FarkasProof:
    """The outcome of :func:`exact_farkas`.

    Attributes
    ----------
    proven : bool
        True when multipliers with an exactly zero combination and ``rhs^T f > 0`` were found.
    farkas : (N,) float64 or None
        Proven: the exact multipliers rounded to float64 and scaled to ``rhs^T f = 1`` (zero off the
        rows used; a multiplier below float64's range rounds to 0). None when not proven or when one
        overflows.
    rows : (s,) int
        The rows the proof combines (every nonzero exact multiplier), else the rows last tried.
    reason : str
        Why it is not proven ("" when proven).
    exact : bool
        Proven by exact multipliers (rounded in ``farkas``); False for the robust proof (:func:`_robust_proof`):
        exact multipliers exist within a proven distance of the float ones in ``farkas``.
    """

    proven: bool
    farkas: np.ndarray | None
    rows: np.ndarray
    reason: str = ""
    exact: bool = True


def norm_lower_bound(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, eq: np.ndarray, f: np.ndarray) -> float:
    """A proven lower bound on ``||W||_F`` (hence on ``||W||_*``) over every W satisfying the rows.

    ``U (N, d1)``, ``V (N, d2)``, ``rhs (N,)``, ``eq (N,)`` bool, multipliers ``f (N,)``. For f >= 0 on
    inequality rows, every feasible W has ``||W||_F ||S||_F >= <W, S> >= rhs^T f`` with
    ``S = sum_k f_k u_k w_k^T``; the float rounding of S and of ``rhs^T f`` is bounded a priori
    (``gamma_n = n u / (1 - n u)`` times the sums of absolute terms) and taken against the bound.
    Returns 0.0 when f proves nothing (a negative multiplier on an inequality row, ``rhs^T f <= 0``
    after rounding) and ``inf`` when S is exactly zero with ``rhs^T f > 0`` (then :func:`exact_farkas`
    decides).
    """
    U, V = np.asarray(U, np.float64), np.asarray(V, np.float64)
    rhs, f = np.asarray(rhs, np.float64), np.asarray(f, np.float64)
    eq = np.asarray(eq, bool)
    if f.size == 0 or not np.all(np.isfinite(f)) or np.any(f[~eq] < 0):
        return 0.0
    nz = np.flatnonzero(f)
    if nz.size == 0:
        return 0.0
    Uj, Vj, fj, bj = U[nz], V[nz], f[nz], rhs[nz]
    top = float(np.abs(fj).max())
    fs = fj / top                                         # exact up to rounding: the bound is scale-free
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        S = (Uj * fs[:, None]).T @ Vj
        s_norm = float(np.linalg.norm(S))
        gamma = (nz.size + 2) * _U / (1 - (nz.size + 2) * _U)
        s_err = gamma * float(np.abs(fs) @ (np.linalg.norm(Uj, axis=1) * np.linalg.norm(Vj, axis=1)))
        bf = float(bj @ fs)
        bf_err = gamma * float(np.abs(bj) @ np.abs(fs))
    lo = bf - bf_err
    if not (lo > 0 and np.isfinite(s_norm) and np.isfinite(s_err)):
        return 0.0
    den = s_norm + s_err
    return float("inf") if den == 0 else lo / den * (1 - 4 * _U)


def _int_parts(A: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``A (s, d)`` as ``2^e_k Ã_k`` with integer rows ``Ã = mant * 2^shift``: ``(mant (s, d) int64
    below 2^53 in absolute value, shift (s, d) int64 >= 0, e (s,) int64)``.

    Exact: ``frexp`` splits each float into a 53-bit mantissa and an exponent; each row is shifted to its
    smallest exponent among its nonzero entries (0 for a zero row)."""
    m, e = np.frexp(A)
    mant = np.ldexp(m, 53).astype(np.int64)             # exact: m in [0.5, 1) has 53 bits
    exp = e.astype(np.int64) - 53
    nz = mant != 0
    big = np.iinfo(np.int64).max
    emin = np.where(nz, exp, big).min(axis=1) if A.shape[1] else np.zeros(A.shape[0], np.int64)
    emin = np.where(emin == big, 0, emin)
    return mant, np.where(nz, exp - emin[:, None], 0), emin


def _as_integers(mant: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """The integer matrix ``mant * 2^shift`` (object array of Python ints, same shape)."""
    out = np.empty(mant.shape, dtype=object)
    for idx in np.ndindex(*mant.shape):
        out[idx] = int(mant[idx]) << int(shift[idx])
    return out


#: a prime below 2^31 (products of two residues fit int64): the rank modulo it bounds the rank over Q from below
_PRIME = 2 ** 31 - 1


def _rref_mod(A: np.ndarray, p: int) -> tuple[list[int], np.ndarray]:
    """Reduced row echelon form of the int64 matrix ``A (k, s)`` (entries in [0, p)) modulo the prime ``p``:
    ``(pivot columns, R)`` with R's first ``len(pivots)`` rows the reduced rows."""
    R = A.copy()
    k, s = R.shape
    pivots: list[int] = []
    r = 0
    for c in range(s):
        if r == k:
            break
        nz = np.flatnonzero(R[r:, c])
        if nz.size == 0:
            continue
        i = r + int(nz[0])
        if i != r:
            R[[r, i]] = R[[i, r]]
        R[r] = R[r] * pow(int(R[r, c]), p - 2, p) % p
        col = R[:, c].copy()
        col[r] = 0
        rows = np.flatnonzero(col)
        if rows.size:
            R[rows] = (R[rows] - col[rows, None] * R[r][None, :]) % p
        pivots.append(c)
        r += 1
    return pivots, R


def _nullspace(E: list[list[int]], s: int) -> list[list[int]]:
    """Integer basis of the null space of the integer matrix ``E`` (rows of length ``s``): fraction-free
    Gauss-Jordan (each row kept primitive by its gcd), one basis vector per free column."""
    rows = [list(r) for r in E if any(r)]
    pivots: list[int] = []
    r = 0
    for c in range(s):
        p = next((i for i in range(r, len(rows)) if rows[i][c] != 0), None)
        if p is None:
            continue
        rows[r], rows[p] = rows[p], rows[r]
        pr = rows[r]
        for i in range(len(rows)):
            if i != r and rows[i][c] != 0:
                a, b = pr[c], rows[i][c]
                new = [a * x - b * y for x, y in zip(rows[i], pr)]
                g = 0
                for x in new:
                    g = gcd(g, x)
                rows[i] = [x // g for x in new] if g > 1 else new
        pivots.append(c)
        r += 1
        if r == len(rows):
            break
    free = [c for c in range(s) if c not in set(pivots)]
    basis = []
    for fc in free:
        L = 1
        for i, pc in enumerate(pivots):
            a = abs(rows[i][pc])
            L = L * a // gcd(L, a)
        v = [0] * s
        v[fc] = L
        for i, pc in enumerate(pivots):
            v[pc] = -rows[i][fc] * (L // rows[i][pc])
        g = 0
        for x in v:
            g = gcd(g, x)
        basis.append([x // g for x in v] if g > 1 else v)
    return basis


def _residues(A: np.ndarray, e: np.ndarray, p: int) -> np.ndarray:
    """``A mod p`` for the integer matrix ``A = mant * 2^e`` given by int64 mantissas ``mant`` (below 2^53) and
    shifts ``e >= 0`` (int64, same shape): entries in [0, p)."""
    top = int(e.max(initial=0))
    pw = np.empty(top + 1, dtype=np.int64)
    pw[0] = 1
    for i in range(1, top + 1):
        pw[i] = pw[i - 1] * 2 % p
    return (A % p) * pw[e] % p


def _to_float_direction(v: list) -> np.ndarray:
    """A float64 vector with the direction of the exact vector ``v`` (entries scaled by one power of two)."""
    top = max((abs(x).bit_length() if isinstance(x, int) else abs(x.numerator).bit_length()
               - abs(x.denominator).bit_length() for x in v if x != 0), default=0)
    sh = Fraction(1, 2 ** top) if top > 0 else Fraction(2 ** -top)
    return np.array([float(Fraction(x) * sh) for x in v])


def _candidate(basis: list[list[int]], target: np.ndarray) -> list[Fraction] | None:
    """The null vector nearest ``target`` (s,) when the null space is a line (its basis vector, the sign
    chosen by the target), else the least-squares combination with rationalized coefficients."""
    if not basis:
        return None
    if len(basis) == 1:
        v = basis[0]
        d = _to_float_direction(v)
        sign = 1 if float(d @ target) >= 0 else -1
        return [Fraction(sign * x) for x in v]
    B = np.stack([_to_float_direction(v) for v in basis], axis=1)
    scales = [max(abs(x) for x in v).bit_length() for v in basis]
    c, *_ = np.linalg.lstsq(B, target, rcond=None)
    if not np.all(np.isfinite(c)):
        return None
    out = [Fraction(0)] * len(basis[0])
    for ci, v, sc in zip(c, basis, scales):
        w = Fraction(float(ci)) / Fraction(2) ** sc
        out = [o + w * x for o, x in zip(out, v)]
    return out


def _vertex_rows(basis: list[list[int]], eq: np.ndarray, bw: np.ndarray) -> np.ndarray | None:
    """Rows of a vertex of ``{g in span(basis): g >= 0 on inequality rows, bw^T g = 1}`` (float64 simplex),
    whose null space is usually a line: a smaller support to try exactly. None when the float LP finds no
    point (which proves nothing: the caller then reports no proof)."""
    from scipy.optimize import linprog

    B = np.stack([_to_float_direction(v) for v in basis], axis=1)
    ineq = ~eq
    res = linprog(c=B[ineq].sum(axis=0), A_ub=-B[ineq], b_ub=np.zeros(int(ineq.sum())),
                  A_eq=(bw @ B)[None, :], b_eq=[1.0], bounds=[(None, None)] * B.shape[1], method="highs-ds")
    if res.status != 0:
        return None
    g = B @ res.x
    top = float(np.abs(g).max())
    return np.flatnonzero(np.abs(g) > 1e-9 * top) if top > 0 else None


def _zero_combination(Ui: np.ndarray, Vi: np.ndarray, g: list[int]) -> bool:
    """``sum_k g_k Ũ_k Ṽ_k^T == 0`` exactly for integer rows ``Ui (s, d1)``, ``Vi (s, d2)`` (object)."""
    s, d1 = Ui.shape
    d2 = Vi.shape[1]
    gv = np.array(g, dtype=object)
    if s * d1 * d2 <= s * s * (d1 + d2):
        S = Ui.T.dot(Vi * gv[:, None])
        return all(x == 0 for x in S.flat)
    GU = Ui.dot(Ui.T)
    GV = Vi.dot(Vi.T)
    return (gv.dot((GU * GV).dot(gv))) == 0


def exact_farkas(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, eq: np.ndarray, f: np.ndarray, *,
                 differences: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray] | None] | None = None,
                 rel_support: float = 1e-9, seed: int = 0) -> FarkasProof:
    """Prove, in exact arithmetic, that the rows admit no W, starting from float multipliers ``f``.

    ``U (N, d1)``, ``V (N, d2)``, ``rhs (N,)``, ``eq (N,)`` bool (the data as given, any scale), and
    ``f (N,)`` multipliers whose combination is near zero. The rows tried are those with
    ``|f_k| > rel_support max |f|`` (then every row with ``f_k != 0``). See the module docstring for
    the method; ``seed`` draws the functionals of step 1 (a bad draw can only cost a proof).
    ``differences(rows)``, when given, returns ``(Xa, Xb)`` (each ``(s, d1)``) with ``U[rows]`` the float64
    ``Xa - Xb`` (rows built as differences of tokens, :meth:`~attnsvm.svm.ConstraintSet.token_differences`)
    or None: the proof then uses the exact differences, the data those rows round. Rows whose combination
    vanishes only in exact differences (``(x_a - x_b) + (x_b - x_c) + (x_c - x_a)``) are proven so.
    When no proof is found on the rows ``f`` combines and there are at most :data:`EXACT_MAX_ROWS` rows,
    all rows are tried (a float search for multipliers may miss an exact dependency elsewhere).
    """
    U, V = np.asarray(U, np.float64), np.asarray(V, np.float64)
    rhs, f = np.asarray(rhs, np.float64), np.asarray(f, np.float64)
    eq = np.asarray(eq, bool)
    N = U.shape[0]
    empty = np.zeros(0, np.int64)
    if f.shape != (N,) or not np.all(np.isfinite(f)) or not np.any(f):
        return FarkasProof(False, None, empty, "no finite nonzero multipliers")
    top = float(np.abs(f).max())
    J = np.flatnonzero(f)
    robust = _robust_proof(U[J], V[J], rhs[J], eq[J], f[J])   # cheap where it applies (|J| >= d1 d2)
    if robust is None:
        out = np.zeros(N)
        out[J] = f[J] / float(rhs[J] @ f[J])
        return FarkasProof(True, out, J, "", exact=False)
    tried = []
    reason = ""
    for J in (np.flatnonzero(np.abs(f) > rel_support * top), np.flatnonzero(f), np.arange(N)):
        if any(np.array_equal(J, t) for t in tried) or (J.size == N and N > EXACT_MAX_ROWS):
            continue
        tried.append(J)
        pairs = None if differences is None else differences(J)
        proof = _prove_on(U[J], V[J], rhs[J], eq[J], f[J], seed, pairs=pairs)
        if isinstance(proof, str):
            reason = proof
            continue
        vals, nz = proof
        out = np.zeros(N)
        out[J] = vals
        return FarkasProof(True, out if np.all(np.isfinite(out)) else None, J[nz])
    return FarkasProof(False, None, tried[-1] if tried else empty, f"{reason}; {robust}" if reason else robust)


#: the largest ``d1 d2 x |J|`` matrix :func:`_robust_proof` forms (float64 entries)
ROBUST_MAX_ENTRIES = 4_000_000


def _robust_proof(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, eq: np.ndarray, f: np.ndarray) -> str | None:
    """None when float multipliers ``f (s,)`` on these rows prove infeasibility without exact arithmetic, else why not.

    The proof: let ``A* (D, s)`` hold the exact ``vec(u_k w_k^T)`` (the rows' floats, or the exact token differences
    they round, each entry within ``3 u`` relative of the float product, u the unit roundoff) over the ``D``
    nonzero entry positions. If its smallest singular value ``sigma`` is positive (``s >= D``), A* maps onto R^D,
    so some g with ``||g||_2 <= ||A* f|| / sigma`` has ``A* (f + g) = 0``; when every inequality multiplier exceeds
    that bound and ``rhs^T f > ||rhs|| ||g||``, ``f + g`` is an exact Farkas certificate. Every float quantity is
    taken at its a priori error bound: the singular values within ``10 max(D, s) u ||A||_2`` (backward stable SVD)
    plus ``3 u ||A||_F`` (the entries), ``A f`` within ``gamma_s |A| |f|`` plus the entries' error. This proves the
    robustly infeasible sets (zero inside the hull of the rows, as random over-determined selections are) at any
    size the matrix fits; it never proves a set whose rows are exactly dependent (then sigma is 0).
    """
    s = U.shape[0]
    cu, cv = np.flatnonzero(np.any(U != 0, axis=0)), np.flatnonzero(np.any(V != 0, axis=0))
    D = cu.size * cv.size
    if s == 0 or D == 0 or D > s:
        return f"the {s} rows cannot span their {D} matrix entries (no robust proof)"
    if D * s > ROBUST_MAX_ENTRIES or not np.all(np.isfinite(f)) or np.any(f[~eq] <= 0):
        return "no robust proof (too large, or a multiplier is not positive)"
    # rows scaled by powers of two to entries below 1 (the certificate's existence is unchanged: f_k 2^(a_k + b_k)
    # multiplies the scaled row k as f_k multiplied row k; rhs_k 2^-(a_k + b_k) keeps every product rhs_k f_k)
    a = np.frexp(np.abs(U).max(axis=1))[1].astype(np.int64)
    b = np.frexp(np.abs(V).max(axis=1))[1].astype(np.int64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        Un, Vn = np.ldexp(U[:, cu], -a[:, None]), np.ldexp(V[:, cv], -b[:, None])
        mf, ef = np.frexp(f)
        ef = ef.astype(np.int64) + a + b
        fs = np.ldexp(mf, ef - int(ef.max()))            # f in the scaled rows' units, largest entry in [0.5, 1)
        mb, eb = np.frexp(rhs)
        eb = eb.astype(np.int64) - a - b
        bs = np.ldexp(mb, eb - int(eb[mb != 0].max(initial=0)))
        A = (Un[:, :, None] * Vn[:, None, :]).reshape(s, D).T      # (D, s), entries below 1
        # each entry within 3u relative of the exact product of the rows' data (their exact token differences
        # included), plus the absolute rounding of results below float64's normal range
        sv = np.linalg.svd(A, compute_uv=False)
        nF = float(np.linalg.norm(A))
        err_A = 3 * _U * nF + 4 * _TINY * np.sqrt(D * s)
        sigma = float(sv[-1]) - 10 * max(D, s) * _U * float(sv[0]) - err_A
        gamma = s * _U / (1 - s * _U)
        S = A @ fs
        err_S = gamma * float(np.linalg.norm(np.abs(A) @ np.abs(fs))) + err_A * float(np.linalg.norm(fs)) \
            + s * _TINY
        g = (float(np.linalg.norm(S)) + err_S) / sigma if sigma > 0 else float("inf")
        bf = float(bs @ fs) - gamma * float(np.abs(bs) @ np.abs(fs)) - s * _TINY
    ineq = ~eq
    if not (np.isfinite(g) and sigma > 0 and np.all(fs[ineq] > g * (1 + 4 * _U))
            and bf > float(np.linalg.norm(bs)) * g * (1 + 4 * _U)):
        return "no robust proof (the rows are not robustly infeasible at these multipliers)"
    return None


def _prove_on(U: np.ndarray, V: np.ndarray, rhs: np.ndarray, eq: np.ndarray, f: np.ndarray,
              seed: int, depth: int = 0, pairs: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[np.ndarray, np.ndarray] | str:
    """Exact multipliers on these ``s`` rows, rounded to float64 (``rhs^T f = 1``), and where they are nonzero
    (``(s,)`` float, ``(s,)`` bool: a multiplier may round to 0), or the reason there are none.
    ``pairs``: ``(Xa, Xb)`` whose exact differences the rows ``U`` round (see :func:`exact_farkas`)."""
    s, d1 = U.shape
    d2 = V.shape[1]
    if s > EXACT_MAX_ROWS:
        return f"{s} rows: beyond the exact check's {EXACT_MAX_ROWS}"
    # nonzero columns only (a zero column contributes nothing to any combination)
    cu, cv = np.flatnonzero(np.any(U != 0, axis=0)), np.flatnonzero(np.any(V != 0, axis=0))
    U, V = U[:, cu], V[:, cv]
    d1, d2 = U.shape[1], V.shape[1]
    if min(s * d1 * d2, s * s * (d1 + d2)) > EXACT_BUDGET:
        return f"{s} rows of sizes ({d1}, {d2}): beyond the exact check's budget"
    if pairs is None:
        mu, su, a = _int_parts(U)
        Ui = _as_integers(mu, su)
        ures = lambda p: _residues(mu, su, p)  # noqa: E731
    else:                               # exact differences: both tokens on one exponent per row, subtracted
        mab, sab, a = _int_parts(np.concatenate([pairs[0][:, cu], pairs[1][:, cu]], axis=1))
        Iab = _as_integers(mab, sab)
        Ui = Iab[:, :d1] - Iab[:, d1:]
        ures = lambda p: (_residues(mab[:, :d1], sab[:, :d1], p) - _residues(mab[:, d1:], sab[:, d1:], p)) % p  # noqa: E731
    mv, sv, b = _int_parts(V)
    Vi = _as_integers(mv, sv)
    rng = np.random.default_rng(seed)
    k = s + 2
    P = rng.integers(1, 2 ** 20, size=(d1, k))
    Q = rng.integers(1, 2 ** 20, size=(d2, k))

    def E_mod(p: int) -> np.ndarray:
        """``E = ((Ũ P) * (Ṽ Q))^T mod p`` (k, s): the rows under k random rank-one functionals."""
        return ((ures(p) @ P % p) * (_residues(mv, sv, p) @ Q % p) % p).T.copy()

    E_exact = ((Ui.dot(P.astype(object))) * (Vi.dot(Q.astype(object)))).T
    if not (d1 and d2):
        basis = [[int(c == j) for c in range(s)] for j in range(s)]
    elif len(_rref_mod(E_mod(_PRIME), _PRIME)[0]) == s:
        basis = []              # full column rank modulo a prime, so over Q (a rank only drops modulo p)
    else:
        basis = _nullspace([[int(x) for x in row] for row in E_exact], s)
    if not basis:
        return "the rows' combinations are independent in exact arithmetic (no Farkas multipliers on them)"
    # the float multipliers in the integer rows' units: g_k = f_k 2^(a_k + b_k), scaled by one power of 2
    shift = int(np.max(a + b))
    with np.errstate(over="ignore", under="ignore"):
        target = np.ldexp(f, (a + b - shift).astype(np.int64))
    if len(basis) > 1 and depth < 4:
        # a plane of null vectors: a vertex of its Farkas cone has fewer rows; prove on those
        m, e = np.frexp(rhs)                          # rhs_k 2^-(a_k + b_k), scaled by one power of two
        ex = e.astype(np.int64) - a - b
        with np.errstate(under="ignore"):
            bw = np.ldexp(m, ex - int(ex[m != 0].max(initial=0)))
        J = _vertex_rows(basis, eq, bw)
        if J is not None and J.size < s:
            sub = _prove_on(U[J], V[J], rhs[J], eq[J], f[J], seed, depth + 1,
                            None if pairs is None else (pairs[0][J][:, cu], pairs[1][J][:, cu]))
            if not isinstance(sub, str):
                out, nz = np.zeros(s), np.zeros(s, bool)
                out[J], nz[J] = sub
                return out, nz
    g = _candidate(basis, target)
    if g is None:
        return "no finite combination of the exact null vectors"
    # f_k = g_k 2^-(a_k + b_k): sign conditions and rhs^T f > 0, exactly
    if any(gk < 0 for gk, is_eq in zip(g, eq) if not is_eq):
        return "the exact null vector has a negative multiplier on an inequality row"
    fr = [gk / Fraction(2) ** int(ak + bk) if ak + bk >= 0 else gk * Fraction(2) ** int(-(ak + bk))
          for gk, ak, bk in zip(g, a, b)]
    bf = sum((Fraction(float(r)) * fk for r, fk in zip(rhs, fr)), Fraction(0))
    if not bf > 0:
        return "the exact null vector has rhs^T f <= 0"
    den = 1
    for gk in g:
        den = den * gk.denominator // gcd(den, gk.denominator)
    gi = [int(gk * den) for gk in g]
    if not _zero_combination(Ui, Vi, gi):
        return "the candidate multipliers' combination is not exactly zero"
    return np.array([_float(fk / bf) for fk in fr]), np.array([fk != 0 for fk in fr], dtype=bool)


def _float(x: Fraction) -> float:
    """``x`` correctly rounded to float64 (``+-inf`` beyond its range)."""
    try:
        return float(x)
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")
