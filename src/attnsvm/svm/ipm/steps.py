"""Step lengths of the interior-point method: the PSD, LMI and LP step bounds, the Lanczos bound and the
step guard (:func:`step_lengths`)."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from attnsvm.svm.ipm.linalg import chol, chol_S, eig_min, min_reduce, trsm


#: :func:`lmi_step` computes the exact step from one eigenvalue up to this reduced size ``r1 + r2``, and
#: bisects on Cholesky tests of the ``r2 x r2`` matrix ``S(alpha)`` beyond
LMI_EIG_MAX = 64


def lmi_step(G, dG, cap, rtol=1e-3, L=None, Li=None):
    """Largest ``alpha <= cap`` with ``||G + alpha dG||_2 < 1`` (``G, dG (r1, r2)``; ``L`` the Cholesky
    factor of ``S = I - G^T G`` and ``Li`` its inverse, if known).

    The dual LMI ``[[I, G], [G^T, I]] > 0`` is linear in alpha: with its Cholesky factor
    ``[[I, 0], [G^T, L]]`` the step bound is ``-1 / lambda_min`` of the congruent direction
    ``K = [[0, E], [E^T, -L^{-1} (dG^T G + G^T dG) L^{-T}]]``, ``E = dG L^{-T}`` (exact; used up to
    ``r1 + r2 =`` :data:`LMI_EIG_MAX`, :func:`lmi_step_eig`). Beyond, ``S(alpha) = S0 - alpha S1 - alpha^2 S2``:
    the admissible alphas form an interval containing 0 (a line through a norm ball), found by bisection
    (relative precision ``rtol``) on Cholesky tests of the smaller ``r2 x r2`` matrix. Both first test
    ``alpha = cap`` with one Cholesky factorization of ``S(cap)`` (``rtol`` applies to the bisection only).
    """
    r1, r2 = G.shape
    if r1 + r2 <= LMI_EIG_MAX:
        return lmi_step_eig(G, dG, cap, L, Li)
    GtD = G.T @ dG
    S1 = GtD + GtD.T
    S0 = -(G.T @ G)
    S0.flat[:: r2 + 1] += 1.0
    S2 = dG.T @ dG

    def ok(a):
        return chol(S0 - a * S1 - a * a * S2) is not None

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


def lmi_step_eig(G, dG, cap, L=None, Li=None):
    """:func:`lmi_step` up to ``r1 + r2 =`` :data:`LMI_EIG_MAX`, in few calls: the test of ``alpha = cap`` is
    one Cholesky factorization of ``S(cap) = I - (G + cap dG)^T (G + cap dG)``; else ``-1 / lambda_min`` of
    ``K = [[0, E], [E^T, -(E^T F + F^T E)]]`` with ``E^T = L^{-1} dG^T`` and ``F^T = L^{-1} G^T`` (one triangular
    solve of both, or one product with ``Li = L^{-1}`` when given), since
    ``L^{-1} (dG^T G + G^T dG) L^{-T} = E^T F + F^T E``; only K's lower triangle is formed."""
    r1, r2 = G.shape
    if chol_S(G + cap * dG) is not None:      # the whole step is feasible (often, late in the run)
        return cap
    if Li is None:
        L = chol_S(G) if L is None else L
        if L is None:
            return 0.0
        EF = trsm(L, np.concatenate([dG, G]).T)              # (r2, 2 r1): [E^T, F^T]
    else:
        EF = Li @ np.concatenate([dG, G]).T
    Et = EF[:, :r1]
    H = Et @ EF[:, r1:].T                                      # E^T F
    K = np.empty((r1 + r2, r1 + r2))
    K[:r1, :r1] = 0.0
    K[r1:, :r1] = Et
    np.add(H, H.T, out=K[r1:, r1:])
    K[r1:, r1:] *= -1.0
    lmin = eig_min(K)                                         # reads the lower triangle
    return cap if lmin >= -1.0 / cap else -1.0 / lmin


