"""``python -m bench.compaction`` with the defaults, as docs/benchmarks/compaction.md quotes it: every goal of the
benchmark is met, compaction's share of each job's input cost (from the ledger) among them. The test fails on any
goal NOT MET."""

from __future__ import annotations

import pytest

from bench import compaction

pytestmark = pytest.mark.bench


def test_the_compaction_benchmark_meets_its_goals_with_the_defaults() -> None:
    report, goals = compaction.run()
    assert "| long output | auto | succeeded | 48/48 |" in report
    assert "| many turns | auto | succeeded | 48/48 |" in report
    assert "auto: compaction <= 5 % of each job's input cost (the ledger)" in [g.text for g in goals]
    assert [g.text for g in goals if not g.met] == [], report
