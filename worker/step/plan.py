"""Plan: the request of a job's next step within its budget, over its latest summary, or a summary request when a
compaction is due (worker/compaction.py); the delegate results it waits for are gathered first."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from models.endpoints import host_of
from models.jobs import FamilyUse, family_use, last_step
from models.statuses import CALIBRATED
from models.tables import Job, Step, Strategy, now
from plimsoll import CacheView, Calibrator, DoesNotFit, Outline, Plan, estimate_tokens, get_profile, outline
from plimsoll.economics import plan_economic
from plimsoll.fitting import Batching, plan_history
from plimsoll.history import History
from plimsoll.messages import BLOCK_OVERHEAD, MESSAGE_OVERHEAD
from worker.admission import planned_input
from worker.compaction import Stored, compose
from worker.legacy import legacy_plan
from worker.money import NOTE_TOKENS, last_answer, money_of, nearly_spent, with_note
from worker.prompts import system_prompt
from worker.step.results import Planned
from worker.step.services import Services
from worker.step.subagents import delegate_results
from worker.tools import tools_for


class NothingFits(Exception):
    """Even the smallest request we may send is over the budget; ``first_fits`` says whether the job's first
    message with its newest round of tool results fits the job's budget (if not, the budget is too small, not
    the conversation too long: a new chat would not fit either)."""

    def __init__(
        self, error: DoesNotFit, carried: list[dict[str, Any]], *, smallest: int, factor: float, budget: int
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.carried = carried
        self.smallest, self.factor = smallest, factor  # that request's estimate, and the calibration factor
        self.first_fits = smallest <= budget


def prepare(session: Session, job: Job, services: Services, *, used: FamilyUse | None = None) -> Planned | None:
    """The request of the job's next step; None while subagents it waits for are still at work. ``used``: the
    family's use, if the caller has just read it in this transaction."""
    index = services.histories.index(session, job.id)
    outlines = index.outlines
    carried: list[dict[str, Any]] = []
    if outlines[-1].role == "assistant" and outlines[-1].tool_uses:
        results = delegate_results(session, job, outlines[-1].tool_uses, len(outlines) - 1, services.settings)
        if results is None:
            return None
        carried = [results]
    carried_outlines = [outline(m, job.profile) for m in carried]
    every = [*outlines, *carried_outlines]
    system, tools = system_prompt(job), tools_for(job)
    overhead = request_overhead(system, tools, job.profile)
    calibrator = Calibrator.from_dict(job.calibration, floor=services.settings.calibration_floor)
    factor = calibrator.factor if job.strategy in CALIBRATED else 1.0
    paced = calibrator.pacing_factor if job.strategy in CALIBRATED else 1.0  # what the rate limits will count
    planning_budget = int(job.budget / factor)
    previous = last_step(session, job.id)
    cache = cache_view(previous, ttl_seconds=services.settings.cache_ttl_seconds, at=now())
    planner = partial(_plan, job, budget=planning_budget, overhead=overhead, cache=cache)
    try:  # over the job's latest summary; a summary request instead when a compaction is due
        composed = compose(
            session,
            job,
            Stored(every, index.history(carried_outlines), carried, services.histories, previous),
            planner,
            budget=planning_budget,
            overhead=overhead,
            cache_ttl_seconds=services.settings.cache_ttl_seconds,
        )
    except DoesNotFit as error:
        # A new chat starts from the first message (its hand-over repeats the instruction) and needs a round of
        # tool results to get anywhere: if the job's budget cannot hold those, a new chat would fail as well.
        newest_round = next((i for i in range(len(every) - 1, 0, -1) if every[i].role == "assistant"), len(every))
        smallest = every[0].tokens + overhead + sum(o.tokens for o in every[newest_round:])
        raise NothingFits(error, carried, smallest=smallest, factor=factor, budget=planning_budget) from error
    max_tokens = composed.max_tokens or job.max_output_tokens
    expected = int(composed.plan.tokens * factor)
    previous_input = None if previous is None else int(previous.estimated_tokens * factor) + NOTE_TOKENS
    money = money_of(
        session,
        job,
        services.settings,
        input_tokens=expected + NOTE_TOKENS,
        max_tokens=max_tokens,
        previous_input=previous_input,
    )
    request, left = composed.request, None
    if composed.compaction is None:
        within = services.settings.wind_down_steps
        used = used if used is not None else family_use(session, job.parent_id or job.id, besides=job.id)
        left = nearly_spent(job, used, money, services.budgets, expected_input=expected, within=within)
        request = request if left is None else with_note(request, left)
        shortened = last_answer(
            job,
            money,
            left,
            input_tokens=expected + NOTE_TOKENS,
            max_tokens=max_tokens,
            cache_ttl_seconds=services.settings.cache_ttl_seconds,
        )
        if shortened is not None:
            max_tokens, money = shortened.max_tokens, replace(money, worst_usd=shortened.worst_usd)
    return Planned(
        step=job.step,
        strategy=job.strategy,
        provider=services.provider_for(job),
        provider_name=job.provider,
        endpoint=host_of(job.endpoint) if job.endpoint else "",
        model=job.model,
        max_tokens=max_tokens,
        system=system if composed.system is None else composed.system,
        tools=tools if composed.tools is None else composed.tools,
        request=request,
        chosen=composed.plan,
        planning_budget=planning_budget,
        factor=factor,
        carried=carried,
        breakpoints=composed.breakpoints,
        compaction=composed.compaction,
        tenant_id=job.tenant_id,
        spends=money.spends,
        prices=money.prices,
        worst_usd=money.worst_usd,
        wind_down=None if left is None else left.reason,
        counted_input=planned_input(
            tokens=int(composed.plan.tokens * paced),
            provider=job.provider,
            cached_prefix=expected_cached_prefix(previous, cache, composed.plan, paced),
        ),
    )


