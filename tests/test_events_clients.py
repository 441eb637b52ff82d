"""The clients of the event streams and what polling costs now: ``plimsoll watch`` follows a job's stream (and polls
only an API without streams), the job's view reads no history, a page of messages is bounded in bytes."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from rich.console import Console
from sqlalchemy import update
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.app import create_app
from api.client import PlimsollClient
from cli.watch import watch_job
from models.db import Database
from models.history import append_messages
from models.jobs import create_job, end_job
from models.tables import Job, JobStatus
from models.tenants import create_tenant
from testbed.stack import environment, listening_socket
from tests.support import wait_until
from tests.support_api import serve_api


@contextmanager
def uvicorn_serving(app: ASGIApp) -> Iterator[str]:
    listener = listening_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 10, "uvicorn started")
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


def without_streams(app: ASGIApp) -> ASGIApp:
    """The app as an API from before the streams: their routes answer 404. (FastAPI includes routers lazily, so
    the routes cannot simply be filtered out of ``app.router.routes``.)"""

    async def served(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/events"):
            await JSONResponse({"detail": "Not Found"}, status_code=404)(scope, receive, send)
        else:
            await app(scope, receive, send)

    return served


def a_running_job(database: Database) -> tuple[int, str]:
    with database.session() as session:
        tenant, key = create_tenant(session, name=f"watch-{uuid.uuid4().hex[:8]}")
        job = create_job(session, tenant_id=tenant.id, instruction="Read.")
        job.status = JobStatus.RUNNING
        return job.id, key


def finish_soon(database: Database, job_id: int, *, with_event: bool, after: float = 0.5) -> threading.Thread:
    def work() -> None:
        time.sleep(after)
        with database.session() as session:
            job = session.get_one(Job, job_id)
            job.final_answer = "All read."
            if with_event:
                end_job(session, job, JobStatus.SUCCEEDED)
            else:  # an older worker: the status alone
                job.status = JobStatus.SUCCEEDED

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def watched(url: str, key: str, job_id: int, interval: float) -> tuple[int, str, float]:
    output = Console(record=True, width=100)
    began = time.monotonic()
    with PlimsollClient(url, key) as client:
        code = watch_job(client, job_id, display=Console(record=True), output=output, interval=interval)
    return code, output.export_text(), time.monotonic() - began


def test_watch_follows_the_stream_and_does_not_wait_for_its_interval(database: Database) -> None:
    job_id, key = a_running_job(database)
    with uvicorn_serving(create_app(database=database)) as url:
        worker = finish_soon(database, job_id, with_event=True)
        code, answer, seconds = watched(url, key, job_id, interval=60.0)  # polling would wait a minute
        worker.join()
    assert (code, answer.strip()) == (0, "All read.")
    assert seconds < 30


def test_watch_polls_an_api_that_has_no_streams(database: Database) -> None:
    job_id, key = a_running_job(database)
    with uvicorn_serving(without_streams(create_app(database=database))) as url:
        worker = finish_soon(database, job_id, with_event=False)
        code, answer, _ = watched(url, key, job_id, interval=0.05)
        worker.join()
    assert (code, answer.strip()) == (0, "All read.")


def reads(name: str, offset: int, seq: int) -> list[dict[str, Any]]:
    call = {"type": "tool_use", "id": f"t{seq}", "name": "read_document", "input": {"name": name, "offset": offset}}
    result = {"type": "tool_result", "tool_use_id": f"t{seq}", "content": "x" * 600}
    return [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]


def test_the_view_kept_as_steps_commit_shows_what_reading_the_history_showed(database: Database) -> None:
    with serve_api(database) as api:
        caller = api.tenant()
        documents = [caller.document(name, "Text. " * 2_000) for name in ("a.txt", "b.txt", "c.txt")]
        job_id = caller.job(documents)["id"]
        with database.session() as session:
            job = session.get_one(Job, job_id)
            child = create_job(session, tenant_id=caller.tenant_id, instruction="Read b.", parent=job,
                               document_ids=documents, kind="subagent", parent_tool_use_id="d1")  # fmt: skip
            append_messages(session, job, reads("a.txt", 0, 1), step=1)
            append_messages(session, child, reads("b.txt", 0, 2) + reads("b.txt", 3_000, 3), step=1)
            append_messages(session, job, reads("a.txt", 3_000, 4) + reads("b.txt", 6_000, 5), step=2)
            append_messages(session, job, reads("a.txt", 3_000, 6), step=3)  # a page read again
        kept = caller.get(f"/v1/jobs/{job_id}").json()
        with database.session() as session:
            session.execute(update(Job).where(Job.id.in_([job_id, child.id])).values(reads=None))
        from_history = caller.get(f"/v1/jobs/{job_id}").json()
    assert kept["progress"] == from_history["progress"]
    assert kept["progress"]["documents_read"] == ["a.txt", "b.txt"]
    assert kept["progress"]["reading"]["document"] == "a.txt" and kept["progress"]["reading"]["page"] == 2


def test_a_page_of_messages_is_bounded_in_bytes_and_says_where_the_next_starts(database: Database) -> None:
    with serve_api(database) as api:
        caller = api.tenant()
        job_id = caller.job([caller.document("a.txt", "Text.")])["id"]
        with database.session() as session:
            job = session.get_one(Job, job_id)
            for seq in range(1, 6):
                append_messages(session, job, reads("a.txt", seq, seq), step=seq)
        whole = caller.get(f"/v1/jobs/{job_id}/messages").json()  # the default bound holds them all
        assert (len(whole["items"]), whole["total"], whole["next_offset"]) == (11, 11, None)
        with environment({"PLIMSOLL_MAX_PAGE_BYTES": "1500"}):
            pages, offset = [], 0
            while offset is not None:
                page = caller.get(f"/v1/jobs/{job_id}/messages", params={"offset": offset, "limit": 100}).json()
                pages.append(page["items"])
                offset = page["next_offset"]
    assert [m["seq"] for page in pages for m in page] == list(range(11))  # every message once, in order
    assert max(len(page) for page in pages) < 11 and all(page for page in pages)


def test_keep_alive_pings_between_events_are_not_events(database: Database) -> None:
    # A ping is an SSE comment, which httpx-sse passes on as a message without data: read as an event, it crashed
    # `plimsoll watch` after the first quiet interval (15 s by default; 1 s here, two of them before the end).
    job_id, key = a_running_job(database)
    with environment({"PLIMSOLL_EVENTS_PING_SECONDS": "1"}), uvicorn_serving(create_app(database=database)) as url:
        worker = finish_soon(database, job_id, with_event=True, after=2.5)
        with PlimsollClient(url, key) as client:
            types = [event.type for event in client.job_events(job_id)]
        worker.join()
    assert types[-1] == "job.ended" and "" not in types
