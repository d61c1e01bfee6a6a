"""The nuclear SVM restricted to spectral subspaces and certified in the full space (column generation on the
singular spaces).

With orthonormal ``P (d1, k1)`` and ``Q (d2, k2)``, ``W = P M Q^T`` turns row k into
``(P^T u_k)^T M (Q^T w_k) >= rhs_k`` (:func:`restrict`): a nuclear SVM of reduced size ``k1 + k2`` instead of
``r1 + r2``. Its margins are the full problem's margins of ``W`` and ``||W||_* = ||M||_*``, so its solution is
feasible for the full problem and its multipliers are multipliers of the same rows; the full problem's
certificate (:func:`attnsvm.svm.nuclear.nuclear_certificate`: the spectral norm of
``G = sum_k lam_k u_k w_k^T`` against 1 and the duality gap) decides whether it is the full optimum. When it
is not, ``rhs^T lam / ||G||_2`` is still a lower bound on the optimum, and the top singular pairs of ``G``
(the directions in which the dual leaves the ball) join ``P`` and ``Q`` (:func:`solve_nuclear_colgen`).

Measured on the probe's instances (docs/guide/performance.md, "Spectral subspaces"): the optimum has rank
5-43 of 385, but a subspace grown this way needs ``k`` of 160-340 before the full certificate passes, and each
round is a whole interior-point run, so this is slower than :func:`attnsvm.svm.working_set.solve_nuclear_ws`
on them; even the optimum's own dual directions save at most about 2x on the null instances (1.03x at 1000
sentences), whose cost is the N x N Schur complement. Kept for that measurement
(``benchmarks/nuclear_subspace.py``), not used by ``solve``.
"""

from __future__ import annotations

import time

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.svm.constraints import ConstraintSet
from attnsvm.svm.result import build_solution
from attnsvm.svm.solution import SVMSolution, status_from

__all__ = ["restrict", "solve_nuclear_subspace", "solve_nuclear_colgen"]


def _orthonormal(P: np.ndarray, d: int, name: str) -> np.ndarray:
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] != d or not 1 <= P.shape[1] <= d or not np.all(np.isfinite(P)):
        raise ValidationError(f"{name} must be a finite (d, k) = ({d}, k) array with 1 <= k <= {d}, got shape "
                              f"{P.shape}")
    if not np.allclose(P.T @ P, np.eye(P.shape[1]), rtol=0.0, atol=1e-10):
        raise ValidationError(f"{name} must have orthonormal columns")
    return P


def restrict(cs: ConstraintSet, P: np.ndarray, Q: np.ndarray) -> ConstraintSet:
    """The rows of ``cs`` for ``W = P M Q^T``: ``U P (N, k1)``, ``V Q (N, k2)``, same rhs, equalities and labels.

    ``P (d1, k1)``, ``Q (d2, k2)`` with orthonormal columns (:class:`~attnsvm.ValidationError` otherwise).
    """
    P = _orthonormal(P, cs.d1, "P")
    Q = _orthonormal(Q, cs.d2, "Q")
    return ConstraintSet._trusted(cs.U @ P, cs.V @ Q, cs.rhs, cs.is_equality, cs.sample, cs.query, cs.token,
                                  cs.other, cs.kind, cs.shape)


def _full_solution(cs: ConstraintSet, W: np.ndarray, lam: np.ndarray, formulation: str, support_tol: float,
                   info: dict) -> SVMSolution:
    """The full problem's certified solution from ``W (d1, d2)`` and ``lam (N,)`` (status from the certificate)."""
    from attnsvm.svm.nuclear import nuclear_certificate

    cert, margins = nuclear_certificate(cs, W, lam)
    nuc = float(np.linalg.svd(W, compute_uv=False).sum())
    return build_solution(cs, status=status_from(cert, "nuclear"), formulation=formulation, norm="nuclear", W=W,
                          norm_value=nuc, margins=margins, duals=lam, certificate=cert, support_tol=support_tol,
                          info=info)


def solve_nuclear_subspace(cs: ConstraintSet, P: np.ndarray, Q: np.ndarray, *, formulation: str | None = None,
                           support_tol: float = 1e-5, **ws_options) -> SVMSolution | None:
    """``min ||W||_*`` over ``W = P M Q^T`` subject to the rows of ``cs``, solved by the nuclear working set on
    :func:`restrict` and certified as a solution of the *full* problem.

    Parameters
    ----------
    cs : ConstraintSet (N rows, d1, d2); P : (d1, k1), Q : (d2, k2) with orthonormal columns
    formulation, support_tol : as :func:`attnsvm.svm.nuclear.solve_nuclear`
    **ws_options : passed to :func:`attnsvm.svm.working_set.solve_nuclear_ws` (its defaults: gap_tol 1e-8)

    Returns
    -------
    SVMSolution of the full problem (``W (d1, d2)``, duals over all N rows): "optimal" only when the full
    certificate passes (the restricted optimum is then the full one), else "optimal_inaccurate" with the
    certificate's gap; ``info["restricted"]`` the restricted solve's info and status. None when no ``W`` of the
    subspace satisfies the rows (the restricted problem is infeasible: that says nothing about the full one).
    """
    from attnsvm.svm.working_set import solve_nuclear_ws

    formulation = formulation or cs.kind
    sub = restrict(cs, P, Q)
    sol = solve_nuclear_ws(sub, formulation=formulation, support_tol=support_tol, **ws_options)
    if sol.status == "infeasible":
        return None
    W = P @ sol.W @ Q.T
    info = {"method": "nuclear working set in a spectral subspace", "subspace": [int(P.shape[1]), int(Q.shape[1])],
            "restricted": dict(sol.info or {}, status=sol.status)}
    return _full_solution(cs, W, np.asarray(sol.duals, dtype=np.float64), formulation, support_tol, info)


