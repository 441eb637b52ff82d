"""Admission under the provider's rate limits, shared in Redis: a token bucket with a line in front (reservations
are served in order and told when their turn comes), corrected by real usage and by what answers say."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.tables import Job, JobStatus, Step
from plimsoll import CacheView
from plimsoll.fitting import Plan
from testbed.stack import REDIS_URL
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_worker import new_job, services
from worker.admission import MARGIN, Limiter, Ticket, planned_input
from worker.names import RATE_LIMIT_KEYS
from worker.providers import AnthropicProvider
from worker.providers.base import Usage
from worker.rate_limits import Budget, model_class, stated_limits
from worker.step import run_step
from worker.step.plan import expected_cached_prefix


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(REDIS_URL)
    yield connection
    connection.close()


def ticket(provider: str, job_id: int = 1, step: int = 0, model: str = "claude-sonnet-4-5") -> Ticket:
    return Ticket(provider=provider, model=model, job_id=job_id, step=step)


@pytest.fixture
def provider() -> Iterator[str]:
    """A provider name of this test's own, so its buckets are its own; they are deleted afterwards."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    connection = redis.Redis.from_url(REDIS_URL)
    for key in connection.scan_iter(f"{RATE_LIMIT_KEYS}{{{name}/*"):
        connection.delete(key)
    connection.close()


def test_without_a_known_limit_every_step_goes_at_once(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client)
    assert [limiter.reserve(ticket(provider, step=n), input_tokens=10**9, output_tokens=10**6) for n in range(5)] == [
        0.0
    ] * 5


def test_reservations_are_served_in_order_and_told_their_turn(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})  # 1,000 tokens a second
    assert limiter.reserve(ticket(provider, 1), input_tokens=50_000, output_tokens=0) == 0.0
    margin = MARGIN * 60  # seconds: the headroom kept, a share of the limit, at 1,000 tokens a second
    big = limiter.reserve(ticket(provider, 2), input_tokens=30_000, output_tokens=0)
    assert big == pytest.approx(20.0 + margin, abs=0.5)  # 20,000 in debt, and the margin
    small = limiter.reserve(ticket(provider, 3), input_tokens=1_000, output_tokens=0)
    assert small == pytest.approx(21.0 + margin, abs=0.5)  # behind the big one, not before it
    again = limiter.reserve(ticket(provider, 2), input_tokens=30_000, output_tokens=0)
    assert again == pytest.approx(big, abs=0.5)  # a step that comes back (or is delivered twice) holds its place


def test_real_usage_corrects_the_reservation(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})
    assert limiter.reserve(ticket(provider, 1), input_tokens=60_000, output_tokens=0) == 0.0
    assert limiter.reserve(ticket(provider, 2), input_tokens=6_000, output_tokens=0) > 5.0
    limiter.settle(ticket(provider, 1), sent=True, usage=Usage(input_tokens=20_000, output_tokens=0), stated={})
    assert limiter.reserve(ticket(provider, 3), input_tokens=30_000, output_tokens=0) == 0.0  # 40,000 came back


def test_limits_are_learned_from_answers_and_remaining_lowers_the_bucket(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client)
    first = ticket(provider, 1)
    assert limiter.reserve(first, input_tokens=1_000, output_tokens=100) == 0.0  # nothing known yet
    stated = {"input_tokens": Budget(limit=600_000, remaining=100_000), "requests": Budget(limit=50, remaining=49)}
    limiter.settle(first, sent=True, usage=Usage(input_tokens=1_000, output_tokens=50), stated=stated)
    # Another client of the key left only 100,000: a step of 150,000 waits for 50,000 (and the margin) at 10,000 a
    # second.
    wait = limiter.reserve(ticket(provider, 2), input_tokens=150_000, output_tokens=100)
    assert wait == pytest.approx(5.0 + MARGIN * 60, abs=0.5)


def test_a_refused_request_gives_its_reservation_back(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"requests": 60}})
    assert limiter.reserve(ticket(provider, 1), input_tokens=0, output_tokens=0) == 0.0
    limiter.settle(ticket(provider, 1), sent=False, usage=None, stated={})
    fit = 60 - round(MARGIN * 60)  # the refused one took nothing: the minute's 60 but the margin fit
    for step in range(2, 2 + fit):
        assert limiter.reserve(ticket(provider, step), input_tokens=0, output_tokens=0) == 0.0
    assert limiter.reserve(ticket(provider, 2 + fit), input_tokens=0, output_tokens=0) > 0.0


