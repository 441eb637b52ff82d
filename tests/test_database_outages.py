"""Long database outages: one Sentry event per outage, not per delivery; a paid reply kept while the database is
away, and, when it must be dropped, logged with its usage."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis
from sqlalchemy import select, text, update
from sqlalchemy.engine import make_url

from emulator import EmulatorServer
from models.db import IDLE_PING_SECONDS, Database
from models.ledger import ChargeKind
from models.settings import Settings
from models.tables import Charge, Job
from testbed.stack import REDIS_URL
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_worker import Held, in_thread, new_job, services
from tests.tcp_proxy import CuttableProxy
from worker.names import UNRECORDED_CHARGES
from worker.outages import DatabaseUnavailable, first_report_of_outage, gives_up_on_outage, outage_over
from worker.providers import AnthropicProvider
from worker.step import run_step


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(REDIS_URL)
    outage_over(connection)
    yield connection
    outage_over(connection)
    connection.close()


def test_an_outage_is_reported_once_however_many_deliveries_give_up(client: redis.Redis) -> None:
    assert [first_report_of_outage(client) for _ in range(80)] == [True] + [False] * 79
    outage_over(client)  # the reconciler reached the database again
    assert first_report_of_outage(client)  # the next outage is a new one
    assert first_report_of_outage(None)  # without a shared Redis every delivery reports


def test_a_connection_idle_in_the_pool_when_the_database_went_away_is_replaced_before_use(database_url: str) -> None:
    # A restart or a failover drops every connection, idle ones in the pool included. One idle for a second or more
    # is pinged at checkout; a step's transactions, which follow each other within milliseconds, are not.
    url = make_url(database_url)
    with CuttableProxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
        through_proxy = Database(url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False))
        with through_proxy.session() as session:
            session.execute(text("SELECT 1"))
        proxy.cut()
        proxy.restore()
        time.sleep(IDLE_PING_SECONDS)
        with through_proxy.session() as session:
            assert session.scalar(text("SELECT 1")) == 1
        through_proxy.dispose()


def a_step_cut_off_after_its_reply(
    database_url: str, emulator: EmulatorServer, *, shared: redis.Redis | None
) -> tuple[int, list[DatabaseUnavailable]]:
    """A new job's first step, run through a proxy to the database that is cut once the request is sent: its reply
    comes back to no database, for longer than the (lowered) wait. The job and what the step raised."""
    url = make_url(database_url)
    with CuttableProxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
        through_proxy = Database(url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False))
        provider = Held(AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator.base_url))
        job_id = new_job(through_proxy, {"a.txt": "Alpha."})
        steps = replace(services(through_proxy, provider, [], store_retry_seconds=2), redis=shared)
        errors: list[DatabaseUnavailable] = []

        def step() -> object:
            try:
                return run_step(job_id, steps)
            except DatabaseUnavailable as error:
                errors.append(error)
                return None

        thread, _ = in_thread(step)
        assert provider.sending.wait(30)
        proxy.cut()
        provider.gate.set()
        thread.join(timeout=60)
        proxy.restore()
        through_proxy.dispose()
    return job_id, errors


def test_a_paid_reply_dropped_after_the_wait_is_logged_with_its_usage(
    database_url: str, emulator_reset: EmulatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="worker.step")
    assert Settings().store_retry_seconds >= 120  # the default wait; lowered here to see the end of it
    _, errors = a_step_cut_off_after_its_reply(database_url, emulator_reset, shared=None)
    assert len(errors) == 1
    dropped = [r.getMessage() for r in caplog.records if "a paid reply to step 0 was dropped" in r.getMessage()]
    assert len(dropped) == 1 and "output" in dropped[0] and "input" in dropped[0]
    assert "Alpha" not in dropped[0]  # usage only, never user text


def test_a_dropped_replys_charge_is_kept_in_redis_and_recorded_as_waste_once_the_database_is_back(
    database: Database, emulator_reset: EmulatorServer, client: redis.Redis
) -> None:
    client.delete(UNRECORDED_CHARGES)
    job_id, errors = a_step_cut_off_after_its_reply(database.url, emulator_reset, shared=client)
    assert len(errors) == 1 and client.llen(UNRECORDED_CHARGES) == 1
    with database.session() as session:  # the dropped delivery's lease lapses; the reconciler hands the step on
        session.execute(update(Job).where(Job.id == job_id).values(lease_owner=None, lease_until=None))
    direct = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    assert run_step(job_id, replace(services(database, direct, []), redis=client)).action == "continued"  # redelivered

    assert client.llen(UNRECORDED_CHARGES) == 0
    with database.session() as session:
        charges = list(session.scalars(select(Charge).where(Charge.job_id == job_id).order_by(Charge.id)))
    billed = emulator_reset.billing()
    assert [(c.kind, c.request_id) for c in charges] == [
        (ChargeKind.STEP, billed[1]["request_id"]),
        (ChargeKind.WASTED, billed[0]["request_id"]),  # the same request, paid twice: the first reply was dropped
    ]
    assert charges[1].total_usd == charges[0].total_usd > 0


def test_a_delivery_waits_out_a_short_outage_however_its_retries_fall() -> None:
    """It gives up (and the outage may be reported) only once it has tried its retries and the outage has lasted
    the store wait (120 s by default) since it met it: a restart of a few seconds is never an event, even when
    the jittered backoff spends every retry within it."""
    settings = Settings()
    retries, wait = settings.max_transient_retries, settings.store_retry_seconds
    assert not gives_up_on_outage(retries + 1, 13.0, settings)  # the chaos run's 13 s restart, retries spent
    assert not gives_up_on_outage(retries, wait + 1, settings)  # a long outage, retries left
    assert gives_up_on_outage(retries + 1, wait, settings)
