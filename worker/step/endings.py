"""Endings: a failed request acted on as the routing table says (retried, waited for, or the job ended), a job
stopped by one of its limits, a budget too small for the job, and an internal error."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.budgets import Over
from models.history import append_messages
from models.jobs import end_job
from models.ledger import spent_by_main_job
from models.statuses import CALIBRATED
from models.tables import Job, JobStatus, Message, now
from plimsoll import Calibrator
from plimsoll.notices import new_chat_notice, stopped_notice
from worker.budget_needed import budget_needed
from worker.errors import ProviderError, RateLimited
from worker.lease import release
from worker.prompts import system_prompt
from worker.routing import endpoint_setting, route
from worker.step.plan import NothingFits, request_overhead
from worker.step.records import notify, record_step, step_record, unsent_step_record
from worker.step.results import Decided, Outcome, Planned
from worker.step.services import Services
from worker.step.subagents import wake_parent
from worker.tools import tools_for


def failed(
    session: Session,
    job: Job,
    error: ProviderError,
    services: Services,
    *,
    planned: Planned | None = None,
    nothing: NothingFits | None = None,
    rejected: tuple[int, int] | None = None,
) -> Decided:
    """Act on a failed request as the routing table says. The step's failed tries are counted on the job, so
    the limit holds however the retries were delivered."""
    if nothing is not None:
        needed = max(needed_budget(session, job, services), math.ceil(nothing.smallest * nothing.factor))
        # A larger budget the model takes would hold the job: say so, rather than send the person to a new
        # chat, whose hand-over would not fit either. Where the model cannot take it, a new chat is the way on.
        if not nothing.first_fits or job.budget < needed <= job.hard_limit - job.max_output_tokens:
            return budget_too_small(session, job, nothing, needed)
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
        return Decided(Outcome(job.id, kind, job.step, job.status, retry_in=delay), [(job.id, job.step, delay)])
    step = job.step = job.step + 1  # the failed step is recorded: the job's count of steps includes it
    carried = planned.carried if planned else nothing.carried if nothing else []
    if carried:
        append_messages(session, job, carried, step=step)  # results that arrived are kept, whatever happens
    if planned is not None:
        record_step(
            session,
            job,
            step_record(job, planned, step, reply=None, seconds=planned.seconds, stop=type(error).__name__),
        )
    elif nothing is not None:
        record_step(session, job, unsent_step_record(job, step, nothing.error, rejected=rejected))
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
    ending = action.job_status or JobStatus.FAILED
    if action.notice:  # before the end: the job's ended event is its last
        notify(
            session, job, new_chat_notice(job.id, job.locale) if ending == JobStatus.NEEDS_NEW_CHAT else action.notice
        )
    end_job(session, job, ending, error=why)
    stage = planned.chosen.stage if planned else "does_not_fit"
    outcome = Outcome(job.id, "finished", step, job.status, stage=stage)  # the step of the record written above
    return Decided(outcome, wake_parent(session, job), error if action.report_to_sentry else None)


def _waited_for_rate_limit(job: Job) -> float:
    """Seconds since the provider's rate limit first refused the job's current step (0: it has not)."""
    since = job.rate_limited_since
    if since is None:
        return 0.0
    return (now() - (since if since.tzinfo else since.replace(tzinfo=UTC))).total_seconds()


def needed_budget(session: Session, job: Job, services: Services) -> int:
    """The budget that would hold what the job needs, measured from its history (worker/budget_needed.py)."""
    overhead = request_overhead(system_prompt(job), tools_for(job), job.profile)
    factor = Calibrator.from_dict(job.calibration, floor=services.settings.calibration_floor).factor
    return budget_needed(session, job, overhead=overhead, factor=factor if job.strategy in CALIBRATED else 1.0)


def budget_too_small(session: Session, job: Job, nothing: NothingFits, needed: int) -> Decided:
    """The budget cannot hold the first message with the agent's notes and a round of tool results: no new chat
    would help, a budget of ``needed`` would."""
    step = job.step = job.step + 1  # the step that did not fit is recorded: the job's count of steps includes it
    record_step(session, job, unsent_step_record(job, step, nothing.error))
    why = (
        f"the budget of {job.budget:,} tokens is too small for the job's first message with its notes and one "
        f"round of tool results ({needed:,} would hold them)"
    )
    notify(session, job, stopped_notice("budget", job.locale, budget=job.budget, needed=needed))
    end_job(session, job, JobStatus.FAILED, error=why)
    return Decided(Outcome(job.id, "finished", step, job.status, stage="does_not_fit"), wake_parent(session, job))


def stop(
    session: Session,
    job: Job,
    why: str,
    notice: str,
    *,
    carried: Sequence[dict[str, Any]] = (),
    **values: Any,
) -> Decided:
    """End a runaway job (a limit reached, or the agent repeating itself) with a notice saying why."""
    if carried:
        append_messages(session, job, carried, step=job.step + 1)  # results that arrived are kept
    notify(session, job, stopped_notice(notice, job.locale, **values))
    end_job(session, job, JobStatus.FAILED, error=why)
    return Decided(Outcome(job.id, "finished", job.step, job.status), wake_parent(session, job))


def internal_error(session: Session, job_id: int, step: int | None, error: Exception) -> Decided:
    """The job of a step that raised what nothing here expects fails, naming the error's type but never its text,
    and its main job is woken (worker.step.run.fail_after_internal_error)."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.status.finished or (step is not None and job.step != step):
        return Decided(Outcome(job_id, "skipped", job.step if job else 0, job.status if job else "missing"))
    why = f"an internal error ({type(error).__name__}) stopped the job at step {job.step + 1}; it was reported"
    end_job(session, job, JobStatus.FAILED, error=why)
    return Decided(Outcome(job.id, "finished", job.step, job.status), wake_parent(session, job))


