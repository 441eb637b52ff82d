"""bench.webhooks scaled down (a 20 s receiver outage, 40 jobs, a worker killed, the run's own PostgreSQL restarted):
the test fails on any goal NOT MET."""

from __future__ import annotations

import pytest

from bench import webhooks

pytestmark = [pytest.mark.bench, pytest.mark.worker]  # a benchmark's run with Celery workers of its own


def test_the_scaled_webhooks_benchmark_meets_its_goals() -> None:
    outcomes = webhooks.run(webhooks.SCALED)
    report = webhooks.render(outcomes)
    print(report)
    assert outcomes.postgres_restarted and len(outcomes.killed) == 2
    assert "NOT MET" not in report, report
    assert [goal.met for goal in webhooks.goals(outcomes)] == [True, True, True]
