"""Fused kernels of the training loop: GD / normalized GD with closed-form gradients, frozen head, W or KQ.

Kernels of :func:`attnsvm.training.loop.run` whose optimizer step is fused with their state:

* :class:`TokenSpaceKernel` -- W with few tokens in all (``n T`` small) in *token space*: since every
  gradient is ``G = sum_it c_it x_it z_i^T``, the logits move by ``-lr' H c`` with the fixed matrix
  ``H[(i,t),(j,u)] = (x_it^T x_ju)(z_i^T z_j)`` and ``||G||^2 = c^T H c``; W is rebuilt from the
  accumulated ``c`` only at the recorded steps. Same iterates as the W-space update up to rounding.
* :class:`DirectWKernel`, :class:`DirectKQKernel` -- W (many tokens) or (K, Q) updated with a few
  batched products per step (``Q^T z`` reused for ``grad_K = U^T Z Q``, no ``K Q^T`` except at records).

The per-token weights ``c`` come from the softmax kernel (:class:`attnsvm.training.kernel.TokenWeights`).
"""

from __future__ import annotations

import torch

from attnsvm.training.checks import resolve_engine
from attnsvm.training.kernel import token_logits, softmax_top, token_norm, TokenWeights
from attnsvm.training.losses import apply_log_scale, margin_loss
from attnsvm.training.models import token_form
from attnsvm.training.ops import DTYPE
from attnsvm.training.optim import ngd_eps, norm_at_record, true_norms, robust_norm
from attnsvm.training.recorder import Recorder


#: token-space W kernel: at most this many tokens n*T in all, and R * (n T)^2 entries of H
TOKEN_SPACE_MAX_TOKENS = 64
TOKEN_SPACE_MAX_ENTRIES = 2**24


def fast_kind(data, param, head, loss, train_v, engine, optimizer, bitwise):
    """'tokens' / 'direct' when a fused kernel applies, else None (generic kernel)."""
    if bitwise or train_v or param not in ("W", "KQ") or optimizer not in ("gd", "ngd") or data.queries is None:
        return None
    if resolve_engine(engine, head, loss, train_v) != "closed":
        return None
    R, N, T, _ = data.X.shape
    if param == "W" and N * T <= TOKEN_SPACE_MAX_TOKENS and R * (N * T) ** 2 <= TOKEN_SPACE_MAX_ENTRIES:
        return "tokens"
    return "direct"


def fast_kernel(kind, data, params, head, cfg):
    """The fused GD / NGD kernel of ``kind`` ("tokens" or "direct", from :func:`fast_kind`) for the
    closed-form gradient with frozen head, param W or KQ (``cfg``: a :class:`~attnsvm.training.loop.TrainConfig`).

    With the exponential loss the per-token weights come scaled by ``exp(-log_scale)`` per run: NGD
    steps along their (exact) direction, with eps scaled alike; GD multiplies them back.
    """
    if kind == "tokens":
        return TokenSpaceKernel(data, params, head, cfg)
    return (DirectWKernel if cfg.param == "W" else DirectKQKernel)(data, params, head, cfg)


def _run_norm(g, shape):
    return torch.linalg.vector_norm(g.reshape(*shape, -1), dim=-1)


class _FusedKernel:
    """Shared set-up of the fused kernels: data views, the per-token weights, the recorder."""

    def __init__(self, data, params, head, cfg):
        self.X, self.Y, self.Z, mask = data.X.contiguous(), data.Y, data.queries.contiguous(), data.mask
        self.R, self.N, self.T, self.d = R, N, T, d = self.X.shape
        self.params, self.loss, self.lr, self.eps, self.ngd = params, cfg.loss, cfg.lr, cfg.eps, cfg.ngd
        self.weights = TokenWeights(token_form(head, self.X, data.v), self.Y, mask, cfg.loss)
        self.Xb = self.X.reshape(R * N, T, d)
        self.XbT = self.Xb.transpose(1, 2).contiguous()  # (R N, d, T): U = X^T c as matrix-vector products
        self.hidden = None if mask is None else ~mask
        self.rec = Recorder(cfg.steps, cfg.cps, R, N, T, params, False, cfg.seeds)
        self.want = self.rec.want

    def put(self, grad_norm, values):
        self.rec.put(margin_loss(self.u, self.loss).mean(-1), self.s, grad_norm, values)

    def result(self):
        return self.rec.result()


