"""Claims as data: where each check's claim stands in the papers, and the docs page that lists every check.

A check's ``source`` names what a reader has: the paper (arXiv id and title) and the place of the
claim in it. The spec lines the claim was transcribed from are internal; they live in the check's
``spec_ref`` and are not shown to users. :func:`paper_source` maps an internal reference (a spec
file's section, item or fact) to the paper's place through :data:`PLACES`, an ordered table of
patterns; :class:`~attnsvm.experiments.checks.Check` applies it when it is built, so every check of
every experiment gets a paper place or fails to build.

The papers' figure and theorem numbers differ between versions and were not all verifiable (see the
spec's provenance notes), so places are named by content, with the number where it is confirmed.

:func:`claims_page` writes the docs page "Claims and how they are checked" from the checks of a
results folder (one row per check: claim, paper place, threshold and why, preset sizes, power);
``python -m attnsvm.experiments.claims QUICK_DIR FULL_DIR > docs/guide/claims.md`` regenerates it (a quick run
and a full run: without the full run the page loses the full runs' power and the full-only rows).
"""

from __future__ import annotations

import json
import os
import re
import sys

__all__ = ["PAPERS", "PLACES", "SIZE_RULES", "is_internal", "paper_source", "preset_sizes", "full_power", "claims_page",
           "claim_cell", "main"]

from attnsvm.experiments.places import PAPERS, PLACES, is_internal, paper_source  # noqa: F401  (re-exported)


# ------------------------------------------------------------------ the docs page
def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _sizes(meta: dict) -> str:
    runs = meta.get("runs")
    return f"{meta.get('preset', '?')} preset: {runs} runs/instances" if runs is not None else "?"


#: experiment -> [(pattern on the check name, config fields whose product of sizes is the check's run count)]:
#: how a statistical check's run count follows the preset (a list field counts its length). The first match
#: wins; a check without a rule has no power at the other preset here (its count does not scale with one set
#: of fields: pooled over a grid that the presets choose differently, or over units the presets share).
SIZE_RULES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "tf-convergence-types": [(r"at d=\d+", ("runs",))],
    "tf-feasibility": [(r"at d=\d+", ("instances",))],
    "tf-local-convergence": [(r".", ("runs",))],
    "tf-seq-causal": [(r".", ("runs",))],
    "tf-lambda-head": [(r"at lambda=", ("runs",))],
    "tf-multi-token": [(r"^d=\d+:", ("accepted",)), (r"^runs in which|^W_fin \+ R W_svm fits", ("accepted", "ds"))],
    "lm-margins": [(r"^C2 \(cycle language\)", ("cycle_runs",)), (r"^C2", ("runs",))],
    "real-digits": [(r"random directions|per run$", ("seeds",))],
    "real-minilm-embeddings": [(r"random directions", ("seeds",))],
    "real-minilm-heads": [(r".", ("layers", "heads"))],
}


def _size(config, fields) -> int:
    out = 1
    for f in fields:
        v = getattr(config, f)
        out *= len(v) if isinstance(v, (list, tuple, dict)) else int(v)
    return out


def preset_sizes(name: str) -> str:
    """The quick and full presets' values of experiment ``name``'s preset fields (those its quick preset changes,
    and those its checks' run counts follow), e.g. ``"quick: runs = 70, ...; full: runs = 132, ..."``; "" if unknown."""
    from attnsvm.experiments import build_config, registry

    exp = registry().get(name)
    if exp is None:
        return ""
    quick, full = build_config(exp, quick=True), build_config(exp, quick=False)
    keys = [k for k in exp.quick if k not in ("chunk", "examples", "record_every")]
    keys += [f for _, fs in SIZE_RULES.get(name, []) for f in fs if f not in keys]
    keys = list(dict.fromkeys(keys))

    def fmt(cfg):
        return ", ".join(f"{k} = {getattr(cfg, k)}" for k in keys)
    return f"quick: {fmt(quick)}; full: {fmt(full)}" if keys else "quick and full presets are the same"


def full_power(name: str, check: dict) -> tuple[float | None, str]:
    """The power of a quick-preset check (dict of checks.json) at the full preset's run count, computed from its
    ``power_inputs`` without running the full preset: ``(power, what)`` with ``what`` the full count, or
    ``(None, why not)``."""
    from attnsvm.experiments import build_config, registry
    from attnsvm.experiments.power import power_from

    inputs = check.get("power_inputs")
    if not inputs:
        return None, "no power inputs"
    exp = registry().get(name)
    rule = next((fs for pat, fs in SIZE_RULES.get(name, []) if re.search(pat, check["name"])), None)
    if exp is None or rule is None:
        return None, "its run count does not follow one preset field"
    q, f = _size(build_config(exp, quick=True), rule), _size(build_config(exp, quick=False), rule)
    scale = f / q
    n = next((inputs[k] for k in ("n", "n1", "runs") if k in inputs), None)
    power = power_from(inputs, scale)
    return power, (f"n = {max(1, int(round(n * scale)))}" if n is not None else f"x{scale:g}")


def claim_cell(check: dict) -> str:
    """The "claim is" cell of a check dict: its ``claim_is`` in words (:data:`~attnsvm.experiments.checks.CLAIM_IS`)
    and, for a passing claim tested as the alternative, the p-value of its test; "not recorded" for a checks.json
    written before ``claim_is`` existed."""
    from attnsvm.experiments.checks import CLAIM_IS

    claim = check.get("claim_is")
    if claim not in CLAIM_IS:
        return "not recorded"
    out = CLAIM_IS[claim]
    if claim == "alternative" and check.get("verdict") == "pass":
        p = check.get("p_value")
        out += f"; p = {p:.3g}" if isinstance(p, (int, float)) and p == p else "; p not recorded"
    return out