def out_of_money(session: Session, job_id: int, planned: Planned, over: Over) -> Decided:
    """The job's money cannot hold its next request's worst case: it ends ``incomplete`` with its answer so far
    (the agent's latest words) and a notice saying what was spent, what is not done and how to go on."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.step != planned.step or job.status.finished:
        return Decided(Outcome(job_id, "skipped", planned.step, job.status if job else "missing"))
    if planned.carried:
        append_messages(session, job, planned.carried, step=job.step + 1)  # results that arrived are kept
    job.final_answer = latest_words(session, job)
    limit = over.scope.limit or Decimal(0)
    why = (
        f"its budget of {limit:.2f} USD ({over.scope.where}) cannot hold its next request's worst case of "
        f"{over.asked:.4f} USD: {over.spent:.4f} USD spent, {over.held:.4f} USD held by requests in flight"
    )
    notice = budget_notice(session, job, "money", over.spent, budget=usd(limit), more=usd(limit * 2))
    notify(session, job, notice)  # before the end it explains: the job's ended event is its last
    end_job(session, job, JobStatus.INCOMPLETE, error=why)
    return Decided(Outcome(job.id, "finished", job.step, job.status), wake_parent(session, job))


def budget_notice(session: Session, job: Job, why: str, spent: Decimal | None, **values: str) -> str:
    """A notice for a job ended by one of its budgets: what it spent (its subagents included; None: as the ledger
    has it) and what it has not done, and the command that goes on."""
    if spent is None:
        spent = spent_by_main_job(session, job.parent_id or job.id)
    parts = session.scalars(select(Job.status).where(Job.parent_id == job.id)).all()
    undone = sum(1 for status in parts if status != JobStatus.SUCCEEDED)
    not_done = (
        f"{undone} of its {len(parts)} subagents' tasks and the rest of its own" if parts else "the rest of its task"
    )
    return stopped_notice(why, job.locale, spent=usd(spent), not_done=not_done, job=str(job.id), **values)


def usd(amount: Decimal) -> str:
    """An amount of USD as people write it: 0.025, 12.5, 0.0085 (to a hundredth of a cent)."""
    return f"{amount.quantize(Decimal('0.0001')).normalize():f}"


def latest_words(session: Session, job: Job) -> str:
    """The text of the agent's latest message: its answer so far."""
    query = (
        select(Message.content)
        .where(Message.job_id == job.id, Message.role == "assistant")
        .order_by(Message.seq.desc())
        .limit(1)
    )
    content = session.scalar(query)
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content or [] if block.get("type") == "text").strip()
