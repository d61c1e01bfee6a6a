"""Primal-dual interior-point solver of the reduced nuclear-norm SVM (numpy / scipy only).

Modules, lowest first: :mod:`~attnsvm.svm.ipm.linalg` (LAPACK calls, row bases, the blocked Newton solver),
:mod:`~attnsvm.svm.ipm.trace` (the DEBUG trace), :mod:`~attnsvm.svm.ipm.steps` (step bounds and the step guard),
:mod:`~attnsvm.svm.ipm.problem` (the reduced problem, its maps, the start), :mod:`~attnsvm.svm.ipm.newton` (the
Newton system, Mehrotra's direction, one step) and :mod:`~attnsvm.svm.ipm.driver` (measure, stopping test, the
loop, :func:`nuclear_ipm` for direct callers, which checks its limits, and :func:`nuclear_ipm_unchecked`, which
the solvers behind :func:`attnsvm.svm.solve` call with the settings it checked once). The growing row set
(:mod:`attnsvm.svm.barrier_grow`), the batch (:mod:`attnsvm.svm.barrier_batch`) and the torch backend
(:mod:`attnsvm.svm.torch_backend`) use the public names exported here.

The problem
-----------
Let ``B (d2, r2)`` be an orthonormal basis of the span of the w's and ``b_k = B^T w_k``
(rows of ``Bm (N, r2)``); on the u side ``a_k = u_k`` when ``d1 <= N`` (only inner
products ``a_k . a_l`` matter, rank deficiency is harmless) and ``a_k = P^T u_k`` with an
orthonormal basis ``P (d1, r1)`` of the u's otherwise (rows of ``A (N, r1)``). The
nuclear-norm SVM is the SDP::

    min  (tr X11 + tr X22) / 2   s.t.  a_k^T X12 b_k - s_k = rhs_k  (s_k >= 0; s_k = 0 on equality rows)
         X = [[X11, X12], [X12^T, X22]] >= 0                       (size r1 + r2)

whose optimal ``X12 = M`` gives ``W = P M B^T`` with ``||W||_* = (tr X11 + tr X22) / 2``,
and its dual::

    max  rhs^T lam   s.t.  Z = 1/2 [[I, -G], [-G^T, I]] >= 0,  lam_k >= 0 on inequality rows,
         G = G(lam) = A^T diag(lam) Bm  (r1, r2),

i.e. ``||G||_2 <= 1``. ``Z`` is never formed: with ``S = I - G^T G`` (r2 x r2) and
``C = G S^{-1}``, ``Z^{-1} = 2 [[I + C G^T, C], [C^T, S^{-1}]]``.

The method
----------
An infeasible-primal, feasible-dual path-following method with the HKM direction
and Mehrotra's predictor-corrector. The dual stays exactly feasible (``Z`` keeps its
block structure), so the only N x N work per iteration is the Schur complement::

    M_kl = <A_k, X A_l Z^{-1}>
         = 1/2 [ K1 o K2 + (K1 o K2)^T + (Bm X22 Bm^T) o (A (I + C G^T) A^T)
                 + (A X11 A^T) o (Bm S^{-1} Bm^T) ],
    K1 = Bm X12^T A^T,  K2 = A C Bm^T,

(``o`` the elementwise product), ``O(N^2 (r1 + r2) + N r1^2)`` to form and one
Cholesky factorization ``O(N^3 / 3)``; nothing of size ``r1 r2 x N`` is built, the
largest other matrix is X, ``(r1 + r2)^2``. At a central point ``X = mu Z^{-1}`` and M
is ``mu`` times the Hessian of the dual barrier ``-log det S``. The Newton solver forms only
M's lower triangle (the one the factorization reads), in blocks of rows that stay in the cache,
each Jacobi-scaled as it is formed (:func:`factor_lower`): half the N x N x r1 products and one
pass over the N x N memory.

The primal direction is one ``(r1 + r2)`` square matrix, ``dX = 2 sigma mu Zh - X + sym(X Y)`` with
``Zh = Z^{-1} / 2`` and ``Y = -dZ Z^{-1} = [[dG Zh_21, dG Zh_22], [dG^T Zh_11, dG^T Zh_12]]`` (three
products; beyond ``r1 + r2 = 64`` from Y's rank-``2 min(r1, r2)`` factors, :meth:`Problem.XY`). A step's
guard factorizes the next X; the factor travels with the iterate (the next Newton system reuses it).
The step bounds are one eigenvalue each of a congruent matrix (the primal one formed by LAPACK ``sygst``, or
up to ``r1 + r2 = 64`` by products with the inverse of X's factor; the dual one, up to ``r1 + r2 = 64``, from
the inverse of S's factor; beyond 64 the dual one by bisection on Cholesky tests), the dual one after a Cholesky
test of the full (capped) dual step. Beyond 64 the predictor's primal bound comes from a small exact problem
(its ``dX`` is ``-X`` plus a low-rank term, :func:`~attnsvm.svm.ipm.steps.psd_step_low_rank`), and beyond 256
the corrector's is a Lanczos Ritz value (:data:`~attnsvm.svm.ipm.steps.PSD_STEP_DENSE_MAX`,
:func:`~attnsvm.svm.ipm.steps.lanczos_min`). The dual step guard's ``G`` travels with the iterate too.
Up to 1024 rows the primal and the dual take the same step length (the dual bound is then sought below the
primal one), beyond each its own (:data:`EQUAL_STEPS_MAX_ROWS`).

Details: rows and right-hand sides are scaled to at most 1 (then ``||M||_* >= 1`` and
the gap test is relative); the start is the Frobenius solution (primal, plus a
multiple of I) and the Frobenius multipliers scaled to ``||G|| = 1/2`` (dual); the
optimality test uses the true objective ``||X12||_*``, not ``(tr X11 + tr X22) / 2``;
rounding-level violations of the last iterates (~1e-10) are removed by the
least-Frobenius-norm correction on the nearly active rows, which makes equality rows
exact.

Why not the simpler dual barrier (Newton on ``-t rhs^T lam - log det S - sum log lam``,
which needs no X): it stalls near the curved boundary of the spectral-norm ball, where
Newton steps keep pointing out of the ball; the primal iterate X removes that (the
iteration counts: docs/guide/performance.md, "Solver design decisions and their
measurements").
"""

