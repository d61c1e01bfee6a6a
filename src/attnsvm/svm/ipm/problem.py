"""The reduced problem of the interior-point method: its data and linear maps (:class:`Problem`), the dual
quantities (:class:`Dual`), the iterate (:class:`Iterate`), the reduction of the caller's rows
(:func:`reduce_problem`, :class:`Reduction`) and the interior start (:func:`start_point`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from attnsvm.svm.reductions import RowSubset, SubspaceBasis
from attnsvm.svm.ipm.linalg import (blocks, chol_S, distinct_rows, eye, factor_lower, mT, max_reduce, nuclear_norm,
                                    row_space_basis, spectral_norm, svd, tri_inv, z_half)


#: :class:`Problem` works on the distinct queries when there are at most this fraction of the rows
GROUPED_MAX = 0.75
#: ... and its maps ``Gmap`` / ``amap`` too from this many rows on (below, the sparse sum costs more than it saves)
GROUPED_MAPS_MIN_ROWS = 256
#: ... and only from this many rows on (below, the plain products with ``Bm`` are fewer calls than the expansion
#: by the query index)
GROUPED_MIN_ROWS = 128


#: :meth:`Problem.XY` forms ``X Y`` as one product up to this reduced size ``r1 + r2``, from the low-rank factors
#: of :meth:`Problem.XY_factors` beyond (at the probe's r1 + r2 = 315, k = 16: about 5x fewer multiply-adds).
#: Small solves keep the single product: the growing set's IPM (:mod:`attnsvm.svm.barrier_grow`) on small all-rows
#: starts is sensitive to the factored product's last-bit differences (docs/guide/performance.md, "Solver design
#: decisions and their measurements")
XY_DENSE_MAX = 64


class Problem:
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
        if groups is not None and self.N >= GROUPED_MIN_ROWS and groups[0].shape[0] <= GROUPED_MAX * self.N:
            self.Bq, self.qidx = groups
            if self.N >= GROUPED_MAPS_MIN_ROWS:
                from scipy.sparse import csr_matrix

                q = self.Bq.shape[0]      # E (q, N): E[i, k] = 1 when row k has query i (sums rows per query)
                self.E = csr_matrix((np.ones(self.N), (self.qidx, np.arange(self.N))), shape=(q, self.N))

    def newton_solver(self, x, du, diag):
        """Solver of the Newton system ``(M + diag(diag)) dlam = r``, M the Schur complement (:meth:`schur`)
        at the iterate ``x``: a function of ``r (N,)`` (numpy / scipy: the default backend, :class:`NumpyNewton`)."""
        parts = self.schur_parts(x.X11, x.X12, x.X22, du)
        # the N x N triangle's memory is kept for the next iteration's system (a fresh one costs its page faults
        # again, a noticeable share of a step at thousands of rows): a solver is used only until the next one is made
        # (one NewtonSystem a step)
        buf = getattr(self, "_schur_buf", None)
        if buf is None or buf.shape[0] != self.N:
            buf = self._schur_buf = np.empty((self.N, self.N))
        return factor_lower(functools.partial(self.schur_block, parts), self.N, diag, buf)

    def Gmap(self, lam):
        """``G = A^T diag(lam) Bm`` (r1, r2): ``(E diag(lam) A)^T Bq`` on the distinct queries (``q r1 r2``
        instead of ``N r1 r2``) when :attr:`E` groups the rows."""
        if self.E is None:
            return mT(self.A) @ (lam[..., None] * self.Bm)
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
        return np.concatenate([dG @ Zh[..., r1:, :], mT(dG) @ Zh[..., :r1, :]], axis=-2)

    def XY_factors(self, X, dG, du, Y=None):
        """``(F, Vt)`` with ``X Y = F Vt`` (``F (n, 2k)``, ``Vt (2k, n)``, ``k = min(r1, r2)``, n = r1 + r2; or
        stacks) for the symmetric ``X`` and ``Y = -dZ Z^{-1}`` of :meth:`Y` (``Y`` when already computed for this
        ``dG``). Y's two row blocks have rank <= k: with ``r2 <= r1``, ``X Y = (X[:, :r1] dG) Zh_2. + X[:, r1:] Y_2.``
        (``Zh_2.``, ``Y_2.`` the last r2 rows of Zh and Y), so ``F = [X[:, :r1] dG, X[:, r1:]]`` and
        ``Vt = [Zh_2.; Y_2.]``; mirrored when ``r1 < r2``. Only one row block of ``Y`` is read (formed when not
        given)."""
        r1, Zh = self.r1, du.Zh
        if dG.shape[-1] <= r1:
            Yb = mT(dG) @ Zh[..., :r1, :] if Y is None else Y[..., r1:, :]        # Y's last r2 rows
            F = np.concatenate([X[..., :, :r1] @ dG, X[..., :, r1:]], axis=-1)
            Vt = np.concatenate([Zh[..., r1:, :], Yb], axis=-2)
        else:
            Yt = dG @ Zh[..., r1:, :] if Y is None else Y[..., :r1, :]            # Y's first r1 rows
            F = np.concatenate([X[..., :, r1:] @ mT(dG), X[..., :, :r1]], axis=-1)
            Vt = np.concatenate([Zh[..., :r1, :], Yt], axis=-2)
        return F, Vt

    def XY(self, X, dG, du, Y=None, factors=None):
        """``sym(X Y)`` (r1 + r2 square, exactly symmetric; or a stack) for the symmetric ``X`` and
        ``Y = -dZ Z^{-1}`` of :meth:`Y` (``Y`` when already computed for this ``dG``), as ``sym(F Vt)`` from
        :meth:`XY_factors` (``factors`` when already computed): ``2 n k (r1 + r2 + n)`` multiply-adds instead of
        ``n^3 + 2 r1 r2 n``; up to ``n =`` :data:`XY_DENSE_MAX` (and without ``factors``) as ``X Y``, which
        keeps small solves' rounding as it is."""
        if factors is None and X.shape[-1] <= XY_DENSE_MAX:
            T = X @ (self.Y(dG, du) if Y is None else Y)
        else:
            F, Vt = self.XY_factors(X, dG, du, Y) if factors is None else factors
            T = F @ Vt
        T = T + mT(T)
        T *= 0.5
        return T

    def take_rows(self, F, idx):
        """``F[idx]`` (rows of a matrix by an index; :mod:`attnsvm.svm.torch_backend` overrides it)."""
        return F[idx]

    def take_cols(self, F, idx):
        """``F[:, idx]`` (columns of a matrix by an index: ``take``, fancy indexing along columns is much
        slower; :mod:`attnsvm.svm.torch_backend` overrides it)."""
        return F.take(idx, axis=1)

    @staticmethod
    def transposed(F):
        """The transpose of ``F (q, N)`` as a row-major copy (its row blocks are then contiguous)."""
        return np.ascontiguousarray(F.T)

    def schur_parts(self, X11, X12, X22, du) -> dict:
        """The factors of the Schur complement at an iterate, each ``O(N r (r1 + r2))`` to form, from which
        :meth:`schur_block` forms any block of M (see :meth:`schur`): ``(N, r)`` matrices, and on the distinct
        queries (when rows share them, :attr:`qidx`) ``(q, N)`` / ``(N, q)`` / ``(q, q)`` ones."""
        A, Bm = self.A, self.Bm
        if self.qidx is None:                                             # K1 = Bm P1^T, P1 = A X12
            parts = {"AZ": A + du.AC @ mT(du.G), "AX": A @ X11, "A": A}  # A (I + C G^T), A X11
            parts.update(P1=A @ X12, AC=du.AC, Bm=Bm, BX=Bm @ X22, BS=Bm @ du.Si)
        else:
            # the (q, N) factors as (Bq X12^T) A^T and (Bq C^T) A^T (q r1 r2 + q r1 N multiply-adds, not
            # N r1 r2 + q r2 N each), A (I + C G^T) from Zh's leading block: no N x r x r product but A X11's
            # and A (I + C G^T)'s, and no A C (the dual's AC is never formed)
            Bq = self.Bq
            F1, F2 = (Bq @ mT(X12)) @ mT(A), (Bq @ mT(du.C)) @ mT(A)    # F1 = Bq P1^T, F2 = Bq (A C)^T
            parts = {"AZ": A @ du.Zh[..., :self.r1, :self.r1], "AX": A @ X11, "A": A,
                     "F1": F1, "F1T": self.transposed(F1), "F2": F2, "F2T": self.transposed(F2),
                     "H22": (Bq @ X22) @ mT(Bq), "HS": (Bq @ du.Si) @ mT(Bq)}
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
        AJt = mT(A[..., J, :])
        if self.qidx is None:
            Bm = p["Bm"]
            BJt = mT(Bm[..., J, :])
            S = Bm[..., I, :] @ mT(p["P1"][..., J, :])
            S *= p["AC"][..., I, :] @ BJt
            S2 = p["P1"][..., I, :] @ BJt
            S2 *= Bm[..., I, :] @ mT(p["AC"][..., J, :])
            H22, HS = p["BX"][..., I, :] @ BJt, p["BS"][..., I, :] @ BJt
        else:
            qI, qJ = self.qidx[I], self.qidx[J]
            rows, cols = self.take_rows, self.take_cols
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


