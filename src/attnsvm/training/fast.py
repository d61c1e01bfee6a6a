"""Fast training loops: GD / normalized GD with closed-form gradients, frozen head, param W or KQ.

* W with few tokens in all (``n T`` small) runs in *token space*: since every gradient
  is ``G = sum_it c_it x_it z_i^T``, the logits move by ``-lr' H c`` with the fixed
  matrix ``H[(i,t),(j,u)] = (x_it^T x_ju)(z_i^T z_j)`` and ``||G||^2 = c^T H c``; W is
  rebuilt from the accumulated ``c`` only at the recorded steps. Same iterates as the
  W-space update up to rounding (~1e-13 relative after 2000 steps).
* KQ (and W with many tokens) updates the parameters with a few batched products per
  step (``Q^T z`` reused for ``grad_K = U^T Z Q``, no ``K Q^T`` except at records).

The per-token weights ``c`` come from the softmax kernel (:class:`attnsvm.training.kernel._Weights`).
"""

from __future__ import annotations

import torch

from attnsvm.training.checks import _resolve_engine
from attnsvm.training.kernel import _logits, _softmax_top, _token_norm, _Weights
from attnsvm.training.losses import apply_log_scale, margin_loss
from attnsvm.training.models import token_form
from attnsvm.training.ops import DTYPE
from attnsvm.training.optim import _ngd_eps, _norm_at_record, _true_norms, robust_norm
from attnsvm.training.recorder import _Recorder


#: token-space W loop: at most this many tokens n*T in all, and R * (n T)^2 entries of H
TOKEN_SPACE_MAX_TOKENS = 64
TOKEN_SPACE_MAX_ENTRIES = 2**24


def _fast_kind(data, param, head, loss, train_v, engine, optimizer, bitwise):
    """'tokens' / 'direct' when a fast loop applies, else None (generic loop)."""
    if bitwise or train_v or param not in ("W", "KQ") or optimizer not in ("gd", "ngd") or data.queries is None:
        return None
    if _resolve_engine(engine, head, loss, train_v) != "closed":
        return None
    R, N, T, _ = data.X.shape
    if param == "W" and N * T <= TOKEN_SPACE_MAX_TOKENS and R * (N * T) ** 2 <= TOKEN_SPACE_MAX_ENTRIES:
        return "tokens"
    return "direct"


