"""probe.html (attnsvm.real.probe_view) from a small real MiniLM probe: sections, marks, escaping."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

pytest.importorskip("transformers")

from attnsvm.real.cache import last_forward  # noqa: E402
from attnsvm.real.probe import probe_heads  # noqa: E402
from attnsvm.real.probe_view import (  # noqa: E402
    ROLES, head_anchor, head_reason, render_probe_view, token_roles, write_probe_view)
from attnsvm.svm import gen_constraints, solve  # noqa: E402

HOSTILE = "Beware <script>alert('x')</script> & <b>bold</b> \"quotes\" here."
SENTENCES = ["The cat sat on the mat while the dog slept.", HOSTILE, "Margins decide which token wins.",
             "Every head reads its own tokens here.", "A short one.", "Attention selects a few tokens at a time.",
             "The solver returns multipliers for every row.", "Nuclear norms favour low rank matrices.",
             "Queries look for keys that match them.", "Small models still have many heads.",
             "Each layer mixes the tokens once more.", "The last sentence closes the probe."]
LAYER, HEADS, M_SVM, VIEW = 5, [0, 3], 8, 4
FORWARD = {}  # the probe's forward pass (the probe module keeps only the last one)


def _gen_svm(X, Z, mask, selected):
    """The probe's nuclear Gen-SVM of one head's selections: the rows of the real tokens (``mask``) only."""
    return solve(gen_constraints(X, Z, selected, valid=mask), "nuclear", formulation="gen")


class _Page(HTMLParser):
    """Sections (id -> attributes), token spans (section id, sentence, token, classes, att, text), links, imgs."""

    def __init__(self):
        super().__init__()
        self.sections, self.spans, self.links, self.imgs, self.tags = {}, [], [], [], []
        self._section = None
        self._span = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "section":
            self._section = a.get("id")
            self.sections[self._section] = a
        elif tag == "span" and "tok" in a.get("class", "").split() and self._section:
            self._span = {"section": self._section, "i": int(a["data-i"]), "t": int(a["data-t"]),
                          "classes": set(a["class"].split()), "att": float(a["data-att"]), "text": ""}
        elif tag == "a" and "href" in a:
            self.links.append(a["href"])
        elif tag == "img":
            self.imgs.append(a.get("src"))

    def handle_endtag(self, tag):
        if tag == "section":
            self._section = None
        elif tag == "span" and self._span is not None:
            self.spans.append(self._span)
            self._span = None

    def handle_data(self, data):
        if self._span is not None:
            self._span["text"] += data


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    res = probe_heads(SENTENCES, layers=[LAYER], heads=HEADS, svm_sentences=M_SVM, view_sentences=VIEW)
    FORWARD["fw"] = last_forward()
    out = tmp_path_factory.mktemp("view")
    (out / "probe_heatmap.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # only its name matters here
    path = write_probe_view(res, str(out), heatmap="probe_heatmap.png")
    text = open(path, encoding="utf-8").read()
    page = _Page()
    page.feed(text)
    return res, text, page


def test_result_keeps_attention_support_and_candidates(probe):
    res, _, _ = probe
    T = res.selected[(LAYER, 0)].shape[1]
    assert set(res.attention) == set(res.support) == {(LAYER, h) for h in HEADS}
    for key in res.attention:
        assert res.attention[key].shape == (VIEW, T) and res.support[key].shape == (M_SVM, T)
        assert res.support[key].dtype == bool
        assert not (res.support[key] & res.selected[key][:M_SVM]).any()  # a support token is never selected
        assert res.support[key].any()
        np.testing.assert_allclose(res.attention[key].sum(axis=1), 1.0, atol=1e-9)
    assert res.candidates.shape == (VIEW, T)


def test_support_is_the_solutions_active_margin(probe):
    """The stored support is SVMSolution.support_tokens() of the head's SVM: exactly the non-selected
    tokens at margin 1 of W_svm, the others strictly beyond it."""
    res, _, _ = probe
    from attnsvm.real.pretrained import augment

    fw = FORWARD["fw"]
    X = augment(fw.layer_input(LAYER)) * fw.mask[:, :, None]
    Z = X[np.arange(len(X)), res.queries]
    h = HEADS[0]
    O = res.selected[(LAYER, h)][:M_SVM]
    sol = _gen_svm(X[:M_SVM], Z[:M_SVM], fw.mask[:M_SVM], O)
    assert sol.status == "optimal"
    np.testing.assert_array_equal(sol.support_tokens(), res.support[(LAYER, h)])
    logits = np.einsum("ntd,de,ne->nt", X[:M_SVM], sol.W, Z[:M_SVM])
    margin = logits[np.arange(M_SVM), O.argmax(axis=1)][:, None] - logits
    sup, other = res.support[(LAYER, h)], fw.mask[:M_SVM] & ~O & ~res.support[(LAYER, h)]
    assert np.allclose(margin[sup], 1.0, rtol=1e-5)
    assert (margin[other] > 1.0 + 1e-6).all()


def test_every_head_has_a_section_linked_from_the_heat_map(probe):
    res, text, page = probe
    ids = [head_anchor(LAYER, h) for h in HEADS]
    assert list(page.sections) == ids
    for h, sid in zip(HEADS, ids):
        assert page.sections[sid]["data-layer"] == str(LAYER) and page.sections[sid]["data-head"] == str(h)
        # once per grid: corr_restricted, the nulls' mean and the verdict map, then (secondary) the advantage
        assert page.links.count("#" + sid) == (4 if "verdict" in res.table.columns else 2)
    assert all(link[1:] in page.sections or link[1:] == "top" for link in page.links if link.startswith("#"))
    row = res.table.iloc[0]
    assert f"{row['corr_restricted']:.4f}" in text and f"{row['corr_random_restricted']:.4f}" in text
    assert "id='layers'" in text and "heads above baseline" in text and "MiniLM" in text


def test_marks_agree_with_the_probe_result(probe):
    res, _, page = probe
    seen = set()
    for s in page.spans:
        h = int(s["section"].rsplit("-", 1)[1])
        i, t = s["i"], s["t"]
        key = (LAYER, h)
        assert s["text"] == res.tokens[i][t]  # the parser unescapes: the token text round-trips
        assert abs(s["att"] - res.attention[key][i, t]) <= 1e-5 * max(1.0, res.attention[key][i, t])
        role = (s["classes"] & set(ROLES)).pop()
        if res.selected[key][i, t]:
            assert role == "sel"
        elif i < M_SVM:
            assert role == ("sup" if res.support[key][i, t] else "oth")
        assert ("q" in s["classes"]) == (t == res.queries[i])
        seen.add((h, i, t))
    assert seen == {(h, i, t) for h in HEADS for i in range(VIEW) for t in range(len(res.tokens[i]))}
    assert {"sel", "sup", "oth"} <= {r for s in page.spans for r in s["classes"]}


def test_roles_outside_the_svm_and_for_causal_candidates():
    sel = np.array([False, True, False, False])
    cand = np.array([True, True, True, False])
    assert token_roles(sel, cand, np.array([True, False, False, False])) == ["sup", "sel", "oth", "na"]
    assert token_roles(sel, cand, None) == ["unk", "sel", "unk", "na"]


def _data(text) -> dict:
    """The explorer's inline JSON block."""
    start = text.index("<script type='application/json' id='probe-data'>") + len(
        "<script type='application/json' id='probe-data'>")
    return json.loads(text[start:text.index("</script>", start)])