class NumpyNewton:
    """The default Newton backend of the interior-point method: :meth:`Problem.newton_solver` (numpy / scipy).

    A backend is any object with a ``name`` (``info["device"]`` of a run given one) and ``solver(pb, x, du, diag)``:
    a solver of the Newton system ``(M + diag(diag)) dlam = r`` at the iterate ``x`` (dual quantities ``du``) of
    the problem ``pb``, M its Schur complement (:meth:`Problem.schur`), as a function of ``r (N,)`` that returns
    ``dlam (N,)``, float64 numpy arrays both. A solver is used until the next one is made; the problem may change
    between calls (the growing row set's joins and drops). :class:`attnsvm.svm.torch_backend.TorchNewton` runs
    it on a torch device; the rest of the method is the same whatever the backend.
    """

    name = "numpy"

    def solver(self, pb: Problem, x, du, diag):
        return pb.newton_solver(x, du, diag)


#: the backend of runs given none
NUMPY_NEWTON = NumpyNewton()


class Dual:
    """Dual quantities at ``lam``: G, the Cholesky factor L of S and its inverse ``Li = L^{-1}``, S^{-1}, C,
    ``Zh = Z^{-1} / 2`` and, when first asked for, ``AC = A C (N, r2)``; ``L`` and ``G`` when already known at
    ``lam`` (the step guard computed them)."""

    def __init__(self, A, Bm, lam, L=None, G=None):
        self.A = A
        self.G = A.T @ (lam[:, None] * Bm) if G is None else G
        self.L = chol_S(self.G) if L is None else L
        if self.L is None:
            raise np.linalg.LinAlgError("dual iterate left the spectral-norm ball")
        self.Li = tri_inv(self.L)
        Lit = self.Li.T
        self.Si = Lit @ Lit.T            # S^{-1} = L^{-T} L^{-1}; a product with its own transpose: exactly symmetric
        self.C = self.G @ self.Si
        self.Zh = z_half(self.G, self.C, self.Si)

    @functools.cached_property
    def AC(self) -> np.ndarray:
        """``A C = (A G) S^{-1}`` (N, r2): read only without the distinct queries (:meth:`Problem.schur_parts`,
        the Newton system's ``A(Z^{-1})``), where it is two N x r x r products an iteration."""
        return (self.A @ self.G) @ self.Si


