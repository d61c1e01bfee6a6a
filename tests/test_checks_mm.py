"""Every verdict of the mm-* experiments can fail: corrupted result tables fail the matching check.

Module fixtures run each quick preset once (and, for the checks that need the float32 replay or
longer runs, an extended quick config), then feed ``experiment.checks`` copies of the results
table that violate one claim each: swapped columns, wrong signs, a direction the SVM did not
give, values off by more than the spec's printed precision, or pure noise. Every check name of
every table must be covered by a corruption that makes it fail.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from attnsvm.experiments import build_config, registry

from attnsvm.runner import run_experiment
from attnsvm.experiments.checks import KINDS, load_findings

MM_NAMES = ["mm-single-input", "mm-multi-input", "mm-joint", "mm-loss-functions", "mm-regularization-path"]
#: quick config plus what activates the checks the quick preset leaves out (float32 replay, t = 2000, iteration 999)
EXTENDED = {"mm-single-input": {"float32_replica": True},
            "mm-multi-input": {"float32_steps": 1000, "ngd_long_steps": 2000},
            "mm-joint": {"float32_replica": True}}
#: columns that identify a row (kept when measured numbers are replaced by noise)
KEYS = {"step", "select", "init_y", "init_x", "sample", "token", "C", "a0", "a1", "R", "r", "instance", "rhs"}


@pytest.fixture(scope="module")
def runs(quick_out):
    """name -> (experiment, quick config, quick summary, quick table, extended config, extended table)."""
    out = {}
    base = quick_out
    for name in MM_NAMES:
        exp = registry()[name]
        cfg = build_config(exp, quick=True)
        summary = run_experiment(exp, cfg, str(base), progress=False)
        table = pd.read_parquet(base / name / "results.parquet")
        if name in EXTENDED:  # the tasks only (no figures): the checks are what is tested here
            xcfg = build_config(exp, quick=True, overrides=EXTENDED[name])
            xtable = pd.concat([exp.run_task(xcfg, t) for t in exp.tasks(xcfg)], ignore_index=True)
        else:
            xcfg, xtable = cfg, table
        out[name] = (exp, cfg, summary, table, xcfg, xtable, base / name)
    return out


def _verdicts(exp, cfg, table) -> dict[str, bool]:
    cs = exp.checks(cfg, table)
    names = [c.name for c in cs]
    assert len(names) == len(set(names)), "check names must be unique"
    return {c.name: c.passed for c in cs}


# ------------------------------------------------------------------ the real tables


@pytest.mark.parametrize("name", MM_NAMES)
def test_quick_preset_passes_every_non_finding_check(runs, name):
    exp, cfg, summary, table, *_, expdir = runs[name]
    assert not summary.failed, summary.failed
    assert not summary.failed_checks, [(c["name"], c["value"], c["threshold"]) for c in summary.failed_checks]
    listed = {f.check for f in load_findings() if f.experiment == name and f.applies("quick")}
    for c in summary.checks:
        assert c["source"].strip() and c["threshold_reason"].strip(), c["name"]
        assert c["kind"] in KINDS
        if c["name"] in listed:
            assert not c["passed"], f"finding no longer holds: {c['name']}"
    names = {c["name"] for c in summary.checks}
    assert listed <= names, f"findings name checks that do not exist: {listed - names}"
    assert len(summary.checks) >= 8
    files = os.listdir(expdir)
    assert any(f.endswith(".png") for f in files) and any(f.endswith(".pdf") for f in files)
    meta = json.loads((expdir / "meta.json").read_text())
    assert meta["explain"]
    devs = meta["deviations"]
    assert devs and all(set(d) == {"spec", "here", "reason"} for d in devs)


@pytest.mark.parametrize("name", MM_NAMES)
def test_noise_fails_every_check(runs, name):
    """The outside audit: every measured number replaced by noise (row keys kept, or not) passes no check."""
    exp, cfg, _, table, xcfg, xtable, _ = runs[name]
    for c_, t_ in ((cfg, table), (xcfg, xtable)):
        for keep in (True, False):
            rng = np.random.default_rng(0)
            noisy = t_.copy()
            for col in noisy.columns:
                if (pd.api.types.is_numeric_dtype(noisy[col]) and not pd.api.types.is_bool_dtype(noisy[col])
                        and not (keep and col in KEYS)):
                    noisy[col] = rng.standard_normal(len(noisy))
            passed = [n for n, ok in _verdicts(exp, c_, noisy).items() if ok]
            assert not passed, (keep, passed)


# ------------------------------------------------------------------ targeted corruptions


def _mask(t, where):
    m = np.ones(len(t), bool)
    for col, val in where.items():
        m &= (t[col] == val).to_numpy()
    assert m.any(), f"no row matches {where}"
    return m


def setv(col, fn, **where):
    """Corruption: ``col = fn(col)`` on the rows matching ``where``."""
    def apply(t):
        t = t.copy()
        m = _mask(t, where)
        t.loc[m, col] = fn(t.loc[m, col].to_numpy())
        return t
    return apply


def swap(a, b, **where):
    """Corruption: swap columns ``a`` and ``b`` on the rows matching ``where``."""
    def apply(t):
        t = t.copy()
        m = _mask(t, where)
        va, vb = t.loc[m, a].to_numpy().copy(), t.loc[m, b].to_numpy().copy()
        t.loc[m, a], t.loc[m, b] = vb, va
        return t
    return apply


def chain(*fs):
    def apply(t):
        for f in fs:
            t = f(t)
        return t
    return apply


def const(x):
    return lambda v: np.full(len(v), x, dtype=float)


def add(x):
    return lambda v: v + x


def mul(x):
    return lambda v: v * x


def random_matrix(rows, prefix="w", k=9, seed=1):
    """Corruption: a random matrix instead of the stored one (columns w0..w8)."""
    R = np.random.default_rng(seed).standard_normal(k)
    return chain(*(setv(f"{prefix}{i}", const(R[i]), **rows) for i in range(k)))


def beyond_one(col, **where):
    """Corruption: the first row matching ``where`` holds -(1 + 1e-6) in ``col``: a cosine outside [-1, 1] by more
    than the integrity partner's rounding tolerance (1e-9), on the negative side (the bound is on |cos|)."""
    def apply(t):
        t = t.copy()
        t.loc[t.index[np.flatnonzero(_mask(t, where))[0]], col] = -(1.0 + 1e-6)
        return t
    return apply


