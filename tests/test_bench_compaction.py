"""``python -m bench.compaction`` with the defaults, as the README quotes it: every goal of the benchmark is met."""

from __future__ import annotations

from bench import compaction


def test_the_compaction_benchmark_meets_its_goals_with_the_defaults() -> None:
    report, goals = compaction.run()
    assert "| long output | auto | succeeded | 48/48 |" in report
    assert "| many turns | auto | succeeded | 48/48 |" in report
    assert [g.text for g in goals if not g.met] == [], report