class Iterate:
    """The primal-dual iterate: ``X = [[X11, X12], [X12^T, X22]]`` (r1 + r2 square; the blocks are views
    of X), slacks ``s`` of the inequality rows and multipliers ``lam`` (N',); ``LX`` the lower Cholesky
    factor of X when the step that made the iterate computed it (else None)."""

    G = None        #: ``G(lam)`` (r1, r2) when the step that made the iterate computed it (the step guard's ``pb.Gmap``)

    def __init__(self, lam, X11, X12, X22, s):
        self.lam, self.s = lam, s
        self._set_X(blocks(X11, X12, X22), X11.shape[0], None)

    @classmethod
    def full(cls, lam, X, r1: int, s, LX=None, G=None) -> Iterate:
        """The iterate of the full, exactly symmetric ``X`` (r1 + r2 square)."""
        x = cls.__new__(cls)
        x.lam, x.s, x.G = lam, s, G
        x._set_X(X, r1, LX)
        return x

    def _set_X(self, X, r1, LX):
        self.X, self.LX = X, LX
        self.X11, self.X12, self.X22 = X[:r1, :r1], X[:r1, r1:], X[r1:, r1:]


def violation(pb, marg):
    """Largest constraint violation (|.| on equality rows), relative to ``1 + max |rhs|``."""
    d = pb.rhs - marg
    if isinstance(pb.I, slice):                 # inequality rows only
        return max(float(max_reduce(d)), 0.0) / pb.viol_scale
    return float(np.max(np.where(pb.eq, np.abs(d), np.maximum(d, 0.0)))) / pb.viol_scale


