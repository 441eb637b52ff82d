"""The routing table: from a classified failure to what the worker does."""

from __future__ import annotations

import random

import pytest

from models.statuses import JobStatus
from plimsoll.notices import TOO_LONG_NOTICE, TOO_LONG_NOTICES
from worker.backoff import BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS, backoff_delay
from worker.errors import AuthFailure, InvalidRequest, ProviderError, TooLong, Transient
from worker.routing import Action, route

TOO_LONG = TooLong("prompt is too long", status=400, provider="anthropic")
BUSY = Transient("Overloaded", status=529, provider="anthropic")
INVALID = InvalidRequest("bad", status=400, provider="openai")
AUTH = AuthFailure("invalid x-api-key", status=401, provider="anthropic")

FAIL_AND_REPORT = Action(retry=False, delay=None, job_status=JobStatus.FAILED, notice=None, report_to_sentry=True)
NEW_CHAT = Action(
    retry=False, delay=None, job_status=JobStatus.NEEDS_NEW_CHAT, notice=TOO_LONG_NOTICE, report_to_sentry=False
)


@pytest.mark.parametrize(
    ("error", "attempt", "max_attempts", "expected"),
    [
        (TOO_LONG, 1, 5, NEW_CHAT),
        (TOO_LONG, 5, 5, NEW_CHAT),  # never retried, never reported, however many attempts are left
        (INVALID, 1, 5, FAIL_AND_REPORT),
        (AUTH, 1, 5, FAIL_AND_REPORT),
        (ProviderError("unknown", provider="p"), 1, 5, FAIL_AND_REPORT),
        (BUSY, 5, 5, FAIL_AND_REPORT),  # out of attempts
        (BUSY, 1, 1, FAIL_AND_REPORT),
    ],
)
def test_terminal_routes(error: ProviderError, attempt: int, max_attempts: int, expected: Action) -> None:
    assert route(error, attempt=attempt, max_attempts=max_attempts) == expected


@pytest.mark.parametrize("attempt", [1, 2, 3, 4])
def test_transient_errors_are_retried_with_jittered_backoff(attempt: int) -> None:
    action = route(BUSY, attempt=attempt, max_attempts=5, rng=random.Random(attempt))
    assert (action.retry, action.job_status, action.notice, action.report_to_sentry) == (True, None, None, False)
    assert action.delay is not None
    assert 0 <= action.delay <= BACKOFF_BASE_SECONDS * 2 ** (attempt - 1)


def test_the_backoff_is_full_jitter_and_capped() -> None:
    rng = random.Random(1)
    first = [backoff_delay(1, None, rng) for _ in range(2000)]
    late = [backoff_delay(30, None, rng) for _ in range(2000)]
    assert max(first) <= BACKOFF_BASE_SECONDS and min(first) < 0.05 * BACKOFF_BASE_SECONDS
    assert max(late) <= BACKOFF_CAP_SECONDS and max(late) > 0.9 * BACKOFF_CAP_SECONDS
    assert 0.4 * BACKOFF_CAP_SECONDS < sum(late) / len(late) < 0.6 * BACKOFF_CAP_SECONDS
    assert backoff_delay(10_000, None, rng) <= BACKOFF_CAP_SECONDS  # no overflow on absurd attempt counts


def test_the_same_seed_gives_the_same_delays() -> None:
    delays = [route(BUSY, attempt=n, max_attempts=9, rng=random.Random(3)).delay for n in range(1, 8)]
    again = [route(BUSY, attempt=n, max_attempts=9, rng=random.Random(3)).delay for n in range(1, 8)]
    assert delays == again


@pytest.mark.parametrize("retry_after", [0.0, 0.5, 30.0, 600.0])
def test_never_sooner_than_retry_after(retry_after: float) -> None:
    error = Transient("slow down", status=429, provider="anthropic", retry_after=retry_after)
    rng = random.Random(0)
    for attempt in (1, 2, 6):
        delay = route(error, attempt=attempt, max_attempts=9, rng=rng).delay
        assert delay is not None and delay >= retry_after


def test_the_notice_follows_the_persons_language() -> None:
    assert route(TOO_LONG, attempt=1, max_attempts=3, locale="cs-CZ").notice == TOO_LONG_NOTICES["cs"]


@pytest.mark.parametrize(("attempt", "max_attempts"), [(0, 3), (1, 0), (-1, -1)])
def test_nonsense_attempt_counts_are_refused(attempt: int, max_attempts: int) -> None:
    with pytest.raises(ValueError, match="start at 1"):
        route(BUSY, attempt=attempt, max_attempts=max_attempts)
