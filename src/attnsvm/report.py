"""One HTML page (and a Markdown twin) summarizing every experiment in a results folder.

Order of the page: the verdict line, failed checks (those that fail the run first, then
listed findings with their evidence), skipped experiments with how to enable them, the
summary table, the deviations from the spec's protocols, then one section per
experiment (checks with their source and the origin of each threshold, figures, notes,
the config and provenance that produced the numbers) and the environment.

A folder whose ``meta.json`` or ``checks.json`` cannot be read is shown with the error
instead of breaking the report of the others.
"""

from __future__ import annotations

import html
import json
import os

from attnsvm._files import atomic_write, oserror_text
from attnsvm.errors import ValidationError

SKIPPED_FILE = "skipped.json"


def _read_json(path: str, default):
    """``(value, error)``: the parsed JSON file, or ``default`` and a one-line reason."""
    if not os.path.isfile(path):
        return default, None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh), None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return default, f"{os.path.basename(path)} is unreadable ({type(exc).__name__}: {exc}); re-run the experiment"


def _load(expdir: str) -> dict | None:
    meta_path = os.path.join(expdir, "meta.json")
    if not os.path.isfile(meta_path):
        return None
    meta, err = _read_json(meta_path, None)
    problems = []
    if not isinstance(meta, dict):
        problems.append(err or "meta.json does not hold a JSON object; re-run the experiment")
        meta = {"name": os.path.basename(expdir)}
    checks, err = _read_json(os.path.join(expdir, "checks.json"), [])
    if err:
        problems.append(err)
    if not isinstance(checks, list) or not all(isinstance(c, dict) and "name" in c and "passed" in c for c in checks):
        problems.append("checks.json does not hold a list of checks; re-run the experiment")
        checks = []
    meta["checks"] = checks
    meta["problems"] = problems
    cfg = meta.get("config")
    if isinstance(cfg, dict):
        import yaml

        meta["config_text"] = yaml.safe_dump(cfg, sort_keys=False)
    else:
        cfg_path = os.path.join(expdir, "config.yaml")
        try:
            meta["config_text"] = open(cfg_path, encoding="utf-8").read() if os.path.isfile(cfg_path) else ""
        except (OSError, UnicodeDecodeError):
            meta["config_text"] = "(config.yaml unreadable)"
    meta.setdefault("name", os.path.basename(expdir))
    meta["dir"] = os.path.basename(expdir)
    return meta


def record_skipped(outdir: str, skipped: list[dict], ran=()) -> None:
    """Keep ``OUT/skipped.json`` current: add ``skipped`` experiments, drop those that ``ran``."""
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, SKIPPED_FILE)
    old, _ = _read_json(path, [])
    old = old if isinstance(old, list) else []
    names = {s["name"] for s in skipped} | set(ran)
    merged = [s for s in old if isinstance(s, dict) and s.get("name") not in names] + list(skipped)
    data = json.dumps(merged, indent=2).encode("utf-8")
    atomic_write(path, lambda fh: fh.write(data))


def collect(outdir: str) -> list[dict]:
    """Every experiment folder of ``outdir`` that holds a finished run, in registry order."""
    if not os.path.isdir(outdir):
        raise ValidationError(f"no such results folder: {outdir!r}")
    found = []
    for entry in sorted(os.listdir(outdir)):
        path = os.path.join(outdir, entry)
        if os.path.isdir(path):
            meta = _load(path)
            if meta is not None:
                found.append(meta)
    skipped, _ = _read_json(os.path.join(outdir, SKIPPED_FILE), [])
    if not found and not skipped:
        raise ValidationError(f"{outdir!r} holds no experiment results (run 'attnsvm run NAME --out {outdir}' first)")
    from attnsvm.experiments.base import registry

    order = {name: k for k, name in enumerate(registry())}
    return sorted(found, key=lambda e: (order.get(e["name"], len(order)), e["name"]))


def _fmt(value) -> str:
    if value is None:
        return "nan"
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    if value != value:
        return "nan"
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


def _e(text) -> str:
    return html.escape(str(text if text is not None else ""))


def _md(text) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def _verdict(c: dict) -> str:
    if c["passed"]:
        return "pass (listed finding no longer holds)" if c.get("finding_resolved") else "pass"
    return "FINDING" if c.get("finding") else "FAIL"


