"""Dispatch: which solver runs a ConstraintSet (dense or working set, by size and memory)."""

from __future__ import annotations

from attnsvm._validate import check_choice
from attnsvm.errors import ResourceLimitError, ValidationError
from attnsvm.svm.constraints import ConstraintSet
from attnsvm.svm.solution import SVMSolution
from attnsvm.svm.working_set import ScaleError, solve_frobenius_ws, solve_nuclear_ws

__all__ = ["solve_dispatch", "METHODS", "AUTO_DENSE_MAX_N"]

#: ``method`` values of :func:`solve_dispatch` ("pdas" and "goldfarb-idnani" select the dense
#: Frobenius solver with that QP method).
METHODS = ("auto", "dense", "working_set", "pdas", "goldfarb-idnani")


#: ``method="auto"`` solves up to this many rows densely (N x N Gram matrices) and more by the
#: working set. Measured (one thread, best of 3-20 runs) on planted and optimal-token instances:
#: at d = 64 the working set took 0.84-1.16x the dense time at N = 600 and was 1.14-1.53x faster
#: at N = 800, 2.4-2.8x at 1200, 10-12x at 3000, 41x at 5000; at d = 10 it is faster from
#: N = 250 on feasible instances (benchmarks/solvers.py --scale prints both side by side).
AUTO_DENSE_MAX_N = 800

_WS_ONLY = ("batch", "per_group", "max_rounds", "verbose")


def solve_dispatch(cs: ConstraintSet, norm: str, formulation: str, method: str = "auto", **kw) -> SVMSolution:
    """Solve the SVM of ``cs`` (norm "fro" or "nuclear") by the dense or the working-set method.

    Parameters
    ----------
    method : "auto" (dense up to :data:`AUTO_DENSE_MAX_N` rows if its N x N matrices fit in
        memory, else the working set), "dense", "working_set", or a dense Frobenius QP method
        ("pdas", "goldfarb-idnani")
    **kw : options of the chosen solver (:func:`~attnsvm.svm.frobenius.solve_frobenius`,
        :func:`~attnsvm.svm.nuclear.solve_nuclear`, :func:`solve_frobenius_ws`,
        :func:`solve_nuclear_ws`); an option the chosen solver does not have is refused
        (ValidationError naming it). ``max_memory`` applies to every path: the dense one
        refuses (ResourceLimitError) when its N x N matrices need more.
    """
    from attnsvm.svm.frobenius import solve_frobenius
    from attnsvm.svm.nuclear import solve_nuclear

    check_choice(method, "method", METHODS)
    if method in ("pdas", "goldfarb-idnani"):
        if norm != "fro":
            raise ValidationError(f"method={method!r} is a Frobenius QP method; for norm='nuclear' use 'auto', "
                                  "'dense' or 'working_set'")
        kw["method"] = method
        method = "dense"
    auto = method == "auto"
    if auto:
        method = "dense" if cs.N <= AUTO_DENSE_MAX_N and not any(k in kw for k in _WS_ONLY) else "working_set"
    if method == "working_set":
        kw.pop("method", None)
        try:
            if norm == "fro":
                return solve_frobenius_ws(cs, formulation=formulation, **kw)
            return solve_nuclear_ws(cs, formulation=formulation, **kw)
        except ScaleError:
            if not auto or any(k in kw for k in _WS_ONLY):
                raise
        method, auto = "dense", False        # extreme data scales: the dense solver normalizes the rows
    try:
        if norm == "fro":
            return solve_frobenius(cs, formulation=formulation, **kw)
        return solve_nuclear(cs, formulation=formulation, **kw)
    except ResourceLimitError:
        if not auto:
            raise
    # the dense solver refused (before allocating) for lack of memory: the working set needs O(N d)
    kw.pop("method", None)
    if norm == "fro":
        return solve_frobenius_ws(cs, formulation=formulation, **kw)
    return solve_nuclear_ws(cs, formulation=formulation, **kw)
