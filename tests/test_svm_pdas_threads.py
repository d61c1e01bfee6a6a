"""The Frobenius subset QP runs on one BLAS thread, its whole-block factorizations on the caller's threads."""

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from attnsvm.svm import pdas
from attnsvm.svm.working_set import _one_blas_thread


def _blas_threads() -> int:
    counts = [int(lib["num_threads"]) for lib in threadpool_info() if lib.get("user_api") == "blas"]
    if not counts:
        pytest.skip("no BLAS library visible to threadpoolctl")
    return max(counts)


@pytest.mark.parametrize("outer", [1, 2])
def test_factorizations_keep_the_callers_threads(outer):
    with threadpool_limits(limits=outer, user_api="blas"):
        if _blas_threads() != outer:
            pytest.skip("this BLAS cannot run that many threads")
        with _one_blas_thread():
            assert _blas_threads() == 1                    # the QP's solves
            with pdas.caller_threads():
                assert _blas_threads() == outer            # its factorizations: the caller's setting
            assert _blas_threads() == 1
        assert _blas_threads() == outer


def test_outside_the_working_set_nothing_changes():
    with threadpool_limits(limits=2, user_api="blas"):
        outer = _blas_threads()
        with pdas.caller_threads():
            assert _blas_threads() == outer
