"""The one training loop (attnsvm.training.loop.run): call order, step count, kernel choice.

That the kernels give the same iterates is tested where they live: lean vs fused in
test_training_lean.py, fused vs generic in test_train.py (``test_token_space_direct_and_generic_loops_agree``),
and every trainer against the base commit (bitwise) when the loop was unified."""

import ast
import pathlib

import numpy as np

import attnsvm.training.engine as engine
from attnsvm.generators import random_problem
from attnsvm.training.checks import checkpoint_steps
from attnsvm.training.engine import prepare_data, select_kernel
from attnsvm.training.initial import init_params
from attnsvm.training.loop import TrainConfig, run, want_mask
from attnsvm.training.models import ReLUHead

TRAINING = pathlib.Path(__file__).resolve().parents[1] / "src" / "attnsvm" / "training"


class _Quadratic:
    """GD on f(x) = ||x||^2 / 2 (gradient x), logging every call the loop makes."""

    def __init__(self, x0, lr, steps, cps):
        self.x, self.lr, self.log, self.recorded = np.array(x0, dtype=np.float64), lr, [], []
        self.want = want_mask(steps, cps)

    def gradient(self, k):
        self.g = self.x.copy()
        self.log.append(f"g{k}")

    def record(self):
        self.recorded.append(self.x.copy())
        self.log.append("r")

    def update(self, k):
        self.x = self.x - self.lr * self.g
        self.log.append(f"u{k}")

    def result(self):
        return np.array(self.recorded)


def test_run_calls_gradient_record_update_in_order():
    kern = _Quadratic([1.0, -2.0], 0.5, 3, [0, 2, 3])
    run(kern, 3)
    assert kern.log == ["g0", "r", "u0", "g1", "u1", "g2", "r", "u2", "g3", "r"]


def test_run_records_the_state_before_each_update_and_applies_steps_updates():
    x0, lr = np.array([1.0, -2.0]), 0.25
    out = run(_Quadratic(x0, lr, 5, [0, 1, 5]), 5)
    assert np.array_equal(out, np.array([x0, (1 - lr) * x0, (1 - lr) ** 5 * x0]))
    assert run(_Quadratic(x0, lr, 0, [0]), 0).tolist() == [x0.tolist()]  # steps=0: one gradient, no update


def test_training_has_one_step_loop():
    """No module of training/ loops over steps except loop.run (new models write kernels)."""
    loops = []
    for f in sorted(TRAINING.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and ast.unparse(node.iter.func) == "range":
                arg = ast.unparse(node.iter.args[-1]) if node.iter.args else ""
                if "steps" in arg:
                    loops.append(f"{f.name}:{node.lineno}")
    assert len(loops) == 1 and loops[0].startswith("loop.py:"), loops


def _kernel(problems, param="W", head=None, optimizer="ngd", engine_="auto", bitwise=False, train_v=False):
    batch, data = prepare_data(problems, None, param, head, train_v, "logistic")
    R, _, _, d = data.X.shape
    params = init_params(param, "default", list(range(R)), d, d)
    if train_v:
        params["v"] = data.v.clone()
    cfg = TrainConfig(param=param, steps=4, lr=0.1, optimizer=optimizer, cps=checkpoint_steps(4, 2, None),
                      seeds=list(range(R)), engine=engine_, bitwise=bitwise, train_v=train_v)
    kind, kern = select_kernel(data, params, head, cfg)
    return kind, type(kern).__name__


def test_select_kernel_routes_each_setting(monkeypatch):
    one = random_problem(3, 4, 5, seed=0)
    few = [random_problem(3, 4, 5, seed=s) for s in range(3)]
    many = [random_problem(20, 8, 5, seed=s) for s in range(2)]  # n T = 160 tokens: direct W
    assert _kernel(one) == ("lean", "NoneType")
    assert _kernel(one, "KQ") == ("lean", "NoneType")
    assert _kernel(few) == ("tokens", "TokenSpaceKernel")
    assert _kernel(many) == ("direct", "DirectWKernel")
    assert _kernel(few, "KQ", optimizer="gd") == ("direct", "DirectKQKernel")
    assert _kernel(few, optimizer="adam") == ("generic", "GradientKernel")
    assert _kernel(few, bitwise=True) == ("generic", "GradientKernel")
    assert _kernel(few, engine_="autograd") == ("generic", "GradientKernel")
    assert _kernel(few, train_v=True) == ("generic", "GradientKernel")
    assert _kernel(few, head=ReLUHead(np.ones((5, 2)))) == ("tokens", "TokenSpaceKernel")
    monkeypatch.setattr(engine, "LEAN_PATH", False)
    assert _kernel(one) == ("tokens", "TokenSpaceKernel")
