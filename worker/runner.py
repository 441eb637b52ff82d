"""One step of a job: claim it, plan the request within the budget, send it, store what came back, hand off.

A step is a plain function of a job id and the step number it is for, so it runs the same under Celery, in the
in-process worker and in tests. It is exactly-once by that number: the claim and the store each lock the job's
row and check that the job is still at that step, so a late or duplicate delivery does nothing, and a second
delivery never calls the model while the first holds the step's lease (worker/lease.py). The next step is queued
only after the store commits; if that enqueue is lost, the job's deadline brings it back through the reconciler.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, TypeVar

import sentry_sdk
from redis.exceptions import RedisError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.catalogue import MIN_BUDGET
from models.db import Database
from models.endpoints import host_of
from models.history import append_messages, message_bodies, message_index
from models.jobs import children_of, create_job, end_job, last_step
from models.model_facts import endpoint_of, learned_limits, observe_model
from models.options import JobOptions
from models.settings import Settings
from models.statuses import CALIBRATED
from models.tables import Job, JobKind, JobStatus, Message, Notice, Step, Strategy, now
from plimsoll import (
    CacheView,
    Calibrator,
    DoesNotFit,
    Outline,
    Plan,
    estimate_tokens,
    outline,
    plan,
    plan_cached,
)
from plimsoll.compaction import Compaction
from plimsoll.fitting import Batching
from plimsoll.messages import BLOCK_OVERHEAD, MESSAGE_OVERHEAD
from plimsoll.notices import new_chat_notice, stopped_notice
from worker.admission import Limiter, Ticket, planned_input
from worker.budget_needed import budget_needed
from worker.compaction import compose, store_summary
from worker.errors import ProviderError, RateLimited, TooLong
from worker.lease import Heartbeat, deadline, give_back, held_by_another, release
from worker.legacy import legacy_plan
from worker.metrics import ADMISSION_WAITS, CAPACITY_WAIT_HELD, RATE_LIMIT_WAITS, RATE_LIMITED, count_usage
from worker.model_limits import learn_limits, within_learned_limits
from worker.outages import DatabaseUnavailable, in_transaction, surviving_outages
from worker.prompts import system_prompt
from worker.providers import timeouts
from worker.providers.base import Provider, Reply, Usage
from worker.rate_limits import Budget
from worker.routing import endpoint_setting, route
from worker.runaway import count_calls, fingerprint, with_warning
from worker.tenant_cap import over_cap, waiting_jobs
from worker.tools import Delegation, result, run_tool, tools_for
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)
T = TypeVar("T")
Enqueue = Callable[[int, int | None, float | None], None]  # (job id, step or None for the current one, delay)
CONTINUE_AFTER_CUT_OFF = "(Your reply was cut off at the output limit. Continue exactly where it stopped.)"
MAX_CONTINUATIONS = 3  # a reply cut off this many times running is taken as the answer, not asked for again


@dataclass
class Services:
    """What a step needs from the outside world."""

    database: Database
    settings: Settings
    provider_for: Callable[[Job], Provider]
    enqueue: Enqueue
    report: Callable[[BaseException], Any] = sentry_sdk.capture_exception
    limiter: Limiter | None = None  # admission under the provider's rate limits (None: send at once)


@dataclass(frozen=True)
class Outcome:
    job_id: int
    action: Literal[
        "continued",
        "waiting",
        "finished",
        "retry",
        "rate_limited",
        "waiting_for_capacity",
        "waiting_for_slot",
        "skipped",
    ]
    step: int
    status: str
    stage: str | None = None
    estimated_tokens: int | None = None
    reported_tokens: int | None = None
    retry_in: float | None = None

    def summary(self) -> dict[str, Any]:
        """What Flower shows as the task's result, the most telling first: Flower cuts the column short, and its
        args column already names the job and the step."""
        order = ("status", "action", "stage", "estimated_tokens", "reported_tokens", "retry_in", "job_id", "step")
        return {k: getattr(self, k) for k in order if getattr(self, k) is not None}


@dataclass
class _Prepared:
    """A step's request, decided in the first transaction and sent outside of any."""

    step: int
    strategy: Strategy
    provider: Provider
    provider_name: str
    endpoint: str  # the host it goes to, which admission keeps limits for
    model: str
    max_tokens: int
    system: str
    tools: list[dict[str, Any]]
    request: list[dict[str, Any]]
    chosen: Plan
    planning_budget: int
    factor: float
    carried: list[dict[str, Any]] = field(default_factory=list)  # stored with the reply: delegate results
    seconds: float = 0.0  # time spent in our code
    rejected: tuple[int, int] | None = None  # a first attempt rejected as too long: (our estimate, its real size)
    breakpoints: tuple[int, ...] = ()  # request messages ending a prefix the next requests keep
    compaction: Compaction | None = None  # the request asks for a summary of this range (worker/compaction.py)
    counted_input: int = 0  # what the request is expected to count against the provider's input-token limit
    tenant_id: int = 0  # whose share of the admission line the request takes
    refused_at: float | None = None  # when the provider refused the request with 429 (time.monotonic)


