"""One self-contained HTML page of a head probe (``attnsvm probe --out DIR`` writes ``DIR/probe.html``).

For an interpretability researcher reading :func:`attnsvm.real.probe.probe_heads`:

* **Top.** The model, the probe's config and timings, a per-layer summary (mean
  ``corr_restricted`` against the random selections' baseline, heads above it) and layer x head
  heat maps as HTML tables with cell colours: with null heads ``corr_restricted``, the verdict nulls'
  mean ``null_mean`` (one diverging scale; its caption names the run's null kind, :func:`null_kind_of`, and a
  line below says what those nulls keep, ``NULLS[kind].legend``) and the verdict map (colour = verdict, text =
  the upper p-value; words, never "nan", for a verdict that is not one), then, secondary, the advantage over
  random selections; without null heads ``corr_restricted`` and the advantage. ``probe_heatmap.png`` is shown
  below them by relative path when it was written. Every cell links to its head's section.
* **One section per head** (anchor ``head-L-H``), grouped in one collapsible ``<details class='layer'
  id='layer-L'>`` per layer (the first open, so the page opens short; a link to a head of a closed layer
  opens it): its score against its random baseline, how often it selects [CLS] / position 0, [SEP] / the last
  token and its query-independent share (:func:`share_items`), its SVM
  (status, duality gap, violation, rank, nuclear norm, support tokens) and the first sentences
  kept by the probe (``ProbeResult.attention``, ``view_sentences`` of them) with each token shaded
  by the head's attention from the query and marked by where the selection's SVM puts it:

  - ``q``: the query token (an outline; it also carries one of the roles below)
  - ``sel``: selected, in ``O_i`` (attention >= threshold, or the argmax)
  - ``sup``: a support token: not selected, its margin row active at the SVM solution
    (``ProbeResult.support``, :meth:`attnsvm.svm.SVMSolution.support_tokens`)
  - ``oth``: not selected, strictly beyond the margin
  - ``unk``: not selected, in a sentence the SVM did not see (``i >= svm_sentences``)
  - ``na``: not a candidate of the query (causal decoders: after the query)

* **Verdict first** (``id='verdict'``): per layer, the heads beyond the null / not distinguishable /
  below it / without an SVM when the probe rows carry a ``verdict`` (a null distribution of the
  score exists); otherwise the heads above the random-selection baseline, with a sentence on what
  such counts do and do not show.
* **Explorer** (``id='explorer'``): a chooser of layer, sentence and query (every token of the kept
  sentences; clicking a token or a matrix row picks it as the query), one sentence across all heads
  of the layer (tokens shaded by each head's attention from the query; each row starts with the head's verdicts,
  :func:`head_verdicts`, in the verdict map's colours, and its shares), and the chosen head's
  whole attention matrix for the sentence, with a colour scale (this matrix's min and max) and a
  "show values" toggle that prints every cell's value. Above them the **model view**
  (``id='model-view'``): one thumbnail per layer x head, a canvas of that head's attention matrix for
  the chosen sentence, marked with the head's verdict (:func:`head_mark`; with several m its stable verdict,
  the tooltip saying so); clicking one (or Enter) shows that head in the explorer. Attention that is not a finite
  number is null in the data and reads "no value" (a grey cell). The data is one inline JSON block (``<`` written as
  ``\u003c``) read by one inline script that builds the nodes with ``textContent`` only.
* Heads without a number (infeasible or uncertified SVM) say why in plain language.

Every static token is a ``<span class="tok ROLE [q]" data-i=I data-t=T data-att=A>``; all text is
escaped with :func:`html.escape`. No external resource, no network: inline CSS and script, the
heat-map PNG by a relative path.
"""

from __future__ import annotations

import html
import json
import math
import os

import numpy as np

from attnsvm._files import atomic_write, oserror_text
from attnsvm._html import REVEAL_SCRIPT
from attnsvm.errors import ValidationError
from attnsvm.real.nulls import NULLS
from attnsvm.real.verdict import DEPENDS, NO_NOTE, STABLE_VERDICTS, no_svm_reason

__all__ = ["ROLES", "PROBE_VERDICTS", "HEAD_MARKS", "STABLE_MARKS", "SHARES", "head_mark", "head_verdicts",
           "share_items", "null_kind_of", "token_roles", "render_probe_view", "write_probe_view", "head_anchor",
           "head_reason", "main_columns", "notebook_html"]

