"""Batched nuclear-norm Gen-SVMs, the head probe, the CLI helper and quick experiment runs."""

import json

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.problem import TokenProblem  # noqa: E402
from attnsvm.real.lowrank import solve_gen_nuclear_batch  # noqa: E402
from attnsvm.real.probe import probe_heads, random_like, select_tokens  # noqa: E402
from attnsvm.svm import solve_gen_svm  # noqa: E402


def _corr(A, B):
    return float(np.sum(A * B) / np.linalg.norm(A) / np.linalg.norm(B))


def test_lowrank_solver_matches_the_conic_solver():
    rng = np.random.default_rng(0)
    n, T, d = 5, 4, 6
    X = rng.standard_normal((n, T, d))
    Z = rng.standard_normal((n, d))
    sel = np.zeros((2, n, T), bool)
    sel[0, np.arange(n), rng.integers(0, T, n)] = True
    sel[1, :, :2] = True  # two tied tokens per sample (equality rows)
    res = solve_gen_nuclear_batch(X, np.ones((n, T), bool), Z, sel, tol=1e-6, gap_tol=1e-5, max_rounds=40)
    assert list(res.status) == ["optimal", "optimal"]
    for k in range(2):
        ref = solve_gen_svm(TokenProblem(X, Z), sel[k], norm="nuclear")
        assert ref.status == "optimal"
        ref_nuc = np.linalg.svd(ref.W, compute_uv=False).sum()
        assert res.nuclear[k] == pytest.approx(ref_nuc, rel=1e-4)
        assert _corr(res.W[k], ref.W) > 0.999
    assert res.max_violation.max() <= 1e-6 and np.all(res.spec <= 1 + 1e-4)


def test_lowrank_padding_is_ignored_and_bad_input_rejected():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 5, 6))
    mask = np.ones((4, 5), bool)
    mask[0, 3:] = False
    Z = rng.standard_normal((4, 6))
    sel = np.zeros((4, 5), bool)
    sel[:, 1] = True
    res = solve_gen_nuclear_batch(X, mask, Z, sel, tol=1e-6, gap_tol=1e-5, max_rounds=40)
    Xp = X.copy()
    Xp[0, 3:] = 100.0  # garbage on padding must not matter
    res2 = solve_gen_nuclear_batch(Xp, mask, Z, sel, tol=1e-6, gap_tol=1e-5, max_rounds=40)
    assert _corr(res.W[0], res2.W[0]) > 0.9999
    assert np.all(res.margins[0][mask & ~sel] >= 1 - 1e-5)
    bad = sel.copy()
    bad[2] = False
    with pytest.raises(ValidationError, match="at least one"):
        solve_gen_nuclear_batch(X, mask, Z, bad)


def test_selection_helpers():
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    a = np.array([[0.05, 0.5, 0.45, 0.0], [0.3, 0.3, 0.2, 0.2]])
    sel = select_tokens(a, mask, 0.25)
    np.testing.assert_array_equal(sel, [[0, 1, 1, 0], [1, 1, 0, 0]])
    low = select_tokens(a, mask, 0.9)
    assert low.sum(axis=1).tolist() == [1, 1]  # the argmax is always selected
    r = random_like(np.stack([sel, sel]), mask, np.random.default_rng(0))
    assert (r.sum(axis=-1) == sel.sum(axis=-1)).all() and not (r & ~mask).any()


def test_probe_heads_small():
    res = probe_heads(["The cat sat on the mat.", "Margins decide which token wins.", "A short one.",
                       "Every head reads its own tokens here."], layers=[1], heads=[0, 5], svm_sentences=4)
    t = res.table
    assert len(t) == 2 and {"corr", "corr_restricted", "corr_random_restricted", "advantage", "svm_status"} <= set(t)
    assert t["svm_status"].eq("optimal").all()
    assert np.all(np.abs(t[["corr", "corr_restricted"]].to_numpy()) <= 1)
    assert res.selected[(1, 0)].shape == (4, len(res.tokens[3]))
    with pytest.raises(ValidationError, match="layers"):
        probe_heads(["x y"], layers=[6])
    with pytest.raises(ValidationError, match="empty"):
        probe_heads(["fine", ""])


def test_run_probe_cli_helper(tmp_path):
    from attnsvm.real.cli_support import run_probe

    f = tmp_path / "s.txt"
    f.write_text("First sentence here.\n\nSecond one, a bit longer.\nThird.\n")
    text = run_probe([2], [3], str(f), out=str(tmp_path / "out"), as_json=True, svm_sentences=3)
    data = json.loads(text)
    assert data["config"]["n_sentences"] == 3 and len(data["heads"]) == 1
    for name in ("probe.csv", "probe.json", "probe_heatmap.png", "probe_heatmap.pdf"):
        assert (tmp_path / "out" / name).exists()
    plain = run_probe([0], [1], ["One sentence.", "Another sentence."], svm_sentences=2)
    assert "corr_restricted" in plain and "total" in plain
    with pytest.raises(ValidationError, match="no such sentences file"):
        run_probe([0], [0], str(tmp_path / "missing.txt"))


@pytest.mark.parametrize("name,overrides", [
    ("real-digits", {"steps": 150}),
    ("real-minilm-embeddings", {"steps": 100, "n_train": 16, "n_test": 16}),
    ("real-minilm-heads", {"n_sentences": 10, "svm_sentences": 6, "layers": [2], "heads": [0, 1]}),
])
def test_quick_experiments_run(tmp_path, name, overrides):
    import attnsvm.experiments.real  # noqa: F401  (registers the experiments)
    from attnsvm.experiments import build_config, registry, run_experiment

    exp = registry()[name]
    cfg = build_config(exp, quick=True, overrides=overrides)
    summary = run_experiment(exp, cfg, str(tmp_path), progress=False)
    assert not summary.failed, summary.failed
    assert summary.checks and all(np.isfinite(c["value"]) for c in summary.checks)
    pngs = list((tmp_path / name).glob("*.png"))
    assert len(pngs) >= 1