def run_step(job_id: int, services: Services, *, step: int | None = None) -> Outcome:
    """Run step ``step`` (the job's current one when None) of job ``job_id``. A database outage raises
    ``DatabaseUnavailable`` before the model is called; after it, the reply is stored through the outage."""
    started = time.perf_counter()
    owner = uuid.uuid4().hex
    if step in (None, 0):
        _learn_limits(job_id, services)
    begun = in_transaction(services.database, lambda session: _begin(session, job_id, step, owner, services))
    if isinstance(begun, Outcome):
        return begun
    if isinstance(begun, _Done):
        return _after_commit(begun, services)
    prepared = begun
    prepared.seconds = time.perf_counter() - started
    waiting = _wait_for_capacity(prepared, job_id, owner, services)
    if waiting is not None:
        return waiting
    answer = _send(prepared, job_id, owner, services)
    if isinstance(answer, TooLong) and prepared.compaction is not None:  # the job goes on without the summary
        skipped = _store_surviving_outages(
            services, partial(_compaction_refused, job_id=job_id, prepared=prepared, error=answer, services=services)
        )
        return _after_commit(skipped, services)
    if isinstance(answer, TooLong) and answer.tokens and prepared.strategy in CALIBRATED:
        # A rejection that states the real size is a measurement: plan once more with it, a smaller request.
        replanned = _store_surviving_outages(
            services, partial(_replanned, job_id=job_id, prepared=prepared, error=answer, services=services)
        )
        if not isinstance(replanned, _Prepared):
            return _after_commit(replanned, services)
        prepared = replanned
        answer = _send(prepared, job_id, owner, services)
    if isinstance(answer, ProviderError):
        failed = _store_surviving_outages(
            services, partial(_unanswered, job_id=job_id, prepared=prepared, error=answer, services=services)
        )
        outcome = _after_commit(failed, services)
        if prepared.refused_at is not None:  # a 429: the step waits in the broker, not in this process
            RATE_LIMIT_WAITS.observe(outcome.retry_in or 0.0)
            CAPACITY_WAIT_HELD.labels("rate_limited").observe(time.monotonic() - prepared.refused_at)
        return outcome
    storing = time.perf_counter()
    try:
        stored = _store_surviving_outages(
            services,
            partial(_answered, job_id=job_id, prepared=prepared, reply=answer, services=services, started=storing),
        )
    except DatabaseUnavailable:
        usage = answer.usage
        logger.error(
            "job %s: a paid reply to step %s was dropped, the database being unavailable for %.0f s; it will be paid "
            "again (input %d, cache read %d, cache write %d, output %d tokens)",
            job_id, prepared.step, services.settings.store_retry_seconds, usage.input_tokens,
            usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens,
        )  # fmt: skip
        raise
    return _after_commit(stored, services)


def fail_after_internal_error(job_id: int, step: int | None, error: Exception, services: Services) -> Outcome:
    """A step raised what nothing here expects: a defect, not a fault of the provider or the database (those have
    their own handling). Delivered again it would raise again at every deadline, so the job fails at once, naming
    the error's type but never its text, its main job is woken, and the error is reported once."""
    services.report(error)

    def end(session: Session) -> _Done | Outcome:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or job.status.finished or (step is not None and job.step != step):
            return Outcome(job_id, "skipped", job.step if job else 0, job.status if job else "missing")
        why = f"an internal error ({type(error).__name__}) stopped the job at step {job.step + 1}; it was reported"
        end_job(job, JobStatus.FAILED, error=why)
        return _Done(Outcome(job.id, "finished", job.step, job.status), _wake_parent(session, job))

    return _after_commit(_store_surviving_outages(services, end), services)


def _send(prepared: _Prepared, job_id: int, owner: str, services: Services) -> Reply | ProviderError:
    """The model's reply to the prepared request, or how the request failed; the job's lease is kept alive."""
    try:
        deadline = timeouts(services.settings).deadline(prepared.max_tokens)
        with Heartbeat(services.database, job_id, owner, seconds=services.settings.lease_seconds, for_seconds=deadline):
            reply = prepared.provider.send(
                model=prepared.model,
                system=prepared.system,
                messages=prepared.request,
                tools=prepared.tools,
                max_tokens=prepared.max_tokens,
                breakpoints=prepared.breakpoints,
            )
            answered = time.monotonic()
    except ProviderError as error:
        answered = time.monotonic()
        limited = isinstance(error, RateLimited)
        stated = error.limits if isinstance(error, RateLimited) else {}
        if limited:
            RATE_LIMITED.inc()
            prepared.refused_at = time.monotonic()
        _settle(prepared, job_id, services, None, stated, answered, refused=limited)
        return error
    _settle(prepared, job_id, services, reply.usage, reply.limits, answered)
    count_usage(reply.usage)
    return reply


