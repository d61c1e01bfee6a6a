"""Helpers shared by the max-margin (prompt attention) experiments ``mm-*``.

The model is ``f(X) = v^T X^T softmax(X W p)`` with a trainable prompt ``p`` ("Max-Margin
Token Selection in Attention Mechanism", spec ``max-margin-token-selection.md``). Here:
the p-SVM wrapper, checkpoint grids (the prompt gradient, training and notebook replay live in
:mod:`attnsvm.training.prompt` and are re-exported here), table lookups and the path-drawing helpers.

Convention for step numbers: "iteration t" of the spec is index t of the notebooks' list of
iterates, i.e. the iterate after t updates (step t here: "iteration 50" is step 50, "t = 1000"
is step 1000), except "iteration 200" / "at 200", the end of the plotted window THRED = 200,
which is the last plotted index 199 (step 199): the spec's figures at 200 match step 199 to
every printed digit and step 200 does not.

Verdict helpers: every check of these experiments states its source in the spec
(:func:`fact`, :func:`spec_src`) and where its threshold comes from. Figures the spec prints
are compared within half a unit of their last printed decimal (:func:`rounding_check`);
exact claims to the certified SVM precision; each SVM a comparison relies on must be
certified (:func:`certificate_check`), otherwise its solution is stored as NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnsvm.generators import mm_joint, mm_multi_input
from attnsvm.problem import TokenProblem
from attnsvm.svm import CERTIFIED_VIOLATION, solve_p_svm, solve_v_svm
from attnsvm.svm.analysis import locally_optimal_rows
from attnsvm.training.prompt import (  # the prompt model's mathematics, re-exported for the mm experiments
    engine_train as engine_train, notebook_float32 as notebook_float32, notebook_replay as notebook_replay,
    prompt_grad as prompt_grad,
)
from attnsvm.experiments.checks import Check, check
from attnsvm.experiments.common import (  # noqa: F401  (re-exported for the mm experiments)
    certified_check, config_deviations as config_deviations, half_unit, log_steps, svm_record as svm_record,
    uncertified as uncertified,
)

PAPER_MM = "Max-Margin Token Selection in Attention Mechanism (Tarzanagh et al., NeurIPS 2023)"
SINGLE_INITS = [1.0, 0.5, 0.0, -0.5, -1.0, -1.5]
SPEC_MM = "max-margin-token-selection.md"

#: relative precision of a certified SVM solution (the package's certificate standard)
SVM_PRECISION = CERTIFIED_VIOLATION
#: support tokens / vectors: active constraints, ``|margin - rhs| <= SUPPORT_TOL`` (spec 3.5)
SUPPORT_TOL = 1e-6
SUPPORT_REASON = "support = active constraint |margin - 1| <= 1e-6 (the tolerance of spec 3.5 [REC])"
#: a run "goes to" one of several candidate SVM directions when cos >= IDENTIFY_COS
IDENTIFY_COS = 0.99
IDENTIFY_REASON = ("tolerance 0.99 (8.1 degrees): identifies the limit among candidate SVM directions that are "
                   ">= 84 degrees apart; the spec's float64 figures for E1 runs at t = 1000 are cos 0.9994-0.9996")
#: directional convergence tolerance: 1 - cos <= 1e-3
CONVERGED_COS = 0.999
CONVERGED_REASON = ("tolerance 1 - cos <= 1e-3 (2.6 degrees): the spec's float64 figures for converged directions "
                    "here are 0.9992-0.99994 (E2 t = 1000: 0.99978, E3: 0.9992-0.9999, p-path R = 10: 0.998891); "
                    "2.6 degrees is far below the >= 11 degrees between competing SVM directions")


def spec_src(section: str) -> str:
    """``"max-margin-token-selection.md <section>"``."""
    return f"{SPEC_MM} {section}"


def fact(k: int, extra: str = "") -> str:
    """Source of numbered fact ``k`` of section 9 (plus an optional second section)."""
    return f"{SPEC_MM} 9 fact {k}" + (f"; {extra}" if extra else "")


# ------------------------------------------------------------------ checkpoints and table lookups


def dense_steps(total: int, dense: int = 200, every: int = 10, extra=()) -> list[int]:
    """Every step up to ``dense``, then every ``every`` steps, plus ``extra`` (all <= total)."""
    s = set(range(0, min(dense, total) + 1))
    s.update(range(0, total + 1, every))
    s.update(e for e in extra if 0 <= e <= total)
    s.add(total)
    return sorted(s)


def log_steps_per_decade(total: int, per_decade: int = 20, extra=()) -> list[int]:
    """About ``per_decade`` log-spaced steps per decade in [1, total], plus 0, total and ``extra``."""
    decades = max(1, int(np.ceil(np.log10(max(total, 2)))))
    return log_steps(total, per_decade * decades + 1, extra)


def rows_at(table: pd.DataFrame, step: int) -> pd.DataFrame:
    """Rows recorded exactly at ``step`` (empty if that step was not recorded)."""
    return table[table["step"] == step]


def pick(table: pd.DataFrame, **eq):
    """The first row of ``table`` whose columns equal ``eq`` (``None`` if there is none or a column is missing)."""
    if table is None or len(table) == 0:
        return None
    mask = np.ones(len(table), bool)
    for col, val in eq.items():
        if col not in table.columns:
            return None
        mask &= (table[col] == val).to_numpy()
    return table[mask].iloc[0] if mask.any() else None


def num(row, col: str) -> float:
    """``row[col]`` as float; NaN when the row is missing (a missing measurement never passes)."""
    if row is None:
        return float("nan")
    try:
        return float(row[col])
    except (KeyError, TypeError, ValueError):
        return float("nan")


def cos_between(a, b) -> float:
    """``<a, b> / (||a|| ||b||)`` of two stored vectors / matrices (flattened); NaN if either is non-finite or zero.

    Checks recompute cosines from the stored solutions instead of trusting a stored cosine column.
    """
    a, b = np.ravel(np.asarray(a, dtype=np.float64)), np.ravel(np.asarray(b, dtype=np.float64))
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("nan")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else float("nan")


def rounding_dev(pairs, slack: float = 0.0) -> float:
    """Worst deviation of measured values from spec figures, in units of each figure's tolerance.

    ``pairs``: ``(measured, target)``; a ``str`` target is a printed figure (tolerance: half a
    unit of its last decimal, plus ``slack``), a number is an exact value (tolerance ``slack``,
    which must then be > 0). NaN if any measurement is NaN.
    """
    worst = 0.0
    for m, t in pairs:
        m = float(m)
        if m != m:
            return float("nan")
        tol = (half_unit(t) + slack) if isinstance(t, str) else slack
        if tol <= 0:
            raise ValueError("an exact target needs a slack > 0")
        worst = max(worst, abs(m - float(t)) / tol)
    return worst


def rounding_check(name: str, pairs, *, source: str, slack: float = 0.0, why: str = "") -> Check:
    """Spec figures vs measurements within their printed precision (value <= 1 passes), kind "spec"."""
    reason = ("each figure within half a unit of its last printed decimal (its rounding)"
              + (f" plus {slack:g} (certified SVM precision)" if slack else "")
              + "; value = worst deviation in units of that tolerance")
    if why:
        reason += f"; {why}"
    detail = ", ".join(f"{float(m):.10g} vs {t}" for m, t in pairs)
    return check(name, rounding_dev(pairs, slack), "<=", 1.0, detail, source=source, reason=reason, kind="spec")


def exact_check(name: str, pairs, *, source: str, why: str = "") -> Check:
    """Exact values (derived, or rational spec values) to the certified SVM precision, kind "tolerance"."""
    reason = f"exact value; tolerance {SVM_PRECISION:g}, the certified relative precision of the SVM solver"
    if why:
        reason += f"; {why}"
    detail = ", ".join(f"{float(m):.12g} vs {float(t):.12g}" for m, t in pairs)
    return check(name, rounding_dev([(m, float(t)) for m, t in pairs], SVM_PRECISION), "<=", 1.0, detail,
                 source=source, reason=reason, kind="tolerance")


# ------------------------------------------------------------------ SVM certificates in the results


def certified_solution(sol) -> np.ndarray:
    """The SVM solution (p, v or W) if ``sol`` is certified, else an all-NaN array of its shape.

    Comparisons against an uncertified SVM then come out NaN and their checks fail.
    """
    x = sol.solution
    if x is None:  # infeasible: no solution at all
        return np.full(sol.constraints.d1, np.nan)
    return np.asarray(x, dtype=np.float64) if sol.certified else np.full(np.shape(x), np.nan)


def certificate_check(table: pd.DataFrame, expected: int, what: str) -> Check:
    """Integrity: every one of the ``expected`` SVMs the experiment relies on is present and certified
    (:func:`~attnsvm.experiments.common.certified_check` on the ``svm_*`` columns of its rows)."""
    return certified_check(table, ("svm",), what, expected=expected,
                           name="every SVM used is certified (relative violation and duality gap <= 1e-8)",
                           reason="a comparison with an SVM solution needs the solution proven optimal "
                                  "(the package's certificate standard, 1e-8 relative)")


def constraint_rows(sol, gamma: np.ndarray, alpha, **cols) -> list[dict]:
    """One row per margin constraint of a prompt SVM: ``margin = p^T (k_{i,a_i} - k_it)`` and the two scores.

    ``gamma (n, T)`` token scores, ``alpha (n,)`` the selection. The margin is NaN when ``sol`` is
    not certified; ``cols`` are extra columns (dataset, selection, ...).
    """
    cs = sol.constraints
    ok = sol.certified
    sel = np.asarray(alpha)
    out = []
    for k in range(cs.N):
        i, t = int(cs.sample[k]), int(cs.other[k])
        out.append(dict(record="constraint", sample=i, token=t, margin=float(sol.margins[k]) if ok else np.nan,
                        rhs=float(cs.rhs[k]), gamma_sel=float(gamma[i, sel[i]]), gamma_tok=float(gamma[i, t]), **cols))
    return out


def support_sets(cons: pd.DataFrame) -> dict[int, set[int]]:
    """Support tokens per sample from constraint rows (``|margin - rhs| <= SUPPORT_TOL``)."""
    out: dict[int, set[int]] = {}
    for r in cons.itertuples():
        out.setdefault(int(r.sample), set())
        if abs(r.margin - r.rhs) <= SUPPORT_TOL * max(1.0, abs(r.rhs)):
            out[int(r.sample)].add(int(r.token))
    return out


def locally_optimal_from_rows(cons: pd.DataFrame) -> float:
    """1.0 if the selection of these constraint rows is locally optimal (spec 3.6), 0.0 if not, NaN if unknown.

    Feasible and certified (finite margins, all >= rhs up to the certified precision), then
    :func:`attnsvm.svm.analysis.locally_optimal_rows` on the stored rows (support as in
    :func:`~attnsvm.svm.analysis.support_indices`: ``|margin - rhs| <= SUPPORT_TOL max(1, |rhs|)``; scores
    ``gamma_sel`` and ``gamma_tok``).
    """
    if len(cons) == 0:
        return float("nan")
    m = cons["margin"].to_numpy(float)
    if not np.all(np.isfinite(m)):
        return float("nan")
    rhs = cons["rhs"].to_numpy(float)
    if np.any(m < rhs - SVM_PRECISION * np.maximum(1.0, np.abs(m))):
        return 0.0
    sup = np.abs(m - rhs) <= SUPPORT_TOL * np.maximum(1.0, np.abs(rhs))
    return float(locally_optimal_rows(sup, cons["gamma_sel"].to_numpy(float), cons["gamma_tok"].to_numpy(float)))


# ------------------------------------------------------------------ SVMs of the prompt model


def p_svm(problem: TokenProblem, select, relaxed=None):
    """The (relaxed) p-SVM of a prompt problem for a selection (exact QP of attnsvm.svm)."""
    kw = {}
    if relaxed is True:
        kw["Y"] = problem.Y
    return solve_p_svm(problem.X, problem.W, np.asarray(select, dtype=np.int64), relaxed, **kw)


def joint_svms(kind: str):
    """E3 data ``kind`` ("tight" or "relaxed") with its v-SVM, p-SVM and relaxed p-SVM (token 1 selected)."""
    prob = mm_joint(kind)
    sel = np.ones(prob.n, dtype=np.int64)
    vs = solve_v_svm(prob.X, prob.Y, sel)
    pm = p_svm(prob, sel)
    pr = p_svm(prob, sel, relaxed=True)
    return prob, vs, pm, pr


def e2_as_cross_attention() -> tuple[TokenProblem, np.ndarray]:
    """The E2 tokens as cross-attention with the fixed query ``z = (1, 1, 1) / sqrt(3)``; returns (problem, z)."""
    prob = mm_multi_input()
    z = np.array([1.0, 1.0, 1.0]) / np.sqrt(3.0)
    return TokenProblem(prob.X, np.tile(z, (prob.n, 1)), Y=prob.Y, v=prob.v, name="e2-as-W"), z


# ------------------------------------------------------------------ drawing


def draw_path(ax, P2, color, arrows_every=10, lw=1.0, alpha=1.0, label=None, ls="-"):
    """A 2-D iterate path ``P2 (steps, 2)`` with an arrow every ``arrows_every`` steps."""
    ax.plot(P2[:, 0], P2[:, 1], color=color, lw=lw, alpha=alpha, label=label, ls=ls)
    for j in range(0, len(P2) - 1, arrows_every):
        a, b = P2[j], P2[min(j + 1, len(P2) - 1)]
        if np.linalg.norm(b - a) > 0:
            ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="->", color=color, lw=lw, alpha=alpha))


def draw_ray(ax, direction, length, color, label, ls="--", lw=1.6):
    """The ray from 0 along the first two coordinates of ``direction``, ``length`` long."""
    u = np.asarray(direction[:2], dtype=np.float64)
    u = u / np.linalg.norm(u)
    ax.plot([0, length * u[0]], [0, length * u[1]], ls=ls, color=color, lw=lw, label=label)
