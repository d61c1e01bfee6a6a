"""The head probe's nuclear-norm Gen-SVM (exact IPM on padded sentences), the probe, the CLI helper
and quick experiment runs."""

import json

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("sklearn")

from attnsvm.errors import ValidationError  # noqa: E402
from attnsvm.real.nulls import select_tokens  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_steps import random_like  # noqa: E402
from attnsvm.svm import gen_constraints, solve  # noqa: E402
from attnsvm.svm.nuclear import solve_nuclear  # noqa: E402


def _gen_svm(X, Z, mask, selected):
    """The probe's nuclear Gen-SVM of one head's selections: the rows of the real tokens (``mask``) only."""
    return solve(gen_constraints(X, Z, selected, valid=mask), "nuclear", formulation="gen")


def _corr(A, B):
    return float(np.sum(A * B) / np.linalg.norm(A) / np.linalg.norm(B))


def _padded_instance(seed=0, n=5, T=6, d=6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    Z = rng.standard_normal((n, d))
    mask = np.ones((n, T), bool)
    mask[0, 3:] = False
    mask[3, 4:] = False
    X[~mask] = 0.0
    sel = np.zeros((n, T), bool)
    sel[:, 1] = True
    sel[[1, 4], 2] = True  # two tied tokens (equality rows)
    return X, Z, mask, sel


def _check_certificate(sol):
    cert = sol.certificate
    assert sol.status == "optimal" and sol.info["solver_status"] == "optimal"
    assert cert.duality_gap <= 1e-8 and cert.max_violation <= 1e-9 and cert.dual_infeasibility <= 1e-12
    S = sol.constraints.combine(sol.duals)
    assert np.linalg.norm(S, 2) <= 1 + 1e-9


def test_gen_svm_matches_the_conic_solver():
    X, Z, mask, sel = _padded_instance()
    sol = _gen_svm(X, Z, mask, sel)
    _check_certificate(sol)
    ref = solve_nuclear(gen_constraints(X, Z, sel, valid=mask), solver="cvxpy")
    assert ref.status == "optimal" and ref.info["solver"] == "CLARABEL"
    assert sol.norm_value == pytest.approx(ref.norm_value, rel=1e-6)
    np.testing.assert_allclose(sol.W, ref.W, atol=1e-5 * np.abs(ref.W).max())
    # no padded token enters a row
    cs = sol.constraints
    assert mask[cs.sample, cs.token].all() and mask[cs.sample, cs.other].all()


def test_gen_svm_ignores_padding_and_rejects_bad_input():
    X, Z, mask, sel = _padded_instance(seed=1)
    sol = _gen_svm(X, Z, mask, sel)
    Xp = X.copy()
    Xp[~mask] = 100.0  # garbage on padding must not matter
    sol2 = _gen_svm(Xp, Z, mask, sel)
    np.testing.assert_allclose(sol2.W, sol.W, atol=1e-9 * np.abs(sol.W).max())
    # the margins of the real unselected tokens are >= 1, the selected ones tie
    logits = np.einsum("ntd,de,ne->nt", X, sol.W, Z)
    ref = logits[np.arange(len(X)), sel.argmax(axis=1)]
    assert np.all((ref[:, None] - logits)[mask & ~sel] >= 1 - 1e-9)
    assert np.allclose((ref[:, None] - logits)[sel], 0, atol=1e-9)
    bad = sel.copy()
    bad[0, 4] = True  # padding selected
    with pytest.raises(ValidationError, match="padding"):
        _gen_svm(X, Z, mask, bad)
    bad = sel.copy()
    bad[2] = False
    with pytest.raises(ValidationError, match="at least one"):
        _gen_svm(X, Z, mask, bad)


def test_gen_svm_on_real_states_matches_the_conic_solver():
    """Three real sentences of different lengths (d = 385, padded): IPM == Clarabel."""
    from attnsvm.real.minilm import load_minilm
    from attnsvm.real.pretrained import augment

    fw = load_minilm().forward(["The cat sat.", "Margins decide which token wins here.", "A short one."],
                               attentions=False)
    X = augment(fw.hidden[2]) * fw.mask[:, :, None]
    Z = X[:, 1]
    sel = np.zeros(fw.mask.shape, bool)
    sel[:, 0] = True
    sel[1, 2] = True
    sol = _gen_svm(X, Z, fw.mask, sel)
    _check_certificate(sol)
    ref = solve_nuclear(gen_constraints(X, Z, sel, valid=fw.mask), solver="cvxpy")
    assert sol.norm_value == pytest.approx(ref.norm_value, rel=1e-6)
    assert _corr(sol.W, ref.W) > 1 - 1e-8


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
    assert t["svm_status"].eq("optimal").all() and t["random_status"].eq("optimal").all()
    assert t["svm_gap"].max() <= 1e-8 and t["svm_violation"].max() <= 1e-9
    assert np.all(np.abs(t[["corr", "corr_restricted"]].to_numpy()) <= 1)
    assert res.selected[(1, 0)].shape == (4, len(res.tokens[3]))
    with pytest.raises(ValidationError, match="layers"):
        probe_heads(["x y"], layers=[6])
    with pytest.raises(ValidationError, match="empty"):
        probe_heads(["fine", ""])


def test_run_probe_cli_helper(tmp_path):
    from attnsvm.cli.probe import run_probe

    f = tmp_path / "s.txt"
    f.write_text("First sentence here.\nSecond one, a bit longer.\nThird.\n\n")
    text = run_probe([2], [3], str(f), out=str(tmp_path / "out"), as_json=True, svm_sentences=3)
    data = json.loads(text)
    assert data["config"]["n_sentences"] == 3 and len(data["heads"]) == 1
    for name in ("probe.csv", "probe.json", "probe_heatmap.png", "probe_heatmap.pdf"):
        assert (tmp_path / "out" / name).exists()
    plain = run_probe([0], [1], ["One sentence.", "Another sentence."], svm_sentences=2)
    assert "corr_restricted" in plain and "wall clock" in plain  # the cost line ends with the command's own clock
    with pytest.raises(ValidationError, match="no such sentences file"):
        run_probe([0], [0], str(tmp_path / "missing.txt"))


@pytest.mark.parametrize("name,overrides", [
    ("real-digits", {"steps": 150}),
    ("real-minilm-embeddings", {"steps": 100, "n_train": 16, "n_test": 16}),
    ("real-minilm-heads", {"n_sentences": 10, "svm_sentences": 6, "layers": [2], "heads": [0, 1]}),
])
def test_quick_experiments_run(tmp_path, name, overrides):
    import attnsvm.experiments.real.minilm_heads  # noqa: F401  (registers the experiment)
    from attnsvm.experiments import build_config, registry
    from attnsvm.runner import run_experiment

    exp = registry()[name]
    cfg = build_config(exp, quick=True, overrides=overrides)
    summary = run_experiment(exp, cfg, str(tmp_path), progress=False)
    assert not summary.failed, summary.failed
    assert summary.checks and all(np.isfinite(c["value"]) for c in summary.checks)
    pngs = list((tmp_path / name).glob("*.png"))
    assert len(pngs) >= 1


def test_probe_memory_limit_refuses_before_allocating(monkeypatch):
    """One memory mechanism for the probe too: model loading, the forward pass and the SVMs."""
    from click.testing import CliRunner

    from attnsvm.cli import cli
    from attnsvm.errors import ResourceLimitError
    from attnsvm.memory import ENV_VAR
    from attnsvm.real.minilm import MiniLM, load_minilm

    model = load_minilm()
    with pytest.raises(ResourceLimitError, match=r"MiniLM forward pass of 3 sentences x \d+ tokens with attention "
                                                 r"maps needs about .* more than the memory limit"):
        model.forward(["One.", "Two words.", "Three short words."], max_memory="200K")  # tokenizing them fits
    r = CliRunner().invoke(cli, ["probe", "--no-store", "--layers", "0", "--heads", "0", "--n-sentences", "4", "--svm-sentences",
                                 "2", "--max-memory", "200K"])
    assert r.exit_code == 2 and "MiniLM forward pass of 4 sentences" in r.output, r.output
    monkeypatch.setenv(ENV_VAR, "1M")
    with pytest.raises(ResourceLimitError, match=r"loading MiniLM \(float64\) needs about .*ATTNSVM_MAX_MEMORY"):
        MiniLM()


def test_a_raw_inner_product_in_the_probe_fails_the_recomputation_from_its_parts(monkeypatch):
    """The bug itself, not a rewritten table: the probe's corr left as the raw inner product <A, B> (MiniLM's norms'
    products keep it inside [-1, 1], so the range partners pass) fails real-minilm-heads' integrity checks that
    recompute each correlation from the parts stored beside it; the probe as shipped passes them."""
    import attnsvm.real.probe_steps as steps
    from attnsvm.experiments.checks import correlation_parts_checks, correlation_partners
    from attnsvm.experiments.real.common import HEAD_PARTNERS, HEAD_PARTS

    args = dict(n_sentences=6, layers=[2], heads=[0], svm_sentences=4, null_draws=0, seed=3)
    table = probe_heads(**args).table
    assert [c.verdict for c in correlation_parts_checks(table, HEAD_PARTS, HEAD_PARTNERS)] == ["pass", "pass"]
    monkeypatch.setattr(steps, "corr", lambda A, B: steps.corr_parts(A, B)[0])  # <A, B>, not divided
    raw = probe_heads(**args).table
    assert np.isfinite(raw["corr_restricted"]).all() and (raw["corr_restricted"] != table["corr_restricted"]).all()
    assert all(c.verdict == "pass" for c in correlation_partners(raw, HEAD_PARTNERS))  # [-1, 1] does not see it
    assert [c.verdict for c in correlation_parts_checks(raw, HEAD_PARTS, HEAD_PARTNERS)] == ["fail", "fail"]