#: :func:`min_eig_congruent` forms ``L^{-1} dX L^{-T}`` as two products with a given ``L^{-1}`` up to this size
#: (fewer calls than sygst when X's factor serves two step bounds), by sygst beyond
CONGRUENT_BY_INVERSE_MAX = 64


def min_eig_congruent(L, dX, Li=None) -> float:
    """Smallest eigenvalue of ``L^{-1} dX L^{-T}`` (dX symmetric): the step bound of :func:`psd_step`
    (``Li @ dX @ Li^T`` when ``Li = L^{-1}`` is given, else LAPACK sygst forms the lower triangle of the
    congruent matrix in one call)."""
    if Li is not None:
        return eig_min((Li @ dX) @ Li.T)
    K, info = sla.lapack.dsygst(dX, L, itype=1, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"congruence failed (sygst info {info})")
    if K.shape[0] <= 64:  # the full solver: less call overhead than the subset solver
        return eig_min(K)
    return float(sla.eigh(K, lower=True, eigvals_only=True, subset_by_index=[0, 0], check_finite=False)[0])


#: :func:`psd_step` finds ``lambda_min(L^{-1} dX L^{-T})`` densely (sygst and a subset eigensolver) up to this size,
#: by Lanczos (:func:`lanczos_min`) beyond: the dense cost grows as n^3, Lanczos converges in a few tens of products
#: on the correctors' directions, and on directions with a dense lower spectrum (more Lanczos steps) the dense solver
#: stays faster up to about this size (docs/guide/performance.md, "The corrector's primal bound by our own Lanczos")
PSD_STEP_DENSE_MAX = 256

#: :func:`lanczos_min` accepts a Ritz pair whose residual is at most this times ``max(|theta|, eps^(2/3))``
#: (the residual test ARPACK's ``eigsh`` applies with ``tol=``)
LANCZOS_TOL = 1e-8


