"""One step of a job: plan the request within the budget, send it, store what came back, decide what is next.

A step is a plain function of a job id, so it runs the same under Celery, in the in-process worker and in tests.
It is idempotent: its writes happen in one transaction that first checks that the job is still at the step
number it started from, so a step delivered twice (a worker lost mid-step, a retry racing a late reply) stores
its messages once. The next step is enqueued only after that transaction commits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import sentry_sdk
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.db import Database
from models.history import append_messages, message_bodies, message_index
from models.jobs import children_of, create_job
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus, Message, Notice, Step, now
from plimsoll import (
    Calibrator,
    DoesNotFit,
    Plan,
    bodies_needed,
    build_request,
    estimate_tokens,
    outline,
    plan,
)
from plimsoll.baselines import legacy_plan
from plimsoll.fitting import Batching
from plimsoll.messages import BLOCK_OVERHEAD, MESSAGE_OVERHEAD
from worker.errors import ProviderError, TooLong
from worker.prompts import system_prompt
from worker.providers.base import Provider, Reply
from worker.routing import route
from worker.tools import Delegation, result, run_tool, tools_for

Enqueue = Callable[[int, float | None], None]  # (job id, delay in seconds or None)
CALIBRATED = ("plimsoll", "unbatched")  # the reproductions of the published failures run uncorrected
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


@dataclass(frozen=True)
class Outcome:
    job_id: int
    action: Literal["continued", "waiting", "finished", "retry", "skipped"]
    step: int
    status: str
    stage: str | None = None
    estimated_tokens: int | None = None
    reported_tokens: int | None = None
    retry_in: float | None = None

    def summary(self) -> dict[str, Any]:
        """What Flower shows as the task's result."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class _Prepared:
    """A step's request, decided in the first transaction and sent outside of any."""

    step: int
    provider: Provider
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


def run_step(job_id: int, services: Services, *, attempt: int = 1) -> Outcome:
    """Run the next step of job ``job_id``. ``attempt`` counts deliveries of this step after transient failures."""
    started = time.perf_counter()
    with services.database.session() as session:
        begun = _begin(session, job_id, services, attempt=attempt)
    if isinstance(begun, Outcome):
        return begun
    if isinstance(begun, _Done):
        return _after_commit(begun, services)
    prepared = begun
    prepared.seconds = time.perf_counter() - started
    try:
        reply = prepared.provider.send(
            model=prepared.model,
            system=prepared.system,
            messages=prepared.request,
            tools=prepared.tools,
            max_tokens=prepared.max_tokens,
        )
    except ProviderError as error:
        with services.database.session() as session:
            job = _current(session, job_id, prepared.step)
            if isinstance(job, Outcome):
                return job
            failure = _fail(session, job, error, services, attempt=attempt, prepared=prepared)
        return _after_commit(failure, services)
    storing = time.perf_counter()
    with services.database.session() as session:
        job = _current(session, job_id, prepared.step)
        if isinstance(job, Outcome):
            return job
        stored = _store(session, job, prepared, reply, started=storing)
    return _after_commit(stored, services)


def _begin(session: Session, job_id: int, services: Services, *, attempt: int) -> Outcome | _Done | _Prepared:
    """Take the job's row, settle what needs no model call, and plan the request."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or JobStatus(job.status).finished:
        return Outcome(job_id, "skipped", job.step if job else 0, job.status if job else "missing")
    if _parent_gone(session, job):
        _finish(job, JobStatus.CANCELLED, error="the main job was cancelled or has ended")
        return Outcome(job_id, "finished", job.step, job.status)
    if job.step >= services.settings.max_steps_per_job:
        _finish(job, JobStatus.FAILED, error=f"stopped after {job.step} steps, the limit per job")
        return Outcome(job_id, "finished", job.step, job.status)
    if job.status == JobStatus.QUEUED:
        job.status, job.started_at = JobStatus.RUNNING, now()
    try:
        prepared = _prepare(session, job, services)
    except _NothingFits as nothing:
        error = TooLong(str(nothing.error), provider="plimsoll")
        return _fail(session, job, error, services, attempt=attempt, nothing=nothing)
    return Outcome(job_id, "waiting", job.step, job.status) if prepared is None else prepared


def _current(session: Session, job_id: int, step: int) -> Job | Outcome:
    """The job's row, locked, if it is still at ``step`` and running; otherwise why this delivery stops here
    (another delivery finished the step, or the job was cancelled meanwhile)."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.step != step or JobStatus(job.status).finished:
        return Outcome(job_id, "skipped", step, job.status if job else "missing")
    return job


