"""The Att-SVM of causal language modeling (``lm-*``): token scores, optimal tokens, rows, soft margin.

Every prefix of every sequence is its own token-selection problem: the query is the last
prefix token, the keys are the prefix tokens, the head is ``H = E^T``. The score of a token
is ``gamma_{l,k,t} = -loss(H^T a_{l,t}, target_{l,k})``; the soft-margin Att-SVM (``C = 10``,
objective ``||W||_F + C sum xi``) is built from rank-one rows ``(a_opt - a_t)^T W a_k >= 1 - xi``
(never a Kronecker product).
"""

from __future__ import annotations

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.language import LMData, chain_sequences, lm_data_of, scaled_cycle_language, token_loss
from attnsvm.problem import TokenProblem
from attnsvm.svm.api import solve_fin, solve_gen_svm
from attnsvm.svm.constraints import bare_set, seq_constraints
from attnsvm.svm.frobenius import solve_frobenius_rhs
from attnsvm.svm.soft import solve_soft

__all__ = ["prefix_scores", "optimal_prefix_tokens", "score_ties", "language_score_spread", "near_tie_language",
           "lm_constraints", "soft_margin_svm", "prefix_problem",
           "prefix_softmax", "gen_svm_fit", "random_direction_control"]


def prefix_scores(data: LMData, loss: str = "logistic") -> np.ndarray:
    """Token scores ``gamma[l, k, t] = -loss(H^T a_{l,t}, target_{l,k})`` for ``t <= k <= n-2``.

    The score of key t for the prefix ending at k is the (negated) loss of attending to t
    alone. Entries outside the causal candidate set or at the last position are ``-inf``.
    Shape (m, n, n) indexed [sequence, query position, key position].
    """
    m, n, d = data.A.shape
    Z = data.A @ data.E.T  # (m, n, V): logits of attending fully to each token
    gamma = np.full((m, n, n), -np.inf)
    for k in range(n - 1):
        y = np.repeat(data.targets[:, k][:, None], k + 1, axis=1)
        gamma[:, k, :k + 1] = -token_loss(Z[:, :k + 1], y, loss)
    return gamma


def optimal_prefix_tokens(gamma: np.ndarray) -> np.ndarray:
    """``select[l, k] = argmax_t gamma[l, k, t]`` (the last position, without target, selects itself)."""
    m, n, _ = gamma.shape
    sel = np.argmax(gamma, axis=-1)
    sel[:, n - 1] = n - 1
    return sel.astype(np.int64)


def score_ties(data: LMData, loss: str = "logistic"):
    """Theorem 3.15's assumption per prefix: how far the non-optimal token scores are from a tie.

    For the prefix ending at k (``k <= n - 2``), with the optimal token of
    :func:`optimal_prefix_tokens`: ``spread`` is max - min of the scores of the tokens whose type
    differs from the optimal token's (tokens of its type are the same input and tie with it), and
    ``gap`` is the optimal score minus the best of them (> 0: the optimal token is unique up to
    copies of it). A prefix whose tokens all share the optimal type has spread 0 and gap ``inf``.

    Returns
    -------
    (spread (m, n - 1), gap (m, n - 1)) float64
    """
    gamma = prefix_scores(data, loss)
    m, n, _ = gamma.shape
    sel = optimal_prefix_tokens(gamma)[:, : n - 1]                               # (m, n-1)
    g = gamma[:, : n - 1, :]                                                    # (m, n-1, n)
    opt_type = np.take_along_axis(data.tokens, sel, axis=1)                     # (m, n-1)
    causal = np.arange(n)[None, None, :] <= np.arange(n - 1)[None, :, None]
    other = causal & (data.tokens[:, None, :] != opt_type[:, :, None])
    hi = np.where(other, g, -np.inf).max(-1)
    lo = np.where(other, g, np.inf).min(-1)
    has = other.any(-1)
    best = np.take_along_axis(g, sel[:, :, None], axis=2)[..., 0]
    return np.where(has, hi - lo, 0.0), np.where(has, best - hi, np.inf)


def language_score_spread(lang, n: int, loss: str = "logistic") -> tuple[float, float]:
    """Theorem 3.15's delta of a deterministic chain: the largest non-optimal score spread over every prefix of every
    sequence of length ``n`` it can emit, and the smallest optimal gap there.

    The sequences are :func:`attnsvm.language.chain_sequences` (one per start type), scored by :func:`score_ties`:
    any sample of length-``n`` sequences of the language has spread at most, and gap at least, these.

    Returns
    -------
    (delta, gap) floats: ``delta = max spread``, ``gap = min gap`` over the ``V (n - 1)`` prefixes.
    """
    spread, gap = score_ties(lm_data_of(lang, chain_sequences(lang, n)), loss)
    return float(spread.max()), float(gap.min())


