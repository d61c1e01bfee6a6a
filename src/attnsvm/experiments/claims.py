"""Claims as data: where each check's claim stands in the papers, and the docs page that lists every check.

A check's ``source`` names what a reader has: the paper (arXiv id and title) and the place of the
claim in it. The spec lines the claim was transcribed from are internal; they live in the check's
``spec_ref`` and are not shown to users. :func:`paper_source` maps an internal reference (a spec
file's section, item or fact) to the paper's place through :data:`PLACES`, an ordered table of
patterns; :class:`~attnsvm.experiments.checks.Check` applies it when it is built, so every check of
every experiment gets a paper place or fails to build.

The papers' figure and theorem numbers differ between versions and were not all verifiable (see the
spec's provenance notes), so places are named by content, with the number where it is confirmed.

:func:`stored_claims_page` writes the docs page "Claims and how they are checked" from the stored quick-preset
results tables (``tests/data/quick``) and ``planning.json``, re-judging them with each experiment's checks (one row
per check: claim, paper place, threshold and why, verdict, power at the quick preset and planned at the full
preset, ``claim_is``, the mutations it catches; "cannot fail at this preset" where the full preset's power is below
0.8); ``python scripts/claims_page.py`` regenerates docs/guide/claims.md in one command. :func:`claims_page` makes
the same kind of page from a results folder of ``attnsvm reproduce`` (and optionally a full run's).
"""

from __future__ import annotations

import json
import os
import re
import sys

__all__ = ["PAPERS", "PLACES", "SIZE_RULES", "Groups", "is_internal", "paper_source", "preset_sizes", "full_power", "claims_page",
           "claim_cell", "main", "planned_full_power", "cannot_fail", "stored_checks", "stored_claims_page",
           "CANNOT_FAIL", "COMMAND"]

from attnsvm.experiments.places import PAPERS, PLACES, is_internal, paper_source  # noqa: F401  (re-exported)


# ------------------------------------------------------------------ the docs page
def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _sizes(meta: dict) -> str:
    runs = meta.get("runs")
    return f"{meta.get('preset', '?')} preset: {runs} runs/instances" if runs is not None else "?"


#: a size rule: the check's units (images of a split) are no fewer at the full preset, whose every size field is
#: larger; the power is stated at the quick count, a lower bound for a test whose power grows with its count
AT_LEAST = "at least the quick count"


def _grid(field: str, at_least: int, per: str):
    """A size rule: ``per`` times the number of values of the list ``field`` that are >= ``at_least`` (a check pooled
    over the cells of a grid, e.g. every d >= 6)."""
    def size(config) -> int:
        return int(getattr(config, per)) * sum(1 for v in getattr(config, field) if v >= at_least)
    return size


def _gen_svm_runs(config) -> int:
    """lm-cosine's runs with a usable Gen-SVM comparator (:func:`attnsvm.experiments.lm.cosine.gen_svm_runs`)."""
    from attnsvm.experiments.lm.cosine import gen_svm_runs

    return gen_svm_runs(config)


class Groups:
    """A size rule of a check decided in every group (:func:`~attnsvm.experiments.lm.common.grouped_ordering_check`)
    whose groups differ between the presets: ``function`` (``"module:name"``, imported when used) maps a config to
    ``{label: (runs, effect)}``, the preset's own groups (``effect`` None: the check's one stated effect). The full
    preset's power is then planned group by group (:func:`full_power`)."""

    def __init__(self, function: str):
        self.function = function

    def __call__(self, config) -> dict:
        import importlib

        module, name = self.function.split(":")
        return getattr(importlib.import_module(module), name)(config)


