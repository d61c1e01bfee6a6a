"""The interior-point method's per-iteration trace (DEBUG level, silent by default)."""

from __future__ import annotations

import logging

import numpy as np


#: the per-iteration trace (DEBUG level, silent by default): every record carries a dict ``record.ipm`` with
#: ``kind`` "iterate" (``N``, ``mu``, ``gap``, ``viol``, ``rp`` the largest primal residual ``|a_k^T X12 b_k - s_k -
#: rhs_k|``), "step" (``sigma``, ``mu_aff`` the affine-scaling mu, the bounds ``ap_max``, ``ad_max``, the slacks' part
#: ``ap_lp >= ap_max`` of the primal one, and the steps taken ``ap``, ``ad``) or, from :mod:`attnsvm.svm.barrier_grow`,
#: "join" / "drop" (``rows`` moved, ``N`` after); ``benchmarks/nuclear_steps.py --trace`` prints it
_log = logging.getLogger("attnsvm.svm.barrier")


def tracing() -> bool:
    """Whether the trace (:data:`_log`) is on: its fields are computed only then."""
    return _log.isEnabledFor(logging.DEBUG)


def trace(kind: str, **fields) -> None:
    """One record of the trace (see :data:`_log`)."""
    _log.debug("%s %s", kind, fields, extra={"ipm": dict(fields, kind=kind)})


def trace_iterate(pb, x, mu: float, gap: float, viol: float) -> None:
    """The trace's "iterate" record (see :data:`_log`)."""
    r = pb.amap(x.X12) - pb.rhs
    r[pb.I] -= x.s
    trace("iterate", N=int(pb.N), mu=mu, gap=gap, viol=viol, rp=float(np.max(np.abs(r))) if r.size else 0.0)