def _count(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValidationError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _grow(P: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Orthonormal basis of ``span(P) + span(Y)``: ``P`` followed by the parts of Y's columns outside it."""
    R = Y - P @ (P.T @ Y)
    R = R - P @ (P.T @ R)                               # twice: orthogonal to P to rounding
    if not R.size:
        return P
    Qr, s, _ = np.linalg.svd(R, full_matrices=False)
    keep = s > 1e-8 * max(1.0, float(s[0]) if s.size else 0.0)
    return np.hstack([P, Qr[:, keep]])


def solve_nuclear_colgen(cs: ConstraintSet, *, k0: int = 40, add: int = 20, max_rounds: int = 30,
                         formulation: str | None = None, support_tol: float = 1e-5, verbose: bool = False,
                         **ws_options) -> SVMSolution:
    """``min ||W||_*`` subject to the rows of ``cs`` by column generation on the singular spaces (module docstring).

    Starts from the top ``k0`` singular vectors of the Frobenius solution ``W_F`` (which is
    ``sum_k lam_k u_k w_k^T`` of its multipliers), solves :func:`solve_nuclear_subspace`, and while the full
    certificate fails adds the top ``add`` singular pairs of the full dual matrix ``G`` (the parts outside the
    current bases) to ``P`` and ``Q``. A subspace whose restricted problem is infeasible is grown the same way
    from ``W_F``.

    Parameters
    ----------
    cs : ConstraintSet (N rows, d1, d2)
    k0, add, max_rounds : integers >= 1
    formulation, support_tol, **ws_options : as :func:`solve_nuclear_subspace`
    verbose : print one line per round

    Returns
    -------
    SVMSolution of the full problem: "optimal" only with a passed full certificate; "infeasible" (with the
    Farkas certificate of the Frobenius working set) when no W satisfies the rows; else the last round's
    "optimal_inaccurate" (the Frobenius solution's when no subspace tried held a feasible W). ``info``:
    ``rounds``, ``subspaces`` (k1, k2 per round), ``gaps`` (the full certificate's relative gap per round, None
    where the subspace held no feasible W), ``seconds``.
    """
    from attnsvm.svm.working_set import solve_frobenius_ws

    k0, add, max_rounds = _count(k0, "k0"), _count(add, "add"), _count(max_rounds, "max_rounds")
    t0 = time.perf_counter()
    formulation = formulation or cs.kind
    fro = solve_frobenius_ws(cs, formulation=formulation)
    if fro.status == "infeasible":
        fro.norm = "nuclear"
        return fro
    Uf, _, Vft = np.linalg.svd(fro.W, full_matrices=False)
    P, Q = Uf[:, : min(k0, cs.d1)], Vft[: min(k0, cs.d2)].T
    subspaces, gaps = [], []
    sol = None
    for rnd in range(1, max_rounds + 1):
        sol = solve_nuclear_subspace(cs, P, Q, formulation=formulation, support_tol=support_tol, **ws_options)
        subspaces.append([int(P.shape[1]), int(Q.shape[1])])
        if sol is None:                       # no W of the subspace is feasible: more of W_F's directions
            gaps.append(None)
            P, Q = _grow(P, Uf[:, : P.shape[1] + add]), _grow(Q, Vft[: Q.shape[1] + add].T)
            continue
        gaps.append(float(sol.certificate.duality_gap))
        if verbose:
            print(f"colgen round {rnd:3d} k {P.shape[1]} {Q.shape[1]} ||W||_* {sol.norm_value:.12g} "
                  f"gap {sol.certificate.duality_gap:.2e} status {sol.status}", flush=True)
        if sol.status == "optimal":
            break
        Yu, _, Yvt = np.linalg.svd(cs.combine(sol.duals), full_matrices=False)
        P, Q = _grow(P, Yu[:, :add]), _grow(Q, Yvt[:add].T)
    if sol is None:  # no subspace tried held a feasible W: the Frobenius solution, with its (failing) certificate
        sol = _full_solution(cs, fro.W, np.asarray(fro.duals, dtype=np.float64), formulation, support_tol,
                             {"restricted": None})
    sol.info.update(method="nuclear column generation on the singular spaces", rounds=len(subspaces),
                    subspaces=subspaces, gaps=gaps, seconds=time.perf_counter() - t0)
    return sol
