"""The torch backend of the nuclear interior-point method (``device=``), run on the CPU.

Checked: the Schur complement built on the device is the numpy one (same formula, float64, to rounding),
on distinct and on shared queries; solutions through ``device="cpu"`` equal the numpy path's within the
certificate's tolerance and carry a passing certificate (dense and working-set solves); bad devices are
refused before any work; torch is loaded only when a device is asked for.
"""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.generators import planted_problem, random_problem  # noqa: E402
from attnsvm.svm import att_constraints, solve, solve_svm  # noqa: E402
from attnsvm.svm.ipm import Dual, reduce_problem, start_point  # noqa: E402
from attnsvm.svm.torch_backend import TorchNewton, _DeviceProblem, _DualView  # noqa: E402


def _reduced(cs):
    red = reduce_problem(cs.U, cs.V, cs.rhs, cs.is_equality, {})
    return red.pb


@pytest.mark.parametrize("grouped", [True, False])
def test_device_schur_complement_is_the_numpy_one(grouped, monkeypatch):
    from attnsvm.svm.ipm import problem as ipm_problem

    monkeypatch.setattr(ipm_problem, "GROUPED_MIN_ROWS", 0)      # 60 rows: grouped when asked
    pr, sel, _ = planted_problem(12, 6, 5, seed=3)
    cs = att_constraints(pr.X, pr.queries, sel)
    pb = _reduced(cs)
    if not grouped:
        pb.Bq = pb.qidx = None
    assert (pb.qidx is not None) == grouped
    lam, X11, X12, X22, s = start_point(pb, None, None)
    du = Dual(pb.A, pb.Bm, lam)
    M = pb.schur(X11, X12, X22, du)
    dp = _DeviceProblem(pb, torch.device("cpu"))
    t = dp.tensor
    Mt = type(pb).schur(dp, t(X11), t(X12), t(X22), _DualView(t(du.AC), t(du.G), t(du.Si), t(du.C), t(du.Zh))).numpy()
    assert Mt.shape == (pb.N, pb.N)
    assert np.max(np.abs(Mt - M)) <= 1e-12 * np.max(np.abs(M))


def test_device_newton_solve_inverts_the_schur_system():
    pr, sel, _ = planted_problem(10, 6, 5, seed=1)
    pb = _reduced(att_constraints(pr.X, pr.queries, sel))
    lam, X11, X12, X22, s = start_point(pb, None, None)
    du = Dual(pb.A, pb.Bm, lam)

    class It:
        pass

    x = It()
    x.X11, x.X12, x.X22 = X11, X12, X22
    diag = np.full(pb.N, 0.1)
    M = pb.schur(X11, X12, X22, du) + np.diag(diag)
    r = np.random.default_rng(0).standard_normal(pb.N)
    y = TorchNewton("cpu").solver(pb, x, du, diag)(r)
    assert np.linalg.norm(M @ y - r) <= 1e-9 * np.linalg.norm(r)


@pytest.mark.parametrize("n, T, d, seed", [(6, 8, 10, 0), (6, 8, 10, 2), (20, 10, 30, 1)])
def test_device_answers_equal_numpy_answers(n, T, d, seed):
    p = random_problem(n, T, d, seed=seed)
    a = solve_svm(p, norm="nuclear")
    b = solve_svm(p, norm="nuclear", device="cpu")
    assert b.info["device"] == "cpu" and "device" not in a.info
    assert a.status == b.status
    if a.status == "optimal":
        assert b.certified
        assert abs(a.norm_value - b.norm_value) <= 1e-6 * a.norm_value
        assert np.max(np.abs(a.margins - b.margins)) <= 1e-6


def test_device_working_set_answer_is_certified_and_equal():
    pr, sel, _ = planted_problem(40, 21, 16, seed=0)
    cs = att_constraints(pr.X, pr.queries, sel)
    a = solve(cs, "nuclear", method="working_set")
    b = solve(cs, "nuclear", method="working_set", device="cpu")
    assert a.status == b.status == "optimal"
    assert abs(a.norm_value - b.norm_value) <= 1e-6 * a.norm_value


@pytest.mark.parametrize("device, match", [("nonsense", "device"), (3, "device"), ("meta", "device")])
def test_bad_devices_are_refused(device, match):
    p = random_problem(4, 5, 6, seed=0)
    with pytest.raises(ValidationError, match=match):
        solve_svm(p, norm="nuclear", device=device)
    cs = att_constraints(p.X, p.queries, p.optimal_tokens().index)
    with pytest.raises(ValidationError, match=match):
        solve(cs, "nuclear", method="working_set", device=device)


def test_cuda_without_a_gpu_is_refused():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is available here")
    with pytest.raises(ValidationError, match="no CUDA device"):
        solve_svm(random_problem(4, 5, 6, seed=0), norm="nuclear", device="cuda")


def test_device_needs_the_interior_point_method():
    with pytest.raises(ValidationError, match="solver 'auto' or 'ipm'"):
        solve_svm(random_problem(4, 5, 6, seed=0), norm="nuclear", solver="SCS", device="cpu")


def test_frobenius_has_no_device_option():
    with pytest.raises(ValidationError, match="device"):
        solve_svm(random_problem(4, 5, 6, seed=0), norm="fro", device="cpu")


def test_torch_is_imported_only_for_a_device():
    code = ("import sys; from attnsvm import random_problem, solve_svm; p = random_problem(4, 5, 6, seed=0); "
            "solve_svm(p, norm='nuclear'); a = 'torch' in sys.modules; "
            "solve_svm(p, norm='nuclear', device='cpu'); print(a, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
