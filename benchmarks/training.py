"""Benchmark: the batched training engine against a research-notebook-style per-run loop.

Workload (transformers-as-svms E2, local convergence): 100 runs, n=6, T=8, d=10,
2000 normalized-GD steps (lr 0.1), random data of seed = run index, for the W and
the (K, Q) parameterizations.

(a) ``attnsvm.training.train`` on all runs at once.
(b) The notebooks' way: one ``nn.Module`` per run, ``torch.optim.SGD``, the gradient
    normalized in place, the combined W copied to numpy at every step, logistic loss
    ``log(1 + exp(-Y f))``. To keep the benchmark short, (b) is timed on
    ``--reference-runs`` runs and extrapolated linearly to all runs (printed).

(c) The multi-token (ReLU head) workload of transformers-as-svms E5: n=3, T=4, d=10,
    ``h(a) = 1^T ReLU(V^T a)``, W-parameterization, 2000 NGD steps, recorded every 100
    steps, instances ``relu_head_instance(3, 4, 10, seed)``. The closed-form head engine
    (default since the token-form heads) is timed at several batch sizes; the autograd
    engine (the default for nonlinear heads before) is timed on ``--relu-autograd-steps``
    steps of the first batch size and extrapolated linearly (its cost per step is constant).

(d) Lean path: one run (n=6, T=8, d=10, 2000 NGD steps) and ``--runs`` batched runs, W and KQ,
    "before" = the torch loops forced (``attnsvm.training.engine.LEAN_PATH = False``), "after" = the
    automatic choice (the numpy loop of ``attnsvm.training.lean`` for the single run). Both measured
    in the same process, best of ``--repeat``; the ratio is before / after.

Usage: python benchmarks/training.py [--runs 100] [--steps 2000] [--reference-runs 5]
       [--relu-runs 800,2000,5000] [--relu-autograd-steps 200] [--sections W,KQ,relu,lean] [--repeat 5]

``--sections lean`` prints only (d).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import attnsvm.training.engine as engine
from attnsvm.generators import random_problem, relu_head_instance
from attnsvm.training.models import ReLUHead
from attnsvm.training.train import train as attnsvm_train

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


def relu_section(batch_sizes, steps, autograd_steps):
    """(c): run-steps/s of the ReLU-head workload, closed-form head engine vs autograd engine."""
    n, T, d = 3, 4, 10
    R_max = max(batch_sizes)
    pairs = [relu_head_instance(n, T, d, seed) for seed in range(1, R_max + 1)]
    problems = [p for p, _ in pairs]
    V = np.stack([v for _, v in pairs])

    def run(R, S, engine):
        return attnsvm_train(problems[:R], param="W", head=ReLUHead(V[:R]), seed=list(range(1, R + 1)), steps=S,
                             lr=0.1, optimizer="ngd", record_every=100, engine=engine)

    print(f"workload (c): ReLU head h(a) = 1^T ReLU(V^T a), n={n}, T={T}, d={d}, W, {steps} NGD steps, "
          "record every 100,"
          " float64, 1 torch thread")
    run(8, 5, "autograd"), run(8, 5, "auto")  # warm-up
    R0 = batch_sizes[0]
    S_ag = max(1, min(autograd_steps, steps))
    t0 = time.perf_counter()
    ag = run(R0, S_ag, "autograd")
    t_ag = time.perf_counter() - t0
    rate_ag = R0 * S_ag / t_ag
    print(f"[ReLU] autograd engine (before), {R0:5d} runs: {t_ag / S_ag * steps:8.2f} s  "
          f"{rate_ag:12.0f} runs x steps / s"
          f"  (EXTRAPOLATED from {S_ag} of {steps} steps measured in {t_ag:.2f} s)")
    for R in batch_sizes:
        t0 = time.perf_counter()
        res = run(R, steps, "auto")
        t = time.perf_counter() - t0
        rate = R * steps / t
        print(f"[ReLU] closed-form engine,     {R:5d} runs: {t:8.2f} s  {rate:12.0f} runs x steps / s"
              f"  ({rate / rate_ag:5.1f}x the autograd rate; "
              f"final mean max-softmax {res.softmax[:, -1].max(-1).mean():.4f})")
    short = run(R0, S_ag, "auto")
    diff = np.abs(short.W[:, -1] - ag.W[:, -1]).max() / np.abs(ag.W[:, -1]).max()
    print(f"[ReLU] closed-form vs autograd after {S_ag} steps ({R0} runs): max |W difference| / max |W| = {diff:.1e}")


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def lean_section(problems, steps, repeat):
    """(d): single run and batched runs, torch loops forced (before) vs automatic choice (after)."""
    R = len(problems)
    print(f"workload (d): n=6, T=8, d=10, {steps} NGD steps (lr 0.1), record every 10, float64, 1 torch thread;"
          f" best of {repeat}")
    print(f"{'case':24s} {'before (torch)':>15s} {'after (auto)':>14s} {'ratio':>7s}  max |W diff| / max |W|")
    for param in ("W", "KQ"):
        for label, probs in ((f"1 run, {param}", problems[0]), (f"{R} runs, {param}", problems)):
            def go():
                return attnsvm_train(probs, param=param, steps=steps, lr=0.1, optimizer="ngd", record_every=10)
            times, results = [], []
            for lean in (False, True):
                engine.LEAN_PATH = lean
                try:
                    go()  # warm-up
                    times.append(_best(go, repeat))
                    results.append(go())
                finally:
                    engine.LEAN_PATH = True
            a, b = results[0].W[:, -1], results[1].W[:, -1]
            diff = np.abs(a - b).max() / np.abs(a).max()
            print(f"[lean] {label:17s} {times[0]:13.4f} s {times[1]:12.4f} s {times[0] / times[1]:6.1f}x  {diff:.1e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--reference-runs", type=int, default=5,
                    help="runs of the per-run loop actually timed (extrapolated)")
    ap.add_argument("--record-every", type=int, default=10)
    ap.add_argument("--relu-runs", default="800,2000,5000", help="batch sizes of the ReLU-head workload (c)")
    ap.add_argument("--relu-autograd-steps", type=int, default=200,
                    help="steps of the autograd engine actually timed in (c)")
    ap.add_argument("--sections", default="W,KQ,relu,lean", help="comma-separated subset of W, KQ, relu, lean")
    ap.add_argument("--repeat", type=int, default=5, help="timings of (d) are the best of this many")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sections = {x.strip() for x in args.sections.split(",")}
    R, S = args.runs, args.steps
    problems = [random_problem(6, 8, 10, seed=s, rng="torch") for s in range(R)]
    if sections & {"W", "KQ"}:
        print(f"workload: {R} runs x {S} normalized-GD steps, n=6, T=8, d=10, float64, 1 torch thread")
    for param, univariate in (("W", True), ("KQ", False)):
        if param not in sections:
            continue
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
    if "lean" in sections:
        lean_section(problems, S, args.repeat)
    if "relu" in sections:
        relu_section([int(x) for x in args.relu_runs.split(",")], S, args.relu_autograd_steps)


if __name__ == "__main__":
    main()
