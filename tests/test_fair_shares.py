"""Fair shares between tenants: the admission line takes tenants in turn (start-time fair queueing in Redis), the
broker takes a lightly loaded tenant's steps first, and a tenant's running jobs are capped (setting and override),
with the jobs over the cap waiting queued. Real Redis, PostgreSQL, the emulator; the fleet's scaled benchmark
(tests/test_fleet_bench.py) runs the whole of it on two Celery workers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis
from alembic import command
from sqlalchemy import func, select, text

from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.errors import InvalidInput
from models.jobs import create_job
from models.migrate import alembic_config
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus
from models.tenants import create_tenant, set_running_cap
from testbed.stack import REDIS_URL, fresh_database
from tests.support import wait_until
from tests.support_worker import run_to_end, services, wait_for
from worker.admission import MARGIN, Limiter, Ticket, waiting_by_tenant
from worker.fairness import priority_lists, step_priority
from worker.metrics_server import oldest_queued_seconds
from worker.names import RATE_LIMIT_KEYS
from worker.providers import AnthropicProvider
from worker.queue import enqueue_step
from worker.step import run_step


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(REDIS_URL)
    yield connection
    connection.close()


@pytest.fixture
def provider() -> Iterator[str]:
    name = f"fair-{uuid.uuid4().hex[:8]}"
    yield name
    connection = redis.Redis.from_url(REDIS_URL)
    for key in connection.scan_iter(f"{RATE_LIMIT_KEYS}{{{name}/*"):
        connection.delete(key)
    connection.close()


FINISHED = [status for status in JobStatus if status.finished]


# The margin every bucket keeps for another client of the key (worker/admission.py), in seconds of these tests'
# limit of 60,000 tokens a minute: a wait is that much longer once the bucket is short.
MARGIN_S = MARGIN * 60


def ticket(provider: str, step: int, tenant: int) -> Ticket:
    return Ticket(provider=provider, model="claude-sonnet-4-5", job_id=tenant * 1_000 + step, step=step, tenant=tenant)


def test_a_burst_of_one_tenant_does_not_queue_anothers_step_behind_it(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})  # 1,000 tokens a second
    burst = [limiter.reserve(ticket(provider, n, tenant=1), input_tokens=20_000, output_tokens=0) for n in range(6)]
    assert burst[:3] == [0.0, 0.0, pytest.approx(MARGIN_S, abs=0.1)]  # the full bucket, less the margin
    assert burst[3:] == [pytest.approx(20.0 * n + MARGIN_S, abs=0.5) for n in (1, 2, 3)]  # in the order they came
    small = limiter.reserve(ticket(provider, 0, tenant=2), input_tokens=5_000, output_tokens=0)
    assert small == 0.0  # ahead of the burst's waiting steps (the bucket holds it now), not after them (65 s)
    again = limiter.reserve(ticket(provider, 3, tenant=1), input_tokens=20_000, output_tokens=0)
    assert again == pytest.approx(
        25.0 + MARGIN_S, abs=0.5
    )  # the burst's next step comes back: now behind the small one
    waiting = waiting_by_tenant(client)
    assert waiting["1"].steps == 4 and "2" not in waiting  # the burst's four, and nothing of the small one's


def test_two_busy_tenants_share_the_limit_in_tokens_not_in_steps(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})
    assert limiter.reserve(ticket(provider, 99, tenant=3), input_tokens=60_000, output_tokens=0) == 0.0  # empty now
    big = [limiter.reserve(ticket(provider, n, tenant=1), input_tokens=10_000, output_tokens=0) for n in range(3)]
    small = [limiter.reserve(ticket(provider, n, tenant=2), input_tokens=2_500, output_tokens=0) for n in range(8)]
    assert big == [
        pytest.approx(s + MARGIN_S, abs=0.5) for s in (10.0, 20.0, 30.0)
    ]  # the line as it was when they came
    # Each tenant's tokens go in turn: four of the small steps (10,000 tokens) between two big ones, and the big
    # ones, coming back for their turn, find them ahead.
    assert small[3] == pytest.approx(20.0 + MARGIN_S, abs=0.5) and small[7] == pytest.approx(40.0 + MARGIN_S, abs=0.5)
    back = [limiter.reserve(ticket(provider, n, tenant=1), input_tokens=10_000, output_tokens=0) for n in range(3)]
    assert back == [pytest.approx(s + MARGIN_S, abs=0.5) for s in (10.0, 30.0, 50.0)]


def test_a_step_that_never_comes_back_leaves_the_line(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})
    assert limiter.reserve(ticket(provider, 0, tenant=1), input_tokens=60_000, output_tokens=0) == 0.0
    assert limiter.reserve(ticket(provider, 1, tenant=3), input_tokens=6_000, output_tokens=0) > 0  # then lost
    line = f"{RATE_LIMIT_KEYS}{{{provider}/claude-sonnet}}:due"
    for member in client.hkeys(line):
        client.hset(line, member, 0)  # its turn came long ago
    assert limiter.reserve(ticket(provider, 0, tenant=2), input_tokens=1_000, output_tokens=0) == pytest.approx(
        1.0 + MARGIN_S, abs=0.3
    )  # nothing ahead of it any more


def jobs_of_one_tenant(database: Database, count: int, *, cap: int | None = None) -> list[int]:
    texts = {c.name: c.text for c in chapters(1, chars=1_500, languages=("en",))}
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"capped-{uuid.uuid4().hex[:8]}")
        set_running_cap(session, tenant_id=tenant.id, cap=cap)
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        return [
            create_job(session, tenant_id=tenant.id, instruction="Read it.", document_ids=ids, kind=JobKind.MAIN).id
            for _ in range(count)
        ]


def test_jobs_over_the_default_cap_wait_queued_and_start_when_one_ends(
    database: Database, anthropic_provider: AnthropicProvider
) -> None:
    cap = Settings().max_running_jobs_per_tenant
    assert cap > 0  # the default caps
    ids = jobs_of_one_tenant(database, cap + 1)
    woken: list[int] = []
    steps = services(database, anthropic_provider, woken)
    first = [run_step(job_id, steps, step=0) for job_id in ids]
    assert [outcome.action for outcome in first] == ["continued"] * cap + ["waiting_for_slot"]
    with database.session() as session:
        waiting = session.get(Job, ids[-1])
        assert waiting is not None and waiting.error is None  # waiting, not failed
        assert (waiting.status, waiting.step, waiting.lease_owner) == (JobStatus.QUEUED, 0, None)
    woken.clear()
    run_to_end(ids[0], steps)  # one of the running jobs ends: the waiting one is queued at once
    assert ids[-1] in woken
    assert run_step(ids[-1], steps, step=0).action == "continued"


def test_a_tenants_own_cap_wins_over_the_setting(database: Database, anthropic_provider: AnthropicProvider) -> None:
    woken: list[int] = []
    steps = services(database, anthropic_provider, woken)
    one = jobs_of_one_tenant(database, 2, cap=1)
    assert [run_step(job_id, steps, step=0).action for job_id in one] == ["continued", "waiting_for_slot"]
    unlimited = jobs_of_one_tenant(database, Settings().max_running_jobs_per_tenant + 2, cap=0)
    assert {run_step(job_id, steps, step=0).action for job_id in unlimited} == {"continued"}
    with database.session() as session, pytest.raises(InvalidInput):
        set_running_cap(session, tenant_id=1, cap=-1)


def test_a_step_of_a_tenant_with_many_jobs_goes_behind_one_with_few(database: Database) -> None:
    busy = jobs_of_one_tenant(database, 12, cap=0)
    light = jobs_of_one_tenant(database, 2)
    with database.session() as session:
        for job_id in busy[:4]:
            job = session.get(Job, job_id)
            assert job is not None
            job.status = JobStatus.RUNNING  # running or queued, all count; finished ones do not
        done = session.get(Job, light[1])
        assert done is not None
        done.status = JobStatus.SUCCEEDED
    with database.session() as session:
        assert (step_priority(session, busy[0]), step_priority(session, light[0])) == (9, 0)
    assert priority_lists("steps")[:3] == ["steps", "steps:1", "steps:2"]


def test_the_oldest_queued_step_is_read_from_the_broker(client: redis.Redis) -> None:
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    seconds, _ = client.time()
    try:
        client.lpush(f"{queue}:9", json.dumps({"headers": {"plimsoll_queued_at": seconds - 30}}))
        client.lpush(queue, json.dumps({"headers": {"plimsoll_queued_at": seconds - 5}}))
        assert oldest_queued_seconds(client, queue) == pytest.approx(30.0, abs=1.5)
    finally:
        client.delete(*priority_lists(queue))
    assert oldest_queued_seconds(client, queue) == 0.0


def test_the_cap_column_is_migrated_with_existing_tenants_on_the_default() -> None:
    with fresh_database(prefix="plimsoll_cap") as url:
        config = alembic_config(url)
        command.downgrade(config, "0007")
        database = Database(url)
        try:
            with database.engine.begin() as connection:
                connection.execute(text("INSERT INTO tenants (name, created_at) VALUES ('old', now())"))
            command.upgrade(config, "0008")
            with database.engine.begin() as connection:
                assert connection.execute(text("SELECT max_running_jobs FROM tenants")).scalar_one() is None
                connection.execute(text("UPDATE tenants SET max_running_jobs = 3"))
            command.downgrade(config, "0007")
            with database.engine.begin() as connection:
                columns = connection.execute(
                    text("SELECT column_name FROM information_schema.columns WHERE table_name = 'tenants'")
                ).scalars()
                assert "max_running_jobs" not in set(columns)
        finally:
            database.dispose()


@pytest.mark.usefixtures("celery_worker")
def test_with_the_default_settings_a_burst_does_not_hold_back_another_tenants_job(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    """A real worker against the rate-limited emulator: tenant A's burst drains the limit and fills the admission
    line; tenant B's job, sent after, goes before A's waiting steps. First in, first out it would end after
    every one of them, when all of A's jobs had ended."""
    emulator_reset.configure(rate_limits={"input_tokens_per_minute": 6_000})  # 100 a second; the burst: ~13,000
    burst = jobs_of_one_tenant(database, 10)
    for job_id in burst:
        enqueue_step(job_id, 0)
    wait_until(lambda: len(answered(emulator_reset)) >= len(burst), 60, "the burst's first steps answered")
    [small] = jobs_of_one_tenant(database, 1)
    enqueue_step(small, 0)
    try:
        job = wait_for(database, small, timeout=120)
        assert job.status == JobStatus.SUCCEEDED, job.error
        with database.session() as session:
            ended = session.scalar(select(func.count()).where(Job.id.in_(burst), Job.status.in_(FINISHED)))
        assert ended is not None and ended < len(burst) / 2, f"{ended} of the burst's jobs ended before B's"
    finally:
        with database.session() as session:  # the rest of the burst is not waited for
            for job_id in burst:
                unfinished = session.get(Job, job_id)
                if unfinished is not None and not JobStatus(unfinished.status).finished:
                    unfinished.status = JobStatus.CANCELLED


def answered(emulator: EmulatorServer) -> list[dict[str, object]]:
    return [r for r in emulator.stats()["log"] if r["route"] == "messages" and r["status"] == 200]
