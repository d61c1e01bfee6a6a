"""Batched nuclear-norm Gen-SVMs for real token states (one query per sample).

Why this exists
---------------
Probing a pretrained head asks for the nuclear-norm Gen-SVM with d = 385 token
dimensions and one query per sentence for hundreds of sentences. The token
differences and the queries then span (almost) the whole space, so the subspace
reduction of :mod:`attnsvm.svm.nuclear` still leaves an SDP of size ~640, far beyond
a conic solve in seconds. This module solves R such problems that share tokens and
queries (the 12 heads of a layer and their random baselines) at once:

    min ||W||_*  s.t.  (x_{i o_i} - x_{it})^T W z_i >= 1   t valid, t not in O_i
                       (x_{it}   - x_{i o_i})^T W z_i  = 0  t in O_i, t != o_i

with ``o_i`` a reference token of ``O_i`` (Gen-SVM of the theory; the chain of
equalities and the single reference are equivalent to all pairs).

Method
------
* Reduction: ``W = P M B^T`` with orthonormal bases P of the within-sample token
  differences and B of the queries; ``||W||_* = ||M||_*``.
* Factored form ``M = K Q^T`` (Burer-Monteiro), using
  ``||M||_* = min (||K||_F^2 + ||Q||_F^2) / 2``, and an augmented Lagrangian whose
  inner problems are solved by an L-BFGS vectorized over the R problems.
* Everything is written through the token logits ``L_it = x_it^T W z_i`` (shape
  (n, T, R)): one evaluation costs two batched matrix products with the tokens
  and four small ones with the factors; no (N, d) row matrix is ever formed.
* Certificate (as in the exact solvers): with the multipliers, ``S = sum_k lam_k
  u_k w_k^T`` must satisfy ``||S||_2 <= 1`` and ``rhs^T lam = ||W||_*``. The
  reported ``gap`` is ``(||W||_* - rhs^T lam / max(1, ||S||_2)) / ||W||_*``, a
  certified relative suboptimality bound once the margins are feasible. If
  ``||S||_2`` stays above 1 with feasible margins, the factor rank is doubled.

numpy only (scipy not needed); float64 throughout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import ValidationError


@dataclass
class BatchNuclearResult:
    """Solutions of :func:`solve_gen_nuclear_batch` (R problems).

    Attributes
    ----------
    W : (R, d1, d2) solutions in the original coordinates
    nuclear : (R,) ``||W||_*``
    dual : (R,) ``rhs^T lam`` (lower bound on the optimum when ``spec <= 1``)
    spec : (R,) ``||S||_2`` of the multipliers' matrix
    max_violation : (R,) largest constraint violation (margin units)
    gap : (R,) certified relative gap ``(nuclear - dual / max(1, spec)) / nuclear``
    status : (R,) "optimal" when violation <= tol and gap <= gap_tol, else "inaccurate"
    rank : factor rank used; rounds; evaluations; seconds
    margins : (R, n, T) logit differences ``(x_{i o_i} - x_it)^T W z_i`` (0 on o_i / padding)
    """

    W: np.ndarray
    nuclear: np.ndarray
    dual: np.ndarray
    spec: np.ndarray
    max_violation: np.ndarray
    gap: np.ndarray
    status: np.ndarray
    rank: int
    rounds: int
    evaluations: int
    seconds: float
    margins: np.ndarray
    info: dict = field(default_factory=dict)


def orthonormal_basis(A: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Orthonormal basis (d, r) of the row space of ``A (N, d)`` (singular values > rtol * max)."""
    if A.size == 0:
        return np.zeros((A.shape[1], 0))
    _, s, vt = np.linalg.svd(A, full_matrices=False)
    if s[0] <= 0:
        return np.zeros((A.shape[1], 0))
    return vt[s > rtol * s[0]].T.copy()


