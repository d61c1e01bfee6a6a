"""The causal one-layer language model: losses, gradients, GD and gradient Lipschitz estimates.

Shapes (R = runs, m = sequences, n = positions, d = dimension, V = vocabulary):

=========  ==============  ==================================================
A          (R, m, n, d)    token embeddings of each sequence
targets    (R, m, n)       int64 next-token targets in [0, V), -1 = no target
E          (R, V, d)       tied embedding: the head is ``H = E^T`` (logits ``E o``)
W          (R, d, d)       key-query weights
=========  ==============  ==================================================

Softmax or linear attention over each prefix: the logit of key t for query k is ``a_t^T W a_k``
(paper convention ``x^T W z``), ``s_k = softmax(a_t^T W a_k, t <= k)``, output ``o_k = sum_t s_kt a_t``.
Per-vocabulary logistic (the paper's loss), cross-entropy or l2 loss, closed-form float64 gradients
batched over runs (the softmax backward is the shared kernel
:func:`attnsvm.training.kernel.softmax_backward`), plain GD (the engine's ``train_sequence`` where it
covers the setting). Functions here do not change torch's thread count.
"""

from __future__ import annotations

import numpy as np
import torch

from attnsvm.errors import ValidationError
from attnsvm.language import LM_LOSSES as LOSSES, LMData
from attnsvm.training.kernel import softmax_backward
from attnsvm.training.loop import TrainConfig, run, want_mask
from attnsvm.training.train import train_sequence

__all__ = ["LOSSES", "lm_loss_grad", "token_basis", "train_lm", "train_runs", "lipschitz_estimates",
           "paper_lipschitz_bound"]


def lm_loss_grad(W, A, targets, E, *, loss: str = "logistic", attention: str = "softmax", want_coef: bool = False):
    """Mean loss and its gradient in W of the causal one-layer model, batched over runs.

    The loss is the mean over the positions with a target; ``G = sum_k (sum_t c_kt a_t) a_k^T``
    with ``c_k = (diag(s_k) - s_k s_k^T) beta_k`` (softmax, :func:`~attnsvm.training.kernel.softmax_backward`)
    or ``c_k = beta_k`` on the prefix (linear), ``beta_kt = a_t^T E^T dL/dlogits_k``.

    Parameters
    ----------
    W : (R, d, d) torch float64; A : (R, m, n, d); targets : (R, m, n) int64 (-1 = no target);
    E : (R, V, d) tied head (logits ``E o``)
    loss : "logistic" (per vocabulary entry, label +1 for the true type and -1 otherwise),
        "cross_entropy" or "l2" (``||E o - onehot||^2``)
    attention : "softmax" (``s = softmax(a_t^T W a_k, t <= k)``) or "linear" (``s = a_t^T W a_k``, t <= k)
    want_coef : also return the logit coefficients ``c (R, m, n, n)`` (dL/dlogit)

    Returns
    -------
    (L (R,), G (R, d, d)[, c])
    """
    R, m, n, d = A.shape
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    Af = A.reshape(R, m * n, d)
    Q = torch.bmm(Af, W.transpose(1, 2)).reshape(R, m, n, d)  # row k = W a_k
    logits = torch.matmul(Q, A.transpose(-1, -2))  # [.., k, t] = a_t^T W a_k
    if attention == "softmax":
        s = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
    elif attention == "linear":
        s = logits * mask
    else:
        raise ValidationError(f"attention must be 'softmax' or 'linear', got {attention!r}")
    o = torch.matmul(s, A)  # (R, m, n, d)
    V = E.shape[1]
    Z = torch.bmm(o.reshape(R, m * n, d), E.transpose(1, 2)).reshape(R, m, n, V)
    valid = targets >= 0
    y = torch.where(valid, targets, torch.zeros_like(targets))
    oh = torch.nn.functional.one_hot(y, V).to(Z.dtype)
    if loss == "logistic":
        b = 2.0 * oh - 1.0
        per = torch.nn.functional.softplus(-b * Z).sum(-1)
        gZ = -b * torch.sigmoid(-b * Z)
    elif loss == "cross_entropy":
        lse = torch.logsumexp(Z, -1)
        per = lse - (Z * oh).sum(-1)
        gZ = torch.softmax(Z, -1) - oh
    elif loss == "l2":
        diff = Z - oh
        per = (diff * diff).sum(-1)
        gZ = 2.0 * diff
    else:
        raise ValidationError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    vf = valid.to(Z.dtype)
    cnt = vf.sum((1, 2)).clamp(min=1.0)
    L = (per * vf).sum((1, 2)) / cnt
    gZ = gZ * (vf / cnt[:, None, None]).unsqueeze(-1)
    gO = torch.bmm(gZ.reshape(R, m * n, V), E).reshape(R, m, n, d)
    beta = torch.matmul(gO, A.transpose(-1, -2))  # [.., k, t] = dL/ds_kt
    if attention == "softmax":
        # pairwise form c_t = s_t sum_tau s_tau (beta_t - beta_tau): exact when s is saturated
        c = softmax_backward(s, beta)
    else:
        c = beta * mask
    U = torch.matmul(c, A)  # (R, m, n, d): sum_t c_kt a_t
    G = torch.bmm(U.reshape(R, m * n, d).transpose(1, 2), Af)
    return (L, G, c) if want_coef else (L, G)