def test_text_is_escaped(probe):
    res, text, page = probe
    # the only scripts are the page's own three (the explorer's data and code, the layers' sections' code); the
    # sentence's tag is text
    assert text.lower().count("<script") == 3 and page.tags.count("script") == 3
    assert "<script>alert" not in text and "<b>bold</b>" not in text
    assert html.escape(HOSTILE, quote=True) in text
    data_block = text[text.index("id='probe-data'>"):text.index("</script>", text.index("id='probe-data'>"))]
    assert "<" not in data_block[len("id='probe-data'>"):] and _data(text)["sentences"][1]["text"] == HOSTILE
    # the tokenizer splits the tag into '<', 'script', '>': the token spans hold them escaped
    hostile = [s["text"] for s in page.spans if s["i"] == 1]
    assert "<" in hostile and ">" in hostile
    assert re.search(r"data-i='1'[^>]*>&lt;</span>", text)



def test_explorer_data_is_the_probes_attention(probe):
    """Every head's matrix for every kept sentence, all its queries; the probe's query row is ProbeResult.attention."""
    res, text, _ = probe
    data = _data(text)
    assert data["layers"] == [LAYER] and data["heads"] == {str(LAYER): HEADS} and data["threshold"] == 0.1
    assert [s["text"] for s in data["sentences"]] == SENTENCES[:VIEW]
    for i, s in enumerate(data["sentences"]):
        n_tok = len(res.tokens[i])
        assert s["tokens"] == list(res.tokens[i]) and s["query"] == int(res.queries[i])
        for h in HEADS:
            M = np.array(data["att"][f"{LAYER}-{h}"][i]) / 1000
            assert M.shape == (n_tok, n_tok)  # every query of the sentence
            np.testing.assert_allclose(M.sum(axis=1), 1.0, atol=n_tok * 5e-4)  # rows of softmax probabilities
            np.testing.assert_allclose(M[s["query"]], res.attention[(LAYER, h)][i, :n_tok], atol=5e-4)
            assert data["support"][f"{LAYER}-{h}"][i] == np.flatnonzero(res.support[(LAYER, h)][i, :n_tok]).tolist()
    fw = FORWARD["fw"]
    for h in HEADS:
        np.testing.assert_allclose(res.matrices[(LAYER, h)], fw.attentions[LAYER][:VIEW, h] * fw.mask[:VIEW, :, None]
                                   * fw.mask[:VIEW, None, :], atol=1e-6)


