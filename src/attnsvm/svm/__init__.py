"""The SVMs of the theory as one problem: rank-one constraints and exact solvers.

numpy / scipy / cvxpy only (no torch). Higher layers import from here and from the two public
submodules named below only, never from the other modules inside (they are the implementation).

Every SVM constrains ``W (d1, d2)`` through rows ``u_k^T W w_k >= rhs_k`` (``==`` on
equality rows): a :class:`ConstraintSet` with ``U (N, d1)``, ``V (N, d2)``, ``rhs (N,)``,
``is_equality (N,)`` and labels (sample, query, token, other), and :func:`solve` solves
``min ||W||`` (Frobenius or nuclear; soft margin with ``C``) over it exactly, with a
certificate.

Constraint builders (all return a ConstraintSet; ``X (n, T, d)``, ``Z (n, d)``)::

    att_constraints(X, Z, select (n,), valid=None)     Att-SVM / Local-SVM, N = n (T - 1), U, V (N, d)
    gen_constraints(X, Z, selected (n, T), valid=None) Gen-SVM: ties in O_i, margin 1 to the rest
    fin_constraints(X, Z, selected (n, T), probs (n, T)) W_fin: log-ratio equalities inside O_i
    seq_constraints(X, select (n, T) | (n, T, T), causal=False, valid=None)  every token a query
    prompt_constraints(K (n, T, d), select (n,), zero_rows=None)  p-SVM, V = 1 (N, 1)
    v_constraints(X, Y (n,), select (n,))              v-SVM, N = n, V = 1 (n, 1)
    lm_constraints(data: LMData, loss, select=None)    causal LM: every prefix, W (d, d)

Solvers::

    solve(constraints, norm="fro", *, C=None, ...)     any ConstraintSet (dense or working set by size)
    solve_svm, solve_gen_svm, solve_fin, solve_seq_svm, solve_p_svm, solve_v_svm, solve_soft_svm,
    solve_svm_batch, svm_equivalence                   the formulations on TokenProblem / arrays
    soft_margin_svm(data: LMData, C, ...)              the causal-LM soft-margin Att-SVM

Results and certificates: :class:`SVMSolution`, :class:`Certificate`, :func:`certificate_passes`,
:data:`CERTIFIED_VIOLATION`, :data:`CERTIFIED_GAP`, :data:`CERTIFIED_STATIONARITY`, :func:`certify`.

Two public submodules hold the helpers around the solvers: :mod:`attnsvm.svm.analysis` (support
tokens, local optimality, ``matrix_rank``, ``row_basis``, ...) and :mod:`attnsvm.svm.language` (prefix
scores and optimal tokens of causal language modeling, ``gen_svm_fit``, ...); their names are no
longer served here (``attnsvm.svm.<name>``, deprecated in 0.2, was removed in 0.3). Inside, a pipeline
(``CONTRIBUTING.md``, "Add a solver"): :mod:`.scaling` (one row scaling), :mod:`.settings` (the solver
settings, one ``SolverSettings``), :mod:`.options` (their per-method views), :mod:`.dispatch` (the solver
table), the methods
(:mod:`.frobenius`, :mod:`.nuclear`, :mod:`.working_set` with :mod:`.pdas`, :mod:`.soft`,
:mod:`.prompt`) and :mod:`.result` (certificates and the SVMSolution).
"""

from attnsvm.svm import analysis, language  # noqa: F401  (public submodules)
from attnsvm.svm.api import (
    BatchSolution,
    SVMEquivalence,
    certify,
    solve,
    solve_fin,
    solve_gen_svm,
    solve_p_svm,
    solve_seq_svm,
    solve_soft_svm,
    solve_svm,
    solve_svm_batch,
    solve_v_svm,
    svm_equivalence,
)
from attnsvm.svm.constraints import (
    ConstraintSet,
    att_constraints,
    fin_constraints,
    gen_constraints,
    prompt_constraints,
    seq_constraints,
    v_constraints,
)
from attnsvm.svm.language import lm_constraints, soft_margin_svm
# for the layers above (the probe's layer bases: a reduced solution lifted back), outside the 28 names of __all__
from attnsvm.svm.reductions import SubspaceBasis  # noqa: F401
from attnsvm.svm.result import lift_solution  # noqa: F401
from attnsvm.svm.solution import (
    CERTIFIED_GAP,
    CERTIFIED_STATIONARITY,
    CERTIFIED_VIOLATION,
    Certificate,
    SVMSolution,
    certificate_passes,
)

__all__ = [
    # one problem: rank-one constraints and their solver
    "ConstraintSet", "solve", "certify",
    "att_constraints", "gen_constraints", "fin_constraints", "seq_constraints", "prompt_constraints", "v_constraints",
    "lm_constraints",
    # the formulations of the papers
    "solve_svm", "solve_gen_svm", "solve_fin", "svm_equivalence", "SVMEquivalence", "solve_seq_svm",
    "solve_p_svm", "solve_v_svm", "solve_soft_svm", "solve_svm_batch", "BatchSolution", "soft_margin_svm",
    # results and certificates
    "SVMSolution", "Certificate", "certificate_passes", "CERTIFIED_VIOLATION", "CERTIFIED_GAP",
    "CERTIFIED_STATIONARITY",
]