#: experiment -> [(pattern on the check name, config fields whose product of sizes is the check's run count, a
#: function of the config that returns the count, or :class:`Groups`)]: how a statistical check's run count follows
#: the preset (a list field counts its length). The first match wins; a check without a rule has no power at the
#: other preset here (its count does not scale with one set of fields).
SIZE_RULES: dict[str, list[tuple[str, object]]] = {
    "tf-convergence-types": [(r"at d=\d+", ("runs",)), (r"over classified runs", ("runs", "ds"))],
    "tf-feasibility": [(r"at d=\d+", ("instances",)), (r"for d >= 6", _grid("ds", 6, "instances"))],
    "tf-lambda-head": [(r"increases along the lambda grid",
                        Groups("attnsvm.experiments.tf.lambda_head:preset_trend_groups")), (r"at lambda=", ("runs",))],
    "tf-svm-rank": [(r"d >= 4", _grid("ds", 4, "instances")), (r"d >= 10", _grid("ds", 10, "instances")),
                    (r"^research:", ("instances",))],
    "lm-cosine": [(r"cycle language", ("cycle_runs",)),
                  (r"^C1: the similarity to the soft-margin SVM rises", Groups("attnsvm.experiments.lm.cosine:rise_groups")),
                  (r"^C1: W_fin \+ R W_svm|^C1: the Gen-SVM direction", _gen_svm_runs),
                  (r"all configurations|same runs", ("runs", "configs"))],
    "tf-local-convergence": [(r".", ("runs",))],
    "tf-seq-causal": [(r".", ("runs",))],
    "tf-regpath-w": [(r".", ("instances",))],
    "tf-regpath-kq": [(r".", ("instances",))],
    "mm-regpath-nonlinear": [(r".", ("instances",))],
    "tf-multi-token": [(r"^d=\d+:", ("accepted",)), (r"^runs in which|^W_fin \+ R W_svm fits", ("accepted", "ds"))],
    "lm-margins": [(r"^C2 \(cycle language\)", ("cycle_runs",)), (r"^C2", ("runs",))],
    "lm-near-ties": [(r".", ("runs",))],
    "real-digits": [(r"random directions|per run$", ("seeds",)), (r"per (test|training) image", AT_LEAST)],
    "real-minilm-embeddings": [(r"random directions", ("seeds",)), (r"per test sentence", ("n_test", "seeds"))],
    "real-minilm-heads": [(r".", ("layers", "heads"))],
}


def _size(config, fields) -> int:
    if callable(fields):
        return int(fields(config))
    out = 1
    for f in fields:
        if f == "configs":  # lm-cosine: the (m, n, d) settings it varies
            from attnsvm.experiments.lm.cosine import _c1_configs

            out *= len(_c1_configs(config))
            continue
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
    keys += [f for _, fs in SIZE_RULES.get(name, []) if isinstance(fs, tuple) for f in fs
             if f not in keys and f != "configs"]
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
    rule = next(((fs,) for pat, fs in SIZE_RULES.get(name, []) if re.search(pat, check["name"])), None)
    if exp is None or rule is None:
        return None, "its run count does not follow one preset field"
    rule = rule[0]
    if isinstance(rule, Groups):
        return _groups_power(check, rule(build_config(exp, quick=False)))
    if rule == AT_LEAST:
        n = next((inputs[k] for k in ("n", "n1", "runs") if k in inputs), None)
        return power_from(inputs), f"n >= {n}, the quick count: the full preset's sizes are all larger"
    q, f = _size(build_config(exp, quick=True), rule), _size(build_config(exp, quick=False), rule)
    scale = f / q
    part = inputs["parts"][0] if inputs.get("fn") == "product" and inputs.get("parts") else inputs
    n = next((part[k] for k in ("n", "n1", "runs") if k in part), None)
    power = power_from(inputs, scale)
    return power, (f"n = {max(1, int(round(n * scale)))}" if n is not None else f"x{scale:g}")


