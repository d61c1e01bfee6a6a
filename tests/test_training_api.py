"""Training API of the restructure: thread option, result summaries, prompt model module, module layout."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from attnsvm.errors import ValidationError
from attnsvm.generators import mm_joint, random_problem
from attnsvm.training import PathResult, TrainResult, regularization_path, train, train_sequence
from attnsvm.training.threads import torch_threads


def test_threads_option_is_scoped():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    seen = []
    with torch_threads(target):
        seen.append(torch.get_num_threads())
    assert seen == [target] and torch.get_num_threads() == before
    P = random_problem(4, 5, 6, seed=0)
    a = train([P, P], steps=20, threads=target)
    b = train([P, P], steps=20)
    assert torch.get_num_threads() == before
    np.testing.assert_allclose(a.W, b.W, rtol=1e-12)
    X = np.random.default_rng(0).standard_normal((2, 4, 3))
    Y = np.ones((2, 4))
    train_sequence(X, Y, v=np.ones(3), steps=5, threads=target)
    assert torch.get_num_threads() == before


def test_threads_restored_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with torch_threads(1 if before != 1 else 2):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_threads_validated(bad):
    with pytest.raises(ValidationError, match="threads"):
        train(random_problem(3, 4, 5, seed=0), steps=1, threads=bad)


def test_training_sets_no_global_thread_count():
    code = ("import torch; torch.set_num_threads(2); from attnsvm.training import train; "
            "from attnsvm.training.language_model import train_lm, lm_loss_grad; "
            "from attnsvm.training.prompt import engine_train; "
            "from attnsvm.generators import mm_joint, random_problem; "
            "import numpy as np; train(random_problem(3, 4, 5, seed=0), steps=3); "
            "pp = mm_joint('tight'); engine_train(pp, np.zeros((1, pp.d)) + 0.1, steps=2, lr=0.1, optimizer='ngd', "
            "eps=1e-8, checkpoints=[0, 2]); "
            "g = np.random.default_rng(0); A = g.standard_normal((1, 2, 3, 4)); E = g.standard_normal((1, 5, 4)); "
            "train_lm(A, g.integers(0, 5, (1, 2, 3)), E, np.zeros((1, 4, 4)), steps=2, lr=0.1); "
            "assert torch.get_num_threads() == 2, torch.get_num_threads()")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_result_reprs_are_short():
    P = random_problem(4, 5, 6, seed=0)
    r = train([P, P, P], param="KQ", steps=100, record_every=10)
    text = repr(r)
    assert isinstance(r, TrainResult) and len(text) < 400 and "\n" not in text
    assert "runs=3" in text and "'KQ'" in text and "11 checkpoints" in text and "W=3x11x6x6" in text
    assert "final norm" in text and "[" not in text  # no arrays printed
    path = regularization_path([P, P], [1.0, 2.0], steps_per_radius=5)
    ptext = repr(path)
    assert isinstance(path, PathResult) and "runs=2" in ptext and "W=2x2x6x6" in ptext and len(ptext) < 300


def test_prompt_module_matches_the_engine():
    from attnsvm.experiments.mm import common
    from attnsvm.training import prompt

    assert common.prompt_grad is prompt.prompt_grad and common.engine_train is prompt.engine_train
    P = mm_joint("tight")
    p = np.random.default_rng(1).standard_normal((2, P.d))
    g = prompt.prompt_grad(P, p)
    # finite differences of the mean logistic loss of the prompt model

    def loss(q):
        s = np.exp(P.keys @ q - (P.keys @ q).max(1, keepdims=True))
        s /= s.sum(1, keepdims=True)
        f = np.einsum("it,itd->id", s, P.X) @ P.v
        return np.logaddexp(0.0, -P.Y * f).mean()
    h = 1e-6
    for r in range(2):
        fd = np.array([(loss(p[r] + h * e) - loss(p[r] - h * e)) / (2 * h) for e in np.eye(P.d)])
        np.testing.assert_allclose(g[r], fd, rtol=1e-6, atol=1e-9)


def test_import_attnsvm_loads_no_torch_and_training_has_no_upward_imports():
    code = "import sys, attnsvm, attnsvm.svm; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    import ast
    import pathlib

    import attnsvm.training

    upward = ("attnsvm.metrics", "attnsvm.real", "attnsvm.experiments", "attnsvm.runner", "attnsvm.cli")
    for path in pathlib.Path(attnsvm.training.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(upward), f"{path.name} imports {name}"
