"""Exact regularization paths of the prompt model on 2-D problems (``mm-regularization-path``).

``p(R) = argmin_{||p|| = R} L(p)`` and the joint ``(v, p)`` path are found by scanning the
angle(s) on a grid and refining. The loss is evaluated from the hard selection plus the
saturation-exact ``delta = sum_t s_t (gamma_a - gamma_t)``, so it stays meaningful where
the attention is saturated (the spec's pitfall 8).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from attnsvm.problem import TokenProblem


def _hard_selection(A, gamma):
    """``(gamma_a, delta)``: score of the highest-logit token a and ``delta = sum_t s_t (gamma_a - gamma_t)``.

    ``A (..., n, T)`` attention logits, ``gamma (..., n, T)`` scores; ``s_t = exp(A_t - logsumexp A)``
    is exact at any saturation. Both outputs have shape (..., n).
    """
    a = np.argmax(A, axis=-1)
    Amax = np.take_along_axis(A, a[..., None], -1)
    lse = Amax[..., 0] + np.log(np.exp(A - Amax).sum(-1))
    s = np.exp(A - lse[..., None])
    ga = np.take_along_axis(gamma, a[..., None], -1)[..., 0]
    return ga, (s * (ga[..., None] - gamma)).sum(-1)


def _log_softplus_neg(u):
    """log(log(1 + e^{-u})) accurately for every u (e^{-u} tiny included)."""
    u = np.asarray(u, dtype=np.float64)
    out = np.empty_like(u)
    big = u > 30
    e = np.exp(-u[big])
    out[big] = -u[big] + np.log1p(-e / 2 + e * e / 3)
    out[~big] = np.log(np.logaddexp(0.0, -u[~big]))
    return out


def _log_mean_loss(A, gamma, loss: str = "logistic"):
    """log of the mean loss from attention logits ``A (..., n, T)`` and scores ``gamma (..., n, T)``.

    ``u = gamma_a - delta`` (see :func:`_hard_selection`); logistic or exponential loss, float64, stable.
    """
    ga, delta = _hard_selection(A, gamma)
    u = ga - delta
    if loss == "logistic":
        lsp = _log_softplus_neg(u)  # log(softplus(-u)) per sample
        m = lsp.max(-1, keepdims=True)
        return m[..., 0] + np.log(np.exp(lsp - m).mean(-1))
    if loss == "exponential":
        m = (-u).max(-1, keepdims=True)
        return m[..., 0] + np.log(np.exp(-u - m).mean(-1))
    raise ValueError(loss)


def split_loss(A, gamma, loss: str = "logistic"):
    """Mean margin loss as an exact pair ``(base, excess)`` with ``L = base + excess``.

    ``A (..., n, T)`` attention logits, ``gamma (..., n, T)`` scores. With ``a_i`` the
    highest-logit token of input i and ``delta_i = sum_t s_it (gamma_ia - gamma_it)`` (computed
    from ``s_t = exp(A_t - logsumexp A)``, exact at any saturation), ``u_i = gamma_ia - delta_i``:

    * ``base = mean_i l(gamma_ia)``: the loss of the hard selection a (identical, bit for bit,
      for every point that selects the same tokens);
    * ``excess = mean_i [l(gamma_ia - delta_i) - l(gamma_ia)]`` written with ``log1p``/``expm1``,
      so it keeps full relative precision when ``delta ~ 1e-30`` (where ``base + excess``
      would round to ``base``: the spec's pitfall 8).
    """
    ga, delta = _hard_selection(A, gamma)
    if loss == "logistic":
        base = np.logaddexp(0.0, -ga)
        sig = np.exp(-np.logaddexp(0.0, ga))  # sigmoid(-gamma_a), full relative precision for large gamma_a
        exc = np.log1p(sig * np.expm1(delta))
    elif loss == "exponential":
        base = np.exp(-ga)
        exc = base * np.expm1(delta)
    elif loss == "correlation":
        base, exc = -ga, delta
    else:
        raise ValueError(f"unsupported loss {loss!r}")
    return base.mean(-1), exc.mean(-1)


def _angle_min(f, grid: int = 3600, lo: float = -np.pi, hi: float = np.pi):
    """Minimize ``base + excess`` of an angle on [lo, hi] (``f(theta) -> (base, excess)``).

    Grid scan in lexicographic order (base first, the exact excess breaks ties between points
    with the same hard selection), then bounded Brent refinement of the excess on the grid
    cell pair around the best point, restricted to points with the same base.
    """
    th = np.linspace(lo, hi, grid + 1)
    base, exc = f(th)
    total = base + exc
    cand = np.flatnonzero(total <= total.min() + 1e-12 * max(1.0, abs(total.min())))
    j = int(cand[np.lexsort((exc[cand], base[cand]))[0]])
    b0 = base[j]
    step = (hi - lo) / grid

    def g(x):
        b, e = f(np.array([x]))
        return float(e[0]) if b[0] == b0 else np.inf

    a_, b_ = max(lo, th[j] - step), min(hi, th[j] + step)
    res = minimize_scalar(g, bounds=(a_, b_), method="bounded", options={"xatol": 1e-14, "maxiter": 500})
    return float(res.x) if res.fun <= exc[j] else float(th[j])


def prompt_path_2d(problem: TokenProblem, radii, *, loss: str = "logistic", cone=None, grid: int = 3600):
    """Regularization path ``p(R) = argmin_{||p|| = R} L(p)`` for prompt problems whose keys span 2-D.

    ``p`` is restricted to the 2-D span of the keys (a component outside it does not change
    the loss and only wastes norm) and, with ``cone = (direction (d,), half_angle_radians)``,
    to the directions within that angle of ``direction`` (the local path). The loss is the
    exact split of :func:`split_loss`, so the path stays meaningful beyond ``R * margin ~ 35``.

    Returns
    -------
    P : (len(radii), d) minimizers; excess : (len(radii),) their loss above the hard-selection loss.
    """
    K = problem.keys.reshape(-1, problem.d)
    _, sv, vt = np.linalg.svd(K, full_matrices=False)
    r = int(np.sum(sv > 1e-12 * sv[0]))
    if r != 2:
        raise ValueError(f"prompt_path_2d needs keys spanning 2 dimensions, got rank {r}")
    B = vt[:2].T  # (d, 2)
    Kb = problem.keys @ B  # (n, T, 2)
    gamma = problem.scores()
    lo, hi = -np.pi, np.pi
    if cone is not None:
        c2 = B.T @ np.asarray(cone[0], dtype=np.float64)
        mid = float(np.arctan2(c2[1], c2[0]))
        lo, hi = mid - float(cone[1]), mid + float(cone[1])
    out, vals = [], []
    for R in radii:
        def f(th, R=R):
            U = np.stack([np.cos(th), np.sin(th)], -1) * R  # (G, 2)
            A = np.einsum("ntk,gk->gnt", Kb, U)
            return split_loss(A, np.broadcast_to(gamma, A.shape), loss)

        th = _angle_min(f, grid, lo, hi)
        out.append(B @ (R * np.array([np.cos(th), np.sin(th)])))
        vals.append(float(f(np.array([th]))[1][0]))
    return np.array(out), np.array(vals)


def _refine_joint(K, X, Y, r, R, tv, tp, iters: int = 4, width: float = 0.05):
    """Alternating exact refinement of a joint-path minimizer ``(theta_v, theta_p)``.

    The log-loss seen by Nelder-Mead is flat in ``theta_p`` to ~1e-11 relative once the attention
    saturates (r = R = 40 on E3), which leaves the p angle uncertain at 1e-4. Here ``theta_p``
    minimizes the exact *excess* of :func:`split_loss` for fixed v (the hard-selection part does
    not depend on p), then ``theta_v`` minimizes ``base + excess`` for fixed p; repeated until the
    angles stop moving. ``K, X (n, T, 2)``, ``Y (n,)``.
    """
    def split(tv_, tp_):
        tp_ = np.atleast_1d(tp_)
        P = R * np.stack([np.cos(tp_), np.sin(tp_)], -1)  # (G, 2)
        A = np.einsum("ntk,gk->gnt", K, P)
        v = r * np.array([np.cos(tv_), np.sin(tv_)])
        gamma = np.broadcast_to(Y[:, None] * (X @ v), A.shape)
        return split_loss(A, gamma, "logistic")

    for _ in range(iters):
        f = lambda th, tv_=tv: split(tv_, th)  # noqa: E731
        tp_new = _angle_min(f, 400, tp - width, tp + width)
        tv_new = float(minimize_scalar(lambda x: float(sum(b[0] for b in split(x, tp_new))),
                                       bounds=(tv - width, tv + width), method="bounded",
                                       options={"xatol": 1e-14, "maxiter": 500}).x)
        moved = max(abs(tp_new - tp), abs(tv_new - tv))
        tv, tp = tv_new, tp_new
        if moved < 1e-10:
            break
    return tv, tp


def joint_path_2d(problem: TokenProblem, pairs, *, grid: int = 360):
    """Joint path ``argmin_{||v|| = r, ||p|| = R} L(v, p)`` (d = 2, W fixed).

    Grid + Nelder-Mead in the two angles on the log-loss, then an alternating exact refinement
    (:func:`_refine_joint`) that resolves the p angle where the log-loss is flat.
    """
    assert problem.d == 2
    K = problem.keys
    X, Y = problem.X, problem.Y

    def logL(tv, tp, r, R):
        tv, tp = np.atleast_1d(tv), np.atleast_1d(tp)
        V = r * np.stack([np.cos(tv), np.sin(tv)], -1)  # (Gv, 2)
        P = R * np.stack([np.cos(tp), np.sin(tp)], -1)  # (Gp, 2)
        A = np.einsum("ntk,gk->gnt", K, P)  # (Gp, n, T)
        gamma = Y[None, None, :, None] * np.einsum("ntk,hk->hnt", X, V)[:, None]  # (Gv, 1, n, T)
        A = np.broadcast_to(A[None], (V.shape[0],) + A.shape)
        return _log_mean_loss(A, np.broadcast_to(gamma, A.shape), "logistic")  # (Gv, Gp)

    th = np.linspace(-np.pi, np.pi, grid, endpoint=False)
    res_v, res_p, res_f = [], [], []
    for r, R in pairs:
        F = logL(th, th, r, R)
        cand = np.argsort(F, axis=None)[:2]
        best = None
        for c in cand:
            i, j = np.unravel_index(c, F.shape)
            m = minimize(lambda x: float(logL(x[0], x[1], r, R)[0, 0]), x0=[th[i], th[j]], method="Nelder-Mead",
                         options={"xatol": 1e-11, "fatol": 1e-13, "maxiter": 4000})
            if best is None or m.fun < best.fun:
                best = m
        tv, tp = _refine_joint(K, X, Y, r, R, *best.x)
        res_v.append(r * np.array([np.cos(tv), np.sin(tv)]))
        res_p.append(R * np.array([np.cos(tp), np.sin(tp)]))
        res_f.append(float(best.fun))
    return np.array(res_v), np.array(res_p), np.array(res_f)


def positive_margin_half_angle(problem: TokenProblem, select, p_dir, *, tol: float = 1e-6, grid: int = 20001) -> float:
    """Largest half-angle (radians) of a cone around ``p_dir`` inside which the support tokens stay the
    strongest competitors (spec 3.7: "a positive margin over non-support tokens").

    For a unit direction ``u`` in the 2-D key plane let ``g_it(u) = (k_{i,a_i} - k_it)^T u`` be the
    logit gaps. At ``u = p_dir / ||p_dir||`` (``p_dir`` = the p-SVM of ``select``) the support tokens
    have the smallest gaps (``1 / ||p||``) and the non-support tokens larger ones. The returned angle
    is the smallest rotation of ``u`` (either side) at which some non-support token's gap falls to
    the largest support-token gap of its input: beyond it a non-support token (possibly with a higher
    score) becomes the strongest competitor, and the cone condition of the local theory fails.
    Computed from the keys alone (grid plus bisection), never from a trained path.

    Parameters
    ----------
    problem : TokenProblem whose keys span 2 dimensions
    select : (n,) selection; p_dir : (d,) its p-SVM solution
    """
    K = problem.keys.reshape(-1, problem.d)
    _, sv, vt = np.linalg.svd(K, full_matrices=False)
    if int(np.sum(sv > 1e-12 * sv[0])) != 2:
        raise ValueError("positive_margin_half_angle needs keys spanning 2 dimensions")
    B = vt[:2].T
    Kb = problem.keys @ B  # (n, T, 2)
    sel = np.asarray(select, dtype=np.int64)
    n = problem.n
    D = Kb[np.arange(n), sel][:, None, :] - Kb  # (n, T, 2) gaps' directions
    c2 = B.T @ np.asarray(p_dir, dtype=np.float64)
    gaps0 = D @ (c2 / np.linalg.norm(c2))
    other = np.ones(D.shape[:2], bool)
    other[np.arange(n), sel] = False
    sup = other & (np.abs(gaps0 * np.linalg.norm(c2) - 1.0) <= tol)
    non = other & ~sup
    if not non.any():
        return float(np.pi)
    mid = float(np.arctan2(c2[1], c2[0]))

    def margin(phi):
        u = np.stack([np.cos(mid + phi), np.sin(mid + phi)], -1)  # (G, 2)
        g = np.einsum("ntk,gk->gnt", D, u)
        top_sup = np.where(sup[None], g, -np.inf).max(-1)  # (G, n)
        low_non = np.where(non[None], g, np.inf).min(-1)
        return (low_non - top_sup).min(-1)  # (G,)

    best = np.pi
    for side in (1.0, -1.0):
        phis = side * np.linspace(0.0, np.pi, grid)
        m = margin(phis)
        bad = np.flatnonzero(m <= 0)
        if not len(bad):
            continue
        j = int(bad[0])
        lo, hi = abs(phis[j - 1]), abs(phis[j])
        for _ in range(60):
            midp = 0.5 * (lo + hi)
            if margin(np.array([side * midp]))[0] > 0:
                lo = midp
            else:
                hi = midp
        best = min(best, 0.5 * (lo + hi))
    return float(best)
