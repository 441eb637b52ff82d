"""Helpers for the tests of the worker: jobs made in the database, run step by step, or submitted to a real worker
and waited for."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Any

from sqlalchemy import select, update

from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.options import JobOptions
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus
from models.tenants import create_tenant
from tests.support import wait_until
from worker.providers.base import Provider, Reply
from worker.queue import enqueue_step
from worker.step import Outcome, Services, run_step


def submit(
    database: Database, texts: dict[str, str], *, kind: str = JobKind.MAIN, enqueue: bool = True, **job: Any
) -> int:
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"tenant-{uuid.uuid4().hex[:8]}")
        ids = [add_document(session, tenant_id=tenant.id, name=name, content=text).id for name, text in texts.items()]
        job.setdefault("instruction", "Check each chapter against the notes and report one fact of each.")
        created = create_job(session, tenant_id=tenant.id, document_ids=ids, kind=kind, **with_options(job))
        job_id = created.id
    if enqueue:
        enqueue_step(job_id, 0)
    return job_id


def with_options(arguments: dict[str, Any]) -> dict[str, Any]:
    """``create_job``'s arguments, the job options among them gathered into its ``options``."""
    options = {name: value for name, value in arguments.items() if name in JobOptions.model_fields}
    rest = {name: value for name, value in arguments.items() if name not in options}
    return rest | {"options": JobOptions(**options)}


def wait_for(database: Database, job_id: int, timeout: float = 180.0) -> Job:
    def finished() -> Job | None:
        with database.session() as session:
            job = session.get(Job, job_id)
            assert job is not None
            return job if JobStatus(job.status).finished and not _children_running(database, job_id) else None

    return wait_until(finished, timeout, f"job {job_id} finished", every=0.2)


def _children_running(database: Database, job_id: int) -> bool:
    with database.session() as session:
        return any(
            not JobStatus(s).finished for s in session.scalars(select(Job.status).where(Job.parent_id == job_id))
        )


def events_after_the_commit(events: list[dict[str, Any]], settle: float = 1.0) -> int:
    """How many Sentry events arrived: the worker reports once the job's end is committed, a moment after it is
    visible; a second event, if any, would follow within ``settle`` seconds."""
    with contextlib.suppress(AssertionError):  # no event at all is an answer too
        wait_until(lambda: events, 10, "a Sentry event")
    time.sleep(settle)  # under test: that no second event follows (an absence has no event to wait for)
    return len(events)


def quiet_fleet(database: Database, emulator: EmulatorServer, *, settle: float = 1.5) -> None:
    """The jobs earlier tests left unfinished (in this process's database) are cancelled and their requests in
    flight answered; then the emulator starts again from nothing, so that its billing log and counters hold only
    what the calling test sends."""
    unfinished = [status for status in JobStatus if not status.finished]
    with database.session() as session:
        session.execute(update(Job).where(Job.status.in_(unfinished)).values(status=JobStatus.CANCELLED))
    seen = -1
    while (billed := len(emulator.billing())) != seen:  # no request answered for ``settle`` seconds
        seen = billed
        time.sleep(settle)
    emulator.reset()


def new_job(database: Database, texts: dict[str, str], **job: Any) -> int:
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"steps-{uuid.uuid4().hex[:8]}")
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        return create_job(
            session,
            tenant_id=tenant.id,
            instruction="Read them all.",
            document_ids=ids,
            kind=JobKind.SUBAGENT,
            **with_options(job),
        ).id


def services(database: Database, provider: Provider, woken: list[int], **settings: Any) -> Services:
    return Services(
        database=database,
        settings=Settings(database_url=database.url, **settings),
        provider_for=lambda job: provider,
        enqueue=lambda job_id, step, delay: woken.append(job_id),
        report=lambda error: None,
    )


def run_to_end(job_id: int, steps: Services, *, until: tuple[str, ...] = ("finished", "skipped")) -> list[Outcome]:
    outcomes = []
    for _ in range(50):
        outcomes.append(run_step(job_id, steps))
        if outcomes[-1].action in until:
            return outcomes
    raise AssertionError("the job did not finish")


class Held:
    """The real provider, but every request waits at a gate the test opens: a step caught while it waits for
    the model. ``sending`` is set once a request waits there."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.gate = threading.Event()
        self.sending = threading.Event()
        self.calls = 0

    def send(self, **request: Any) -> Reply:
        self.calls += 1
        self.sending.set()
        assert self.gate.wait(30)
        return self.provider.send(**request)


def in_thread(work: Any) -> tuple[threading.Thread, list[Outcome]]:
    outcomes: list[Outcome] = []
    thread = threading.Thread(target=lambda: outcomes.append(work()))
    thread.start()
    return thread, outcomes