def _groups_power(check: dict, groups: dict) -> tuple[float | None, str]:
    """The power at another preset of a check decided in every group (``power_inputs``: ``fn="product"`` of
    ``fn="ordering"`` parts with their ``label``), planned at that preset's own ``groups`` (``{label: (runs,
    effect)}``, :class:`Groups`): the product over its groups of
    :func:`~attnsvm.experiments.power.ordering_power` at each group's runs and stated effect (None: the check's
    one effect), with each group's sigma: its own planning sigma (``planning.json``'s ``sigmas``), or the larger of
    it and the quick run's own spread where the quick preset judged that group too; a group without its own
    planning sigma that the quick preset judged takes the sigma its quick check used; a group measured nowhere
    takes the largest sigma any quick group used. ``(power, what)``, ``what`` saying how many groups took which
    sigma; ``(None, why)`` where a part has no label or a group no effect."""
    from attnsvm.experiments.planning import lookup
    from attnsvm.experiments.power import power_from

    inputs = check["power_inputs"]
    parts = inputs.get("parts") if inputs.get("fn") == "product" else None
    if not parts or any(p.get("fn") != "ordering" or "label" not in p for p in parts):
        return None, "its groups differ between the presets and its power inputs do not name them"
    quick = {p["label"]: p for p in parts}
    effects = {p["effect"] for p in parts}
    entry = lookup(check["name"]) or {}
    own = entry.get("sigmas", {})
    largest = max(float(p["sigma"]) for p in parts)
    plan, sources = [], {"own": 0, "quick": 0, "largest": 0}
    for label, (runs, effect) in groups.items():
        if effect is None and len(effects) != 1:
            return None, f"group {label} of the full preset has no stated effect"
        if label in own:
            sigma = float(own[label])
            judged = quick.get(label, {}).get("sigma_judged")
            sigma = max(sigma, float(judged)) if judged is not None else sigma
            sources["own"] += 1
        elif label in quick:
            sigma = float(quick[label]["sigma"])
            sources["quick"] += 1
        else:
            sigma = largest
            sources["largest"] += 1
        plan.append(dict(fn="ordering", n=int(runs), effect=float(next(iter(effects)) if effect is None else effect),
                         sigma=sigma, alpha=parts[0]["alpha"], label=label))
    if not plan:
        return None, "no groups at the full preset"
    ns = sorted({p["n"] for p in plan})
    said = [f"{k} {w}" for k, w in ((sources["own"], "with their own planning sigma"),
                                    (sources["quick"], "with their quick check's sigma"),
                                    (sources["largest"], f"measured nowhere, with the largest sigma of the quick "
                                                         f"groups {largest:.4g}")) if k]
    what = (f"the full preset's {len(plan)} groups, n = {'/'.join(str(n) for n in ns)} each; "
            + ", ".join(said))
    return power_from(dict(fn="product", parts=plan)), what


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


#: the words a row uses for a statistical check that cannot fail at the full preset (power below 0.8 there)
CANNOT_FAIL = "cannot fail at this preset"
#: the command that regenerates docs/guide/claims.md (from the repository root)
COMMAND = "python scripts/claims_page.py"


def planned_full_power(name: str, check: dict) -> tuple[float | None, str]:
    """The power of a check at the full preset, planned from its stored power inputs (``Check.power_inputs``: the
    planning sigma of ``planning.json``, or the larger of it and the quick run's own spread where the check plans
    that way) at the full preset's run count (:data:`SIZE_RULES`); ``(power, what)`` or ``(None, why not)``.

    An experiment whose checks' counts follow no preset field keeps its quick count when its quick and full presets
    have the same sizes (then the quick power is the full one)."""
    p, what = full_power(name, check)
    if p is not None:
        return p, what
    inputs = check.get("power_inputs")
    if inputs and not preset_differs(name):
        from attnsvm.experiments.power import power_from

        return power_from(inputs), "same sizes at both presets"
    return None, what


def preset_differs(name: str) -> bool:
    """Whether experiment ``name``'s quick preset changes any config field (False: quick and full are one size)."""
    from attnsvm.experiments import build_config, registry

    exp = registry().get(name)
    if exp is None:
        return True
    q, f = build_config(exp, quick=True), build_config(exp, quick=False)
    return q.model_dump() != f.model_dump()


