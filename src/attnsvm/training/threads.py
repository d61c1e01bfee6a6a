"""Torch's intra-op thread count, set for the duration of a call and restored after it (no global side effect)."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from attnsvm.errors import ValidationError


def check_threads(threads) -> int | None:
    """None (leave torch's setting alone) or an integer >= 1; else ValidationError naming ``threads``."""
    if threads is None:
        return None
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValidationError(f"threads must be None or an integer >= 1, got {threads!r}")
    return int(threads)


@contextmanager
def torch_threads(threads: int | None):
    """Run the body with ``torch.set_num_threads(threads)``, then restore the previous count.

    ``threads=None`` changes nothing. Validates ``threads`` (see :func:`check_threads`).
    """
    threads = check_threads(threads)
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
