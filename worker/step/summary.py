"""A compaction step's end (worker/compaction.py): its summary stored beside the history (none if the summary
request was refused), and the next step, which plans over it, woken."""

from __future__ import annotations

from sqlalchemy.orm import Session

from models.events import EventType, record
from models.history import append_messages
from models.tables import Job
from worker.compaction import store_summary
from worker.lease import release
from worker.providers.base import Reply
from worker.step.records import record_step, step_record
from worker.step.results import Decided, Outcome, Planned
from worker.step.services import Services


def compaction_done(
    session: Session, job: Job, planned: Planned, services: Services, *, reply: Reply | None, stop: str | None = None
) -> Decided:
    """A compaction step ends: its summary stored beside the history (none if the request was refused), delegate
    results that arrived kept, and the next step, which plans over the summary, queued."""
    step = planned.step + 1
    if reply is not None and planned.compaction is not None:
        store_summary(session, job, planned.compaction, reply, step=step)
    if planned.carried:
        append_messages(session, job, planned.carried, step=step)
    job.step, job.attempts = step, 0
    release(job, seconds=services.settings.lease_seconds)
    record_step(session, job, step_record(job, planned, step, reply=reply, seconds=planned.seconds, stop=stop))
    record(session, job, EventType.COMPACTION, {"step": step, "summarized": reply is not None})
    reported = reply.usage.total_input if reply else None
    outcome = Outcome(job.id, "continued", step, job.status, stage="compaction", reported_tokens=reported)
    return Decided(outcome, [(job.id, step, None)])
