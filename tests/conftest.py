import os
import signal

os.environ.setdefault("OMP_NUM_THREADS", "1")
# Ctrl-C as Python sets it: a suite started in the background by a non-interactive shell inherits SIGINT
# ignored, and then the runner's tests of an interrupted run (which send SIGINT to a run they started) ended the
# whole session as interrupted at about a third of the way (tests/test_conftest_sigint.py)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
os.environ.setdefault("MPLBACKEND", "Agg")

# the tests solve many small problems: one BLAS thread avoids oversubscription on small machines
from threadpoolctl import threadpool_limits  # noqa: E402

threadpool_limits(limits=1)

import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402


def attnsvm_cli(*args, cwd=None, timeout=600):
    """Run ``python -m attnsvm ARGS`` in a subprocess (one BLAS thread, warnings off)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "attnsvm", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout)


@pytest.fixture(scope="session")
def quick_reproduce(tmp_path_factory):
    """``attnsvm reproduce --quick`` run once per session: (output folder, CompletedProcess).

    The check tests resume from this folder (``run_experiment`` on the same quick config
    finds every task stored), so each quick preset is computed once per test session.
    """
    out = tmp_path_factory.mktemp("reproduce")
    return out, attnsvm_cli("reproduce", "--quick", "--out", str(out))


@pytest.fixture(scope="session")
def quick_out(quick_reproduce):
    """The folder of a successful ``reproduce --quick`` (fails the test if the command failed)."""
    out, r = quick_reproduce
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


#: test files that load the MiniLM model, build a wheel or drive a browser: each takes from about a minute to
#: several on 2 cores. Tests that use the session's ``reproduce --quick`` (the fixtures below) are slow too.
SLOW_FILES = {"test_browser.py", "test_wheel.py", "test_real_minilm.py", "test_real_probe.py", "test_probe_view.py",
              "test_probe_stored.py", "test_probe_query_all.py", "test_real_agreement.py", "test_real_any_model.py",
              "test_cli_probe_curve.py", "test_probe_no_svm_words.py"}
SLOW_FIXTURES = {"quick_reproduce", "quick_out", "quick_results"}


def pytest_collection_modifyitems(config, items):
    """Mark the slow tests ``slow``: ``pytest -m "not slow"`` is the fast subset; plain ``pytest`` runs all."""
    for item in items:
        if item.path.name in SLOW_FILES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
