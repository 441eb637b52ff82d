"""A request the provider did not answer. A summary request rejected as too long ends its compaction step without
a summary. Another rejection as too long that states the request's real size is a measurement: the step plans
once more, smaller, within the same delivery. Any other failure, or a re-plan that would not help, is acted on as
the routing table says (worker/step/endings.py)."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session

from models.catalogue import MIN_BUDGET
from models.statuses import CALIBRATED
from worker.errors import ProviderError, TooLong
from worker.step.claim import current
from worker.step.endings import failed
from worker.step.plan import NothingFits, prepare
from worker.step.records import observe
from worker.step.results import Decided, Planned
from worker.step.services import Services
from worker.step.summary import compaction_done


def compaction_refused(
    session: Session, *, job_id: int, planned: Planned, error: TooLong, services: Services
) -> Decided:
    """A summary request rejected as too long: recorded (and measured, if the size was stated), and the next
    step plans without compacting (worker/compaction.py), so a compaction never fails a job."""
    job = current(session, job_id, planned.step)
    if isinstance(job, Decided):
        return job
    if error.tokens and job.strategy in CALIBRATED:
        observe(session, job, estimated=planned.chosen.tokens, reported=error.tokens)
    return compaction_done(session, job, planned, services, reply=None, stop=type(error).__name__)


def unanswered(session: Session, *, job_id: int, planned: Planned, error: ProviderError, services: Services) -> Decided:
    job = current(session, job_id, planned.step)
    if isinstance(job, Decided):
        return job
    return failed(session, job, error, services, planned=planned)


def replanned(
    session: Session, *, job_id: int, planned: Planned, error: TooLong, services: Services
) -> Planned | Decided:
    """After a rejection that said the request's real size (and maybe the model's window): correct the
    calibration and the budget, then plan a new, smaller request. Where no smaller request would do (the
    window leaves no room, or the new plan is no smaller), or nothing fits, the job ends as too long."""
    job = current(session, job_id, planned.step)
    if isinstance(job, Decided):
        return job
    assert error.tokens is not None
    observe(session, job, estimated=planned.chosen.tokens, reported=error.tokens)
    allowed = job.budget if error.limit is None else min(job.budget, error.limit - job.max_output_tokens)
    if allowed < MIN_BUDGET:
        return failed(session, job, error, services, planned=planned)
    job.budget = allowed
    if error.limit is not None:
        job.hard_limit = min(job.hard_limit, error.limit)
    rejected = (planned.chosen.tokens, error.tokens)
    try:
        again = prepare(session, job, services)
    except NothingFits as nothing:
        return failed(session, job, error, services, nothing=nothing, rejected=rejected)
    if again is None:  # cannot happen: the subagents it waited for had finished when the step began
        raise RuntimeError(f"job {job_id}: a re-plan found the job waiting")
    if again.chosen.tokens * again.factor >= error.tokens:  # never the same request again
        return failed(session, job, error, services, planned=planned)
    return replace(again, rejected=rejected, seconds=planned.seconds, delivery=planned.delivery)
