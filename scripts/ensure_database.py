"""Make sure the PostgreSQL database named by PLIMSOLL_DATABASE_URL exists and its role may log in to it.

``make up`` runs this before the migrations. When the URL's role cannot connect, the role and the database are
created, connecting as the server's superuser (PLIMSOLL_ADMIN_USER, default ``postgres``), which on a local
server with trust or peer authentication needs no password. Nothing is changed when the database answers."""

from __future__ import annotations

import os
import sys

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url


def connect(url: URL, *, user: str | None = None, database: str | None = None) -> psycopg.Connection[object]:
    return psycopg.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        user=user or url.username,
        password=url.password if user is None else None,
        dbname=database or url.database,
        autocommit=True,
        connect_timeout=5,
    )


def ensure_database(url: URL, admin_user: str) -> str:
    """What was done, in words; raises psycopg.Error when even the superuser cannot connect."""
    try:
        connect(url).close()
        return f"database {url.database} answers as {url.username}"
    except psycopg.OperationalError:
        pass
    role, database = url.username or "plimsoll", url.database or "plimsoll"
    done = []
    with connect(url, user=admin_user, database="postgres") as admin:
        if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            create = sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role))
            if url.password:
                create += sql.SQL(" PASSWORD {}").format(sql.Literal(url.password))
            admin.execute(create)
            done.append(f"role {role}")
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone() is None:
            admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(role)))
            done.append(f"database {database}")
    return "created " + " and ".join(done) if done else f"database {database} exists; its role {role} may log in"


def main() -> int:
    url = make_url(os.environ.get("PLIMSOLL_DATABASE_URL", ""))
    if url.get_backend_name() != "postgresql":
        print(f"PLIMSOLL_DATABASE_URL is not PostgreSQL ({url.get_backend_name()}): nothing to create")
        return 0
    admin_user = os.environ.get("PLIMSOLL_ADMIN_USER", "postgres")
    try:
        print(ensure_database(url, admin_user))
    except psycopg.Error as error:
        where = f"{url.host or '127.0.0.1'}:{url.port or 5432}"
        print(
            f"PostgreSQL at {where}: {url.username} cannot connect to {url.database}, and the superuser {admin_user} "
            f"could not create them ({type(error).__name__}). Create them yourself "
            f"(createuser {url.username}; createdb -O {url.username} {url.database}) or set PLIMSOLL_ADMIN_USER.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
