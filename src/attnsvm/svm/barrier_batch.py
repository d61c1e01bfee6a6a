"""Many small nuclear-norm SVMs at once: the interior-point method of :mod:`attnsvm.svm.ipm`
run on a stack of problems.

A single small solve (e.g. (n, T, d) = (6, 8, 10): 42 rows, a 16 x 16 SDP) spends its time in
Python and per-call overhead of its ~16 iterations, not in arithmetic. Here the problems
of equal reduced shape ``(N, r1, r2)`` (the usual case for a batch of random instances of one
size) iterate together: every linear map of the method (:class:`attnsvm.svm.ipm.Problem`:
``Gmap``, ``amap``, ``XY``, ``schur``) is applied to ``(R, ...)`` stacks, and the control of
the method is :mod:`attnsvm.svm.ipm`'s rules on per-problem arrays: the tolerance test
(:func:`~attnsvm.svm.ipm.driver.is_optimal`), the stop at the optimum and the stall limit
(:func:`~attnsvm.svm.ipm.driver.stops_at_optimum`, :func:`~attnsvm.svm.ipm.driver.stall_limit`), Mehrotra's
centering (:func:`~attnsvm.svm.ipm.newton.centering`), the step fraction
(:data:`~attnsvm.svm.ipm.steps.GAMMA_START`, :func:`~attnsvm.svm.ipm.steps.next_gamma`) and the step guard's
backtracking (:data:`~attnsvm.svm.ipm.steps.GUARD_SHRINK`, :data:`~attnsvm.svm.ipm.steps.GUARD_TRIES`). A problem
leaves the stack when it stops; the others go on. Problems with equality rows, rows that constrain nothing, or a
shape of their own are solved one by one by :func:`~attnsvm.svm.ipm.nuclear_ipm_unchecked`.

The stacked arithmetic is its own (calling the single solve's functions per problem would give up the batching),
so results agree with the single solve to the certificate's tolerances (tested), not bit for bit: the Schur
systems are solved by LU on the Jacobi-scaled matrix (numpy's batched ``solve``, not the blocked Cholesky); the
PSD and LMI step bounds are eigenvalues of the stacked congruent matrices (not Cholesky tests, sygst or Lanczos)
and the dual one is sought up to 1, not below the primal one (no equal steps); the LP bound is the smallest ratio
``-x / dx`` (not ``-1 / min(dx / x)``); ``mu``, the predictor's ``mu_aff`` and the nuclear norm are summed in
another order (two traces, ``np.sum`` and numpy's SVD, not one diagonal sum, ``vdot`` and gesdd); the least-norm
clean-up is tried at gaps ``<= 10 gap_tol`` (the single solve: ``|gap| <= 10 gap_tol``), and there is no time limit, step
guard's G / factor carried to the next iteration, or trace.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from attnsvm.svm.ipm import (GAMMA_START, GUARD_SHRINK, GUARD_TRIES, MAX_ITER, Problem, blocks, centering, clean_primal,
                             ipm_result, is_optimal, mT, next_gamma, nuclear_ipm_unchecked, reduce_problem, stall_limit,
                             start_point, stops_at_optimum, sym, violation, z_half)

__all__ = ["nuclear_ipm_batch"]


def _min_eig(S: np.ndarray) -> np.ndarray:
    """Smallest eigenvalue of each symmetric matrix of the stack ``S (R, n, n)``: (R,)."""
    return np.linalg.eigvalsh(sym(S))[..., 0]


def _rows(pb: Problem, idx: np.ndarray) -> Problem:
    """The problems ``idx`` of a batched :class:`Problem` (its arrays sliced, nothing recomputed)."""
    q = Problem.__new__(Problem)
    q.A, q.Bm, q.rhs, q.eq, q.ineq = pb.A[idx], pb.Bm[idx], pb.rhs[idx], pb.eq[idx], pb.ineq[idx]
    q.N, q.r1, q.r2, q.n_tot = pb.N, pb.r1, pb.r2, pb.n_tot[idx]
    q.Bq = q.qidx = q.E = None
    return q


def _dual(pb: Problem, lam: np.ndarray):
    """Dual quantities of the stack (as :class:`attnsvm.svm.ipm.Dual`) and the mask of the
    problems whose dual iterate is inside the spectral-norm ball."""
    G = pb.Gmap(lam)
    S = np.eye(pb.r2) - mT(G) @ G
    ok = _pd(S)
    S[~ok] = np.eye(pb.r2)               # keeps the stack factorizable; those problems stop
    Si = sym(np.linalg.inv(S))
    AG = pb.A @ G
    C = G @ Si
    return SimpleNamespace(G=G, Si=Si, C=C, Zh=z_half(G, C, Si), AG=AG, AC=AG @ Si), ok


def _pd(S: np.ndarray) -> np.ndarray:
    """Which matrices of the symmetric stack ``S (R, n, n)`` are positive definite: (R,) bool (one
    Cholesky of the stack when all are, eigenvalues otherwise)."""
    try:
        np.linalg.cholesky(S)
        return np.ones(S.shape[0], bool)
    except np.linalg.LinAlgError:
        return _min_eig(S) > 0


def _lp_steps(x, dx) -> np.ndarray:
    """Per problem the largest ``alpha <= 1`` with ``x + alpha dx >= 0`` (x > 0): (R,)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(dx < 0, -x / dx, np.inf)
    return np.minimum(1.0, ratio.min(axis=-1))


