"""Seeded instance generators: the papers' random model and their hand-built instances.

Every generator returns a :class:`~attnsvm.problem.TokenProblem` and depends only on
its arguments. ``rng="numpy"`` (default of :func:`random_problem`) uses numpy's PCG64
stream, identical on every machine. ``rng="torch"`` replays the official research
code draw for draw (``torch.Generator`` seeded with ``seed``, draws v, Y, X, Z in
float32, then cast to float64), so seed k is the notebooks' run k; torch's CPU
generator is also machine independent.

Hand-built instances (exact numbers from the specs):

* ``tf_visualization1`` / ``tf_visualization2``: the 2-D pictures of
  "Transformers as SVMs" (E1).
* ``mm_single_input``: single input, global or local data (max-margin E1).
* ``mm_multi_input``: three inputs, seed 0 (max-margin E2).
* ``mm_joint``: joint (v, p) training, tight or relaxed data (max-margin E3).
* ``mm_loss``: the loss-function comparison with parameter C (max-margin E4).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from attnsvm.errors import ValidationError
from attnsvm.memory import require_memory
from attnsvm.problem import TokenProblem


def _check_size(value, name: str, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def _check_seed(seed) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValidationError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


def _unit_rows(A: np.ndarray) -> np.ndarray:
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


#: below this many bytes an instance is not checked against the default memory limit: reading the available
#: memory costs a sizeable share of drawing a small instance, and experiments draw thousands (the timing:
#: docs/guide/performance.md, "Design decisions outside svm/ and their measurements")
_UNCHECKED_BYTES = 1 << 28


def _require_memory(nbytes: float, what: str, max_memory) -> None:
    if max_memory is not None or nbytes > _UNCHECKED_BYTES:
        require_memory(nbytes, what, max_memory)


def random_problem(n: int, T: int, d: int, seed: int = 0, *, mode: str = "cross", rng: str = "numpy",
                   max_memory=None) -> TokenProblem:
    """The papers' random model ("RD").

    Head ``v`` and every token ``x_it`` and query ``z_i`` are standard Gaussian
    vectors normalized to unit norm; labels are +-1 with probability 1/2. The
    optimal tokens follow from the scores ``Y_i v^T x_it``.

    Parameters
    ----------
    n, T, d : int
        Samples (>= 1), tokens per sample (>= 2), dimension (>= 1).
    seed : int >= 0
    mode : {"cross", "self"}
        Cross-attention with random queries Z (n, d), or self-attention with the
        first token as the query (``query_index = 0``; no Z is drawn).
    rng : {"numpy", "torch"}
        Random stream; "torch" reproduces the official notebooks' instances.
    max_memory : int or str, optional
        Memory limit (default: the package's, :mod:`attnsvm.memory`): an instance whose arrays would need more
        raises :class:`~attnsvm.errors.ResourceLimitError` before anything is drawn.

    Returns
    -------
    TokenProblem with X (n, T, d), Z (n, d) (cross), Y (n,), v (d,).
    """
    n, T, d = _check_size(n, "n", 1), _check_size(T, "T", 2), _check_size(d, "d", 1)
    seed = _check_seed(seed)
    # drawn, normalized and stored tokens and queries (float64; torch draws float32 first)
    _require_memory(24.0 * (n * T * d + n * d + n + d), f"a random instance of n={n}, T={T}, d={d}", max_memory)
    if mode not in ("cross", "self"):
        raise ValidationError(f"mode must be 'cross' or 'self', got {mode!r}")
    if rng == "numpy":
        gen = np.random.Generator(np.random.PCG64(seed))
        v = gen.standard_normal(d)
        Y = np.where(gen.standard_normal(n) > 0, 1.0, -1.0)
        X = gen.standard_normal((n, T, d))
        Z = gen.standard_normal((n, d)) if mode == "cross" else None
        v, X = _unit_rows(v), _unit_rows(X)
        Z = _unit_rows(Z) if Z is not None else None
    elif rng == "torch":
        import torch

        g = torch.Generator()
        g.manual_seed(seed)
        v_t = torch.randn(d, generator=g)
        v_t = v_t / torch.norm(v_t)
        Y_t = 2 * torch.ones(n) * (torch.randn(n, generator=g) > 0) - 1
        X_t = torch.randn((n, T, d), generator=g)
        X_t = X_t / torch.norm(X_t, dim=-1, keepdim=True)
        Z_t = torch.randn((n, d), generator=g)
        Z_t = Z_t / torch.norm(Z_t, dim=-1, keepdim=True)
        v, Y, X = v_t.double().numpy(), Y_t.double().numpy(), X_t.double().numpy()
        Z = Z_t.double().numpy() if mode == "cross" else None
    else:
        raise ValidationError(f"rng must be 'numpy' or 'torch', got {rng!r}")
    return TokenProblem(X, Z, query_index=None if mode == "cross" else 0, Y=Y, v=v,
                        name=f"rd(n={n},T={T},d={d},seed={seed},rng={rng})")


def _torch_gaussian(seed: int, shapes):
    import torch

    g = torch.Generator()
    g.manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


def tf_visualization1() -> TokenProblem:
    """E1 'visualization1': n=2, T=3, d=2, seed 1 (optimal tokens (0, 2))."""
    import torch

    n, T, d = 2, 3, 2
    v, X, Z = _torch_gaussian(1, [(d,), (n, T, d), (n, d)])
    v = v / v.norm()
    X = 0.3 * X
    X[0] += torch.tensor([-1.0, 0.0])
    X[1] += torch.tensor([1.0, 0.0])
    Z = Z / Z.norm(dim=-1, keepdim=True)
    return TokenProblem(X.double().numpy(), Z.double().numpy(), Y=np.ones(n), v=v.double().numpy(), name="tf-vis1")


def tf_visualization2() -> TokenProblem:
    """E1 'visualization2': n=2, T=5, d=2, seed 3 (optimal tokens (0, 0))."""
    import torch

    n, T, d = 2, 5, 2
    v, X, Z = _torch_gaussian(3, [(d,), (n, T, d), (n, d)])
    v = v / v.norm()
    X = 0.5 * X
    X[0, 0] = torch.tensor([1.0, 0.5])
    X[1, 0] = torch.tensor([1.0, -0.5])
    X[:, 1:] += torch.tensor([-1.0, 0.0])
    Z = Z / Z.norm(dim=-1, keepdim=True)
    return TokenProblem(X.double().numpy(), Z.double().numpy(), Y=np.ones(n), v=v.double().numpy(), name="tf-vis2")


_E3 = np.array([0.0, 0.0, 1.0])
_W_MASK = np.diag([1.0, 1.0, 0.0])


def mm_single_input(kind: str = "global") -> TokenProblem:
    """Max-margin E1: one input, T=3, d=3, v=e_3, W=diag(1,1,0); the 3rd coordinate is the score.

    ``kind="global"``: tokens (-0.1,1,1), (1,0,0.9), (0,0,0.9);
    ``kind="local"``: the last token is (0,0,0) instead, which makes token 1 locally optimal.
    """
    if kind not in ("global", "local"):
        raise ValidationError(f"kind must be 'global' or 'local', got {kind!r}")
    last = [0.0, 0.0, 0.9] if kind == "global" else [0.0, 0.0, 0.0]
    X = np.array([[[-0.1, 1.0, 1.0], [1.0, 0.0, 0.9], last]])
    return TokenProblem(X, Y=np.ones(1), v=_E3, W=_W_MASK, name=f"mm-single-{kind}")


def mm_multi_input() -> TokenProblem:
    """Max-margin E2: n=3, T=7, d=3 from torch seed 0 (token 0 optimal, Assumption B holds)."""
    import torch

    (X,) = _torch_gaussian(0, [(3, 7, 3)])
    X = 0.2 * X
    X[:, 0] += torch.tensor([1.0, 0.0, 0.0])
    X[:, 1:4] += torch.tensor([-1.0, 1.0, 0.0])
    X[:, 4:] += torch.tensor([-0.5, -0.5, 0.0])
    X[:, :, 2] = 0.5
    X[:, 0, 2] = 1.0
    return TokenProblem(X.double().numpy(), Y=np.ones(3), v=_E3, W=_W_MASK, name="mm-multi")


def mm_joint(kind: str = "tight") -> TokenProblem:
    """Max-margin E3: n=3, T=2, d=2, W=I, Y=(1,-1,1); token 1 is selected in every input.

    ``v`` is set to the experiment's initial head (-1, 0); joint training moves it.
    """
    if kind not in ("tight", "relaxed"):
        raise ValidationError(f"kind must be 'tight' or 'relaxed', got {kind!r}")
    third = [0.5, 1.0] if kind == "tight" else [0.5, 1.5]
    X = np.array([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.0], third]])
    return TokenProblem(X, Y=np.array([1.0, -1.0, 1.0]), v=np.array([-1.0, 0.0]), W=np.eye(2), name=f"mm-joint-{kind}")


def mm_loss(C: float = 1.0) -> TokenProblem:
    """Max-margin E4: n=2, T=2, d=3, v=e_3, W=diag(1,1,0); optimal scores C and 1."""
    if not (np.isfinite(C) and C > 0):
        raise ValidationError(f"C must be a finite number > 0, got {C!r}")
    X = np.array([[[0.0, 0.0, 0.0], [1.0, 1.0, float(C)]], [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0]]])
    return TokenProblem(X, Y=np.ones(2), v=_E3, W=_W_MASK, name=f"mm-loss(C={C:g})")


def orthonormal_problem(n: int, T: int, d: int, seed: int = 0, *, max_memory=None) -> TokenProblem:
    """Lambda-head data (E6): each X_i is T orthonormal rows (needs d >= T); v, z_i unit; Y = +1.

    X (n, T, d), Z (n, d), Y (n,), v (d,). ``max_memory``: as in :func:`random_problem` (the QR of n Gaussian
    d x d matrices is the peak)."""
    n, T, d = _check_size(n, "n", 1), _check_size(T, "T", 2), _check_size(d, "d", 1)
    if d < T:
        raise ValidationError(f"orthonormal tokens need d >= T, got d = {d}, T = {T}")
    _require_memory(8.0 * (4 * n * d * d + n * T * d + n * d + n + d), f"an orthonormal instance of n={n}, T={T}, d={d}",
                   max_memory)
    gen = np.random.Generator(np.random.PCG64(_check_seed(seed)))
    Q, _ = np.linalg.qr(gen.standard_normal((n, d, d)))
    X = np.transpose(Q, (0, 2, 1))[:, :T]
    v = _unit_rows(gen.standard_normal(d))
    Z = _unit_rows(gen.standard_normal((n, d)))
    return TokenProblem(X, Z, Y=np.ones(n), v=v, name=f"orthonormal(n={n},T={T},d={d},seed={seed})")


def relu_head_instance(n: int, T: int, d: int, seed: int = 1) -> tuple[TokenProblem, np.ndarray]:
    """Multi-token (ReLU head) data of Transformers-as-SVMs E5.

    Draws, from ``torch.Generator().manual_seed(seed)`` in this order: the head matrix
    V (d, d) normalized to ``||V||_F = 1``, unit-norm tokens X (n, T, d), labels Y (n,)
    (+-1 with probability 1/2) and unit-norm queries Z (n, d).

    Returns
    -------
    (TokenProblem without a linear head, V (d, d)); the head is ``h(a) = 1^T ReLU(V^T a)``.
    """
    import torch

    n, T, d = _check_size(n, "n", 1), _check_size(T, "T", 2), _check_size(d, "d", 1)
    g = torch.Generator()
    g.manual_seed(_check_seed(seed))
    V = torch.randn((d, d), generator=g)
    V = V / V.norm()
    X = torch.randn((n, T, d), generator=g)
    X = X / X.norm(dim=-1, keepdim=True)
    Y = 2 * torch.ones(n) * (torch.randn(n, generator=g) > 0) - 1
    Z = torch.randn((n, d), generator=g)
    Z = Z / Z.norm(dim=-1, keepdim=True)
    problem = TokenProblem(X.double().numpy(), Z.double().numpy(), Y=Y.double().numpy(),
                           name=f"relu-head(n={n},T={T},d={d},seed={seed})")
    return problem, V.double().numpy()


#: Generators reachable from ``attnsvm generate NAME``: name -> (function, takes sizes, description).
GENERATORS: dict[str, tuple[Callable, bool, str]] = {
    "rd": (random_problem, True, "random unit-norm Gaussian tokens, queries and head, +-1 labels"),
    "orthonormal": (orthonormal_problem, True, "orthonormal tokens per sample (lambda-head experiment)"),
    "tf-vis1": (tf_visualization1, False, "Transformers-as-SVMs 2-D instance 'visualization1'"),
    "tf-vis2": (tf_visualization2, False, "Transformers-as-SVMs 2-D instance 'visualization2'"),
    "mm-single-global": (lambda: mm_single_input("global"), False, "max-margin single input, global data"),
    "mm-single-local": (lambda: mm_single_input("local"), False, "max-margin single input, local data"),
    "mm-multi": (mm_multi_input, False, "max-margin multiple inputs (seed 0)"),
    "mm-joint-tight": (lambda: mm_joint("tight"), False, "max-margin joint (v, p), tight data"),
    "mm-joint-relaxed": (lambda: mm_joint("relaxed"), False, "max-margin joint (v, p), relaxed data"),
    "mm-loss": (mm_loss, False, "max-margin loss comparison (parameter C)"),
}


def planted_problem(n: int, T: int, d: int, seed: int = 0, gap: float = 0.1):
    """Random tokens with a *planted* selection, separable with a margin by construction.

    Unit-norm Gaussian tokens ``X`` and queries ``Z`` as in :func:`random_problem`; a
    Gaussian ``W0 (d, d)`` (standard normal entries, so the scores ``x_t^T W0 z_i`` of
    unit vectors have unit variance) selects per sample the token with the largest
    score. Only samples whose winner beats the runner-up by at least ``gap`` are kept;
    samples are drawn (in batches from one seeded stream) until ``n`` are kept. Then
    ``W0 / gap`` satisfies every Att-SVM row with margin >= 1, so the Att-SVM of
    ``select`` is feasible with ``||W_svm|| <= ||W0 / gap||`` in every norm.

    Parameters
    ----------
    n, T, d : int
        Kept samples (>= 1), tokens per sample (>= 2), dimension (>= 1).
    seed : int >= 0
    gap : float > 0, the smallest winner - runner-up score difference kept

    Returns
    -------
    PlantedProblem ``(problem, select, W0)``: a cross-attention TokenProblem with
    X (n, T, d) and Z (n, d) (no labels or head), ``select (n,)`` the planted tokens and
    ``W0 (d, d)``.
    """
    n, T, d = _check_size(n, "n", 1), _check_size(T, "T", 2), _check_size(d, "d", 1)
    seed = _check_seed(seed)
    if isinstance(gap, (bool, np.bool_)) or not isinstance(gap, (int, float, np.integer, np.floating)) \
            or not (np.isfinite(gap) and gap > 0):
        raise ValidationError(f"gap must be a finite number > 0, got {gap!r}")
    gen = np.random.Generator(np.random.PCG64(seed))
    W0 = gen.standard_normal((d, d))
    X = np.empty((n, T, d))
    Z = np.empty((n, d))
    select = np.empty(n, np.int64)
    kept, draws = 0, 0
    while kept < n:
        m = min(max(2 * (n - kept), 64), 4096)      # batches of at most 4096 samples: bounded memory
        draws += 1
        if draws > 10_000:
            raise ValidationError(f"gap = {gap} keeps almost no samples at T = {T}: choose a smaller gap")
        Xb = gen.standard_normal((m, T, d))
        Xb /= np.linalg.norm(Xb, axis=-1, keepdims=True)
        Zb = _unit_rows(gen.standard_normal((m, d)))
        scores = np.einsum("mtd,md->mt", Xb, Zb @ W0.T)      # x_t^T W0 z_i
        top2 = -np.partition(-scores, 1, axis=1)[:, :2]
        ok = np.flatnonzero(top2[:, 0] - top2[:, 1] >= gap)[: n - kept]
        X[kept:kept + ok.size] = Xb[ok]
        Z[kept:kept + ok.size] = Zb[ok]
        select[kept:kept + ok.size] = np.argmax(scores[ok], axis=1)
        kept += ok.size
        del Xb
    problem = TokenProblem(X, Z, name=f"planted(n={n},T={T},d={d},seed={seed},gap={gap:g})")
    return PlantedProblem(problem, select, W0)


class PlantedProblem(tuple):
    """``(problem, select, W0)`` returned by :func:`planted_problem` (also by attribute)."""

    def __new__(cls, problem: TokenProblem, select: np.ndarray, W0: np.ndarray):
        return super().__new__(cls, (problem, select, W0))

    problem = property(lambda self: self[0])
    select = property(lambda self: self[1])
    W0 = property(lambda self: self[2])
