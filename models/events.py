"""A job's events: what a step, a compaction, a subagent, a notice or an ending tells the job's person and their
systems. ``record`` writes one in the caller's transaction, so it is seen only once what it reports is committed;
on PostgreSQL its insert also queues a NOTIFY on ``CHANNEL`` (a trigger, migration 0024), which PostgreSQL
delivers only at that commit, so a listener learns of new events without polling the database per client."""

from __future__ import annotations

import enum
from typing import Any

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.orm import Session

from models.settings import get_settings
from models.tables import Event, Job

CHANNEL = "plimsoll_events"  # also named by the trigger that sends the NOTIFY (migration 0024)


class EventType(enum.StrEnum):
    STEP = "step"  # a step done: its number, stage, tokens against the budget, cache-read share, cost
    COMPACTION = "compaction"
    SUBAGENT_STARTED = "subagent.started"
    SUBAGENT_ENDED = "subagent.ended"
    NOTICE = "notice"
    STATUS = "status"  # a status change short of an end (queued -> running)
    ENDED = "job.ended"  # succeeded, failed, incomplete, cancelled or needs a new chat
    GAP = "gap"  # where older events of the job were: they went to keep what is kept per job bounded


def record(session: Session, job: Job, type: EventType, data: dict[str, Any]) -> Event:
    """Add an event for ``job`` (a subagent's belong to its main job, and say which subagent in ``data``)."""
    main_id = job.parent_id if job.parent_id is not None else job.id
    if job.parent_id is not None:
        data = {"subagent": job.id} | data
    event = Event(tenant_id=job.tenant_id, job_id=main_id, type=type.value, data=data)
    session.add(event)
    session.flush()  # on PostgreSQL its insert queues the NOTIFY (the trigger of migration 0024)
    if type is EventType.STEP:  # the one kind that comes with every step: the others are few
        keep_last(session, main_id, get_settings().events_kept_per_job)
    from models.webhooks import write_outbox  # it imports EventType from here

    write_outbox(session, event)  # the webhooks' outbox, in this same transaction
    return event


_CUT = (  # the newest event of the job not kept
    select(Event.id)
    .where(Event.job_id == bindparam("job_id"))
    .order_by(Event.id.desc())
    .offset(bindparam("kept"))
    .limit(1)
)


def keep_last(session: Session, job_id: int, kept: int) -> None:
    """Keep the job's last ``kept`` events: the one before them becomes the gap, saying up to which id the older
    ones went, and the older ones (an earlier gap among them) are deleted. A client resuming from before the gap
    reads it first, then the oldest kept."""
    cut = session.scalar(_CUT, {"job_id": job_id, "kept": kept})
    if cut is None:
        return
    session.execute(delete(Event).where(Event.job_id == job_id, Event.id < cut))
    session.execute(update(Event).where(Event.id == cut).values(type=EventType.GAP.value, data={"through": cut}))


def events_after(
    session: Session, *, tenant_id: int, job_id: int | None, after: int, upto: int | None, limit: int
) -> list[Event]:
    """The tenant's events (of one job, or of all its jobs) with ids after ``after`` and up to ``upto`` (None: no
    bound), in id order, at most ``limit``."""
    query = select(Event).where(Event.tenant_id == tenant_id, Event.id > after)
    if job_id is not None:
        query = query.where(Event.job_id == job_id)
    if upto is not None:
        query = query.where(Event.id <= upto)
    return list(session.scalars(query.order_by(Event.id).limit(limit)))


def event_view(event: Event) -> dict[str, Any]:
    """An event as its stream sends it."""
    return {
        "id": event.id,
        "type": event.type,
        "job_id": event.job_id,
        "created_at": event.created_at.isoformat(),
        "data": event.data,
    }


def last_event_id(session: Session) -> int:
    """The highest committed event id (0: none yet)."""
    return session.scalar(select(func.max(Event.id))) or 0


def latest_event_id(session: Session, job_id: int) -> int | None:
    """The job's latest event id (None: it has none)."""
    return session.scalar(select(func.max(Event.id)).where(Event.job_id == job_id))
