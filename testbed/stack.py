"""The real stack for benchmarks and tests: a fresh PostgreSQL database, Redis, a Celery worker, the API and
the emulator, each in this process where it can be, all talking over their real protocols."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import uvicorn
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from emulator import EmulatorConfig, EmulatorServer
from models import db, settings
from models.migrate import upgrade

POSTGRES_URL = os.environ.get("PLIMSOLL_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def redis_database(url: str, offset: int) -> str:
    """``url`` with its Redis database number ``offset`` further on (a Redis server has 16 by default)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{int(parts.path.strip('/') or 0) + offset}"))


# Under pytest-xdist each worker process (gw0, gw1, …) takes the database that many after the given one, so that
# parallel workers never share the limiter's keys (plimsoll:ratelimit:*, which every test forgets) or the database
# outage's. Without xdist, and for the benchmarks, the given one.
REDIS_URL = redis_database(
    os.environ.get("PLIMSOLL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")),
)


@contextmanager
def fresh_database(server_url: str = POSTGRES_URL, prefix: str = "plimsoll_test") -> Iterator[str]:
    """A new, migrated database on the server of ``server_url``, dropped afterwards; yields its URL."""
    server = make_url(server_url).set(drivername="postgresql+psycopg")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
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


def clear_cached_settings() -> None:
    from worker import tasks

    settings.get_settings.cache_clear()
    db.get_database.cache_clear()
    tasks.forget_services()


@contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Settings given to every part through the environment, as in production (None: unset); restored afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    clear_cached_settings()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        clear_cached_settings()


@contextmanager
def bundled_emulator(config: EmulatorConfig | None = None) -> Iterator[EmulatorServer]:
    """The emulator in this process, and the settings that send the emulator's models to it (PLIMSOLL_EMULATOR_URL),
    as make up's are."""
    with (
        EmulatorServer(config or EmulatorConfig()) as emulator,
        environment({"PLIMSOLL_EMULATOR_URL": emulator.base_url}),
    ):
        yield emulator


@contextmanager
def celery_worker(broker_url: str = REDIS_URL, concurrency: int = 4) -> Iterator[Any]:
    """A Celery worker in this process, on a queue of its own (runs side by side never share steps)."""
    from celery.contrib.testing.worker import start_worker

    import worker.tasks  # noqa: F401  (registers the task)
    from worker.celery_app import app

    queue = f"plimsoll-{uuid.uuid4().hex[:8]}"
    app.conf.broker_url = broker_url
    app.conf.task_default_queue = queue
    app.conf.task_default_routing_key = queue
    with start_worker(
        app,
        pool="threads",
        concurrency=concurrency,
        queues=[queue],
        perform_ping_check=False,
        shutdown_timeout=60,
        send_events=True,  # as `plimsoll worker` does (-E): Flower shows them
    ) as started:
        yield started


def listening_socket() -> socket.socket:
    """A socket bound to a free port of 127.0.0.1 and listening: a server started on it cannot lose the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now: for a process that binds it itself, or a closed port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def api_server(database_url: str) -> Iterator[str]:
    """The HTTP API served by uvicorn on a free port of 127.0.0.1; yields its base URL."""
    from api.app import create_app
    from models.db import Database

    database = Database(database_url)
    listener = listening_socket()
    server = uvicorn.Server(uvicorn.Config(create_app(database=database), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        database.dispose()


def worker_environment(url: str, queue: str, emulator_url: str, api_key: str) -> dict[str, str]:
    """The environment of a Celery worker process of the real stack: this process's own, with the database
    ``url``, the broker, the step ``queue`` and the emulator (speaking Anthropic's API) as the provider."""
    return {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "PLIMSOLL_DATABASE_URL": url,
        "PLIMSOLL_BROKER_URL": REDIS_URL,
        "PLIMSOLL_QUEUE": "celery",
        "PLIMSOLL_STEP_QUEUE": queue,
        "PLIMSOLL_EMULATOR_URL": emulator_url,
        "PLIMSOLL_ANTHROPIC_BASE_URL": emulator_url,
        "PLIMSOLL_ANTHROPIC_API_KEY": api_key,
    }
