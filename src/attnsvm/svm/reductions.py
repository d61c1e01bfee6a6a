"""The reductions of the solvers, each an apply / invert pair: transform the rows, solve the smaller or better
scaled problem, map the answer back (cvxpy's apply -> solve -> invert).

* :class:`RowScaling`: exact powers of two on the rows (any data scale float64 holds gives the same answer);
  :meth:`RowScaling.apply` scales a set, the other methods map W, multipliers, Farkas multipliers and margins back.
* :class:`SubspaceBasis`: ``W = P M B^T`` with orthonormal bases ``P`` of the u's and ``B`` of the w's (the
  reduced conic and interior-point problems): :meth:`SubspaceBasis.rows` and :meth:`SubspaceBasis.reduce` apply
  it to the rows and to a W, :meth:`SubspaceBasis.lift` maps a reduced M back.
* :class:`RowSubset`: some rows of N (the working set, the rows that constrain anything): :meth:`RowSubset.take`
  and :meth:`RowSubset.lift`, which puts the subset's per-row values (multipliers) back among all N rows.

The row scaling
---------------
A positive factor on a constraint row ``u_k^T W w_k >= rhs_k`` and its right-hand side leaves the
constraint unchanged, so every solver works on scaled rows ``u_k 2^-a_k``, ``w_k 2^-b_k``,
``rhs_k 2^-(a_k + b_k + E)`` (a :class:`RowScaling`): any data scale float64 can hold gives the same
answer, and powers of two are exact. The exponents come from one of three constructors, one per need:

* :meth:`RowScaling.unit_rows`: rows with entries below 1 and right-hand sides at most 1 (the
  dense solvers: :meth:`ConstraintSet.normalized`);
* :meth:`RowScaling.row_norms`: ``2^a_k`` just above ``||u_k||``, ``2^b_k`` above ``||w_k||``, W
  unchanged (``E = 0``; the working set, which scales the rows it reads and copies nothing);
* :meth:`RowScaling.uniform`: one power of two for all rows and right-hand sides unchanged (the
  soft margin, whose slack penalty C is shared by every row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RowScaling", "SubspaceBasis", "RowSubset", "representable"]


@dataclass(frozen=True)
class RowScaling:
    """How the rows of a constraint set are scaled (all powers of two, exact; module docstring).

    Attributes
    ----------
    a, b : (N,) int64, exponents of the row factors: ``u'_k = u_k 2^-a_k``, ``w'_k = w_k 2^-b_k``
    E : int, exponent of the right-hand sides: ``rhs'_k = rhs_k 2^-(a_k + b_k + E)``

    A solution ``W'`` of the scaled set is ``W = W' 2^E`` of the original one. Multipliers
    map differently per objective: those of ``1/2 ||W||_F^2`` (Frobenius, :mod:`.qp`) as
    ``lam_k = lam'_k 2^(E - a_k - b_k)``; those of ``||W||_*`` or ``||W||_F`` (norm
    objectives, dual ball ``||sum lam_k u_k w_k^T|| <= 1``) as ``lam_k = lam'_k 2^-(a_k + b_k)``;
    Farkas multipliers (``rhs^T f = 1``) as ``f_k = f'_k 2^-(a_k + b_k + E)``. Margins map
    as ``m_k = m'_k 2^(a_k + b_k + E)``.
    """

    a: np.ndarray
    b: np.ndarray
    E: int

    # ------------------------------------------------------------ constructors (which exponents)
    @classmethod
    def unit_rows(cls, U: np.ndarray, V: np.ndarray, rhs: np.ndarray) -> "RowScaling":
        """Entries of every scaled row below 1 and scaled right-hand sides at most 1: ``2^a_k``,
        ``2^b_k`` the powers of two just above ``max |u_k|``, ``max |w_k|``, ``2^E`` that of the
        largest row-scaled ``|rhs|``. ``U (N, d1)``, ``V (N, d2)``, ``rhs (N,)``."""
        N = U.shape[0]
        if N == 0:
            z = np.zeros(0, np.int64)
            return cls(z, z.copy(), 0)
        _, a = np.frexp(np.abs(U).max(axis=1) if U.shape[1] else np.zeros(N))
        _, b = np.frexp(np.abs(V).max(axis=1) if V.shape[1] else np.zeros(N))
        a, b = a.astype(np.int64), b.astype(np.int64)
        er = np.frexp(rhs)[1].astype(np.int64) - a - b
        nz = rhs != 0
        return cls(a, b, int(er[nz].max()) if nz.any() else 0)

    @classmethod
    def row_norms(cls, un: np.ndarray, wn: np.ndarray) -> "RowScaling":
        """``2^a_k`` just above ``||u_k||`` (``un (N,)``), ``2^b_k`` above ``||w_k||`` (``wn (N,)``), ``E = 0``."""
        return cls(np.frexp(un)[1].astype(np.int64), np.frexp(wn)[1].astype(np.int64), 0)

    @classmethod
    def uniform(cls, U: np.ndarray, V: np.ndarray) -> "RowScaling":
        """One power of two for all rows: ``2^a`` just above ``max |U|``, ``2^b`` above ``max |V|``,
        right-hand sides unchanged (``E = -(a + b)``). ``U (N, d1)``, ``V (N, d2)``."""
        _, a = np.frexp(np.abs(U).max()) if U.size else (0.0, 0)
        _, b = np.frexp(np.abs(V).max()) if V.size else (0.0, 0)
        N = U.shape[0]
        return cls(np.full(N, int(a), np.int64), np.full(N, int(b), np.int64), -(int(a) + int(b)))

    # ------------------------------------------------------------------------------- apply
    def apply(self, cs):
        """The scaled ConstraintSet (same labels): ``u_k 2^-a_k``, ``w_k 2^-b_k``, ``rhs_k 2^-s_k``."""
        if cs.N == 0:
            return cs
        with np.errstate(under="ignore"):
            return cs.with_rows(np.ldexp(cs.U, -self.a[:, None]), np.ldexp(cs.V, -self.b[:, None]), self.rhs(cs.rhs))

    def rows(self, U: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scaled factors ``(U 2^-a, V 2^-b)`` of rows ``U (N, d1)``, ``V (N, d2)`` of this scaling."""
        return np.ldexp(U, -self.a[:, None]), np.ldexp(V, -self.b[:, None])

    def rhs(self, rhs: np.ndarray) -> np.ndarray:
        """Scaled right-hand sides ``rhs_k 2^-s_k`` (N,)."""
        with np.errstate(under="ignore"):
            return np.ldexp(rhs, -self.s)

    def subset(self, rows: np.ndarray) -> "RowScaling":
        """The scaling of the rows ``rows`` (indices or a mask) alone."""
        return RowScaling(self.a[rows], self.b[rows], self.E)

    # ------------------------------------------------------------------------------ invert

    @property
    def s(self) -> np.ndarray:
        """(N,) exponent of each row's constraint values: ``a_k + b_k + E``."""
        return self.a + self.b + self.E

    def W(self, Wn: np.ndarray) -> np.ndarray:
        """``W' -> W`` (may overflow to inf or underflow: see :meth:`representable`)."""
        with np.errstate(over="ignore", under="ignore"):
            return np.ldexp(Wn, self.E)

    def W_to_n(self, W: np.ndarray) -> np.ndarray:
        return np.ldexp(W, -self.E)

    def lam(self, lam_n: np.ndarray, objective: str = "squared") -> np.ndarray:
        """Multipliers of the scaled set -> original; ``objective`` "squared" (1/2 ||W||_F^2)
        or "norm" (``||W||`` with a dual ball)."""
        e = (self.E - self.a - self.b) if objective == "squared" else (-self.a - self.b)
        with np.errstate(over="ignore", under="ignore"):
            return np.ldexp(lam_n, e)

    def lam_to_n(self, lam: np.ndarray, objective: str = "squared") -> np.ndarray:
        e = (self.E - self.a - self.b) if objective == "squared" else (-self.a - self.b)
        with np.errstate(over="ignore", under="ignore"):
            return np.ldexp(lam, -e)

    def farkas(self, f_n: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", under="ignore"):
            return np.ldexp(f_n, -self.s)

    def farkas_to_n(self, f: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", under="ignore"):
            return np.ldexp(f, self.s)

    def margins(self, m_n: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", under="ignore"):
            return np.ldexp(m_n, self.s)


@dataclass(frozen=True)
class SubspaceBasis:
    """``W = P M B^T``: orthonormal bases ``P (d1, r1)`` of the u's (None: the identity, ``r1 = d1``) and
    ``B (d2, r2)`` of the w's. Every W that the rows see lies in this form (a component outside the spans
    changes no margin and only adds to the norm), so the reduced problem in ``M (r1, r2)`` has the same
    optimum and multipliers.
    """

    P: np.ndarray | None
    B: np.ndarray

    @classmethod
    def of(cls, U: np.ndarray, V: np.ndarray, rtol: float = 1e-12) -> "SubspaceBasis":
        """The bases of the row spaces of ``U (N, d1)`` and ``V (N, d2)`` (SVD, relative cut ``rtol``)."""
        from attnsvm.svm.ipm.linalg import row_space_basis     # here: svm.ipm reads this module

        return cls(row_space_basis(U, rtol), row_space_basis(V, rtol))

    def rows(self, U: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows in the bases: ``(U P (N, r1), V B (N, r2))`` (``U`` itself when P is the identity)."""
        return (U if self.P is None else U @ self.P), V @ self.B

    def reduce(self, W: np.ndarray) -> np.ndarray:
        """``W (d1, d2) -> P^T W B (r1, r2)``."""
        return (W if self.P is None else self.P.T @ W) @ self.B

    def lift(self, M: np.ndarray) -> np.ndarray:
        """``M (r1, r2) -> P M B^T (d1, d2)``, as ``(P M) B^T``."""
        return (M if self.P is None else self.P @ M) @ self.B.T

    def lift_right(self, M: np.ndarray) -> np.ndarray:
        """``M (r1, r2) -> P M B^T (d1, d2)``, as ``P (M B^T)`` (the interior-point method's order: another
        rounding than :meth:`lift`, which the reduced conic solves use; each caller keeps its own)."""
        W = M @ self.B.T
        return W if self.P is None else self.P @ W


@dataclass(frozen=True)
class RowSubset:
    """The rows ``rows`` (indices (s,) or a mask (N,)) of a set of ``N`` rows."""

    rows: np.ndarray
    N: int

    def take(self, values: np.ndarray) -> np.ndarray:
        """The subset's entries of the per-row ``values (N, ...)``: ``(s, ...)``."""
        return values[self.rows]

    def lift(self, values: np.ndarray, fill: float = 0.0) -> np.ndarray:
        """The subset's per-row ``values (s,)`` among all N rows, ``fill`` elsewhere (multipliers: 0): (N,)."""
        out = np.full(self.N, fill)
        out[self.rows] = values
        return out


_TINY = float(np.finfo(np.float64).tiny)


def representable(values: np.ndarray, scaled: np.ndarray) -> bool:
    """Whether ``values`` (a mapped-back array) kept the information of ``scaled`` (its
    normalized counterpart): finite, and the largest entry not lost to underflow (a normal
    float64) unless ``scaled`` is zero."""
    if not np.all(np.isfinite(values)):
        return False
    top = float(np.max(np.abs(scaled))) if scaled.size else 0.0
    if top == 0.0:
        return True
    return float(np.max(np.abs(values))) >= _TINY