def _psd_steps(LXi, dX) -> np.ndarray:
    """Per problem the largest ``alpha <= 1`` with ``X + alpha dX >= 0``, ``LXi`` the inverse Cholesky factors of X."""
    lmin = _min_eig(LXi @ dX @ mT(LXi))
    with np.errstate(divide="ignore"):
        return np.where(lmin >= 0, 1.0, np.minimum(1.0, -1.0 / np.minimum(lmin, -1e-300)))


def _lmi_steps(LZi, dG) -> np.ndarray:
    """Per problem the largest ``alpha <= 1`` with ``||G + alpha dG||_2 < 1``: the dual LMI
    ``[[I, G], [G^T, I]] > 0`` is linear in alpha, so this is :func:`_psd_steps` with ``LZi`` the inverse
    Cholesky factors of ``[[I, G], [G^T, I]]``."""
    r1 = dG.shape[-2]
    zero1 = np.zeros(dG.shape[:-2] + (r1, r1))
    zero2 = np.zeros(dG.shape[:-2] + (dG.shape[-1], dG.shape[-1]))
    return _psd_steps(LZi, blocks(zero1, dG, zero2))


class _Stack:
    """The iterate of the problems still running: ``lam, s (R, N)``, ``X11 (R, r1, r1)``, ``X12 (R, r1, r2)``,
    ``X22 (R, r2, r2)`` (all rows are inequality rows)."""

    def __init__(self, lam, X11, X12, X22, s):
        self.lam, self.X11, self.X12, self.X22, self.s = lam, X11, X12, X22, s

    def take(self, idx):
        return _Stack(self.lam[idx], self.X11[idx], self.X12[idx], self.X22[idx], self.s[idx])