def cannot_fail(check: dict, power: float | None, what: str) -> str:
    """The "cannot fail at this preset" note of a statistical check whose full-preset power is below 0.8 (or
    unknown), with why; "" when the check can fail there (or is not statistical)."""
    from attnsvm.experiments.power import POWER_GOAL

    claim = check.get("claim_is")
    if claim not in ("null", "alternative"):
        return ""
    if power is not None and power >= POWER_GOAL:
        return ""
    rule = ("a pass would be inconclusive, and the check never fails below its bar" if claim == "null" else
            "a fail would be inconclusive")
    if power is None:
        why = f"no power at the full preset ({what})"
    else:
        why = f"power {power:.3f} < {POWER_GOAL:g} at the full preset ({what}) against {check.get('alternative') or '?'}"
    return f"{CANNOT_FAIL}: {why}; {rule}"


def _catchers(name: str) -> dict[str, list[str]]:
    """check-name start -> the mutations of experiment ``name`` that the check must catch
    (:data:`attnsvm.experiments.mutations.MUTATIONS`, the list ``tests/test_mutations.py`` runs)."""
    from attnsvm.experiments.mutations import MUTATIONS

    out: dict[str, list[str]] = {}
    for m in MUTATIONS:
        if m.experiment == name:
            for start in m.caught_by:
                out.setdefault(start, []).append(m.name)
    return out


def stored_checks(tables_dir: str) -> dict[str, list[dict]]:
    """``{experiment: [check dict, ...]}``: every registered experiment's quick-preset checks, re-judged from its
    stored results table ``tables_dir/NAME.parquet`` with the experiment's own ``checks`` and the current
    ``planning.json`` (no experiment runs). An experiment without a stored table is left out."""
    import pandas as pd

    from attnsvm.experiments import build_config, registry
    from attnsvm.experiments.checks import mark_findings

    out = {}
    for name, exp in sorted(registry().items()):
        path = os.path.join(tables_dir, f"{name}.parquet")
        if os.path.isfile(path):
            checks = [c.to_dict() for c in exp.checks(build_config(exp, quick=True), pd.read_parquet(path))]
            out[name] = mark_findings(name, checks, "quick")
    return out