def lanczos_min(mv, v0, max_steps: int) -> float | None:
    """Smallest Ritz value of the symmetric operator ``mv`` (a function of ``v (n,)``) from the start ``v0 (n,)``:
    Lanczos with full reorthogonalization, the tridiagonal ``T_j`` solved (LAPACK stev) after every step, stopped
    at the first ``j`` whose smallest Ritz pair ``(theta, T_j s = theta s)`` has residual
    ``||mv(y) - theta y|| = beta_j |s_j| <=`` :data:`LANCZOS_TOL` ``max(|theta|, eps^(2/3))``; None if none does
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
        if b * abs(s[j, 0]) <= LANCZOS_TOL * max(abs(theta[0]), floor):
            return float(theta[0])
        Q[j + 1] = w / b
    return None


def psd_step(L, dX, cap, Li=None):
    """Largest ``alpha <= cap`` with ``X + alpha dX >= 0`` for ``X = L L^T > 0`` (dX symmetric; ``Li = L^{-1}``
    if known).

    Beyond :data:`PSD_STEP_DENSE_MAX` the smallest eigenvalue is a Lanczos Ritz value (:func:`lanczos_min`, from a
    fixed start; products by two triangular solves with L, or by ``Li`` when given): a Rayleigh quotient, so
    ``>= lambda_min`` and the bound may exceed the exact one by about the Lanczos tolerance (1e-8 relative). The step
    taken stays inside the cone regardless: :func:`step_lengths` takes ``gamma <= 0.99`` of the bound and its guard
    factorizes ``X + alpha dX`` by Cholesky, shortening the step until that succeeds. If Lanczos does not converge
    within ``min(n, 200)`` steps, the dense computation decides."""
    n = L.shape[0]
    if n <= PSD_STEP_DENSE_MAX:
        lmin = min_eig_congruent(L, dX, Li)
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
        lmin = lanczos_min(mv, v0, min(n, 200))
        if lmin is None:
            lmin = min_eig_congruent(L, dX)
    if lmin >= 0:
        return cap
    return min(cap, -1.0 / lmin)


def psd_step_low_rank(L, F, Vt, cap):
    """Largest ``alpha <= cap`` with ``X + alpha dX >= 0`` for ``X = L L^T > 0`` (n x n) and the predictor's
    direction ``dX = sym(F Vt) - X`` (``F (n, m)``, ``Vt (m, n)``, ``2 m < n``;
    :meth:`~attnsvm.svm.ipm.problem.Problem.XY_factors`).

    ``L^{-1} dX L^{-T} = -I + (a b^T + b a^T) / 2`` with ``[a, b] = L^{-1} [F, Vt^T]``: a rank-``2 m``
    perturbation of ``-I``. With the thin QR ``[a, b] = W R`` its eigenvalues are ``-1 + `` those of
    ``(R_a R_b^T + R_b R_a^T) / 2`` (``R = [R_a, R_b]``, 2m square) and ``-1`` (``n > 2 m``), so
    ``lambda_min = -1 + min(0, mu_min)`` (exact; one triangular solve of n x 2m, a QR and a 2m eigenvalue
    problem instead of the n x n congruence and eigenvalue). ``lambda_min <= -1``, so the bound is ``<= 1``."""
    m = F.shape[1]
    R = np.linalg.qr(trsm(L, np.concatenate([F, Vt.T], axis=1)), mode="r")       # (2m, 2m)
    H = R[:, :m] @ R[:, m:].T                       # R_a R_b^T; the lower triangle of H + H^T is read
    mu = eig_min(H + H.T) * 0.5
    return min(cap, -1.0 / (-1.0 + min(0.0, mu)))


def lp_step(x, dx, cap):
    """Largest ``alpha <= cap`` with ``x + alpha dx >= 0`` (x > 0): ``-1 / min_k (dx_k / x_k)``."""
    if x.size == 0:
        return cap
    m = float(min_reduce(dx / x))
    if m != m:
        raise np.linalg.LinAlgError("the direction is not finite")
    return cap if m * cap >= -1.0 else -1.0 / m


#: the first step takes this fraction of the largest feasible step; later ones :func:`next_gamma`
GAMMA_START = 0.95


def next_gamma(shorter):
    """The fraction of the largest feasible step the next step takes after a step whose shorter length (primal or
    dual) was ``shorter`` (a float, or an array of them): from 0.9 towards 0.99 as the steps near full length."""
    return 0.9 + 0.09 * shorter


#: the step guard shortens a step by this factor while the dual leaves the ball or X is not positive definite, at
#: most :data:`GUARD_TRIES` times (then the step is 0)
GUARD_SHRINK = 0.7
GUARD_TRIES = 60


def step_lengths(nw, d, gamma: float) -> tuple[float, float]:
    """Primal and dual step lengths for the direction ``d`` of the :class:`~attnsvm.svm.ipm.newton.NewtonSystem` ``nw``:
    ``gamma`` times the largest feasible ones, then shortened
    until the dual stays inside the ball and X positive definite despite rounding. Leaves the
    Cholesky factors at the step in ``nw.L_next`` (of S) and ``nw.LX_next`` (of X), and X in
    ``nw.X_next``."""
    pb, x = nw.pb, nw.x
    ap, ad = nw.max_steps(d)
    nw.bounds = (ap, ad)
    ap, ad = gamma * ap, gamma * ad
    dlam, dG, dX, ds = d
    # guard against rounding at the boundary: the dual stays inside the ball, X positive definite
    for _ in range(GUARD_TRIES):
        nw.G_next = pb.Gmap(x.lam + ad * dlam)
        nw.L_next = chol_S(nw.G_next)
        if nw.L_next is not None:
            break
        ad *= GUARD_SHRINK
    else:
        ad, nw.L_next, nw.G_next = 0.0, nw.du.L, nw.du.G
    for _ in range(GUARD_TRIES):
        nw.X_next = x.X + ap * dX
        nw.LX_next = chol(nw.X_next)
        if nw.LX_next is not None:
            break
        ap *= GUARD_SHRINK
    else:
        ap, nw.X_next, nw.LX_next = 0.0, x.X, nw.LX
    return ap, ad
