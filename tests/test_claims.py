"""Claims as data: a check's source names the paper and its place; the spec line stays internal (spec_ref)."""

from __future__ import annotations

import json

import pytest

from attnsvm.experiments import planning
from attnsvm.experiments.checks import check
from attnsvm.experiments.claims import claims_page, is_internal, paper_source


def test_internal_spec_reference_becomes_the_papers_place():
    c = check("claim", 1.0, ">=", 0.5, source="transformers-as-svms.md 7.2 item 5", reason="r")
    assert c.source.startswith('arXiv 2308.16898 "Transformers as Support Vector Machines"')
    assert "convergence types" in c.source and c.spec_ref == "transformers-as-svms.md 7.2 item 5"
    assert not is_internal(c.source)
    d = c.to_dict()
    assert d["spec_ref"] and d["source"] == c.source
    mm = check("claim", 1.0, ">=", 0.5, source="max-margin-token-selection.md 8 E3 outcome [RUN]", reason="r")
    assert mm.source.startswith("arXiv 2306.13596") and "Fig. 3" in mm.source
    lm = check("claim", 1.0, ">=", 0.5, source="causal-language-modeling.md section 4 (C2: margins)", reason="r")
    assert "Sec. 4, Fig. 2" in lm.source and "On the similarity between attention and SVM" in lm.source


def test_unknown_spec_reference_is_refused():
    with pytest.raises(ValueError, match="no paper place"):
        paper_source("transformers-as-svms.md 99.9 item 42")
    with pytest.raises(ValueError, match="no paper place"):
        check("claim", 1.0, ">=", 0.5, source="max-margin-token-selection.md 99 nothing", reason="r")
    with pytest.raises(ValueError, match="spec file"):
        paper_source("some other text")


def test_claims_page_rows(tmp_path):
    exp = tmp_path / "exp-a"
    exp.mkdir()
    c = check("a | claim", 1.0, ">=", 0.5, source="transformers-as-svms.md 7.2 item 4", reason="why").to_dict()
    (exp / "checks.json").write_text(json.dumps([c]))
    (exp / "meta.json").write_text(json.dumps({"title": "T", "preset": "quick", "runs": 7}))
    page = claims_page(str(tmp_path))
    assert "## exp-a" in page and "quick preset: 7 runs" in page
    assert f"| a \\| claim | {c['source']} |" in page


def test_effect_rule_is_stated_before_measuring():
    effect, rule = planning.effect_rule(">=", 0.99)
    assert effect == pytest.approx(0.01) and rule == "the distance to 1 doubled"
    assert planning.effect_rule("<=", 0.07)[0] == pytest.approx(0.07)
    assert planning.effect_rule(">=", 0.1)[0] == pytest.approx(0.05)
    assert planning.effect_rule("~", 2.5, 2.5)[0] == pytest.approx(0.375)
    with pytest.raises(ValueError):
        planning.effect_rule("==", 1.0)


def test_stored_planning_entries_are_complete():
    for name, e in planning.load_planning().items():
        assert e["sigma"] >= 0 and e["runs"] > 1 and e["effect"] > 0, name
        assert "seeds + " in e["measured"], (name, "a planning sigma comes from shifted seeds, never the run judged")
