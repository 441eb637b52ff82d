"""What the worker does about a failed model request: one pure function from the kind of failure to an action.

| failure                      | retry                  | job status       | notice for the person | Sentry |
|------------------------------|------------------------|------------------|-----------------------|--------|
| TooLong                      | never                  | needs_new_chat   | TOO_LONG_NOTICE       | no     |
| Transient, attempts left     | after backoff          | (unchanged)      | none                  | no     |
| Transient, attempts used up  | no                     | failed           | none                  | yes    |
| Unreachable, attempts used up | no                    | failed           | the host, the setting | yes    |
| RateLimited, within the wait | after retry-after + jitter, not counted as an attempt | (unchanged) | none | no |
| RateLimited, waited too long | no                     | failed           | none                  | yes    |
| InvalidRequest, AuthFailure  | never                  | failed           | none                  | yes    |
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from models.endpoints import base_url_variables
from models.statuses import JobStatus
from models.tables import Job
from plimsoll.notices import stopped_notice, too_long_notice
from worker.backoff import JITTER, backoff_delay, rate_limit_delay
from worker.errors import ProviderError, RateLimited, TooLong, Transient, Unreachable


@dataclass(frozen=True)
class Action:
    retry: bool
    delay: float | None
    """Seconds to wait before the retry; None when not retrying."""
    job_status: JobStatus | None
    """The job's new status; None while it is being retried."""
    notice: str | None
    """What the person is told, if anything."""
    report_to_sentry: bool


def route(
    error: ProviderError,
    *,
    attempt: int,
    max_attempts: int,
    rng: random.Random | None = None,
    locale: str | None = None,
    waited_seconds: float = 0.0,
    max_wait_seconds: float = math.inf,
    setting: str = "the provider's base URL",
) -> Action:
    """The action after ``attempt`` (1 for the first try) of at most ``max_attempts`` failed with ``error``.
    ``locale`` picks the language of the notices (English by default); ``setting`` is what the unreachable
    notice asks the person to check (``endpoint_setting``). A rate limit is a wait, not a failed attempt: it is
    waited out until the step has waited ``max_wait_seconds`` in all (``waited_seconds`` so far)."""
    if attempt < 1 or max_attempts < 1:
        raise ValueError(f"attempt and max_attempts start at 1, got attempt={attempt}, max_attempts={max_attempts}")
    if isinstance(error, TooLong):
        return Action(
            retry=False,
            delay=None,
            job_status=JobStatus.NEEDS_NEW_CHAT,
            notice=too_long_notice(locale),
            report_to_sentry=False,
        )
    if isinstance(error, RateLimited) and waited_seconds < max_wait_seconds:
        delay = rate_limit_delay(error.retry_after, waited_seconds, rng or JITTER)
        return Action(retry=True, delay=delay, job_status=None, notice=None, report_to_sentry=False)
    if isinstance(error, RateLimited):
        return Action(retry=False, delay=None, job_status=JobStatus.FAILED, notice=None, report_to_sentry=True)
    if isinstance(error, Transient) and attempt < max_attempts:
        return Action(
            retry=True,
            delay=backoff_delay(attempt, error.retry_after, rng or JITTER),
            job_status=None,
            notice=None,
            report_to_sentry=False,
        )
    notice = (
        stopped_notice("unreachable", locale, host=error.host, setting=setting)
        if isinstance(error, Unreachable)
        else None
    )
    return Action(retry=False, delay=None, job_status=JobStatus.FAILED, notice=notice, report_to_sentry=True)


def endpoint_setting(job: Job) -> str:
    """The setting that points the job's requests at their host, as the unreachable notice names it: the
    bundled emulator's URL for a job the emulator answers (as the job recorded it, models/endpoints.py), else the
    provider's base URL (the SDK's own variable, and Plimsoll's beside it)."""
    if job.emulator:
        return "PLIMSOLL_EMULATOR_URL"
    plimsolls, sdks = base_url_variables(job.provider)
    return f"{sdks} (or {plimsolls})"