@dataclass(frozen=True)
class _Done:
    """How a step ended, and what must wait until its transaction commits."""

    outcome: Outcome
    wake: list[int]  # jobs to enqueue once the transaction commits
    report: BaseException | None = None  # what to send to Sentry


def _after_commit(done: _Done, services: Services) -> Outcome:
    """What may only happen once the step's transaction has committed: waking jobs, alerting."""
    for job_id in done.wake:
        services.enqueue(job_id, None)
    if done.report is not None:
        services.report(done.report)
    return done.outcome


class _NothingFits(Exception):
    """Even the smallest request we may send is over the budget."""

    def __init__(self, error: DoesNotFit, carried: list[dict[str, Any]]) -> None:
        super().__init__(str(error))
        self.error = error
        self.carried = carried


def _parent_gone(session: Session, job: Job) -> bool:
    if job.parent_id is None:
        return False
    parent = session.get(Job, job.parent_id)
    return parent is None or JobStatus(parent.status).finished


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
    calibrator = Calibrator.from_dict(job.calibration)
    factor = calibrator.factor if job.strategy in CALIBRATED else 1.0
    planning_budget = int(job.budget / factor)
    batching: Batching = "one" if job.strategy == "unbatched" else "four"
    try:
        chosen = (
            legacy_plan(every, planning_budget, profile=job.profile, overhead=overhead)
            if job.strategy == "legacy"
            else plan(every, planning_budget, profile=job.profile, overhead=overhead, batching=batching)
        )
    except DoesNotFit as error:
        raise _NothingFits(error, carried) from error
    needed = [i for i in bodies_needed(chosen, every) if i < len(outlines)]
    bodies: dict[int, Any] = dict(message_bodies(session, job.id, needed))
    bodies.update({len(outlines) + i: message for i, message in enumerate(carried)})
    return _Prepared(
        step=job.step,
        provider=services.provider_for(job),
        model=job.model,
        max_tokens=job.max_output_tokens,
        system=system,
        tools=tools,
        request=build_request(chosen, every, bodies),
        chosen=chosen,
        planning_budget=planning_budget,
        factor=factor,
        carried=carried,
    )


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
        status = JobStatus(child.status)
        if not status.finished:
            return None
        if status == JobStatus.SUCCEEDED:
            blocks.append(result(call, child.final_answer or "(the subagent gave no answer)"))
        else:
            why = {
                JobStatus.NEEDS_NEW_CHAT: "its conversation grew too long for the model",
                JobStatus.CANCELLED: "it was cancelled",
            }.get(status, f"it failed: {child.error or 'unknown error'}")
            blocks.append(result(call, f"The subagent did not finish: {why}.", error=True))
    return {"role": "user", "content": [b for b in blocks if isinstance(b, dict)]}


def _stored_call(session: Session, job: Job, seq: int, tool_use_id: str) -> dict[str, Any]:
    content = message_bodies(session, job.id, [seq])[seq]["content"]
    return next(b for b in content if b.get("type") == "tool_use" and b["id"] == tool_use_id)


