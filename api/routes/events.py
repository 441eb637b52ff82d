"""A job's events, and all of a tenant's, as Server-Sent Events (api/events_hub.py): each with its id, so that a
client resuming with ``Last-Event-ID`` (or ``?after=``) gets exactly what it missed, in order, then live ones."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.deps import DatabaseDep, TenantDep
from api.errors import ERROR_RESPONSES
from api.events_hub import BATCH, Hub
from api.schemas import Id
from models.db import Database
from models.errors import InvalidInput
from models.events import EventType, event_view, events_after
from models.integers import MAX_ID
from models.jobs import job_of
from models.settings import get_settings

router = APIRouter(tags=["events"], responses=ERROR_RESPONSES)

STREAM: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "a stream of Server-Sent Events"}
}

AfterQuery = Annotated[
    int | None, Query(ge=0, le=MAX_ID, description="resume after this event id (as the Last-Event-ID header does)")
]
LastEventId = Annotated[str | None, Header(description="the id of the last event received: resume after it")]


@router.get("/v1/jobs/{job_id}/events", response_class=EventSourceResponse, responses=STREAM)
async def job_events(
    job_id: Id,
    request: Request,
    tenant: TenantDep,
    database: DatabaseDep,
    after: AfterQuery = None,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    """The job's events from its first kept one (or after the one named), then live ones until it ends: `step`,
    `compaction`, `subagent.started`, `subagent.ended`, `notice`, `status`, `job.ended` (the last), and `gap`
    where older events went."""
    start = _resume_point(after, last_event_id)
    await to_thread.run_sync(partial(_job_of, database, tenant.id, job_id))
    return _response(request, database, tenant.id, job_id, start)


@router.get("/v1/events", response_class=EventSourceResponse, responses=STREAM)
async def tenant_events(
    request: Request,
    tenant: TenantDep,
    database: DatabaseDep,
    after: AfterQuery = None,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    """All of the tenant's jobs' events from now on (or after the one named); each names its job."""
    return _response(request, database, tenant.id, None, _resume_point(after, last_event_id))


def _resume_point(after: int | None, header: str | None) -> int | None:
    if header is not None and header.strip():
        try:
            value = int(header)
        except ValueError:
            raise InvalidInput("Last-Event-ID must be an event id (a whole number)") from None
        if not 0 <= value <= MAX_ID:
            raise InvalidInput(f"Last-Event-ID must be between 0 and {MAX_ID}")
        return value
    return after


def _job_of(database: Database, tenant_id: int, job_id: int) -> None:
    with database.session() as session:
        job_of(session, tenant_id=tenant_id, job_id=job_id)  # another tenant's job is not found


def hub_of(request: Request, database: Database) -> Hub:
    hub: Hub | None = getattr(request.app.state, "events_hub", None)
    if hub is None:
        hub = request.app.state.events_hub = Hub(database, get_settings())
    return hub


def _response(
    request: Request, database: Database, tenant_id: int, job_id: int | None, start: int | None
) -> EventSourceResponse:
    hub = hub_of(request, database)
    stream = _stream(hub, database, tenant_id, job_id, start)
    return EventSourceResponse(stream, ping=int(max(1, get_settings().events_ping_seconds)))


async def _stream(
    hub: Hub, database: Database, tenant_id: int, job_id: int | None, start: int | None
) -> AsyncIterator[ServerSentEvent]:
    subscriber = await hub.subscribe(tenant_id, job_id)
    try:
        last = start if start is not None else (0 if job_id is not None else hub.handed)
        while True:
            subscriber.wake.clear()  # before reading: a wake during the read is not lost
            if subscriber.live:
                events, finished = subscriber.take(), False
            else:  # catching up: from the database, up to what the hub has handed out
                upto, generation = hub.handed, hub.generation
                events, finished = await to_thread.run_sync(partial(_read, database, tenant_id, job_id, last, upto))
                if len(events) < BATCH:
                    hub.caught_up(subscriber, upto, generation)
            for event in events:
                if event["id"] <= last:
                    continue
                last = event["id"]
                yield ServerSentEvent(data=json.dumps(event, separators=(",", ":")), event=event["type"], id=str(last))
                if job_id is not None and event["type"] == EventType.ENDED:
                    return
            if finished:  # a job that ended before it had events, or whose end was read before
                return
            if subscriber.live or len(events) < BATCH:
                await subscriber.wake.wait()
    finally:
        hub.unsubscribe(subscriber)


def _read(
    database: Database, tenant_id: int, job_id: int | None, after: int, upto: int
) -> tuple[list[dict[str, Any]], bool]:
    with database.session() as session:
        rows = events_after(session, tenant_id=tenant_id, job_id=job_id, after=after, upto=upto, limit=BATCH)
        finished = False
        if job_id is not None and not rows and job_of(session, tenant_id=tenant_id, job_id=job_id).status.finished:
            # Ended with nothing more to tell, even beyond the horizon: an end read before, or from before events.
            finished = not events_after(session, tenant_id=tenant_id, job_id=job_id, after=after, upto=None, limit=1)
        return [event_view(each) for each in rows], finished