def stored_claims_page(tables_dir: str) -> tuple[str, list[tuple[str, str, str]]]:
    """The claims page generated from stored quick tables (:func:`stored_checks`) and ``planning.json``, and the list
    ``[(experiment, check name, why), ...]`` of the statistical checks that cannot fail at the full preset.

    One row per check: the claim, its paper place, threshold and why, kind, the verdict on the stored quick table,
    the power at the quick preset, the power at the full preset planned from the check's power inputs at the full
    preset's run count (:func:`planned_full_power`; "cannot fail at this preset" and why where it is below 0.8),
    the rule the verdict follows (``claim_is``, with the p-value of a passing claim tested as the alternative) and
    the plausible-bug mutations the check must catch. The mutations' section follows (:mod:`~attnsvm.experiments.
    mutations`, the list the test runs)."""
    from attnsvm.experiments import registry
    from attnsvm.experiments.mutations import mutations_section

    all_checks = stored_checks(tables_dir)
    missing = sorted(n for n, e in registry().items() if n not in all_checks and not e.missing())
    rows, weak = {}, []
    for name, checks in all_checks.items():
        catch = _catchers(name)
        lines = []
        for c in checks:
            power = c.get("power")
            pw = "—" if power is None else f"{power:.3f}"
            if c.get("alternative"):
                pw += f" ({c['alternative']})"
            fp = "—"
            note = ""
            if c.get("claim_is") in ("null", "alternative"):
                p_full, what = planned_full_power(name, c)
                fp = f"{p_full:.3f} ({what}, planned)" if p_full is not None else f"— ({what})"
                note = cannot_fail(c, p_full, what)
                if note:
                    weak.append((name, c["name"], note))
                    fp += f"; {note}"
            mut = sorted({m for start, ms in catch.items() if c["name"].startswith(start) for m in ms})
            lines.append(f"| {_cell(c['name'])} | {_cell(c.get('source', ''))} | {_cell(c.get('threshold', ''))}: "
                         f"{_cell(c.get('threshold_reason', ''))} | {_cell(c.get('kind', ''))} | "
                         f"{_cell(c.get('verdict', ''))} | {_cell(pw)} | {_cell(fp)} | {_cell(claim_cell(c))} | "
                         f"{_cell(', '.join(mut) or '—')} |")
        rows[name] = lines
    head = ["# Claims and how they are checked", "",
            f"Generated by `{COMMAND}` (from the repository root; it rewrites this page): every experiment's checks "
            f"re-judged with its own code on its stored quick-preset results table (`tests/data/quick/NAME.parquet`, "
            "see the README there for the command that made them) and the planning sigmas of "
            "`src/attnsvm/experiments/planning.json`; no experiment runs. Do not edit it by hand.", "",
            "One row per check: the claim in words, where it stands in the paper, the threshold and where it comes "
            "from, the verdict on the stored quick table, the power of a statistical check against its stated "
            "alternative at the quick preset and at the full preset, which rule the verdict follows (with the p-value "
            "of a passing claim tested as the alternative) and the plausible-bug mutations the check must catch. "
            "The full preset's power is planned, not measured: the check's own power function and power inputs (the "
            "planning sigma, or the larger of it and the quick run's own spread where the check plans so) at the full "
            "preset's run count (power is sawtooth in the run count, so each figure holds at its own count); a check "
            "decided in every group whose groups differ between the presets is planned at the full preset's own "
            "groups, each with its own planning sigma where one was measured and else the largest sigma of the quick "
            "groups (the cell says which). A pass "
            "of a claim tested as the null with power below 0.8 is *inconclusive*, and so is a fail of a claim tested "
            "as the alternative (see {doc}`experiments`). Checks that only the full preset has (cells the quick "
            "preset does not run) have no row here.", ""]
    head += [f"## Checks that {CANNOT_FAIL}", "",
             f"{len(weak)} statistical checks have a planned power below 0.8 at the full preset (or none): there a "
             "pass of a claim tested as the null, or a fail of a claim tested as the alternative, is inconclusive, so "
             "the check cannot fail." + (" Each, with why:" if weak else ""), ""]
    head += [f"- {_cell(n)}: {_cell(c)} ({_cell(w)})" for n, c, w in weak] + [""]
    if missing:
        head += [f"Experiments without a stored quick table (no rows): {', '.join(missing)}.", ""]
    lines = list(head)
    for name in rows:
        exp = registry()[name]
        sizes = preset_sizes(name)
        lines += [f"## {name}", "", f"{_cell(exp.title)}", ""]
        lines += [f"Preset sizes: {_cell(sizes)}.", ""] if sizes else []
        lines += ["| claim | paper and place | threshold and why | kind | verdict (quick) | power at the quick preset "
                  "(alternative) | power at the full preset (planned) | claim is | mutations it catches |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += rows[name] + [""]
    return "\n".join(lines) + "\n" + mutations_section(), weak


def main(argv=None) -> int:
    """``python -m attnsvm.experiments.claims RESULTS_DIR [FULL_DIR]``: print the claims page of a results folder;
    ``python -m attnsvm.experiments.claims --tables DIR [--out FILE]``: the page from stored quick tables (print it,
    or write it to FILE and print how many checks cannot fail at the full preset)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--tables":
        if len(args) not in (2, 4) or not os.path.isdir(args[1]) or (len(args) == 4 and args[2] != "--out"):
            print("usage: python -m attnsvm.experiments.claims --tables DIR [--out FILE]", file=sys.stderr)
            return 2
        page, weak = stored_claims_page(args[1])
        if len(args) == 4:
            with open(args[3], "w", encoding="utf-8") as fh:
                fh.write(page)
            print(f"{args[3]}: {page.count(chr(10))} lines; {len(weak)} checks {CANNOT_FAIL}")
        else:
            sys.stdout.write(page)
        return 0
    if not args or not os.path.isdir(args[0]):
        print("usage: python -m attnsvm.experiments.claims RESULTS_DIR [FULL_DIR] | --tables DIR [--out FILE]",
              file=sys.stderr)
        return 2
    sys.stdout.write(claims_page(args[0], args[1] if len(args) > 1 else None) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
