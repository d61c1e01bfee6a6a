"""Plausible-bug mutations (attnsvm.experiments.mutations): each rewritten quick table fails a check of its experiment.

The quick tables are stored fixtures (tests/data/quick, README there for the command that made them): no experiment
runs here, only the experiments' own ``checks``. A mutation counts as caught only by a verdict ``"fail"`` (an
inconclusive verdict does not catch a bug).
"""

from __future__ import annotations

import os

import pandas as pd
import pytest

from attnsvm.experiments import build_config, registry
from attnsvm.experiments.mutations import MUTATIONS, mutations_section

DATA = os.path.join(os.path.dirname(__file__), "data", "quick")


def _table(name: str) -> pd.DataFrame:
    return pd.read_parquet(os.path.join(DATA, f"{name}.parquet"))


def _checks(name: str, table: pd.DataFrame) -> dict:
    exp = registry()[name]
    return {c.name: c for c in exp.checks(build_config(exp, quick=True), table)}


def _named(checks: dict, start: str) -> list:
    got = [c for n, c in checks.items() if n.startswith(start)]
    assert got, (start, sorted(checks))
    return got


def test_at_least_twelve_named_mutations():
    assert len(MUTATIONS) >= 12
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)
    assert all(m.caught_by and m.bug for m in MUTATIONS)


@pytest.mark.parametrize("experiment", sorted({m.experiment for m in MUTATIONS}))
def test_the_unmutated_quick_table_passes_the_catching_checks(experiment):
    """The catching checks pass on the real quick table: a mutation is caught by what it changed, not by a check
    that fails anyway."""
    checks = _checks(experiment, _table(experiment))
    for m in (m for m in MUTATIONS if m.experiment == experiment):
        for start in m.caught_by:
            for c in _named(checks, start):
                assert c.verdict == "pass", (m.name, c.name, c.verdict, c.value, c.threshold)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_mutation_fails_a_check(mutation):
    table = _table(mutation.experiment)
    before = table.copy()
    checks = _checks(mutation.experiment, mutation.apply(table))
    pd.testing.assert_frame_equal(table, before)  # the mutation leaves its input alone
    for start in mutation.caught_by:
        for c in _named(checks, start):
            assert c.verdict == "fail", (mutation.name, c.name, c.verdict, c.value, c.threshold)


def test_claims_page_lists_every_mutation():
    page = open(os.path.join(os.path.dirname(__file__), "..", "docs", "guide", "claims.md"), encoding="utf-8").read()
    assert mutations_section() in page
    for m in MUTATIONS:
        assert f"| {m.name} | {m.experiment} |" in page
