"""A 429 is a wait, not a failure: the step goes back to the broker after retry-after plus jitter, keeps its
fault retries, and its job fails for rate limiting only after hours of waiting (the default)."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.settings import Settings
from models.tables import Job, JobStatus, now
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_worker import new_job, services, submit, wait_for
from worker.backoff import JITTER, rate_limit_delay
from worker.errors import RateLimited, Transient
from worker.providers import AnthropicProvider
from worker.routing import route
from worker.step import run_step

DEFAULT_WAIT = Settings().rate_limit_max_wait_seconds
LIMITED = RateLimited("rate limited", status=429, provider="anthropic", retry_after=3.0)


def test_the_default_wait_is_hours_and_never_uses_up_the_retries() -> None:
    assert DEFAULT_WAIT >= 3600
    for waited in (0.0, 60.0, DEFAULT_WAIT - 1):
        action = route(LIMITED, attempt=1, max_attempts=7, waited_seconds=waited, max_wait_seconds=DEFAULT_WAIT)
        assert action.retry and action.job_status is None and not action.report_to_sentry
    ended = route(LIMITED, attempt=1, max_attempts=7, waited_seconds=DEFAULT_WAIT, max_wait_seconds=DEFAULT_WAIT)
    assert (ended.retry, ended.job_status, ended.report_to_sentry) == (False, "failed", True)
    busy = Transient("Overloaded", status=529, provider="anthropic")
    assert not route(busy, attempt=7, max_attempts=7, waited_seconds=0, max_wait_seconds=DEFAULT_WAIT).retry


def test_the_wait_is_retry_after_plus_jitter_that_differs_per_draw() -> None:
    delays = [rate_limit_delay(3.0, 0.0, JITTER) for _ in range(200)]
    assert min(delays) >= 3.0 and max(delays) <= 6.0
    assert len({round(d, 3) for d in delays}) > 150  # not synchronised: no two processes come back together
    assert max(delays) - min(delays) > 2.0
    rng = random.Random(1)
    without = [rate_limit_delay(None, waited, rng) for waited in (0.0, 4.0, 30.0, 10_000.0)]
    assert 1.0 <= without[0] <= 2.0 and 4.0 <= without[1] <= 8.0 and 30.0 <= without[2] <= 60.0
    assert without[3] <= 120.0  # capped


@pytest.fixture
def provider(emulator_reset: EmulatorServer) -> AnthropicProvider:
    return AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url, timeout=30.0)


def test_a_refused_step_waits_its_turn_without_using_a_retry(
    database: Database, emulator_reset: EmulatorServer, provider: AnthropicProvider
) -> None:
    emulator_reset.configure(rate_limits={"requests_per_minute": 1})  # one request, then 60 s to the next
    texts = {c.name: c.text for c in chapters(2, chars=1_500, languages=("en",))}
    job_id = new_job(database, texts)
    woken: list[int] = []
    steps = services(database, provider, woken)  # the default settings
    assert run_step(job_id, steps).action == "continued"
    refused = run_step(job_id, steps)
    assert refused.action == "rate_limited" and refused.retry_in is not None
    assert 60 <= refused.retry_in <= 120  # retry-after and jitter: the step is queued with it as countdown
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.attempts, job.retries, job.status) == (0, 0, JobStatus.RUNNING)
        assert job.rate_limited_since is not None
    emulator_reset.advance_clock(60)
    assert run_step(job_id, steps).action == "continued"
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.rate_limited_since is None
    assert emulator_reset.stats()["rejections"] == {"rate_limited": 1}


def test_after_the_longest_wait_the_job_fails_saying_why(
    database: Database, emulator_reset: EmulatorServer, provider: AnthropicProvider
) -> None:
    emulator_reset.configure(rate_limits={"requests_per_minute": 1})
    job_id = new_job(database, {"a.txt": "Alpha. " * 50})
    reported: list[BaseException] = []
    steps = services(database, provider, [], rate_limit_max_wait_seconds=3600)
    steps.report = reported.append
    assert run_step(job_id, steps).action == "continued"
    assert run_step(job_id, steps).action == "rate_limited"
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.rate_limited_since = now() - timedelta(seconds=3601)
        job.lease_until = None
    assert run_step(job_id, steps).action == "finished"
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.FAILED
        assert job.error is not None and job.error.startswith("the provider's rate limit kept the step waiting 60 min")
    assert [type(error) for error in reported] == [RateLimited]


@pytest.mark.usefixtures("celery_worker")
def test_more_429s_than_retries_and_the_job_still_succeeds(database: Database, emulator_reset: EmulatorServer) -> None:
    retries = Settings().max_transient_retries
    script: Any = ["429"] * (retries + 4) + ["529"]
    emulator_reset.configure(faults={"script": script, "retry_after_seconds": 0.1})
    texts = {c.name: c.text for c in chapters(2, chars=1_500, languages=("en",))}
    job = wait_for(database, submit(database, texts, budget=20_000))
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.retries == 1  # the 529; the 429s were waits
    assert emulator_reset.stats()["rejections"] == {"rate_limit": retries + 4, "overloaded": 1}
