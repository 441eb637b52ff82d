"""Compaction through the worker's steps, on PostgreSQL, against the emulator over HTTP: a summary request
replays the cached prefix, its summary is stored beside the history, which never changes, and the job ends
with every document covered where stages 2-3 alone lose them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from demo.chapters import chapters
from demo.run import notes_matching
from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.errors import InvalidInput
from models.history import all_messages
from models.jobs import create_job, steps_of
from models.tables import Job, JobKind, JobStatus, Summary
from models.tenants import create_tenant
from plimsoll.compaction import POLICIES
from tests.support_api import Caller, serve_api
from tests.support_worker import services, with_options
from worker.errors import TooLong
from worker.providers import AnthropicProvider
from worker.providers.base import Reply
from worker.step import run_step

INSTRUCTION = "Read every document and write a summary of each document in your own message; then report."


def long_output_job(database: Database, texts: dict[str, str], **job: Any) -> tuple[int, int, str]:
    """The job's id, its tenant's and the tenant's API key."""
    with database.session() as session:
        tenant, key = create_tenant(session, name=f"compaction-{uuid.uuid4().hex[:8]}")
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        created = create_job(
            session,
            tenant_id=tenant.id,
            instruction=INSTRUCTION,
            document_ids=ids,
            kind=JobKind.SUBAGENT,
            **with_options(job),
        )
        return created.id, tenant.id, key


def stored(database: Database, job_id: int) -> list[tuple[int, Any]]:
    with database.session() as session:
        return [(m.seq, m.content) for m in all_messages(session, job_id)]


def test_a_long_output_job_compacts_from_the_cache_and_covers_every_document(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    texts = {c.name: c.text for c in chapters(10, chars=1_600)}
    job_id, tenant_id, key = long_output_job(database, texts, budget=9_000)  # compaction: the default
    steps = services(database, AnthropicProvider(api_key="test", base_url=emulator_reset.base_url), [])
    before_compaction: list[tuple[int, Any]] = []
    for _ in range(120):
        history = stored(database, job_id)
        outcome = run_step(job_id, steps)
        if outcome.stage == "compaction" and not before_compaction:
            before_compaction = history
        if outcome.action == "finished":
            break
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.compaction == "auto"
        assert job.status == JobStatus.SUCCEEDED, job.error
        assert notes_matching(job.final_answer or "", texts) == set(texts)
        summaries = session.query(Summary).filter(Summary.job_id == job_id).order_by(Summary.step).all()
        records = {s.step: s for s in steps_of(session, job_id)}
    assert summaries and before_compaction
    # The stored history is what it was before: the summaries sit beside it.
    assert stored(database, job_id)[: len(before_compaction)] == before_compaction
    for summary in summaries:
        record = records[summary.step]
        assert record.stage == "compaction" and summary.replayed
        assert record.cache_read_tokens >= 0.9 * (record.reported_input_tokens or 0)  # the replayed prefix
        assert summary.first_seq == 1 and summary.last_seq % 2 == 0  # ends with a result: no pair split
        assert "NOTE " in summary.content and summary.input_tokens + summary.cache_read_tokens > 0
    # Later requests carry the summary: fewer messages sent than stored, and never over the budget.
    assert all((r.reported_input_tokens or 0) <= 9_000 for r in records.values())
    assert all(r.rejected_tokens is None for r in records.values())
    # The person sees where each compaction happened, what it covers and what it cost.
    with serve_api(database) as api:
        shown = Caller(api.client, tenant_id, key).get(f"/v1/jobs/{job_id}/steps").json()["items"]
    compactions = [s for s in shown if s["stage"] == "compaction"]
    assert [(s["step"], s["summary"]["last_seq"]) for s in compactions] == [(x.step, x.last_seq) for x in summaries]
    assert all(s["cache_read_tokens"] > 0 and s["summary"]["content"] for s in compactions)
    assert all(s["summary"] is None for s in shown if s["stage"] != "compaction")


def test_with_compaction_off_the_same_job_loses_its_notes_and_reads_again(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    texts = {c.name: c.text for c in chapters(10, chars=1_600)}
    job_id, _, _ = long_output_job(database, texts, budget=9_000, compaction="off", max_steps=60)
    steps = services(database, AnthropicProvider(api_key="test", base_url=emulator_reset.base_url), [])
    for _ in range(61):
        if run_step(job_id, steps).action == "finished":
            break
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert session.query(Summary).filter(Summary.job_id == job_id).count() == 0
        assert {s.stage for s in steps_of(session, job_id)} & {"user_turns", "tool_rounds"}
        assert notes_matching(job.final_answer or "", texts) != set(texts)


def test_an_unknown_compaction_is_refused(database: Database) -> None:
    with pytest.raises(InvalidInput, match="unknown compaction 'sometimes'; known: off, auto, summarize_all"):
        long_output_job(database, {}, compaction="sometimes")
    assert POLICIES == ("off", "auto", "summarize_all")


class RefusesFirstSummary:
    """The real provider, but the model rejects the first summary request as too long, stating its size."""

    def __init__(self, provider: AnthropicProvider) -> None:
        self.provider = provider
        self.refused = 0

    def send(self, **request: Any) -> Reply:
        content = request["messages"][-1]["content"]
        last = content[-1] if isinstance(content, list) else {"type": "text", "text": content}
        if not self.refused and last["type"] == "text" and last["text"].startswith("[Compaction]"):
            self.refused += 1
            raise TooLong("prompt is too long", provider="anthropic")  # no size stated: nothing to correct
        return self.provider.send(**request)


def test_a_summary_request_rejected_as_too_long_never_fails_the_job(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    texts = {c.name: c.text for c in chapters(10, chars=1_600)}
    job_id, _, _ = long_output_job(database, texts, budget=9_000)
    model = RefusesFirstSummary(AnthropicProvider(api_key="test", base_url=emulator_reset.base_url))
    steps = services(database, model, [])
    for _ in range(120):
        if run_step(job_id, steps).action == "finished":
            break
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert job.status == JobStatus.SUCCEEDED, job.error
        records = steps_of(session, job_id)
        refused = [r for r in records if r.stop_reason == "TooLong"]
        written = session.query(Summary).filter(Summary.job_id == job_id).count()
    assert model.refused == 1 and [r.stage for r in refused] == ["compaction"]
    following = records[records.index(refused[0]) + 1]
    assert following.stage in ("cleared_results", "user_turns", "tool_rounds")  # it went on as without compaction
    assert written >= 1  # and a later compaction was written
