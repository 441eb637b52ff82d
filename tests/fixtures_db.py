"""A real PostgreSQL database for the tests: a fresh one per test session, migrated with Alembic, dropped at
the end. The server is PLIMSOLL_TEST_DATABASE_URL's (default: postgres on 127.0.0.1:5432, database ``test``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from models.db import Database
from testbed.stack import fresh_database


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture(scope="session")
def database(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    yield db
    db.dispose()