class _Batch:
    """Data of R Gen-SVMs in reduced, scaled coordinates (token arrays are (n, T, R))."""

    def __init__(self, Xs, Zs, ineq, eq, ref, lengths, buckets: int = 8):
        # samples are sorted by length; the token products run per bucket of similar lengths
        self.Xs = Xs  # (n, T, r1)
        self.Zs = Zs  # (n, r2)
        self.ineq = ineq  # (n, T, R) float 0/1
        self.eq = eq  # (n, T, R) float 0/1
        self.ref = ref  # (n, R) int
        self.n, self.T, self.r1 = Xs.shape
        self.r2 = Zs.shape[1]
        self.R = ineq.shape[2]
        edges = np.linspace(0, self.n, min(buckets, self.n) + 1).round().astype(int)
        self.buckets = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            if hi > lo:
                Tg = int(lengths[lo:hi].max())
                Xg = np.ascontiguousarray(Xs[lo:hi, :Tg])
                self.buckets.append((lo, hi, Tg, Xg, np.ascontiguousarray(Xg.transpose(0, 2, 1))))

    def split(self, x, r):
        R, r1, r2 = self.R, self.r1, self.r2
        K = x[:, : r1 * r].reshape(R, r1, r)
        Q = x[:, r1 * r:].reshape(R, r2, r)
        return K, Q

    def logits(self, K, Q):
        """Token logits (n, T, R), the query factors ZQ (R, n, r)."""
        ZQ = np.matmul(self.Zs[None], Q)  # (R, n, r)
        Y = np.matmul(ZQ, K.transpose(0, 2, 1))  # (R, n, r1): y_i = M b_i
        Yt = Y.transpose(1, 2, 0)  # (n, r1, R)
        L = np.zeros((self.n, self.T, self.R))
        for lo, hi, Tg, Xg, _ in self.buckets:
            L[lo:hi, :Tg] = np.matmul(Xg, Yt[lo:hi])
        return L, ZQ

    def ref_logit(self, L):
        return np.take_along_axis(L, self.ref[:, None, :], axis=1)[:, 0, :]  # (n, R)

    def token_gradient(self, coef):
        """``g_i = sum_t coef_it x_it``: (R, n, r1) from coef (n, T, R)."""
        G = np.empty((self.R, self.n, self.r1))
        for lo, hi, Tg, _, XgT in self.buckets:
            G[:, lo:hi] = np.matmul(XgT, coef[lo:hi, :Tg]).transpose(2, 0, 1)
        return G

    def scatter_ref(self, coef, add):
        """coef[i, ref[i, R], R] += add[i, R] (in place)."""
        n, R = add.shape
        coef[np.arange(n)[:, None], self.ref, np.arange(R)[None, :]] += add


def _value_grad(x, b: _Batch, lam, mu, rho, r):
    """Augmented Lagrangian of each problem and its gradient: f (R,), g (R, nv)."""
    K, Q = b.split(x, r)
    L, ZQ = b.logits(K, Q)
    Lo = b.ref_logit(L)[:, None, :]
    rho_t = rho[None, None, :]
    c = Lo - L - 1.0  # inequality slack (n, T, R)
    e = L - Lo  # equality residual
    w = np.maximum(lam - rho_t * c, 0.0) * b.ineq
    v = (mu - rho_t * e) * b.eq
    f = 0.5 * (np.einsum("Rij,Rij->R", K, K) + np.einsum("Rij,Rij->R", Q, Q))
    f = f + (np.einsum("ntR->R", w * w - lam * lam * b.ineq)) / (2.0 * rho)
    f = f + np.einsum("ntR->R", (-mu * e + 0.5 * rho_t * e * e) * b.eq)
    coef = w - v  # dAL/dL_t for t != ref
    b.scatter_ref(coef, -(w.sum(axis=1)) + v.sum(axis=1))
    G = b.token_gradient(coef)  # (R, n, r1), dAL/dy_i
    gK = K + np.matmul(G.transpose(0, 2, 1), ZQ)  # K + D Q with D = G^T Zs
    gQ = Q + np.matmul(b.Zs.T[None], np.matmul(G, K))  # Q + D^T K
    return f, np.concatenate([gK.reshape(b.R, -1), gQ.reshape(b.R, -1)], axis=1)