def _store(session: Session, job: Job, prepared: _Prepared, reply: Reply, *, started: float) -> _Done:
    """Store the reply and what follows from it; the jobs to wake once this commits."""
    usage = reply.usage
    job.input_tokens += usage.input_tokens
    job.output_tokens += usage.output_tokens
    job.cache_read_tokens += usage.cache_read_tokens
    job.cache_write_tokens += usage.cache_write_tokens
    if job.strategy in CALIBRATED and prepared.chosen.tokens > 0:
        calibrator = Calibrator.from_dict(job.calibration)
        calibrator.observe(prepared.chosen.tokens, usage.total_input)
        job.calibration = calibrator.to_dict()
    step = prepared.step + 1
    assistant = {"role": "assistant", "content": reply.content}
    new_messages: list[dict[str, Any]] = [*prepared.carried, assistant]
    wake: list[int] = []
    calls = [block for block in reply.content if block.get("type") == "tool_use"]
    if calls:
        outputs = [run_tool(session, job, call) for call in calls]
        delegations = [o for o in outputs if isinstance(o, Delegation)]
        if delegations:
            append_messages(session, job, new_messages, step=step)
            wake = [_start_subagent(session, job, d).id for d in delegations]
        else:
            results = [o for o in outputs if not isinstance(o, Delegation)]
            append_messages(session, job, [*new_messages, {"role": "user", "content": results}], step=step)
            wake = [job.id]
        action: Literal["continued", "finished"] = "continued"
    elif reply.stop_reason == "max_tokens" and len(_cut_off_answers(session, job)) < MAX_CONTINUATIONS:
        append_messages(session, job, [*new_messages, {"role": "user", "content": CONTINUE_AFTER_CUT_OFF}], step=step)
        wake, action = [job.id], "continued"
    else:  # the answer, in parts if it was cut off at the output limit
        earlier = _cut_off_answers(session, job)
        append_messages(session, job, new_messages, step=step)
        answer = "".join([*earlier, _text(reply.content)]).strip()
        if reply.stop_reason == "refusal":
            _finish(job, JobStatus.FAILED, error="the model refused the task")
        else:
            job.final_answer = answer
            _finish(job, JobStatus.SUCCEEDED)
        wake = [job.parent_id] if job.parent_id else []
        action = "finished"
    job.step = step
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
        model=job.model,
        budget=job.budget,
        kind=JobKind.SUBAGENT,
        parent=job,
        parent_tool_use_id=delegation.tool_use_id,
        locale=job.locale,
        strategy=job.strategy,
        safety_net=job.safety_net,
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
    )


def _finish(job: Job, status: JobStatus, *, error: str | None = None) -> None:
    job.status, job.finished_at = status, now()
    if error:
        job.error = error


def _fail(
    session: Session,
    job: Job,
    error: ProviderError,
    services: Services,
    *,
    attempt: int,
    prepared: _Prepared | None = None,
    nothing: _NothingFits | None = None,
) -> _Done:
    """Act on a failed request as the routing table says: the outcome, the jobs to wake, what to report."""
    action = route(error, attempt=attempt, max_attempts=services.settings.max_transient_retries + 1, locale=job.locale)
    if action.retry:
        job.retries += 1
        return _Done(Outcome(job.id, "retry", job.step, job.status, retry_in=action.delay), [])
    step = job.step + 1
    carried = prepared.carried if prepared else nothing.carried if nothing else []
    if carried:
        append_messages(session, job, carried, step=step)  # results that arrived are kept, whatever happens
    if prepared is not None:
        session.add(_step_record(job, prepared, step, reply=None, seconds=prepared.seconds, stop=type(error).__name__))
    elif nothing is not None:
        session.add(_unsent_step_record(job, step, nothing.error))
    _finish(job, JobStatus(action.job_status or JobStatus.FAILED), error=error.message)
    if action.notice and job.parent_id is None:
        session.add(Notice(tenant_id=job.tenant_id, job_id=job.id, text=action.notice))
    stage = prepared.chosen.stage if prepared else "does_not_fit"
    outcome = Outcome(job.id, "finished", job.step, job.status, stage=stage)
    wake = [job.parent_id] if job.parent_id is not None else []  # a parent reads the failure as a result
    return _Done(outcome, wake, error if action.report_to_sentry else None)


def _unsent_step_record(job: Job, step: int, error: DoesNotFit) -> Step:
    return Step(
        job_id=job.id,
        step=step,
        stage="does_not_fit",
        planning_budget=error.budget,
        calibration_factor=round(Calibrator.from_dict(job.calibration).factor, 4),
        estimated_tokens=error.needed,
        messages_sent=0,
        stop_reason="DoesNotFit",
    )