class TokenSpaceKernel(_FusedKernel):
    """W in token space: the state is the logits ``a`` and the accumulated step weights ``acc``;
    ``W = W0 - sum_it acc_it x_it z_i^T`` is rebuilt at the records only."""

    def __init__(self, data, params, head, cfg):
        super().__init__(data, params, head, cfg)
        R, N, T, d, X, Z = self.R, self.N, self.T, self.d, self.X, self.Z
        self.W0 = W0 = params["W"]
        self.NT = NT = N * T
        Xf = X.reshape(R, NT, d)
        H = torch.bmm(Xf, Xf.transpose(1, 2)).reshape(R, N, T, N, T)
        self.H = H.mul_(torch.bmm(Z, Z.transpose(1, 2)).reshape(R, N, 1, N, 1)).reshape(R, NT, NT)
        self.a = token_logits(self.Xb, torch.bmm(Z, W0.transpose(1, 2)), R, N, T, d, self.hidden)
        # sum over steps of (step size) * c: W = W0 - sum_it acc_it x_it z_i^T
        self.acc = torch.zeros(R, N, T, dtype=DTYPE)
        # H is symmetric: H c = (c^T H)^T; MKL's batched kernels are much faster for c^T H once NT > 16
        self.row = NT > 16
        self.sym = None  # H bitwise symmetric, for token_norm (checked when first needed)

    def gradient(self, k):
        R, N, T, NT = self.R, self.N, self.T, self.NT
        s, top = softmax_top(self.a)
        self.s = s
        self.u, c, self.ls = self.weights(s, top)
        self.c = c
        if self.row:
            self.Hc = torch.bmm(c.reshape(R, 1, NT), self.H).reshape(R, N, T)
        else:
            self.Hc = torch.bmm(self.H, c.reshape(R, NT, 1)).reshape(R, N, T)
        nrm = (c * self.Hc).reshape(R, NT).sum(-1).clamp_(min=0.0).sqrt_()  # ||G||_F (scaled by exp(-ls))
        self.nrm = self.rec.check(k, nrm, log_scale=None if self.ngd else self.ls,
                                  exact=lambda: token_norm(c, self.H, self._symmetric()))

    def _symmetric(self):
        """Whether :func:`token_norm` may form ``c^T H`` as ``H c`` (H bitwise symmetric, NT^2 < 400); checked once."""
        if self.sym is None:
            self.sym = self.NT * self.NT < 400 and torch.equal(self.H, self.H.transpose(1, 2))
        return self.sym

    def record(self):
        R, N, d = self.R, self.N, self.d
        U = torch.bmm(self.XbT, self.acc.reshape(R * N, self.T, 1)).reshape(R, N, d)
        self.put(true_norms(self.nrm, self.ls), {"W": self.W0 - torch.bmm(U.transpose(1, 2), self.Z)})

    def update(self, k):
        ls, lr, R = self.ls, self.lr, self.R
        if self.ngd:
            fac = (lr / (self.nrm + ngd_eps(self.eps, ls))).reshape(R, 1, 1)
        else:  # the true gradient is finite here (checked above)
            fac = lr if ls is None else (lr * torch.exp(ls)).reshape(R, 1, 1)
        self.a.sub_(self.Hc.mul_(fac))
        self.acc.add_(self.c.mul_(fac))