def test_verdict_comes_first_and_says_what_it_shows(probe):
    res, text, _ = probe
    assert text.index("id='verdict'") < text.index("id='heatmap'") < text.index("id='explorer'")
    # without null verdicts in the rows (e.g. --query all), the counts against the random baseline lead
    bare = res.table.drop(columns=[c for c in ("verdict", "n_null") if c in res.table.columns])
    page0 = render_probe_view(type(res)(**{**res.__dict__, "table": bare}))
    above = int((res.table["advantage"] > 0).sum())
    assert f"<b>{above} of {len(HEADS)} heads</b> score above the baseline" in page0
    assert "What it does not show" in page0 and "no null distribution" in page0
    if "verdict" in res.table.columns:  # the probe's own page leads with its verdicts
        assert "point along their own selections' SVM beyond" in text
    # with null verdicts in the rows, the counts per verdict lead instead
    table = res.table.drop(columns=["null_planned", "null_stop"], errors="ignore")  # every draw made
    table["verdict"] = ["beyond null", "not distinguishable"][:len(table)]
    table["n_null"] = 20
    res2 = type(res)(**{**res.__dict__, "table": table})
    page = render_probe_view(res2)
    block = page[page.index("id='verdict'"):page.index("</div>", page.index("id='verdict'"))]
    assert "<b>1 of 2 heads</b> point along their own selections' SVM beyond" in block and "20 null draws" in block
    assert "<td>5</td><td class='num'>1</td><td class='num'>1</td><td class='num'>0</td><td class='num'>0</td>" in block
    # nulls stopped early (attnsvm probe's default): the lead and the head's section say so
    table["null_planned"] = 8
    table["null_stop"] = ["all drawn", "stopped after 3 of 8 draws: any further draws leave ..."][:len(table)]
    page = render_probe_view(type(res)(**{**res.__dict__, "table": table}))
    block = page[page.index("id='verdict'"):page.index("</div>", page.index("id='verdict'"))]
    assert "up to 8 null draws per head; 1 heads stopped earlier" in block
    assert page.count("null draws stopped after 3 of 8 draws") == (len(table) == 2)


def test_heads_without_a_number_say_why(probe):
    res, _, _ = probe
    table = res.table.copy()
    table.loc[0, ["svm_status", "corr_restricted", "advantage"]] = ["infeasible", np.nan, np.nan]
    table.loc[1, ["svm_status", "corr_restricted", "advantage"]] = ["optimal_inaccurate", np.nan, np.nan]
    page = render_probe_view(type(res)(**{**res.__dict__, "table": table}))
    sec0 = page[page.index(f"id='{head_anchor(LAYER, HEADS[0])}'"):page.index(f"id='{head_anchor(LAYER, HEADS[1])}'")]
    sec1 = page[page.index(f"id='{head_anchor(LAYER, HEADS[1])}'"):]
    assert "<p class='reason'>No number: the SVM of this head&#x27;s selections is infeasible: the Gen-SVM asks " \
        "every selected token of a sentence to tie" in sec0
    assert "<p class='reason'>No number: the solver stopped without a certificate" in sec1
    assert head_reason(res.table.iloc[0]) == ""  # a certified head with a number needs no reason
    bare = table.drop(columns=[c for c in ("verdict", "n_null") if c in table.columns])
    assert "heads without a number</th>" in render_probe_view(type(res)(**{**res.__dict__, "table": bare}))


