"""A step's money: the budgets its request spends (models/budgets.py), the request's worst case, and the note that
tells the agent its job's budget (money, steps or input tokens) is nearly spent, so that it answers from what it
has instead of being cut off."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from redis.exceptions import RedisError
from sqlalchemy.orm import Session

from models.budgets import Budgets, Scope, Standing, job_scope, tenant_scopes
from models.costs import MILLION, worst_case
from models.jobs import FamilyUse, shared_limits
from models.limits import tenant_limits
from models.pricing import Prices, Unpriced, prices_of
from models.settings import Settings
from models.tables import Job, now
from plimsoll.notices import wind_down_note

logger = logging.getLogger(__name__)

Reason = Literal["money", "steps", "tokens"]
NOTE_TOKENS = 200  # the wind-down note's tokens and more: every request's worst case allows for it
LAST_ANSWER_MIN_TOKENS = 256  # a main job's last answer shortened to fit its money, but never shorter than this


@dataclass(frozen=True)
class Money:
    spends: tuple[Scope, ...]
    prices: Prices | None
    worst_usd: Decimal
    growth_usd: Decimal = Decimal(0)  # how much the worst case grew since the job's previous request


def money_of(
    session: Session,
    job: Job,
    settings: Settings,
    *,
    input_tokens: int,
    max_tokens: int,
    previous_input: int | None = None,
) -> Money:
    """The budgets a request of ``input_tokens`` (planned) and ``max_tokens`` spends, its worst case, and how much
    that grew since the job's previous request of ``previous_input`` tokens (planned the same way), if it had one."""
    main_id = job.parent_id if job.parent_id is not None else job.id
    limits = tenant_limits(session, job.tenant_id, settings)
    spends = (job_scope(job.tenant_id, main_id, job.max_cost_usd), *tenant_scopes(job.tenant_id, limits, now()))
    try:
        prices = prices_of(job.model, settings)
    except Unpriced:
        logger.warning("job %s: its model has no price; its budgets in money are not held", job.id)
        return Money(spends, None, Decimal(0))

    def worst(tokens: int) -> Decimal:
        return worst_case(
            prices, input_tokens=tokens, max_output_tokens=max_tokens, cache_ttl_seconds=settings.cache_ttl_seconds
        )

    now_worst = worst(input_tokens)
    grown = Decimal(0) if previous_input is None else max(Decimal(0), now_worst - worst(previous_input))
    return Money(spends, prices, now_worst, grown)


@dataclass(frozen=True)
class Left:
    reason: Reason
    steps: int  # about how many more steps it holds
    told: str  # what is left, in words
    room_usd: Decimal | None = None  # money: what is left once the requests in flight settle at nothing


def nearly_spent(
    job: Job, used: FamilyUse, money: Money, budgets: Budgets | None, *, expected_input: int, within: int
) -> Left | None:
    """The budget of ``job`` nearest its end, if it holds ``within`` more steps or fewer (at the average so far).
    ``used``: what the job's main job and its subagents have used of the steps and input tokens they share.

    In money, each step ahead costs the average so far, and this one is the last if, after it, the next request's
    worst case (grown as much as this one's grew since the previous request) could no longer be reserved. Counted
    at the average alone, a tight budget whose worst case grew faster than its spend let a job pass its last
    reservable step without the note, and it was then stopped without an answer."""
    if within <= 0 or not job.wind_down:
        return None
    limits = shared_limits(job)
    steps_left = max(0, limits.steps - used.steps)
    found = [Left("steps", steps_left, f"{steps_left:,} of its {job.max_steps:,} steps")]
    tokens_left = max(0, limits.input_tokens - used.input_tokens)
    per_step = max(expected_input, job.total_input_tokens // max(1, job.step))
    found.append(
        Left("tokens", tokens_left // max(1, per_step), f"{tokens_left:,} of its {job.max_input_tokens:,} input tokens")
    )
    if budgets is not None and money.prices is not None:
        scope = money.spends[0]
        try:
            standing = budgets.standing(scope)
        except RedisError as error:  # the note is an improvement: the reservation itself waits for Redis
            logger.warning("job %s: budgets unavailable for the wind-down (%s)", job.id, type(error).__name__)
            standing = Standing(spent=Decimal(0), held=Decimal(0))
        if standing.sent > 0 and scope.limit is not None:
            left = scope.limit - standing.spent - standing.held
            average = standing.spent / standing.sent
            if left < money.worst_usd:
                steps = 0
            elif left - average < money.worst_usd + money.growth_usd:
                steps = 1  # after this request the next could not be reserved
            else:
                steps = 1 + int((left - money.worst_usd) / max(average, Decimal("1e-9")))
            told = f"{max(left, Decimal(0)):.2f} of its {scope.limit:.2f} USD"
            found.append(Left("money", steps, told, room_usd=scope.limit - standing.spent))
    nearest = min(found, key=lambda each: each.steps)
    return nearest if nearest.steps <= within else None


@dataclass(frozen=True)
class Shortened:
    max_tokens: int
    worst_usd: Decimal


def last_answer(
    job: Job, money: Money, left: Left | None, *, input_tokens: int, max_tokens: int, cache_ttl_seconds: float
) -> Shortened | None:
    """A main job's request that its money cannot hold, shortened so that it can: the largest ``max_tokens``
    whose worst case fits what is left, if that is ``LAST_ANSWER_MIN_TOKENS`` or more. The request carries the
    wind-down note, so the agent answers from what it has (its subagents' findings included) instead of the job
    ending with its latest words, which, for a main job that waited on its subagents, say nothing of what they
    found. None: the request fits as it is, or not even the shortest answer does (the job ends as before)."""
    if job.parent_id is not None or left is None or left.room_usd is None or money.prices is None:
        return None
    if left.room_usd >= money.worst_usd:
        return None  # only requests in flight stand in the way: the step waits for them (worker/step/spend.py)
    rate = money.prices.rates_for(input_tokens).output
    reading = worst_case(
        money.prices, input_tokens=input_tokens, max_output_tokens=0, cache_ttl_seconds=cache_ttl_seconds
    )
    tokens = max_tokens if rate <= 0 else min(max_tokens, int((left.room_usd - reading) * MILLION / rate))
    if tokens < min(LAST_ANSWER_MIN_TOKENS, max_tokens):
        return None
    worst = worst_case(
        money.prices, input_tokens=input_tokens, max_output_tokens=tokens, cache_ttl_seconds=cache_ttl_seconds
    )
    return Shortened(tokens, worst)


def with_note(request: list[dict[str, Any]], left: Left) -> list[dict[str, Any]]:
    """The request with the wind-down note at the end of its last user message (the stored history is unchanged)."""
    note = {"type": "text", "text": wind_down_note(left.told, max(1, left.steps))}
    if not request or request[-1]["role"] != "user":
        return [*request, {"role": "user", "content": [note]}]
    last = request[-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return [*request[:-1], {**last, "content": [*blocks, note]}]