def expected_cached_prefix(previous: Step | None, cache: CacheView, chosen: Plan, factor: float) -> int:
    """The tokens the request should read from the prompt cache, if the cache is still warm and the plan clears
    nothing new (otherwise taken as none): the share of the previous request it read from the cache or wrote to
    it, taken of that request's estimate at the factor the request is expected at. Counted as the rest of the
    request is, an estimate's error falls on the whole request alike, not all of it on the part that counts."""
    if previous is None or not previous.reported_input_tokens or cache.cold:
        return 0
    if set(chosen.cleared) != set(cache.previous_cleared or ()):
        return 0
    cached = previous.cache_read_tokens + previous.cache_write_tokens
    return int(previous.estimated_tokens * min(1.0, cached / previous.reported_input_tokens) * factor)


def _plan(
    job: Job, every: list[Outline], history: History, *, budget: int, overhead: int, cache: CacheView
) -> tuple[Plan, tuple[int, ...]]:
    """What the next request sends, and where the provider's cache breakpoints go (empty: the adapter's own).
    Plimsoll's strategy clears where the prompt cache makes it cheapest, from what it knows of the previous
    request; the reproductions of the published failures fit as they did."""
    if job.strategy == Strategy.LEGACY:
        return legacy_plan(every, budget, profile=job.profile, overhead=overhead), ()
    if job.strategy == Strategy.PLIMSOLL:
        profile = get_profile(job.profile)
        cached = plan_economic(history, budget, profile=profile, overhead=overhead, cache=cache)
        return cached.plan, cached.breakpoints
    batching: Batching = "one" if job.strategy == Strategy.UNBATCHED else "four"
    return plan_history(history, budget, profile=get_profile(job.profile), overhead=overhead, batching=batching), ()


def cache_view(previous: Step | None, *, ttl_seconds: float, at: datetime) -> CacheView:
    """What the prompt cache holds of a job, as far as its previous request tells: what that request cleared
    and how long ago it was sent."""
    if previous is None or previous.reported_input_tokens is None:  # nothing was sent, or nothing came back
        return CacheView(ttl_seconds=ttl_seconds)
    sent = previous.created_at if previous.created_at.tzinfo else previous.created_at.replace(tzinfo=UTC)
    idle = (at - sent).total_seconds()
    return CacheView(ttl_seconds=ttl_seconds, idle_seconds=idle, previous_cleared=tuple(previous.cleared))


def request_overhead(system: str, tools: Sequence[dict[str, Any]], profile: str) -> int:
    """Estimated tokens of the system prompt and the tool schemas, with their framing."""
    schemas = sum(estimate_tokens(json.dumps(tool, ensure_ascii=False), profile) + BLOCK_OVERHEAD for tool in tools)
    return estimate_tokens(system, profile) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD + schemas + MESSAGE_OVERHEAD