class DirectWKernel(_FusedKernel):
    """W updated in place with ``G = sum_i u_i z_i^T`` from a few batched products per step."""

    def __init__(self, data, params, head, cfg):
        super().__init__(data, params, head, cfg)
        self.W = params["W"]
        self.G = torch.empty_like(self.W)

    def gradient(self, k):
        R, N, T, d = self.R, self.N, self.T, self.d
        s, top = softmax_top(token_logits(self.Xb, torch.bmm(self.Z, self.W.transpose(1, 2)), R, N, T, d, self.hidden))
        self.s = s
        self.u, c, self.ls = self.weights(s, top)
        U = torch.bmm(self.XbT, c.reshape(R * N, T, 1)).reshape(R, N, d)
        torch.bmm(U.transpose(1, 2), self.Z, out=self.G)  # sum_i u_i z_i^T
        self.nrm = self.rec.check(k, _run_norm(self.G, (R,)), log_scale=None if self.ngd else self.ls,
                                  exact=lambda: robust_norm(self.G))

    def record(self):
        self.put(true_norms(self.nrm, self.ls), self.params)

    def update(self, k):
        ls = self.ls
        if self.ngd:
            self.W.addcdiv_(self.G, self.nrm.add_(ngd_eps(self.eps, ls)).reshape(self.R, 1, 1), value=-self.lr)
        else:
            self.W.add_(apply_log_scale(self.G, ls), alpha=-self.lr)


class DirectKQKernel(_FusedKernel):
    """(K, Q) in one (2, R, d, m) tensor so that the update is one set of ops; ``Q^T z`` is reused for
    ``grad_K = U^T Z Q`` and ``K Q^T`` is formed only at the records."""

    def __init__(self, data, params, head, cfg):
        super().__init__(data, params, head, cfg)
        self.ridge = cfg.ridge
        self.KQ = KQ = torch.stack([params["K"], params["Q"]])
        params["K"], params["Q"] = self.K, self.Q = KQ[0], KQ[1]
        self.g = torch.empty_like(KQ)
        self.gK, self.gQ = self.g[0], self.g[1]
        self.Zt = self.Z.transpose(1, 2).contiguous()

    def gradient(self, k):
        R, N, T, d, K = self.R, self.N, self.T, self.d, self.K
        self.ZQ = ZQ = torch.bmm(self.Z, self.Q)  # rows Q^T z_i
        s, top = softmax_top(token_logits(self.Xb, torch.bmm(ZQ, K.transpose(1, 2)), R, N, T, d, self.hidden))
        self.s = s
        self.u, c, self.ls = self.weights(s, top)
        self.U = U = torch.bmm(self.XbT, c.reshape(R * N, T, 1)).reshape(R, N, d)
        torch.bmm(U.transpose(1, 2), ZQ, out=self.gK)  # G Q = U^T Z Q
        torch.bmm(self.Zt, torch.bmm(U, K), out=self.gQ)  # G^T K = Z^T U K
        self.plain = _run_norm(self.g, (2, R))
        # loss gradient in K or in Q nonzero; NGD uses the direction, GD the true norms
        self.nrm = self.rec.check(k, self.plain, log_scale=None if self.ngd else self.ls,
                                  exact=lambda: robust_norm(self.g, 2))

    def record(self):
        GW = torch.bmm(self.U.transpose(1, 2), self.Z)
        self.put(true_norms(norm_at_record(GW, _run_norm(GW, (self.R,))), self.ls), self.params)

    def update(self, k):
        g, KQ, ls, R, nrm, lr = self.g, self.KQ, self.ls, self.R, self.nrm, self.lr
        if self.ridge:
            if ls is None:
                g.add_(KQ, alpha=2.0 * self.ridge)
            else:  # the ridge gradient in the units of the scaled loss gradient
                g.add_(KQ * (2.0 * self.ridge * torch.exp(-ls)).reshape(1, R, 1, 1))
            if self.ngd:  # the robust norm only where the plain one needed correcting
                nrm = _run_norm(g, (2, R)) if nrm is self.plain else robust_norm(g, 2)
        if self.ngd:
            e = self.eps if ls is None else ngd_eps(self.eps, ls).reshape(1, R)
            KQ.addcdiv_(g, nrm.add_(e).reshape(2, R, 1, 1), value=-lr)
        elif ls is None:
            KQ.add_(g, alpha=-lr)
        else:
            KQ.add_(apply_log_scale(g.transpose(0, 1), ls).transpose(0, 1), alpha=-lr)
