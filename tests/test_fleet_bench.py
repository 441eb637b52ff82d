"""``python -m bench.fleet --scaled``: two workers with different hostnames, sharing the limiter, against the
rate-limited emulator, with the default settings (admission on) alone and with a second client taking 20 % of
the key. The goals of what is built must be met; the bench marks fair shares NOT MET until they are built."""

from __future__ import annotations

from bench import fleet


def test_the_fleet_meets_its_goals_with_the_default_settings() -> None:
    modes = (fleet.MODES[0], fleet.MODES[2])  # admission on (the default), and with a second client
    results = fleet.run(fleet.SCALED, modes)
    report = fleet.render(fleet.SCALED, results)
    print(report)
    built = [goal for goal in fleet.goals(results) if "not built" not in goal.text]
    assert [goal.text for goal in built if goal.met is False] == [], report
    assert sum(goal.met is True for goal in built) >= 5, report  # measured, not skipped
    assert all(result.answered > 0 and result.states == {"succeeded": fleet.SCALED.jobs + 1} for result in results)
