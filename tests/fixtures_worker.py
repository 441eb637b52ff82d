"""A real Celery worker for the tests: Redis as the broker (a queue of this test session's own), a worker
thread pool consuming it, the test PostgreSQL database and the emulator as the model.

- ``worker_environment``: the settings every part reads (database, broker, emulator URLs), set through the
  environment as in production, for the whole session.
- ``celery_worker``: a started worker; steps enqueued through ``worker.queue.enqueue_step`` run on it.
- ``sentry_events``: Sentry initialised with a transport that keeps events in a list (nothing leaves the machine).
- For the whole session, the service's shared Redis (PLIMSOLL_LIMITER_URL) is the tests' own.
- Around every test, what the shared rate limiter in Redis learned (limits, the fleet's share, reservations) is
  forgotten, so that one test's limits never throttle the next.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sentry_sdk
from sentry_sdk.transport import Transport

from emulator import EmulatorServer
from testbed.stack import REDIS_URL, environment
from testbed.stack import celery_worker as start_celery_worker
from tests.fixtures_emulator import TEST_API_KEY
from tests.support import sentry_off
from worker.names import RATE_LIMIT_KEYS


@pytest.fixture(scope="session")
def worker_environment(database_url: str, emulator: EmulatorServer) -> Iterator[dict[str, str]]:
    values = {
        "PLIMSOLL_DATABASE_URL": database_url,
        "PLIMSOLL_BROKER_URL": REDIS_URL,
        "PLIMSOLL_QUEUE": "celery",
        "PLIMSOLL_EMULATOR_URL": emulator.base_url,
        "PLIMSOLL_ANTHROPIC_BASE_URL": emulator.base_url,
        "PLIMSOLL_ANTHROPIC_API_KEY": TEST_API_KEY,
        "PLIMSOLL_OPENAI_BASE_URL": emulator.openai_base_url,
        "PLIMSOLL_OPENAI_API_KEY": TEST_API_KEY,
    }
    with environment(values):
        yield values


@pytest.fixture(scope="session", autouse=True)
def tests_shared_redis() -> Iterator[None]:
    """What the service keeps in its shared Redis (the API's requests per key, the admission limiter) goes to the
    tests' own Redis database, in the tests that start no worker too (the settings' default is the broker's)."""
    with environment({"PLIMSOLL_LIMITER_URL": REDIS_URL}):
        yield


@pytest.fixture(autouse=True)
def forget_learned_rate_limits() -> Iterator[None]:
    _forget_rate_limits()
    yield
    _forget_rate_limits()


def _forget_rate_limits() -> None:
    with contextlib.suppress(redis.ConnectionError), redis.Redis.from_url(REDIS_URL) as client:
        for key in client.scan_iter(f"{RATE_LIMIT_KEYS}*", count=1_000):
            client.delete(key)


@pytest.fixture(scope="session")
def celery_worker(worker_environment: dict[str, str]) -> Iterator[Any]:
    with start_celery_worker(REDIS_URL) as worker:
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
    sentry_off()


@pytest.fixture(autouse=True)
def _forget_model_facts(request: pytest.FixtureRequest) -> Iterator[None]:
    """What the worker learns about a model (its calibration, its limits) outlives a job by design; between
    tests it would carry one test's emulator settings into the next."""
    if "database" not in request.fixturenames:
        yield
        return
    from sqlalchemy import delete

    from models.db import Database
    from models.tables import ModelFacts

    database: Database = request.getfixturevalue("database")
    with database.session() as session:
        session.execute(delete(ModelFacts))
    yield
    with database.session() as session:
        session.execute(delete(ModelFacts))


@pytest.fixture
def allow_reproductions() -> Iterator[None]:
    """The operator's permission (off by default) for the strategies that reproduce old failures and for
    safety_net=false: the tests of those reproductions turn it on, as their benchmarks do."""
    with environment({"PLIMSOLL_ALLOW_REPRODUCTIONS": "true"}):
        yield