def partner(what, col):
    """The start of the name of the integrity partner of cosine column ``col`` (holding ``what``)."""
    return f"{what} ({col}) lies in [-1, 1]"


TRAIN64 = dict(record="train", precision="float64")
F32 = dict(record="train", precision="float32")

CORRUPT = {
    "mm-single-input": {
        "every SVM used is certified": setv("svm_violation", const(1e-3), record="svm", dataset="global", select=0),
        "fact 1:": setv("p0", add(1e-6), record="svm", dataset="global", select=0),
        "fact 2 (global data): p^mm": setv("p1", const(1e-6), record="svm", dataset="global", select=1),
        "fact 2 (global data): the support": setv("margin", const(1.0), record="constraint", dataset="global",
                                                  select=1, token=0),
        "fact 3 (global data): p^mm": setv("norm", add(1e-3), record="svm", dataset="global", select=2),
        "fact 3 (global data): the support": setv("margin", const(1.5), record="constraint", dataset="global",
                                                  select=2, token=1),
        "fact 2 (local data): p^mm": swap("p0", "p1", record="svm", dataset="local", select=1),
        "fact 2 (local data): the support": setv("margin", const(1.2), record="constraint", dataset="local",
                                                 select=1, token=2),
        "fact 3 (local data): p^mm": setv("p1", mul(-1), record="svm", dataset="local", select=2),
        "fact 3 (local data): the support": setv("margin", const(2.0), record="constraint", dataset="local",
                                                 select=2, token=0),
        # the selected token beats its supports: alpha = 2 becomes locally optimal
        "fact 3: alpha=2 is never": setv("gamma_sel", const(5.0), record="constraint", dataset="local", select=2),
        # the tie of token 2 with token 1 removed: alpha = 1 becomes locally optimal on the global data
        "fact 4: the locally optimal selections of the global": setv("gamma_tok", const(0.0), record="constraint",
                                                                     dataset="global", select=1, token=2),
        "fact 4: the locally optimal selections of the local": setv("gamma_tok", const(0.95), record="constraint",
                                                                    dataset="local", select=1, token=2),
        "L2 without Assumption B": setv("grad_dot_global", mul(-1), record="grad", dataset="local"),
        "E1 global data: every init goes to": swap("cos_global", "cos_local", dataset="global", **TRAIN64),
        "E1 local data: inits y in {1, .5, 0, -.5} go to": swap("cos_global", "cos_local", dataset="local", **TRAIN64),
        # the pure-NGD convergence runs: one init 3 degrees off the global direction fails the 0.999 bar
        "E1 global data: every init converges": setv("cos_global", const(0.9986), record="converge", dataset="global",
                                                     init_y=-1.5),
        "E1 local data: inits y in {1, .5, 0, -.5} converge": swap("cos_global", "cos_local", record="converge",
                                                                   dataset="local", init_y=-1.0),
        "[RUN] E1 local runs at iteration 200 (float64)": setv("p1", mul(-1), dataset="local", init_y=-1.0,
                                                                step=199, **TRAIN64),
        "[RUN] E1 local runs stay local": setv("p1", add(1.0), dataset="local", init_y=-1.5, step=999, **TRAIN64),
        "[RUN] E1 local runs at iteration 200 (float32": setv("p1", mul(-1), dataset="local", init_y=-1.0,
                                                               step=199, **F32),
        "[RUN] E1 float32 quirk": swap("cos_global", "cos_local", dataset="local", init_y=-1.5, step=999, **F32),
        partner("cos(p, p^mm_global)", "cos_global"): beyond_one("cos_global", dataset="global", **TRAIN64),
        partner("cos(p, p^mm_local)", "cos_local"): beyond_one("cos_local", record="converge", dataset="local"),
    },
    "mm-multi-input": {
        "every SVM used is certified": setv("svm_violation", const(1e-3), record="svm", variant="model-W"),
        "fact 5: E2 data (seed 0) token 0": setv("x0", add(1e-3), record="data", sample=0, token=0),
        "fact 5: E2 data equals": setv("x1", add(1e-3), record="data", sample=2, token=6),
        "fact 6: E2 p^mm (model W)": setv("p0", add(1e-4), record="svm", variant="model-W"),
        "fact 6: E2 ||p^mm||": setv("margin", add(1e-3), record="svm", variant="model-W"),
        "fact 6: the notebook's W = I": setv("half_sq", add(1e-4), record="svm", variant="identity-W"),
        "E2 quirk": setv("slope", add(1e-6), record="svm", variant="identity-W"),
        "fact 7:": setv("margin", const(1.0), record="constraint", sample=2, token=4),
        "fact 8 (float32, init 0, iteration 200): softmax": setv("prob_opt", const(0.99), optimizer="ngd", init_x=0.0,
                                                                  step=199, **F32),
        "fact 8 (float32, init 0, iteration 200): ||p||": setv("norm", mul(1.01), optimizer="gd", step=199, **F32),
        "[RUN] E2 float32, init 0, iteration 50": swap("prob_opt", "cos", optimizer="gd", step=50, **F32),
        "[RUN] E2 float32 GD": setv("norm", const(99.8), optimizer="gd", step=999, **F32),
        "[RUN] E2 float32: all NGD paths": setv("p1", mul(-1), optimizer="ngd", init_x=1.0, step=999, **F32),
        "fact 15:": setv("norm", const(100.0), optimizer="ngd", init_x=0.0, step=1000, **TRAIN64),
        "[RUN] NGD float64 (init 0): cos(p, p^mm) = 0.99978": setv("cos", const(0.9999), optimizer="ngd", init_x=0.0,
                                                                   step=1000, **TRAIN64),
        "[RUN] NGD float64 (init 0): cos(p, p^mm) = 0.99994": setv("cos", const(0.99978), optimizer="ngd",
                                                                   init_x=0.0, step=2000, **TRAIN64),
        "[RUN] naive softmax Jacobian": swap("cos", "prob_opt", optimizer="ngd", step=1000, record="train",
                                             precision="float64-naive"),
        "E2: every NGD path": setv("cos", const(0.99), optimizer="ngd", init_x=1.0, step=1000, **TRAIN64),
        "fact 14 / [RUN]": setv("norm", mul(1.001), optimizer="gd", step=1000, **TRAIN64),
        "fact 14: GD ||p(t)|| grows": setv("norm", add(0.05), optimizer="gd", step=10000, **TRAIN64),
        "[RUN] GD directional error": setv("cos", add(-1e-3), optimizer="gd", step=10000, **TRAIN64),
        # a direction the attention cannot see (the score axis e_3) instead of p^mm
        "fact 12 / Lemma L2 along": chain(setv("p0", const(0.0), record="svm", variant="model-W"),
                                          setv("p1", const(0.0), record="svm", variant="model-W"),
                                          setv("p2", const(1.0), record="svm", variant="model-W")),
        "fact 12 / Lemma L2 on random": setv("dot", mul(-1), record="lemma", instance=0),
        "W-equivalence": setv("w0", add(1e-3), record="wsvm"),
        "fact 13:": setv("q_resid", const(1e-6), record="wtrain", optimizer="gd", step=1),
        "GD on W:": random_matrix(dict(record="wtrain", optimizer="ngd", step=1000)),
        partner("cos(p, p^mm)", "cos"): beyond_one("cos", optimizer="gd", **TRAIN64),
        partner("cos(W, W^mm)", "cos_wmm"): beyond_one("cos_wmm", record="wtrain"),
    },
    "mm-joint": {
        "every SVM used is certified": setv("svm_gap", const(1e-5), record="svm", dataset="tight", quantity="p_mm"),
        "fact 9: E3 tight p^mm": setv("x", add(1e-6), record="svm", dataset="tight", quantity="p_mm"),
        "fact 9: E3 tight v^mm": setv("x", const(0.01), record="svm", dataset="tight", quantity="v_mm"),
        "fact 9: E3 tight: all three": setv("margin", const(1.5), record="vmargin", dataset="tight", sample=2),
        "E3 tight: p^relax = p^mm": setv("y", add(1e-4), record="svm", dataset="tight", quantity="p_relax"),
        "fact 10: E3 relaxed p^mm": setv("y", const(0.25), record="svm", dataset="relaxed", quantity="p_relax"),
        "fact 10: E3 relaxed support": setv("margin", const(1.0), record="vmargin", dataset="relaxed", sample=2),
        "[RUN] E3 tight, iteration 199": swap("cos_p_mm", "cos_v_mm", run="notebook", dataset="tight", step=199,
                                              **TRAIN64),
        "[RUN] E3 relaxed, iteration 199": swap("cos_p_mm", "cos_p_relax", run="notebook", dataset="relaxed",
                                                step=199, **TRAIN64),
        "[RUN] E3 relaxed stays near": swap("cos_p_mm", "cos_p_relax", run="notebook", dataset="relaxed", step=999,
                                            **TRAIN64),
        "[RUN] E3 tight probabilities at the start": swap("prob_softmax", "prob_logistic", run="notebook",
                                                          dataset="tight", step=0, **TRAIN64),
        "[RUN] E3 tight: the softmax probability dips": setv("prob_softmax", add(0.01), run="notebook",
                                                             dataset="tight", step=7, **TRAIN64),
        "[RUN] E3 tight: both probabilities": setv("prob_softmax", const(0.5), run="notebook", dataset="tight",
                                                   step=120, **TRAIN64),
        "pitfall 4:": setv("v_norm", const(99.9), run="notebook", dataset="tight", step=999, **TRAIN64),
        "[RUN] E3 float32 quirk": swap("cos_p_mm", "cos_p_relax", dataset="relaxed", step=999, **F32),
        "E3 joint NGD (engine": swap("cos_p_mm", "cos_p_relax", run="engine", dataset="relaxed", step=1000,
                                     **TRAIN64),
        partner("cos(p, p^mm)", "cos_p_mm"): beyond_one("cos_p_mm", run="engine", **TRAIN64),
        partner("cos(p, p^relax)", "cos_p_relax"): beyond_one("cos_p_relax", run="notebook", **TRAIN64),
        partner("cos(v, v^mm)", "cos_v_mm"): beyond_one("cos_v_mm", dataset="relaxed", **TRAIN64),
    },
    "mm-loss-functions": {
        "every SVM used is certified": setv("svm_violation", const(1.0), record="svm", C=2.0, a0=1, a1=1),
        "fact 11: p^mm": setv("p1", const(0.1), record="svm", C=10.0, a0=1, a1=1),
        # the selected tokens of alpha = (0, 0) made to beat their (active) competitors: a second local optimum
        "fact 11: alpha = (1, 1) is the only": setv("gamma_sel", const(5.0), record="constraint", C=2.0, a0=0, a1=0),
        "[RUN] E4 y-offsets": setv("p1", mul(-1), record="train", loss="correlation", C=10.0, step=199),
        "[RUN] E4 logistic, C = 100": setv("p1", add(0.1), record="train", loss="logistic", C=100.0, step=199),
        "[RUN] E4 directions": swap("p0", "p1", record="train", loss="logistic", C=10.0, step=999),
        "E4 correlation:": setv("p1", const(-0.1), record="train", loss="correlation", C=5.0, step=199),
        "E4 logistic:": setv("p1", const(-5.0), record="train", loss="logistic", C=3.0, step=199),
        "E4 exponential:": setv("p1", const(0.15), record="train", loss="exponential", C=2.0, step=199),
        "E4: every run heads toward": setv("cos", add(-0.1), record="train", loss="logistic", C=5.0, step=1000),
        partner("cos(p, p^mm)", "cos"): beyond_one("cos", record="train", loss="exponential"),
    },
    "mm-regularization-path": {
        "every SVM used is certified": setv("svm_violation", const(1e-2), record="svm", quantity="W_mm"),
        "[RUN] p-path on the E2 data: cos(p(R), p^mm) = 0.9747": setv("cos", add(1e-4), record="p-path", R=2.0),
        "[RUN] p-path on the E2 data: cos(p(R), p^mm) = 0.9934": setv("cos", add(-1e-4), record="p-path", R=5.0),
        "[RUN] p-path on the E2 data: cos(p(R), p^mm) = 0.998891": setv("cos", add(-1e-3), record="p-path", R=10.0),
        "[RUN] p-path on the E2 data: cos(p(R), p^mm) = 0.999999": setv("cos", const(0.99999), record="p-path",
                                                                        R=20.0),
        # the unrestricted path replaced by the local direction
        "local data, unrestricted": chain(setv("p0", const(80.0), record="local-path", region="global", R=80.0),
                                          setv("p1", const(0.0), record="local-path", region="global", R=80.0)),
        # stuck on the cone boundary
        "local data, path in the positive-margin cone": lambda t: setv(
            "angle_local", const(float(t[(t["region"] == "cone")]["half_angle"].iloc[0])), record="local-path",
            region="cone", R=80.0)(t),
        "local data, a cone wider": setv("angle_local", const(0.0), record="local-path", region="wide-cone", R=80.0),
        "[RUN] joint path, tight": setv("slope", const(0.25), record="joint-path", dataset="tight", r=40.0, R=40.0),
        "[RUN] joint path, relaxed: p slope 0.097": setv("slope", mul(-1), record="joint-path", dataset="relaxed",
                                                         r=10.0, R=10.0),
        "[RUN] joint path, relaxed: p slope 0.0008": setv("slope", const(0.0), record="joint-path", dataset="relaxed",
                                                          r=20.0, R=10.0),
        "[RUN] joint path, relaxed: p slope 0.0000": setv("slope", const(0.2), record="joint-path", dataset="relaxed",
                                                          r=40.0, R=10.0),
        "[RUN] joint path, relaxed: with R = 2r": setv("slope", const(0.0), record="joint-path", dataset="relaxed",
                                                       r=10.0, R=20.0),
        "joint path: v direction": setv("cos_v", const(0.99), record="joint-path", dataset="tight", r=5.0, R=5.0),
        "engine W-path": random_matrix(dict(record="w-path", R=20.0)),
        partner("cos(p(R), p^mm) on the p-path, cos(W(R), W^mm) on the W-path", "cos"): beyond_one("cos",
                                                                                                  record="w-path"),
        partner("local path: cos(p(R), its region's target p^mm_global or p^mm_local)", "cos_target"): beyond_one(
            "cos_target", record="local-path", region="cone"),
        partner("local path: cos(p(R), p^mm_global)", "cos_global"): beyond_one("cos_global", record="local-path"),
        partner("local path: cos(p(R), p^mm_local)", "cos_local"): beyond_one("cos_local", record="local-path",
                                                                              region="wide-cone"),
        partner("joint path: cos(v, v^mm)", "cos_v"): beyond_one("cos_v", record="joint-path", dataset="relaxed"),
        partner("joint path: cos(p, p^mm)", "cos_p_mm"): beyond_one("cos_p_mm", record="joint-path"),
        partner("joint path: cos(p, p^relax)", "cos_p_relax"): beyond_one("cos_p_relax", record="joint-path"),
    },
}


