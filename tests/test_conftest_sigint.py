"""The suite runs with SIGINT at Python's own handler even when started with it ignored (a background job of a
non-interactive shell, as ``setsid cmd &`` or ``nohup cmd &`` start it): conftest.py restores it."""

import signal
import subprocess
import sys


def test_sigint_is_pythons_handler_in_the_tests():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_suite_started_with_sigint_ignored_gets_it_back(tmp_path):
    """A pytest session started with SIGINT ignored runs this file's first test with Python's handler."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"{__file__}::test_sigint_is_pythons_handler_in_the_tests"],
                       capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
