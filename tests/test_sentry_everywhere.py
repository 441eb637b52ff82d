"""Sentry beyond the Celery worker: the API and the embedded worker start it from the settings, with the same
scrubbing; and the embedded worker reports a step that raised and goes on with the next one, and waits out a
database outage."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from api.app import create_app
from bench.chaos_services import SentrySink
from emulator import EmulatorServer
from models.db import Database
from models.jobs import create_job
from models.settings import Settings
from models.tables import Job, JobStatus
from models.tenants import create_tenant
from testbed.stack import environment
from tests.support import sentry_off, wait_until
from tests.support_worker import new_job
from tests.tcp_proxy import CuttableProxy
from worker.inprocess import InProcessWorker
from worker.services import make_services

INSTRUCTION_MARKER = "INSTRUCTION-MARKER-e5Qd"
PROVIDER_MARKER = "PROVIDER-MARKER-b8Ny"  # quoted by the ValueError a step raises for an unknown provider


@pytest.fixture
def sink() -> Iterator[SentrySink]:
    endpoint = SentrySink()
    yield endpoint
    sentry_sdk.get_client().close()
    sentry_off()
    endpoint.close()


def test_the_api_reports_an_unexpected_error_to_the_dsn_of_its_settings(sink: SentrySink) -> None:
    """A request that meets a database nobody can reach answers 503 (try again), and Sentry (started by
    ``create_app`` from PLIMSOLL_SENTRY_DSN) receives the error."""
    unreachable = Database("postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2")
    with (
        environment({"PLIMSOLL_SENTRY_DSN": sink.dsn}),
        TestClient(create_app(database=unreachable), raise_server_exceptions=False) as client,
    ):
        response = client.get("/v1/jobs", headers={"X-API-Key": "some-key"})
    assert response.status_code == 503
    sentry_sdk.flush()
    kinds = wait_until(sink.snapshot, 10, "the API's event arrived")
    assert kinds == {"OperationalError": 1}
    assert "celery" not in sentry_sdk.get_client().integrations  # the Celery integration is the worker's


def test_the_embedded_queue_starts_sentry_from_the_settings(sink: SentrySink) -> None:
    from worker.queue import local_worker, stop_local_worker

    with environment({"PLIMSOLL_SENTRY_DSN": sink.dsn, "PLIMSOLL_QUEUE": "inprocess"}):
        try:
            local_worker()
            assert sentry_sdk.get_client().dsn == sink.dsn
        finally:
            stop_local_worker()


def test_the_embedded_worker_reports_a_step_that_raised_and_goes_on(
    database: Database, emulator_reset: EmulatorServer, sentry_events: list[dict[str, Any]]
) -> None:
    """One step raises (a job whose provider no adapter serves); the one thread that runs steps fails its job and
    reports it once, without the job's text, and then runs the next job to its end."""
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"tenant-{uuid.uuid4().hex[:8]}")
        broken = create_job(session, tenant_id=tenant.id, instruction=f"Say hi. {INSTRUCTION_MARKER}")
        broken.provider = PROVIDER_MARKER
        sound = create_job(session, tenant_id=tenant.id, instruction="Say hi.")
        broken_id, sound_id = broken.id, sound.id
    # The reconciler would queue the broken job again (and other tests' unfinished jobs): not in this test's time.
    settings = Settings(queue="inprocess", emulator_url=emulator_reset.base_url, reconcile_every_seconds=3600)
    worker = InProcessWorker(lambda enqueue: make_services(enqueue, settings=settings, database=database), threads=1)
    try:
        worker.submit(broken_id)
        worker.submit(sound_id)
        assert worker.wait_until_idle(timeout=60)
    finally:
        worker.stop()
    with database.session() as session:
        assert session.get_one(Job, sound_id).status == JobStatus.SUCCEEDED
        broken = session.get_one(Job, broken_id)
        assert broken.status == JobStatus.FAILED  # as under Celery: delivered again, it would raise again
        assert broken.error == "an internal error (ValueError) stopped the job at step 1; it was reported"
    sentry_sdk.flush()
    [event] = sentry_events
    assert event["exception"]["values"][-1]["type"] == "ValueError"
    text = json.dumps(sentry_events, default=str)
    assert INSTRUCTION_MARKER not in text and PROVIDER_MARKER not in text


def test_the_embedded_worker_waits_out_a_database_outage(
    database_url: str, emulator_reset: EmulatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A step that cannot reach the database is tried again with the worker's backoff, in the same worker, and
    runs once the database is back (the reconciler plays no part)."""
    caplog.set_level(logging.WARNING, logger="worker.inprocess")
    url = make_url(database_url)
    with CuttableProxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
        through_proxy = Database(url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False))
        job_id = new_job(through_proxy, {"a.txt": "Alpha."})
        settings = Settings(emulator_url=emulator_reset.base_url, reconcile_every_seconds=3600)
        proxy.cut()
        worker = InProcessWorker(lambda enqueue: make_services(enqueue, settings=settings, database=through_proxy))
        try:
            worker.submit(job_id)
            wait_until(lambda: "waits" in caplog.text, 30, "a step waited for the database")
            proxy.restore()
            assert worker.wait_until_idle(timeout=120)
        finally:
            worker.stop()
            through_proxy.dispose()
    direct = Database(database_url)
    with direct.session() as session:
        assert session.get_one(Job, job_id).status == JobStatus.SUCCEEDED
    direct.dispose()
    assert "given up" not in caplog.text