_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
          "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;"
          "vertical-align:top}.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:700}"
          ".finding{color:#9a6700;font-weight:700}.small{font-size:.85em;color:#555}img{max-width:100%;border:1px solid #eee}"
          "pre{background:#f6f8fa;padding:.6em;overflow:auto;white-space:pre-wrap}section{margin-bottom:2.5em}"
          ".banner{padding:.6em 1em;border-radius:6px;font-weight:600}.banner.ok{background:#dafbe1}"
          ".banner.bad{background:#ffebe9}")


def _check_rows_html(checks, with_experiment=False, exp_name=""):
    head = ("<tr>" + ("<th>experiment</th>" if with_experiment else "") +
            "<th>claim</th><th>source</th><th>kind</th><th>value</th><th>threshold</th><th>threshold from</th>"
            "<th>verdict</th><th>detail</th></tr>")
    rows = [head]
    for item in checks:
        e, c = item if with_experiment else (exp_name, item)
        v = _verdict(c)
        cls = "pass" if c["passed"] else ("finding" if c.get("finding") else "fail")
        detail = c.get("detail", "")
        if c.get("finding"):
            detail = f"finding: {c.get('finding_reason', '')}" + (f"; {detail}" if detail else "")
        rows.append("<tr>" + (f"<td><a href='#{_e(e)}'>{_e(e)}</a></td>" if with_experiment else "") +
                    f"<td>{_e(c['name'])}</td><td class='small'>{_e(c.get('source', ''))}</td><td>{_e(c.get('kind', ''))}</td>"
                    f"<td>{_fmt(c.get('value'))}</td><td>{_e(c.get('threshold', ''))}</td>"
                    f"<td class='small'>{_e(c.get('threshold_reason', ''))}</td><td class='{cls}'>{_e(v)}</td>"
                    f"<td class='small'>{_e(detail)}</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def _check_rows_md(checks, with_experiment=False, exp_name=""):
    out = [("| experiment " if with_experiment else "")
           + "| claim | source | kind | value | threshold | threshold from | verdict | detail |",
           ("|---" if with_experiment else "") + "|---|---|---|---|---|---|---|---|"]
    for item in checks:
        e, c = item if with_experiment else (exp_name, item)
        detail = c.get("detail", "")
        if c.get("finding"):
            detail = f"finding: {c.get('finding_reason', '')}" + (f"; {detail}" if detail else "")
        out.append(("| " + _md(e) + " " if with_experiment else "") +
                   f"| {_md(c['name'])} | {_md(c.get('source', ''))} | {_md(c.get('kind', ''))} | {_fmt(c.get('value'))} | "
                   f"{_md(c.get('threshold', ''))} | {_md(c.get('threshold_reason', ''))} | {_verdict(c)} | {_md(detail)} |")
    return out


def write_report(outdir: str) -> tuple[str, str]:
    """Write ``outdir/report.html`` and ``outdir/report.md``; returns their paths."""
    exps = collect(outdir)
    skipped, _ = _read_json(os.path.join(outdir, SKIPPED_FILE), [])
    skipped = [s for s in (skipped if isinstance(skipped, list) else []) if isinstance(s, dict)]
    all_checks = [(e["name"], c) for e in exps for c in e["checks"]]
    failed = [(n, c) for n, c in all_checks if not c["passed"] and not c.get("finding")]
    findings = [(n, c) for n, c in all_checks if not c["passed"] and c.get("finding")]
    resolved = [(n, c) for n, c in all_checks if c["passed"] and c.get("finding_resolved")]
    broken = [e for e in exps if e.get("problems")]
    n_pass = sum(1 for _, c in all_checks if c["passed"])
    env = next((e.get("environment") for e in exps if e.get("environment")), {}) or {}
    total_wall = sum(float(e.get("wall_seconds", 0.0) or 0.0) for e in exps)
    ok = not failed and not broken
    verdict = (f"{len(all_checks)} checks, {len(failed) + len(findings)} failed, {len(skipped)} experiments "
               f"skipped; {n_pass} passed, {len(failed)} unexpected failure(s), {len(findings)} listed finding(s) "
               f"fail as documented; {len(exps)} experiment(s), {total_wall:.1f} s of wall time.")
    headline = "FAILURES" if not ok else ("No unexpected failures" if findings else "All checks pass")

    h = [f"<!doctype html><html><head><meta charset='utf-8'><title>attnsvm report</title><style>{_STYLE}</style></head><body>",
         "<h1>attnsvm reproduction report</h1>",
         f"<p class='banner {'ok' if ok else 'bad'}' id='verdict'>{headline}: {_e(verdict)}</p>",
         "<p class='nav'>Jump to: " + " &middot; ".join(
             f"<a href='#{a}'>{t}</a>" for a, t, show in (
                 ("failed", "failed checks", failed), ("findings", "findings", findings), ("skipped", "skipped", skipped),
                 ("summary", "summary", True), ("deviations", "deviations", True), ("environment", "environment", True))
             if show) + "</p>"]
    md = ["# attnsvm reproduction report", "", f"**{headline}**: {verdict}", ""]

    if failed:
        h.append("<h2 id='failed'>Failed checks</h2>" + _check_rows_html(failed, True))
        md += ["## Failed checks", ""] + _check_rows_md(failed, True) + [""]
    if broken:
        h.append("<h2 id='unreadable'>Unreadable results</h2><ul>")
        md += ["## Unreadable results", ""]
        for e in broken:
            for p in e["problems"]:
                h.append(f"<li><a href='#{_e(e['name'])}'>{_e(e['name'])}</a>: {_e(p)}</li>")
                md.append(f"- {e['name']}: {p}")
        h.append("</ul>")
        md.append("")
    if findings:
        h.append("<h2 id='findings'>Findings</h2><p>Spec targets that careful measurement contradicts. They stay failing "
                 "checks (listed in <code>findings.txt</code> with their reason) and do not change the exit status.</p>"
                 + _check_rows_html(findings, True))
        md += ["## Findings", "", "Spec targets that careful measurement contradicts; they stay failing checks and do not "
               "change the exit status.", ""] + _check_rows_md(findings, True) + [""]
    if resolved:
        h.append("<h2 id='resolved'>Listed findings that now pass</h2><p>Remove them from findings.txt.</p>"
                 + _check_rows_html(resolved, True))
        md += ["## Listed findings that now pass", ""] + _check_rows_md(resolved, True) + [""]
    if skipped:
        h.append("<h2 id='skipped'>Skipped experiments</h2><table><tr><th>experiment</th><th>reason</th><th>to enable</th></tr>")
        md += ["## Skipped experiments", "", "| experiment | reason | to enable |", "|---|---|---|"]
        for s in skipped:
            h.append(f"<tr><td>{_e(s.get('name'))}</td><td>{_e(s.get('reason'))}</td><td>{_e(s.get('hint'))}</td></tr>")
            md.append(f"| {_md(s.get('name'))} | {_md(s.get('reason'))} | {_md(s.get('hint'))} |")
        h.append("</table>")
        md.append("")

    h.append("<h2 id='summary'>Summary</h2><table><tr><th>experiment</th><th>checks passed</th><th>preset</th><th>runs</th>"
             "<th>wall time (s)</th><th>tasks (computed / resumed / failed)</th></tr>")
    md += ["## Summary", "", "| experiment | checks passed | preset | runs | wall time (s) | tasks computed / resumed / failed |",
           "|---|---|---|---|---|---|"]
    for e in exps:
        cs = e["checks"]
        npass = sum(c["passed"] for c in cs)
        bad = any(not c["passed"] and not c.get("finding") for c in cs) or e.get("problems")
        if not cs:
            cell, cls = "no checks", "fail" if e.get("problems") else "small"
        else:
            cell, cls = f"{npass}/{len(cs)}", "fail" if bad else ("finding" if npass < len(cs) else "pass")
        tasks = f"{e.get('computed', '-')} / {e.get('resumed', '-')} / {e.get('failed', '-')}"
        h.append(f"<tr><td><a href='#{_e(e['name'])}'>{_e(e['name'])}</a></td><td class='{cls}'>{_e(cell)}</td>"
                 f"<td>{_e(e.get('preset', ''))}</td><td>{_e(e.get('runs', '-'))}</td>"
                 f"<td>{float(e.get('wall_seconds', 0) or 0):.1f}</td><td>{_e(tasks)}</td></tr>")
        md.append(f"| {e['name']} | {cell} | {e.get('preset', '')} | {e.get('runs', '-')} | "
                  f"{float(e.get('wall_seconds', 0) or 0):.1f} | {tasks} |")
    for s in skipped:
        h.append(f"<tr><td>{_e(s.get('name'))}</td><td class='small'>skipped</td><td></td><td></td><td></td><td></td></tr>")
        md.append(f"| {_md(s.get('name'))} | skipped | | | | |")
    h.append("</table>")
    md.append("")

    devs = [(e["name"], d) for e in exps for d in (e.get("deviations") or []) if isinstance(d, dict)]
    h.append("<h2 id='deviations'>Deviations from the specs' protocols</h2>")
    md += ["## Deviations from the specs' protocols", ""]
    if devs:
        h.append("<table><tr><th>experiment</th><th>the spec</th><th>this run</th><th>why</th></tr>")
        md += ["| experiment | the spec | this run | why |", "|---|---|---|---|"]
        for n, d in devs:
            h.append(f"<tr><td><a href='#{_e(n)}'>{_e(n)}</a></td><td>{_e(d.get('spec'))}</td><td>{_e(d.get('here'))}</td>"
                     f"<td>{_e(d.get('reason'))}</td></tr>")
            md.append(f"| {_md(n)} | {_md(d.get('spec'))} | {_md(d.get('here'))} | {_md(d.get('reason'))} |")
        h.append("</table>")
    else:
        h.append("<p>None recorded.</p>")
        md.append("None recorded.")
    md.append("")

    for e in exps:
        name = e["name"]
        h.append(f"<section id='{_e(name)}'><h2>{_e(name)}: {_e(e.get('title', ''))}</h2>")
        md += [f"## {name}: {e.get('title', '')}", ""]
        if e.get("paper"):
            h.append(f"<p><i>{_e(e['paper'])}</i></p>")
            md += [f"*{e['paper']}*", ""]
        for p in e.get("problems", []):
            h.append(f"<p class='fail'>{_e(p)}</p>")
            md += [f"**{p}**", ""]
        if e["checks"]:
            h.append(_check_rows_html(e["checks"], exp_name=name))
            md += _check_rows_md(e["checks"], exp_name=name) + [""]
        else:
            h.append("<p class='small'>no checks</p>")
            md += ["no checks", ""]
        for fig in e.get("figures", []) or []:
            if str(fig).endswith(".png"):
                src = f"{e['dir']}/{fig}"
                h.append(f"<p><img src='{_e(src)}' alt='{_e(fig)}'></p>")
                md += [f"![{fig}]({src})", ""]
        if e.get("explain"):
            h.append(f"<h3>Notes</h3><pre>{_e(e['explain'])}</pre>")
            md += ["### Notes", "", str(e["explain"]), ""]
        prov = e.get("provenance") or []
        if prov:
            h.append("<details><summary>provenance: what produced these numbers "
                     f"({len(prov)} shard(s))</summary><table><tr><th>task</th><th>config hash</th><th>code version</th>"
                     "<th>seeds</th><th>written</th></tr>")
            for p in prov:
                h.append(f"<tr><td>{_e(p.get('task'))}</td><td>{_e(p.get('config_hash'))}</td><td>{_e(p.get('version'))}</td>"
                         f"<td class='small'>{_e(p.get('seeds'))}</td><td>{_e(p.get('written'))}</td></tr>")
            h.append("</table></details>")
        h.append(f"<details><summary>config (hash {_e(e.get('config_hash', ''))}, preset {_e(e.get('preset', ''))})</summary>"
                 f"<pre>{_e(e.get('config_text', ''))}</pre></details>")
        h.append(f"<p class='small'>finished {_e(e.get('finished', ''))}, {float(e.get('wall_seconds', 0) or 0):.1f} s, "
                 f"workers: {_e(e.get('workers'))}"
                 f"{', scheduler ' + _e(e['scheduler']) if e.get('scheduler') else ''}</p></section>")
        md += ["```yaml", str(e.get("config_text", "")).rstrip(), "```", ""]

    pk = env.get("packages", {}) or {}
    h.append("<h2 id='environment'>Environment</h2><table>")
    h.append(f"<tr><td>python</td><td>{_e(env.get('python'))}</td></tr><tr><td>platform</td><td>{_e(env.get('platform'))}</td></tr>"
             f"<tr><td>cpus</td><td>{_e(env.get('cpus'))}</td></tr>")
    md += ["## Environment", "", f"- python {env.get('python')}, {env.get('platform')}, {env.get('cpus')} cpus"]
    for k, v in pk.items():
        h.append(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>")
        md.append(f"- {k} {v}")
    h.append("</table><p>Seeds are part of each config above; every run of a task is seeded by its run index.</p></body></html>")
    html_path, md_path = os.path.join(outdir, "report.html"), os.path.join(outdir, "report.md")
    for path, text in ((html_path, "\n".join(h)), (md_path, "\n".join(md) + "\n")):
        data = text.encode("utf-8")
        try:
            atomic_write(path, lambda fh: fh.write(data))
        except OSError as exc:
            raise ValidationError(f"cannot write the report to {path!r}: {oserror_text(exc, path)}") from None
    return html_path, md_path
