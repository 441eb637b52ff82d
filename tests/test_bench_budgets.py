"""bench.budgets scaled down (2 tenants, 12 jobs with subagents, one worker of two processes, the run's own
PostgreSQL restarted; no SIGKILL: the module's docstring says why): the test fails on any goal NOT MET but the
reservation's time per step, which the parallel pass's load moves (4.69 ms seen): it is reported there and judged
by the serial test below, against the tests' PostgreSQL and Redis with the default settings."""

from __future__ import annotations

import shutil
import statistics

import pytest

from bench import budgets
from bench.budgets_report import RESERVATION_GOAL_MS, goals, render
from models.db import Database
from testbed.stack import REDIS_URL

TIMED_HERE = "reservation adds at most"


@pytest.mark.bench
@pytest.mark.worker
@pytest.mark.timeout(240)
def test_the_scaled_budgets_benchmark_meets_its_goals() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    outcomes = budgets.run(budgets.SCALED)
    report = render(outcomes)
    print(report)
    assert outcomes.ended_all and len(outcomes.planned) == budgets.SCALED.jobs
    assert any("PostgreSQL" in fault for fault in outcomes.faults)
    assert outcomes.billing and outcomes.charges and outcomes.reservation_ms
    judged = goals(outcomes)
    assert len(judged) == 6 and sum(goal.text.startswith(TIMED_HERE) for goal in judged) == 1
    assert [goal.text for goal in judged if not goal.met and not goal.text.startswith(TIMED_HERE)] == [], report


@pytest.mark.serial  # a time per step: the parallel pass's load would move it
def test_a_steps_budget_calls_take_at_most_2_ms(database: Database) -> None:
    times = budgets.time_reservations(database, budgets.budgets_on(database, REDIS_URL))
    assert len(times) == budgets.TIMED_RESERVATIONS
    assert statistics.fmean(times) <= RESERVATION_GOAL_MS, f"{statistics.fmean(times):.2f} ms"