def _ticket(prepared: _Prepared, job_id: int) -> Ticket:
    return Ticket(
        endpoint=prepared.endpoint,
        provider=prepared.provider_name,
        model=prepared.model,
        job_id=job_id,
        step=prepared.step,
        tenant=prepared.tenant_id,
    )


def _wait_for_capacity(prepared: _Prepared, job_id: int, owner: str, services: Services) -> Outcome | None:
    """Reserve the request's share of the provider's rate limits. Without capacity now, the step is not
    started: it gives its claim back and is queued again for when its turn comes (not a retry)."""
    if services.limiter is None:
        return None
    try:
        wait = services.limiter.reserve(
            _ticket(prepared, job_id), input_tokens=prepared.counted_input, output_tokens=prepared.max_tokens
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
        services.enqueue(job_id, prepared.step, wait)
    except Exception as error:
        logger.warning(
            "job %s: step %s not queued (%s); the reconciler will", job_id, prepared.step, type(error).__name__
        )
    CAPACITY_WAIT_HELD.labels("admission").observe(time.monotonic() - told)
    return Outcome(job_id, "waiting_for_capacity", prepared.step, JobStatus.RUNNING, retry_in=wait)


def _settle(
    prepared: _Prepared,
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
        ticket = _ticket(prepared, job_id)
        ago = time.monotonic() - answered
        services.limiter.settle(
            ticket, sent=usage is not None, usage=usage, stated=stated, refused=refused, answered_ago=ago
        )
    except RedisError as error:
        logger.warning("job %s: admission not corrected (%s)", job_id, type(error).__name__)


def _store_surviving_outages(services: Services, work: Callable[[Session], T]) -> T:
    return surviving_outages(services.database, work, seconds=services.settings.store_retry_seconds)


def _learn_limits(job_id: int, services: Services) -> None:
    """Before a job's first step, learn its model's limits from the provider (at most daily per model). Only
    an improvement: whatever goes wrong here, the step goes on with the limits it has."""
    try:
        job = in_transaction(services.database, lambda session: session.get(Job, job_id))
        if job is not None and job.step == 0 and job.strategy in CALIBRATED:
            provider = services.provider_for(job)
            learn_limits(services.database, provider, endpoint=endpoint_of(job), model=job.model, profile=job.profile)
    except Exception as error:
        logger.info(
            "job %s: the model's limits were not learned (%s)\n%s",
            job_id,
            type(error).__name__,
            scrubbed_traceback(error),
        )


def _begin(
    session: Session, job_id: int, step: int | None, owner: str, services: Services
) -> Outcome | _Done | _Prepared:
    """Claim the job's current step, settle what needs no model call, and plan the request."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.status.finished:
        return Outcome(job_id, "skipped", job.step if job else 0, job.status if job else "missing")
    if step is not None and job.step != step:
        return Outcome(job_id, "skipped", step, job.status)  # a late or duplicate delivery: the step is done
    if held_by_another(job, now()):
        return Outcome(job_id, "skipped", job.step, job.status)  # another delivery is running this step
    settings = services.settings
    job.lease_owner, job.lease_until = owner, deadline(settings.lease_seconds)
    job.requeues = 0  # claimed: its step message arrived
    if _parent_gone(session, job):
        end_job(job, JobStatus.CANCELLED, error="the main job was cancelled or has ended")
        return Outcome(job_id, "finished", job.step, job.status)
    if job.step >= job.max_steps:
        steps = f"{job.step} step{'' if job.step == 1 else 's'}"
        return _stop(session, job, f"stopped after {steps}, the limit of this job", "steps", steps=job.step)
    if job.status == JobStatus.QUEUED:
        if over_cap(session, job, settings):  # it waits queued; the end of one of its tenant's jobs queues it
            release(job, seconds=settings.lease_seconds)
            return Outcome(job_id, "waiting_for_slot", job.step, job.status)
        job.status, job.started_at = JobStatus.RUNNING, now()
    if job.strategy in CALIBRATED:
        known = learned_limits(session, endpoint_of(job), job.model)
        within_learned_limits(job, known[:2] if known else None)
    try:
        prepared = _prepare(session, job, services)
    except _NothingFits as nothing:
        error = TooLong(str(nothing.error), provider="plimsoll")
        return _failed(session, job, error, services, nothing=nothing)
    if prepared is None:  # subagents still at work: they wake the job; the deadline is a safety net
        release(job, seconds=settings.lease_seconds)
        return Outcome(job_id, "waiting", job.step, job.status)
    expected = int(prepared.chosen.tokens * prepared.factor)
    if job.total_input_tokens + expected > job.max_input_tokens:
        why = f"stopped before exceeding {job.max_input_tokens:,} input tokens, the limit of this job"
        return _stop(session, job, why, "tokens", tokens=job.max_input_tokens, carried=prepared.carried)
    return prepared


def _current(session: Session, job_id: int, step: int) -> Job | Outcome:
    """The job's row, locked, if it is still at ``step`` and unfinished; otherwise why this delivery stops
    here (another delivery finished the step, or the job was cancelled meanwhile): its reply is discarded."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.step != step or job.status.finished:
        return Outcome(job_id, "skipped", step, job.status if job else "missing")
    return job


Wake = tuple[int, int, float | None]  # a job, the step to run, and how many seconds to wait first


@dataclass(frozen=True)
class _Done:
    """How a step ended, and what must wait until its transaction commits."""

    outcome: Outcome
    wake: list[Wake]  # steps to queue once the transaction commits
    report: BaseException | None = None  # what to send to Sentry


def _after_commit(done: _Done | Outcome, services: Services) -> Outcome:
    """What may only happen once the step's transaction has committed: queueing steps, alerting. A step that
    cannot be queued now is queued by the reconciler when its job's deadline passes."""
    if isinstance(done, Outcome):
        return done
    wake = done.wake
    if done.outcome.action == "finished":
        wake = [*wake, *_waiting_for_slot(done.outcome.job_id, services)]
    for job_id, step, delay in wake:
        try:
            services.enqueue(job_id, step, delay)
        except Exception as error:
            logger.warning(
                "job %s: step %s not queued (%s); the reconciler will\n%s",
                job_id,
                step,
                type(error).__name__,
                scrubbed_traceback(error),
            )
    if done.report is not None:
        services.report(done.report)
    return done.outcome


def _waiting_for_slot(job_id: int, services: Services) -> list[Wake]:
    """The first steps of the jobs of the finished job's tenant that waited for a place under its cap and fit
    now (worker/tenant_cap.py). Only an improvement: the reconciler queues them at their deadline anyway."""

    def waiting(session: Session) -> list[int]:
        job = session.get(Job, job_id)
        if job is None or job.parent_id is not None:
            return []
        return waiting_jobs(session, job.tenant_id, services.settings)

    try:
        return [(waiting_id, 0, None) for waiting_id in in_transaction(services.database, waiting)]
    except Exception as error:
        logger.warning("job %s: the jobs waiting for its place were not queued (%s)", job_id, type(error).__name__)
        return []


class _NothingFits(Exception):
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


def _parent_gone(session: Session, job: Job) -> bool:
    if job.parent_id is None:
        return False
    parent = session.get(Job, job.parent_id)
    return parent is None or parent.status.finished


def _prepare(session: Session, job: Job, services: Services) -> _Prepared | None:
    """The request of the job's next step; None while subagents it waits for are still at work."""
    outlines = message_index(session, job.id)
    carried: list[dict[str, Any]] = []
    if outlines[-1].role == "assistant" and outlines[-1].tool_uses:
        delegate_results = _delegate_results(session, job, outlines[-1].tool_uses, len(outlines) - 1)
        if delegate_results is None:
            return None
        carried = [delegate_results]
    every = [*outlines, *(outline(m, job.profile) for m in carried)]
    system, tools = system_prompt(job), tools_for(job)
    overhead = request_overhead(system, tools, job.profile)
    calibrator = Calibrator.from_dict(job.calibration, floor=services.settings.calibration_floor)
    factor = calibrator.factor if job.strategy in CALIBRATED else 1.0
    planning_budget = int(job.budget / factor)
    previous = last_step(session, job.id)
    cache = cache_view(previous, ttl_seconds=services.settings.cache_ttl_seconds, at=now())
    planner = partial(_plan, job, budget=planning_budget, overhead=overhead, cache=cache)
    try:  # over the job's latest summary; a summary request instead when a compaction is due
        composed = compose(
            session,
            job,
            every,
            carried,
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
        raise _NothingFits(error, carried, smallest=smallest, factor=factor, budget=planning_budget) from error
    return _Prepared(
        step=job.step,
        strategy=job.strategy,
        provider=services.provider_for(job),
        provider_name=job.provider,
        endpoint=host_of(job.endpoint) if job.endpoint else "",
        model=job.model,
        max_tokens=composed.max_tokens or job.max_output_tokens,
        system=system if composed.system is None else composed.system,
        tools=tools if composed.tools is None else composed.tools,
        request=composed.request,
        chosen=composed.plan,
        planning_budget=planning_budget,
        factor=factor,
        carried=carried,
        breakpoints=composed.breakpoints,
        compaction=composed.compaction,
        tenant_id=job.tenant_id,
        counted_input=planned_input(
            tokens=int(composed.plan.tokens * factor),
            provider=job.provider,
            cached_prefix=_cached_prefix(previous, cache, composed.plan),
        ),
    )


def _cached_prefix(previous: Step | None, cache: CacheView, chosen: Plan) -> int:
    """The tokens the request should read from the prompt cache: what the previous request read from it or wrote
    to it, if the cache is still warm and the plan clears nothing new; otherwise taken as none."""
    if previous is None or previous.reported_input_tokens is None or cache.cold:
        return 0
    if set(chosen.cleared) != set(cache.previous_cleared or ()):
        return 0
    return previous.cache_read_tokens + previous.cache_write_tokens


def _plan(
    job: Job, every: list[Outline], *, budget: int, overhead: int, cache: CacheView
) -> tuple[Plan, tuple[int, ...]]:
    """What the next request sends, and where the provider's cache breakpoints go (empty: the adapter's own).
    Plimsoll's strategy clears where the prompt cache makes it cheapest, from what it knows of the previous
    request; the reproductions of the published failures fit as they did."""
    if job.strategy == Strategy.LEGACY:
        return legacy_plan(every, budget, profile=job.profile, overhead=overhead), ()
    if job.strategy == Strategy.PLIMSOLL:
        cached = plan_cached(every, budget, profile=job.profile, overhead=overhead, cache=cache)
        return cached.plan, cached.breakpoints
    batching: Batching = "one" if job.strategy == Strategy.UNBATCHED else "four"
    return plan(every, budget, profile=job.profile, overhead=overhead, batching=batching), ()


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


def _delegate_results(session: Session, job: Job, calls: Sequence[str], seq: int) -> dict[str, Any] | None:
    """The results message answering a message of delegate calls, or None while a subagent still works."""
    children = {child.parent_tool_use_id: child for child in children_of(session, job.id)}
    blocks = []
    for call in calls:
        child = children.get(call)
        if child is None:  # not a delegation: a tool that ran beside one, run again now
            blocks.append(run_tool(session, job, _stored_call(session, job, seq, call)))
            continue
        status = child.status
        if not status.finished:
            return None
        if status == JobStatus.SUCCEEDED:
            blocks.append(result(call, child.final_answer or "(the subagent gave no answer)"))
        else:
            blocks.append(result(call, f"The subagent did not finish: {_why_unfinished(child)}.", error=True))
    return {"role": "user", "content": [b for b in blocks if isinstance(b, dict)]}


def _stored_call(session: Session, job: Job, seq: int, tool_use_id: str) -> dict[str, Any]:
    content = message_bodies(session, job.id, [seq])[seq]["content"]
    return next(b for b in content if b.get("type") == "tool_use" and b["id"] == tool_use_id)


def _answered(
    session: Session, job_id: int, prepared: _Prepared, reply: Reply, services: Services, *, started: float
) -> _Done | Outcome:
    """Store the reply and what follows from it, if the job is still at the step this reply answers."""
    job = _current(session, job_id, prepared.step)
    if isinstance(job, Outcome):
        return job
    usage = reply.usage
    job.input_tokens += usage.input_tokens
    job.output_tokens += usage.output_tokens
    job.cache_read_tokens += usage.cache_read_tokens
    job.cache_write_tokens += usage.cache_write_tokens
    if job.strategy in CALIBRATED and prepared.chosen.tokens > 0:
        _observe(session, job, estimated=prepared.chosen.tokens, reported=usage.total_input)
    step = prepared.step + 1
    if prepared.compaction is not None:
        return _compaction_done(session, job, prepared, services, reply=reply)
    assistant = {"role": "assistant", "content": reply.content}
    new_messages: list[dict[str, Any]] = [*prepared.carried, assistant]
    wake: list[Wake] = []
    calls = [block for block in reply.content if block.get("type") == "tool_use"]
    action: Literal["continued", "finished"] = "continued"
    if calls:
        repeats = count_calls(job.tool_calls, calls, limit=services.settings.max_identical_tool_calls)
        job.tool_calls = repeats.counts
        if repeats.over:
            unrun = [result(c["id"], "Not run: the same call was made too often.", error=True) for c in calls]
            append_messages(session, job, [*new_messages, {"role": "user", "content": unrun}], step=step)
            job.step = step
            tool, times = repeats.over[0].get("name", "?"), repeats.counts[fingerprint(repeats.over[0])]
            why = f"stopped: the agent called {tool} with the same input {times} times"
            needed = _budget_needed(session, job, services)
            if needed > job.budget:  # results were left out before the agent could use them: the budget's fault
                why += (
                    f"; its budget of {job.budget:,} tokens cannot hold its results with its notes ({needed:,} would)"
                )
                stopped = _stop(
                    session, job, why, "repeating_budget", tool=tool, times=times, budget=job.budget, needed=needed
                )
            else:
                stopped = _stop(session, job, why, "repeating", tool=tool, times=times)
            session.add(_step_record(job, prepared, step, reply=reply, seconds=prepared.seconds))
            return stopped
        outputs = [run_tool(session, job, call) for call in calls]
        delegations = [o for o in outputs if isinstance(o, Delegation)]
        if delegations:
            append_messages(session, job, new_messages, step=step)
            wake = [(_start_subagent(session, job, d).id, 0, None) for d in delegations]
        else:
            results = [
                with_warning(o, tool=c.get("name", "?"), times=services.settings.max_identical_tool_calls)
                if c["id"] in repeats.warn
                else o
                for c, o in zip(calls, outputs, strict=True)
                if not isinstance(o, Delegation)
            ]
            append_messages(session, job, [*new_messages, {"role": "user", "content": results}], step=step)
            wake = [(job.id, step, None)]
    elif reply.stop_reason == "max_tokens" and len(_cut_off_answers(session, job)) < MAX_CONTINUATIONS:
        append_messages(session, job, [*new_messages, {"role": "user", "content": CONTINUE_AFTER_CUT_OFF}], step=step)
        wake = [(job.id, step, None)]
    else:  # the answer, in parts if it was cut off at the output limit
        earlier = _cut_off_answers(session, job)
        append_messages(session, job, new_messages, step=step)
        answer = "".join([*earlier, _text(reply.content)]).strip()
        if reply.stop_reason == "refusal":
            end_job(job, JobStatus.FAILED, error="the model refused the task")
        else:
            job.final_answer = answer
            _finish_with_parts(session, job)
        wake = _wake_parent(session, job)
        action = "finished"
    job.step, job.attempts, job.rate_limited_since = step, 0, None
    if action == "continued":
        release(job, seconds=services.settings.lease_seconds)
    seconds = prepared.seconds + time.perf_counter() - started
    session.add(_step_record(job, prepared, step, reply=reply, seconds=seconds))
    outcome = Outcome(
        job.id,
        action,
        step,
        job.status,
        stage=prepared.chosen.stage,
        estimated_tokens=prepared.chosen.tokens,
        reported_tokens=usage.total_input,
    )
    return _Done(outcome, wake)


def _compaction_refused(
    session: Session, *, job_id: int, prepared: _Prepared, error: TooLong, services: Services
) -> _Done | Outcome:
    """A summary request rejected as too long: recorded (and measured, if the size was stated), and the next
    step plans without compacting (worker/compaction.py), so a compaction never fails a job."""
    job = _current(session, job_id, prepared.step)
    if isinstance(job, Outcome):
        return job
    if error.tokens and job.strategy in CALIBRATED:
        _observe(session, job, estimated=prepared.chosen.tokens, reported=error.tokens)
    return _compaction_done(session, job, prepared, services, reply=None, stop=type(error).__name__)


def _compaction_done(
    session: Session, job: Job, prepared: _Prepared, services: Services, *, reply: Reply | None, stop: str | None = None
) -> _Done:
    """A compaction step ends: its summary stored beside the history (none if the request was refused), delegate
    results that arrived kept, and the next step, which plans over the summary, queued."""
    step = prepared.step + 1
    if reply is not None and prepared.compaction is not None:
        store_summary(session, job, prepared.compaction, reply, step=step)
    if prepared.carried:
        append_messages(session, job, prepared.carried, step=step)
    job.step, job.attempts = step, 0
    release(job, seconds=services.settings.lease_seconds)
    session.add(_step_record(job, prepared, step, reply=reply, seconds=prepared.seconds, stop=stop))
    reported = reply.usage.total_input if reply else None
    outcome = Outcome(job.id, "continued", step, job.status, stage="compaction", reported_tokens=reported)
    return _Done(outcome, [(job.id, step, None)])


def _observe(session: Session, job: Job, *, estimated: int, reported: int) -> None:
    """Feed a reported count to the job's calibrator and to its model's, which later jobs start from."""
    calibrator = Calibrator.from_dict(job.calibration)
    calibrator.observe(estimated, reported)
    job.calibration = calibrator.to_dict()
    observe_model(session, endpoint_of(job), job.model, job.profile, estimated=estimated, reported=reported)


def _replanned(
    session: Session, *, job_id: int, prepared: _Prepared, error: TooLong, services: Services
) -> _Prepared | _Done | Outcome:
    """After a rejection that said the request's real size (and maybe the model's window): correct the
    calibration and the budget, then plan a new, smaller request. Where no smaller request would do (the
    window leaves no room, or the new plan is no smaller), or nothing fits, the job ends as too long."""
    job = _current(session, job_id, prepared.step)
    if isinstance(job, Outcome):
        return job
    assert error.tokens is not None
    _observe(session, job, estimated=prepared.chosen.tokens, reported=error.tokens)
    allowed = job.budget if error.limit is None else min(job.budget, error.limit - job.max_output_tokens)
    if allowed < MIN_BUDGET:
        return _failed(session, job, error, services, prepared=prepared)
    job.budget = allowed
    if error.limit is not None:
        job.hard_limit = min(job.hard_limit, error.limit)
    rejected = (prepared.chosen.tokens, error.tokens)
    try:
        again = _prepare(session, job, services)
    except _NothingFits as nothing:
        return _failed(session, job, error, services, nothing=nothing, rejected=rejected)
    if again is None:  # cannot happen: the subagents it waited for had finished when the step began
        raise RuntimeError(f"job {job_id}: a re-plan found the job waiting")
    if again.chosen.tokens * again.factor >= error.tokens:  # never the same request again
        return _failed(session, job, error, services, prepared=prepared)
    again.rejected, again.seconds = rejected, prepared.seconds
    return again


def _finish_with_parts(session: Session, job: Job) -> None:
    """A job that answered succeeded, unless some of its subagents did not finish: then it is incomplete,
    and the person is told which parts are missing and why."""
    missing = [c for c in children_of(session, job.id) if c.status != JobStatus.SUCCEEDED]
    if not missing:
        end_job(job, JobStatus.SUCCEEDED)
        return
    parts = "; ".join(f"subagent {c.id} ({_why_unfinished(c)})" for c in missing)
    end_job(job, JobStatus.INCOMPLETE, error=f"{len(missing)} of its subagents did not finish: {parts}")
    _notify(session, job, stopped_notice("incomplete", job.locale, parts=parts))


def _why_unfinished(job: Job) -> str:
    return {
        JobStatus.NEEDS_NEW_CHAT: "its conversation grew too long for the model",
        JobStatus.CANCELLED: "it was cancelled",
        JobStatus.INCOMPLETE: "parts of it did not finish",
    }.get(job.status, f"it failed: {job.error or 'unknown error'}")


def _wake_parent(session: Session, job: Job) -> list[Wake]:
    """A finished subagent wakes its parent at the step the parent waits in."""
    parent = session.get(Job, job.parent_id) if job.parent_id is not None else None
    return [] if parent is None else [(parent.id, parent.step, None)]


def _notify(session: Session, job: Job, text: str) -> None:
    """A notice for the person. Only main jobs have one: a subagent's end reaches the person through its
    parent, which reads it as a tool result and names it when it finishes."""
    if job.parent_id is None:
        session.add(Notice(tenant_id=job.tenant_id, job_id=job.id, text=text))


def _stop(
    session: Session,
    job: Job,
    why: str,
    notice: str,
    *,
    carried: Sequence[dict[str, Any]] = (),
    **values: Any,
) -> _Done:
    """End a runaway job (a limit reached, or the agent repeating itself) with a notice saying why."""
    if carried:
        append_messages(session, job, carried, step=job.step + 1)  # results that arrived are kept
    end_job(job, JobStatus.FAILED, error=why)
    _notify(session, job, stopped_notice(notice, job.locale, **values))
    return _Done(Outcome(job.id, "finished", job.step, job.status), _wake_parent(session, job))


def _text(content: list[dict[str, Any]]) -> str:
    return "\n".join(b["text"] for b in content if b.get("type") == "text")


def _cut_off_answers(session: Session, job: Job) -> list[str]:
    """The texts of the replies cut off at the output limit at the end of the stored history, oldest first."""
    last = session.scalar(select(func.max(Message.seq)).where(Message.job_id == job.id)) or 0
    bodies = message_bodies(session, job.id, range(max(1, last - 2 * MAX_CONTINUATIONS), last + 1))
    parts: list[str] = []
    while last > 1 and bodies.get(last, {}).get("content") == CONTINUE_AFTER_CUT_OFF and last - 1 in bodies:
        parts.insert(0, _text(bodies[last - 1]["content"]))
        last -= 2
    return parts


def _start_subagent(session: Session, job: Job, delegation: Delegation) -> Job:
    return create_job(
        session,
        tenant_id=job.tenant_id,
        instruction=delegation.task,
        document_ids=[d.document_id for d in job.documents],
        options=JobOptions.of(job),  # the limits set on a main job hold for each of its parts too
        kind=JobKind.SUBAGENT,
        parent=job,
        parent_tool_use_id=delegation.tool_use_id,
    )


def _step_record(
    job: Job, prepared: _Prepared, step: int, *, reply: Reply | None, seconds: float, stop: str | None = None
) -> Step:
    usage = reply.usage if reply else None
    return Step(
        job_id=job.id,
        step=step,
        stage=prepared.chosen.stage,
        planning_budget=prepared.planning_budget,
        calibration_factor=round(prepared.factor, 4),
        estimated_tokens=prepared.chosen.tokens,
        reported_input_tokens=usage.total_input if usage else None,
        cache_read_tokens=usage.cache_read_tokens if usage else 0,
        cache_write_tokens=usage.cache_write_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        messages_sent=len(prepared.request),
        cleared=list(prepared.chosen.cleared),
        dropped=prepared.chosen.dropped,
        stop_reason=reply.stop_reason if reply else stop,
        overhead_ms=round(seconds * 1000, 3),
        rejected_estimate=prepared.rejected[0] if prepared.rejected else None,
        rejected_tokens=prepared.rejected[1] if prepared.rejected else None,
    )


def _unanswered(
    session: Session, job_id: int, prepared: _Prepared, error: ProviderError, services: Services
) -> _Done | Outcome:
    job = _current(session, job_id, prepared.step)
    if isinstance(job, Outcome):
        return job
    return _failed(session, job, error, services, prepared=prepared)


def _failed(
    session: Session,
    job: Job,
    error: ProviderError,
    services: Services,
    *,
    prepared: _Prepared | None = None,
    nothing: _NothingFits | None = None,
    rejected: tuple[int, int] | None = None,
) -> _Done:
    """Act on a failed request as the routing table says. The step's failed tries are counted on the job, so
    the limit holds however the retries were delivered."""
    if nothing is not None:
        needed = max(_budget_needed(session, job, services), math.ceil(nothing.smallest * nothing.factor))
        # A larger budget the model takes would hold the job: say so, rather than send the person to a new
        # chat, whose hand-over would not fit either. Where the model cannot take it, a new chat is the way on.
        if not nothing.first_fits or job.budget < needed <= job.hard_limit - job.max_output_tokens:
            return _budget_too_small(session, job, nothing, needed)
    settings = services.settings
    limited = isinstance(error, RateLimited)  # a wait, not a failed try: the step's retries are left as they are
    tries = job.attempts + (0 if limited else 1)
    waited = _waited_for_rate_limit(job)
    action = route(
        error,
        attempt=max(tries, 1),
        max_attempts=settings.max_transient_retries + 1,
        locale=job.locale,
        waited_seconds=waited,
        max_wait_seconds=settings.rate_limit_max_wait_seconds,
        setting=endpoint_setting(job),
    )
    if action.retry:
        if limited:
            job.rate_limited_since = job.rate_limited_since or now()
        else:
            job.attempts, job.retries = tries, job.retries + 1
        delay = action.delay or 0.0
        release(job, seconds=delay + settings.lease_seconds)
        kind: Literal["rate_limited", "retry"] = "rate_limited" if limited else "retry"
        return _Done(Outcome(job.id, kind, job.step, job.status, retry_in=delay), [(job.id, job.step, delay)])
    step = job.step = job.step + 1  # the failed step is recorded: the job's count of steps includes it
    carried = prepared.carried if prepared else nothing.carried if nothing else []
    if carried:
        append_messages(session, job, carried, step=step)  # results that arrived are kept, whatever happens
    if prepared is not None:
        session.add(_step_record(job, prepared, step, reply=None, seconds=prepared.seconds, stop=type(error).__name__))
    elif nothing is not None:
        session.add(_unsent_step_record(job, step, nothing.error, rejected=rejected))
    if limited:
        why = (
            f"the provider's rate limit kept the step waiting {waited / 60:.0f} min, longer than the "
            f"{settings.rate_limit_max_wait_seconds / 60:.0f} min allowed (PLIMSOLL_RATE_LIMIT_MAX_WAIT_SECONDS); "
            f"the last answer: {error.message}"
        )
    elif tries == 1:
        why = error.message
    else:
        why = f"the request failed {tries} times in a row; the last time: {error.message}"
    end_job(job, action.job_status or JobStatus.FAILED, error=why)
    if action.notice:
        notice = new_chat_notice(job.id, job.locale) if job.status == JobStatus.NEEDS_NEW_CHAT else action.notice
        _notify(session, job, notice)
    stage = prepared.chosen.stage if prepared else "does_not_fit"
    outcome = Outcome(job.id, "finished", step, job.status, stage=stage)  # the step of the record written above
    return _Done(outcome, _wake_parent(session, job), error if action.report_to_sentry else None)


def _waited_for_rate_limit(job: Job) -> float:
    """Seconds since the provider's rate limit first refused the job's current step (0: it has not)."""
    since = job.rate_limited_since
    if since is None:
        return 0.0
    return (now() - (since if since.tzinfo else since.replace(tzinfo=UTC))).total_seconds()


def _budget_needed(session: Session, job: Job, services: Services) -> int:
    """The budget that would hold what the job needs, measured from its history (worker/budget_needed.py)."""
    overhead = request_overhead(system_prompt(job), tools_for(job), job.profile)
    factor = Calibrator.from_dict(job.calibration, floor=services.settings.calibration_floor).factor
    return budget_needed(session, job, overhead=overhead, factor=factor if job.strategy in CALIBRATED else 1.0)


def _budget_too_small(session: Session, job: Job, nothing: _NothingFits, needed: int) -> _Done:
    """The budget cannot hold the first message with the agent's notes and a round of tool results: no new chat
    would help, a budget of ``needed`` would."""
    step = job.step = job.step + 1  # the step that did not fit is recorded: the job's count of steps includes it
    session.add(_unsent_step_record(job, step, nothing.error))
    why = (
        f"the budget of {job.budget:,} tokens is too small for the job's first message with its notes and one "
        f"round of tool results ({needed:,} would hold them)"
    )
    end_job(job, JobStatus.FAILED, error=why)
    _notify(session, job, stopped_notice("budget", job.locale, budget=job.budget, needed=needed))
    return _Done(Outcome(job.id, "finished", step, job.status, stage="does_not_fit"), _wake_parent(session, job))


def _unsent_step_record(job: Job, step: int, error: DoesNotFit, *, rejected: tuple[int, int] | None = None) -> Step:
    return Step(
        job_id=job.id,
        step=step,
        stage="does_not_fit",
        planning_budget=error.budget,
        calibration_factor=round(Calibrator.from_dict(job.calibration).factor, 4),
        estimated_tokens=error.needed,
        messages_sent=0,
        stop_reason="DoesNotFit",
        rejected_estimate=rejected[0] if rejected else None,
        rejected_tokens=rejected[1] if rejected else None,
    )