def token_basis(A, tol: float = 1e-12) -> np.ndarray:
    """Orthonormal bases of the token spans of each run, padded to a common width.

    The loss depends on W only through ``P^T W P`` (every logit is ``a_t^T W a_k`` with
    tokens in ``span(P)``), and every gradient is ``P G_r P^T``. Running GD in these
    ``r x r`` coordinates is exactly GD on the full ``d x d`` matrix.

    Parameters
    ----------
    A : (R, m, n, d) tokens of R runs
    tol : singular values below ``tol * s_max`` count as zero

    Returns
    -------
    P : (R, d, r) with orthonormal columns spanning each run's tokens, ``r`` the largest
        rank over the runs (a run of smaller rank gets further orthonormal columns).
    """
    A = np.asarray(A, dtype=np.float64)
    R, d = A.shape[0], A.shape[-1]
    flat = A.reshape(R, -1, d)
    _, sv, Vt = np.linalg.svd(flat, full_matrices=False)  # Vt: (R, min(mn, d), d)
    smax = sv[:, :1]
    r = int(max(1, (sv > tol * np.maximum(smax, 1e-300)).sum(1).max()))
    return np.ascontiguousarray(np.transpose(Vt[:, :r], (0, 2, 1)))


def train_lm(A, targets, E, W0, *, steps: int, lr, loss: str = "logistic", attention: str = "softmax",
             checkpoints=None, track_lipschitz: bool = False, basis=None):
    """Plain GD ``W <- W - lr grad L(W)`` on R independent runs (float64, closed-form gradients).

    GD runs in the coordinates ``M = P^T W P`` of each run's token span (:func:`token_basis`;
    exact, since the loss sees only ``P^T W P`` and every gradient is ``P G P^T``) and the
    recorded iterates are ``W0 + P (M - P^T W0 P) P^T``.

    Parameters
    ----------
    A : (R, m, n, d); targets : (R, m, n); E : (R, V, d) (numpy or torch); W0 : (R, d, d)
    lr : float or (R,) per-run step sizes
    checkpoints : steps to record W and the loss at (default: 0 and ``steps``)
    track_lipschitz : record ``max_k ||g_{k+1} - g_k|| / ||W_{k+1} - W_k||`` along the run
    basis : (R, d, r) the runs' :func:`token_basis` if already known (saves the SVDs)

    Returns
    -------
    dict: ``steps`` (C,), ``W`` (R, C, d, d), ``loss`` (R, C), ``finite`` (R,) bool (no overflow),
    ``lip_traj`` (R,) (if tracked), ``max_loss`` (R,) the largest loss along the run.
    """
    arr = lambda x: x.detach().cpu().numpy() if torch.is_tensor(x) else np.asarray(x)  # noqa: E731
    A, E, W0 = (np.asarray(arr(x), dtype=np.float64) for x in (A, E, W0))
    targets = np.asarray(arr(targets), dtype=np.int64)
    R, d = A.shape[0], A.shape[-1]
    P = token_basis(A) if basis is None else np.asarray(basis, dtype=np.float64)
    if P.shape[:2] != (R, d) or P.ndim != 3:
        raise ValidationError(f"basis must have shape (R, d, r) = ({R}, {d}, r), got {P.shape}")
    reduce = P.shape[-1] < d
    if reduce:
        Pt = np.transpose(P, (0, 2, 1))
        M0 = Pt @ W0 @ P
        At, Et, W = (torch.as_tensor(x) for x in (A @ P[:, None], E @ P, M0.copy()))
    else:
        At, Et, W = torch.as_tensor(A), torch.as_tensor(E), torch.as_tensor(W0.copy())
    tg = torch.as_tensor(targets)
    lr_t = torch.as_tensor(np.broadcast_to(np.asarray(lr, dtype=np.float64), (R,)).copy()).reshape(R, 1, 1)
    cps = sorted({0, int(steps)} if checkpoints is None else {int(c) for c in checkpoints if 0 <= c <= steps})
    cfg = TrainConfig(param="W", steps=steps, lr=float(np.max(lr)), optimizer="gd", cps=np.array(cps, dtype=np.int64),
                      loss=loss)
    kernel = LMKernel(At, tg, Et, W, lr_t, cfg, attention=attention, track_lipschitz=track_lipschitz,
                      to_full=(lambda Wk: W0 + P @ (Wk - M0) @ Pt) if reduce else None)
    with torch.no_grad():
        out = run(kernel, steps)
    return {"steps": np.array(cps), **out}