def test_cache_reads_are_left_out_where_the_provider_does_not_count_them() -> None:
    assert planned_input(tokens=150_000, provider="anthropic", cached_prefix=140_000) == 10_000
    assert planned_input(tokens=150_000, provider="openai", cached_prefix=140_000) == 150_000
    headers = {"anthropic-ratelimit-input-tokens-limit": "2000000", "anthropic-ratelimit-input-tokens-remaining": "5"}
    assert stated_limits(headers) == {"input_tokens": Budget(limit=2_000_000, remaining=5)}
    assert stated_limits({"x-ratelimit-limit-tokens": "30000", "x-ratelimit-remaining-tokens": "29000"}) == {
        "input_tokens": Budget(limit=30_000, remaining=29_000)
    }
    assert model_class("claude-sonnet-4-5-20250929") == "claude-sonnet"


def test_a_cached_prefix_is_expected_at_the_same_factor_as_the_request_it_is_part_of() -> None:
    """Text the estimate over-counts by 46 % (generated English against cl100k): the previous request was estimated
    at 2,920 tokens and counted 2,000, 1,350 of them read from the cache. The next one is estimated at 3,870 (about
    2,650 real): about 1,300 count against the limit. Subtracting the real cached count from the whole estimate
    would reserve 2,520, nearly twice that, and every step behind it in the line would be told to wait for tokens
    that never count; the prefix taken at the request's own factor leaves the estimate's own 46 % over."""
    previous = Step(estimated_tokens=2_920, reported_input_tokens=2_000, cache_read_tokens=1_350, cache_write_tokens=0)
    warm = CacheView(idle_seconds=1.0, previous_cleared=())
    plan = Plan(stage="as_is", tokens=3_870, keep_from=1, cleared=(), cleared_in=(), note="none")
    cached = expected_cached_prefix(previous, warm, plan, 1.0)
    assert cached == int(2_920 * 1_350 / 2_000)
    assert planned_input(tokens=3_870, provider="anthropic", cached_prefix=cached) == 1_899  # about 1.46 x 1,300
    assert expected_cached_prefix(previous, CacheView(idle_seconds=3_600.0, previous_cleared=()), plan, 1.0) == 0


def test_a_step_without_capacity_is_not_started_and_is_queued_for_its_turn(
    database: Database, emulator_reset: EmulatorServer, client: redis.Redis
) -> None:
    emulator_reset.configure(rate_limits={"requests_per_minute": 2})
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url, timeout=30.0)
    texts = {c.name: c.text for c in chapters(2, chars=4_000, languages=("en",))}
    job_id = new_job(database, texts)
    queued: list[tuple[int, int | None, float | None]] = []
    steps = services(database, provider, [])
    steps.enqueue = lambda job, step, delay: queued.append((job, step, delay))
    steps.limiter = Limiter(client)
    try:
        outcomes = [run_step(job_id, steps, step=n) for n in (0, 1, 2)]
        # The first answer teaches the limit (2 a minute, 1 left); the second goes; the third waits its turn.
        assert [outcome.action for outcome in outcomes] == ["continued", "continued", "waiting_for_capacity"]
        waiting = outcomes[2]
        assert waiting.retry_in == pytest.approx(30.0, abs=1.0)  # (the margin is whole requests: none of 2)
        assert queued[-1] == (job_id, waiting.step, waiting.retry_in)
        with database.session() as session:
            job = session.get(Job, job_id)
            assert job is not None and job.status == JobStatus.RUNNING
            assert (job.lease_owner, job.attempts, job.retries) == (None, 0, 0)  # not a retry; the claim given back
        assert emulator_reset.stats()["rejections"] == {}  # no 429: it was never sent
    finally:
        for key in client.scan_iter(f"{RATE_LIMIT_KEYS}{{anthropic/*"):
            client.delete(key)


