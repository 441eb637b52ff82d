"""Helpers for the tests of the plimsoll command: the real API served on a free port, and the database changes
that play the worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from sqlalchemy import select

from api.app import create_app
from models.db import Database
from models.events import EventType, record
from models.jobs import end_job
from models.tables import ApiKey, Job, JobStatus
from models.tenants import hash_key
from testbed.stack import listening_socket
from tests.support import wait_until


@dataclass
class Served:
    url: str
    database: Database
    enqueued: list[int] = field(default_factory=list)
    on_enqueue: Callable[[int], None] | None = None  # plays the worker where a test needs one

    def enqueue(self, job_id: int) -> None:
        self.enqueued.append(job_id)
        if self.on_enqueue is not None:
            self.on_enqueue(job_id)


@contextmanager
def serving(database: Database) -> Iterator[Served]:
    """The real app under uvicorn on a free port, steps put on a list (``on_enqueue`` plays the worker)."""
    listener = listening_socket()
    port = listener.getsockname()[1]
    state = Served(f"http://127.0.0.1:{port}", database)
    app = create_app(database=database, enqueue=state.enqueue)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 10, "uvicorn started")
    try:
        yield state
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()


def tenant_of(database: Database, key: str) -> int:
    with database.session() as session:
        return session.scalars(select(ApiKey.tenant_id).where(ApiKey.key_hash == hash_key(key))).one()


def set_job(database: Database, job_id: int, **values: object) -> None:
    """Change the job as a step would: a new status with its event (an end with the job's last)."""
    with database.session() as session:
        job = session.get_one(Job, job_id)
        status = values.pop("status", None)
        for name, value in values.items():
            setattr(job, name, value)
        if isinstance(status, JobStatus) and status.finished:
            end_job(session, job, status)
        elif isinstance(status, JobStatus):
            job.status = status
            record(session, job, EventType.STATUS, {"status": status.value})


def finish_later(database: Database, *, status: JobStatus, answer: str) -> Callable[[int], None]:
    """Plays the worker: a moment after the job is queued, it finishes with ``answer``."""

    def finish(job_id: int) -> None:
        def work() -> None:
            time.sleep(0.2)  # the job ends a moment after it is queued: what --wait must wait for
            set_job(database, job_id, status=status, final_answer=answer, step=1)

        threading.Thread(target=work, daemon=True).start()

    return finish


def parse(group: Any, argv: list[str]) -> Any:
    """Parse ``argv`` as the real command line would, without running it (a glob stands for one file)."""
    argv = [str(Path(__file__).resolve().parent.parent / "README.md") if "*" in part else part for part in argv]
    context = group.make_context("plimsoll", list(argv), resilient_parsing=True)
    name, command, rest = group.resolve_command(context, argv)
    assert command is not None, argv
    if hasattr(command, "resolve_command"):  # a group of its own: tenant
        return parse(command, rest)
    return command.make_context(name or "", rest, parent=context)
