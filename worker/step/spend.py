"""Spend: before a request is sent, its worst case is held in every money budget it spends (its main job's, its
tenant's day's and month's: models/budgets.py), in the Redis every worker shares; after the reply the hold becomes
the real cost, and a request not sent gives it back.

A request that does not fit waits or ends its job:
- its main job's budget cannot hold it even with nothing else in flight: the job ends ``incomplete``
  (worker/step/endings.py ``out_of_money``);
- its tenant's day or month cannot: the step gives its claim back and waits in the broker, holding no worker,
  lease or admission tokens, and looks again after ``budget_recheck_seconds`` or when the period turns, whichever
  comes first; a budget the operator raised lets it go on;
- only requests in flight (its subagents', its tenant's other jobs') stand in the way: it waits a moment for them
  to settle, since stopping it would stop a job whose budget holds its request."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from decimal import Decimal
from functools import partial

from redis.exceptions import RedisError

from models.budgets import Scope
from models.costs import cost_of
from models.tables import JobStatus, now
from worker.lease import give_back
from worker.outages import in_transaction
from worker.providers import timeouts
from worker.providers.base import Usage
from worker.step.endings import out_of_money
from worker.step.results import Decided, Outcome, Planned
from worker.step.services import Services, store_surviving_outages

logger = logging.getLogger(__name__)

IN_FLIGHT_WAIT_SECONDS = 2.0  # a request kept out only by others in flight looks again this soon
REDIS_WAIT_SECONDS = 5.0  # and one kept out by the shared Redis out of reach (a restart takes seconds)


@dataclass(frozen=True)
class Hold:
    """The worst case of one delivery's request, held in its budgets until settled."""

    ticket: str
    scopes: tuple[Scope, ...]
    planned: Planned


def hold(planned: Planned, job_id: int, owner: str, services: Services) -> Hold | Decided | Outcome | None:
    """Hold the request's worst case (a ``Hold``: send it), or decide it waits (an ``Outcome``) or ends the job
    (``Decided``, committed); None: no budgets to hold in (no shared Redis, or the model has no price)."""
    budgets = services.budgets
    if budgets is None or planned.prices is None or not planned.spends:
        return None
    ticket = f"{job_id}:{planned.step}:{owner}:{uuid.uuid4().hex[:8]}"
    settings = services.settings
    lives = timeouts(settings).deadline(planned.max_tokens) + settings.store_retry_seconds + settings.lease_seconds
    try:
        over = budgets.reserve(ticket, planned.spends, planned.worst_usd, hold_seconds=lives)
    except RedisError as error:
        # Budgets are a promise: without the shared Redis nothing is sent that could pass one (the step waits).
        logger.warning("job %s: budgets unavailable (%s); the step waits", job_id, type(error).__name__)
        return _wait(planned, job_id, owner, services, min(REDIS_WAIT_SECONDS, settings.budget_recheck_seconds))
    if over is None:
        return Hold(ticket, planned.spends, planned)
    scope = over.scope
    if scope.limit is not None and over.spent + over.asked <= scope.limit:
        return _wait(planned, job_id, owner, services, IN_FLIGHT_WAIT_SECONDS)  # others in flight: soon
    if scope.kind == "job":
        return store_surviving_outages(services, partial(out_of_money, job_id=job_id, planned=planned, over=over))
    resets = ((scope.end or now()) - now()).total_seconds()
    return _wait(planned, job_id, owner, services, max(1.0, min(settings.budget_recheck_seconds, resets)))


def settle(held: Hold | None, services: Services, usage: Usage | None) -> None:
    """The hold becomes what the request cost (its ``usage``; None: it was not answered, and billed nothing)."""
    if held is None or services.budgets is None or held.planned.prices is None:
        return
    cost = Decimal(0)
    if usage is not None:
        cost = cost_of(
            held.planned.prices,
            uncached=usage.input_tokens,
            written=usage.cache_write_tokens,
            read=usage.cache_read_tokens,
            output=usage.output_tokens,
            cache_ttl_seconds=services.settings.cache_ttl_seconds,
        ).total
    try:
        services.budgets.settle(held.ticket, held.scopes, cost)
    except RedisError as error:  # the hold expires; the ledger has the charge for a rebuild
        logger.warning("budgets: a hold was not settled (%s)", type(error).__name__)


def _wait(planned: Planned, job_id: int, owner: str, services: Services, seconds: float) -> Outcome:
    """The step gives its claim back and comes back in ``seconds``, holding nothing meanwhile."""
    lease = services.settings.lease_seconds
    in_transaction(services.database, partial(give_back, job_id=job_id, owner=owner, seconds=seconds + lease))
    try:
        services.enqueue(job_id, planned.step, seconds)
    except Exception as error:
        logger.warning(
            "job %s: step %s not queued (%s); the reconciler will", job_id, planned.step, type(error).__name__
        )
    return Outcome(job_id, "waiting_for_budget", planned.step, JobStatus.RUNNING, retry_in=seconds)