class LMKernel:
    """Kernel of :func:`attnsvm.training.loop.run` for plain GD ``W <- W - lr G`` on the causal LM.

    ``lr`` (R, 1, 1) per-run step sizes (``cfg.lr`` is their largest, unused here); ``cfg``: steps, recorded
    steps ``cps`` and loss. State W (R, d, d), in the reduced coordinates of :func:`train_lm` when it uses them
    (``to_full`` maps a recorded iterate back to (R, d, d)); gradient :func:`lm_loss_grad`. A run whose loss or
    gradient becomes non-finite is frozen (``finite`` False, its later values unchanged); ``max_loss`` (R,)
    tracks the largest loss; with ``track_lipschitz``, ``lip_traj`` (R,) the largest
    ``||g_{k+1} - g_k|| / ||W_{k+1} - W_k||``.
    """

    def __init__(self, A, targets, E, W, lr, cfg, *, attention, track_lipschitz, to_full=None):
        R = A.shape[0]
        self.A, self.targets, self.E, self.W, self.lr = A, targets, E, W, lr
        self.loss, self.attention, self.track, self.to_full = cfg.loss, attention, track_lipschitz, to_full
        self.want = want_mask(cfg.steps, cfg.cps)
        self.Ws, self.Ls = [], []
        self.finite = torch.ones(R, dtype=torch.bool)
        self.lip = torch.zeros(R, dtype=torch.float64)
        self.max_loss = torch.full((R,), -np.inf, dtype=torch.float64)
        self.prev_g = self.prev_W = None

    def gradient(self, k):
        self.L, self.G = L, G = lm_loss_grad(self.W, self.A, self.targets, self.E, loss=self.loss,
                                             attention=self.attention)
        W, R = self.W, self.W.shape[0]
        ok = torch.isfinite(L) & torch.isfinite(G).reshape(R, -1).all(1)
        self.finite &= ok
        self.max_loss = torch.maximum(self.max_loss, torch.where(ok, L, torch.full_like(L, np.inf)))
        if self.track and self.prev_g is not None:
            dW = torch.linalg.vector_norm((W - self.prev_W).reshape(R, -1), dim=1)
            dg = torch.linalg.vector_norm((G - self.prev_g).reshape(R, -1), dim=1)
            ratio = torch.where((dW > 0) & ok, dg / dW.clamp(min=1e-300), torch.zeros_like(dW))
            self.lip = torch.maximum(self.lip, torch.nan_to_num(ratio, nan=0.0, posinf=0.0))

    def record(self):
        Wk = self.W.numpy()
        self.Ws.append(Wk.copy() if self.to_full is None else self.to_full(Wk))
        self.Ls.append(self.L.numpy().copy())

    def update(self, k):
        # a diverged run is frozen (its later values stay non-finite / unchanged)
        R = self.W.shape[0]
        G = torch.where(self.finite.reshape(R, 1, 1), self.G, torch.zeros_like(self.G))
        if self.track:
            self.prev_g, self.prev_W = G.clone(), self.W.clone()
        self.W = self.W - self.lr * G

    def result(self):
        out = {"W": np.stack(self.Ws, 1), "loss": np.stack(self.Ls, 1), "finite": self.finite.numpy().copy(),
               "max_loss": self.max_loss.numpy().copy()}
        if self.track:
            out["lip_traj"] = self.lip.numpy().copy()
        return out


