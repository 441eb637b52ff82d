"""Waiting costs the broker nothing, on the real stack (PostgreSQL, a Celery worker on Redis, the emulator): a job
behind its tenant's cap on running jobs holds no message in the broker and starts when a running job ends (or, with
no job ending to wake it, at the reconciler's round once its tenant has room); the reconciler leaves a step the
broker still holds in its place and queues again only one whose message is lost."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from typing import Any, cast

import pytest
import redis
from celery import Celery

from api.idempotency import HeldKey
from api.routes.jobs import start_job
from api.views import job_view
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.tables import Job, JobKind, JobStatus, now
from models.tenants import create_tenant, set_running_cap
from testbed.stack import REDIS_URL
from tests.support import wait_until
from tests.support_worker import quiet_fleet, wait_for
from worker.broker_view import UNACKED, UNACKED_INDEX, queued_steps, step_of
from worker.celery_app import recovery_queue
from worker.fairness import priority_lists
from worker.names import STEP_TASK
from worker.queue import enqueue_step
from worker.tasks import reconcile_now

pytestmark = pytest.mark.usefixtures("celery_worker")


def step_queues(worker: Any) -> list[str]:
    queue = str(worker.app.conf.task_default_queue)
    return [queue, recovery_queue(queue)]


def jobs_of_a_capped_tenant(database: Database, count: int, cap: int) -> list[int]:
    texts = {c.name: c.text for c in chapters(2, chars=1_500, languages=("en",))}
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"waits-{uuid.uuid4().hex[:8]}")
        set_running_cap(session, tenant_id=tenant.id, cap=cap)
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        return [
            create_job(session, tenant_id=tenant.id, instruction="Read.", document_ids=ids, kind=JobKind.SUBAGENT).id
            for _ in range(count)
        ]


def submitted(database: Database, job_id: int) -> None:
    """What the API does once it has created the job (api/routes/jobs.py)."""
    with database.sessions() as session:
        job = session.get_one(Job, job_id)
        start_job(session, job, lambda job: enqueue_step(job, 0), HeldKey(), lambda: job_view(session, job))


def the_job(database: Database, job_id: int) -> Job:
    with database.session() as session:
        return session.get_one(Job, job_id)


def test_a_job_behind_its_tenants_cap_holds_no_message_and_starts_when_a_running_one_ends(
    database: Database, emulator_reset: EmulatorServer, celery_worker: Any
) -> None:
    quiet_fleet(database, emulator_reset)  # no step of an earlier test's jobs in the broker, nothing to reconcile
    emulator_reset.configure(latency_seconds=1.0)  # the first job runs for a few seconds
    first, second = jobs_of_a_capped_tenant(database, 2, cap=1)
    submitted(database, first)
    submitted(database, second)
    wait_until(lambda: the_job(database, first).status == JobStatus.RUNNING, 30, "the first job started")

    waiting = the_job(database, second)
    assert (waiting.status, waiting.lease_owner, waiting.lease_until) == (JobStatus.QUEUED, None, None)  # parked
    with redis.Redis.from_url(REDIS_URL) as client:
        in_broker = queued_steps(client, step_queues(celery_worker))
    assert in_broker is not None and {job for job, _ in in_broker} <= {first}  # nothing of the waiting job
    assert reconcile_now() == 0  # its turn has not come: the reconciler leaves it parked

    ended, started = wait_for(database, first, timeout=60), wait_for(database, second, timeout=60)
    assert (ended.status, started.status) == (JobStatus.SUCCEEDED, JobStatus.SUCCEEDED), started.error
    assert ended.finished_at is not None and started.started_at is not None
    assert started.started_at >= ended.finished_at  # its turn came when the running one ended
    assert started.requeues == 0  # never queued again by the reconciler


def test_a_parked_job_starts_at_the_reconcilers_round_once_its_tenant_has_room(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    quiet_fleet(database, emulator_reset)  # no job of an earlier test for the round to find
    [job_id] = jobs_of_a_capped_tenant(database, 1, cap=1)
    with database.session() as session:  # as if a running job had been cancelled through the API: no step woke it
        session.get_one(Job, job_id).lease_until = None
    assert reconcile_now() == 1
    assert wait_for(database, job_id, timeout=60).status == JobStatus.SUCCEEDED


def test_the_reconciler_leaves_a_step_the_broker_holds_and_queues_a_lost_one_again(
    database: Database, emulator_reset: EmulatorServer, celery_worker: Any
) -> None:
    quiet_fleet(database, emulator_reset)  # no lapsed job of an earlier test for the round to find (CI saw 11)
    held, lost = jobs_of_a_capped_tenant(database, 2, cap=0)
    for job_id in (held, lost):
        enqueue_step(job_id, 0, delay=600)  # taken by the worker, unacknowledged until its countdown ends
    client = redis.Redis.from_url(REDIS_URL)
    try:
        queues = step_queues(celery_worker)
        taken = wait_until(lambda: steps_unacked(client, lost, queues), 30, "the worker took the lost job's step")
        assert len(taken) == 1
        client.hdel(UNACKED, *taken)  # the broker lost it: gone from Redis
        with database.session() as session:
            for job_id in (held, lost):
                session.get_one(Job, job_id).lease_until = now() - timedelta(seconds=1)  # its deadline passed

        assert reconcile_now() == 1  # the lost one only
        assert wait_for(database, lost, timeout=60).status == JobStatus.SUCCEEDED
        left = the_job(database, held)
        assert (left.status, left.requeues) == (JobStatus.QUEUED, 0)
        assert left.lease_until is not None and left.lease_until > now()  # a deadline a lease on
    finally:
        with database.session() as session:  # the held step's countdown outlives the test: it will find this
            session.get_one(Job, held).status = JobStatus.CANCELLED
        client.close()


def test_a_step_waiting_in_a_queues_lists_is_seen_and_one_deleted_is_not() -> None:
    queue = f"view-{uuid.uuid4().hex[:8]}"
    app = Celery("view", broker=REDIS_URL)
    app.conf.broker_transport_options = {"priority_steps": list(range(10)), "sep": ":"}
    client = redis.Redis.from_url(REDIS_URL)
    try:
        app.send_task(STEP_TASK, (41, 3), queue=queue, priority=0)
        app.send_task(STEP_TASK, (42, 0), queue=queue, priority=9)
        app.send_task(STEP_TASK, (43, None), queue=recovery_queue(queue))
        app.send_task("another.task", (44, 0), queue=queue)
        assert queued_steps(client, [queue, recovery_queue(queue)]) == {(41, 3), (42, 0), (43, None)}
        client.delete(f"{queue}:9")  # lost with its list
        assert queued_steps(client, [queue, recovery_queue(queue)]) == {(41, 3), (43, None)}
    finally:
        client.delete(*priority_lists(queue), *priority_lists(recovery_queue(queue)))
        client.close()


def test_a_step_a_killed_worker_had_taken_counts_only_for_a_lease_after_it_was_due() -> None:
    queue = f"view-{uuid.uuid4().hex[:8]}"
    app = Celery("view", broker=REDIS_URL)
    app.conf.broker_transport_options = {"priority_steps": list(range(10)), "sep": ":"}
    client = redis.Redis.from_url(REDIS_URL)
    tags = []
    try:
        app.send_task(STEP_TASK, (51, 2), queue=queue)
        app.send_task(STEP_TASK, (52, 0), queue=queue, countdown=300)
        for name in priority_lists(queue):  # taken by a worker 100 s ago, as kombu records it, never acknowledged
            while (raw := client.rpop(name)) is not None:
                message = json.loads(cast(bytes, raw))
                tag = message["properties"]["delivery_tag"]
                client.hset(UNACKED, tag, json.dumps([message, "", queue]))
                client.zadd(UNACKED_INDEX, {tag: time.time() - 100})
                tags.append(tag)
        assert queued_steps(client, [queue]) == {(51, 2), (52, 0)}
        # One lease after it was due, a step still taken is one a killed worker had: its job is queued again.
        # The other's countdown has not ended: a live worker holds it until then.
        assert queued_steps(client, [queue], grace=30.0) == {(52, 0)}
        client.zadd(UNACKED_INDEX, {tags[0]: time.time()})  # taken just now
        assert queued_steps(client, [queue], grace=30.0) == {(51, 2), (52, 0)}
    finally:
        if tags:
            client.hdel(UNACKED, *tags)
            client.zrem(UNACKED_INDEX, *tags)
        client.delete(*priority_lists(queue))
        client.close()


def steps_unacked(client: redis.Redis, job_id: int, queues: list[str]) -> list[bytes | str]:
    """The unacknowledged-message tags of ``job_id``'s steps on ``queues``. The hash is the whole Redis
    database's: an earlier run's worker stopped with a step held leaves its entry there, and job ids start again
    in each test database, so only this worker's queues say which entries are this test's."""
    envelopes = {tag: json.loads(envelope) for tag, envelope in client.hgetall(UNACKED).items()}
    return [
        tag
        for tag, (message, _exchange, queue) in envelopes.items()
        if queue in queues and (step_of(message) or (0, 0))[0] == job_id
    ]