def clean_primal(pb, M, lam, feas_tol):
    """Remove the last rounding-level violations of M (equality rows and violated or nearly
    active inequality rows) by the least-Frobenius-norm correction ``sum_k mu_k a_k b_k^T``.

    Returns the corrected M, its violation and its relative gap against ``lam``.
    """
    marg = pb.amap(M)
    slack = marg - pb.rhs
    near = pb.eq | (slack <= 1e3 * feas_tol)
    target = np.where(pb.eq, -slack, np.maximum(-slack, 0.0))[near]
    if not near.any() or not np.any(target):
        nuc = nuclear_norm(M)
        return M, violation(pb, marg), (nuc - float(pb.rhs @ lam)) / max(1.0, nuc)
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
        solve = factor_lower(gram, n, np.zeros(n))
        pb._clean_factor = (key, solve)
    mu = solve(target)
    M2 = M + An.T @ (mu[:, None] * Bn)
    nuc2 = nuclear_norm(M2)
    return M2, violation(pb, pb.amap(M2)), (nuc2 - float(pb.rhs @ lam)) / max(1.0, nuc2)


def start_point(pb, lam_init, M_init):
    """Interior starting point: a dual point with ``||G|| = 1/2`` from the given multipliers and a
    primal X built around the given M (typically the Frobenius solution), plus ``eps0 I``.

    ``X = [P; Q] diag(sv) [P; Q]^T + eps0 I`` (``M0 = P diag(sv) Q^T``) has trace ``2 sum(sv) + eps0 (r1 + r2)``;
    ``eps0 = 2 sum(sv) / (r1 + r2)`` gives the identity the same share of it as M0's part, whatever the shape
    (for ``r1 = r2`` it is the mean singular value ``sum(sv) / r1``, bit for bit). The mean singular value would
    give the identity ``(r1 + r2) / (2 min(r1, r2))`` times M0's share on unequal shapes (ten times at real-minilm-
    heads' reduced 299 x 16), which keeps the first iterations' steps short (docs/guide/performance.md has the
    measured iterations)."""
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
    Pm, sv, Qmt = svd(M0)
    eps0 = 2.0 * float(sv.sum()) / (pb.r1 + pb.r2) if sv.size else 0.0
    eps0 = max(eps0, 1e-3 * max(1.0, float(np.abs(pb.rhs).max())))
    X11 = (Pm * sv) @ Pm.T + eps0 * eye(pb.r1)
    X22 = (Qmt.T * sv) @ Qmt + eps0 * eye(pb.r2)
    s = np.maximum(pb.amap(M0) - pb.rhs, 0.1 * eps0)[I]
    return lam, X11, M0.copy(), X22, s


@dataclass
class Reduction:
    """The reduced, scaled problem of :func:`~attnsvm.svm.ipm.driver.nuclear_ipm` and the maps back to the caller's rows.

    ``pb`` holds the live rows (``u_k w_k^T != 0``) in the bases: ``A (N', r1)`` (``U`` itself, or
    ``U P`` with ``P (d1, r1)`` when ``d1 > N``) and ``Bm = V B`` with ``B (d2, r2)``, rows divided
    by ``su``, ``sv`` and right-hand sides by ``sr`` (all at most 1).
    """

    pb: Problem
    basis: SubspaceBasis
    live: np.ndarray
    su: float
    sv: float
    sr: float

    @property
    def B(self) -> np.ndarray:
        """``B (d2, r2)``: the basis of the w's."""
        return self.basis.B

    @property
    def P(self) -> np.ndarray | None:
        """``P (d1, r1)``: the basis of the u's, or None (the identity)."""
        return self.basis.P

    def M_init(self, W_init) -> np.ndarray | None:
        """A primal start ``W_init (d1, d2)`` in the reduced, scaled coordinates: ``(r1, r2)``."""
        if W_init is None:
            return None
        return self.basis.reduce(np.asarray(W_init, float)) * (self.su * self.sv / self.sr)

    def W(self, X12: np.ndarray) -> np.ndarray:
        """The reduced solution ``X12 (r1, r2)`` as ``W (d1, d2)``."""
        return self.basis.lift_right(X12 * (self.sr / (self.su * self.sv)))

    def lam(self, lam_live: np.ndarray, N: int) -> np.ndarray:
        """The multipliers ``lam_live`` of the live rows, unscaled, among all ``N`` rows (0 elsewhere): (N,)."""
        return RowSubset(self.live, N).lift(lam_live / (self.su * self.sv))