from attnsvm.svm.ipm.driver import (EQUAL_STEPS_MAX_ROWS, MAX_ITER, IPMResult, PathState, ipm_arrays, ipm_result,
                                    is_optimal, measure, nuclear_ipm, nuclear_ipm_unchecked, path_following,
                                    stall_limit, stopping_test, stops_at_optimum)
from attnsvm.svm.ipm.linalg import (blocks, chol, chol_S, distinct_rows, factor_lower, mT, nuclear_norm,
                                    row_space_basis, singular_values, spectral_norm, sym, z_half)
from attnsvm.svm.ipm.newton import NewtonSystem, centering, ipm_step, mehrotra_direction, next_step
from attnsvm.svm.ipm.problem import (Dual, Iterate, NUMPY_NEWTON, NumpyNewton, Problem, Reduction, RowSet,
                                     clean_primal, reduce_problem, start_point, violation)
from attnsvm.svm.ipm.steps import GAMMA_START, GUARD_SHRINK, GUARD_TRIES, next_gamma
from attnsvm.svm.ipm.trace import trace, trace_iterate, tracing

__all__ = ["Dual", "EQUAL_STEPS_MAX_ROWS", "GAMMA_START", "GUARD_SHRINK", "GUARD_TRIES", "IPMResult", "Iterate", "MAX_ITER",
           "NUMPY_NEWTON", "NewtonSystem", "NumpyNewton", "PathState", "Problem", "Reduction", "RowSet", "blocks",
           "centering", "chol", "chol_S", "clean_primal", "distinct_rows", "factor_lower", "ipm_arrays",
           "ipm_result", "ipm_step", "is_optimal", "mT", "measure", "mehrotra_direction", "next_gamma", "next_step",
           "nuclear_ipm", "nuclear_ipm_unchecked", "nuclear_norm", "path_following", "reduce_problem",
           "row_space_basis", "singular_values", "spectral_norm", "stall_limit", "start_point", "stopping_test",
           "stops_at_optimum", "sym", "trace", "trace_iterate", "tracing", "violation", "z_half"]