def _dot(a, b):
    return np.einsum("Rv,Rv->R", a, b)


def lbfgs_batch(fun, x0, *, maxiter: int = 150, m: int = 12, gtol=1e-8, max_halvings: int = 20):
    """L-BFGS on R independent problems in lockstep (two-loop recursion, Armijo backtracking).

    Parameters
    ----------
    fun : x (R, nv) -> (f (R,), g (R, nv))
    x0 : (R, nv)
    gtol : (R,) or float, stop a problem when ``||g|| <= gtol``

    Returns
    -------
    x (R, nv), number of evaluations
    """
    R, nv = x0.shape
    x = x0.copy()
    f, g = fun(x)
    evals = 1
    Sm = np.zeros((m, R, nv))
    Ym = np.zeros((m, R, nv))
    rh = np.zeros((m, R))
    gamma = np.zeros(R)
    k = 0
    gtol = np.broadcast_to(np.asarray(gtol, dtype=float), (R,))
    done = np.linalg.norm(g, axis=1) <= gtol
    for _ in range(maxiter):
        if done.all():
            break
        q = g.copy()
        alphas = []
        order = [(k - 1 - j) % m for j in range(m)]
        for j in order:
            a = rh[j] * _dot(Sm[j], q)
            alphas.append(a)
            q -= a[:, None] * Ym[j]
        gn = np.linalg.norm(g, axis=1)
        q *= np.where(gamma > 0, gamma, 1.0 / np.maximum(gn, 1e-300) * np.minimum(1.0, gn))[:, None]
        for j, a in zip(reversed(order), reversed(alphas)):
            bta = rh[j] * _dot(Ym[j], q)
            q += (a - bta)[:, None] * Sm[j]
        p = -q
        slope = _dot(g, p)
        bad = slope >= 0
        if bad.any():  # reset to steepest descent where the direction is not a descent one
            p[bad] = -g[bad] / np.maximum(gn[bad], 1e-300)[:, None]
            slope = _dot(g, p)
        p[done] = 0.0
        step = np.ones(R)
        accepted = done.copy()
        for _ls in range(max_halvings + 1):
            xn = x + step[:, None] * p
            fn, gnew = fun(xn)
            evals += 1
            ok = fn <= f + 1e-4 * step * slope
            accepted = accepted | ok
            if accepted.all():
                break
            step = np.where(accepted, step, 0.5 * step)
        stuck = ~accepted  # no decrease found: keep the point, stop this problem for the round
        if stuck.any():
            step = np.where(stuck, 0.0, step)
            xn = x + step[:, None] * p
            fn, gnew = fun(xn)
            evals += 1
        s = xn - x
        y = gnew - g
        sy = _dot(s, y)
        valid = (sy > 1e-12 * np.maximum(_dot(y, y), 1e-300)) & ~done
        Sm[k % m] = np.where(valid[:, None], s, 0.0)
        Ym[k % m] = np.where(valid[:, None], y, 0.0)
        rh[k % m] = np.where(valid, 1.0 / np.where(valid, sy, 1.0), 0.0)
        gamma = np.where(valid, sy / np.maximum(_dot(y, y), 1e-300), gamma)
        k += 1
        x, f, g = xn, np.where(done, f, fn), gnew
        done = done | (np.linalg.norm(g, axis=1) <= gtol) | stuck
    return x, evals


