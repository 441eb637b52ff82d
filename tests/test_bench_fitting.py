"""``bench.fitting`` scaled down: a tenth of the budget and of each chapter, the same number of calls.

The goals of the benchmark are asserted here; its timings are only checked to be measured (speed goals live in
the benchmark's output, not in tests).
"""

from __future__ import annotations

import pytest

pytest.importorskip("langchain")

from bench.fitting import (  # after the skip: langchain is a bench extra
    Scenario,
    Summary,
    never_over_budget,
    run_goals,
    run_scenario,
    run_table,
    time_one_length,
    timing_table,
)
from bench.goals import render_goals

SCALED = Scenario("40 chapters of ~4,400 tokens", rounds=40, result_tokens=4_400, budget=40_000)


@pytest.fixture(scope="module")
def summaries() -> dict[str, Summary]:
    return run_scenario(SCALED, counter_names=("cl100k",))


def test_plimsoll_meets_the_goals_of_the_subagent_run(summaries: dict[str, Summary]) -> None:
    goals = run_goals(summaries)
    assert all(goal.met for goal in goals), render_goals(goals)
    assert summaries["plimsoll"].over_budget_real == {"cl100k": 0}


def test_adaptive_batches_keep_the_guarantees(summaries: dict[str, Summary]) -> None:
    four, adaptive = summaries["plimsoll"], summaries["adaptive"]
    assert never_over_budget(adaptive)
    assert adaptive.newest_always_whole
    assert adaptive.rewrites <= four.rewrites


def test_the_legacy_truncation_sends_requests_over_the_budget(summaries: dict[str, Summary]) -> None:
    assert summaries["legacy"].over_budget > 0
    assert summaries["legacy"].name in run_table(summaries)


def test_every_fitter_is_timed_at_the_same_budget() -> None:
    timings = [time_one_length(rounds, repeat=1) for rounds in (5, 50)]
    assert [t.messages for t in timings] == [11, 101]
    for t in timings:
        assert min(t.fit_estimated, t.fit_unestimated, t.plan, t.clear_edit, t.middleware, t.trim) > 0
    assert timing_table(timings).count("\n") == 3
