"""Public entry points of the SVM layer.

=====================  =========================================================
function               problem
=====================  =========================================================
solve                  any ConstraintSet (hard margin, or soft margin with C)
solve_svm              Att-SVM / Local-SVM (Frobenius or nuclear), cross/self
solve_gen_svm          Gen-SVM for selected sets O_i
solve_fin              the finite component W_fin from softmax probabilities
svm_equivalence        the fit W_fin + R W_svm to a given W
solve_seq_svm          sequence and causal SVM (every token is a query)
solve_p_svm            p-SVM and relaxed p-SVM (prompt p, fixed W)
solve_v_svm            v-SVM (hard margin, no bias)
solve_soft_svm         soft-margin Att-SVM
solve_svm_batch        many independent Frobenius Att-SVMs of equal size
=====================  =========================================================

Every solver returns an :class:`~attnsvm.svm.solution.SVMSolution` with one status
vocabulary: "optimal" only when its certificate passes (relative max violation <= 1e-8,
relative duality gap <= 1e-8 Frobenius / 1e-6 nuclear), "optimal_inaccurate" when a W
was found but the certificate does not pass (``feasible`` is true for both; code that
needs the exact SVM asks for ``certified``), and "infeasible" (``W is None``, Farkas
multipliers in ``certificate.farkas``): an infeasible selection is a result, never an
exception. A working set stopped by ``max_rounds`` or ``time_limit`` before it decided feasibility
says "undecided" (``feasible`` False). The solvers work on row-normalized data, so any data scale gives the same
answer (``W(cX) = W(X) / c^2``); where float64 cannot hold W or the multipliers they raise
a ValidationError. Every numeric option is validated (ValidationError naming it), and
``max_memory`` bounds the dense N x N work before it is allocated (ResourceLimitError).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm._validate import as_float_array, as_index_array, as_mask_array, check_choice, check_number
from attnsvm.errors import ValidationError
from attnsvm.memory import format_size, require_memory
from attnsvm.problem import TokenProblem
from attnsvm.svm.constraints import (ConstraintSet, att_rows, bare_set, check_fin_inputs, check_probs, check_selected_sets,
                                     check_valid, check_valid_selected, checked_set, fin_rows, gen_rows, prompt_rows,
                                     seq_constraints, v_constraints)
from attnsvm.svm.frobenius import solve_frobenius_batch
from attnsvm.svm.norms import NormTable, get_norm
from attnsvm.svm.nuclear import solve_nuclear_batch
from attnsvm.svm.options import NuclearOptions, SoftOptions, VectorOptions
from attnsvm.svm.settings import SolverSettings
from attnsvm.svm.prompt import solve_vector_svm
from attnsvm.svm.soft import solve_soft
from attnsvm.svm.solution import Certificate, SVMSolution
from attnsvm.svm.dispatch import CERTIFIERS, solve_dispatch

__all__ = [
    "solve", "certify", "solve_svm", "solve_gen_svm", "solve_fin", "svm_equivalence", "SVMEquivalence", "solve_seq_svm",
    "solve_p_svm", "solve_v_svm", "solve_soft_svm", "solve_svm_batch", "BatchSolution",
]

def _check_norm(norm) -> str:
    return get_norm(norm).name


def _check_problem(problem) -> TokenProblem:
    if not isinstance(problem, TokenProblem):
        raise ValidationError(f"problem must be a TokenProblem, got {type(problem).__name__}")
    return problem


def default_select(problem: TokenProblem, select) -> np.ndarray:
    """The validated selection ``(n,)`` of ``problem``: ``select`` or, for None / "opt", its optimal tokens.
    Internal, shared with :mod:`attnsvm.svm.analysis`."""
    if select is None or (isinstance(select, str) and select == "opt"):
        if problem.Y is None or problem.v is None:
            raise ValidationError("select=None means the optimal tokens, which need labels Y and a head v; "
                                  "the problem has none: pass select (n,) explicitly")
        return problem.optimal_tokens().index
    return as_index_array(select, "select", (problem.n,), problem.T, f"(n,) = ({problem.n},)")


#: norm -> d1 x d2 float64 arrays alive at the peak of a solve, the solution W and its certificate's products
#: included (:attr:`~attnsvm.svm.norms.Norm.solution_arrays`; a read-only view of :data:`~attnsvm.svm.norms.NORMS`)
SOLUTION_ARRAYS = NormTable("solution_arrays")


def solution_bytes(N: int, d1: int, d2: int, norm: str, R: int = 1) -> float:
    """Peak bytes of the d1 x d2 arrays of R solves of N rows (W, the certificate's combinations, the
    nuclear norm's SVD) plus the row copies the solvers make (the N x N work is counted by each solver)."""
    return float(R) * 8.0 * (get_norm(norm).solution_arrays * float(d1) * float(d2) + 3.0 * float(N) * (d1 + d2))


def require_solution_memory(N: int, d1: int, d2: int, norm: str, max_memory=None, R: int = 1) -> None:
    """Refuse (ResourceLimitError) before any work when the d1 x d2 solution and certificate arrays of
    R solves need more than the memory limit (``max_memory``, else the package limit; without an
    explicit limit, needs below 16 MiB are not checked: reading the available memory costs more)."""
    nbytes = solution_bytes(N, d1, d2, norm, R)
    if max_memory is None and nbytes < 2**24:
        return
    many = f"{R} solves of " if R > 1 else ""
    require_memory(nbytes, f"{many}the {d1} x {d2} solution W and its certificate ({norm} norm, "
                   f"{get_norm(norm).solution_arrays} arrays of {format_size(8.0 * d1 * d2)}) and 3 copies of the "
                   f"{N} rows", max_memory,
                   hint="a smaller token dimension d or fewer constraints")


def _dispatch(cs: ConstraintSet, norm: str, formulation: str, **solver_options) -> SVMSolution:
    """:func:`solve_dispatch` after the settings are built (each checked, once) and the memory of the solution
    arrays is checked against ``max_memory``."""
    settings = SolverSettings.take(solver_options, norm)
    require_solution_memory(cs.N, cs.d1, cs.d2, norm, settings.max_memory)
    return solve_dispatch(cs, norm, formulation, settings=settings, **solver_options)


def solve(constraints: ConstraintSet, norm: str = "fro", *, C=None, squared: bool = False,
          formulation: str | None = None, **solver_options) -> SVMSolution:
    """Solve the SVM of a set of rank-one constraints: ``min ||W|| subject to u_k^T W w_k >= rhs_k`` (``==`` on
    equality rows), or with ``C`` the soft margin ``min ||W|| + C sum xi subject to u_k^T W w_k >= rhs_k - xi``.

    Every solver of the package is this one problem (the builders :func:`att_constraints`,
    :func:`gen_constraints`, :func:`seq_constraints`, :func:`fin_constraints`,
    :func:`prompt_constraints`, :func:`v_constraints`, :func:`lm_constraints` make the rows).

    Parameters
    ----------
    constraints : ConstraintSet with ``U (N, d1)``, ``V (N, d2)``, ``rhs (N,)``, ``is_equality (N,)``
    norm : "fro" or "nuclear"
    C : float > 0, optional: the soft margin (inequality rows only); None: hard margin
    squared : soft margin only, objective ``||W||^2 + C sum xi``
    formulation : label stored in the solution (default ``constraints.kind``; soft margin: "soft")
    **solver_options : hard margin: ``method`` ("auto": dense up to
        :data:`~attnsvm.svm.dispatch.AUTO_DENSE_MAX_N` rows if its N x N matrices fit in
        memory, else the working set; "dense"; "working_set"; "pdas"; "goldfarb-idnani"); the settings
        (:class:`~attnsvm.svm.settings.SolverSettings`, the same for every method of a norm) ``feas_tol``,
        ``support_tol``, ``time_limit``, ``max_memory``, nuclear ``gap_tol`` (``tol``, the old name of
        ``feas_tol``, was removed in 0.3: a ValidationError), or the object itself as ``settings=SolverSettings(...)``; the knobs
        nuclear: ``solver``, ``device`` (a torch device such as "cuda"
        for the interior-point method's dense algebra; needs torch), working set: ``batch``,
        ``per_group``, ``max_rounds``, ``verbose``; soft margin: ``support_tol``, ``max_memory``.
        Checked once before any work: a ValidationError names a bad or unknown one (and lists the
        valid ones).

    Returns
    -------
    SVMSolution with ``W (d1, d2)`` (status "optimal" only when its certificate passes), or status
    "infeasible" with Farkas multipliers (hard margin); soft margin also ``slack (N,)``.
    """
    constraints = checked_set(constraints)
    norm = _check_norm(norm)
    if C is not None:
        if formulation is not None:
            raise ValidationError("formulation is set by the soft-margin solver ('soft'): omit it with C")
        return _solve_soft(constraints, C, norm, squared, solver_options)
    if squared is not False:
        raise ValidationError("squared applies to the soft margin only: give C")
    if formulation is not None and not isinstance(formulation, str):
        raise ValidationError(f"formulation must be a string, got {type(formulation).__name__}")
    return _dispatch(constraints, norm, formulation or constraints.kind, **solver_options)


def certify(constraints: ConstraintSet, W, duals, norm: str = "fro") -> Certificate:
    """The certificate of a candidate hard-margin solution: ``W (d1, d2)`` with multipliers ``duals (N,)``.

    The same relative quantities as the solvers' certificates (see :class:`Certificate`), computed
    from the given arrays only; :func:`certificate_passes` (``certificate_passes(cert, norm)``) says
    whether they prove optimality. E.g. ``certify(sol.constraints, sol.W, sol.duals, sol.norm)``
    reproduces ``sol.certificate``; a W that is not the combination ``sum_k duals_k u_k w_k^T``
    fails the Frobenius stationarity test.

    Parameters
    ----------
    constraints : ConstraintSet with ``U (N, d1)``, ``V (N, d2)``
    W : (d1, d2)
    duals : (N,) multipliers of ``min 1/2 ||W||_F^2`` (Frobenius) or of ``min ||W||_*`` (nuclear)
    norm : "fro" or "nuclear"
    """
    constraints = checked_set(constraints)
    norm = _check_norm(norm)
    d1, d2, N = constraints.d1, constraints.d2, constraints.N
    W = as_float_array(W, "W", 2, f"(d1, d2) = ({d1}, {d2})")
    if W.shape != (d1, d2):
        raise ValidationError(f"W must have shape (d1, d2) = ({d1}, {d2}), got {W.shape}")
    lam = as_float_array(duals, "duals", 1, f"(N,) = ({N},)")
    if lam.shape != (N,):
        raise ValidationError(f"duals must have shape (N,) = ({N},), got {lam.shape}")
    cert, _ = CERTIFIERS[norm](constraints, W, lam)
    return cert


def solve_svm(problem: TokenProblem, select=None, norm: str = "fro", valid=None, **solver_options) -> SVMSolution:
    """Att-SVM for a token selection: global for the optimal tokens, Local-SVM otherwise.

    ``min ||W|| s.t. (x_{i,a_i} - x_{it})^T W z_i >= 1`` for all ``t != a_i``.

    Parameters
    ----------
    problem : TokenProblem with X (n, T, d) and queries (cross: Z (n, d); self:
        ``z_i = X[i, query_index]``). A prompt problem is solved as the p-SVM
        (:func:`solve_p_svm` with the problem's W).
    select : (n,) int, optional
        Selected token per sample; None (or "opt") means the optimal tokens
        ``argmax_t Y_i v^T x_it`` (needs Y and v).
    norm : "fro" or "nuclear"
    valid : (n, T) bool, optional real tokens when the sequences are padded (None: all
        tokens); padded tokens get no row and selected tokens must be valid. Not for
        prompt problems.
    **solver_options : as :func:`solve`, checked before any work (ValidationError naming a bad or
        unknown one): the settings ``feas_tol`` in (0, 1), ``support_tol`` in [0, 1), ``time_limit``
        (> 0), ``max_memory`` (bytes or "8G": refuse before allocating the N x N matrices), nuclear
        ``gap_tol``; ``method``; nuclear: ``solver``, ``device`` (e.g. "cuda": the interior-point method
        on a torch device)

    Returns
    -------
    SVMSolution with ``W (d, d)`` (``p (d,)`` for prompt problems).
    """
    problem = _check_problem(problem)
    norm = _check_norm(norm)
    sel = default_select(problem, select)
    if problem.mode == "prompt":
        if norm != "fro":
            raise ValidationError("a prompt problem (vector p) has only the Euclidean norm: use norm='fro'")
        if valid is not None:
            raise ValidationError("valid (padding) is not supported for prompt problems")
        # X, W and sel are validated (TokenProblem, default_select): no second pass through solve_p_svm
        opts = VectorOptions.parse(solver_options, "the p-SVM solver")
        return _solve_prompt(_keys(problem.X, problem.W), sel, None, opts)
    cs = att_rows(problem.X, problem.queries, sel, check_valid_selected(valid, sel, problem.T))
    return _dispatch(cs, norm, "att", **solver_options)


def solve_gen_svm(problem: TokenProblem, selected, norm: str = "fro", valid=None, **solver_options) -> SVMSolution:
    """Gen-SVM: selected tokens tie, and beat every unselected token by a margin >= 1.

    Parameters
    ----------
    problem : TokenProblem (cross or self attention)
    selected : (n, T) bool, the sets O_i (at least one token per sample)
    norm : "fro" or "nuclear"
    valid : (n, T) bool, optional real tokens when the sequences are padded (None: all
        tokens); padded tokens get no row and must not be selected

    Returns
    -------
    SVMSolution with ``W (d, d)``. With one token per sample it equals :func:`solve_svm`.
    """
    problem = _check_problem(problem)
    norm = _check_norm(norm)
    n, T = problem.n, problem.T
    O = check_selected_sets(selected, n, T)
    cs = gen_rows(problem.X, problem.queries, O, check_valid(valid, n, T, O, "selected"))
    return _dispatch(cs, norm, "gen", **solver_options)


def solve_fin(problem: TokenProblem, selected, probs, norm: str = "fro", **solver_options) -> SVMSolution:
    """The finite component ``W_fin``: min-norm W reproducing the softmax ratios inside O_i.

    ``(x_{i tau} - x_{it})^T W z_i = log(s_{i tau} / s_{it})`` for t, tau in O_i.

    Parameters
    ----------
    problem : TokenProblem
    selected : (n, T) bool
    probs : (n, T) softmax probabilities (> 0 on selected tokens)
    norm : "fro" or "nuclear"

    Returns
    -------
    SVMSolution with ``W (d, d)`` (formulation "fin"; W = 0 if every O_i is a singleton).
    """
    problem = _check_problem(problem)
    norm = _check_norm(norm)
    cs = fin_rows(problem.X, problem.queries, *check_fin_inputs(selected, probs, problem.n, problem.T))
    return _dispatch(cs, norm, "fin", **solver_options)


@dataclass
class SVMEquivalence:
    """Result of :func:`svm_equivalence`.

    Attributes
    ----------
    W_fin, W_svm, W_eq : (d, d), with ``W_eq = W_fin + R * W_svm``
    R : float, the least-squares scale
    residual : float, ``||W_eq - W||_F``
    fin, svm : the two SVMSolution objects
    """

    W_fin: np.ndarray
    W_svm: np.ndarray
    W_eq: np.ndarray
    R: float
    residual: float
    fin: SVMSolution
    svm: SVMSolution


def svm_equivalence(problem: TokenProblem, selected, probs, W, norm: str = "fro") -> SVMEquivalence:
    """Fit the SVM-equivalence prediction ``W_fin + R W_svm`` to a given W.

    Parameters
    ----------
    problem : TokenProblem
    selected : (n, T) bool, the sets O_i
    probs : (n, T) softmax probabilities (typically the final iterate's)
    W : (d, d) the matrix to explain (e.g. the final GD iterate)
    norm : "fro" or "nuclear" (norm of both SVMs)

    Returns
    -------
    SVMEquivalence; ``R = <W - W_fin, W_svm> / ||W_svm||^2``.
    Raises ValidationError if the Gen-SVM or the W_fin system is infeasible.
    """
    problem = _check_problem(problem)
    d = problem.d
    W = as_float_array(W, "W", 2, f"(d, d) = ({d}, {d})")
    if W.shape != (d, d):
        raise ValidationError(f"W must have shape (d, d) = ({d}, {d}), got {W.shape}")
    norm = _check_norm(norm)
    n, T, X, Z = problem.n, problem.T, problem.X, problem.queries
    O = check_selected_sets(selected, n, T)            # validated once for both SVMs
    svm = _dispatch(gen_rows(X, Z, O, np.ones((n, T), bool)), norm, "gen")
    fin = _dispatch(fin_rows(X, Z, O, check_probs(probs, O)), norm, "fin")
    if not svm.feasible or not fin.feasible:
        raise ValidationError("svm_equivalence: the Gen-SVM or the W_fin system is infeasible for this selection")
    nn = float(np.sum(svm.W * svm.W))
    R = float(np.sum((W - fin.W) * svm.W) / nn) if nn > 0 else 0.0
    W_eq = fin.W + R * svm.W
    return SVMEquivalence(fin.W, svm.W, W_eq, R, float(np.linalg.norm(W_eq - W)), fin, svm)


def solve_seq_svm(X, select, causal: bool = False, norm: str = "fro", valid=None, **solver_options) -> SVMSolution:
    """Sequence / causal SVM: every token ``x_{ik}`` is a query with its own selection.

    ``(x_{i, a_{ik}} - x_{it})^T W x_{ik} >= 1`` for ``t != a_{ik}`` in the candidate set
    (all tokens; causal: ``t <= k``, query 0 unconstrained). With selected *sets* (the
    Gen-SVM of self-attention) the selected tokens of a query tie and every other candidate
    is at margin 1 from them.

    Parameters
    ----------
    X : (n, T, d)
    select : (n, T) int, ``select[i, k]`` selected by query k (causal: ``<= k``); or
        (n, T, T) bool, ``select[i, k, t]``: query k selects token t (non-empty sets)
    causal : bool
    norm : "fro" or "nuclear"
    valid : (n, T) bool, optional real tokens of padded sequences (padding is neither query
        nor candidate)
    **solver_options : as for :func:`solve_svm` (``method="working_set"`` for large N)

    Returns
    -------
    SVMSolution with ``W (d, d)``; rows labelled by (sample, query, token, other).
    """
    norm = _check_norm(norm)
    cs = seq_constraints(X, select, causal, valid)
    return _dispatch(cs, norm, cs.kind, **solver_options)


def solve_p_svm(X, W, select, relaxed=None, *, Y=None, **solver_options) -> SVMSolution:
    """p-SVM ``min ||p|| subject to p^T (k_{i,a_i} - k_{it}) >= 1`` with keys ``k = W^T x``.

    Parameters
    ----------
    X : (n, T, d) tokens
    W : (d, d) fixed key-query matrix (None: identity)
    select : (n,) int
    relaxed : None, (n,) bool mask, sequence of int sample indices, or True
        The relaxed p-SVM: the inputs given here (the ones that are *not* support
        vectors of the head, the official code's ``zero_ids``) get ``>= 0`` instead of
        ``>= 1``. A bool array is a mask; an integer array (any integer dtype, also 0/1
        values) lists sample indices. ``True`` computes them from the v-SVM on the
        selected tokens (needs Y).
    Y : (n,) labels, only for ``relaxed=True``

    Returns
    -------
    SVMSolution with ``p (d,)``.
    """
    opts = VectorOptions.parse(solver_options, "the p-SVM solver")
    X = as_float_array(X, "X", 3, "(n, T, d)")
    n, T, d = X.shape
    sel = None
    zero = None
    if isinstance(relaxed, np.bool_) and relaxed:
        relaxed = True
    if relaxed is True:
        if Y is None:
            raise ValidationError("relaxed=True needs the labels Y (n,) to find the support vectors of the head")
        sel = as_index_array(select, "select", (n,), T, f"(n,) = ({n},)")
        vs = solve_v_svm(X, Y, sel)
        if not vs.feasible:
            raise ValidationError("relaxed=True: the v-SVM on the selected tokens is infeasible")
        zero = ~vs.support
    elif relaxed is not None and relaxed is not False and not (isinstance(relaxed, np.bool_) and not relaxed):
        zero = _relaxed_samples(relaxed, n)
    K = _keys(X, _check_W(W, d))
    if sel is None:
        sel = as_index_array(select, "select", (n,), T, f"(n,) = ({n},)")
    return _solve_prompt(K, sel, zero, opts)


def _solve_prompt(K: np.ndarray, sel: np.ndarray, zero: np.ndarray | None, opts: VectorOptions) -> SVMSolution:
    """The (relaxed) p-SVM of validated keys ``K (n, T, d)``, ``sel (n,)`` and relaxed samples ``zero (n,)``."""
    form = "prompt" if zero is None or not np.any(zero) else "prompt-relaxed"
    sol = solve_vector_svm(prompt_rows(K, sel, zero), "p", form, options=opts)
    if zero is not None:
        sol.info["relaxed_samples"] = [int(i) for i in np.flatnonzero(zero)]
    return sol


def _relaxed_samples(relaxed, n: int) -> np.ndarray:
    """The relaxed samples as a mask (n,): a bool mask as given, integers (any width) as sample indices."""
    arr = np.asarray(relaxed)
    if arr.dtype == bool:
        return as_mask_array(arr, "relaxed", (n,), f"(n,) = ({n},) bool mask")
    if arr.size == 0:
        return np.zeros(n, bool)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValidationError(f"relaxed must be True, a bool mask (n,) = ({n},) or a 1-D sequence of integer "
                              f"sample indices in [0, {n}), got dtype {arr.dtype} and shape {arr.shape}")
    if np.any(arr < 0) or np.any(arr >= n):
        bad = int(arr[(arr < 0) | (arr >= n)][0])
        raise ValidationError(f"relaxed holds sample index {bad}, outside [0, {n})")
    zero = np.zeros(n, bool)
    zero[arr.astype(np.int64)] = True
    return zero


def _check_W(W, d: int) -> np.ndarray | None:
    """The fixed key-query matrix of the p-SVM: None or a validated ``(d, d)`` float64 array."""
    if W is None:
        return None
    W = as_float_array(W, "W", 2, f"(d, d) = ({d}, {d})")
    if W.shape != (d, d):
        raise ValidationError(f"W must have shape (d, d) = ({d}, {d}), got {W.shape}")
    return W


def _keys(X: np.ndarray, W: np.ndarray | None) -> np.ndarray:
    """Keys ``K = X @ W (n, T, d)`` of validated ``X (n, T, d)`` and ``W (d, d)`` (None: the identity)."""
    if W is None:
        return X
    with np.errstate(over="ignore", invalid="ignore"):
        K = X @ W
    if not np.all(np.isfinite(K)):
        raise ValidationError("keys must be finite (no NaN or inf)")
    return K


def solve_v_svm(X, Y, select, **solver_options) -> SVMSolution:
    """v-SVM ``min ||v|| subject to Y_i v^T x_{i,a_i} >= 1`` (exact hard margin, no bias).

    Parameters
    ----------
    X : (n, T, d), Y : (n,) in {-1, +1}, select : (n,) int

    Returns
    -------
    SVMSolution with ``v (d,)``; ``support (n,)`` marks the support vectors.
    """
    opts = VectorOptions.parse(solver_options, "the v-SVM solver")
    return solve_vector_svm(v_constraints(X, Y, select), "v", "v", options=opts)


def solve_soft_svm(problem: TokenProblem, select, C: float, norm: str = "fro", squared: bool = False,
                   **solver_options) -> SVMSolution:
    """Soft-margin Att-SVM ``min ||W|| + C sum xi subject to margins >= 1 - xi, xi >= 0``.

    Parameters
    ----------
    problem : TokenProblem (cross or self)
    select : (n,) int or None (optimal tokens)
    C : float > 0
    norm : "fro" or "nuclear"
    squared : objective ``||W||^2 + C sum xi`` instead

    Returns
    -------
    SVMSolution with ``W (d, d)`` and ``slack (N,)``.
    """
    problem = _check_problem(problem)
    norm = _check_norm(norm)
    sel = default_select(problem, select)
    cs = att_rows(problem.X, problem.queries, sel, np.ones((problem.n, problem.T), bool))
    return _solve_soft(cs, C, norm, squared, solver_options)


def _solve_soft(cs: ConstraintSet, C, norm: str, squared, options: dict) -> SVMSolution:
    """:func:`solve_soft` after its options are parsed and the solution arrays' memory is checked."""
    opts = SoftOptions.parse(options, "the soft-margin solver")
    require_solution_memory(cs.N, cs.d1, cs.d2, norm, opts.settings.max_memory)
    return solve_soft(cs, C, norm=norm, squared=squared, options=opts)


@dataclass
class BatchSolution:
    """Result of :func:`solve_svm_batch`.

    Attributes
    ----------
    W : (R, d, d), NaN where infeasible
    status : (R,) str, "optimal", "optimal_inaccurate" or "infeasible"
    norm_value : (R,) ``||W_r||_F`` (inf where infeasible)
    duals : (R, N) multipliers (Farkas multipliers where infeasible)
    margins : (R, N) (NaN where infeasible)
    certificates : list of R Certificate (relative quantities, see SVMSolution)
    """

    W: np.ndarray
    status: np.ndarray
    norm_value: np.ndarray
    duals: np.ndarray
    margins: np.ndarray
    certificates: list = None

    def __repr__(self) -> str:
        """Counts of each status, shapes and the worst certificate quantities; never whole arrays."""
        st, n = np.unique(np.asarray(self.status, str), return_counts=True)
        counts = ", ".join(f"{a}: {int(b)}" for a, b in zip(st, n))
        certs = [c for c, s in zip(self.certificates or [], self.status) if s != "infeasible"]
        worst = lambda k: max((getattr(c, k) for c in certs), default=float("nan"))  # noqa: E731
        return (f"BatchSolution(R={len(self.status)}, W={tuple(self.W.shape)}, status={{{counts}}}, "
                f"max violation={worst('max_violation'):.3g}, max gap={worst('duality_gap'):.3g}, "
                f"max residual={worst('stationarity_residual'):.3g})")


def solve_svm_batch(X, Z=None, select=None, *, query_index=None, norm: str = "fro", **settings) -> BatchSolution:
    """Solve R independent Att-SVMs of equal size at once.

    ``norm="fro"``: vectorized active-set QPs. ``norm="nuclear"``: per instance the same
    feasibility test, start and certificate as :func:`attnsvm.svm.nuclear.solve_nuclear`, with the
    interior-point iterations of all instances stacked
    (:func:`attnsvm.svm.nuclear.solve_nuclear_batch`), which removes most of the per-call cost of
    small solves (``python benchmarks/solvers.py --only batch`` times both ways).

    Parameters
    ----------
    X : (R, n, T, d) tokens, or a sequence of R TokenProblem of equal shape
    Z : (R, n, d) queries (cross-attention); omit with ``query_index`` or problems
    select : (R, n) int; None only with problems (their optimal tokens)
    query_index : int, self-attention query token
    norm : "fro" (default) or "nuclear"
    **settings : the solver settings of ``norm`` (:class:`~attnsvm.svm.settings.SolverSettings`) but
        ``time_limit`` (the batched solves run to their end): ``feas_tol``, ``support_tol``, ``max_memory``
        (refuse, ResourceLimitError, when the R x N x N Gram matrices need more), nuclear ``gap_tol``
        (``tol``, the old name of ``feas_tol``, was removed in 0.3)

    Returns
    -------
    BatchSolution (status "optimal" only where the certificate passes; ``norm_value`` is the
    Frobenius or the nuclear norm).
    """
    check_choice(norm, "norm", tuple(_BATCH))
    st = SolverSettings.take(settings, norm)
    if settings or st.time_limit is not None:
        bad = next(iter(settings), "time_limit")
        raise ValidationError(f"unknown solver option {bad!r} for solve_svm_batch (its options: "
                              f"{', '.join(n for n in get_norm(norm).settings if n != 'time_limit')})")
    max_memory = st.max_memory
    if isinstance(X, (list, tuple)) and X and isinstance(X[0], TokenProblem):
        probs = X
        shapes = {p.shape for p in probs}
        if len(shapes) != 1:
            raise ValidationError("problems must share (n, T, d)")
        Xa = np.stack([p.X for p in probs])
        Za = np.stack([p.queries for p in probs])
        if select is None:
            sel = np.stack([default_select(p, None) for p in probs])
        else:
            sel = select
    else:
        Xa = as_float_array(X, "X", 4, "(R, n, T, d)")
        if Z is None:
            if query_index is None:
                raise ValidationError("give Z (R, n, d) or query_index")
            T_ = Xa.shape[2]
            qi = check_number(query_index, "query_index", low=-T_, high=T_, high_open=True, integer=True)
            Za = Xa[:, :, qi]
        else:
            Za = as_float_array(Z, "Z", 3, "(R, n, d)")
        if select is None:
            raise ValidationError("select (R, n) is required with raw arrays")
        sel = select
    R, n, T, d = Xa.shape
    if Za.shape != (R, n, d):
        raise ValidationError(f"Z must have shape (R, n, d) = ({R}, {n}, {d}), got {Za.shape}")
    sel = as_index_array(sel, "select", (R, n), T, f"(R, n) = ({R}, {n})")
    require_solution_memory(n * (T - 1), d, d, norm, max_memory, R=R)
    other = np.broadcast_to(np.arange(T), (R, n, T))
    keep = other != sel[..., None]
    # every (r, i) has exactly T - 1 kept tokens: reshape without ragged rows
    t_idx = other[keep].reshape(R, n, T - 1)
    rr = np.arange(R)[:, None, None]
    ii = np.arange(n)[None, :, None]
    U = (Xa[rr, ii, sel[..., None]] - Xa[rr, ii, t_idx]).reshape(R, n * (T - 1), d)
    V = np.broadcast_to(Za[:, :, None, :], (R, n, T - 1, d)).reshape(R, n * (T - 1), d)
    return _BATCH[norm](U, V, st)


def _frobenius_batch(U: np.ndarray, V: np.ndarray, st: SolverSettings) -> BatchSolution:
    """The Frobenius Att-SVMs of the rows ``U (R, N, d)``, ``V (R, N, d)`` (right-hand sides 1)."""
    R, N, _ = U.shape
    W, lam, status, certs = solve_frobenius_batch(U, V, np.ones((R, N)), np.zeros((R, N), bool),
                                                  st.resolved("fro", "dense"))
    feas = status != "infeasible"
    margins = np.full((R, N), np.nan)
    if feas.any():
        with np.errstate(over="ignore", invalid="ignore"):
            margins[feas] = np.einsum("rka,rab,rkb->rk", U[feas], W[feas], V[feas])
    nv = np.full(R, np.inf)
    for r in np.flatnonzero(feas):
        nv[r] = _fro_norm(W[r])
    return BatchSolution(W, status, nv, lam, margins, certs)


def _nuclear_batch(U: np.ndarray, V: np.ndarray, settings: SolverSettings) -> BatchSolution:
    """The nuclear-norm Att-SVMs of the rows ``U (R, N, d)``, ``V (R, N, d)`` (right-hand sides 1)."""
    R, N, d = U.shape
    sets = [bare_set(U[r], V[r], np.ones(N), np.zeros(N, bool), "att") for r in range(R)]
    sols = solve_nuclear_batch(sets, formulation="att", options=NuclearOptions(settings=settings))
    W = np.stack([s.W if s.W is not None else np.full((d, d), np.nan) for s in sols]) if R else np.zeros((0, d, d))
    W[[not s.feasible for s in sols]] = np.nan
    status = np.array([s.status for s in sols], dtype=object)
    norm_value = np.array([s.norm_value if s.feasible else np.inf for s in sols], float)
    duals = np.stack([s.duals for s in sols]) if R else np.zeros((0, N))
    margins = np.stack([s.margins if s.feasible else np.full(N, np.nan) for s in sols]) if R else np.zeros((0, N))
    return BatchSolution(W, status, norm_value, duals, margins, [s.certificate for s in sols])


#: norm -> the batched solve of :func:`solve_svm_batch`
_BATCH = {"fro": _frobenius_batch, "nuclear": _nuclear_batch}


def _fro_norm(W: np.ndarray) -> float:
    """``||W||_F`` without overflow or underflow of the squares (power-of-two scaling)."""
    top = float(np.max(np.abs(W))) if W.size else 0.0
    if top == 0.0:
        return 0.0
    _, e = np.frexp(top)
    return float(np.linalg.norm(np.ldexp(W, -int(e)))) * 2.0 ** int(e)