def train_runs(cfg, datas, W0, checkpoints, attention: str = "softmax"):
    """GD on every run of ``datas`` at once (the engine's ``train_sequence`` for the cross-entropy loss).

    cfg : has ``loss``, ``lr``, ``steps``; datas : R LMData of equal shapes (A (m, n, d), targets (m, n),
    E (V, d)); W0 : (R, d, d). Returns a dict with ``steps`` (C,), ``W`` (R, C, d, d), ``loss`` (R, C).
    """
    A = np.stack([x.A for x in datas])
    tg = np.stack([x.targets for x in datas])
    E = np.stack([x.E for x in datas])
    if cfg.loss == "cross_entropy" and attention == "softmax" and len({x.E.tobytes() for x in datas}) == 1:
        res = train_sequence(A, tg, H=E[0].T, causal=True, loss="cross_entropy", optimizer="gd",
                             lr=cfg.lr, steps=cfg.steps, init=W0, checkpoints=checkpoints)
        return {"steps": res.steps, "W": res.W, "loss": res.loss}
    return train_lm(A, tg, E, W0, steps=cfg.steps, lr=cfg.lr, loss=cfg.loss, attention=attention,
                    checkpoints=checkpoints)


# ------------------------------------------------------------------ gradient Lipschitz estimates


def _ball(g, count, r, R):
    """Uniform samples in the Frobenius ball of radius R in R^{r x r}: shape (count, r, r)."""
    X = g.standard_normal((count, r * r))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    rad = R * g.random(count) ** (1.0 / (r * r))
    return (X * rad[:, None]).reshape(count, r, r)


