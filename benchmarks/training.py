"""Benchmark: the batched training engine against a research-notebook-style per-run loop.

Workload (transformers-as-svms E2, local convergence): 100 runs, n=6, T=8, d=10,
2000 normalized-GD steps (lr 0.1), random data of seed = run index, for the W and
the (K, Q) parameterizations.

(a) ``attnsvm.train`` on all runs at once.
(b) The notebooks' way: one ``nn.Module`` per run, ``torch.optim.SGD``, the gradient
    normalized in place, the combined W copied to numpy at every step, logistic loss
    ``log(1 + exp(-Y f))``. To keep the benchmark short, (b) is timed on
    ``--reference-runs`` runs and extrapolated linearly to all runs (printed).

Usage: python benchmarks/training.py [--runs 100] [--steps 2000] [--reference-runs 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from attnsvm.train import train as attnsvm_train
from attnsvm.generators import random_problem

EPS = float(np.finfo(np.float64).eps)


class _NotebookAttn(torch.nn.Module):
    """The research code's SelfAttn (cross-attention, value = identity, frozen head v)."""

    def __init__(self, d, univariate):
        super().__init__()
        self.univariate = univariate
        if univariate:
            self.W = torch.nn.Linear(d, d, bias=False)
        else:
            self.key = torch.nn.Linear(d, d, bias=False)
            self.query = torch.nn.Linear(d, d, bias=False)
        self.v = torch.nn.Parameter(torch.randn(d) * 0.01)

    def forward(self, X, Z):
        if self.univariate:
            a = torch.einsum("ntd,nd->nt", X, self.W(Z))
        else:
            a = torch.einsum("ntm,nm->nt", self.key(X), self.query(Z))
        s = torch.softmax(a, dim=-1)
        self.sfx_out = s
        return torch.einsum("nt,ntd->nd", s, X) @ self.v


def reference_run(problem, univariate, steps, lr=0.1):
    """One run, the notebooks' way; returns the list of W iterates (numpy)."""
    d = problem.d
    model = _NotebookAttn(d, univariate).double()
    X = torch.tensor(problem.X)
    Z = torch.tensor(problem.Z)
    Y = torch.tensor(problem.Y)
    with torch.no_grad():
        model.v.copy_(torch.tensor(problem.v))
    params = [model.W.weight] if univariate else [model.key.weight, model.query.weight]
    opt = torch.optim.SGD(params, lr=lr)
    Ws = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(X, Z)
        loss = torch.log(1 + torch.exp(-Y * out)).mean()
        if not univariate:
            loss = loss + EPS * (model.key.weight.norm() ** 2 + model.query.weight.norm() ** 2)
        loss.backward()
        for p in params:
            p.grad /= p.grad.norm() + EPS
        opt.step()
        if univariate:
            Ws.append(model.W.weight.detach().T.numpy().copy())
        else:
            Ws.append(model.query.weight.T.mm(model.key.weight).T.detach().numpy().copy())
    return Ws


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--reference-runs", type=int, default=5, help="runs of the per-run loop actually timed (extrapolated)")
    ap.add_argument("--record-every", type=int, default=10)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    R, S = args.runs, args.steps
    problems = [random_problem(6, 8, 10, seed=s, rng="torch") for s in range(R)]
    print(f"workload: {R} runs x {S} normalized-GD steps, n=6, T=8, d=10, float64, 1 torch thread")
    for param, univariate in (("W", True), ("KQ", False)):
        attnsvm_train(problems[:2], param=param, steps=5)  # warm-up
        t0 = time.perf_counter()
        res = attnsvm_train(problems, param=param, steps=S, lr=0.1, optimizer="ngd", record_every=args.record_every)
        t_batched = time.perf_counter() - t0
        k = max(1, min(args.reference_runs, R))
        t0 = time.perf_counter()
        for r in range(k):
            torch.manual_seed(r)
            reference_run(problems[r], univariate, S)
        t_ref_k = time.perf_counter() - t0
        t_ref = t_ref_k / k * R
        rate_b = R * S / t_batched
        rate_r = k * S / t_ref_k
        print(f"[{param}] batched engine : {t_batched:8.2f} s  {rate_b:12.0f} runs x steps / s"
              f"  (final mean max-softmax {res.softmax[:, -1].max(-1).mean():.4f})")
        print(f"[{param}] per-run loop   : {t_ref:8.2f} s  {rate_r:12.0f} runs x steps / s"
              f"  (EXTRAPOLATED from {k} of {R} runs measured in {t_ref_k:.2f} s)")
        print(f"[{param}] speed-up       : {t_ref / t_batched:8.1f}x")


if __name__ == "__main__":
    main()