def _spectral_norms(G, Zs, iters: int = 30, block: int = 3, seed: int = 0):
    """``||S_R||_2`` for ``S_R = sum_i g_{R,i} b_i^T`` (G (R, n, r1), Zs (n, r2)) by block power iteration."""
    R, n, r1 = G.shape
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((R, Zs.shape[1], block))
    est = np.zeros(R)
    for _ in range(iters):
        V, _ = np.linalg.qr(V)
        U = np.matmul(G.transpose(0, 2, 1), np.matmul(Zs[None], V))  # S V: (R, r1, block)
        V = np.matmul(Zs.T[None], np.matmul(G, U))  # S^T S V
        est = np.sqrt(np.max(np.linalg.norm(V, axis=1), axis=1))
    # Rayleigh refinement on the final block
    Vq, _ = np.linalg.qr(V)
    SV = np.matmul(G.transpose(0, 2, 1), np.matmul(Zs[None], Vq))
    sv = np.linalg.svd(SV, compute_uv=False)
    return np.maximum(sv[:, 0], 0.0) if sv.size else est


def _min_rel_sv(K, Q):
    """Smallest over largest singular value of ``K Q^T`` per problem (R,)."""
    _, RK = np.linalg.qr(K)
    _, RQ = np.linalg.qr(Q)
    sv = np.linalg.svd(np.matmul(RK, RQ.transpose(0, 2, 1)), compute_uv=False)
    return sv[:, -1] / np.maximum(sv[:, 0], 1e-300)


def _nuclear_of_factors(K, Q):
    """``||K Q^T||_*`` per problem through QR factors (R,)."""
    _, RK = np.linalg.qr(K)
    _, RQ = np.linalg.qr(Q)
    return np.linalg.svd(np.matmul(RK, RQ.transpose(0, 2, 1)), compute_uv=False).sum(axis=1)