#: token role classes, in the legend's order, with their meaning
ROLES = {
    "sel": "selected: in O_i (attention >= threshold, or the argmax)",
    "sup": "support: not selected, on the SVM's margin (active row)",
    "oth": "other: not selected, beyond the SVM's margin",
    "unk": "not selected, support unknown (a sentence outside the SVM's, or not the probe's query)",
    "na": "not a candidate of the query (causal: after it)",
}

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:1280px;margin:2em auto;padding:0 1em;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f6f8fa}.num{text-align:right;font-variant-numeric:tabular-nums}.small{font-size:.85em;color:#555}
img{max-width:100%;border:1px solid #eee}section{margin:2em 0;padding-top:.5em;border-top:1px solid #ddd}
.grid td{text-align:center;min-width:3.2em;padding:0;font-size:.8em}.grid td a{display:block;padding:.35em .2em;
color:inherit;text-decoration:none}.grid td a:hover{outline:2px solid #000}.grid th{font-size:.8em;text-align:center}
.maps{display:flex;flex-wrap:wrap;gap:2em;align-items:flex-start}.above{color:#1a7f37;font-weight:600}.below{color:#cf222e;font-weight:600}
.sent{margin:.6em 0 .9em 0}.sent .text{font-size:.85em;color:#555}.toks{line-height:2.3}
.tok{display:inline-block;padding:0 .25em;margin:0 .12em;border-radius:3px;border:2px solid transparent;
font-family:ui-monospace,monospace;font-size:.9em}
.tok.sel{border:2px solid #1a7f37}.tok.sup{border:2px dashed #8250df}.tok.oth{border:1px solid #d0d7de}
.tok.unk{border:1px dotted #999}.tok.na{color:#999;border:1px solid transparent}
.tok.q{outline:2px solid #000;outline-offset:2px;font-weight:700}
.legend .tok{margin-right:.4em}.legend td{border:none;padding:.15em .5em}
.swatch{display:inline-block;width:2.4em;text-align:center;font-size:.75em;border:1px solid #ccc}
.verdict{padding:.7em 1em;border-radius:6px;background:#f6f8fa;border-left:8px solid #0969da}
.reason{color:#9a6700}.controls{display:flex;flex-wrap:wrap;gap:1.2em;margin:.6em 0;padding:.6em;background:#f6f8fa;
border-radius:6px}.controls select{font-size:1em;max-width:40em}#shown{font-weight:600}
.hrow{display:flex;flex-wrap:wrap;align-items:center;row-gap:.2em;margin:.3em 0;padding-bottom:.2em;
border-bottom:1px solid #f0f0f0}.hrow .hl{width:5.5em;font-size:.85em;color:#555;flex:none}
.hrow .tok{cursor:pointer}#matrix{font-size:.75em;border-collapse:collapse}#matrix td{width:1.9em;height:1.4em;padding:0;
border:1px solid #eee;text-align:center;cursor:pointer}#matrix th{font-weight:400;font-family:ui-monospace,monospace;
padding:0 .3em;border:none;background:none}#matrix thead th{writing-mode:vertical-rl;transform:rotate(180deg);
text-align:left;vertical-align:bottom}#matrix tr.cur th,#matrix tr.cur td{outline:2px solid #000}
#matrix tr.cur th{font-weight:700}#matrix.values td{width:2.3em;font-size:.9em;font-variant-numeric:tabular-nums}
#matrix td.dark{color:#fff}
.scale{display:flex;align-items:center;gap:.5em;font-size:.85em;margin:.4em 0;flex-wrap:wrap}
.scale .bar{position:relative;display:inline-block;width:16em;height:1em;border:1px solid #ccc;
background:linear-gradient(to right,rgba(255,140,0,0) 0%,rgba(255,140,0,.1) 1%,rgba(255,140,0,.22) 5%,
rgba(255,140,0,.32) 10%,rgba(255,140,0,.5) 25%,rgba(255,140,0,.71) 50%,rgba(255,140,0,.87) 75%,rgba(255,140,0,1) 100%)}
.scale .mark{position:absolute;top:-.35em;bottom:-.35em;width:2px;margin-left:-1px;background:#000}
.scale .mark.min{background:#0969da}
details.layer{margin:.8em 0;border:1px solid #ddd;border-radius:6px;padding:0 .8em}
details.layer>summary{cursor:pointer;padding:.5em 0;font-weight:600}
details.layer>summary:focus-visible{outline:2px solid #0969da;outline-offset:2px}
details.layer section.head{margin:1em 0}
.hrow .hmeta{flex-basis:100%;display:flex;flex-wrap:wrap;align-items:center;gap:.4em;font-size:.85em}
.hv{padding:0 .35em;border-radius:3px;border:1px solid #d0d7de}.sh{color:#555}
.shares{font-size:.9em}.share{margin-right:1em}
#model-view{margin:.4em 0 1em 0}.mrow{display:flex;flex-wrap:wrap;align-items:center;gap:.3em;margin:.2em 0}
.mrow .ml{width:4.5em;font-size:.8em;color:#555;flex:none}
.thumb{display:flex;flex-direction:column;align-items:center;padding:2px;margin:0;border:3px solid #d0d7de;
border-radius:4px;background:#fff;cursor:pointer;font:inherit;font-size:.7em;line-height:1.15;color:#222}
.thumb canvas{display:block;width:64px;height:64px;image-rendering:pixelated;border:1px solid #eee}
.thumb .tv{display:block;width:100%;text-align:center;padding:0 .2em;box-sizing:border-box}
.thumb.cur{outline:3px solid #000;outline-offset:1px}.thumb:focus-visible{outline:3px solid #0969da;outline-offset:1px}
"""


def head_anchor(layer: int, head: int) -> str:
    """The id of a head's section: ``head-L-H``."""
    return f"head-{int(layer)}-{int(head)}"


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _num(value, fmt: str = ".4f", missing: str = "no value") -> str:
    """``value`` formatted with ``fmt``; words for what is not a number (never "nan" or "inf" on the page):
    ``missing`` for NaN or None, "unbounded" for an infinity."""
    if value is None:
        return _e(missing)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return _e(value)
    if math.isnan(value):
        return _e(missing)
    if math.isinf(value):
        return "unbounded" if value > 0 else "unbounded below"
    return format(value, fmt)


def support_sentences(cfg: dict) -> int:
    """The sentences of the SVM whose support tokens the page shows: ``svm_sentences``, or with several m the
    largest (the support kept, :attr:`attnsvm.real.probe.ProbeResult.support`)."""
    m = cfg.get("svm_sentences", 0)
    return max(int(x) for x in m) if isinstance(m, (list, tuple)) else int(m)


def _has_number(r) -> bool:
    """Whether a probe row has a head-vs-SVM number (``corr_restricted`` finite): False for a head without a
    certified SVM."""
    v = r.get("corr_restricted") if hasattr(r, "get") else None
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _shade(att: float) -> str:
    """Background of a token with attention ``att`` in [0, 1]: orange, alpha sqrt(att) (weights near
    the threshold stay visible)."""
    a = math.sqrt(min(max(float(att), 0.0), 1.0)) if att == att else 0.0
    return f"background:rgba(255,140,0,{a:.3f})"


def _diverging(value: float, lim: float) -> tuple[str, str]:
    """(background, text colour) of a heat-map cell on a blue-white-red scale over [-lim, lim]."""
    if value is None or value != value:
        return "#eeeeee", "#777"
    t = max(-1.0, min(1.0, float(value) / lim))
    end = (178, 24, 43) if t > 0 else (33, 102, 172)
    t = abs(t)
    rgb = tuple(round(255 + (c - 255) * t) for c in end)
    return f"rgb{rgb}", ("#fff" if t > 0.55 else "#222")


def token_roles(selected, candidates, support=None) -> list:
    """Role class of each token of one sentence (see the module docstring).

    Parameters
    ----------
    selected : (L,) bool, the selection O_i
    candidates : (L,) bool, the tokens the query may select
    support : (L,) bool or None (the sentence is outside the SVM's sentences)

    Returns
    -------
    list of L strings in ``ROLES``
    """
    out = []
    for t in range(len(selected)):
        if selected[t]:
            out.append("sel")
        elif not candidates[t]:
            out.append("na")
        elif support is None:
            out.append("unk")
        else:
            out.append("sup" if support[t] else "oth")
    return out


def _legend() -> str:
    rows = ["<tr><td><span class='tok sel q'>query</span></td><td>the query token q_i (outline; its border is its "
            "role below)</td></tr>"]
    for role, text in ROLES.items():
        rows.append(f"<tr><td><span class='tok {role}'>{role}</span></td><td>{_e(text)}</td></tr>")
    sw = "".join(f"<span class='swatch' style='{_shade(a)}'>{a:g}</span>" for a in (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0))
    rows.append(f"<tr><td>{sw}</td><td>shade: the head's attention from the query (alpha = sqrt(attention)); "
                "hover a token for its value</td></tr>")
    return "<table class='legend' id='legend'>" + "".join(rows) + "</table>"


def _layer_head_table(table, layers, heads, grid_id: str, caption: str, cell) -> str:
    """A layer x head grid of linked cells: ``cell(l, h, row)`` gives ``(background, text colour, hover text,
    cell text, extra td attributes)`` of a head's row; heads without a row stay empty."""
    cells = {(int(r["layer"]), int(r["head"])): r for _, r in table.iterrows()}
    out = [f"<table class='grid' id='{_e(grid_id)}'><caption>{_e(caption)}</caption><tr><th>layer \\ head</th>"
           + "".join(f"<th>{h}</th>" for h in heads) + "</tr>"]
    for l in layers:
        row = [f"<tr><th>{l}</th>"]
        for h in heads:
            r = cells.get((l, h))
            if r is None:
                row.append("<td></td>")
                continue
            bg, fg, tip, text, attrs = cell(l, h, r)
            row.append(f"<td style='background:{bg};color:{fg}'{attrs}><a href='#{head_anchor(l, h)}' "
                       f"title='{_e(tip)}'>{text}</a></td>")
        out.append("".join(row) + "</tr>")
    return "".join(out) + "</table>"


def _grid(table, key: str, lim: float, layers, heads, title: str) -> str:
    def cell(l, h, r):
        v = float(r[key])
        bg, fg = _diverging(v, lim) if lim > 0 else ("#eeeeee", "#222")
        word = "no SVM" if not _has_number(r) else "none"
        tip = f"layer {l}, head {h}: {key} {_num(v, missing=word)}" + (f". {head_reason(r)}" if v != v else "")
        return bg, fg, tip, _num(v, '.2f', missing=word), ""

    return _layer_head_table(table, layers, heads, f"grid-{key}", title, cell)


#: cell colours of the verdict map (background, text)
VERDICT_COLOURS = {"beyond null": ("rgb(178,24,43)", "#fff"), "below null": ("rgb(33,102,172)", "#fff"),
                   "not distinguishable": ("#ffffff", "#222"), "no SVM": ("#eeeeee", "#777")}


#: the model view's mark of a head, ``{verdict: (short label on its thumbnail, background, text colour)}``: the
#: null verdicts in the verdict map's colours, and without null heads the comparison with random selections
HEAD_MARKS = {"beyond null": ("beyond", *VERDICT_COLOURS["beyond null"]),
              "not distinguishable": ("not dist.", "#ffffff", "#222"),
              "below null": ("below", *VERDICT_COLOURS["below null"]),
              "above baseline": ("above", "#1a7f37", "#fff"), "not above baseline": ("not above", "#ffffff", "#222"),
              "no SVM": ("no SVM", *VERDICT_COLOURS["no SVM"]), DEPENDS: ("depends on m", "#9a6700", "#fff")}

#: a stable verdict's word (``stable_verdict``: :data:`attnsvm.real.verdict.STABLE_VERDICTS`' values and
#: :data:`attnsvm.real.verdict.DEPENDS`) -> its mark (a key of :data:`HEAD_MARKS`)
STABLE_MARKS = {**{word: verdict for verdict, word in STABLE_VERDICTS.items()}, DEPENDS: DEPENDS}


def head_mark(r) -> str:
    """The word a head's thumbnail carries (a key of :data:`HEAD_MARKS`), or "" for a probe without SVMs.

    ``r``: a probe row (mapping): its ``verdict`` when it is a word, else "no SVM" without a number, else whether
    its ``advantage`` over random selections is above 0 ("" when the advantage has no value)."""
    v = r.get("verdict")
    if isinstance(v, str) and v in HEAD_MARKS:
        return v
    if "advantage" not in r:
        return ""
    if not _has_number(r):
        return "no SVM"
    try:
        adv = float(r.get("advantage"))
    except (TypeError, ValueError):
        return ""
    return "" if not math.isfinite(adv) else "above baseline" if adv > 0 else "not above baseline"


def head_verdicts(r) -> list[tuple[str, str]]:
    """A head's verdicts as the page shows them, ``[(mark, words), ...]`` (marks: keys of :data:`HEAD_MARKS`), the
    first the one its thumbnail carries; ``[]`` for a probe without SVMs.

    ``r``: a probe row (mapping). At one number of SVM sentences: ``[(head_mark(r), head_mark(r))]``. At several
    (a row of the largest ``m`` with a ``stable_verdict``): the stable verdict first, ``"stable: beyond"`` (where
    the verdicts at the two largest m agree, else "depends on sample size"), then the verdict at that m,
    ``"m = 48: beyond null"``."""
    mark = head_mark(r)
    stable = r.get("stable_verdict")
    m = r.get("m")
    if isinstance(stable, str) and stable in STABLE_MARKS and m is not None and m == m:
        out = [(STABLE_MARKS[stable], f"stable: {stable}")]
        return out + ([(mark, f"m = {int(m)}: {mark}")] if mark else [])
    return [(mark, mark)] if mark else []


#: the shares a head section and explorer row show: ``(column, label for encoders, label for decoders, meaning)``
SHARES = (("sel_first", "selects [CLS]", "selects pos 0",
           "share of queries whose selection holds position 0 ([CLS] in encoders, the first token in decoders)"),
          ("sel_last", "selects [SEP]", "selects last",
           "share of queries whose selection holds the sentence's last token ([SEP] in encoders)"),
          ("qi_share", "query-indep. share", "query-indep. share",
           "query-independent share of the head's scores (the part every query shares, the source of attention sinks)"))


def share_items(r, family: str = "bert") -> list[tuple[str, str, str]]:
    """A head's special-token and position-0 shares, ``[(label, value, meaning), ...]``: ``sel_first``,
    ``sel_last`` and ``qi_share`` where the row has them (:data:`SHARES`); the value with two decimals, "no value"
    for NaN. ``family``: the model's family (``"bert"``: labels [CLS] and [SEP], else position 0 and last)."""
    out = []
    for col, enc, dec, meaning in SHARES:
        if col in r:
            out.append((enc if family == "bert" else dec, _num(r.get(col), ".2f"), f"{col}: {meaning}"))
    return out


def _shares_html(r, family: str) -> str:
    """The shares of :func:`share_items` as short labelled numbers (``<p class='shares'>``; "" without any)."""
    items = share_items(r, family)
    if not items:
        return ""
    spans = " ".join(f"<span class='share' title='{_e(tip)}'>{_e(label)} <b>{value}</b></span>"
                     for label, value, tip in items)
    return f"<p class='shares'>{spans}</p>"


def _mark_css() -> str:
    """The thumbnails' border and label colours per mark (:data:`HEAD_MARKS`)."""
    return "".join(f".thumb[data-mark='{m}']{{border-color:{bg if bg != '#ffffff' else '#8c959f'}}}"
                   f".thumb[data-mark='{m}'] .tv{{background:{bg};color:{fg}}}"
                   for m, (_, bg, fg) in HEAD_MARKS.items())


def _verdict_grid(table, layers, heads) -> str:
    """The verdict map: each cell coloured by the head's verdict (:data:`VERDICT_COLOURS`) and showing its upper
    p-value (the predictive t against its nulls; hover: q-values, null mean and sd, the reason). A verdict or
    reason that is not a word (a NaN cell) reads "no SVM" (a head without a number) or "no verdict"."""
    def cell(l, h, r):
        v = r.get("verdict")
        v = v if isinstance(v, str) and v else "no verdict" if _has_number(r) else "no SVM"
        bg, fg = VERDICT_COLOURS.get(v, ("#eeeeee", "#777"))
        try:
            p = float(r.get("p_upper", float("nan")))
        except (TypeError, ValueError):
            p = float("nan")
        text = "-" if p != p else (_num(p, ".0e") if p < 0.01 else _num(p, ".2f"))
        if _has_number(r):
            reason = r.get("verdict_reason")
            tip = (f"layer {l}, head {h}: {v}; p_upper {_num(p, '.2g')}, q_upper {_num(r.get('q_upper'), '.2g')}, "
                   f"q_lower {_num(r.get('q_lower'), '.2g')}; corr_restricted {_num(r.get('corr_restricted'))} vs null "
                   f"{_num(r.get('null_mean'))} +- {_num(r.get('null_sd'))}. {reason if isinstance(reason, str) else ''}")
        else:
            tip = f"layer {l}, head {h}: {v}, so no p-value. {head_reason(r)}"
        return bg, fg, tip, text, f" data-verdict='{_e(v)}'"

    caption = ("verdict (cell: p_upper; red beyond null, blue below, white not distinguishable, grey no SVM)")
    return _layer_head_table(table, layers, heads, "grid-verdict", caption, cell)


def null_kind_of(table, cfg) -> str:
    """The verdict's null kind of a probe (a key of :data:`attnsvm.real.nulls.NULLS`): the config's ``null_kind``,
    else the table's ``null_kind`` column, else "" (unknown)."""
    kind = cfg.get("null_kind")
    if not isinstance(kind, str) and "null_kind" in table.columns and table["null_kind"].notna().any():
        kind = str(table["null_kind"].dropna().iloc[0])
    return kind if isinstance(kind, str) else ""


def statistic_of(table, cfg) -> str:
    """The verdict's statistic of a probe (:data:`attnsvm.real.verdict.STATISTICS`): the config's ``statistic``, else
    the table's ``statistic`` column, else "corr_restricted" (runs from before the setting had only it)."""
    stat = cfg.get("statistic")
    if not isinstance(stat, str) and "statistic" in table.columns and table["statistic"].notna().any():
        stat = str(table["statistic"].dropna().iloc[0])
    return stat if isinstance(stat, str) and stat in table.columns else "corr_restricted"


#: what each statistic is, in the words of the page's headline
STATISTIC_WORDS = {"corr_restricted": "corr_restricted (the cosine of the head's key-query matrix with the SVM)",
                   "margin_ratio": "margin_ratio (the head's own margin on its selections over the SVM's, both per "
                                   "unit nuclear norm; its p-values on its log)"}


def _null_caption(kind: str) -> str:
    """The null-mean heat map's caption for null ``kind`` (:func:`null_kind_of`)."""
    return f"null_mean ({kind + ' null heads' if kind else 'the null heads'} vs their SVMs)"


def _null_legend(kind: str) -> str:
    """What the verdict's null heads are (``NULLS[kind].legend``, else its summary), one small paragraph."""
    null = NULLS.get(kind)
    if null is None:
        return ""
    return f"<p class='small' id='null-legend'>{_e(null.legend or 'null_kind ' + kind + ': ' + null.summary)}</p>"


def _layer_summary(table) -> str:
    has_svm = "advantage" in table.columns
    head = ("<tr><th>layer</th><th>heads</th><th>mean |O_i|</th>" + (
        "<th>mean corr_restricted</th><th>mean random baseline</th><th>mean advantage</th><th>heads above baseline</th>"
        "<th>SVMs certified</th>" if has_svm else "") + "</tr>")
    rows = [head]
    for l, g in table.groupby("layer", sort=True):
        cells = f"<td>{int(l)}</td><td class='num'>{len(g)}</td><td class='num'>{_num(g['mean_selected'].mean(), '.2f')}</td>"
        if has_svm:
            above = int((g["advantage"] > 0).sum())
            cells += (f"<td class='num'>{_num(g['corr_restricted'].mean())}</td>"
                      f"<td class='num'>{_num(g['corr_random_restricted'].mean())}</td>"
                      f"<td class='num'>{_num(g['advantage'].mean())}</td><td class='num'>{above}/{len(g)}</td>"
                      f"<td class='num'>{int((g['svm_status'] == 'optimal').sum())}/{len(g)}</td>")
        rows.append(f"<tr>{cells}</tr>")
    return "<table id='layers'>" + "".join(rows) + "</table>"


def _kv(pairs, ident: str = "") -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    attr = f" id='{_e(ident)}'" if ident else ""
    return f"<table{attr}>{rows}</table>"


def _sentence_html(result, layer: int, head: int, i: int) -> str:
    toks = list(result.tokens[i])
    L = len(toks)
    att = np.asarray(result.attention[(layer, head)][i])[:L]
    sel = np.asarray(result.selected[(layer, head)][i])
    qi = np.asarray(result.queries[i])
    q = int(qi.argmax()) if qi.ndim else int(qi)  # query="all": the sentence's first query (queries is a mask)
    sel = (sel[q] if sel.ndim == 2 else sel)[:L]
    cand = np.asarray(result.candidates[i])[:L] if result.candidates is not None else np.ones(L, bool)
    sup_all = result.support.get((layer, head))
    sup = np.asarray(sup_all[i])[:L] if sup_all is not None and i < len(sup_all) else None
    roles = token_roles(sel, cand, sup)
    spans = []
    for t, (tok, role) in enumerate(zip(toks, roles)):
        cls = f"tok {role}" + (" q" if t == q else "")
        tip = f"{tok} | attention {float(att[t]):.4f} | {ROLES[role].split(':')[0]}" + (" | the query" if t == q else "")
        spans.append(f"<span class='{cls}' data-i='{i}' data-t='{t}' data-att='{float(att[t]):.6g}' "
                     f"style='{_shade(att[t])}' title='{_e(tip)}'>{_e(tok)}</span>")
    note = "" if sup is not None else " <span class='small'>(outside the SVM's sentences: support unknown)</span>"
    return (f"<div class='sent' data-i='{i}'><div class='text'>sentence {i}: {_e(result.sentences[i])}{note}</div>"
            f"<div class='toks'>{''.join(spans)}</div></div>")


def _no_svm_html(result, r) -> str:
    """A head without a certified SVM in words: what has no value and why (:func:`head_reason`), the random
    baseline it cannot be compared with, the solver's status (no nan, inf or advantage shown)."""
    verdict = r.get("verdict") if isinstance(r.get("verdict"), str) else "no SVM"
    m = support_sentences(result.config)
    base = r.get("corr_random_restricted")
    return (f"<p class='score'>verdict <b>{_e(verdict)}</b>: this head has no certified SVM on its {m} SVM sentences, "
            "so there is no corr_restricted to compare with null heads or with random selections (no p-value, no "
            f"advantage). Random selections of the same sizes give corr_restricted {_num(base)}.</p>"
            + _kv([("SVM status", _e(r.get("svm_status"))), ("relative duality gap", _num(r.get("svm_gap"), ".2e")),
                   ("random baselines", f"{_e(r.get('random_status', ''))}")])
            + f"<p class='reason'>{_e(head_reason(r))}</p>")


def _head_section(result, r, n_show: int) -> str:
    l, h = int(r["layer"]), int(r["head"])
    out = [f"<section id='{head_anchor(l, h)}' class='head' data-layer='{l}' data-head='{h}'>"
           f"<h3>Layer {l}, head {h} <a class='small' href='#top'>(back to the heat map)</a></h3>"]
    if "advantage" in r.index and not _has_number(r):
        out.append(_no_svm_html(result, r))
    elif "advantage" in r.index:
        adv = float(r["advantage"])
        cls = "above" if adv > 0 else "below"
        if "verdict" in r.index and isinstance(r["verdict"], str):
            kind = null_kind_of(result.table, dict(result.config))
            stat = statistic_of(result.table, dict(result.config))
            out.append(f"<p class='score'>verdict <b>{_e(r['verdict'])}</b>: {_e(stat)} "
                       f"<b>{_num(r[stat])}</b> vs its {_e(kind or 'verdict')} null heads "
                       f"{_num(r['null_mean'])} +- "
                       f"{_num(r['null_sd'])} ({_e(r.get('n_null', ''))} draws), p_upper {_num(r['p_upper'], '.2g')}, "
                       f"q_upper {_num(r['q_upper'], '.2g')} ({_e(r.get('verdict_reason', ''))})"
                       + (f"; null draws {_e(r['null_stop'])}" if isinstance(r.get("null_stop"), str)
                          and r["null_stop"] != "all drawn" else "")
                       + (f"; transplanted heads (descriptive) {_num(r['transplant_mean'])}"
                          if "transplant_mean" in r.index else "") + ".</p>")
            if "p_margin_ratio" in r.index:
                out.append(f"<p class='score'>margin_ratio {_num(r.get('margin_ratio'), '.3g')}: p_upper against "
                           f"the null heads' margin ratios "
                           f"{_num(r['p_margin_ratio'], '.2g', 'unavailable (' + _margin_missing(r) + ')')}"
                           + ("" if stat == "margin_ratio" else " (reported; the verdict uses corr_restricted)")
                           + ".</p>")
        second = "secondary: " if "verdict" in r.index and isinstance(r["verdict"], str) else ""
        out.append(f"<p class='score'>{second}corr_restricted <b>{_num(r['corr_restricted'])}</b> vs random selections "
                   f"{_num(r['corr_random_restricted'])}: advantage <span class='{cls}'>{_num(adv, '+.4f')}</span> "
                   f"({'above' if adv > 0 else 'not above'} baseline); unrestricted corr {_num(r['corr'])} vs "
                   f"{_num(r['corr_random'])}.</p>")
        sup = result.support.get((l, h))
        n_sup = int(r["svm_support"]) if "svm_support" in r.index else int(np.asarray(sup).sum()) if sup is not None else 0
        m = support_sentences(result.config)
        out.append(_kv([("SVM status", _e(r["svm_status"])), ("relative duality gap", _num(r["svm_gap"], ".2e")),
                        ("relative violation", _num(r["svm_violation"], ".2e")), ("rank", _e(int(r["svm_rank"]))),
                        ("nuclear norm", _num(r["svm_nuclear"])),
                        ("support tokens", f"{n_sup} on {m} sentences ({_num(n_sup / max(m, 1), '.2f')} per sentence)"),
                        ("random baselines", f"{_e(r['random_status'])} (largest gap {_num(r['random_gap'], '.2e')})")]))
        reason = head_reason(r)
        if reason:
            out.append(f"<p class='reason'>{_e(reason)}</p>")
    else:
        out.append("<p class='small'>No SVM was solved (svm_sentences = 0): selections only.</p>")
    out.append(_shares_html(r, str(dict(result.config).get("family", "bert"))))
    out.append(f"<p class='small'>mean |O_i| {_num(r['mean_selected'], '.2f')}, mean largest attention "
               f"{_num(r['max_attention'], '.3f')}; argmax on [CLS] {_num(r['frac_cls'], '.2f')}, [SEP] "
               f"{_num(r['frac_sep'], '.2f')}, self {_num(r['frac_self'], '.2f')}, previous {_num(r['frac_prev'], '.2f')}, "
               f"next {_num(r['frac_next'], '.2f')}.</p>")
    for i in range(n_show):
        out.append(_sentence_html(result, l, h, i))
    out.append("</section>")
    return "".join(out)


def _layer_counts(g) -> str:
    """A layer's heads in words for its section's summary: the verdict counts, else the heads above the random
    baseline, else only how many heads."""
    marks = [head_mark(r) for _, r in g.iterrows()]
    counts = ", ".join(f"{marks.count(m)} {m}" for m in HEAD_MARKS if marks.count(m))
    return f"{len(g)} head{'s' if len(g) != 1 else ''}" + (f": {counts}" if counts else "")


_LAYER_SCRIPT = REVEAL_SCRIPT + r"""
(function () {  // a link to a head in a closed layer opens that layer (REVEAL_SCRIPT); the buttons open or close all
  const layers = () => document.querySelectorAll('details.layer');
  document.getElementById('open-layers').addEventListener('click', () => layers().forEach(d => { d.open = true; }));
  document.getElementById('close-layers').addEventListener('click', () => layers().forEach(d => { d.open = false; }));
})();
"""


def _layer_sections(result, table, n_show: int) -> str:
    """The heads' sections, one collapsible ``<details class='layer' id='layer-L'>`` per layer (the first open, so
    the page opens short), buttons to open or close them all, and the script that opens a closed layer when a
    link (a heat-map cell, ``#head-L-H``) points into it."""
    out = ["<p class='small'>One section per layer (click its title, or focus it and press Enter, to open or close "
           "it): <button type='button' id='open-layers'>open all layers</button> "
           "<button type='button' id='close-layers'>close all layers</button></p>"]
    for j, (l, g) in enumerate(table.groupby("layer", sort=False)):
        out.append(f"<details class='layer' id='layer-{int(l)}' data-layer='{int(l)}'{' open' if j == 0 else ''}>"
                   f"<summary>Layer {int(l)}: {_e(_layer_counts(g))}</summary>")
        out.extend(_head_section(result, r, n_show) for _, r in g.iterrows())
        out.append("</details>")
    out.append(f"<script>{_LAYER_SCRIPT}</script>")
    return "".join(out)


def _curve_html(full, curve: str | None) -> str:
    """The section of a probe at several m: each head's score, null mean and sd, p and verdict at each m and its
    stable verdict (the verdicts at the two largest m where they agree), and the curve figure when there is one."""
    cols = [c for c in ("m", "corr_restricted", "null_mean", "null_sd", "p_upper", "verdict") if c in full.columns]
    out = ["<h2 id='curve'>Across sample sizes</h2><p class='small'>Each head probed on the first m sentences for each "
           "m; the verdict is Benjamini-Yekutieli over the heads at each m, and the <b>stable verdict</b> is the verdict "
           "where those at the two largest m agree, else 'depends on sample size' (a conjunction over nested samples: "
           "conservative). The head sections below show the largest m.</p>"]
    if curve:
        out.append(f"<p><img src='{_e(curve)}' alt='each head: corr_restricted against m over its nulls band'></p>")
    out.append("<table><tr><th>head</th><th>stable verdict</th>" + "".join(f"<th>{_e(c)}</th>" for c in cols)
               + "</tr>")
    for (l, hd), g in full.groupby(["layer", "head"], sort=True):
        g = g.sort_values("m")
        stable = _e(g["stable_verdict"].iloc[-1]) if "stable_verdict" in g.columns else ""
        for j, (_, r) in enumerate(g.iterrows()):
            cells = "".join(f"<td class='num'>{_num(r[c], '.1e' if c == 'p_upper' else '.4f')}</td>"
                            if isinstance(r[c], (float, np.floating)) else f"<td>{_e(r[c])}</td>" for c in cols)
            first = (f"<td rowspan='{len(g)}'><a href='#{head_anchor(int(l), int(hd))}'>L{int(l)}-H{int(hd)}</a></td>"
                     f"<td rowspan='{len(g)}'>{stable}</td>") if j == 0 else ""
            out.append(f"<tr>{first}{cells}</tr>")
    out.append("</table>")
    return "".join(out)


def render_probe_view(result, *, heatmap: str | None = None, sentences: int | None = None,
                      curve: str | None = None) -> str:
    """The page of a :class:`~attnsvm.real.probe.ProbeResult` as a string.

    Parameters
    ----------
    result : ProbeResult with ``attention`` ``(layer, head) -> (k, T)``, ``selected`` ``(n, T)``,
        ``support`` ``(m_svm, T)`` (empty without SVMs) and ``candidates (k, T)``
    heatmap : relative path of the heat-map PNG to show (None: none)
    curve : relative path of the curve PNG of a probe at several m (:func:`attnsvm.real.figures.curve_figure`)
    sentences : show at most this many of the k kept sentences per head (None: all k)

    Returns
    -------
    str (UTF-8 HTML document)
    """
    import dataclasses

    from attnsvm.real.figures import largest_m

    full = result.table
    if "m" in full.columns:  # several m: the page shows each head at the largest m, and the curve across m
        result = dataclasses.replace(result, table=largest_m(full))
    table = result.table
    cfg = dict(result.config)
    k = min((len(a) for a in result.attention.values()), default=0)
    n_show = k if sentences is None else max(0, min(int(sentences), k))
    layers = sorted(int(x) for x in table["layer"].unique())
    heads = sorted(int(x) for x in table["head"].unique())
    model = cfg.get("model") or "MiniLM (sentence-transformers/all-MiniLM-L6-v2, shipped with attnsvm)"
    family = cfg.get("family", "bert")
    sec = result.seconds or {}
    h = ["<!doctype html><html lang='en'><head><meta charset='utf-8'><title>attnsvm probe</title>",
         f"<style>{_STYLE}{_mark_css()}</style></head><body><a id='top'></a>",
         f"<h1>attnsvm probe: {_e(model)}</h1>",
         _verdict_html(table, cfg),
         "<p class='small'>Each head's query (one token per sentence) <i>selects</i> the tokens it attends to with weight "
         ">= the threshold (always the argmax). The nuclear-norm Gen-SVM of those selections is the max-margin "
         "key-query matrix that produces them; <b>corr_restricted</b> is the cosine between the head's key-query matrix "
         "(projected on what these sentences can reveal) and that SVM solution. The baseline is the same SVM of random "
         "selections of the same sizes; the <b>advantage</b> is the difference.</p>"]
    has_svm = "advantage" in table.columns
    h.append("<h2 id='heatmap'>Layer x head</h2><p class='small'>Click a cell for the head's section; grey cells have no "
             "number (hover for the reason).</p><div class='maps'>")
    if has_svm:
        keys = ("corr_restricted", "null_mean") if "verdict" in table.columns else ("corr_restricted",)
        secondary = ("corr_random_restricted", "advantage")
        vals = np.concatenate([table[c].to_numpy(float) for c in keys + secondary if c in table.columns])
        vals = vals[np.isfinite(vals)]
        lim = float(np.abs(vals).max()) if vals.size else 1.0
        h.append(_grid(table, "corr_restricted", lim, layers, heads, "corr_restricted (head vs its SVM)"))
        if "verdict" in table.columns:
            kind = null_kind_of(table, cfg)
            h.append(_grid(table, "null_mean", lim, layers, heads, _null_caption(kind)))
            h.append(_verdict_grid(table, layers, heads))
            h.append("</div>" + _null_legend(kind) + "<p class='small'>Secondary: random selections of the same sizes "
                     "(any bilinear head beats them).</p><div class='maps'>")
        h.append(_grid(table, "advantage", lim, layers, heads, "advantage over random selections"))
    else:
        lim = float(table["mean_selected"].abs().max() or 1.0)
        h.append(_grid(table, "mean_selected", lim, layers, heads, "mean |O_i| (no SVMs solved)"))
    h.append("</div>")
    if heatmap:
        alt = (f"heat maps of corr_restricted, the {null_kind_of(table, cfg) or 'verdict'} nulls' mean and the "
               "excess over them"
               if "verdict" in table.columns else "heat maps of corr_restricted, its random baseline and the advantage")
        h.append(f"<p><img src='{_e(heatmap)}' alt='{alt}'></p>")
    if "m" in full.columns:
        h.append(_curve_html(full, curve))
    h.append(_explorer_html(result, n_show))
    h.append("<h2>Legend</h2>" + _legend())
    h.append("<h2>Run</h2><div class='maps'>")
    h.append(_kv([("model", _e(model)), ("family", _e(family))] + [(key, _e(v)) for key, v in cfg.items()
                                                                 if key not in ("model", "family")], "config"))
    h.append(_kv([(k, _e(v)) for k, v in cost_items(sec, getattr(result, "forward_cached", False))], "timings"))
    h.append("</div>")
    h.append("<h2>Per layer</h2>" + _layer_summary(table))
    h.append(f"<h2>Heads</h2><p class='small'>{n_show} sentence(s) per head, each with the probe's own query; the SVM "
             f"saw the first {_e(support_sentences(cfg))} of {_e(cfg.get('n_sentences', len(result.sentences)))}."
             "</p>")
    if cfg.get("query") == "all":
        h.append("<p class='small'>query = all: every word token is a query and the SVM uses all of them; each sentence "
                 "below shows only its first query's attention row, selection and support tokens.</p>")
    h.append(_layer_sections(result, table, n_show))
    h.append("</body></html>")
    return "\n".join(h)


def main_columns(table) -> list:
    """The columns a probe's table is read by, in order (the plain-text table of ``attnsvm probe`` and the notebook
    view): with null heads the verdict first and the random-selection baseline after it, else the agreement and
    the baseline; only those ``table`` has. A verdict on another statistic than corr_restricted (:func:`statistic_of`)
    shows ``statistic`` and that statistic right before ``null_mean`` (its nulls' mean), and corr_restricted after
    the verdict (descriptive then)."""
    names = (("layer", "head", "m", "mean_selected", "sel_first", "corr_restricted", "null_mean", "spectrum_mean",
              "p_upper", "q_upper", "verdict", "stable_verdict", "margin_ratio", "corr_random_restricted", "svm_status",
              "svm_gap") if "verdict" in table.columns else
             ("layer", "head", "mean_selected", "frac_cls", "corr", "corr_restricted", "corr_random_restricted",
              "advantage", "svm_status", "svm_gap"))
    stat = statistic_of(table, {}) if "verdict" in table.columns else "corr_restricted"
    if stat != "corr_restricted":  # the verdict's statistic beside its nulls' mean, and which it is
        names = tuple(c for c in names if c not in (stat, "corr_restricted"))
        i = names.index("null_mean")
        names = names[:i] + ("statistic", stat) + names[i:i + 6] + ("corr_restricted",) + names[i + 6:]
    return [c for c in names if c in table.columns]


#: columns shown in scientific notation (p-values, q-values, gaps and violations)
SCIENTIFIC = ("svm_gap", "svm_violation", "random_gap", "p_upper", "p_lower", "q_upper", "q_lower", "p_margin_ratio")


def notebook_html(result) -> str:
    """A compact HTML view of a probe (``ProbeResult._repr_html_``, shown by Jupyter): the verdict block of the page
    (:func:`_verdict_html`: the summary sentence and the per-layer counts), the run in one line and the per-head
    table's :func:`main_columns`, the verdict cells coloured as on the page. Words instead of nan or inf ("no SVM"
    in the row of a head without one, else "none"), as :func:`attnsvm.real.probe.format_table` prints."""
    table = result.table
    cfg = dict(result.config)
    model = cfg.get("model") or "MiniLM"
    run = (f"{_e(model)}: {_e(cfg.get('n_sentences', len(result.sentences)))} sentences, SVMs on "
           f"{_e(cfg.get('svm_sentences', 0))}, query {_e(cfg.get('query', 'word'))}, threshold "
           f"{_e(cfg.get('threshold', ''))}; ProbeResult.table (or .to_pandas()) has every column")
    columns = main_columns(table)
    rows = ["<tr>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"]
    for _, r in table.iterrows():
        missing = "none" if _has_number(r) else "no SVM"
        cells = []
        for c in columns:
            v = r[c]
            style = ""
            if c in ("verdict", "stable_verdict") and str(v) in VERDICT_COLOURS:
                bg, fg = VERDICT_COLOURS[str(v)]
                style = f" style='background:{bg};color:{fg}'"
            if isinstance(v, (float, np.floating)):
                text = _num(v, ".1e" if c in SCIENTIFIC else ".4f", missing=missing)
            elif isinstance(v, (int, np.integer)):
                text = _e(int(v))
            else:
                text = _e(missing if v is None else v)
            cells.append(f"<td{style}>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div class='attnsvm-probe'>{_verdict_html(table, cfg)}<p><small>{run}</small></p>"
            f"<table>{''.join(rows)}</table></div>")


def write_probe_view(result, outdir: str, *, heatmap: str | None = None, sentences: int | None = None,
                     filename: str = "probe.html", curve: str | None = None) -> str:
    """Write :func:`render_probe_view` to ``outdir/filename`` (atomic) and return its path.

    ``heatmap`` and ``curve`` are paths relative to ``outdir`` (e.g. ``"probe_heatmap.png"``), shown only when the
    file exists.
    """
    if heatmap and not os.path.isfile(os.path.join(outdir, heatmap)):
        heatmap = None
    if curve and not os.path.isfile(os.path.join(outdir, curve)):
        curve = None
    data = render_probe_view(result, heatmap=heatmap, sentences=sentences, curve=curve).encode("utf-8")
    path = os.path.join(outdir, filename)
    try:
        atomic_write(path, lambda fh: fh.write(data))
    except OSError as exc:
        raise ValidationError(f"cannot write the probe view to {path!r}: {oserror_text(exc, path)}") from None
    return path


# ------------------------------------------------------------------ costs
def cost_items(seconds: dict, forward_cached: bool = False, null_count: str = "") -> list[tuple[str, str]]:
    """A probe's costs in words, ``[(what, how long), ...]``: the one reading of :attr:`ProbeResult.seconds` that
    the terminal (``attnsvm probe``) and probe.html's run table share.

    ``seconds``: ``forward``, ``forward_cached``, ``svm`` and ``nulls`` (the heads' and null heads' SVM time,
    summed over heads), ``total`` (this command's wall clock); a stored probe (``--out``) adds ``tasks_computed``
    and ``tasks_reused`` (tasks this command ran / found stored by an earlier run) and ``tasks``: ``{part: {...,
    "text"}}``, its heads' and null heads' task costs as the stored tasks recorded them (CPU and task time of the
    tasks computed, and of those reused; :func:`attnsvm.cli.probe.task_costs`), shown instead of the in-task
    solver sums; ``total_of``: whose wall clock ``total`` is (default "this command"; a page rebuilt from a stored
    run gives that run's). ``null_count``: the null heads' count, put before their label."""
    computed, reused = seconds.get("tasks_computed"), seconds.get("tasks_reused")
    stored = computed is not None or reused is not None
    if forward_cached or seconds.get("forward_cached") is True:
        fwd = ("computed inside the heads' tasks (part of their time)" if stored and computed else
               "reused from an earlier forward pass of the same sentences in this process (not re-timed)")
    else:
        fwd = f"{float(seconds.get('forward', 0.0)):.1f} s"
    parts = seconds.get("tasks")
    if isinstance(parts, dict) and parts:  # a stored probe: its tasks' own records, by part
        nulls = f" ({null_count} null heads)" if null_count else ""
        labels = {"heads": "heads' tasks (SVMs and baselines)", "null heads": f"null heads' tasks{nulls}"}
        return [("forward pass", fwd)] + [
            (labels.get(name, name), str(part.get("text", ""))) for name, part in parts.items()
            if isinstance(part, dict)] + [_wall_item(seconds)]
    summed = " (task time summed over heads)" if stored else ""
    items = [("forward pass", fwd), ("head and baseline SVMs", f"{float(seconds.get('svm', 0.0)):.1f} s{summed}"),
             (f"{null_count} null-head SVMs".strip(), f"{float(seconds.get('nulls', 0.0)):.1f} s{summed}")]
    if reused:
        items.append(("stored tasks reused", f"{int(reused)} of {int(reused) + int(computed or 0)} (stored by an earlier "
                                             "run of the same probe: their SVM times above are from that run, not this "
                                             "command)"))
    items.append(_wall_item(seconds))
    return items


def _wall_item(seconds: dict) -> tuple[str, str]:
    """``("this command", "W s wall clock")``; a page rebuilt from a stored run (``total_of``): that run's."""
    total = seconds.get("total")
    text = "not recorded" if total is None else f"{float(total):.1f} s wall clock"
    return str(seconds.get("total_of") or "this command"), text


# ------------------------------------------------------------------ verdict, reasons, explorer
#: the verdicts a probe row can carry (a null distribution of the score exists), in the order counted
PROBE_VERDICTS = ("beyond null", "not distinguishable", "below null", "no SVM")


def head_reason(r) -> str:
    """A plain-language reason why a head has no number (NaN), or "" when it has one.

    ``r``: a probe row (mapping) with ``svm_status`` and the correlations; ``verdict_reason`` when present.
    """
    get = r.get if hasattr(r, "get") else (lambda k, d=None: d)
    given = get("verdict_reason")
    if get("verdict") == "no SVM" and isinstance(given, str) and given.strip():
        return given.strip()
    status = get("svm_status")
    corr = get("corr_restricted")
    nan = corr is None or (isinstance(corr, float) and corr != corr)
    if status == "infeasible":
        return ("No number: the SVM of this head's selections is "
                + no_svm_reason("infeasible", contradictions=get("svm_contradictions"))
                + ". So there is no max-margin direction to compare the "
                "head with; this is no evidence against the head.")
    if status == "optimal_inaccurate":
        return ("No number: the solver stopped without a certificate (duality gap or violation above tolerance), "
                "so the SVM direction is not trusted and its correlation is withheld.")
    if status not in (None, "optimal") and nan:
        return f"No number: the SVM ended with status {status!r}, which carries no certified direction."
    if nan and status == "optimal":
        return ("No number: the head's key-query matrix has no component in the span these sentences can reveal "
                "(its restriction is zero), so its cosine with the SVM is undefined.")
    return ""


def _margin_missing(r) -> str:
    """Why a head has no margin-ratio p-value, in words (its ``p_note``, else the usual reasons)."""
    note = r.get("p_note")
    if isinstance(note, str) and note.strip() and note != NO_NOTE:
        return note.strip()
    return "no certified SVM, or fewer than 3 null heads with a margin ratio"


def _effect_html(table, stat: str = "corr_restricted") -> str:
    """The headline's effect size and, at several m, the stable verdicts: the heads' mean excess over their nulls'
    mean (absolute, in the verdict's statistic ``stat``) and in their nulls' sds, against which null; words where
    no head has one."""
    kind = str(table["null_kind"].dropna().iloc[0]) if "null_kind" in table.columns and \
        table["null_kind"].notna().any() else "the"
    out = ""
    if "null_mean" in table.columns:
        excess = (table[stat] - table["null_mean"]).to_numpy(float)
        z = (excess / table["null_sd"].to_numpy(float)) if "null_sd" in table.columns else np.full(len(table), np.nan)
        ok, okz = np.isfinite(excess), np.isfinite(z)
        if ok.any():
            out += (f" Effect size against the {_e(kind)} nulls: the heads' {_e(stat)} exceeds their nulls' mean by "
                    f"{_num(float(np.mean(excess[ok])), '.3f')} on average (median {_num(float(np.median(excess[ok])), '.3f')}"
                    + (f"; {_num(float(np.median(z[okz])), '.1f')} null sds in the median" if okz.any() else "")
                    + f", over {int(ok.sum())} heads).")
        else:
            out += " No head has both a score and null heads, so there is no effect size."
    if "stable_verdict" in table.columns:
        sv = table["stable_verdict"].astype(str).value_counts()
        words = ", ".join(f"{int(n)} {_e(v)}" for v, n in sv.items())
        out += (f" <b>Stable verdict</b> (the two largest numbers of SVM sentences agree): {words}; the counts above are "
                "at the largest m.")
    return out


def _verdict_html(table, cfg) -> str:
    """The verdict block: per layer counts (null verdicts when present, else against the random baseline)."""
    rows = []
    if "verdict" in table.columns:
        head = "<tr><th>layer</th>" + "".join(f"<th>{_e(v)}</th>" for v in PROBE_VERDICTS) + "<th>heads</th></tr>"
        tot = {v: 0 for v in PROBE_VERDICTS}
        for l, g in table.groupby("layer", sort=True):
            counts = {v: int((g["verdict"] == v).sum()) for v in PROBE_VERDICTS}
            for v in PROBE_VERDICTS:
                tot[v] += counts[v]
            rows.append(f"<tr><td>{int(l)}</td>" + "".join(f"<td class='num'>{counts[v]}</td>" for v in PROBE_VERDICTS)
                        + f"<td class='num'>{len(g)}</td></tr>")
        n_null = table["n_null"].dropna() if "n_null" in table.columns else []
        draws = f" ({int(np.max(n_null))} null draws per head)" if len(n_null) else ""
        if "null_planned" in table.columns and table["null_planned"].notna().any():
            early = int((table["null_stop"].astype(str) != "all drawn").sum())
            draws = (f" (up to {int(table['null_planned'].max())} null draws per head; {early} heads stopped earlier, "
                     "where no further draw could change any verdict)")
        stat = statistic_of(table, cfg)
        lead = (f"<b>{tot['beyond null']} of {len(table)} heads</b> point along their own selections' SVM beyond "
                f"what the null distribution of the score allows{draws}; {tot['not distinguishable']} are not "
                f"distinguishable from it, {tot['below null']} fall below it and {tot['no SVM']} have no SVM. "
                f"The verdict's statistic: <b>{_e(STATISTIC_WORDS.get(stat, stat))}</b>.")
        lead += _effect_html(table, stat)
        sentence = (f"A head <i>beyond null</i> has a {_e(stat)} larger than the scores of its null heads at the "
                    "stated false-discovery level (q-value); <i>not distinguishable</i> is no evidence either way at "
                    "these sentence counts.")
    else:
        if "advantage" not in table.columns:
            return ("<div class='verdict' id='verdict'><b>No SVMs were solved</b> (svm_sentences = 0): this page shows "
                    "the heads' selections and attention only, no comparison with the max-margin picture.</div>")
        head = ("<tr><th>layer</th><th>heads above the random baseline</th><th>mean corr_restricted</th>"
                "<th>mean random baseline</th><th>heads without a number</th></tr>")
        above_all = 0
        for l, g in table.groupby("layer", sort=True):
            above = int((g["advantage"] > 0).sum())
            above_all += above
            nan = int(g["corr_restricted"].isna().sum())
            rows.append(f"<tr><td>{int(l)}</td><td class='num'>{above}/{len(g)}</td>"
                        f"<td class='num'>{_num(g['corr_restricted'].mean())}</td>"
                        f"<td class='num'>{_num(g['corr_random_restricted'].mean())}</td><td class='num'>{nan}</td></tr>")
        lead = (f"<b>{above_all} of {len(table)} heads</b> score above the baseline of random selections of the same "
                f"sizes (mean corr_restricted {_num(table['corr_restricted'].mean(), '.3f')} vs "
                f"{_num(table['corr_random_restricted'].mean(), '.3f')}).")
        sentence = (f"What this shows: whether a head's key-query matrix is closer to the max-margin SVM of the tokens "
                    f"it selects than to the SVMs of random selections ({_e(cfg.get('baseline_draws', 1))} draw(s) per "
                    "head). What it does not show: that the difference is beyond chance (there is no null "
                    "distribution here, so a head above the baseline by a few hundredths may be noise), nor how "
                    "strong a value such as 0.15 is in absolute terms: a cosine between two matrices of this size is "
                    "near 0 for unrelated directions and 1 only for the same direction.")
    return (f"<div class='verdict' id='verdict'><p>{lead}</p><table id='verdict-layers'>{head}{''.join(rows)}</table>"
            f"<p class='small'>{sentence}</p></div>")


def _permille(mat) -> list:
    """An attention matrix ``(T, T)`` as permille integers, ``None`` (JSON null, shown as "no value") where a
    cell is NaN or infinite: never the huge negative integer a NaN cast to int gives."""
    mat = np.asarray(mat, dtype=np.float64)
    ok = np.isfinite(mat)
    ints = np.rint(1000 * np.where(ok, mat, 0.0)).astype(int)
    return [[int(a) if o else None for a, o in zip(ra, ro)] for ra, ro in zip(ints, ok)]


def _explorer_data(result, n_show: int) -> dict:
    """The JSON the explorer reads: sentences, their tokens and probe queries, every head's attention matrices
    (permille integers, null where a value is not finite) with the support tokens of the probe's query, and per head
    its verdicts (:func:`head_verdicts`; ``marks``: the thumbnail's, ``colours``: each mark's) and shares
    (:func:`share_items`)."""
    cfg = dict(result.config)
    keys = sorted(result.matrices) if getattr(result, "matrices", None) else []
    sents = []
    for i in range(n_show):
        toks = [str(t) for t in result.tokens[i]]
        qi = np.asarray(result.queries[i])
        q = int(qi.argmax()) if qi.ndim else int(qi)
        sents.append({"text": str(result.sentences[i]), "tokens": toks, "query": q})
    att, sup = {}, {}
    for key in keys:
        mats = np.asarray(result.matrices[key])
        name = f"{key[0]}-{key[1]}"
        att[name] = [_permille(mats[i, :len(s["tokens"]), :len(s["tokens"])]) for i, s in enumerate(sents)
                     if i < len(mats)]
        sp = result.support.get(key)
        if sp is not None:
            sup[name] = [np.flatnonzero(np.asarray(sp[i])[:len(sents[i]["tokens"])]).tolist()
                         for i in range(min(len(sp), len(sents)))]
    layers = sorted({k[0] for k in keys})
    family = str(cfg.get("family", "bert"))
    verdicts, shares = {}, {}
    for _, r in result.table.iterrows():
        name = f"{int(r['layer'])}-{int(r['head'])}"
        verdicts[name] = [list(v) for v in head_verdicts(r)]
        shares[name] = [list(x) for x in share_items(r, family)]
    stable = "stable_verdict" in result.table.columns and "m" in result.table.columns
    return {"threshold": float(cfg.get("threshold", 0.1)), "layers": layers,
            "heads": {str(l): sorted(k[1] for k in keys if k[0] == l) for l in layers},
            "sentences": sents, "att": att, "support": sup, "svm_sentences": support_sentences(cfg),
            "marks": {k: v[0][0] for k, v in verdicts.items() if v},
            "verdicts": {k: v for k, v in verdicts.items() if v}, "shares": {k: v for k, v in shares.items() if v},
            "stable_note": ("the thumbnail marks the stable verdict: the verdict where those at the two largest m "
                            "agree, else 'depends on sample size'") if stable else "",
            "labels": {m: short for m, (short, _, _) in HEAD_MARKS.items()},
            "colours": {m: [bg, fg] for m, (_, bg, fg) in HEAD_MARKS.items()}}


_SCRIPT = r"""
(function () {
  const D = JSON.parse(document.getElementById('probe-data').textContent);
  const $ = id => document.getElementById(id);
  const L = $('pick-layer'), S = $('pick-sentence'), Q = $('pick-query'), H = $('pick-head');
  const opt = (sel, value, text) => {
    const o = document.createElement('option'); o.value = value; o.textContent = text; sel.appendChild(o);
  };
  const shade = a => 'rgba(255,140,0,' + Math.sqrt(Math.max(0, Math.min(1, a))).toFixed(3) + ')';
  // a cell without a value (null in the data: the attention was not a finite number) is grey, "no value"
  const fill = a => a === null ? '#d0d7de' : shade(a / 1000);
  const txt = a => a === null ? 'no value' : (a / 1000).toFixed(3);
  D.layers.forEach(l => opt(L, l, 'layer ' + l));
  D.sentences.forEach((s, i) => opt(S, i, i + ': ' + (s.text.length > 70 ? s.text.slice(0, 70) + '...' : s.text)));
  function fillQueries() {
    const s = D.sentences[+S.value]; Q.textContent = '';
    s.tokens.forEach((t, k) => opt(Q, k, k + ': ' + t + (k === s.query ? '  (the probe\'s query)' : '')));
    Q.value = s.query;
  }
  function fillHeads() {
    const cur = H.value; H.textContent = '';
    D.heads[L.value].forEach(h => opt(H, h, 'head ' + h));
    if (D.heads[L.value].map(String).includes(cur)) H.value = cur;
  }
  function roleOf(row, t, key, i, q) {
    const s = D.sentences[i];
    let best = 0; row.forEach((a, k) => { if (a > row[best]) best = k; });
    if ((row[t] !== null && row[t] >= 1000 * D.threshold - 0.5) || t === best) return 'sel';
    if (q !== s.query || i >= D.svm_sentences || !D.support[key] || !D.support[key][i]) return 'unk';
    return D.support[key][i].includes(t) ? 'sup' : 'oth';
  }
  const MV = $('model-view'), SV = $('show-values');
  const marks = D.marks || {}, labels = D.labels || {}, verdicts = D.verdicts || {}, colours = D.colours || {};
  const shares = D.shares || {};
  function badge(v) {  // a verdict [mark, words] in the verdict map's colours
    const b = document.createElement('span'); b.className = 'hv'; b.dataset.mark = v[0]; b.textContent = v[1];
    const c = colours[v[0]]; if (c) { b.style.background = c[0]; b.style.color = c[1]; }
    return b;
  }
  const value = a => { const c = Math.round(a / 10); return a <= 0 ? '0' : c >= 100 ? '1' : '.' + String(c).padStart(2, '0'); };
  function draw(canvas, M) {  // one pixel per cell, white to orange as the matrix cells (alpha sqrt(attention))
    const n = M.length; canvas.width = n; canvas.height = n;
    const ctx = canvas.getContext('2d'), img = ctx.createImageData(n, n);
    M.forEach((r, k) => r.forEach((a, t) => {
      const al = Math.sqrt(Math.max(0, Math.min(1, a / 1000))), p = 4 * (k * n + t);
      if (a === null) { img.data[p] = 208; img.data[p + 1] = 215; img.data[p + 2] = 222; img.data[p + 3] = 255; return; }
      img.data[p] = 255; img.data[p + 1] = Math.round(255 - 115 * al); img.data[p + 2] = Math.round(255 * (1 - al));
      img.data[p + 3] = 255;
    }));
    ctx.putImageData(img, 0, 0);
  }
  function buildModel() {
    D.layers.forEach(l => {
      const row = document.createElement('div'); row.className = 'mrow'; row.dataset.layer = l;
      const lab = document.createElement('span'); lab.className = 'ml'; lab.textContent = 'layer ' + l; row.appendChild(lab);
      D.heads[l].forEach(h => {
        const key = l + '-' + h, m = marks[key] || '';
        const b = document.createElement('button'); b.type = 'button'; b.className = 'thumb';
        b.dataset.layer = l; b.dataset.head = h; b.dataset.mark = m;
        const vs = verdicts[key] || [];
        const what = 'layer ' + l + ', head ' + h + (vs.length ? ': ' + vs.map(v => v[1]).join('; ') : '');
        b.title = what + (vs.length && D.stable_note ? ' (' + D.stable_note + ')' : '') + '. Click: this head in the explorer';
        b.setAttribute('aria-label', what + '; show this head in the explorer');
        b.appendChild(document.createElement('canvas'));
        const cap = document.createElement('span'); cap.textContent = 'head ' + h; b.appendChild(cap);
        if (m) { const v = document.createElement('span'); v.className = 'tv'; v.textContent = labels[m] || m; b.appendChild(v); }
        b.addEventListener('click', () => {
          L.value = l; fillHeads(); H.value = h; render();
          $('matrix-title').scrollIntoView({block: 'nearest'});
        });
        row.appendChild(b);
      });
      MV.appendChild(row);
    });
  }
  function renderModel(i) {
    $('model-title').textContent = 'All heads at a glance: sentence ' + i;
    const redraw = MV.dataset.sentence !== String(i);  // the thumbnails change with the sentence only
    MV.dataset.sentence = i;
    MV.querySelectorAll('.thumb').forEach(b => {
      if (redraw) draw(b.querySelector('canvas'), D.att[b.dataset.layer + '-' + b.dataset.head][i]);
      const cur = b.dataset.layer === L.value && b.dataset.head === H.value;
      b.classList.toggle('cur', cur); b.setAttribute('aria-pressed', cur ? 'true' : 'false');
    });
  }
  function render() {
    const l = L.value, i = +S.value, q = +Q.value, s = D.sentences[i];
    const shown = $('shown');
    shown.dataset.layer = l; shown.dataset.sentence = i; shown.dataset.query = q;
    shown.textContent = 'Layer ' + l + ', sentence ' + i + ': "' + s.text + '"; query token ' + q + ' "' + s.tokens[q] + '"' +
      (q === s.query ? ' (the probe\'s query)' : ' (not the probe\'s query: support tokens unknown)');
    const box = $('heads-rows'); box.textContent = '';
    D.heads[l].forEach(h => {
      const key = l + '-' + h, row = D.att[key][i][q];
      const div = document.createElement('div'); div.className = 'hrow'; div.dataset.head = h;
      const meta = document.createElement('div'); meta.className = 'hmeta';
      const lab = document.createElement('span'); lab.className = 'hl'; lab.textContent = 'head ' + h; meta.appendChild(lab);
      (verdicts[key] || []).forEach(v => meta.appendChild(badge(v)));
      if (shares[key]) {
        const sh = document.createElement('span'); sh.className = 'sh';
        sh.textContent = shares[key].map(x => x[0] + ' ' + x[1]).join(' \u00b7 ');
        sh.title = shares[key].map(x => x[2]).join('; '); meta.appendChild(sh);
      }
      div.appendChild(meta);
      s.tokens.forEach((t, k) => {
        const sp = document.createElement('span');
        sp.className = 'tok ' + roleOf(row, k, key, i, q) + (k === q ? ' q' : '');
        sp.textContent = t; sp.dataset.t = k; sp.dataset.att = txt(row[k]);
        sp.style.background = fill(row[k]);
        sp.title = t + ' | attention ' + txt(row[k]) + ' | click: make it the query';
        sp.addEventListener('click', () => { Q.value = k; render(); });
        div.appendChild(sp);
      });
      box.appendChild(div);
    });
    const h = H.value, M = D.att[l + '-' + h][i], tab = $('matrix'); tab.textContent = '';
    $('matrix-title').textContent = 'Layer ' + l + ', head ' + h + ': attention of every query (rows) over the tokens ' +
      '(columns) of sentence ' + i + '; click a row to make it the query';
    const thead = document.createElement('thead'), hr = document.createElement('tr');
    hr.appendChild(document.createElement('th'));
    s.tokens.forEach(t => { const th = document.createElement('th'); th.textContent = t; hr.appendChild(th); });
    thead.appendChild(hr); tab.appendChild(thead);
    const tb = document.createElement('tbody'), values = SV.checked;
    tab.classList.toggle('values', values);
    M.forEach((r, k) => {
      const tr = document.createElement('tr'); tr.dataset.query = k; if (k === q) tr.className = 'cur';
      const th = document.createElement('th'); th.textContent = s.tokens[k]; tr.appendChild(th);
      r.forEach((a, t) => { const td = document.createElement('td'); td.style.background = fill(a);
        td.dataset.att = txt(a);
        td.title = s.tokens[k] + ' -> ' + s.tokens[t] + ': ' + txt(a);
        if (values) { td.textContent = a === null ? '-' : value(a); if (a > 560) td.className = 'dark'; }
        tr.appendChild(td); });
      tr.addEventListener('click', () => { Q.value = k; render(); });
      tb.appendChild(tr);
    });
    tab.appendChild(tb);
    const flat = [].concat(...M).filter(a => a !== null), sc = $('matrix-scale');
    const lo = flat.length ? Math.min(...flat) : null, hi = flat.length ? Math.max(...flat) : null;
    sc.dataset.min = txt(lo); sc.dataset.max = txt(hi);
    $('scale-min').textContent = sc.dataset.min; $('scale-max').textContent = sc.dataset.max;
    sc.querySelector('.mark.min').style.left = (lo / 10) + '%'; sc.querySelector('.mark.max').style.left = (hi / 10) + '%';
    renderModel(i);
  }
  L.addEventListener('change', () => { fillHeads(); render(); });
  S.addEventListener('change', () => { fillQueries(); render(); });
  Q.addEventListener('change', render);
  H.addEventListener('change', render);
  SV.addEventListener('change', render);
  buildModel(); fillHeads(); fillQueries(); render();
})();
"""


def _explorer_html(result, n_show: int) -> str:
    """The chooser, the all-heads view of one sentence and the attention matrix (empty without matrices)."""
    if not getattr(result, "matrices", None) or n_show == 0:
        return ""
    payload = _explorer_data(result, n_show)
    used = set(payload["marks"].values())
    marks = ", ".join(f"<span class='swatch' style='background:{bg};color:{fg};width:auto;padding:0 .3em'>{_e(short)}"
                      f"</span> {_e(m)}" for m, (short, bg, fg) in HEAD_MARKS.items() if m in used)
    what = ("the head's stable verdict, where the verdicts at the two largest m agree (hover a thumbnail for the "
            "verdict at the largest m)" if payload["stable_note"] else
            "the head's verdict; without null heads, its advantage over random selections")
    marks = f"<p class='small'>Thumbnail marks: {marks} ({what}).</p>" if used else ""
    data = json.dumps(payload, separators=(",", ":"))
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return ("<h2>Explore one sentence</h2><div id='explorer'><p class='small'>Pick a layer, one of the "
            f"{n_show} kept sentences and any of its tokens as the query. Each row below is one head of the layer: the "
            "sentence's tokens shaded by that head's attention from the query, marked as in the legend (support "
            "tokens only for the probe's own query of a sentence the SVM saw). Click a token to make it the "
            "query.</p><div class='controls'><label>layer <select id='pick-layer'></select></label>"
            "<label>sentence <select id='pick-sentence'></select></label><label>query <select id='pick-query'></select>"
            "</label><label>head of the matrix <select id='pick-head'></select></label></div>"
            "<h3 id='model-title'></h3><p class='small'>Each thumbnail is one head's whole attention matrix for the "
            "chosen sentence (queries down, tokens across, shaded as the matrix below); click one, or focus it and "
            "press Enter, to show that head below.</p><div id='model-view' role='group' aria-label='every head of "
            "the probe, one thumbnail each'></div>" + marks
            + "<p id='shown'></p><div id='heads-rows'></div><h3 id='matrix-title'></h3><div class='controls'>"
            "<label><input type='checkbox' id='show-values'> show the values in the cells "
            "(hundredths: .25 is 0.25)</label></div>"
            "<div class='scale' id='matrix-scale'>"
            "<span>colour: attention 0</span><span class='bar'><span class='mark min'></span><span class='mark max'>"
            "</span></span><span>1 (alpha = sqrt(attention));</span><span>this matrix: min <b id='scale-min'></b> "
            "(blue tick), max <b id='scale-max'></b> (black tick)</span></div><table id='matrix'></table></div>"
            f"<script type='application/json' id='probe-data'>{data}</script><script>{_SCRIPT}</script>")
