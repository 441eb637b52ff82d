"""The Alembic history builds the schema from nothing, on PostgreSQL and SQLite, and agrees with the models."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import inspect

from models.db import make_engine
from models.migrate import alembic_config, upgrade
from models.tables import Base


def test_the_migrated_postgres_database_matches_the_models(database_url: str) -> None:
    command.check(alembic_config(database_url))  # raises if autogenerate would find any difference
    engine = make_engine(database_url)
    assert set(inspect(engine).get_table_names()) == {*Base.metadata.tables, "alembic_version"}
    engine.dispose()


def test_the_embedded_sqlite_database_is_built_by_the_same_migrations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plimsoll.sqlite3'}"
    upgrade(url)
    command.check(alembic_config(url))
    engine = make_engine(url)
    assert set(inspect(engine).get_table_names()) == {*Base.metadata.tables, "alembic_version"}
    engine.dispose()
