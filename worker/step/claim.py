"""Claim and gates: a step takes the job's lease if the job is still at that step and nobody holds it, settles
what needs no model call (a cancelled main job, the job's limits, its tenant's cap), and has its request planned.
When the reply comes back, ``current`` checks again that the step is still the job's before anything is stored."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from models.events import EventType, record
from models.jobs import FamilyUse, end_job, family_use, lock_family, shared_limits
from models.model_facts import endpoint_of, learned_limits
from models.statuses import CALIBRATED
from models.tables import Job, JobStatus, now
from worker.errors import TooLong
from worker.lease import deadline, held_by_another, release
from worker.metrics import STEP_PHASES
from worker.model_limits import learn_limits, within_learned_limits
from worker.outages import in_transaction
from worker.step.endings import failed, stop
from worker.step.plan import NothingFits, prepare
from worker.step.results import Decided, Outcome, Planned
from worker.step.services import Services
from worker.tenant_cap import over_cap, park
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)


def learn_limits_first(job_id: int, services: Services) -> None:
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


def begin(session: Session, job_id: int, step: int | None, owner: str, services: Services) -> Planned | Decided:
    """Claim the job's current step, settle what needs no model call, and plan the request."""
    lock_family(session, job_id)
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.status.finished:
        return Decided(Outcome(job_id, "skipped", job.step if job else 0, job.status if job else "missing"))
    if step is not None and job.step != step:
        return Decided(Outcome(job_id, "skipped", step, job.status))  # a late or duplicate delivery: the step is done
    if held_by_another(job, now()):
        return Decided(Outcome(job_id, "skipped", job.step, job.status))  # another delivery is running this step
    settings = services.settings
    job.lease_owner, job.lease_until = owner, deadline(settings.lease_seconds)
    job.requeues = 0  # claimed: its step message arrived
    if _parent_gone(session, job):
        end_job(session, job, JobStatus.CANCELLED, error="the main job was cancelled or has ended")
        return Decided(Outcome(job_id, "finished", job.step, job.status))
    used, limits = family_use(session, job.parent_id or job.id, besides=job.id), shared_limits(job)
    if used.steps >= limits.steps:
        steps = f"{used.steps} step{'' if used.steps == 1 else 's'}"
        return stop(session, job, f"stopped after {steps}, the limit {_whose(job, used)}", "steps", steps=used.steps)
    if job.status == JobStatus.QUEUED:
        if over_cap(session, job, settings):  # parked: the end of one of its tenant's jobs queues it
            park(job)
            return Decided(Outcome(job_id, "waiting_for_slot", job.step, job.status))
        job.status, job.started_at = JobStatus.RUNNING, now()
        record(session, job, EventType.STATUS, {"status": job.status.value})
    if job.strategy in CALIBRATED:
        known = learned_limits(session, endpoint_of(job), job.model)
        within_learned_limits(job, known[:2] if known else None)
    try:
        with STEP_PHASES.labels("plan").time():
            planned = prepare(session, job, services, used=used)
    except NothingFits as nothing:
        error = TooLong(str(nothing.error), provider="plimsoll")
        return failed(session, job, error, services, nothing=nothing)
    if planned is None:  # subagents still at work: they wake the job; the deadline is a safety net
        release(job, seconds=settings.lease_seconds)
        return Decided(Outcome(job_id, "waiting", job.step, job.status))
    expected = int(planned.chosen.tokens * planned.factor)
    if used.input_tokens + expected > limits.input_tokens:
        why = f"stopped before exceeding {job.max_input_tokens:,} input tokens, the limit {_whose(job, used)}"
        return stop(session, job, why, "tokens", tokens=job.max_input_tokens, carried=planned.carried)
    return planned


def _whose(job: Job, used: FamilyUse) -> str:
    """Whose limit it is, in the notice: one job's, or a main job's and its subagents' together."""
    alone = job.parent_id is None and used.steps == job.step and used.input_tokens == job.total_input_tokens
    return (
        "of this job"
        if alone
        else "this job shares with its main job and the other subagents"
        if job.parent_id
        else "this job shares with its subagents"
    )


def current(session: Session, job_id: int, step: int) -> Job | Decided:
    """The job's row, locked, if it is still at ``step`` and unfinished; otherwise why this delivery stops
    here (another delivery finished the step, or the job was cancelled meanwhile): its reply is discarded."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.step != step or job.status.finished:
        return Decided(Outcome(job_id, "skipped", step, job.status if job else "missing"))
    return job


def _parent_gone(session: Session, job: Job) -> bool:
    if job.parent_id is None:
        return False
    parent = session.get(Job, job.parent_id)
    return parent is None or parent.status.finished
