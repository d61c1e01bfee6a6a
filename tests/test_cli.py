import json
import os
import subprocess
import sys

import numpy as np
import pytest

from attnsvm import TokenProblem, __version__


def run(*args, cwd=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "attnsvm", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_version_and_help():
    r = run("--version")
    assert r.returncode == 0 and __version__ in r.stdout
    r = run("--help")
    assert r.returncode == 0
    for cmd in ("generate", "info"):
        assert cmd in r.stdout


def test_generate_and_info(tmp_path):
    out = tmp_path / "problem.npz"
    r = run("generate", "rd", "--n", "6", "--T", "8", "--d", "10", "--seed", "0", "-o", str(out))
    assert r.returncode == 0, r.stderr
    p = TokenProblem.load(out)
    assert p.shape == (6, 8, 10)
    r = run("info", str(out))
    assert r.returncode == 0, r.stderr
    assert "optimal" in r.stdout and "cross-attention" in r.stdout and "d >= max(T-1, n) = 7: yes" in r.stdout
    for i, a in enumerate(p.optimal_tokens().index):
        assert any(line.split()[:2] == [str(i), str(a)] for line in r.stdout.splitlines())
    r = run("info", str(out), "--json")
    data = json.loads(r.stdout)
    assert data["optimal_tokens"] == p.optimal_tokens().index.tolist() and data["overparameterized"] is True


def test_fixed_instance_and_ties(tmp_path):
    X = np.zeros((2, 3, 2))
    X[0, :, 0] = [1, 1, 0]
    X[1, :, 0] = [0, 2, 1]
    path = tmp_path / "tie.npz"
    TokenProblem(X, query_index=0, Y=np.ones(2), v=np.array([1.0, 0.0])).save(path)
    r = run("info", str(path))
    assert r.returncode == 0 and "1 sample(s) with a tied optimal token" in r.stdout and "self-attention" in r.stdout
    r = run("generate", "mm-loss", "--C", "10", "-o", str(tmp_path / "l.npz"))
    assert r.returncode == 0, r.stderr
    assert TokenProblem.load(tmp_path / "l.npz").X[0, 1, 2] == 10


@pytest.mark.parametrize(
    "args, match",
    [
        (["info", "does-not-exist.npz"], "no such file"),
        (["generate", "rd", "--n", "0", "--T", "3", "--d", "2", "-o", "x.npz"], "n must be an integer >= 1"),
        (["generate", "nope", "-o", "x.npz"], "unknown generator"),
        (["generate", "rd", "--n", "2", "-o", "x.npz"], "needs --T --d"),
        (["generate", "tf-vis1", "--n", "3", "-o", "x.npz"], "fixed instance"),
        (["info", "garbage.npz"], "not an .npz archive"),
    ],
)
def test_user_errors_are_one_line(tmp_path, args, match):
    (tmp_path / "garbage.npz").write_bytes(b"garbage")
    r = run(*args, cwd=tmp_path)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and match in lines[0], r.stderr
