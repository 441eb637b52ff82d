"""A real Celery worker for the tests: Redis as the broker (a queue of this test session's own), a worker
thread pool consuming it, the test PostgreSQL database and the emulator as the model.

- ``worker_environment``: the settings every part reads (database, broker, emulator URLs), set through the
  environment as in production, for the whole session.
- ``celery_worker``: a started worker; steps enqueued through ``worker.queue.enqueue_step`` run on it.
- ``sentry_events``: Sentry initialised with a transport that keeps events in a list (nothing leaves the machine).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from celery.contrib.testing.worker import start_worker
from sentry_sdk.transport import Transport

from emulator import EmulatorServer
from models import db, settings
from tests.fixtures_emulator import TEST_API_KEY

REDIS_URL = os.environ.get("PLIMSOLL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _clear_cached_settings() -> None:
    from worker import tasks

    settings.get_settings.cache_clear()
    db.get_database.cache_clear()
    tasks._services.cache_clear()


@pytest.fixture(scope="session")
def worker_environment(database_url: str, emulator: EmulatorServer) -> Iterator[dict[str, str]]:
    values = {
        "PLIMSOLL_DATABASE_URL": database_url,
        "PLIMSOLL_BROKER_URL": REDIS_URL,
        "PLIMSOLL_QUEUE": "celery",
        "PLIMSOLL_ANTHROPIC_BASE_URL": emulator.base_url,
        "PLIMSOLL_ANTHROPIC_API_KEY": TEST_API_KEY,
        "PLIMSOLL_OPENAI_BASE_URL": emulator.openai_base_url,
        "PLIMSOLL_OPENAI_API_KEY": TEST_API_KEY,
        "PLIMSOLL_MAX_TRANSIENT_RETRIES": "4",
    }
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    _clear_cached_settings()
    yield values
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _clear_cached_settings()


@pytest.fixture(scope="session")
def celery_worker(worker_environment: dict[str, str]) -> Iterator[Any]:
    from worker.celery_app import app

    queue = f"plimsoll-test-{uuid.uuid4().hex[:8]}"  # test sessions running side by side never share steps
    app.conf.broker_url = REDIS_URL
    app.conf.task_default_queue = queue
    app.conf.task_default_routing_key = queue
    with start_worker(
        app,
        pool="threads",
        concurrency=4,
        queues=[queue],
        perform_ping_check=False,
        shutdown_timeout=30,
        send_events=True,  # as `plimsoll worker` does (-E): Flower shows them
    ) as worker:
        yield worker


class CapturingTransport(Transport):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Any) -> None:
        for item in envelope.items:
            if item.type == "event" and item.payload.json is not None:
                self.events.append(item.payload.json)


@pytest.fixture
def sentry_events() -> Iterator[list[dict[str, Any]]]:
    from worker.sentry import init_sentry

    transport = CapturingTransport()
    init_sentry(None, transport=transport)
    yield transport.events
    sentry_sdk.get_client().close()
    sentry_sdk.init()  # off again