@pytest.mark.parametrize("name", MM_NAMES)
def test_each_corruption_fails_its_check(runs, name):
    exp, _, _, _, xcfg, xtable, _ = runs[name]
    clean = _verdicts(exp, xcfg, xtable)
    listed = {f.check for f in load_findings() if f.experiment == name}
    covered = set()
    for prefix, corrupt in CORRUPT[name].items():
        hit = [n for n in clean if n.startswith(prefix)]
        assert len(hit) == 1, f"{prefix!r} matches {hit}"
        covered.add(hit[0])
        after = _verdicts(exp, xcfg, corrupt(xtable))
        assert not after[hit[0]], f"corruption for {hit[0]!r} did not make it fail"
    missing = set(clean) - covered
    assert not missing, f"checks without a corruption test: {missing}"
    # the clean extended table passes everything except listed findings
    assert {n for n, ok in clean.items() if not ok} <= listed


def test_corrected_spec_values_pass_and_the_old_figures_fail(runs):
    """The corrected spec's figures (fact 6, R = 10) pass on the measured table; the old, rounded figures fail."""
    exp, _, _, _, cfg, t, _ = runs["mm-multi-input"]
    name = "fact 6: E2 ||p^mm|| (model W) = 0.861787, margin 1.160380"
    old = chain(setv("norm", const(0.86176), record="svm", variant="model-W"),
                setv("margin", const(1.16042), record="svm", variant="model-W"))(t)
    assert _verdicts(exp, cfg, t)[name] and not _verdicts(exp, cfg, old)[name]
    exp, cfg, _, t, *_ = runs["mm-regularization-path"]
    name = "[RUN] p-path on the E2 data: cos(p(R), p^mm) = 0.998891 at R = 10"
    old = setv("cos", const(0.99890), record="p-path", R=10.0)(t)
    assert _verdicts(exp, cfg, t)[name] and not _verdicts(exp, cfg, old)[name]


