"""Tensor operations of the attention models: contractions, logits, softmax (torch, float64).

Shapes (R = runs, n = samples, T = tokens, d = dimension, m = hidden width): X (R, n, T, d),
queries (R, n, d), keys (R, n, T, d), mask (R|1, n, T) bool, W (R, d, d), K and Q (R, d, m),
p and v (R, d), attention s (R, n, T). The logit of token t is ``x_t^T W z`` (paper convention).

Contractions come in two flavours: :func:`fixed_dot` / :func:`fsum` (elementwise products reduced in
a fixed order, so that a run's numbers do not depend on how many runs are batched) and BLAS
(``bmm``, faster). Nothing here depends on another training module.
"""

from __future__ import annotations

import torch

DTYPE = torch.float64


#: exponents up to this size make 2^e an exact normal float64 (and 2^-e too)
_LDEXP_EXACT = 1000


def ldexp(x, e):
    """``torch.ldexp(x, e)`` (x float64, e an integer tensor broadcasting to it): when every ``|e| <= 1000``, x
    times the exact power of two ``2^e`` (one rounding, the same bits; several times cheaper than torch.ldexp
    on small tensors), else torch.ldexp itself."""
    if e.numel() and int(e.abs().max()) <= _LDEXP_EXACT:
        return x * torch.pow(2.0, e.to(x.dtype))
    return torch.ldexp(x, e)


def fixed_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(a * b).sum(-1)`` with broadcasting.

    All contractions of this module are written this way (the contracted axis last)
    instead of matmul/bmm: BLAS picks different kernels (and summation orders) for
    different batch sizes, whereas an elementwise product reduced over the last axis
    gives every run bitwise the same numbers whatever batch it is in.
    """
    return fsum(a * b)


def fsum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis in a fixed pairwise order made of elementwise adds.

    ``Tensor.sum`` picks its summation order from the whole tensor's shape, so a
    run's sum could change with the number of runs; elementwise adds cannot.
    """
    k = x.shape[-1]
    if k == 0:
        return x.sum(-1)
    while k > 1:
        h = k // 2
        if k % 2 == 0:
            x = x[..., :h] + x[..., h:]
        else:
            x = torch.cat([x[..., :h] + x[..., h : 2 * h], x[..., 2 * h :]], dim=-1)
        k = x.shape[-1]
    return x[..., 0]


def attention_logits(X: torch.Tensor, queries: torch.Tensor, W: torch.Tensor, mask=None) -> torch.Tensor:
    """Logits ``a[r, i, t] = x_{it}^T W_r z_i``.

    X (R, n, T, d), queries (R, n, d), W (R, d, d), mask (R|1, n, T) bool or None -> (R, n, T).
    Masked tokens get ``-inf``.
    """
    Wz = fixed_dot(W.unsqueeze(1), queries.unsqueeze(2))  # (R, n, d): row i = W z_i
    a = fixed_dot(X, Wz.unsqueeze(2))
    if mask is not None:
        a = a.masked_fill(~mask, float("-inf"))
    return a


def prompt_logits(keys: torch.Tensor, p: torch.Tensor, mask=None) -> torch.Tensor:
    """Logits ``a[r, i, t] = k_{it}^T p_r`` of the prompt model. keys (R, n, T, d), p (R, d) -> (R, n, T)."""
    a = fixed_dot(keys, p[:, None, None, :])
    if mask is not None:
        a = a.masked_fill(~mask, float("-inf"))
    return a


def token_scores(X: torch.Tensor, Y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Scores ``gamma[r, i, t] = Y_ri v_r^T x_rit``; X (R, n, T, d), Y (R, n), v (R, d) -> (R, n, T)."""
    return Y.unsqueeze(-1) * fixed_dot(X, v[:, None, None, :])


def attend(s: torch.Tensor, X: torch.Tensor, Xt: torch.Tensor | None = None) -> torch.Tensor:
    """Attended vectors ``X_i^T s_i``: s (R, n, T), X (R, n, T, d) -> (R, n, d).

    ``Xt`` = ``X.transpose(-1, -2).contiguous()`` (R, n, d, T) may be passed precomputed.
    """
    if Xt is None:
        Xt = X.transpose(-1, -2)
    return fixed_dot(Xt, s.unsqueeze(2))


def combine(K: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """``W = K Q^T``: K, Q (R, d, m) -> (R, d, d)."""
    return fixed_dot(K.unsqueeze(2), Q.unsqueeze(1))


def softmax(a: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis (log-sum-exp stable; ``-inf`` logits get probability 0)."""
    return torch.softmax(a, dim=-1)


def softmax_fast(a: torch.Tensor) -> torch.Tensor:
    """Same as :func:`softmax` (``exp(a - max) / sum``) from elementwise ops into a new tensor.

    Used for the short rows of these models (T of 2 to ~50), where it beats ``torch.softmax`` on CPU
    (``python benchmarks/training.py`` times the loops built on it). The vectorized ``exp`` may round a
    tensor's tail differently, so this is not used in bitwise mode.
    """
    e = a - a.amax(-1, keepdim=True)
    e.exp_()
    return e.div_(e.sum(-1, keepdim=True))


def causal_mask(T: int, causal: bool = True) -> torch.Tensor:
    """(T, T) bool mask, row k = query position k: ``t <= k`` if causal, all True otherwise."""
    full = torch.ones(T, T, dtype=torch.bool)
    return torch.tril(full) if causal else full
