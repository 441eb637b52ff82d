"""Recovery a backlog cannot delay: Celery beat runs the reconciler itself (never queued behind steps, never
expired), and exactly one beat across machines does so, by a lock in Redis."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from models.db import Database
from models.settings import Settings
from models.tables import Job, now
from testbed.stack import REDIS_URL
from tests.support import wait_until
from tests.support_worker import new_job
from worker.names import RETENTION_TASK
from worker.scheduler import LOCK_INTERVALS, SchedulerLock

REPOSITORY = Path(__file__).resolve().parent.parent
BACKLOG = 1_000


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(REDIS_URL)
    yield connection
    connection.close()


def test_exactly_one_scheduler_holds_the_lock_and_another_takes_over(client: redis.Redis) -> None:
    name = f"plimsoll:test-scheduler:{uuid.uuid4().hex[:8]}"
    first, second = (SchedulerLock(client, seconds=1.0, name=name) for _ in range(2))
    assert first.held() and not second.held()
    time.sleep(0.6)  # the scenario: time passes within the lock's second
    assert first.held() and not second.held()  # renewed at each round
    time.sleep(1.2)  # the first stopped renewing (it died): its lock lapses
    assert second.held() and not first.held()
    second.release()  # it stops: the other takes over at its next round
    assert first.held()
    first.release()
    assert client.exists(name) == 0


@pytest.mark.worker
def test_beat_reconciles_on_time_behind_a_backlog_of_steps(
    database: Database, database_url: str, client: redis.Redis, tmp_path: Path
) -> None:
    queue = f"plimsoll-backlog-{uuid.uuid4().hex[:8]}"
    client.rpush(queue, *[b"{}"] * BACKLOG)  # a thousand steps waiting, nobody consuming them
    job_id = new_job(database, {"a.txt": "Alpha."})
    with database.session() as session:
        job = session.get_one(Job, job_id)
        job.lease_until = now() - timedelta(seconds=1)  # its worker died: the deadline has passed
    environment = {**os.environ, "PLIMSOLL_DATABASE_URL": database_url, "PLIMSOLL_BROKER_URL": REDIS_URL,
                   "PLIMSOLL_STEP_QUEUE": queue, "PYTHONPATH": str(REPOSITORY)}  # fmt: skip
    command = [sys.executable, "-m", "celery", "-A", "worker.celery_app:app", "beat", "-s", str(tmp_path / "schedule"),
               "--loglevel=info"]  # fmt: skip
    interval = Settings().reconcile_every_seconds  # the default
    started = time.monotonic()
    beat = subprocess.Popen(command, cwd=REPOSITORY, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:

        def reconciled() -> bool:
            assert beat.poll() is None, beat.stdout.read() if beat.stdout else ""
            return client.llen(queue) != BACKLOG

        wait_until(reconciled, interval + LOCK_INTERVALS * interval + 15, "a reconciler round", every=0.2)
        waited = time.monotonic() - started
        time.sleep(interval + 2)  # the next round, which has nothing to take back
    finally:
        beat.terminate()
        logged = beat.communicate(timeout=20)[0].decode()
        client.delete(queue)
    # A round is logged at INFO when it took a job back, and not at all (DEBUG) when it did nothing.
    assert re.search(r"reconciler round done, [1-9]\d* jobs queued again", logged), logged
    assert "reconciler round done, 0 jobs" not in logged, logged
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert job.lease_until is not None and job.lease_until > now()  # taken back, a new deadline set
    assert waited < 2 * interval + 10  # one interval after beat started, not after a thousand steps


@pytest.mark.worker
def test_beat_sends_a_retention_sweep_at_its_interval(database_url: str, client: redis.Redis, tmp_path: Path) -> None:
    queue = f"plimsoll-sweeps-{uuid.uuid4().hex[:8]}"
    environment = {**os.environ, "PLIMSOLL_DATABASE_URL": database_url, "PLIMSOLL_BROKER_URL": REDIS_URL,
                   "PLIMSOLL_STEP_QUEUE": queue, "PYTHONPATH": str(REPOSITORY),
                   "PLIMSOLL_RETENTION_SWEEP_EVERY_SECONDS": "1"}  # fmt: skip
    command = [sys.executable, "-m", "celery", "-A", "worker.celery_app:app", "beat", "-s", str(tmp_path / "schedule"),
               "--loglevel=info"]  # fmt: skip
    beat = subprocess.Popen(command, cwd=REPOSITORY, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:

        def two_sent() -> list[str] | None:
            assert beat.poll() is None, beat.stdout.read() if beat.stdout else ""
            tasks = [json.loads(m)["headers"]["task"] for m in client.lrange(queue, 0, -1)]
            return tasks if len(tasks) >= 2 else None

        tasks = wait_until(two_sent, 30, "two sweeps sent", every=0.2)
    finally:
        beat.terminate()
        beat.communicate(timeout=20)
        client.delete(queue)
    assert set(tasks) == {RETENTION_TASK}  # sent to the workers' queue; the reconciler runs in beat itself
