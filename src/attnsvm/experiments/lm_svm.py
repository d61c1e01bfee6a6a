"""The Att-SVM of causal language modeling (``lm-*``): token scores, optimal tokens, rows, soft margin.

Every prefix of every sequence is its own token-selection problem: the query is the last
prefix token, the keys are the prefix tokens, the head is ``H = E^T``. The score of a token
is ``gamma_{l,k,t} = -loss(H^T a_{l,t}, target_{l,k})``; the soft-margin Att-SVM (``C = 10``,
objective ``||W||_F + C sum xi``) is built from rank-one rows ``(a_opt - a_t)^T W a_k >= 1 - xi``
(never a Kronecker product).
"""

from __future__ import annotations

import numpy as np

from ..errors import ValidationError
from ..svm.constraints import seq_constraints
from ..svm.soft import solve_soft
from .lm_language import LMData
from .lm_model import token_loss


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


def lm_constraints(data: LMData, loss: str = "logistic", select=None, tol: float = 1e-12):
    """Rank-one Att-SVM rows of every prefix: ``(a_opt - a_t)^T W a_k >= 1`` for ``t <= k``, ``t != opt``.

    Prefixes without a target (the last position) are dropped, and so are the rows of tokens
    identical to the selected one (same type: ``u = 0``, they would only add the constant
    ``C`` to a soft-margin objective). Built by :func:`attnsvm.svm.constraints.seq_constraints`
    (causal) and filtered.

    Returns
    -------
    ConstraintSet (kind "causal") with ``sample = l``, ``query = k``, ``token = opt``, ``other = t``.
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
    ``(a_opt - a_t)^T W a_k >= 1 - xi``, solved by :func:`attnsvm.svm.soft.solve_soft`
    on the rank-one rows of :func:`lm_constraints`.
    """
    cs = lm_constraints(data, loss) if cs is None else cs
    if cs.N == 0:
        raise ValidationError("the soft-margin SVM has no rows: every prefix token has the type of its optimal token")
    return solve_soft(cs, float(C), norm="fro", squared=squared)
