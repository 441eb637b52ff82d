"""Engines and sessions. PostgreSQL in production and tests; a SQLite file for the embedded default."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from models.settings import get_settings


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    # Hidden parameters: a database error's message would otherwise quote them (documents, instructions) into
    # logs and error reports.
    engine = create_engine(url, hide_parameters=True)
    _ping_when_idle(engine)
    return engine


IDLE_PING_SECONDS = 1.0


def _ping_when_idle(engine: Engine) -> None:
    """A connection idle in the pool for ``IDLE_PING_SECONDS`` or more is pinged before it is used, and replaced if
    the database has gone away (restarted, failed over) meanwhile. ``pool_pre_ping`` pings at every checkout: a
    round trip at each of a step's four transactions, which mostly follow each other within milliseconds."""

    @event.listens_for(engine.pool, "checkin")
    def returned(_connection: Any, entry: ConnectionPoolEntry) -> None:
        entry.info["returned"] = time.monotonic()

    @event.listens_for(engine.pool, "checkout")
    def taken(connection: Any, entry: ConnectionPoolEntry, _proxy: Any) -> None:
        returned = entry.info.get("returned")
        if returned is not None and time.monotonic() - returned < IDLE_PING_SECONDS:
            return
        try:
            engine.dialect.do_ping(connection)
        except Exception as error:  # a connection that cannot run SELECT 1 is of no use
            raise DisconnectionError() from error  # the pool connects again, up to three times


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # the in-process worker and the API read while a step writes
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class Database:
    """One engine and its session factory."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose work is committed when the block ends, rolled back if it raises."""
        with self.sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


@cache
def get_database() -> Database:
    return Database(get_settings().database_url)