#: the "power at this preset" cell of a check that only the full preset has
FULL_ONLY = "— (full preset only)"


def claims_page(results_dir: str, full_dir: str | None = None) -> str:
    """The markdown page "Claims and how they are checked" from the checks of a results folder.

    ``results_dir``: a folder written by ``attnsvm reproduce`` (``NAME/checks.json`` and
    ``NAME/meta.json`` per experiment). One row per check: the claim in words (the check's
    name), the paper's place (``source``), threshold and why, the preset sizes, power and
    alternative. ``full_dir``: optional results of the full preset, for its sizes and power; its checks that
    the first folder lacks (cells only the full preset runs) get rows of their own, with the full run's verdict
    and power.
    """
    names = sorted(n for n in os.listdir(results_dir) if os.path.isfile(os.path.join(results_dir, n, "checks.json")))
    lines = ["# Claims and how they are checked", "",
             "Every check of `attnsvm reproduce`, one row each: the claim in words, where it stands in the paper, the "
             "threshold and where it comes from, the verdict, the sizes of both presets, and the power of statistical "
             "checks against their stated alternative at the preset the row was generated from and at the full "
             "preset (computed from the same power function at the full preset's run count, without running it; "
             "power is sawtooth in the run count, so each figure holds at its own count). A pass of a claim tested "
             "as the null with power below 0.8 is *inconclusive*, and so is a fail of a claim tested as the "
             "alternative (see {doc}`experiments`); the last column says which of the two rules a check follows "
             "(or that it has no sampling test), with the p-value of a passing claim tested as the alternative. "
             "Generated by `python -m attnsvm.experiments.claims RESULTS_DIR` "
             "from a `reproduce --quick` run (`... RESULTS_DIR FULL_DIR` with a full run adds the full run's power and "
             "the rows of checks only the full preset has); `tests/test_reproduce.py` checks that every check's "
             "source has its row.",
             ""]
    for name in names:
        with open(os.path.join(results_dir, name, "checks.json"), encoding="utf-8") as fh:
            checks = json.load(fh)
        meta = {}
        mpath = os.path.join(results_dir, name, "meta.json")
        if os.path.isfile(mpath):
            with open(mpath, encoding="utf-8") as fh:
                meta = json.load(fh)
        full = {}
        if full_dir and os.path.isfile(os.path.join(full_dir, name, "checks.json")):
            with open(os.path.join(full_dir, name, "checks.json"), encoding="utf-8") as fh:
                full = {c["name"]: c for c in json.load(fh)}
        sizes = preset_sizes(name)
        lines += [f"## {name}", "", f"{_cell(meta.get('title', ''))} ({_sizes(meta)})", ""]
        lines += [f"Preset sizes: {_cell(sizes)}.", ""] if sizes else []
        lines += ["| claim | paper and place | threshold and why | kind | verdict | power at this preset (alternative) "
                  "| power at the full preset | claim is |", "|---|---|---|---|---|---|---|---|"]
        for c in checks:
            power = c.get("power")
            pw = "—" if power is None else f"{power:.3f}"
            if c.get("alternative"):
                pw += f" ({c['alternative']})"
            if c["name"] in full and full[c["name"]].get("power") is not None:
                fp = f"{full[c['name']]['power']:.3f} (measured run)"
            elif power is not None and meta.get("preset") == "quick":
                p_full, what = full_power(name, c)
                fp = f"{p_full:.3f} ({what}, computed)" if p_full is not None else f"— ({what})"
            else:
                fp = "—"
            lines.append(f"| {_cell(c['name'])} | {_cell(c.get('source', ''))} | {_cell(c.get('threshold', ''))}: "
                         f"{_cell(c.get('threshold_reason', ''))} | {_cell(c.get('kind', ''))} | "
                         f"{_cell(c.get('verdict', ''))} | {_cell(pw)} | {_cell(fp)} | {_cell(claim_cell(c))} |")
        # checks the full preset has and this run has not (cells the quick preset does not run)
        names_here = {c["name"] for c in checks}
        for c in (c for n, c in full.items() if n not in names_here):
            power = c.get("power")
            fp = "—" if power is None else f"{power:.3f} (measured run)"
            if c.get("alternative"):
                fp += f" ({c['alternative']})"
            lines.append(f"| {_cell(c['name'])} | {_cell(c.get('source', ''))} | {_cell(c.get('threshold', ''))}: "
                         f"{_cell(c.get('threshold_reason', ''))} | {_cell(c.get('kind', ''))} | "
                         f"full preset: {_cell(c.get('verdict', ''))} | {FULL_ONLY} | {_cell(fp)} | "
                         f"{_cell(claim_cell(c))} |")
        lines.append("")
    from attnsvm.experiments.mutations import mutations_section

    return "\n".join(lines) + "\n" + mutations_section()


def main(argv=None) -> int:
    """``python -m attnsvm.experiments.claims RESULTS_DIR [FULL_DIR]``: print the claims page."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or not os.path.isdir(args[0]):
        print("usage: python -m attnsvm.experiments.claims RESULTS_DIR [FULL_DIR]", file=sys.stderr)
        return 2
    sys.stdout.write(claims_page(args[0], args[1] if len(args) > 1 else None) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