#: the largest scale perturbation :func:`near_tie_language` tries (scales 1 +- 0.5)
NEAR_TIE_EPS_MAX = 0.5


def near_tie_language(delta: float, V: int = 16, d: int = 100, *, n: int, rho: float = 0.4, loss: str = "logistic",
                      seed: int = 0, xtol: float = 1e-13):
    """A cycle language whose non-optimal token scores lie within exactly ``delta`` of each other (Theorem 3.15).

    :func:`attnsvm.language.scaled_cycle_language` with the perturbation ``eps`` chosen so that
    :func:`language_score_spread` at sequence length ``n`` equals ``delta`` (``delta = 0``: ``eps = 0``, the exact
    ties of :func:`attnsvm.language.cycle_language`). The spread is continuous in ``eps`` and 0 at 0; ``eps`` is the
    root of ``spread(eps) = delta`` found by Brent's method between the last point of a geometric grid below ``delta``
    and the first above it (the smallest such root on that grid), to ``xtol``.

    Parameters
    ----------
    delta : the wanted spread, >= 0; V, d, rho, seed : as :func:`attnsvm.language.cycle_language`
    n : the sequence length the spread is measured at (2 <= n <= V - 1)
    loss : the token loss of the scores

    Returns
    -------
    (MarkovLanguage, eps, delta_measured, gap): the language, its perturbation, its spread (``delta`` to the
    root's precision) and its smallest optimal gap (> 0: the query token stays the unique optimal token).

    Raises
    ------
    ValidationError : ``delta < 0``, ``n`` outside [2, V - 1], ``delta`` beyond the spread at
        ``eps = NEAR_TIE_EPS_MAX``, or a perturbation that leaves no positive optimal gap.
    """
    from scipy.optimize import brentq

    if not delta >= 0:
        raise ValidationError(f"delta must be >= 0, got {delta}")
    if not 2 <= n <= V - 1:
        raise ValidationError(f"n must lie in [2, V - 1 = {V - 1}] (the cycle language's ties), got {n}")

    def spread(eps):
        return language_score_spread(scaled_cycle_language(V, d, rho=rho, eps=eps, seed=seed), n, loss)[0]

    eps = 0.0
    if delta > 0:
        grid = NEAR_TIE_EPS_MAX * 2.0 ** -np.arange(30, -1, -1)
        vals = np.array([spread(e) for e in grid])
        above = np.flatnonzero(vals >= delta)
        if not above.size:
            raise ValidationError(f"delta = {delta} is beyond this language's reach (spread {vals[-1]:.4g} at eps = "
                                  f"{NEAR_TIE_EPS_MAX}); use a smaller delta or another seed")
        i = int(above[0])
        lo = grid[i - 1] if i > 0 else 0.0
        eps = grid[i] if vals[i] == delta else float(brentq(lambda e: spread(e) - delta, lo, grid[i], xtol=xtol))
    lang = scaled_cycle_language(V, d, rho=rho, eps=eps, seed=seed)
    got, gap = language_score_spread(lang, n, loss)
    if not gap > 0:
        raise ValidationError(f"at delta = {delta} (eps = {eps:.4g}) the query token is no longer the unique optimal "
                              f"token (gap {gap:.3g}); use a smaller delta")
    return lang, float(eps), got, gap


def lm_constraints(data: LMData, loss: str = "logistic", select=None, tol: float = 1e-12):
    """Rank-one Att-SVM rows of every prefix: ``(a_opt - a_t)^T W a_k >= 1`` for ``t <= k``, ``t != opt``.

    Prefixes without a target (the last position) are dropped, and so are the rows of tokens
    identical to the selected one (same type: ``u = 0``, they would only add the constant
    ``C`` to a soft-margin objective). Built by :func:`attnsvm.svm.seq_constraints`
    (causal) and filtered.

    Parameters
    ----------
    data : LMData with ``A (m, n, d)`` inputs, ``targets (m, n)``, ``E (V, d)``
    loss : the token loss of :func:`prefix_scores`
    select : (m, n) int, optional selected token per prefix (None: :func:`optimal_prefix_tokens`)
    tol : rows with ``||u_k|| <= tol`` (a token of the selected one's type) are dropped

    Returns
    -------
    ConstraintSet (kind "causal") with ``U (N, d)``, ``V (N, d)``, ``sample = l``, ``query = k``,
    ``token = opt``, ``other = t``.
    """
    m, n, _ = data.A.shape
    if select is None:
        select = optimal_prefix_tokens(prefix_scores(data, loss))
    cs = seq_constraints(data.A, select, causal=True)
    keep = (cs.query <= n - 2) & (np.linalg.norm(cs.U, axis=1) > tol)
    return cs.select_rows(keep)


