"""The one row scaling of the solvers: exact powers of two applied to the rows and inverted on the results."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RowScaling", "representable"]


@dataclass(frozen=True)
class RowScaling:
    """How :meth:`ConstraintSet.normalized` scaled the rows (all powers of two, exact).

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