def _fast_loop(kind, data, params, head, loss, *, param, steps, lr, optimizer, eps, ridge, cps, seeds=None):
    """GD / NGD with closed-form gradients and frozen head: token-space W loop or direct W / KQ loop.

    With the exponential loss the per-token weights come scaled by ``exp(-log_scale)`` per run: NGD
    steps along their (exact) direction, with eps scaled alike; GD multiplies them back.
    """
    X, Y, Z, mask = data.X.contiguous(), data.Y, data.queries.contiguous(), data.mask
    R, N, T, d = X.shape
    weights = _Weights(token_form(head, X, data.v), Y, mask, loss)
    Xb = X.reshape(R * N, T, d)
    XbT = Xb.transpose(1, 2).contiguous()  # (R N, d, T): U = X^T c as matrix-vector products (faster in MKL)
    hidden = None if mask is None else ~mask
    ngd = optimizer == "ngd"
    rec = _Recorder(steps, cps, R, N, T, params, False, seeds)

    def record(u, s, grad_norm, values):
        rec.put(margin_loss(u, loss).mean(-1), s, grad_norm, values)

    def run_norm_(g, shape):
        return torch.linalg.vector_norm(g.reshape(*shape, -1), dim=-1)

    with torch.no_grad():
        if kind == "tokens":
            W0 = params["W"]
            NT = N * T
            Xf = X.reshape(R, NT, d)
            H = torch.bmm(Xf, Xf.transpose(1, 2)).reshape(R, N, T, N, T)
            H = H.mul_(torch.bmm(Z, Z.transpose(1, 2)).reshape(R, N, 1, N, 1)).reshape(R, NT, NT)
            a = _logits(Xb, torch.bmm(Z, W0.transpose(1, 2)), R, N, T, d, hidden)
            # sum over steps of (step size) * c: W = W0 - sum_it acc_it x_it z_i^T
            acc = torch.zeros(R, N, T, dtype=DTYPE)
            # H is symmetric: H c = (c^T H)^T; MKL's batched kernels are much faster for c^T H once NT > 16
            row = NT > 16
            for k in range(steps + 1):
                s, top = _softmax_top(a)
                u, c, ls = weights(s, top)
                if row:
                    Hc = torch.bmm(c.reshape(R, 1, NT), H).reshape(R, N, T)
                else:
                    Hc = torch.bmm(H, c.reshape(R, NT, 1)).reshape(R, N, T)
                nrm = (c * Hc).reshape(R, NT).sum(-1).clamp_(min=0.0).sqrt_()  # ||G||_F (scaled by exp(-ls))
                nrm = rec.check(k, nrm, log_scale=None if ngd else ls, exact=lambda: _token_norm(c, H))
                if rec.want[k]:
                    U = torch.bmm(XbT, acc.reshape(R * N, T, 1)).reshape(R, N, d)
                    record(u, s, _true_norms(nrm, ls), {"W": W0 - torch.bmm(U.transpose(1, 2), Z)})
                if k == steps:
                    break
                if ngd:
                    fac = (lr / (nrm + _ngd_eps(eps, ls))).reshape(R, 1, 1)
                else:  # the true gradient is finite here (checked above)
                    fac = lr if ls is None else (lr * torch.exp(ls)).reshape(R, 1, 1)
                a.sub_(Hc.mul_(fac))
                acc.add_(c.mul_(fac))
            return rec.result()

        if param == "W":
            W = params["W"]
            G = torch.empty_like(W)
            for k in range(steps + 1):
                s, top = _softmax_top(_logits(Xb, torch.bmm(Z, W.transpose(1, 2)), R, N, T, d, hidden))
                u, c, ls = weights(s, top)
                U = torch.bmm(XbT, c.reshape(R * N, T, 1)).reshape(R, N, d)
                torch.bmm(U.transpose(1, 2), Z, out=G)  # sum_i u_i z_i^T
                nrm = run_norm_(G, (R,))
                nrm = rec.check(k, nrm, log_scale=None if ngd else ls, exact=lambda: robust_norm(G))
                if rec.want[k]:
                    record(u, s, _true_norms(nrm, ls), params)
                if k == steps:
                    break
                if ngd:
                    W.addcdiv_(G, nrm.add_(_ngd_eps(eps, ls)).reshape(R, 1, 1), value=-lr)
                else:
                    W.add_(apply_log_scale(G, ls), alpha=-lr)
            return rec.result()

        # KQ: K and Q live in one (2, R, d, m) tensor so the update is one set of ops
        KQ = torch.stack([params["K"], params["Q"]])
        params["K"], params["Q"] = K, Q = KQ[0], KQ[1]
        g = torch.empty_like(KQ)
        gK, gQ = g[0], g[1]
        Zt = Z.transpose(1, 2).contiguous()
        for k in range(steps + 1):
            ZQ = torch.bmm(Z, Q)  # rows Q^T z_i
            s, top = _softmax_top(_logits(Xb, torch.bmm(ZQ, K.transpose(1, 2)), R, N, T, d, hidden))
            u, c, ls = weights(s, top)
            U = torch.bmm(XbT, c.reshape(R * N, T, 1)).reshape(R, N, d)
            torch.bmm(U.transpose(1, 2), ZQ, out=gK)  # G Q = U^T Z Q
            torch.bmm(Zt, torch.bmm(U, K), out=gQ)  # G^T K = Z^T U K
            plain = run_norm_(g, (2, R))
            # loss gradient in K or in Q nonzero; NGD uses the direction, GD the true norms
            nrm = rec.check(k, plain, log_scale=None if ngd else ls, exact=lambda: robust_norm(g, 2))
            if rec.want[k]:
                GW = torch.bmm(U.transpose(1, 2), Z)
                record(u, s, _true_norms(_norm_at_record(GW, run_norm_(GW, (R,))), ls), params)
            if k == steps:
                break
            if ridge:
                if ls is None:
                    g.add_(KQ, alpha=2.0 * ridge)
                else:  # the ridge gradient in the units of the scaled loss gradient
                    g.add_(KQ * (2.0 * ridge * torch.exp(-ls)).reshape(1, R, 1, 1))
                if ngd:  # the robust norm only where the plain one needed correcting
                    nrm = run_norm_(g, (2, R)) if nrm is plain else robust_norm(g, 2)
            if ngd:
                e = eps if ls is None else _ngd_eps(eps, ls).reshape(1, R)
                KQ.addcdiv_(g, nrm.add_(e).reshape(2, R, 1, 1), value=-lr)
            elif ls is None:
                KQ.add_(g, alpha=-lr)
            else:
                KQ.add_(apply_log_scale(g.transpose(0, 1), ls).transpose(0, 1), alpha=-lr)
        return rec.result()
