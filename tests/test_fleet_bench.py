"""``python -m bench.fleet --scaled``: two workers with different hostnames, sharing the limiter, against the
rate-limited emulator, with the default settings (admission on). Every goal of what is built must be met for
them. Not asserted here, and marked NOT MET by the full run (bench/results/fleet.md): fair shares between
tenants (not built) and 429s ≤ 3 % with a second client taking 20 % of the key (3.3 % measured)."""

from __future__ import annotations

from bench import fleet


def test_the_fleet_meets_its_goals_with_the_default_settings() -> None:
    results = fleet.run(fleet.SCALED, (fleet.MODES[0],))
    report = fleet.render(fleet.SCALED, results)
    print(report)
    built = [goal for goal in fleet.goals(results) if "not built" not in goal.text]
    assert [goal.text for goal in built if goal.met is not True] == [], report  # each measured, each met
    assert results[0].states == {"succeeded": fleet.SCALED.jobs + 1}
