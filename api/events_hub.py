"""How the API learns of new events without polling the database per client: one listener per API process
(PostgreSQL LISTEN on ``models.events.CHANNEL``, whose NOTIFY is delivered at the commit of the event it names)
moves the *horizon* (below), and one reader then reads the new events once for every stream of the process and
hands each live stream its own. A stream reads the database itself only to catch up (a resume, a new stream, one
that fell ``BATCH`` events behind, a resync): it is live once its read reached what the reader has handed out.

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
from typing import Any

import psycopg
from anyio import to_thread
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from models.db import Database
from models.events import CHANNEL, event_view, last_event_id
from models.settings import Settings
from models.tables import Event

logger = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0
WRITERS = (
    "SELECT virtualtransaction FROM pg_locks WHERE relation = 'events'::regclass AND mode = 'RowExclusiveLock' "
    "AND granted AND pid <> pg_backend_pid()"
)
TICK_SECONDS = 0.1  # how often a hole's age is looked at while no notification comes
BATCH = 500
"""Events read at once, and the most a live stream holds unsent: one further behind reads the database again."""


@dataclass(eq=False)
class Subscriber:
    """A stream: the tenant's events, or one job's; ``wake`` is set when there may be more for it. A live stream
    is handed its events (``pending``) as the hub reads them."""

    tenant_id: int
    job_id: int | None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    live: bool = False
    pending: list[dict[str, Any]] = field(default_factory=list)

    def wants(self, tenant_id: int, job_id: int) -> bool:
        return self.tenant_id == tenant_id and (self.job_id is None or self.job_id == job_id)

    def hand(self, event: dict[str, Any]) -> None:
        if not self.live:
            return
        if len(self.pending) >= BATCH:  # a slow client: it catches up from the database, nothing kept for it
            self.demote()
            return
        self.pending.append(event)

    def demote(self) -> None:
        self.live = False
        self.pending.clear()
        self.wake.set()

    def take(self) -> list[dict[str, Any]]:
        taken, self.pending = self.pending, []
        return taken


class Hub:
    def __init__(self, database: Database, settings: Settings) -> None:
        self.database = database
        self.settings = settings
        self.horizon = 0
        self.handed = 0  # every event up to this id was handed to the live streams that want it
        self._resynced = 0  # the horizon read at the last resync
        self.generation = 0  # a resync starts a new one: a read begun before it is not handed out
        self.subscribers: set[Subscriber] = set()
        self._committed: dict[int, tuple[int, int]] = {}  # ids above the horizon that committed: (tenant, job)
        self._hole_since: tuple[int, float] | None = None  # the first missing id above the horizon, and since when
        self._ready = asyncio.Event()
        self._advanced = asyncio.Event()
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

    def caught_up(self, subscriber: Subscriber, upto: int, generation: int) -> None:
        """The stream read the database up to ``upto``: live if nothing was handed out since."""
        subscriber.live = upto == self.handed and generation == self.generation

    async def _run(self) -> None:
        reader = asyncio.create_task(self._hand_out(), name="plimsoll-events-reader")
        try:
            if self.database.engine.dialect.name == "postgresql":
                await self._listen()
            else:
                await self._poll()
        finally:
            reader.cancel()

    async def _hand_out(self) -> None:
        """Read what the horizon passed, once, and hand it to the streams that want it."""
        while True:
            await self._advanced.wait()
            self._advanced.clear()
            while self.handed < self.horizon:
                if not self.subscribers:  # nobody to hand them to: a new stream reads what it needs itself
                    self.handed = self.horizon
                    break
                generation, after, upto = self.generation, self.handed, self.horizon
                try:
                    events = await to_thread.run_sync(self._events_between, after, upto)
                except Exception as error:  # the database busy or away: the streams wait, the read is tried again
                    logger.warning("reading new events failed (%s)", type(error).__name__)
                    await asyncio.sleep(RECONNECT_SECONDS)
                    continue
                if generation != self.generation:
                    continue
                self.handed = events[-1][1]["id"] if len(events) == BATCH else upto
                woken: set[Subscriber] = set()
                for tenant_id, event in events:
                    for subscriber in self.subscribers:
                        if subscriber.wants(tenant_id, event["job_id"]):
                            subscriber.hand(event)
                            woken.add(subscriber)
                for subscriber in woken:
                    subscriber.wake.set()

    def _events_between(self, after: int, upto: int) -> list[tuple[int, dict[str, Any]]]:
        """The events with ids in (after, upto], at most ``BATCH``, each with its tenant."""
        with self.database.session() as session:
            query = select(Event).where(Event.id > after, Event.id <= upto).order_by(Event.id).limit(BATCH)
            return [(each.tenant_id, event_view(each)) for each in session.scalars(query)]

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
                newest = await to_thread.run_sync(self._last_id)
            except Exception as error:
                logger.warning("looking for new events failed (%s)", type(error).__name__)
                continue
            if newest[0] > self.horizon:
                self.horizon = newest[0]
                self._advanced.set()

    async def _resync(self) -> None:
        """Start over from the highest committed id, once every transaction that was writing events when it was
        read has ended (so none of them can still commit a lower one); later ids come as notifications."""
        horizon, writing = await to_thread.run_sync(self._last_id)
        deadline = time.monotonic() + self.settings.events_hole_seconds
        while writing and time.monotonic() < deadline:
            await asyncio.sleep(TICK_SECONDS)
            writing = await to_thread.run_sync(self._still_writing, writing)
        self.horizon = self._resynced = self.handed = horizon
        self.generation += 1
        self._committed = {k: v for k, v in self._committed.items() if k > horizon}
        self._hole_since = None
        self._ready.set()
        for subscriber in self.subscribers:
            subscriber.demote()  # it reads what it missed from the database

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
        released = False
        while self._committed:
            following = self.horizon + 1
            if following in self._committed:
                self._committed.pop(following)
                released = True
                self.horizon = following
                continue
            now = time.monotonic()
            if self._hole_since is None or self._hole_since[0] != following:
                self._hole_since = (following, now)
            if now - self._hole_since[1] < self.settings.events_hole_seconds:
                break
            self.horizon = min(self._committed) - 1  # the hole given up for, whatever its length
        if released:
            self._advanced.set()

    def _wake(self, events: Iterable[tuple[int, int]]) -> None:
        for tenant_id, job_id in set(events):
            for subscriber in self.subscribers:
                if subscriber.wants(tenant_id, job_id):
                    subscriber.wake.set()
