"""A job's events: what a step, a compaction, a subagent, a notice or an ending tells the job's person and their
systems. ``record`` writes one in the caller's transaction, so it is seen only once what it reports is committed;
on PostgreSQL it also queues a NOTIFY on ``CHANNEL``, which PostgreSQL delivers only at that commit, so a
listener learns of new events without polling the database per client."""

from __future__ import annotations

import enum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.tables import Event, Job

CHANNEL = "plimsoll_events"


class EventType(enum.StrEnum):
    STEP = "step"  # a step done: its number, stage, tokens against the budget, cache-read share, cost
    COMPACTION = "compaction"
    SUBAGENT_STARTED = "subagent.started"
    SUBAGENT_ENDED = "subagent.ended"
    NOTICE = "notice"
    STATUS = "status"  # a status change short of an end (queued -> running)
    ENDED = "job.ended"  # succeeded, failed, incomplete, cancelled or needs a new chat


def record(session: Session, job: Job, type: EventType, data: dict[str, Any]) -> Event:
    """Add an event for ``job`` (a subagent's belong to its main job, and say which subagent in ``data``)."""
    main_id = job.parent_id if job.parent_id is not None else job.id
    if job.parent_id is not None:
        data = {"subagent": job.id} | data
    event = Event(tenant_id=job.tenant_id, job_id=main_id, type=type.value, data=data)
    session.add(event)
    session.flush()
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_notify(CHANNEL, f"{job.tenant_id}:{main_id}:{event.id}")))
    from models.webhooks import write_outbox  # it imports EventType from here

    write_outbox(session, event)  # the webhooks' outbox, in this same transaction
    return event