class RowSet:
    """All N rows of a constraint set in the bases of all rows, scaled: the reduction of :func:`reduce_problem`
    and of the growing row subset (:mod:`attnsvm.svm.barrier_grow`), whose subsets then share coordinates.

    ``A (N, r1)`` (``U`` itself when ``d1 <= N``: rank deficiency is harmless; else ``U P`` with an orthonormal
    basis ``P (d1, r1)`` of the u's), the distinct w's in the basis ``B (d2, r2)`` of their span ``Bq (q, r2)``
    with the query index ``qinv (N,)`` (``V B == Bq[qinv]`` before scaling), ``rhs (N,)``, ``eq (N,)``; rows divided
    by ``su``, ``sv`` and right-hand sides by ``sr`` (the largest of the live rows: all at most 1, then
    ``||M||_* >= 1`` and the gap test is relative). ``live (N,)`` marks the rows with ``u_k w_k^T != 0`` (the others
    constrain nothing; the caller has checked that they hold); ``empty`` when no live row constrains anything
    (then W = 0 is optimal, and nothing is scaled).
    """

    def __init__(self, U, V, rhs, eq):
        N, d1 = U.shape
        if V.size:
            Vq, self.qinv = distinct_rows(V)
        else:
            Vq, self.qinv = V, np.zeros(0, np.int64)
        self.basis = SubspaceBasis(None if d1 <= N else row_space_basis(U),
                                   row_space_basis(Vq) if V.size else np.zeros((V.shape[1], 0)))
        self.B, self.P = self.basis.B, self.basis.P
        A, Bq = self.basis.rows(U, Vq)
        self.N, self.reduced_shape = N, [int(A.shape[1]), int(self.B.shape[1])]
        na, nb = np.linalg.norm(A, axis=1), np.linalg.norm(Bq, axis=1)[self.qinv]
        self.live = live = (na > 0) & (nb > 0)
        trivial = np.where(eq, rhs == 0, rhs <= 0)
        self.empty = A.shape[1] == 0 or self.B.shape[1] == 0 or bool(trivial[live].all())
        if self.empty:
            return
        self.su = float(np.max(na[live]))
        self.sv = float(np.max(nb[live]))
        self.sr = float(np.max(np.abs(rhs[live])))
        self.A, self.Bq = A / self.su, Bq / self.sv
        self.rhs, self.eq = rhs / self.sr, eq

    def problem(self, rows: np.ndarray) -> Problem:
        """The reduced problem of the rows ``rows`` (indices, ascending, no repeats). Rows with equal w's (one query
        per sample) get bit-identical rows of ``Bm``: they are mapped once per distinct w, which lets
        :meth:`Problem.schur` work on the distinct queries."""
        if rows.size == self.N:             # every row, so every distinct query: its index stays (np.unique's answer)
            used, qidx = slice(None), self.qinv
        else:
            used, qidx = np.unique(self.qinv[rows], return_inverse=True)
            qidx = np.asarray(qidx).ravel()
        Bq = self.Bq[used]
        return Problem(self.A[rows], Bq[qidx], self.rhs[rows], self.eq[rows], groups=(Bq, qidx))

    def reduction(self, pb: Problem, rows: np.ndarray) -> Reduction:
        """The :class:`Reduction` of ``pb``, the problem of ``rows`` (indices or a mask (N,))."""
        return Reduction(pb, self.basis, rows, self.su, self.sv, self.sr)

    def margins(self, X12: np.ndarray) -> np.ndarray:
        """``a_k^T X12 b_k`` of all N rows (scaled): shape (N,)."""
        Y = self.Bq @ X12.T                                     # (q, r1)
        return np.einsum("kj,kj->k", self.A, Y[self.qinv])


def reduce_problem(U, V, rhs, eq, info: dict) -> Reduction | None:
    """Setup (:class:`RowSet`): bases of the u's and w's, the live rows and the scaling; None when no live row
    constrains anything (then W = 0 is optimal). Records ``reduced_shape`` in ``info``."""
    rs = RowSet(U, V, rhs, eq)
    info["reduced_shape"] = rs.reduced_shape
    if rs.empty:
        return None
    return rs.reduction(rs.problem(np.flatnonzero(rs.live)), rs.live)