def lipschitz_estimates(data: LMData, *, loss, attention, radius, centers, power_iters, pairs, seed=0):
    """Gradient Lipschitz estimates of the mean loss in the ball ``||W||_F <= radius``.

    The loss depends on W only through ``M = P^T W P`` (P: orthonormal basis of the token
    span, :func:`token_basis`) and its Hessian vanishes outside these coordinates, so the
    supremum over the ball is the supremum over ``||M||_F <= radius``; the points are drawn
    there (each is the point ``W = P M P^T`` of the full ball).

    * ``power``: max over the center ``M = 0`` and ``centers`` uniform random points of the
      local constant, estimated by power iteration on finite-difference Hessian-vector
      products ``(grad(M + h u) - grad(M)) / h``;
    * ``pairs``: max over random pairs (x, y) in the ball of ``||grad x - grad y|| / ||x - y||``.

    Parameters
    ----------
    data : LMData with A (m, n, d), targets (m, n), E (V, d)
    loss, attention : as in :func:`lm_loss_grad`
    radius : Frobenius radius of the ball; centers, power_iters, pairs : sample counts; seed : int

    Returns
    -------
    (power, pairs) : two floats
    """
    g = np.random.default_rng(np.random.SeedSequence([seed, 5]))
    P = token_basis(data.A[None])[0]
    r = P.shape[1]
    A_r, E_r = data.A @ P, data.E @ P
    k = centers + 1

    def grad(Ms):
        Ms = torch.as_tensor(Ms)
        B = Ms.shape[0]
        A = torch.as_tensor(A_r).unsqueeze(0).expand(B, -1, -1, -1)
        tg = torch.as_tensor(data.targets).unsqueeze(0).expand(B, -1, -1)
        E = torch.as_tensor(E_r).unsqueeze(0).expand(B, -1, -1)
        return lm_loss_grad(Ms, A, tg, E, loss=loss, attention=attention)[1].numpy()

    Wc = np.concatenate([np.zeros((1, r, r)), _ball(g, centers, r, radius)])
    u = g.standard_normal((k, r, r))
    u /= np.linalg.norm(u.reshape(k, -1), axis=1).reshape(k, 1, 1)
    h = 1e-5 * max(1.0, radius)
    g0 = grad(Wc)
    est = np.zeros(k)
    for _ in range(power_iters):
        Hu = (grad(Wc + h * u) - g0) / h
        est = np.linalg.norm(Hu.reshape(k, -1), axis=1)
        u = Hu / np.maximum(est, 1e-300).reshape(k, 1, 1)
    X, Y = _ball(g, pairs, r, radius), _ball(g, pairs, r, radius)
    num = np.linalg.norm((grad(X) - grad(Y)).reshape(pairs, -1), axis=1)
    ratio = num / np.linalg.norm((X - Y).reshape(pairs, -1), axis=1)
    return float(est.max()), float(ratio.max())


def paper_lipschitz_bound(data: LMData, radius: float) -> tuple[float, float]:
    """The paper's gradient Lipschitz bound for the mean logistic loss of softmax attention.

    Lemma 3.13 of the seed paper (section 3.4, from the basic bounds of section 3.3): one
    loss term ``(l, k, v)`` has a gradient with Lipschitz constant at most
    ``M = 3 n^3 R^7 exp(13 R^2)`` whenever ``R >= 4``, ``||A_{l,k}|| <= R`` and
    ``||A_{l,k} x|| <= R`` on the ball, where ``A_{l,k}`` is the block of the Kronecker
    matrix whose rows are ``a_k (x) a_t`` (t in the prefix of k; its spectral norm is
    ``||a_k|| ||A_{l,<=k}||_2``). R is taken as the smallest value meeting every condition,
    also bounding the value vectors ``h = A_{l,<=k} e_v`` the proof multiplies by. The loss
    here is the mean over prefixes of a sum over V vocabulary entries, so its bound is ``V M``.

    Parameters
    ----------
    data : LMData with A (m, n, d), E (V, d)
    radius : Frobenius radius of the ball of key-query matrices

    Returns
    -------
    (log10 of V M, R)
    """
    A, E = np.asarray(data.A, dtype=np.float64), np.asarray(data.E, dtype=np.float64)
    m, n, d = A.shape
    V = E.shape[0]
    block = 0.0
    value = 0.0
    for k in range(n - 1):  # prefixes with a target
        pre = A[:, :k + 1]  # (m, k+1, d)
        op = np.linalg.norm(pre, ord=2, axis=(1, 2))  # (m,) spectral norms
        block = max(block, float((np.linalg.norm(A[:, k], axis=1) * op).max()))
        value = max(value, float(np.linalg.norm(pre @ E.T, axis=1).max()))
    R = max(4.0, block, block * float(radius), value)
    log10 = np.log10(3.0 * V) + 3 * np.log10(n) + 7 * np.log10(R) + 13 * R * R / np.log(10.0)
    return float(log10), float(R)
