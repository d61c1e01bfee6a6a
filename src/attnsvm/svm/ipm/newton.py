"""The Newton system of the interior-point method (the factorized Schur complement, the HKM directions), Mehrotra's
predictor-corrector direction and one step (:func:`ipm_step`, :func:`next_step`)."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from attnsvm.svm.ipm.linalg import chol, tri_inv
from attnsvm.svm.ipm.problem import NUMPY_NEWTON, XY_DENSE_MAX, Dual, Iterate, Problem
from attnsvm.svm.ipm.steps import (CONGRUENT_BY_INVERSE_MAX, lmi_step, lp_step, psd_step, psd_step_low_rank, next_gamma,
                                   step_lengths)
from attnsvm.svm.ipm.trace import trace, tracing


class NewtonSystem:
    """The factorized Schur complement at an iterate and the HKM directions it gives; ``equal_steps``: the
    primal and the dual take the same step length (:meth:`max_steps`); ``backend`` solves the Newton systems
    (:class:`~attnsvm.svm.ipm.problem.NumpyNewton` describes the interface)."""

    def __init__(self, pb: Problem, x: Iterate, du: Dual, equal_steps: bool = False, backend=NUMPY_NEWTON):
        I = pb.I
        self.pb, self.x, self.du, self.equal_steps = pb, x, du, equal_steps
        self.factors = None                                       # the predictor's X Y = F Vt (see :meth:`direction`)
        if x.LX is None:
            x.LX = chol(x.X)
            if x.LX is None:
                raise np.linalg.LinAlgError("primal iterate X is not positive definite")
        self.LX = x.LX
        self.lamI = x.lam[I]
        self.s_lam = x.s / self.lamI                              # (N_ineq,): s / lam, the diagonal's entries
        if isinstance(I, slice):                                   # every row an inequality
            diag = self.s_lam
        else:
            diag = np.zeros(pb.N)
            diag[I] = self.s_lam
        self.solve = backend.solver(pb, x, du, diag)
        # L^{-1} of X's factor for the primal step bounds of small X (see :func:`~attnsvm.svm.ipm.steps.min_eig_congruent`)
        self.LXi = tri_inv(self.LX) if self.LX.shape[0] <= CONGRUENT_BY_INVERSE_MAX else None
        # A(Z^{-1}) = 2 a_k^T C b_k: on the distinct queries when the maps group rows (no A C), else from A C
        self.g = 2.0 * (np.einsum("kj,kj->k", du.AC, pb.Bm) if pb.E is None else pb.amap(du.C))

    def direction(self, rvec, sig_mu, corr):
        """``(dlam, dG, dX, ds)`` (``dX`` r1 + r2 square, exactly symmetric) for the right-hand side
        ``rvec`` (N',), centering ``sig_mu`` and the second-order correction ``corr = (cX, cs)`` (or None)."""
        pb, x, du, I, lamI = self.pb, self.x, self.du, self.pb.I, self.lamI
        dlam = self.solve(rvec)
        dG = pb.Gmap(dlam)
        self.Y = pb.Y(dG, du)                                     # kept: the corrector reuses the predictor's
        n = x.X.shape[0]
        factors = pb.XY_factors(x.X, dG, du, self.Y) if n > XY_DENSE_MAX else None
        # the predictor's X Y = F Vt, kept for its primal step bound (psd_step_low_rank) when 2 m < r1 + r2
        pred = factors is not None and sig_mu == 0.0 and corr is None and 2 * factors[0].shape[1] < n
        self.factors = factors if pred else None
        dX = pb.XY(x.X, dG, du, self.Y, factors)                  # dX = 2 sig_mu Zh - X + sym(X Y)
        dX -= x.X
        if sig_mu:
            dX += (2.0 * sig_mu) * du.Zh
        ds = -x.s - self.s_lam * dlam[I]
        if sig_mu:
            ds += sig_mu / lamI
        if corr is not None:
            dX += corr[0]
            ds += corr[1]
        return dlam, dG, dX, ds

    def max_steps(self, d):
        """Largest primal and dual steps in (0, 1] that keep X, s and the dual feasible; with :attr:`equal_steps`
        the same step ``(a, a)``, the dual bound sought below the primal one only (its full-step Cholesky test
        then passes more often)."""
        dlam, dG, dX, ds = d
        cap = self.lp_cap = lp_step(self.x.s, ds, 1.0)
        if self.factors is not None:                        # the predictor's: low rank + -X (beyond 64 only)
            ap = psd_step_low_rank(self.LX, *self.factors, cap)
        else:
            ap = psd_step(self.LX, dX, cap, self.LXi)
        cap = ap if self.equal_steps else 1.0
        ad = lmi_step(self.du.G, dG, lp_step(self.lamI, dlam[self.pb.I], cap), L=self.du.L, Li=self.du.Li)
        return (ad, ad) if self.equal_steps else (ap, ad)


def centering(mu_aff, mu):
    """Mehrotra's centering parameter ``sigma = clip(mu_aff / mu, 0, 1)^3`` from the affine-scaling direction's
    barrier parameter ``mu_aff`` and the iterate's ``mu`` (floats, or arrays of them): little centering where the
    predictor alone reduces mu a lot."""
    if isinstance(mu_aff, np.ndarray):
        return np.clip(mu_aff / mu, 0.0, 1.0) ** 3
    return min(1.0, max(0.0, mu_aff / mu)) ** 3


def mehrotra_direction(nw: NewtonSystem, mu: float):
    """Newton direction: the predictor (affine scaling), Mehrotra's centering parameter sigma and
    the corrector. Returns ``(d, sigma)`` with d as :meth:`NewtonSystem.direction`."""
    pb, x, du, I, lamI = nw.pb, nw.x, nw.du, nw.pb.I, nw.lamI
    G, n_tot, r1 = du.G, pb.n_tot, pb.r1
    # predictor (affine scaling direction) and Mehrotra's centering parameter
    da = nw.direction(pb.rhs.copy(), 0.0, None)
    Ya = nw.Y
    ap, ad = nw.max_steps(da)
    dlam_a, dG_a, dX_a, ds_a = da
    xz = (0.5 * (x.X.trace() + ap * dX_a.trace())
          - float(np.vdot(x.X12 + ap * dX_a[:r1, r1:], G + ad * dG_a)))
    mu_a = (xz + float((x.s + ap * ds_a) @ (lamI + ad * dlam_a[I]))) / n_tot
    sigma = centering(mu_a, mu)
    nw.mu_aff = mu_a
    # corrector: second-order terms of X Z = sigma mu I and s lam = sigma mu
    cX = pb.XY(dX_a, dG_a, du, Ya)
    cs = -(ds_a * dlam_a[I]) / lamI
    rvec = pb.rhs - sigma * mu * nw.g - pb.amap(cX[:r1, r1:])
    rvec[I] += sigma * mu / lamI + cs
    return nw.direction(rvec, sigma * mu, (cX, cs)), sigma


def take_step(nw: NewtonSystem, d, ap: float, ad: float) -> Iterate:
    """The iterate after the steps ``ap`` (primal) and ``ad`` (dual) of :func:`step_lengths`."""
    x = nw.x
    dlam, dG, dX, ds = d
    # G at the new lam: the guard's (pb.Gmap; on grouped rows the per-query sum, which Dual's A^T diag(lam) Bm equals
    # up to rounding), the one the guard's Cholesky factor L_next of S belongs to: recomputing it would cost N r1 r2
    # multiply-adds a step and move the path by its last bits (docs/guide/performance.md, "The step guard's G kept")
    return Iterate.full(x.lam + ad * dlam, nw.X_next, nw.pb.r1, x.s + ap * ds, nw.LX_next, nw.G_next)


def ipm_step(pb: Problem, x: Iterate, du: Dual, mu: float, gamma: float, verbose: bool, equal_steps: bool = False,
             backend=NUMPY_NEWTON):
    """One Mehrotra predictor-corrector step from ``x``: ``(next iterate, L_next, next gamma)``, or None
    when neither step length reaches 1e-10 (no progress). Raises ``LinAlgError`` / ``ValueError`` at
    the numerical limit (the caller keeps its best iterate). ``equal_steps``: one step length for the
    primal and the dual (before the step guard), else each its own. ``backend``: the Newton systems' solver
    (:class:`~attnsvm.svm.ipm.problem.NumpyNewton`)."""
    nw = NewtonSystem(pb, x, du, equal_steps, backend)
    d, sigma = mehrotra_direction(nw, mu)
    ap, ad = step_lengths(nw, d, gamma)
    if max(ap, ad) < 1e-10:
        return None
    if verbose:
        print(f"        sigma {sigma:.2e} step primal {ap:.3f} dual {ad:.3f}", flush=True)
    if tracing():
        trace("step", sigma=sigma, mu_aff=nw.mu_aff, ap_max=nw.bounds[0], ad_max=nw.bounds[1], ap=ap, ad=ad,
              ap_lp=nw.lp_cap)
    return take_step(nw, d, ap, ad), nw.L_next, next_gamma(min(ap, ad))


def next_step(pb, x, du, mu, gamma, verbose, info, equal_steps: bool = False, backend=NUMPY_NEWTON):
    """:func:`ipm_step`, or None when the path ends here, with ``info["stopped"]`` saying why (a numerical
    limit, or no progress); the caller keeps its best iterate."""
    try:
        step = ipm_step(pb, x, du, mu, gamma, verbose, equal_steps, backend)
    except (np.linalg.LinAlgError, sla.LinAlgError, ValueError) as exc:
        info["stopped"] = f"numerical limit ({type(exc).__name__})"
        return None
    if step is None:
        info["stopped"] = "no progress"
    return step
