"""Shared start of the real-model benchmarks: offline Hugging Face, and ``threads`` threads for BLAS and torch.

Call :func:`offline_threads` before anything imports numpy's BLAS or transformers.
"""

import os


def offline_threads(threads: int) -> None:
    """No hub access, and ``threads`` threads for BLAS (threadpoolctl) and torch."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(threads)
