"""Alembic environment: the database from Plimsoll's settings (or the URL the caller configured)."""

from __future__ import annotations

from alembic import context

from models.db import make_engine
from models.settings import get_settings
from models.tables import Base

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(url)
    with engine.connect() as connection:
        # render_as_batch: SQLite (the embedded default) can only alter a table by copying it
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