def _newton(pb: Problem, x: _Stack, du, mu: np.ndarray, gamma: np.ndarray):
    """Mehrotra's predictor-corrector direction and step lengths for every problem of the stack
    (as :func:`attnsvm.svm.ipm.mehrotra_direction` and ``step_lengths``): ``(d, ap, ad)``."""
    M = pb.schur(x.X11, x.X12, x.X22, du)
    diag = np.arange(pb.N)
    M[:, diag, diag] += x.s / x.lam
    dg = M[:, diag, diag].copy()
    dg[~(dg > 0)] = 1.0
    sc = 1.0 / np.sqrt(dg)
    M *= sc[:, :, None]
    M *= sc[:, None, :]

    def solve(r):
        return sc * np.linalg.solve(M, (sc * r)[..., None])[..., 0]

    g = 2.0 * np.einsum("rkj,rkj->rk", du.AC, pb.Bm)
    r1 = pb.r1
    Zi11 = 2.0 * du.Zh[:, :r1, :r1]
    X = blocks(x.X11, x.X12, x.X22)
    LXi = np.linalg.inv(np.linalg.cholesky(X))
    LZi = np.linalg.inv(np.linalg.cholesky(blocks(np.broadcast_to(np.eye(pb.r1), x.X11.shape), du.G,
                                                  np.broadcast_to(np.eye(pb.r2), x.X22.shape))))

    def direction(rvec, sig_mu, corr):
        dlam = solve(rvec)
        dG = pb.Gmap(dlam)
        T = pb.XY(X, dG, du)
        T11, T12, T22 = T[:, :r1, :r1], T[:, :r1, r1:], T[:, r1:, r1:]
        sm = sig_mu[:, None, None]
        dX11 = sm * Zi11 - x.X11 + T11
        dX12 = sm * 2.0 * du.C - x.X12 + T12
        dX22 = sm * 2.0 * du.Si - x.X22 + T22
        ds = -x.s - (x.s / x.lam) * dlam + sig_mu[:, None] / x.lam
        if corr is not None:
            dX11, dX12, dX22, ds = dX11 + corr[0], dX12 + corr[1], dX22 + corr[2], ds + corr[3]
        return dlam, dG, sym(dX11), dX12, sym(dX22), ds

    def max_steps(d):
        dlam, dG, dX11, dX12, dX22, ds = d
        ap = np.minimum(_psd_steps(LXi, blocks(dX11, dX12, dX22)), _lp_steps(x.s, ds))
        ad = np.minimum(_lmi_steps(LZi, dG), _lp_steps(x.lam, dlam))
        return ap, ad

    zero = np.zeros(len(mu))
    da = direction(pb.rhs.copy(), zero, None)
    ap, ad = max_steps(da)
    dlam_a, dG_a, dX11_a, dX12_a, dX22_a, ds_a = da
    tr = lambda T: np.trace(T, axis1=-2, axis2=-1)  # noqa: E731
    xz = (0.5 * (tr(x.X11 + ap[:, None, None] * dX11_a) + tr(x.X22 + ap[:, None, None] * dX22_a))
          - np.sum((x.X12 + ap[:, None, None] * dX12_a) * (du.G + ad[:, None, None] * dG_a), axis=(-2, -1)))
    mu_a = (xz + np.sum((x.s + ap[:, None] * ds_a) * (x.lam + ad[:, None] * dlam_a), axis=-1)) / pb.n_tot
    sigma = centering(mu_a, mu)
    c = pb.XY(blocks(dX11_a, dX12_a, dX22_a), dG_a, du)
    c11, c12, c22 = c[:, :r1, :r1], c[:, :r1, r1:], c[:, r1:, r1:]
    cs = -(ds_a * dlam_a) / x.lam
    sm = sigma * mu
    rvec = pb.rhs - sm[:, None] * g - pb.amap(c12) + sm[:, None] / x.lam + cs
    d = direction(rvec, sm, (c11, c12, c22, cs))
    ap, ad = max_steps(d)
    ap, ad = gamma * ap, gamma * ad
    dlam, dG, dX11, dX12, dX22, ds = d
    # guard against rounding at the boundary: the dual inside the ball, X positive definite
    for _ in range(GUARD_TRIES):
        G2 = pb.Gmap(x.lam + ad[:, None] * dlam)
        bad = ~_pd(np.eye(pb.r2) - mT(G2) @ G2)
        if not bad.any():
            break
        ad = np.where(bad, GUARD_SHRINK * ad, ad)
    else:
        ad = np.where(bad, 0.0, ad)
    dX = blocks(dX11, dX12, dX22)
    for _ in range(GUARD_TRIES):
        bad = ~_pd(X + ap[:, None, None] * dX)
        if not bad.any():
            break
        ap = np.where(bad, GUARD_SHRINK * ap, ap)
    else:
        ap = np.where(bad, 0.0, ap)
    return d, ap, ad


