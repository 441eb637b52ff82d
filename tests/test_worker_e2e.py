"""Jobs run end to end on the real stack: PostgreSQL, a Celery worker on Redis, the Anthropic SDK and the
emulator counting with a real tokenizer."""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.history import all_messages
from models.jobs import steps_of
from models.tables import Job, JobKind, JobStatus, Notice
from models.tenants import create_tenant
from plimsoll import estimate_message
from plimsoll.notices import TOO_LONG_NOTICE, new_chat_notice
from tests.support import wait_until
from tests.support_worker import events_after_the_commit, submit, wait_for

pytestmark = pytest.mark.usefixtures("celery_worker")

NOTE = re.compile(r"^NOTE (?P<name>\S+): (?P<chars>\d+) chars, sha256 (?P<sha>[0-9a-f]{12}), starts", re.MULTILINE)


def notes_in(answer: str) -> dict[str, str]:
    return {m["name"]: m["sha"] for m in NOTE.finditer(answer)}


def sha12(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def test_a_subagent_reads_40_russian_chapters_under_a_budget_far_below_their_total(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    # The write-up's figures scaled down by 10: hard limit 1,000,000 -> 100,000, budget 400,000 -> 40,000.
    emulator_reset.configure(limit=100_000)
    texts = {c.name: c.text for c in chapters(40, chars=9_000, languages=("ru",))}
    job_id = submit(database, texts, kind=JobKind.SUBAGENT, budget=40_000)
    job = wait_for(database, job_id)

    assert job.status == JobStatus.SUCCEEDED, job.error
    assert notes_in(job.final_answer or "") == {name: sha12(text) for name, text in texts.items()}
    stats = emulator_reset.stats()
    assert stats["rejections"] == {}
    assert 0 < stats["input_tokens_max"] <= 40_000
    with database.session() as session:
        stored = all_messages(session, job_id)
        steps = steps_of(session, job_id)
        assert all(
            m.token_estimate == estimate_message({"role": m.role, "content": m.content}, job.profile) for m in stored
        )
        # The planning budget goes above the budget only when the model's counts ran under our estimates.
        # (the stored factor is rounded to four places)
        assert all(s.estimated_tokens <= s.planning_budget <= 40_000 / s.calibration_factor * 1.001 for s in steps)
        assert all(s.reported_input_tokens is not None and s.reported_input_tokens <= 40_000 for s in steps)
        assert {s.stage for s in steps} >= {"as_is", "cleared_results"}
        # Nothing the fitter cleared is missing from storage: every chapter read is stored whole.
        results = [
            b for m in stored if isinstance(m.content, list) for b in m.content if b.get("type") == "tool_result"
        ]
        assert {b["content"] for b in results} >= set(texts.values())
        cleared = {tool_id for s in steps for tool_id in s.cleared}
        assert cleared and cleared <= {b["tool_use_id"] for b in results}


def test_a_main_job_delegates_groups_to_subagents_and_reports_their_notes(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    texts = {c.name: c.text for c in chapters(24, chars=3_000)}
    job_id = submit(database, texts, budget=30_000)
    job = wait_for(database, job_id)

    assert job.status == JobStatus.SUCCEEDED, job.error
    assert notes_in(job.final_answer or "") == {name: sha12(text) for name, text in texts.items()}
    with database.session() as session:
        children = list(session.scalars(select(Job).where(Job.parent_id == job_id)))
    assert len(children) == 3
    assert all(c.kind == JobKind.SUBAGENT and c.status == JobStatus.SUCCEEDED for c in children)


def test_a_too_long_rejection_becomes_one_notice_without_retry_or_alert(
    database: Database, emulator_reset: EmulatorServer, sentry_events: list[dict[str, Any]]
) -> None:
    emulator_reset.configure(limit=2_000)  # the model takes far less than our budget: it rejects the first request
    texts = {c.name: c.text for c in chapters(3, chars=6_000, languages=("en",))}
    job_id = submit(database, texts, budget=30_000)
    job = wait_for(database, job_id)

    assert job.status == JobStatus.NEEDS_NEW_CHAT
    stats = emulator_reset.stats()
    assert stats["requests"] == 1  # rejected once, never retried
    assert set(stats["rejections"]) <= {"too_long", "too_long_with_max_tokens"}
    with database.session() as session:
        notices = list(session.scalars(select(Notice).where(Notice.job_id == job_id)))
    assert [n.text for n in notices] == [new_chat_notice(job_id)]
    assert notices[0].text.startswith(TOO_LONG_NOTICE)
    assert job.retries == 0
    assert sentry_events == []


def test_rate_limits_and_overloads_are_retried_and_the_job_still_succeeds(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    emulator_reset.configure(faults={"script": ["429", "529", "none", "429"], "retry_after_seconds": 0.2})
    texts = {c.name: c.text for c in chapters(3, chars=2_000, languages=("en",))}
    job_id = submit(database, texts, kind=JobKind.SUBAGENT, budget=20_000)
    job = wait_for(database, job_id)

    assert job.status == JobStatus.SUCCEEDED, job.error
    assert job.retries == 1  # the 529; a 429 is a wait, not a retry (tests/test_rate_limit_wait.py)
    rejections = emulator_reset.stats()["rejections"]
    assert rejections == {"rate_limit": 2, "overloaded": 1}


def test_an_invalid_request_fails_the_job_and_alerts_once(
    database: Database, emulator_reset: EmulatorServer, sentry_events: list[dict[str, Any]]
) -> None:
    emulator_reset.configure(api_key="a-key-the-worker-does-not-have")
    job_id = submit(database, {"a.txt": "Some text."}, budget=20_000)
    job = wait_for(database, job_id)

    assert job.status == JobStatus.FAILED
    assert emulator_reset.stats()["requests"] == 1  # an authentication failure is not retried
    assert events_after_the_commit(sentry_events) == 1
    with database.session() as session:
        assert list(session.scalars(select(Notice).where(Notice.job_id == job_id))) == []


def test_task_events_show_flower_the_job_step_and_tokens(
    database: Database, emulator_reset: EmulatorServer, celery_worker: Any
) -> None:
    """Flower shows what the workers' task events carry: each step's result names the job, the step, the stage
    and the tokens estimated and reported."""
    from worker.celery_app import app

    events: list[dict[str, Any]] = []
    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers={"task-succeeded": events.append})
        bound = threading.Event()
        consume_ready = receiver.on_consume_ready

        def on_consume_ready(*args: Any, **kwargs: Any) -> None:
            consume_ready(*args, **kwargs)
            bound.set()

        receiver.on_consume_ready = on_consume_ready
        listening = threading.Thread(target=_capture, args=(receiver,), daemon=True)
        listening.start()
        assert bound.wait(30)  # the receiver's queue is bound before the job starts
        job_id = submit(database, {"a.txt": "Some text.", "b.txt": "More text."}, kind=JobKind.SUBAGENT, budget=20_000)
        wait_for(database, job_id)

        def of_the_job() -> list[str]:
            return [e["result"] for e in events if f"'job_id': {job_id}" in e.get("result", "")]

        wait_until(lambda: len(of_the_job()) >= 3, 10, "the task events of the job's three steps")
        receiver.should_stop = True
        listening.join(timeout=5)
    results = of_the_job()
    assert len(results) == 3  # read a.txt, read b.txt, report
    assert all(
        "'step'" in r and "'stage'" in r and "'estimated_tokens'" in r and "'reported_tokens'" in r for r in results
    )


def _capture(receiver: Any) -> None:
    with contextlib.suppress(TimeoutError, OSError):
        receiver.capture(limit=None, timeout=30, wakeup=True)


def test_through_the_api_upload_and_enqueue_then_the_worker_runs_the_job(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    with database.session() as session:
        _, key = create_tenant(session, name=f"api-{uuid.uuid4().hex[:8]}")
    texts = {c.name: c.text for c in chapters(12, chars=4_000, languages=("ru", "zh"))}
    with TestClient(create_app(database=database)) as client:
        headers = {"X-API-Key": key}
        files = [("files", (name, text.encode(), "text/plain")) for name, text in texts.items()]
        uploaded = client.post("/v1/documents", files=files, headers=headers)
        assert uploaded.status_code == 201, uploaded.text
        ids = [d["id"] for d in uploaded.json()["documents"]]
        created = client.post(
            "/v1/jobs",
            json={"instruction": "Note one fact of each chapter.", "document_ids": ids, "budget": 20_000},
            headers=headers,
        )
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        job = wait_for(database, job_id)
        view = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        history = client.get(f"/v1/jobs/{job_id}/messages", params={"limit": 1000}, headers=headers).json()

    assert job.status == JobStatus.SUCCEEDED, job.error
    assert notes_in(job.final_answer or "") == {name: sha12(text) for name, text in texts.items()}
    assert view["status"] == "succeeded"
    assert sorted(view["progress"]["documents_read"]) == sorted(texts)
    assert view["last_request"]["stage"] in ("as_is", "cleared_results")
    # 12 chapters: the main job handed two groups to subagents, then reported what they found.
    assert [child["status"] for child in view["children"]] == ["succeeded", "succeeded"]
    assert [item["role"] for item in history["items"]] == ["user", "assistant", "user", "assistant"]
    assert history["total"] == 4
    assert all(item["token_estimate"] > 0 for item in history["items"])
