"""``import attnsvm`` loads no torch, and the solvers run where torch cannot be imported (DESIGN.md, layer 2);
only ``device=`` of the nuclear solvers (attnsvm.svm.torch_backend) needs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: run first in the child: any attempt to import torch raises, as on a machine without it
_BLOCK_TORCH = textwrap.dedent("""
    import sys
    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is blocked in this test")
            return None
    sys.meta_path.insert(0, _NoTorch())
""")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BLOCK_TORCH + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300)


def test_import_attnsvm_loads_no_torch():
    out = subprocess.run([sys.executable, "-c", "import sys, attnsvm, attnsvm.svm, attnsvm.metrics, attnsvm.problem; "
                          "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"import attnsvm imported torch modules: {out.stdout.strip()[:300]}"


def test_solvers_run_without_torch():
    out = _run("""
        import numpy as np
        import attnsvm
        from attnsvm import random_problem, solve_svm, solve_gen_svm, correlation
        from attnsvm.svm import ConstraintSet
        p = random_problem(n=6, T=8, d=10, seed=3)
        fro = solve_svm(p)
        nuc = solve_svm(p, norm="nuclear")
        assert fro.status == "optimal" and fro.certified, fro.status
        assert nuc.status in ("optimal", "infeasible"), nuc.status
        sel = np.zeros((p.n, p.T), bool); sel[:, 0] = True
        gen = solve_gen_svm(p, sel)
        print("ok", fro.status, nuc.status, gen.status, round(float(correlation(fro.W, fro.W)), 6))
    """)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok optimal"), out.stdout


def test_training_without_torch_says_so():
    out = _run("""
        import attnsvm
        try:
            attnsvm.train
        except ImportError as e:
            print("ImportError", e)
    """)
    assert "ImportError" in out.stdout and "torch" in out.stdout, (out.stdout, out.stderr[-1000:])


def test_the_blocker_blocks():
    """The test above would pass vacuously if the blocker did not block: show that it does."""
    out = _run("import torch")
    assert out.returncode != 0 and "torch is blocked" in out.stderr


def test_every_public_name_of_the_lazy_facade_resolves():
    import attnsvm

    missing = [n for n in attnsvm.__all__ if getattr(attnsvm, n, None) is None]
    assert not missing, missing
    assert set(attnsvm.__all__) <= set(dir(attnsvm))
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        attnsvm.not_a_name


def test_a_device_without_torch_is_refused_by_name():
    """device= needs torch: where it cannot be imported the nuclear solver says so (ValidationError), and the
    default path in the same process still solves."""
    out = _run("""
        from attnsvm import random_problem, solve_svm
        from attnsvm.errors import ValidationError
        p = random_problem(n=4, T=5, d=6, seed=0)
        try:
            solve_svm(p, norm="nuclear", device="cpu")
        except ValidationError as e:
            print("refused", "torch" in str(e) and "device=None" in str(e))
        print("default", solve_svm(p, norm="nuclear").status)
    """)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["refused", "True", "default", "optimal"], out.stdout
