"""The nuclear interior-point method's dense algebra on a torch device (``device=`` of the nuclear solvers).

Per iteration the IPM of :mod:`attnsvm.svm.ipm` builds the N x N Schur complement (two N x N x r
products and a few N x N elementwise products, :meth:`attnsvm.svm.ipm.Problem.schur`), factors it
(Cholesky) and solves two Newton systems with the factor; at thousands of rows that is nearly all of
its time. :class:`TorchNewton` runs exactly these steps through torch on a device (``"cuda"``, or
``"cpu"`` for tests), in float64: the Schur complement is the *same* formula, ``Problem.schur`` called on
a view of the reduced problem whose arrays are torch tensors on the device (:class:`_DeviceProblem`);
only the N-vectors of the Newton systems travel back. Everything else (the small r x r algebra, the
step lengths, the stopping test, the clean-up, the certificate) stays in numpy, so the result is
certified exactly as on the default path.

This is the only module below the training layer that imports torch, and only when a device is asked
for (``import attnsvm`` and the default solvers never load it: tests/test_torch_free.py).
"""

from __future__ import annotations

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.svm.ipm import Problem

__all__ = ["TorchNewton", "check_device"]


def _torch():
    try:
        import torch
    except ImportError as exc:        # torch is an optional dependency of the solvers
        raise ValidationError("device=... runs the nuclear solver through torch, which is not installed "
                              "(pip install torch); use device=None for the numpy / scipy path") from exc
    return torch


def check_device(device):
    """``device`` (a string such as "cuda", "cuda:0", "cpu", or a ``torch.device``) as a usable
    ``torch.device``; ValidationError naming ``device`` when it is malformed or not available."""
    torch = _torch()
    if not isinstance(device, (str, torch.device)):
        raise ValidationError(f"device must be None, a string such as 'cuda' or 'cpu', or a torch.device; "
                              f"got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValidationError(f"device must name a torch device such as 'cuda' or 'cpu', got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValidationError(f"device={device!r}: no CUDA device is available to torch here "
                              "(use device=None for the numpy / scipy path, or 'cpu')")
    if dev.type not in ("cpu", "cuda"):
        raise ValidationError(f"device must be a 'cpu' or 'cuda' torch device, got {device!r}")
    return dev


class _DeviceProblem(Problem):
    """The arrays of a reduced :class:`~attnsvm.svm.ipm.Problem` that :meth:`Problem.schur` reads,
    as float64 tensors on ``dev``; the column and row expansions by the query index in torch."""

    def __init__(self, pb: Problem, dev):
        torch = _torch()
        self.torch, self.dev = torch, dev
        t = self.tensor
        self.N, self.r1, self.r2 = pb.N, pb.r1, pb.r2
        self.A, self.Bm = t(pb.A), t(pb.Bm)
        self.Bq = self.qidx = None
        if pb.qidx is not None:
            self.Bq = t(pb.Bq)
            self.qidx = torch.as_tensor(np.asarray(pb.qidx, np.int64), device=dev)

    def tensor(self, a):
        return self.torch.as_tensor(np.ascontiguousarray(a, dtype=np.float64), device=self.dev)

    @staticmethod
    def transposed(F):
        return F.T.contiguous()

    def take_rows(self, F, idx):
        return F.index_select(0, idx)

    def take_cols(self, F, idx):
        return F.index_select(1, idx)


class TorchNewton:
    """Newton backend of :func:`attnsvm.svm.ipm.nuclear_ipm` (its ``backend`` argument; the interface:
    :class:`attnsvm.svm.ipm.problem.NumpyNewton`): the Schur complement, its Jacobi-scaled Cholesky factorization
    and the Newton solves on the torch device ``device``.

    The factorization mirrors :func:`attnsvm.svm.ipm.factor_lower`: Jacobi scaling, Cholesky, a
    growing diagonal shift (1e-14, then x99) while the factorization fails, and an eigenvalue solve as the
    last resort. The reduced problem's arrays go to the device once per problem (again when the problem changes).
    """

    def __init__(self, device):
        self.dev = check_device(device)
        self.name = str(self.dev)
        self._pb = self._dp = None

    def solver(self, pb: Problem, x, du, diag):
        """Solver of ``(M + diag(diag)) dlam = r`` at the iterate ``x`` of ``pb`` on the device: a function of
        ``r (N,)`` returning ``dlam (N,)`` (numpy arrays both)."""
        if self._pb is not pb:
            self._dp = None                           # the old problem's device arrays go before the new ones
            self._pb, self._dp = pb, _DeviceProblem(pb, self.dev)
        return self._solver(self._dp, x, du, diag)

    def _solver(self, dp: _DeviceProblem, x, du, diag):
        torch, t = dp.torch, dp.tensor
        # A C only where the Schur complement reads it (without the distinct queries): else it is never formed
        dut = _DualView(t(du.AC) if dp.qidx is None else None, t(du.G), t(du.Si), t(du.C), t(du.Zh))
        M = Problem.schur(dp, t(x.X11), t(x.X12), t(x.X22), dut)
        M.diagonal().add_(t(diag))
        dg = M.diagonal().clone()
        dg[~(dg > 0)] = 1.0
        sc = dg.rsqrt()
        M *= sc[:, None]
        M *= sc[None, :]
        reg = 0.0
        for _ in range(8):
            if reg:
                M.diagonal().add_(reg)
            F, info = torch.linalg.cholesky_ex(M)
            if int(info) == 0 and bool(torch.isfinite(F).all()):
                del M

                def solve(r):
                    y = torch.cholesky_solve((sc * t(r))[:, None], F)[:, 0]
                    return (sc * y).cpu().numpy()

                return solve
            reg = 1e-14 if reg == 0 else reg * 99
        w, Q = torch.linalg.eigh(M)
        cut = 1e-13 * max(float(w.max()), 1e-300)
        winv = torch.where(w > cut, 1.0 / torch.clamp(w, min=cut), torch.zeros_like(w))
        del M

        def solve_eig(r):
            return (sc * (Q @ (winv * (Q.T @ (sc * t(r)))))).cpu().numpy()

        return solve_eig


class _DualView:
    """The dual quantities :meth:`Problem.schur` reads (``AC`` (None on the distinct queries, where it is not
    read), ``G``, ``Si``, ``C``, ``Zh``), as device tensors."""

    def __init__(self, AC, G, Si, C, Zh):
        self.AC, self.G, self.Si, self.C, self.Zh = AC, G, Si, C, Zh
