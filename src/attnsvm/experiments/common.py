"""Small helpers shared by the experiments: checkpoints, seed chunks, table lookups, SVM certificates in
the results and the certified check, deviations of a preset (figures: :mod:`attnsvm.plotting`)."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pandas as pd

from attnsvm.svm import CERTIFIED_GAP, CERTIFIED_VIOLATION
from attnsvm.experiments.checks import Check, integrity_check


def seed_chunks(seeds, size: int) -> list[list[int]]:
    """Split a list of seeds into consecutive chunks of at most ``size``."""
    seeds = [int(s) for s in seeds]
    return [seeds[i:i + size] for i in range(0, len(seeds), size)]


def log_steps(total: int, count: int, extra=()) -> list[int]:
    """0, ``total``, ``count`` log-spaced steps in [1, total] (rounded, deduplicated) and ``extra`` (all <= total)."""
    pts = np.round(np.logspace(0, np.log10(max(total, 1)), count)).astype(int)
    return sorted({0, int(total), *(int(p) for p in pts if p <= total), *(int(e) for e in extra if 0 <= e <= total)})


def final_rows(table: pd.DataFrame, by=("seed",)) -> pd.DataFrame:
    """Rows at the last recorded step of each group."""
    last = table.groupby(list(by))["step"].transform("max")
    return table[table["step"] == last]


def at_step(table: pd.DataFrame, step: int) -> pd.DataFrame:
    """Rows recorded at the checkpoint closest to ``step`` (at or below it)."""
    steps = np.sort(table["step"].unique())
    below = steps[steps <= step]
    chosen = below[-1] if below.size else steps[0]
    return table[table["step"] == chosen]


def half_unit(figure: str) -> float:
    """Half a unit of the last printed decimal of a spec figure: ``"0.9747" -> 5e-5``, ``"3.5e-5" -> 5e-7``."""
    return 0.5 * 10.0 ** Decimal(figure).as_tuple().exponent


# ------------------------------------------------------------------ SVM certificates in the results


def svm_record(solution, prefix: str = "svm") -> dict:
    """The certificate of an SVM solve as table columns ``{prefix}_status``, ``_violation``, ``_gap``, ``_certified``.

    ``solution``: an :class:`~attnsvm.svm.SVMSolution`; a list of them (one column set for
    several solves: the statuses joined by ``","``, the worst relative violation and gap, certified
    only if every one is); or ``None`` (no solve: status ``""``, NaN, not certified). Violation
    and gap are relative, as the solver's :class:`~attnsvm.svm.Certificate` reports them.
    """
    sols = [] if solution is None else (list(solution) if isinstance(solution, (list, tuple)) else [solution])
    if not sols:
        return {f"{prefix}_status": "", f"{prefix}_violation": np.nan, f"{prefix}_gap": np.nan,
                f"{prefix}_certified": False}
    return {f"{prefix}_status": ",".join(sorted({str(s.status) for s in sols})),
            f"{prefix}_violation": max(float(s.certificate.max_violation) for s in sols),
            f"{prefix}_gap": max(float(s.certificate.duality_gap) for s in sols),
            f"{prefix}_certified": all(bool(s.certified) for s in sols)}


def uncertified(table: pd.DataFrame, prefix: str = "svm", norm: str = "fro") -> np.ndarray:
    """``(rows,)`` bool: the rows of ``table`` whose solve ``prefix`` is used but not certified.

    Read from the columns :func:`svm_record` writes: a row is certified only when its
    ``{prefix}_certified`` flag is true, every status is "optimal", and its relative violation
    and duality gap lie in ``[0, CERTIFIED_VIOLATION]`` and ``[0, CERTIFIED_GAP[norm]]`` (both are
    relative and non-negative by definition: a negative value is not a certificate; NaN fails).
    A missing column fails every row. Rows with a false ``{prefix}_used`` column are not judged.
    """
    n = 0 if table is None else len(table)
    if n == 0:
        return np.zeros(0, bool)

    def col(name, default=np.nan):
        return table[f"{prefix}_{name}"].to_numpy() if f"{prefix}_{name}" in table.columns else np.full(n, default)

    used = pd.Series(col("used", True)).eq(True).to_numpy()
    flag = pd.Series(col("certified", False)).eq(True).to_numpy()
    status = np.array([isinstance(s, str) and set(s.split(",")) == {"optimal"} for s in col("status", None)])
    viol = pd.to_numeric(pd.Series(col("violation")), errors="coerce").to_numpy(dtype=float)
    gap = pd.to_numeric(pd.Series(col("gap")), errors="coerce").to_numpy(dtype=float)
    ok = (flag & status & (viol >= 0) & (viol <= CERTIFIED_VIOLATION) & (gap >= 0)
          & (gap <= CERTIFIED_GAP.get(norm, CERTIFIED_GAP["fro"])))
    return used & ~ok


#: the default reason of :func:`certified_check`
CERTIFIED_REASON = ("a comparison with an SVM solution needs the solution proven optimal (status optimal, relative "
                    "violation <= 1e-8, relative duality gap <= 1e-8 Frobenius / 1e-6 nuclear); an uncertified solution "
                    "is stored as NaN and never compared with")


def certified_check(table: pd.DataFrame, prefixes=("svm",), what: str = "", *, expected: int | None = None,
                    norms: dict | None = None, name: str = "every SVM used is certified",
                    reason: str = CERTIFIED_REASON) -> Check:
    """Integrity: every SVM solve the rows of ``table`` rely on is present and certified.

    Each row holds the :func:`svm_record` columns of one solve per prefix in ``prefixes``
    (``norms`` maps a prefix to its norm, "fro" by default, for the gap's bar). Value: the used
    solves that are not certified (:func:`uncertified`), plus, with ``expected``, the solves
    missing from that count; without ``expected``, a table with no solve at all counts 1
    (nothing was compared). Passes at 0.
    """
    norms = norms or {}
    bad, judged, worst_v, worst_g = 0, 0, [], []
    for p in prefixes:
        rows = table
        if f"{p}_used" in table.columns:
            rows = table[pd.Series(table[f"{p}_used"]).eq(True).to_numpy()]
        bad += int(uncertified(rows, p, norms.get(p, "fro")).sum())
        judged += len(rows)
        for key, acc in (("violation", worst_v), ("gap", worst_g)):
            if f"{p}_{key}" in rows.columns and len(rows):
                acc.append(float(pd.to_numeric(rows[f"{p}_{key}"], errors="coerce").max()))
    if expected is not None:
        missing = max(0, int(expected) - judged)
        counted = f"{judged} of {int(expected)} SVM solutions stored"
    else:
        missing = 1 if judged == 0 else 0
        counted = f"{judged} SVM solutions"
    detail = (counted + (f" ({what})" if what else "") + f"; {bad + missing} missing or not certified"
              + (f"; max relative violation {max(worst_v):.2g}, max relative gap {max(worst_g):.2g}"
                 if worst_v and worst_g else ""))
    return integrity_check(name, float(bad + missing), "==", 0, detail, reason=reason)


def config_deviations(config, notes: dict) -> list[dict]:
    """Deviations for the config fields that differ from the experiment's defaults (the paper's protocol).

    ``notes``: field -> (what the spec / full protocol says, why the difference matters). Quick
    presets are listed this way (fewer steps, runs or radii; checks that need the full scale).
    Returns ``[{"spec", "here": "field = value (full preset: default)", "reason"}, ...]``.
    """
    defaults = type(config)()
    out = []
    for field, (spec, reason) in notes.items():
        here, full = getattr(config, field), getattr(defaults, field)
        if here != full:
            out.append({"spec": spec, "here": f"{field} = {here} (full preset: {full})", "reason": reason})
    return out