def soft_margin_svm(data: LMData, C: float = 10.0, loss: str = "logistic", squared: bool = False, cs=None):
    """Soft-margin Att-SVM of the paper's Definition 4.1 over every prefix.

    ``min ||W||_F + C sum xi`` (``||W||_F^2`` with ``squared``) s.t.
    ``(a_opt - a_t)^T W a_k >= 1 - xi``, solved by :func:`attnsvm.svm.solve` (with ``C``)
    on the rank-one rows of :func:`lm_constraints`.

    Parameters
    ----------
    data : LMData with ``A (m, n, d)``; C : float > 0; loss : as :func:`prefix_scores`
    squared : objective ``||W||_F^2 + C sum xi``
    cs : the rows, if already built by :func:`lm_constraints`

    Returns
    -------
    SVMSolution with ``W (d, d)`` and ``slack (N,)``.
    """
    cs = lm_constraints(data, loss) if cs is None else cs
    if cs.N == 0:
        raise ValidationError("the soft-margin SVM has no rows: every prefix token has the type of its optimal token")
    return solve_soft(cs, float(C), norm="fro", squared=squared)


# ------------------------------------------------------------------ the Gen-SVM form W_fin + R W_svm over the prefixes


def prefix_problem(data: LMData):
    """Every prefix with a target as one padded token-selection sample.

    Prefix p = (l, k), k <= n - 2, has the tokens ``a_{l,0..n-1}`` of which ``t <= k`` are real
    (``valid``) and the query ``a_{l,k}``.

    Returns
    -------
    (TokenProblem with X (P, n, d) and Z (P, d), valid (P, n) bool, seq (P,), pos (P,)), P = m (n - 1)
    """
    m, n, _ = data.A.shape
    seq, pos = (a.ravel() for a in np.meshgrid(np.arange(m), np.arange(n - 1), indexing="ij"))
    valid = np.arange(n)[None, :] <= pos[:, None]
    return TokenProblem(data.A[seq], data.A[seq, pos]), valid, seq, pos


def prefix_softmax(data: LMData, W) -> np.ndarray:
    """Causal softmax attention of every prefix of :func:`prefix_problem`: shape (P, n), 0 on padding.

    ``s_{p,t} = softmax_t(a_t^T W a_k)`` over ``t <= k`` (log-sum-exp form, float64).
    """
    problem, valid, seq, pos = prefix_problem(data)
    W = np.asarray(W, dtype=np.float64)
    logits = np.einsum("ptd,de,pe->pt", problem.X, W, problem.queries)
    logits = np.where(valid, logits, -np.inf)
    logits -= logits.max(axis=1, keepdims=True)
    s = np.exp(logits)
    return s / s.sum(axis=1, keepdims=True)


def gen_svm_fit(data: LMData, W, *, select_threshold: float = 1e-3, seed: int = 0, n_random: int = 16) -> dict:
    """Fit the Gen-SVM form ``W_fin + R W_svm`` (Transformers as SVMs) to W over every prefix.

    The selected set of prefix p is ``O_p = {t <= k : s_{p,t} > select_threshold}`` with the
    softmax of W (:func:`prefix_softmax`); ``W_svm`` is the Gen-SVM of these sets (selected
    tokens tie and beat every other prefix token by a margin >= 1), ``W_fin`` the min-norm
    matrix reproducing W's log-ratios inside each set (:func:`attnsvm.svm.solve_fin`, the
    orthogonal projection of W onto the tie rows), and ``R = <W - W_fin, W_svm> / ||W_svm||^2``
    (the least-squares fit of :func:`attnsvm.svm.svm_equivalence`, which takes no padding mask).
    A control replaces ``W_svm`` by ``n_random`` random directions of the same subspace: Gaussian
    combinations of the Gen-SVM's margin rows projected off the tie rows (each fitted the same way).

    Returns
    -------
    dict with ``status`` ("ok", "infeasible": no W separates the sets (proven), "undecided": not proven
    either way (see :func:`~attnsvm.svm.result.infeasible_solution`), "no_margin_rows": every
    prefix token is selected), and when "ok": ``W_fin``, ``W_svm``, ``W_eq``, ``R``, ``W_rand_eq``
    (n_random, d, d) (the controls), ``gen``, ``fin`` (the SVMSolution objects; the projections'
    as the list ``proj``), ``dim`` (dimension of the subspace of W_svm and the control:
    rank of tie and margin rows minus rank of the tie rows; 1 makes the control equal W_svm).
    """
    problem, valid, _, _ = prefix_problem(data)
    W = np.asarray(W, dtype=np.float64)
    s = prefix_softmax(data, W)
    selected = valid & (s > select_threshold)
    out = {"status": "", "n_prefixes": int(len(valid)), "n_multi": int((selected.sum(1) > 1).sum()),
           "n_unselected": int((valid & ~selected).sum())}
    if not (valid & ~selected).any():
        out["status"] = "no_margin_rows"
        return out
    gen = solve_gen_svm(problem, selected, valid=valid)
    out["gen"] = gen
    if not gen.feasible:
        out["status"] = gen.status                       # "infeasible" (proven) or "undecided"
        return out
    fin = solve_fin(problem, selected, np.where(valid, s, 0.0))
    out["fin"] = fin
    if not fin.feasible:  # cannot happen for log-ratios of one W; reported, never hidden
        out["status"] = "infeasible"
        return out
    Ws, Wf = gen.W, fin.W
    nn = float(np.sum(Ws * Ws))
    R = float(np.sum((W - Wf) * Ws) / nn) if nn > 0 else 0.0
    rand, projs, dim = random_direction_control(W, gen, fin, seed=seed, n_random=n_random)
    out.update(status="ok", W_fin=Wf, W_svm=Ws, R=R, W_eq=Wf + R * Ws, W_rand_eq=rand, proj=projs, dim=dim)
    return out


