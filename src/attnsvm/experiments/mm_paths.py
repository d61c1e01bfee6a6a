"""Exact regularization paths of the prompt model on 2-D problems (``mm-regularization-path``).

``p(R) = argmin_{||p|| = R} L(p)`` and the joint ``(v, p)`` path are found by scanning the
angle(s) on a grid and refining. The loss is evaluated from the hard selection plus the
saturation-exact ``delta = sum_t s_t (gamma_a - gamma_t)``, so it stays meaningful where
the attention is saturated (the spec's pitfall 8).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from ..problem import TokenProblem


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
        sig = 0.5 * (1.0 + np.tanh(-ga / 2.0))  # sigmoid(-gamma_a)
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


def joint_path_2d(problem: TokenProblem, pairs, *, grid: int = 360):
    """Joint path ``argmin_{||v|| = r, ||p|| = R} L(v, p)`` (d = 2, W fixed): grid + Nelder-Mead in two angles."""
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
        cand = np.argsort(F, axis=None)[:4]
        best = None
        for c in cand:
            i, j = np.unravel_index(c, F.shape)
            m = minimize(lambda x: float(logL(x[0], x[1], r, R)[0, 0]), x0=[th[i], th[j]], method="Nelder-Mead",
                         options={"xatol": 1e-11, "fatol": 1e-13, "maxiter": 4000})
            if best is None or m.fun < best.fun:
                best = m
        tv, tp = best.x
        res_v.append(r * np.array([np.cos(tv), np.sin(tv)]))
        res_p.append(R * np.array([np.cos(tp), np.sin(tp)]))
        res_f.append(float(best.fun))
    return np.array(res_v), np.array(res_p), np.array(res_f)
