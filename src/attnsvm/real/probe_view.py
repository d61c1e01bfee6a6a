"""One self-contained HTML page of a head probe (``attnsvm probe --out DIR`` writes ``DIR/probe.html``).

For an interpretability researcher reading :func:`attnsvm.real.probe.probe_heads`:

* **Top.** The model, the probe's config and timings, a per-layer summary (mean
  ``corr_restricted`` against the random selections' baseline, heads above it) and layer x head
  heat maps of ``corr_restricted`` and of the advantage over random as HTML tables with cell colours
  (one diverging scale for both, like ``probe_heatmap.png``, which is shown below them by relative
  path when it was written). Every cell links to its head's section.
* **One section per head** (anchor ``head-L-H``): its score against its random baseline, its SVM
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

Every token is a ``<span class="tok ROLE [q]" data-i=I data-t=T data-att=A>``; all text is escaped
with :func:`html.escape`. No script, no external resource: inline CSS, the heat-map PNG by a
relative path.
"""

from __future__ import annotations

import html
import math
import os

import numpy as np

from attnsvm._files import atomic_write, oserror_text
from attnsvm.errors import ValidationError

__all__ = ["ROLES", "token_roles", "render_probe_view", "write_probe_view", "head_anchor"]

#: token role classes, in the legend's order, with their meaning
ROLES = {
    "sel": "selected: in O_i (attention >= threshold, or the argmax)",
    "sup": "support: not selected, on the SVM's margin (active row)",
    "oth": "other: not selected, beyond the SVM's margin",
    "unk": "not selected, sentence outside the SVM's sentences",
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
"""


def head_anchor(layer: int, head: int) -> str:
    """The id of a head's section: ``head-L-H``."""
    return f"head-{int(layer)}-{int(head)}"


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _num(value, fmt: str = ".4f") -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return _e(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return format(value, fmt)


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


def _grid(table, key: str, lim: float, layers, heads, title: str) -> str:
    cells = {(int(r["layer"]), int(r["head"])): r for _, r in table.iterrows()}
    out = [f"<table class='grid' id='grid-{_e(key)}'><caption>{_e(title)}</caption><tr><th>layer \\ head</th>"
           + "".join(f"<th>{h}</th>" for h in heads) + "</tr>"]
    for l in layers:
        row = [f"<tr><th>{l}</th>"]
        for h in heads:
            r = cells.get((l, h))
            if r is None:
                row.append("<td></td>")
                continue
            v = float(r[key])
            bg, fg = _diverging(v, lim) if lim > 0 else ("#eeeeee", "#222")
            tip = f"layer {l}, head {h}: {key} {_num(v)}"
            row.append(f"<td style='background:{bg};color:{fg}'><a href='#{head_anchor(l, h)}' title='{_e(tip)}'>"
                       f"{_num(v, '.2f')}</a></td>")
        out.append("".join(row) + "</tr>")
    return "".join(out) + "</table>"


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


def _head_section(result, r, n_show: int) -> str:
    l, h = int(r["layer"]), int(r["head"])
    out = [f"<section id='{head_anchor(l, h)}' class='head' data-layer='{l}' data-head='{h}'>"
           f"<h3>Layer {l}, head {h} <a class='small' href='#top'>(back to the heat map)</a></h3>"]
    if "advantage" in r.index:
        adv = float(r["advantage"])
        cls = "above" if adv > 0 else "below"
        out.append(f"<p class='score'>corr_restricted <b>{_num(r['corr_restricted'])}</b> vs random selections "
                   f"{_num(r['corr_random_restricted'])}: advantage <span class='{cls}'>{_num(adv, '+.4f')}</span> "
                   f"({'above' if adv > 0 else 'not above'} baseline); unrestricted corr {_num(r['corr'])} vs "
                   f"{_num(r['corr_random'])}.</p>")
        sup = result.support.get((l, h))
        n_sup = int(r["svm_support"]) if "svm_support" in r.index else int(np.asarray(sup).sum()) if sup is not None else 0
        m = int(result.config.get("svm_sentences", 0))
        out.append(_kv([("SVM status", _e(r["svm_status"])), ("relative duality gap", _num(r["svm_gap"], ".2e")),
                        ("relative violation", _num(r["svm_violation"], ".2e")), ("rank", _e(int(r["svm_rank"]))),
                        ("nuclear norm", _num(r["svm_nuclear"])),
                        ("support tokens", f"{n_sup} on {m} sentences ({_num(n_sup / max(m, 1), '.2f')} per sentence)"),
                        ("random baselines", f"{_e(r['random_status'])} (largest gap {_num(r['random_gap'], '.2e')})")]))
    else:
        out.append("<p class='small'>No SVM was solved (svm_sentences = 0): selections only.</p>")
    out.append(f"<p class='small'>mean |O_i| {_num(r['mean_selected'], '.2f')}, mean largest attention "
               f"{_num(r['max_attention'], '.3f')}; argmax on [CLS] {_num(r['frac_cls'], '.2f')}, [SEP] "
               f"{_num(r['frac_sep'], '.2f')}, self {_num(r['frac_self'], '.2f')}, previous {_num(r['frac_prev'], '.2f')}, "
               f"next {_num(r['frac_next'], '.2f')}.</p>")
    for i in range(n_show):
        out.append(_sentence_html(result, l, h, i))
    out.append("</section>")
    return "".join(out)


def render_probe_view(result, *, heatmap: str | None = None, sentences: int | None = None) -> str:
    """The page of a :class:`~attnsvm.real.probe.ProbeResult` as a string.

    Parameters
    ----------
    result : ProbeResult with ``attention`` ``(layer, head) -> (k, T)``, ``selected`` ``(n, T)``,
        ``support`` ``(m_svm, T)`` (empty without SVMs) and ``candidates (k, T)``
    heatmap : relative path of the heat-map PNG to show (None: none)
    sentences : show at most this many of the k kept sentences per head (None: all k)

    Returns
    -------
    str (UTF-8 HTML document)
    """
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
         f"<style>{_STYLE}</style></head><body><a id='top'></a>",
         f"<h1>attnsvm probe: {_e(model)}</h1>",
         "<p class='small'>Each head's query (one token per sentence) <i>selects</i> the tokens it attends to with weight "
         ">= the threshold (always the argmax). The nuclear-norm Gen-SVM of those selections is the max-margin "
         "key-query matrix that produces them; <b>corr_restricted</b> is the cosine between the head's key-query matrix "
         "(projected on what these sentences can reveal) and that SVM solution. The baseline is the same SVM of random "
         "selections of the same sizes; the <b>advantage</b> is the difference.</p>"]
    h.append("<h2>Run</h2><div class='maps'>")
    h.append(_kv([("model", _e(model)), ("family", _e(family))] + [(key, _e(v)) for key, v in cfg.items()
                                                                 if key not in ("model", "family")], "config"))
    h.append(_kv([(f"{key} (s)", _num(v, ".2f")) for key, v in sec.items()], "timings"))
    h.append("</div>")
    h.append("<h2>Per layer</h2>" + _layer_summary(table))
    has_svm = "advantage" in table.columns
    h.append("<h2 id='heatmap'>Layer x head</h2><p class='small'>Click a cell for the head's section.</p><div class='maps'>")
    if has_svm:
        vals = np.concatenate([table[c].to_numpy(float) for c in ("corr_restricted", "corr_random_restricted", "advantage")])
        vals = vals[np.isfinite(vals)]
        lim = float(np.abs(vals).max()) if vals.size else 1.0
        h.append(_grid(table, "corr_restricted", lim, layers, heads, "corr_restricted (head vs its SVM)"))
        h.append(_grid(table, "advantage", lim, layers, heads, "advantage over random selections"))
    else:
        lim = float(table["mean_selected"].abs().max() or 1.0)
        h.append(_grid(table, "mean_selected", lim, layers, heads, "mean |O_i| (no SVMs solved)"))
    h.append("</div>")
    if heatmap:
        h.append(f"<p><img src='{_e(heatmap)}' alt='heat maps of corr_restricted, its random baseline and the advantage'>"
                 "</p>")
    h.append("<h2>Legend</h2>" + _legend())
    h.append(f"<h2>Heads</h2><p class='small'>{n_show} sentence(s) per head; the SVM saw the first "
             f"{_e(cfg.get('svm_sentences', 0))} of {_e(cfg.get('n_sentences', len(result.sentences)))}.</p>")
    if cfg.get("query") == "all":
        h.append("<p class='small'>query = all: every word token is a query and the SVM uses all of them; each sentence "
                 "below shows only its first query's attention row, selection and support tokens.</p>")
    for _, r in table.iterrows():
        h.append(_head_section(result, r, n_show))
    h.append("</body></html>")
    return "\n".join(h)


def write_probe_view(result, outdir: str, *, heatmap: str | None = None, sentences: int | None = None,
                     filename: str = "probe.html") -> str:
    """Write :func:`render_probe_view` to ``outdir/filename`` (atomic) and return its path.

    ``heatmap`` is a path relative to ``outdir`` (e.g. ``"probe_heatmap.png"``), shown only when the file exists.
    """
    if heatmap and not os.path.isfile(os.path.join(outdir, heatmap)):
        heatmap = None
    data = render_probe_view(result, heatmap=heatmap, sentences=sentences).encode("utf-8")
    path = os.path.join(outdir, filename)
    try:
        atomic_write(path, lambda fh: fh.write(data))
    except OSError as exc:
        raise ValidationError(f"cannot write the probe view to {path!r}: {oserror_text(exc, path)}") from None
    return path