def _solve_stack(reds, starts, gap_tol, feas_tol, max_iter):
    """The batched path-following loop over problems of equal reduced shape without equality rows.
    Returns per problem ``(best, status, iterations, stopped)``, ``best = (merit, gap, violation, X12, lam)``."""
    R = len(reds)
    pb_all = Problem(np.stack([r.pb.A for r in reds]), np.stack([r.pb.Bm for r in reds]),
                     np.stack([r.pb.rhs for r in reds]), np.zeros((R, reds[0].pb.N), bool))
    x_all = _Stack(*(np.stack([s[k] for s in starts]) for k in range(5)))
    best_merit = np.full(R, np.inf)
    best_gap = np.full(R, np.inf)
    best_viol = np.full(R, np.inf)
    best_X12 = x_all.X12.copy()
    best_lam = x_all.lam.copy()
    since = np.zeros(R, np.int64)
    gamma = np.full(R, GAMMA_START)
    iters = np.zeros(R, np.int64)
    status = np.array(["inaccurate"] * R, dtype=object)
    stopped = np.array(["iteration limit"] * R, dtype=object)
    active = np.ones(R, bool)
    for _ in range(max_iter):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        pb, x = _rows(pb_all, idx), x_all.take(idx)
        iters[idx] += 1
        du, inside = _dual(pb, x.lam)
        if not inside.all():              # rounding pushed a dual onto the boundary: keep its best
            out = idx[~inside]
            stopped[out], active[out] = "numerical limit", False
        # measure (as ipm.measure): gap, violation, the best iterate, the barrier parameter
        marg = pb.amap(x.X12)
        viol = np.max(np.maximum(pb.rhs - marg, 0.0), axis=-1) / (1.0 + np.max(np.abs(pb.rhs), axis=-1))
        nuc = np.linalg.svd(x.X12, compute_uv=False).sum(axis=-1)
        gap = (nuc - np.sum(pb.rhs * x.lam, axis=-1)) / np.maximum(1.0, np.abs(nuc))
        Xc = x.X12.copy()
        for j in np.flatnonzero((gap <= 10 * gap_tol) & (viol > feas_tol)):
            Xj, vj, gj = clean_primal(reds[idx[j]].pb, x.X12[j], x.lam[j], feas_tol)
            if vj < viol[j]:
                Xc[j], viol[j], gap[j] = Xj, vj, gj
        merit = np.maximum(gap, viol)
        better = merit < best_merit[idx]
        bi = idx[better]
        best_merit[bi], best_gap[bi], best_viol[bi] = merit[better], gap[better], viol[better]
        best_X12[bi], best_lam[bi] = Xc[better], x.lam[better]
        since[idx] = np.where(better, 0, since[idx] + 1)
        pobj = 0.5 * (np.trace(x.X11, axis1=-2, axis2=-1) + np.trace(x.X22, axis1=-2, axis2=-1))
        mu = (pobj - np.sum(x.X12 * du.G, axis=(-2, -1)) + np.sum(x.s * x.lam, axis=-1)) / pb.n_tot
        # stopping test (as ipm.stopping_test)
        optimal = is_optimal(best_gap[idx], best_viol[idx], gap_tol, feas_tol)
        status[idx[optimal]] = "optimal"
        done = optimal & stops_at_optimum(best_gap[idx], since[idx], gap_tol)
        stall = ~done & (since[idx] >= stall_limit(best_merit[idx]))
        stopped[idx[done]] = ""
        stopped[idx[stall]] = "stalled"
        go = ~done & ~stall & inside
        active[idx[~go]] = False
        if not go.any():
            continue
        keep = np.flatnonzero(go)
        gi = idx[keep]
        pb, x = _rows(pb_all, gi), x.take(keep)
        du = SimpleNamespace(**{k: v[keep] for k, v in vars(du).items()})
        try:
            d, ap, ad = _newton(pb, x, du, mu[keep], gamma[gi])
        except (np.linalg.LinAlgError, ValueError):   # numerical breakdown: keep each one's best
            stopped[gi], active[gi] = "numerical limit", False
            continue
        slow = np.maximum(ap, ad) < 1e-10
        stopped[gi[slow]], active[gi[slow]] = "no progress", False
        dlam, dG, dX11, dX12, dX22, ds = d
        a3, d2 = ap[:, None, None], ad[:, None]
        x_all.lam[gi] = x.lam + d2 * dlam
        x_all.X11[gi] = x.X11 + a3 * dX11
        x_all.X12[gi] = x.X12 + a3 * dX12
        x_all.X22[gi] = x.X22 + a3 * dX22
        x_all.s[gi] = x.s + ap[:, None] * ds
        gamma[gi] = next_gamma(np.minimum(ap, ad))
    return [((best_merit[k], best_gap[k], best_viol[k], best_X12[k], best_lam[k]), status[k], int(iters[k]),
             stopped[k]) for k in range(R)]


