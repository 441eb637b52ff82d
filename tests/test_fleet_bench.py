"""``python -m bench.fleet --scaled``: two workers with different hostnames, sharing the limiter, against the
rate-limited emulator, with the default settings (admission on, fair shares, the default cap on running jobs).
Every goal the default run measures must be met (worker-process time spent waiting for capacity among them, read
from the workers' own metrics), but two that this scale cannot judge, reported here and judged by the
full run (bench/results/fleet.md):
- a small tenant's job ≤ 1.5× its time alone. Here that job takes 0.2-0.3 s of our own code and the instant
  emulator, so its time is the CPU it gets on the test machine: alone it measured 0.20 to 1.15 s from run to run
  (other work on the machine), in the burst 0.54 to 0.93 s. That the burst does not hold the small job back is
  asserted with a real worker in tests/test_fair_shares.py (which fails without the fair line).
- ≥ 90 % of the limit used in every full window. Here the burst ends within a minute of the first minute's full
  bucket, before a full window of 20 s after it (with 12 jobs there was one, about five requests' worth of the
  limit, so one request answered on either side of its edge moved it by a fifth: 86 %, 95 %, 104 % measured on
  one commit); the use over the whole run is judged here as wall time ≤ 1.1× ideal.
Recovery, hung calls and the demand levels: tests/test_fleet_recovery.py."""

from __future__ import annotations

import pytest

from bench import fleet

pytestmark = pytest.mark.worker  # worker processes of their own against a limit
NOT_JUDGED_HERE = ("a small tenant's job", "≥ 90 % of the limit used")  # see above: this scale cannot judge them


def test_the_fleet_meets_its_goals_with_the_default_settings() -> None:
    results = fleet.run(fleet.SCALED, (fleet.MODES[0],))
    report = fleet.render(fleet.SCALED, results)
    print(report)
    goals = fleet.goals(results)
    unjudged = [goal for goal in goals if goal.text.startswith(NOT_JUDGED_HERE)]
    assert len(unjudged) == 2, report  # reported
    judged = [goal for goal in goals if goal not in unjudged]
    assert [goal.text for goal in judged if goal.met is not True] == [], report  # each measured, each met
    assert results[0].states == {"succeeded": fleet.SCALED.jobs + 1}


def test_with_a_second_client_taking_a_fifth_of_the_key_429s_stay_within_3_percent() -> None:
    shared = fleet.MODES[2]
    assert shared.admission and shared.second_client_share == 0.2
    results = fleet.run(fleet.SCALED, (shared,))
    print(results[0])
    assert results[0].states == {"succeeded": fleet.SCALED.jobs + 1}
    assert results[0].ideal > 0  # the limit did bind, for a minute past the first minute's bucket (65 s in all)
    assert results[0].refused_share <= 0.03, results[0]  # the goal: 429s ≤ 3 % of requests
