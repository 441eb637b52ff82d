"""``python -m bench.fleet_throughput --scaled``: the fleet's step rate at zero model latency against plain Celery
chains of no-op tasks on the same broker, with the same workers, in the same run; where a step's time goes; and
the deliveries that ran no step, under a tenant's cap and behind a backlog longer than the lease. Every goal must
be met: the step rate's ratio among them (bench/results/fleet_throughput.md has the full run)."""

from __future__ import annotations

import pytest

from bench import fleet_throughput

pytestmark = pytest.mark.worker  # worker processes of their own


def test_the_fleet_meets_its_throughput_goals() -> None:
    result = fleet_throughput.run(fleet_throughput.SCALED)
    report = fleet_throughput.render(result)
    print(report)
    assert result.fleet.steps == result.fleet.jobs * (fleet_throughput.SCALED.documents + 1), report
    assert result.fleet.phases["task"][0] >= result.fleet.steps, report  # every delivery timed its parts
    assert result.backlog.still_queued > 0, report  # the backlog did outlast the lease: the reconciler looked
    goals = fleet_throughput.goals(result)
    assert [goal.text for goal in goals if goal.met is not True] == [], report
