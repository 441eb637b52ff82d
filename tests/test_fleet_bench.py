"""``python -m bench.fleet --scaled``: two workers with different hostnames, sharing the limiter, against the
rate-limited emulator, with the default settings (admission on, fair shares, the default cap on running jobs).
Every goal the default run measures must be met, tenant B's small job during tenant A's burst among them. Not
asserted here, and marked NOT MET by the full run (bench/results/fleet.md): 429s ≤ 3 % with a second client
taking 20 % of the key (3.3 % measured)."""

from __future__ import annotations

from bench import fleet


def test_the_fleet_meets_its_goals_with_the_default_settings() -> None:
    results = fleet.run(fleet.SCALED, (fleet.MODES[0],))
    report = fleet.render(fleet.SCALED, results)
    print(report)
    goals = fleet.goals(results)
    assert any("small tenant" in goal.text for goal in goals)
    assert [goal.text for goal in goals if goal.met is not True] == [], report  # each measured, each met
    assert results[0].states == {"succeeded": fleet.SCALED.jobs + 1}
