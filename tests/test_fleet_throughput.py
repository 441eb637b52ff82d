"""``python -m bench.fleet_throughput --scaled``: the fleet's step rate at zero model latency against plain Celery
chains of no-op tasks on the same broker, with the same workers, in the same run; where a step's time goes; and
the deliveries that ran no step, under a tenant's cap and behind a backlog longer than the lease. Every goal must
be met but the step rate's ratio, NOT MET, which shows as an expected failure until it is met
(bench/results/fleet_throughput.md has the full run)."""

from __future__ import annotations

import pytest

from bench import fleet_throughput

pytestmark = pytest.mark.worker  # worker processes of their own

# Measured and reported NOT MET (bench/results/fleet_throughput.md, README): on this machine even a task that only
# calls the model, as a step does, stays under the goal's ratio (the report's ceiling).
KNOWN_NOT_MET = "steps per second at zero model latency"


def test_the_fleet_meets_its_throughput_goals() -> None:
    result = fleet_throughput.run(fleet_throughput.SCALED)
    report = fleet_throughput.render(result)
    print(report)
    assert result.fleet.steps == result.fleet.jobs * (fleet_throughput.SCALED.documents + 1), report
    assert result.fleet.phases["task"][0] >= result.fleet.steps, report  # every delivery timed its parts
    assert result.backlog.still_queued > 0, report  # the backlog did outlast the lease: the reconciler looked
    assert result.fleet.per_second < result.model_calls.per_second, report  # a step makes that call and more
    unmet = [goal.text for goal in fleet_throughput.goals(result) if goal.met is not True]
    assert [text for text in unmet if not text.startswith(KNOWN_NOT_MET)] == [], report
    if unmet:  # reported as xfailed, never as passed: issue 39 stays open until it is met
        pytest.xfail(f"NOT MET: {'; '.join(unmet)}")