def random_direction_control(W, gen, fin, *, seed: int = 0, n_random: int = 16):
    """The random-direction control of a ``W_fin + R W_svm`` fit (Gen-SVM equivalence).

    ``W_fin`` is W's own projection onto the tie rows, so a fit ``W_fin + R W_svm`` says
    something about the SVM only when it beats random directions of the subspace ``W_svm``
    lives in, fitted the same way: each control direction is a Gaussian combination of the
    Gen-SVM's margin (inequality) rows, projected off the tie rows (a ``fin`` solve), and
    ``R' = <W - W_fin, W_rand> / ||W_rand||^2``.

    Parameters
    ----------
    W : (d, d) the matrix the fit explains (e.g. GD's final iterate)
    gen : SVMSolution of the Gen-SVM (its constraints hold the margin rows)
    fin : SVMSolution of the W_fin system (its constraints are the tie rows; its W is W_fin)
    seed, n_random : the control's random stream and its number of directions

    Returns
    -------
    (W_rand_eq (n_random, d, d), projections (list of SVMSolution), dim): ``dim`` is the
    dimension of the subspace of W_svm and of the control (rank of tie and margin rows minus
    rank of the tie rows); ``dim == 1`` makes every control direction equal to W_svm's.
    """
    W = np.asarray(W, dtype=np.float64)
    Wf = fin.W
    ineq = gen.constraints.select_rows(~gen.constraints.is_equality)
    tie = fin.constraints
    g = np.random.default_rng(np.random.SeedSequence([int(seed), 17]))
    dirs = [ineq.combine(g.standard_normal(ineq.N)) for _ in range(int(n_random))]
    # the projections off the tie rows: one set of rows, one right-hand side per direction (one factor)
    projs = (solve_frobenius_rhs(tie, np.stack([tie.evaluate(Wr) for Wr in dirs]), formulation="fin")
             if tie.N and dirs else [])
    rand = []
    for r, Wr in enumerate(dirs):
        if tie.N:
            Wr = Wr - projs[r].W if projs[r].feasible else np.full_like(Wr, np.nan)
        nr = float(np.sum(Wr * Wr))
        Rr = float(np.sum((W - Wf) * Wr) / nr) if nr > 0 else 0.0
        rand.append(Wf + Rr * Wr)
    # dimension of the subspace W_svm and the control live in: rank(tie + margin rows) - rank(tie rows)
    both = bare_set(np.vstack([tie.U, ineq.U]), np.vstack([tie.V, ineq.V]), np.zeros(tie.N + ineq.N),
                    np.zeros(tie.N + ineq.N, bool), "fin")                # the rows only: their span
    dim = _span_dimension(both) - _span_dimension(tie)
    return (np.stack(rand) if rand else np.zeros((0,) + W.shape)), projs, int(dim)


def _span_dimension(cs, rtol: float = 1e-9) -> int:
    """Dimension of the span of the rank-one rows ``u_k w_k^T`` (eigenvalues of their Gram matrix)."""
    if cs.U.shape[0] == 0:
        return 0
    ev = np.linalg.eigvalsh(cs.gram())
    return int((ev > rtol * max(float(ev.max()), 1e-300)).sum())
