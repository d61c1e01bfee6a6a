"""token_norm's cheaper forms (the exact power-of-two ldexp, c^T H formed as H c for a bitwise symmetric H) give
the bits of its plain formula, and the token-space kernel's training results are those of the plain formula."""

import numpy as np
import pytest
import torch

import attnsvm.training.fast as fast
from attnsvm.generators import relu_head_instance
from attnsvm.training.kernel import token_norm
from attnsvm.training.ops import ldexp
from attnsvm.training.models import ReLUHead
from attnsvm.training.train import train


def _plain(c, H):
    """token_norm as first written: torch.ldexp and c^T H as a row-vector product."""
    R = c.shape[0]
    cf = c.reshape(R, 1, -1)
    e = torch.frexp(cf.abs().amax(-1)).exponent
    cs = torch.ldexp(cf, -e.unsqueeze(-1))
    q = torch.bmm(torch.bmm(cs, H), cs.transpose(1, 2)).reshape(R).clamp_(min=0.0)
    return torch.ldexp(q.sqrt_(), e.reshape(R))


@pytest.mark.parametrize("NT,d", [(4, 3), (12, 4), (12, 10), (16, 5)])
def test_token_norm_equals_its_plain_formula(NT, d):
    g = torch.Generator().manual_seed(NT * 100 + d)
    R = 400
    X = torch.randn(R, NT, d, generator=g, dtype=torch.float64)
    H = torch.bmm(X, X.transpose(1, 2))
    H = 0.5 * (H + H.transpose(1, 2))                      # bitwise symmetric (a BLAS X X^T need not be)
    scale = torch.pow(2.0, torch.randint(-700, 700, (R, 1, 1), generator=g).double())
    c = torch.randn(R, 1, NT, generator=g, dtype=torch.float64) * scale
    c[::5] = 0.0                                           # saturated runs
    c[1::5, 0, : NT // 2] *= 2.0 ** -300                   # entries far below the largest: subnormal when scaled
    c[2, 0, 0] = 1e-310                                    # a run whose largest entry is subnormal (|e| > 1000)
    c[2, 0, 1:] = 0.0
    ref = _plain(c, H)
    assert torch.equal(token_norm(c, H, symmetric=True), ref)
    assert torch.equal(token_norm(c, H), ref)
    assert ref[2] > 0 and bool((ref[::5] == 0).all())


def test_the_symmetric_form_needs_a_bitwise_symmetric_h():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(300, 12, 4, generator=g, dtype=torch.float64)
    H = torch.bmm(X, X.transpose(1, 2))
    H = 0.5 * (H + H.transpose(1, 2)) + torch.triu(torch.full_like(H, 1e-3), 1)       # not symmetric
    c = torch.randn(300, 3, 4, generator=g, dtype=torch.float64)
    assert torch.equal(token_norm(c, H), _plain(c, H))
    assert not torch.equal(token_norm(c, H, symmetric=True), _plain(c, H))


def test_ldexp_equals_torch_ldexp():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(20000, dtype=torch.float64, generator=g) * torch.pow(2.0, torch.randint(-400, 400, (20000,),
                                                                                             generator=g).double())
    for lo, hi in [(-1000, 1001), (-1100, 1100)]:          # the exact-power path, and beyond it (torch.ldexp)
        e = torch.randint(lo, hi, (20000,), generator=g, dtype=torch.int32)
        out = ldexp(x, e)
        assert torch.equal(out, torch.ldexp(x, e))
    assert bool(((out != 0) & (out.abs() < 2.0 ** -1022)).any())   # subnormal results among them
    assert bool(torch.isinf(out).any())


def test_training_with_saturated_runs_equals_the_plain_token_norm(monkeypatch):
    """Runs of tf-multi-token's kind (ReLU head, d = 4; NGD, whose step uses the exact norms) with runs that
    saturate, so that the exact norms are recomputed at most steps: the same bits as with the plain formula."""
    pairs = [relu_head_instance(3, 4, 4, s) for s in range(1, 121)]
    keep = [k for k, (p, _) in enumerate(pairs) if not np.all(p.Y > 0)]
    problems = [pairs[k][0] for k in keep]
    V = np.stack([pairs[k][1] for k in keep])
    kw = dict(param="W", head=ReLUHead(V), seed=keep, steps=600, lr=0.1, record_every=100)
    calls = []

    def spy(c, H, symmetric=False):
        calls.append(symmetric)
        return token_norm(c, H, symmetric)

    monkeypatch.setattr(fast, "token_norm", spy)
    new = train(problems, **kw)
    monkeypatch.setattr(fast, "token_norm", lambda c, H, symmetric=False: _plain(c, H))
    old = train(problems, **kw)
    assert len(calls) > 100 and all(calls)                  # the symmetric form ran, at most steps
    assert bool(new.saturated.any())
    for name in ("W", "softmax", "loss", "grad_norm", "saturated", "saturated_step"):
        a, b = getattr(new, name), getattr(old, name)
        assert np.array_equal(np.asarray(a), np.asarray(b)), name
