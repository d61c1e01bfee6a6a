"""Planning sigmas of the statistical checks: stored, measured on seeds no preset uses, never on the run judged.

The power of a mean check (:func:`attnsvm.experiments.checks.mean_check`), an ordering or paired check
and a random-direction control needs the spread of the per-run values *before* the run: a planning
sigma. ``planning.json`` beside this module stores, per check name, the standard deviation of the
values that check received when the experiment's quick preset was run on seeds shifted by
:data:`SEED_OFFSET` (disjoint from every preset's seeds), the run count, the stated alternative effect
(:func:`effect_rule`) and how it was measured; a grouped check also stores each group's sigma
(``"sigmas"``, groups of the full preset measured with ``--full``). Re-measure with::

    python -m attnsvm.experiments.planning_run tf-local-convergence tf-convergence-types ...
    python -m attnsvm.experiments.planning_run --full tf-lambda-head
    python -m attnsvm.experiments.planning_run --full --set 'ds=[8]' --set 'attempts={"8": 1600}' --set accepted=50 tf-multi-token

(``--set``: only the cells a check needs, with fewer runs; the overrides are written into the entry's
``"measured"``.)

The alternative effect of a mean check is a rule stated before any measurement (:func:`effect_rule`),
the counterpart of the shares' 0.15 shift: a factor 2 on the distance to the natural end of the scale.
"""

from __future__ import annotations

import json
import os

__all__ = ["PLANNING_FILE", "SEED_OFFSET", "load_planning", "lookup", "effect_rule"]

PLANNING_FILE = os.path.join(os.path.dirname(__file__), "planning.json")
#: planning runs use the preset's seeds plus this offset (no preset reaches it)
SEED_OFFSET = 100_000
_CACHE: dict = {}


def load_planning(path: str | None = None) -> dict:
    """``{check name: {"experiment", "sigma", "runs", "effect", "rule", "measured"[, "sigmas"]}}`` from
    ``planning.json``."""
    path = path or PLANNING_FILE
    if path not in _CACHE:
        if not os.path.isfile(path):
            _CACHE[path] = {}
        else:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            if not isinstance(data, dict) or not isinstance(data.get("checks"), dict):
                raise ValueError(f"{path}: expected a JSON object with a 'checks' mapping")
            _CACHE[path] = data["checks"]
    return _CACHE[path]


def lookup(name: str) -> dict | None:
    """The stored planning entry of the check called ``name`` (None when none is stored)."""
    entry = load_planning().get(name)
    return dict(entry) if entry else None


def effect_rule(op: str, lo: float, hi: float | None = None) -> tuple[float, str]:
    """The stated alternative of a mean check, as ``(effect, rule in words)``.

    * ``"<="`` bar ``c > 0``: the true mean at ``2c`` (the bar doubled), effect ``c``;
    * ``">="`` bar ``c >= 0.5``: the distance to 1 doubled, ``1 - 2 (1 - c)``, effect ``1 - c``
      (correlations, cosines, probabilities near 1); ``0 <= c < 0.5``: the true mean at ``c / 2``,
      effect ``c / 2``;
    * a range ``"~"`` ``[lo, hi]`` ("about x"): 15% of the range's larger end outside it (the
      shares' 0.15 shift, relative);
    * an ordering ``">"`` (mean paired difference above a margin): ``lo`` is the effect the check states
      itself (recorded with the spread), returned as it is.
    """
    if op == "<=":
        if not lo > 0:
            raise ValueError(f"an upper bar needs a positive target, got {lo!r}")
        return float(lo), "the bar doubled"
    if op == ">=":
        if lo >= 0.5:
            if not lo < 1:
                raise ValueError(f"a lower bar near 1 must be below 1, got {lo!r}")
            return float(1 - lo), "the distance to 1 doubled"
        if not lo > 0:
            raise ValueError(f"a lower bar needs a positive target, got {lo!r}")
        return float(lo / 2), "half the bar"
    if op == ">":
        if not lo > 0:
            raise ValueError(f"an ordering needs a positive stated effect, got {lo!r}")
        return float(lo), "the ordering's stated effect"
    if op == "~":
        top = max(abs(lo), abs(hi if hi is not None else lo))
        if not top > 0:
            raise ValueError("a range 'about 0' has no relative alternative")
        return float(0.15 * top), "15% of the range's end outside the range"
    raise ValueError(f"op must be '<=', '>=' or '~', got {op!r}")
