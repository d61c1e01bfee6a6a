"""One HTML page (and a Markdown twin) summarizing every experiment in a results folder."""

from __future__ import annotations

import html
import json
import os

from ..errors import ValidationError


def _load(expdir: str) -> dict | None:
    meta_path = os.path.join(expdir, "meta.json")
    if not os.path.isfile(meta_path):
        return None
    with open(meta_path) as fh:
        meta = json.load(fh)
    checks_path = os.path.join(expdir, "checks.json")
    meta["checks"] = json.load(open(checks_path)) if os.path.isfile(checks_path) else []
    cfg_path = os.path.join(expdir, "config.yaml")
    meta["config_text"] = open(cfg_path).read() if os.path.isfile(cfg_path) else ""
    meta["dir"] = os.path.basename(expdir)
    return meta


def collect(outdir: str) -> list[dict]:
    """Every experiment folder of ``outdir`` that holds a finished run, sorted by name."""
    if not os.path.isdir(outdir):
        raise ValidationError(f"no such results folder: {outdir!r}")
    found = []
    for entry in sorted(os.listdir(outdir)):
        path = os.path.join(outdir, entry)
        if os.path.isdir(path):
            meta = _load(path)
            if meta is not None:
                found.append(meta)
    if not found:
        raise ValidationError(f"{outdir!r} holds no experiment results (run 'attnsvm run NAME --out {outdir}' first)")
    from .base import registry

    order = {name: k for k, name in enumerate(registry())}
    return sorted(found, key=lambda e: (order.get(e["name"], len(order)), e["name"]))


def _fmt(value) -> str:
    if value is None:
        return "-"
    value = float(value)
    if value != value:
        return "nan"
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


def write_report(outdir: str) -> tuple[str, str]:
    """Write ``outdir/report.html`` and ``outdir/report.md``; returns their paths."""
    exps = collect(outdir)
    n_checks = sum(len(e["checks"]) for e in exps)
    n_pass = sum(c["passed"] for e in exps for c in e["checks"])
    env = exps[0].get("environment", {})
    total_wall = sum(e.get("wall_seconds", 0.0) for e in exps)

    md = ["# attnsvm reproduction report", "",
          f"{len(exps)} experiment(s), {n_pass}/{n_checks} checks passed, {total_wall:.1f} s of wall time.", ""]
    h = ["<!doctype html><html><head><meta charset='utf-8'><title>attnsvm report</title><style>",
         "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}",
         "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}",
         ".pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}img{max-width:100%;border:1px solid #eee}",
         "pre{background:#f6f8fa;padding:.6em;overflow:auto}section{margin-bottom:2.5em}</style></head><body>",
         "<h1>attnsvm reproduction report</h1>",
         f"<p>{len(exps)} experiment(s), <b>{n_pass}/{n_checks}</b> checks passed, {total_wall:.1f} s of wall time.</p>",
         "<h2>Summary</h2><table><tr><th>experiment</th><th>checks passed</th><th>runs</th><th>wall time (s)</th><th>tasks (computed / resumed / failed)</th></tr>"]
    md += ["| experiment | checks passed | runs | wall time (s) | tasks computed / resumed / failed |", "|---|---|---|---|---|"]
    for e in exps:
        ok = sum(c["passed"] for c in e["checks"])
        cls = "pass" if ok == len(e["checks"]) else "fail"
        h.append(f"<tr><td><a href='#{html.escape(e['name'])}'>{html.escape(e['name'])}</a></td><td class='{cls}'>{ok}/{len(e['checks'])}</td>"
                 f"<td>{e.get('runs', '-')}</td><td>{e.get('wall_seconds', 0):.1f}</td><td>{e.get('computed')} / {e.get('resumed')} / {e.get('failed')}</td></tr>")
        md.append(f"| {e['name']} | {ok}/{len(e['checks'])} | {e.get('runs', '-')} | {e.get('wall_seconds', 0):.1f} | {e.get('computed')} / {e.get('resumed')} / {e.get('failed')} |")
    h.append("</table>")
    md.append("")

    for e in exps:
        h.append(f"<section id='{html.escape(e['name'])}'><h2>{html.escape(e['name'])}: {html.escape(e.get('title', ''))}</h2>")
        md += [f"## {e['name']}: {e.get('title', '')}", ""]
        if e.get("paper"):
            h.append(f"<p><i>{html.escape(e['paper'])}</i></p>")
            md += [f"*{e['paper']}*", ""]
        h.append("<table><tr><th>check</th><th>value</th><th>threshold</th><th>verdict</th><th>detail</th></tr>")
        md += ["| check | value | threshold | verdict | detail |", "|---|---|---|---|---|"]
        for c in e["checks"]:
            verdict = "pass" if c["passed"] else "FAIL"
            h.append(f"<tr><td>{html.escape(c['name'])}</td><td>{_fmt(c['value'])}</td><td>{html.escape(c['threshold'])}</td>"
                     f"<td class='{'pass' if c['passed'] else 'fail'}'>{verdict}</td><td>{html.escape(c.get('detail', ''))}</td></tr>")
            md.append(f"| {c['name']} | {_fmt(c['value'])} | {c['threshold']} | {verdict} | {c.get('detail', '')} |")
        h.append("</table>")
        md.append("")
        for fig in e.get("figures", []):
            if fig.endswith(".png"):
                src = f"{e['dir']}/{fig}"
                h.append(f"<p><img src='{html.escape(src)}' alt='{html.escape(fig)}'></p>")
                md += [f"![{fig}]({src})", ""]
        if e.get("explain"):
            h.append(f"<h3>Notes</h3><pre>{html.escape(e['explain'])}</pre>")
            md += ["### Notes", "", e["explain"], ""]
        h.append(f"<details><summary>config (hash {html.escape(e.get('config_hash', ''))})</summary><pre>{html.escape(e['config_text'])}</pre></details>")
        h.append(f"<p>finished {html.escape(e.get('finished', ''))}, {e.get('wall_seconds', 0):.1f} s, workers: {e.get('workers')}"
                 f"{', scheduler ' + html.escape(str(e['scheduler'])) if e.get('scheduler') else ''}</p></section>")
        md += ["```yaml", e["config_text"].rstrip(), "```", ""]

    pk = env.get("packages", {})
    h.append("<h2>Environment</h2><table>")
    h.append(f"<tr><td>python</td><td>{html.escape(str(env.get('python')))}</td></tr><tr><td>platform</td><td>{html.escape(str(env.get('platform')))}</td></tr>"
             f"<tr><td>cpus</td><td>{env.get('cpus')}</td></tr>")
    md += ["## Environment", "", f"- python {env.get('python')}, {env.get('platform')}, {env.get('cpus')} cpus"]
    for k, v in pk.items():
        h.append(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>")
        md.append(f"- {k} {v}")
    h.append("</table><p>Seeds are part of each config above; every run of a task is seeded by its run index.</p></body></html>")
    html_path, md_path = os.path.join(outdir, "report.html"), os.path.join(outdir, "report.md")
    with open(html_path, "w") as fh:
        fh.write("\n".join(h))
    with open(md_path, "w") as fh:
        fh.write("\n".join(md) + "\n")
    return html_path, md_path
