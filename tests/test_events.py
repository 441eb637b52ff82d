"""A job's events: recorded in the transactions that make them true (worker/step/, models/jobs.py), kept bounded
per job, and streamed as Server-Sent Events by the real API under uvicorn (api/routes/events.py), resumable with
Last-Event-ID, each tenant seeing only its own."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from sqlalchemy import select

from api.events_hub import BATCH, Hub, Subscriber
from emulator import EmulatorServer
from models.db import Database
from models.events import EventType, record
from models.jobs import create_job, end_job
from models.settings import get_settings
from models.tables import Event, Job, JobStatus, Step
from models.tenants import create_tenant
from testbed.stack import api_server, environment
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_api import step_row
from tests.support_worker import new_job, run_to_end, services
from worker.providers import AnthropicProvider
from worker.step.records import record_step

ROOT = Path(__file__).resolve().parent.parent
TEXTS = {"a.txt": "Alpha text of the first chapter.", "b.txt": "Beta text of the second chapter."}


def events_of(database: Database, job_id: int) -> list[Event]:
    with database.session() as session:
        return list(session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id)))


def test_a_job_tells_its_status_each_step_and_its_end_last(database: Database, emulator_reset: EmulatorServer) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    job_id = new_job(database, TEXTS)
    run_to_end(job_id, services(database, provider, []))
    events = events_of(database, job_id)
    with database.session() as session:
        steps = list(session.scalars(select(Step).where(Step.job_id == job_id).order_by(Step.step)))
        job = session.get_one(Job, job_id)
    assert [e.type for e in events] == ["status", "status"] + ["step"] * len(steps) + ["job.ended"]
    assert [e.data["status"] for e in events[:2]] == ["queued", "running"]
    for event, step in zip(events[2:-1], steps, strict=True):
        assert event.data["step"] == step.step and event.data["stage"] == step.stage
        assert event.data["tokens"] == step.reported_input_tokens and event.data["budget"] == job.budget
        assert step.reported_input_tokens and event.data["cache_read_share"] == (
            step.cache_read_tokens / step.reported_input_tokens
        )
    assert events[-1].data == {"status": "succeeded", "reason": None}
    told = json.dumps([e.data for e in events])
    assert all(text not in told for text in TEXTS.values()) and (job.final_answer or "x") not in told


def test_a_notice_is_told_before_the_end_it_explains(database: Database, emulator_reset: EmulatorServer) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    with database.session() as session:
        tenant, _ = create_tenant(session, name="events-notice")
        job = create_job(session, tenant_id=tenant.id, instruction="Read them all.")
        job.max_steps = 1
        job_id = job.id
    run_to_end(job_id, services(database, provider, []))
    events = events_of(database, job_id)
    assert [e.type for e in events[-3:]] == ["step", "notice", "job.ended"]
    assert events[-2].data["text"] and events[-1].data["status"] == "failed"
    assert "1 step" in events[-1].data["reason"]


def test_what_is_kept_per_job_is_bounded_and_a_gap_says_where_older_events_went(database: Database) -> None:
    with environment({"PLIMSOLL_EVENTS_KEPT_PER_JOB": "10"}), database.session() as session:
        tenant, _ = create_tenant(session, name="events-kept")
        job = create_job(session, tenant_id=tenant.id, instruction="Read.")
        first = session.scalars(select(Event.id).where(Event.job_id == job.id)).one()
        for step in range(1, 31):
            record_step(session, job, step_row(job.id, step, stage="fits"))
    events = events_of(database, job.id)
    assert len(events) == 11  # the last ten, and the gap before them
    assert events[0].type == "gap" and events[0].data == {"through": events[0].id} and events[0].id > first
    assert [e.data["step"] for e in events[1:]] == list(range(21, 31))


@pytest.fixture
def served(database: Database, database_url: str) -> Iterator[str]:
    with api_server(database_url) as url:
        yield url


def tenant_with_key(database: Database, name: str) -> tuple[int, str]:
    with database.session() as session:
        tenant, key = create_tenant(session, name=name)
        return tenant.id, key


def a_job(database: Database, tenant_id: int) -> int:
    with database.session() as session:
        return create_job(session, tenant_id=tenant_id, instruction="Read.").id


def step(database: Database, job_id: int, number: int) -> int:
    """Plays the worker: a step's record with its event, committed; answers the event's id."""
    with database.session() as session:
        job = session.get_one(Job, job_id, with_for_update=True)
        job.step = number
        record_step(session, job, step_row(job_id, number, stage="fits"))
        return session.scalars(select(Event.id).where(Event.job_id == job_id).order_by(Event.id.desc())).first() or 0


def end(database: Database, job_id: int) -> None:
    with database.session() as session:
        end_job(session, session.get_one(Job, job_id, with_for_update=True), JobStatus.SUCCEEDED)


def received(url: str, key: str, path: str, *, headers: dict[str, str] | None = None, count: int | None = None,
             params: dict[str, Any] | None = None) -> list[tuple[str, str, dict[str, Any]]]:  # fmt: skip
    """(id, type, body) of each event the stream sends, until it ends (or ``count`` came)."""
    got = []
    with (
        httpx.Client(base_url=url, headers={"X-API-Key": key} | (headers or {}), timeout=10) as client,
        connect_sse(client, "GET", path, params=params) as source,
    ):
        assert source.response.status_code == 200, source.response.read()
        for message in source.iter_sse():
            got.append((message.id, message.event, json.loads(message.data)))
            if count is not None and len(got) == count:
                break
    return got


def test_a_resumed_stream_gets_exactly_what_it_missed_then_live_events_until_the_end(
    database: Database, served: str
) -> None:
    tenant_id, key = tenant_with_key(database, "events-resume")
    job_id = a_job(database, tenant_id)
    ids = [step(database, job_id, n) for n in (1, 2, 3)]
    first = received(served, key, f"/v1/jobs/{job_id}/events", count=2)  # queued, step 1
    assert [t for _, t, _ in first] == ["status", "step"] and first[1][0] == str(ids[0])

    def work() -> None:
        time.sleep(0.5)  # the client is following by then: these come live
        step(database, job_id, 4)
        end(database, job_id)

    threading.Thread(target=work, daemon=True).start()
    rest = received(served, key, f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": first[-1][0]})
    assert [body["data"].get("step") for _, t, body in rest if t == "step"] == [2, 3, 4]
    assert [t for _, t, _ in rest][-1] == "job.ended"  # and the stream ended with it
    assert [int(i) for i, _, _ in rest] == sorted({int(i) for i, _, _ in rest})  # in order, none twice
    again = received(served, key, f"/v1/jobs/{job_id}/events", params={"after": ids[1]})
    assert [i for i, _, _ in again] == [i for i, _, _ in rest[1:]]  # ?after= as the header
    assert received(served, key, f"/v1/jobs/{job_id}/events", params={"after": rest[-1][0]}) == []  # ended


def test_a_tenant_sees_only_its_own_events(database: Database, served: str) -> None:
    mine, my_key = tenant_with_key(database, "events-mine")
    theirs, their_key = tenant_with_key(database, "events-theirs")
    my_job, their_job = a_job(database, mine), a_job(database, theirs)
    with httpx.Client(base_url=served, headers={"X-API-Key": their_key}) as client:
        assert client.get(f"/v1/jobs/{my_job}/events").status_code == 404
    start = step(database, their_job, 1)
    step(database, my_job, 1)
    step(database, their_job, 2)
    mine_seen = step(database, my_job, 2)
    seen = received(served, my_key, "/v1/events", params={"after": start - 1}, count=2)
    assert [(body["job_id"], body["data"]["step"]) for _, _, body in seen] == [(my_job, 1), (my_job, 2)]
    assert seen[-1][0] == str(mine_seen)


def test_events_that_commit_out_of_id_order_all_reach_the_stream(database: Database, served: str) -> None:
    """Ids are taken before the commit: a later id committed first must not make a stream skip the earlier one."""
    tenant_id, key = tenant_with_key(database, "events-order")
    early_job, late_job = a_job(database, tenant_id), a_job(database, tenant_id)
    start = step(database, early_job, 1)
    stream: list[tuple[str, str, dict[str, Any]]] = []
    reader = threading.Thread(
        target=lambda: stream.extend(received(served, key, "/v1/events", params={"after": start}, count=2)),
        daemon=True,
    )
    reader.start()
    with database.session() as slow:
        job = slow.get_one(Job, early_job)
        taken_first = record(slow, job, EventType.STATUS, {"status": "running"}).id
        later = step(database, late_job, 1)  # commits while the first is still open
        assert later > taken_first
        time.sleep(0.5)
    reader.join(10)
    assert [int(i) for i, _, _ in stream] == [taken_first, later]


def test_a_live_stream_gets_a_burst_larger_than_a_read_whole_and_in_order(database: Database, served: str) -> None:
    """900 events committed at once: the hub reads them in batches of 500 and hands them to the live stream (or
    the stream, fallen a batch behind, reads the rest itself); none is lost or sent twice."""
    tenant_id, key = tenant_with_key(database, "events-burst")
    job_id = a_job(database, tenant_id)
    stream: list[tuple[str, str, dict[str, Any]]] = []
    reader = threading.Thread(
        target=lambda: stream.extend(received(served, key, f"/v1/jobs/{job_id}/events")), daemon=True
    )
    reader.start()
    time.sleep(0.5)  # following by then: the burst comes live
    with database.session() as session:
        job = session.get_one(Job, job_id, with_for_update=True)
        for number in range(1, 901):
            record_step(session, job, step_row(job_id, number, stage="fits"))
    end(database, job_id)
    reader.join(30)
    assert [body["data"].get("step") for _, t, body in stream if t == "step"] == list(range(1, 901))
    assert [int(i) for i, _, _ in stream] == sorted({int(i) for i, _, _ in stream}) and stream[-1][1] == "job.ended"


def test_the_hub_reads_a_burst_in_batches_and_hands_every_event_once(database: Database) -> None:
    tenant_id, _ = tenant_with_key(database, "events-hub")
    job_id = a_job(database, tenant_id)
    with database.session() as session:
        job = session.get_one(Job, job_id)
        for number in range(1, 901):
            record_step(session, job, step_row(job_id, number, stage="fits"))
    stored = [event.id for event in events_of(database, job_id)]
    hub = Hub(database, get_settings())
    got: list[int] = []

    async def follow() -> None:
        subscriber = Subscriber(tenant_id, job_id, live=True)
        hub.subscribers.add(subscriber)
        hub.horizon, hub.handed = stored[-1], stored[0] - 1  # as if the listener had just seen them commit
        reader = asyncio.create_task(hub._hand_out())
        hub._advanced.set()
        while len(got) < len(stored):
            await asyncio.wait_for(subscriber.wake.wait(), 10)
            subscriber.wake.clear()
            got.extend(event["id"] for event in subscriber.take())
        reader.cancel()

    asyncio.run(follow())
    assert got == stored and len(stored) > BATCH


def test_a_live_stream_that_falls_a_batch_behind_is_handed_nothing_more() -> None:
    subscriber = Subscriber(tenant_id=1, job_id=None, live=True)
    for event_id in range(1, BATCH + 1):
        subscriber.hand({"id": event_id})
    assert len(subscriber.pending) == BATCH and not subscriber.wake.is_set()
    subscriber.hand({"id": BATCH + 1})  # one too many: it reads from the database from where it is
    assert (subscriber.live, subscriber.pending, subscriber.wake.is_set()) == (False, [], True)
    subscriber.hand({"id": BATCH + 2})
    assert subscriber.pending == []


def test_a_bad_last_event_id_is_refused_clearly(database: Database, served: str) -> None:
    tenant_id, key = tenant_with_key(database, "events-bad")
    job_id = a_job(database, tenant_id)
    with httpx.Client(base_url=served, headers={"X-API-Key": key}) as client:
        answer = client.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "yesterday"})
        assert answer.status_code == 422 and "Last-Event-ID" in answer.json()["detail"]
        assert client.get("/v1/events", params={"after": -1}).status_code == 422


def test_an_event_still_being_written_when_the_api_starts_listening_is_not_skipped(
    database: Database, served: str
) -> None:
    """The listener starts from the highest committed id once the transactions writing events then have ended: a
    lower id of one of them, committed later, still reaches the stream."""
    tenant_id, key = tenant_with_key(database, "events-start")
    early_job, late_job = a_job(database, tenant_id), a_job(database, tenant_id)
    start = step(database, early_job, 1)
    stream: list[tuple[str, str, dict[str, Any]]] = []
    with database.session() as slow:
        taken_first = record(slow, slow.get_one(Job, early_job), EventType.STATUS, {"status": "running"}).id
        later = step(database, late_job, 1)  # committed before the API's listener starts
        reader = threading.Thread(  # its stream starts the listener (the first of this API)
            target=lambda: stream.extend(received(served, key, "/v1/events", params={"after": start}, count=2)),
            daemon=True,
        )
        reader.start()
        time.sleep(1.0)
    reader.join(10)
    assert [int(i) for i, _, _ in stream] == [taken_first, later]


@pytest.mark.skipif(not shutil.which("curl"), reason="the block needs curl")
def test_the_curl_block_of_the_docs_streams_a_job_and_resumes_it(database: Database, served: str) -> None:
    text = (ROOT / "docs" / "api-cli.md").read_text().split("With curl, `-N` shows each event", 1)[1]
    block = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert block, "docs/api-cli.md lost its events block"
    tenant_id, key = tenant_with_key(database, "events-curl")
    job_id = a_job(database, tenant_id)
    first, second = step(database, job_id, 1), step(database, job_id, 2)
    end(database, job_id)
    environment = os.environ | {"PLIMSOLL_API_URL": served, "PLIMSOLL_API_KEY": key, "job": str(job_id),
                                "last": str(first)}  # fmt: skip
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], env=environment, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    ids = re.findall(r"^id: (\d+)", run.stdout, re.MULTILINE)
    events = re.findall(r"^event: (\S+)", run.stdout, re.MULTILINE)
    assert events == ["status", "step", "step", "job.ended", "step", "job.ended"]  # both streams ended by the end
    assert ids[4] == str(second) and ids[3] == ids[5]