def test_cached_forward_is_labelled(probe):
    res, _, _ = probe
    page = render_probe_view(type(res)(**{**res.__dict__, "forward_cached": True}))
    assert "reused from an earlier forward pass of the same sentences in this process" in page
    assert "reused from an earlier" not in render_probe_view(type(res)(**{**res.__dict__, "forward_cached": False,
                                                                       "seconds": {**res.seconds, "forward_cached": False}}))


def test_legend_classes_and_self_contained(probe):
    _, text, page = probe
    assert "id='legend'" in text
    legend = text[text.index("id='legend'"):text.index("</table>", text.index("id='legend'"))]
    for role in ROLES:
        assert f"class='tok {role}'" in legend and f".tok.{role}{{" in text
    assert ".tok.q{" in text and "alpha = sqrt(attention)" in legend
    assert page.imgs == ["probe_heatmap.png"]  # relative, and the only resource
    assert "http://" not in text and "https://" not in text and "<link" not in text and "@import" not in text


def test_run_probe_and_cli_write_the_page(tmp_path):
    from click.testing import CliRunner

    from attnsvm.cli import cli

    r = CliRunner().invoke(cli, ["probe", "--layers", "0", "--heads", "1", "--n-sentences", "5", "--svm-sentences", "0",
                                 "--view-sentences", "2", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    page_path = tmp_path / "probe.html"
    assert "columns: mean_selected = mean |O_i|" in r.stdout  # the table's column legend
    # the view's pass reuses the forward pass of the stored heads: labelled, not printed as "forward pass 0.0 s"
    assert "forward pass computed inside the heads' tasks" in r.stdout and "forward pass 0.0 s" not in r.stdout
    last = r.stdout.splitlines()[-1]  # stdout: the progress bar of the stored heads goes to stderr
    assert str(page_path) in last and last.startswith("wrote ")
    page = _Page()
    page.feed(page_path.read_text(encoding="utf-8"))
    assert list(page.sections) == ["head-0-1"] and {s["i"] for s in page.spans} == {0, 1}
    assert {r for s in page.spans for r in s["classes"]} & set(ROLES) <= {"sel", "unk"}  # no SVM: no support marks
    assert page.imgs == ["probe_heatmap.png"]


def test_render_limits_sentences(probe):
    res, _, _ = probe
    page = _Page()
    page.feed(render_probe_view(res, sentences=1))
    assert {s["i"] for s in page.spans} == {0} and page.imgs == []


def test_null_heat_map_caption_names_the_runs_null(probe):
    """The null-mean map's caption and legend name the verdict's own null kind (the default is the sink null), not
    always "spectrum"."""
    import html as _html

    from attnsvm.real.nulls import NULLS

    res, text, _ = probe
    assert res.config["null_kind"] == "sink" and "verdict" in res.table.columns
    assert "<caption>null_mean (sink null heads vs their SVMs)</caption>" in text
    assert "spectrum null heads vs their SVMs" not in text and "vs its spectrum null heads" not in text
    assert _html.escape(NULLS["sink"].legend, quote=True) in text
    table = res.table.assign(null_kind="spectrum")
    page = render_probe_view(type(res)(**{**res.__dict__, "table": table,
                                          "config": {**res.config, "null_kind": "spectrum"}}))
    assert "<caption>null_mean (spectrum null heads vs their SVMs)</caption>" in page
    assert _html.escape(NULLS["spectrum"].summary, quote=True) in page


def test_head_sections_show_special_token_shares(probe):
    """Each head's section shows how often it selects [CLS] (position 0) and [SEP] (the last token) and its
    query-independent share, as short labelled numbers."""
    res, text, _ = probe
    assert {"sel_first", "sel_last", "qi_share"} <= set(res.table.columns)
    for _, r in res.table.iterrows():
        anchor = f"id='{head_anchor(int(r['layer']), int(r['head']))}'"
        sec = text[text.index(anchor):text.index("</section>", text.index(anchor))]
        for label, col in (("selects [CLS]", "sel_first"), ("selects [SEP]", "sel_last"),
                           ("query-indep. share", "qi_share")):
            assert re.search(rf"title='{col}: [^']*'>{re.escape(label)} <b>{r[col]:.2f}</b>", sec), (col, sec[:400])
