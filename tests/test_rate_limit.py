"""Requests per minute per API key (api/rate_limit.py), counted in the tests' real Redis, against the real API
under uvicorn: the default limit, a lowered one with its Retry-After, each key on its own, and no limit where
there is no shared Redis."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from models.db import Database
from models.settings import get_settings
from models.tenants import issue_key
from testbed.stack import REDIS_URL, environment
from tests.support_api import new_tenant
from tests.support_cli import Served, serving


@pytest.fixture(scope="module")
def served(database: Database) -> Iterator[Served]:
    with serving(database) as state:
        yield state


def statuses(served: Served, key: str, count: int) -> list[int]:
    with httpx.Client(base_url=served.url, headers={"X-API-Key": key}) as client:
        return [client.get("/v1/notices").status_code for _ in range(count)]


def test_the_default_limit_lets_600_requests_a_minute_through_and_refuses_the_601st(
    served: Served, database: Database
) -> None:
    settings = get_settings()
    assert settings.requests_per_minute_per_key == 600 and settings.shared_redis_url() == REDIS_URL
    key = new_tenant(database)[1]

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=6) as pool:  # six clients at once, as several API processes would see
        answered = sorted(
            status for each in pool.map(lambda _: statuses(served, key, 100), range(6)) for status in each
        )
    after = statuses(served, key, 1)

    assert time.monotonic() - started < 60, "the requests must fall within one minute for this test to mean anything"
    assert (answered, after) == ([200] * 600, [429])


def test_over_a_lowered_limit_the_key_is_told_when_to_try_again_and_other_keys_are_not_held_up(
    served: Served, database: Database
) -> None:
    tenant_id, key = new_tenant(database)
    with database.session() as session:
        second_key = issue_key(session, tenant_id=tenant_id)
    with environment({"PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY": "5"}):
        first = statuses(served, key, 5)
        refused = httpx.get(f"{served.url}/v1/jobs", headers={"X-API-Key": key})
        other = statuses(served, second_key, 5)

    assert first == other == [200] * 5
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.json()["detail"] == (
        "this API key has made 5 requests in the last minute, its limit (the operator's setting "
        f"PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY): try again in {refused.headers['Retry-After']} s"
    )


def test_an_unknown_key_is_refused_before_it_is_counted(served: Served) -> None:
    with environment({"PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY": "1"}):
        assert statuses(served, "pls_nobody", 3) == [401] * 3


@pytest.mark.parametrize("setting", [{"PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY": "0"},
                                     {"PLIMSOLL_QUEUE": "inprocess", "PLIMSOLL_LIMITER_URL": None}])  # fmt: skip
def test_no_limit_when_it_is_0_or_there_is_no_shared_redis(
    served: Served, database: Database, setting: dict[str, str | None]
) -> None:
    key = new_tenant(database)[1]
    with environment({"PLIMSOLL_REQUESTS_PER_MINUTE_PER_KEY": "2", **setting}):
        assert statuses(served, key, 5) == [200] * 5


def test_a_redis_that_does_not_answer_lets_requests_through_and_says_so(
    served: Served, database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    key = new_tenant(database)[1]
    closed = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    with caplog.at_level(logging.WARNING), environment({"PLIMSOLL_LIMITER_URL": closed}):
        assert statuses(served, key, 2) == [200] * 2
    assert "requests per key not counted: Redis did not answer (ConnectionError)" in caplog.messages
