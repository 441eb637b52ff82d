"""How the API learns of new events without polling the database per client: one listener per API process
(PostgreSQL LISTEN on ``models.events.CHANNEL``, whose NOTIFY is delivered at the commit of the event it names)
wakes the streams of the event's tenant and job, and each stream then reads its own rows after its last id.

PostgreSQL rather than Redis pub/sub: the NOTIFY is part of the event's transaction, so it is sent if and only if
the event committed, in commit order; a message published to Redis after the commit would be lost if the worker
died between the two, and one published before could announce an event that was rolled back.

Event ids are taken from their sequence before the commit, so two transactions can commit their events out of id
order. A stream that read id 12 before id 11 committed would never see 11: so streams read only up to the
*horizon*, the highest id below which every id has committed (or was given up for after ``events_hole_seconds``:
a rolled-back transaction's id never commits). SQLite (local mode) writes one transaction at a time, so its ids
commit in order; it cannot notify, and this process looks for new events every ``events_poll_seconds``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import psycopg
from anyio import to_thread
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from models.db import Database
from models.events import CHANNEL, last_event_id
from models.settings import Settings
from models.tables import Event

logger = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0
WRITERS = (
    "SELECT virtualtransaction FROM pg_locks WHERE relation = 'events'::regclass AND mode = 'RowExclusiveLock' "
    "AND granted AND pid <> pg_backend_pid()"
)
TICK_SECONDS = 0.1  # how often a hole's age is looked at while no notification comes


@dataclass(eq=False)
class Subscriber:
    """A stream: the tenant's events, or one job's; ``wake`` is set when the horizon passes one of them."""

    tenant_id: int
    job_id: int | None
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def wants(self, tenant_id: int, job_id: int) -> bool:
        return self.tenant_id == tenant_id and (self.job_id is None or self.job_id == job_id)


class Hub:
    def __init__(self, database: Database, settings: Settings) -> None:
        self.database = database
        self.settings = settings
        self.horizon = 0
        self._resynced = 0  # the horizon read at the last resync
        self.subscribers: set[Subscriber] = set()
        self._committed: dict[int, tuple[int, int]] = {}  # ids above the horizon that committed: (tenant, job)
        self._hole_since: tuple[int, float] | None = None  # the first missing id above the horizon, and since when
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def subscribe(self, tenant_id: int, job_id: int | None) -> Subscriber:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="plimsoll-events-hub")
        await self._ready.wait()
        subscriber = Subscriber(tenant_id, job_id)
        self.subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        if self.database.engine.dialect.name == "postgresql":
            await self._listen()
        else:
            await self._poll()

    async def _listen(self) -> None:
        url = self.database.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    await self._resync()  # what committed while nobody listened: every stream reads again
                    while True:
                        async for notice in connection.notifies(timeout=TICK_SECONDS):
                            self._committed_event(notice.payload)
                        self._advance()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the database restarting: listen again, and let every stream read again
                logger.warning("event listener lost its connection (%s); reconnecting", type(error).__name__)
                await asyncio.sleep(RECONNECT_SECONDS)

    async def _poll(self) -> None:
        await self._resync()
        while True:
            await asyncio.sleep(self.settings.events_poll_seconds)
            try:
                newest = await to_thread.run_sync(self._newest_after, self.horizon)
            except Exception as error:
                logger.warning("looking for new events failed (%s)", type(error).__name__)
                continue
            for event_id, tenant_id, job_id in newest:
                self.horizon = max(self.horizon, event_id)
                self._wake([(tenant_id, job_id)])

    async def _resync(self) -> None:
        """Start over from the highest committed id, once every transaction that was writing events when it was
        read has ended (so none of them can still commit a lower one); later ids come as notifications."""
        horizon, writing = await to_thread.run_sync(self._last_id)
        deadline = time.monotonic() + self.settings.events_hole_seconds
        while writing and time.monotonic() < deadline:
            await asyncio.sleep(TICK_SECONDS)
            writing = await to_thread.run_sync(self._still_writing, writing)
        self.horizon = self._resynced = horizon
        self._committed = {k: v for k, v in self._committed.items() if k > horizon}
        self._hole_since = None
        self._ready.set()
        for subscriber in self.subscribers:
            subscriber.wake.set()

    def _last_id(self) -> tuple[int, set[str]]:
        """The highest committed id, and the transactions writing events (PostgreSQL) as it was read."""
        with self.database.session() as session:
            writing = self._writers(session)
            return last_event_id(session), writing

    def _still_writing(self, writing: set[str]) -> set[str]:
        with self.database.session() as session:
            return writing & self._writers(session)

    def _writers(self, session: Session) -> set[str]:
        if self.database.engine.dialect.name != "postgresql":
            return set()  # SQLite: one writer at a time, its ids in commit order
        # A transaction that inserted an event holds this lock on the table until it ends.
        rows = session.execute(text(WRITERS))
        return {row[0] for row in rows}

    def _newest_after(self, after: int) -> list[tuple[int, int, int]]:
        with self.database.session() as session:
            query = select(Event.id, Event.tenant_id, Event.job_id).where(Event.id > after).order_by(Event.id)
            return [(row.id, row.tenant_id, row.job_id) for row in session.execute(query)]

    def _committed_event(self, payload: str) -> None:
        try:
            tenant_id, job_id, event_id = (int(part) for part in payload.split(":"))
        except ValueError:
            logger.warning("an event notification that is not tenant:job:id was ignored")
            return
        if event_id <= self.horizon:
            if event_id <= self._resynced:  # committed before the horizon was read: streams read it already
                return
            logger.warning(  # its id was given up for: streams past it have missed it
                "event %s committed after %.0f s; streams past it missed it",
                event_id,
                self.settings.events_hole_seconds,
            )
            self._wake([(tenant_id, job_id)])
            return
        self._committed[event_id] = (tenant_id, job_id)
        self._advance()

    def _advance(self) -> None:
        """Move the horizon over the ids that committed, and over a hole older than ``events_hole_seconds``."""
        released = []
        while self._committed:
            following = self.horizon + 1
            if following in self._committed:
                released.append(self._committed.pop(following))
                self.horizon = following
                continue
            now = time.monotonic()
            if self._hole_since is None or self._hole_since[0] != following:
                self._hole_since = (following, now)
            if now - self._hole_since[1] < self.settings.events_hole_seconds:
                break
            self.horizon = min(self._committed) - 1  # the hole given up for, whatever its length
        self._wake(released)

    def _wake(self, events: Iterable[tuple[int, int]]) -> None:
        for tenant_id, job_id in set(events):
            for subscriber in self.subscribers:
                if subscriber.wants(tenant_id, job_id):
                    subscriber.wake.set()