def test_the_fleets_share_of_a_shared_key_is_learned_from_refusals(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})
    assert limiter.reserve(ticket(provider, 1), input_tokens=60_000, output_tokens=0) == 0.0
    limiter.settle(ticket(provider, 1), sent=False, usage=None, stated={}, refused=True)  # a 429: another client
    limiter.settle(ticket(provider, 99), sent=False, usage=None, stated={}, refused=True)  # sent with it: no 2nd cut
    assert limiter.reserve(ticket(provider, 2), input_tokens=60_000, output_tokens=0) == 0.0  # it took nothing
    wait = limiter.reserve(ticket(provider, 3), input_tokens=6_000, output_tokens=0)
    assert wait == pytest.approx((6_000 + MARGIN * 60_000) / (1_000 * 0.85), abs=0.3)  # our share is down 15 %
    for step in range(4, 40):  # answers bring it back up, a little each
        limiter.settle(ticket(provider, step), sent=True, usage=Usage(input_tokens=0, output_tokens=0), stated={})
    share = client.hget(f"{RATE_LIMIT_KEYS}{{{provider}/claude-sonnet}}:limits", "share")
    assert share is not None and float(share) == pytest.approx(0.85 + 36 * 0.003)


def test_a_turn_told_too_early_is_checked_again_when_the_step_comes_back(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})  # 1,000 tokens a second
    assert limiter.reserve(ticket(provider, 1), input_tokens=30_000, output_tokens=0) == 0.0
    told = limiter.reserve(ticket(provider, 2), input_tokens=30_000, output_tokens=0)
    assert told == pytest.approx(MARGIN * 60, abs=0.5)  # the bucket is empty but for the margin
    # The first answer says the provider has 10,000 left, not 30,000: another client of the key took 20,000.
    stated = {"input_tokens": Budget(limit=60_000, remaining=10_000)}
    limiter.settle(ticket(provider, 1), sent=True, usage=Usage(input_tokens=30_000, output_tokens=0), stated=stated)
    again = limiter.reserve(ticket(provider, 2), input_tokens=30_000, output_tokens=0)
    assert again == pytest.approx(told + 20.0, abs=1.0)  # its turn is later by what the answer corrected
    assert limiter.reserve(ticket(provider, 3), input_tokens=1_000, output_tokens=0) > again  # still behind it


def test_an_answer_does_not_count_twice_what_it_has_already_seen(client: redis.Redis, provider: str) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})  # 1,000 tokens a second
    for step in (1, 2):
        assert limiter.reserve(ticket(provider, step), input_tokens=20_000, output_tokens=0) == 0.0
    # Both were sent before the first answer, which counts them both: 20,000 left. The second is still held, but
    # it is in that figure already.
    stated = {"input_tokens": Budget(limit=60_000, remaining=20_000)}
    limiter.settle(ticket(provider, 1), sent=True, usage=Usage(input_tokens=20_000, output_tokens=0), stated=stated)
    margin = MARGIN * 60_000
    assert limiter.reserve(ticket(provider, 3), input_tokens=int(20_000 - margin - 500), output_tokens=0) == 0.0


def test_what_was_admitted_after_an_answer_arrived_is_held_against_its_remaining(
    client: redis.Redis, provider: str
) -> None:
    limiter = Limiter(client, {f"{provider}/claude-sonnet": {"input_tokens": 60_000}})  # 1,000 tokens a second
    assert limiter.reserve(ticket(provider, 1), input_tokens=20_000, output_tokens=0) == 0.0
    answered = time.monotonic()  # the first answer arrives; another client of the key has taken 20,000
    time.sleep(0.05)
    assert limiter.reserve(ticket(provider, 2), input_tokens=10_000, output_tokens=0) == 0.0  # not in that answer
    stated = {"input_tokens": Budget(limit=60_000, remaining=20_000)}
    limiter.settle(
        ticket(provider, 1),
        sent=True,
        usage=Usage(input_tokens=20_000, output_tokens=0),
        stated=stated,
        answered_ago=time.monotonic() - answered,
    )
    # 20,000 left by the provider's count, less the 10,000 it has not seen: a step of 10,000 waits for the margin.
    wait = limiter.reserve(ticket(provider, 3), input_tokens=10_000, output_tokens=0)
    assert wait == pytest.approx(MARGIN * 60, abs=0.5)
