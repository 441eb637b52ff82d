"""The chaos suite, scaled down: real Celery workers on the harness's own PostgreSQL (and Redis), kill -9'd, their
broker and database restarted under them, the emulator failing a fifth of model calls; every job must end, soon
after the last fault, with each message stored once. Against Redis and against the shared RabbitMQ."""

from __future__ import annotations

import shutil
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from bench.chaos import run_chaos
from bench.chaos_report import goals, render
from bench.chaos_result import ChaosConfig
from bench.chaos_services import PG_BIN_DIRS
from bench.goals import RECOVERY_GOAL_SECONDS

# Small enough for < 4 minutes a broker on two cores, large enough that every kind of fault meets running jobs.
SCALED_DOWN = ChaosConfig(jobs=10, workers=2, seconds=40, settle_seconds=RECOVERY_GOAL_SECONDS + 5, seed=8)


def _rabbitmq_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.worker
@pytest.mark.chaos
@pytest.mark.timeout(280)
@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_every_job_ends_under_kills_restarts_and_provider_faults(broker: str) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    if shutil.which("initdb") is None and not any((Path(d) / "initdb").exists() for d in PG_BIN_DIRS):
        pytest.skip("PostgreSQL's initdb is not installed")
    if broker == "rabbitmq" and not _rabbitmq_answers():
        pytest.skip("no RabbitMQ at 127.0.0.1:5672")

    result = run_chaos(replace(SCALED_DOWN, broker=broker), log=False)
    print(render(result))

    checks = result.checks
    assert len(result.submitted) == SCALED_DOWN.jobs + SCALED_DOWN.too_long_jobs
    kinds = {"kill -9 pool child", "kill -9 worker main process", "stop PostgreSQL"}
    if broker == "redis":
        kinds.add("restart Redis (no persistence)")
    assert {f.kind for f in result.faults} >= kinds
    assert checks.stuck == [], f"stuck jobs: {checks.stuck}"
    assert checks.lost == [] and result.submit_failures == 0
    assert (checks.messages_missing, checks.messages_duplicated, checks.steps_missing) == (0, 0, 0), checks.problems
    assert result.recovery_seconds is not None and result.recovery_seconds <= RECOVERY_GOAL_SECONDS
    assert all(goal.met for goal in goals(result)), render(result)