def solve_gen_nuclear_batch(X, mask, Z, selected, *, ref=None, rank: int = 16, tol: float = 1e-4,
                            gap_tol: float = 1e-3, max_rounds: int = 25, inner_iters: int = 120,
                            max_rank: int | None = None, bases=None, seed: int = 0,
                            trace: bool = False) -> BatchNuclearResult:
    """Nuclear-norm Gen-SVMs of R selections on shared tokens and queries.

    Parameters
    ----------
    X : (n, T, d1) tokens (entries on padding are ignored)
    mask : (n, T) bool, valid tokens (at least two per sample)
    Z : (n, d2) one query per sample
    selected : (R, n, T) or (n, T) bool, the sets O_i of each problem (within ``mask``,
        at least one token per sample)
    ref : (R, n) int, optional reference token o_i in O_i (default: first selected)
    rank : initial factor rank (doubled while feasible margins come with ``||S||_2 > 1``)
    tol : constraint violation tolerated (margin units, rhs = 1)
    gap_tol : certified relative gap for status "optimal"
    max_rounds, inner_iters : augmented-Lagrangian rounds, L-BFGS iterations per round
    bases : optional ``(P (d1, r1), B (d2, r2))`` orthonormal bases of the spans of the
        within-sample token differences and of the queries (reuse across calls)

    Returns
    -------
    BatchNuclearResult with ``W (R, d1, d2)``.
    """
    t0 = time.perf_counter()
    X = np.asarray(X, dtype=np.float64)
    Z = np.asarray(Z, dtype=np.float64)
    mask = np.asarray(mask, dtype=bool)
    sel = np.asarray(selected, dtype=bool)
    if sel.ndim == 2:
        sel = sel[None]
    if X.ndim != 3:
        raise ValidationError(f"X must have shape (n, T, d), got {X.shape}")
    n, T, d1 = X.shape
    if mask.shape != (n, T) or Z.ndim != 2 or Z.shape[0] != n or sel.shape[1:] != (n, T):
        raise ValidationError(f"shapes do not match: X {X.shape}, mask {mask.shape}, Z {Z.shape}, selected {sel.shape}")
    if np.any(mask.sum(axis=1) < 2):
        raise ValidationError("every sample needs at least two valid tokens")
    sel = sel & mask[None]
    if np.any(~sel.any(axis=2)):
        raise ValidationError("selected must mark at least one valid token per sample in every problem")
    R = sel.shape[0]
    if ref is None:
        ref = np.argmax(sel, axis=2)  # first selected token (R, n)
    ref = np.asarray(ref, dtype=np.int64)
    if ref.shape != (R, n) or not np.all(np.take_along_axis(sel, ref[:, :, None], axis=2)):
        raise ValidationError("ref must be an (R, n) array of selected tokens")
    d2 = Z.shape[1]
    # sort samples by length (the solution does not depend on their order)
    lengths = mask.sum(axis=1)
    order = np.argsort(lengths, kind="stable")
    X, Z, mask, sel, ref, lengths = X[order], Z[order], mask[order], sel[:, order], ref[:, order], lengths[order]
    if bases is None:
        first = np.argmax(mask, axis=1)
        diffs = (X - X[np.arange(n), first][:, None, :])[mask]
        P, B = orthonormal_basis(diffs), orthonormal_basis(Z)
    else:
        P, B = bases
    Xr = (X @ P) * mask[:, :, None]
    Zb = Z @ B
    r1, r2 = P.shape[1], B.shape[1]
    if r1 == 0 or r2 == 0:
        raise ValidationError("the tokens or the queries span no direction: every problem is infeasible")
    diff_norm = np.linalg.norm((Xr - Xr[np.arange(n), np.argmax(mask, axis=1)][:, None]), axis=2)[mask]
    su = float(np.median(diff_norm[diff_norm > 0])) if np.any(diff_norm > 0) else 1.0
    sz = float(np.median(np.linalg.norm(Zb, axis=1))) or 1.0
    Xs, Zs = Xr / su, Zb / sz
    selT = sel.transpose(1, 2, 0)  # (n, T, R)
    maskT = np.broadcast_to(mask[:, :, None], selT.shape)
    is_ref = np.zeros_like(selT)
    is_ref[np.arange(n)[:, None], ref.T, np.arange(R)[None, :]] = True
    ineq = (maskT & ~selT).astype(np.float64)
    eq = (selT & ~is_ref).astype(np.float64)
    b = _Batch(Xs, Zs, ineq, eq, ref.T.copy(), lengths)
    full = min(r1, r2)
    max_rank = full if max_rank is None else min(int(max_rank), full)
    r = max(1, min(int(rank), max_rank))

    # spectral start: top-r part of S0 = sum of the inequality constraint matrices, scaled to mean margin 1
    coef0 = -ineq
    b.scatter_ref(coef0, ineq.sum(axis=1))
    G0 = b.token_gradient(coef0)  # (R, n, r1)
    S0 = np.matmul(G0.transpose(0, 2, 1), Zs[None])  # (R, r1, r2)
    Uf, sf, Vt = np.linalg.svd(S0, full_matrices=False)
    K = Uf[:, :, :r] * np.sqrt(sf[:, None, :r])
    Q = Vt[:, :r, :].transpose(0, 2, 1) * np.sqrt(sf[:, None, :r])
    L, _ = b.logits(K, Q)
    marg = (b.ref_logit(L)[:, None, :] - L) * ineq
    mean_m = marg.sum(axis=(0, 1)) / np.maximum(ineq.sum(axis=(0, 1)), 1)
    t = 1.0 / np.where(mean_m > 1e-12, mean_m, 1.0)
    K = K * np.sqrt(t)[:, None, None]
    Q = Q * np.sqrt(t)[:, None, None]
    rho = np.clip(t * sf[:, :r].sum(axis=1), 1e-6, 1e6)  # penalty in units of the starting nuclear norm
    rho0 = rho.copy()
    lam = np.zeros((n, T, R))
    mu = np.zeros((n, T, R))
    x = np.concatenate([K.reshape(R, -1), Q.reshape(R, -1)], axis=1)
    gtol = 1e-1 * np.sqrt(rho0)
    prev_viol = np.full(R, np.inf)
    evals = 0
    rounds = 0
    nuc = dual = spec = gap = viol = None
    status = np.full(R, "inaccurate", dtype=object)
    for rounds in range(1, max_rounds + 1):
        rho_b = rho[None, None, :]
        x, ne = lbfgs_batch(lambda xx: _value_grad(xx, b, lam, mu, rho, r), x, maxiter=inner_iters, gtol=gtol)
        evals += ne
        K, Q = b.split(x, r)
        L, _ = b.logits(K, Q)
        Lo = b.ref_logit(L)[:, None, :]
        c = Lo - L - 1.0
        e = L - Lo
        viol = np.maximum(np.max(np.maximum(-c, 0.0) * ineq, axis=(0, 1)), np.max(np.abs(e) * eq, axis=(0, 1)))
        lam = np.maximum(lam - rho_b * c, 0.0) * ineq
        mu = (mu - rho_b * e) * eq
        # certificate: S = sum_k lam_k u_k w_k^T; nu = coefficient of each token in g_i
        nu = -lam + mu
        b.scatter_ref(nu, lam.sum(axis=1) - mu.sum(axis=1))
        spec = _spectral_norms(b.token_gradient(nu), Zs, seed=seed)
        nuc = _nuclear_of_factors(K, Q)
        dual = lam.sum(axis=(0, 1))
        gap = (nuc - dual / np.maximum(spec, 1.0)) / np.maximum(nuc, 1e-300)
        ok = (viol <= tol) & (np.abs(gap) <= gap_tol)
        if trace:
            print(f"round {rounds}: r={r} evals={ne} viol={viol.max():.2e} gap={np.abs(gap).max():.2e} "
                  f"spec={spec.max():.5f} ok={ok.sum()}/{R} rho={rho.max():.3g}")
        if ok.all():
            break
        # more rank helps only where the factorization uses all of its columns (a rank-deficient
        # stationary point of the factored problem is already a global solution)
        need_rank = (viol <= 10 * tol) & (spec > 1.0 + gap_tol) & ~ok & (_min_rel_sv(K, Q) > 1e-3)
        if need_rank.any() and r < max_rank:
            r_new = min(max_rank, 2 * r)
            rng = np.random.default_rng(seed + rounds)
            eps = 1e-3 * np.sqrt(nuc / r)[:, None, None]
            K = np.concatenate([K, eps * rng.standard_normal((R, r1, r_new - r)) / np.sqrt(r1)], axis=2)
            Q = np.concatenate([Q, eps * rng.standard_normal((R, r2, r_new - r)) / np.sqrt(r2)], axis=2)
            r = r_new
            x = np.concatenate([K.reshape(R, -1), Q.reshape(R, -1)], axis=1)
        slow = (viol > tol) & (viol > 0.25 * prev_viol)
        rho = np.where(slow, np.minimum(rho * 3.0, rho0 * 100.0), rho)
        prev_viol = viol
        gtol = np.maximum(gtol * 0.2, 1e-9 * np.sqrt(rho0))
    status = np.where((viol <= tol) & (np.abs(gap) <= gap_tol), "optimal", "inaccurate")
    scale = 1.0 / (su * sz)
    M = np.matmul(K, Q.transpose(0, 2, 1)) * scale
    W = np.matmul(np.matmul(P[None], M), B.T[None])
    L, _ = b.logits(K, Q)
    margins = np.empty((R, n, T))
    margins[:, order] = ((b.ref_logit(L)[:, None, :] - L) * maskT).transpose(2, 0, 1)
    info = {"reduced_shape": [int(r1), int(r2)], "scale": [su, sz], "rho": rho.tolist()}
    return BatchNuclearResult(W, nuc * scale, dual * scale, spec, viol, gap, status, int(r), rounds, evals,
                              time.perf_counter() - t0, margins, info)