def nuclear_ipm_batch(problems, *, gap_tol: float, feas_tol: float, max_iter: int = MAX_ITER) -> list:
    """Solve many ``min ||W||_* s.t. u_k^T W w_k >= rhs_k`` problems (as :func:`~attnsvm.svm.ipm.nuclear_ipm`).

    Parameters
    ----------
    problems : list of tuples ``(U (N, d1), V (N, d2), rhs (N,), is_equality (N,) bool, lam_init (N,) or
        None, W_init (d1, d2) or None)``, each a feasible constraint set (feasibility is decided by
        the caller); sizes may differ (problems are stacked by reduced shape)
    gap_tol, feas_tol, max_iter : as :func:`~attnsvm.svm.ipm.nuclear_ipm` (the caller's resolved and checked
        ``gap_tol`` and ``feas_tol``, :class:`~attnsvm.svm.settings.SolverSettings`: not checked again)

    Returns
    -------
    list of :class:`~attnsvm.svm.ipm.IPMResult`, one per problem, in order; ``info["batch"]`` is the
    number of problems it was stacked with (1: solved alone by ``nuclear_ipm_unchecked``).
    """
    out: list = [None] * len(problems)
    groups: dict = {}
    for k, (U, V, rhs, eq, lam0, W0) in enumerate(problems):
        U, V = np.asarray(U, float), np.asarray(V, float)
        rhs, eq = np.asarray(rhs, float), np.asarray(eq, bool)
        info = {"method": "primal-dual interior point (HKM, Mehrotra), batched"}
        red = None if eq.any() else reduce_problem(U, V, rhs, eq, info)
        if red is None or not red.live.all():
            out[k] = nuclear_ipm_unchecked(U, V, rhs, eq, lam_init=lam0, W_init=W0, gap_tol=gap_tol,
                                           feas_tol=feas_tol, max_iter=max_iter, time_limit=None)
            out[k].info["batch"] = 1
            continue
        start = start_point(red.pb, None if lam0 is None else np.asarray(lam0, float), red.M_init(W0))
        groups.setdefault((red.pb.N, red.pb.r1, red.pb.r2), []).append((k, red, start, info, U.shape[0]))
    for members in groups.values():
        if len(members) == 1:             # alone in its shape: the single solve
            k = members[0][0]
            U, V, rhs, eq, lam0, W0 = problems[k]
            out[k] = nuclear_ipm_unchecked(U, V, rhs, eq, lam_init=lam0, W_init=W0, gap_tol=gap_tol,
                                           feas_tol=feas_tol, max_iter=max_iter, time_limit=None)
            out[k].info["batch"] = 1
            continue
        t1 = time.perf_counter()
        results = _solve_stack([m[1] for m in members], [m[2] for m in members], gap_tol, feas_tol, max_iter)
        secs = (time.perf_counter() - t1) / len(members)
        for (k, red, _, info, N), (best, status, its, stopped) in zip(members, results):
            merit, gap, viol, X12, lam_l = best
            if not np.isfinite(merit):      # never measured (the start left the domain): the start itself
                best = (merit, gap, violation(red.pb, red.pb.amap(X12)), X12, lam_l)
            if stopped:
                info["stopped"] = stopped
            info["batch"] = len(members)
            out[k] = ipm_result(red, best, str(status), its, info, N, gap_tol, feas_tol, secs)
    return out
