"""Admit and send: a planned request reserves its share of the provider's rate limits (worker/admission.py), or
gives its claim back and waits in the broker for its turn; then it goes to the model while the job's lease is kept
alive, and the reservation is corrected by what the request really counted."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from functools import partial

from redis.exceptions import RedisError

from models.tables import JobStatus
from worker.admission import Ticket
from worker.errors import ProviderError, RateLimited
from worker.lease import Heartbeat, give_back
from worker.metrics import ADMISSION_WAITS, CAPACITY_WAIT_HELD, RATE_LIMITED, count_usage
from worker.outages import in_transaction
from worker.providers import timeouts
from worker.providers.base import Reply, Usage
from worker.rate_limits import Budget
from worker.step.results import Outcome, Planned
from worker.step.services import Services

logger = logging.getLogger(__name__)


def admit(planned: Planned, job_id: int, owner: str, services: Services) -> Outcome | None:
    """Reserve the request's share of the provider's rate limits (None: send now). Without capacity now, the step
    is not started: it gives its claim back and is queued again for when its turn comes (not a retry)."""
    if services.limiter is None:
        return None
    try:
        wait = services.limiter.reserve(
            _ticket(planned, job_id), input_tokens=planned.counted_input, output_tokens=planned.max_tokens
        )
    except RedisError as error:  # the limiter is an improvement: without it, send as before
        logger.warning("job %s: admission unavailable (%s); sending", job_id, type(error).__name__)
        return None
    if wait <= 0:
        return None
    told = time.monotonic()
    ADMISSION_WAITS.observe(wait)
    in_transaction(
        services.database,
        partial(give_back, job_id=job_id, owner=owner, seconds=wait + services.settings.lease_seconds),
    )
    try:
        services.enqueue(job_id, planned.step, wait)
    except Exception as error:
        logger.warning(
            "job %s: step %s not queued (%s); the reconciler will", job_id, planned.step, type(error).__name__
        )
    CAPACITY_WAIT_HELD.labels("admission").observe(time.monotonic() - told)
    return Outcome(job_id, "waiting_for_capacity", planned.step, JobStatus.RUNNING, retry_in=wait)


def send(planned: Planned, job_id: int, owner: str, services: Services) -> tuple[Reply | ProviderError, float]:
    """The model's reply to the planned request, or how the request failed, and when that was known (on the
    monotonic clock); the job's lease is kept alive meanwhile."""
    try:
        deadline = timeouts(services.settings).deadline(planned.max_tokens)
        with Heartbeat(services.database, job_id, owner, seconds=services.settings.lease_seconds, for_seconds=deadline):
            reply = planned.provider.send(
                model=planned.model,
                system=planned.system,
                messages=planned.request,
                tools=planned.tools,
                max_tokens=planned.max_tokens,
                breakpoints=planned.breakpoints,
            )
            answered = time.monotonic()
    except ProviderError as error:
        answered = time.monotonic()
        limited = isinstance(error, RateLimited)
        stated = error.limits if isinstance(error, RateLimited) else {}
        if limited:
            RATE_LIMITED.inc()
        _settle(planned, job_id, services, None, stated, answered, refused=limited)
        return error, answered
    _settle(planned, job_id, services, reply.usage, reply.limits, answered)
    count_usage(reply.usage)
    return reply, answered


def _ticket(planned: Planned, job_id: int) -> Ticket:
    return Ticket(
        endpoint=planned.endpoint,
        provider=planned.provider_name,
        model=planned.model,
        job_id=job_id,
        step=planned.step,
        tenant=planned.tenant_id,
    )


def _settle(
    planned: Planned,
    job_id: int,
    services: Services,
    usage: Usage | None,
    stated: Mapping[str, Budget],
    answered: float,
    *,
    refused: bool = False,
) -> None:
    """Correct the step's reservation by what its request really counted (``answered``: when the answer
    arrived, on the monotonic clock)."""
    if services.limiter is None:
        return
    try:
        ticket = _ticket(planned, job_id)
        ago = time.monotonic() - answered
        services.limiter.settle(
            ticket, sent=usage is not None, usage=usage, stated=stated, refused=refused, answered_ago=ago
        )
    except RedisError as error:
        logger.warning("job %s: admission not corrected (%s)", job_id, type(error).__name__)