def test_uncertified_svm_makes_comparisons_nan(monkeypatch):
    """An SVM whose certificate fails is stored as NaN, so every comparison with it fails."""
    from attnsvm.experiments.mm import common as mm_common
    from attnsvm.generators import mm_single_input

    sol = mm_common.p_svm(mm_single_input("global"), [0])
    assert sol.certified and np.all(np.isfinite(mm_common.certified_solution(sol)))
    sol.certificate.duality_gap = 1e-3
    assert not sol.certified and np.all(np.isnan(mm_common.certified_solution(sol)))
    row = pd.DataFrame([dict(record="svm", **mm_common.svm_record(sol))])
    c = mm_common.certificate_check(row, 1, "one SVM")
    assert not c.passed and c.kind == "integrity"
    assert not mm_common.certificate_check(row.iloc[:0], 1, "missing").passed


def test_rounding_helpers():
    from attnsvm.experiments.mm.common import half_unit, rounding_dev

    assert half_unit("0.9747") == pytest.approx(5e-5) and half_unit("3.5e-5") == pytest.approx(5e-7)
    assert half_unit("25") == 0.5 and half_unit("-0.036") == pytest.approx(5e-4)
    assert rounding_dev([(0.97474, "0.9747")]) == pytest.approx(0.8)
    assert rounding_dev([(0.97476, "0.9747")]) > 1
    assert rounding_dev([(1.0 + 5e-9, 1.0)], slack=1e-8) == pytest.approx(0.5)
    assert np.isnan(rounding_dev([(float("nan"), "1.0")]))
    with pytest.raises(ValueError):
        rounding_dev([(1.0, 1.0)])
