"""Profile one null head's nuclear Gen-SVM of the probe: where its seconds go (issue 39's cost).

Usage: python benchmarks/probe_null_profile.py [--m 512] [--kind sink] [--layer 3] [--head 0] [--top 35]

Builds the probe's inputs for MiniLM's layer ``--layer`` on the first ``--m`` corpus sentences (as
``attnsvm probe --n-sentences M --svm-sentences M`` does), draws null 0 of ``--kind`` for head ``--head`` and solves
its SVM under cProfile; prints the setup and solve seconds, the status and the null's corr_restricted, then the
profile's ``--top`` entries by cumulative time. Measured on 2026-12-07 (m = 512, sink, head 0, the shared 2-core
machine): the step-length bisection's Cholesky tests (``ipm/steps.lmi_step``) 20% of the solve, the Schur
complement's factorization (``ipm/linalg.factor_lower``) 28%, its assembly (``ipm/problem.schur_block`` and
``schur_parts``) 16%, the singular values 6%.
Needs the real extra: pip install 'attnsvm[real]'.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--kind", default="sink")
    ap.add_argument("--layer", type=int, default=3)
    ap.add_argument("--head", type=int, default=0)
    ap.add_argument("--top", type=int, default=35)
    args = ap.parse_args(argv)
    from attnsvm.real.nulls import null_heads
    from attnsvm.real.probe import solver_options
    from attnsvm.real.probe_config import probe_config
    from attnsvm.real.probe_steps import head_selections
    from attnsvm.real.probe_tasks import setup_of, svm_inputs

    config = probe_config(layers=[args.layer], heads=[args.head], n_sentences=args.m, svm_sentences=args.m,
                          null_draws=1)
    t = time.perf_counter()
    setup = setup_of(config)
    _, sel = head_selections(setup, args.layer)
    inp = svm_inputs(setup, args.layer, args.m)
    print(f"setup and inputs {time.perf_counter() - t:.1f} s", flush=True)
    W = setup.model.head_weights(args.layer, args.head)
    sizes = sel[0][:args.m].sum(axis=1)
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    out = null_heads(inp, W, sizes, seed=0, layer=args.layer, head=args.head, draws=1, kind=args.kind,
                     threshold=setup.threshold, **solver_options())
    prof.disable()
    print(f"{args.kind} null {time.perf_counter() - t:.1f} s: {out[0]['status']}, corr_restricted "
          f"{out[0]['corr_restricted']:.6f}")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
