"""A real PostgreSQL database for the tests: a fresh one per test session, migrated with Alembic, dropped at
the end. The server is PLIMSOLL_TEST_DATABASE_URL's (default: postgres on 127.0.0.1:5432, database ``test``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from models.db import Database
from models.migrate import upgrade

SERVER_URL = os.environ.get("PLIMSOLL_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    server = make_url(SERVER_URL).set(drivername="postgresql+psycopg")
    name = f"plimsoll_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def database(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    yield db
    db.dispose()
