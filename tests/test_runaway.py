"""Runaway protection and the truth about parents, as plain step functions on PostgreSQL: the agent that repeats
itself is told once and then stopped, the step and token limits end a job with a notice, and a main job whose
subagents did not finish says so."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from emulator import EmulatorServer
from models.db import Database
from models.history import all_messages
from models.tables import Job, JobKind, JobStatus, Notice, now
from plimsoll.notices import stopped_notice
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_worker import new_job, run_to_end, services
from worker.providers import AnthropicProvider
from worker.providers.base import Reply, Usage


class Looping:
    """A model that calls read_document on the same page forever."""

    def __init__(self) -> None:
        self.calls = 0

    def send(self, **_: Any) -> Reply:
        self.calls += 1
        call = {"type": "tool_use", "id": f"call-{self.calls}", "name": "read_document", "input": {"name": "a.txt"}}
        return Reply(
            content=[call], stop_reason="tool_use", usage=Usage(input_tokens=100, output_tokens=10), model="looping"
        )


def notices_of(database: Database, job_id: int) -> list[str]:
    with database.session() as session:
        return list(session.scalars(select(Notice.text).where(Notice.job_id == job_id)))


def results_of(database: Database, job_id: int) -> Iterator[dict[str, Any]]:
    with database.session() as session:
        for message in all_messages(session, job_id):
            if isinstance(message.content, list):
                yield from (b for b in message.content if b.get("type") == "tool_result")


def main_job(database: Database, texts: dict[str, str] | None = None, **job: Any) -> int:
    job_id = new_job(database, texts or {"a.txt": "Alpha."}, **job)
    with database.session() as session:
        session.get_one(Job, job_id).kind = JobKind.MAIN
    return job_id


def test_an_agent_repeating_the_same_call_is_told_once_then_the_job_stops_with_a_notice(database: Database) -> None:
    job_id = main_job(database)
    model = Looping()
    outcomes = run_to_end(job_id, services(database, model, []))  # the default limit: 3 identical calls

    assert [o.action for o in outcomes] == ["continued", "continued", "continued", "finished"]
    assert model.calls == 4
    results = list(results_of(database, job_id))
    warned = [r for r in results if "one more identical call stops the job" in str(r["content"])]
    assert len(warned) == 1 and warned[0]["tool_use_id"] == "call-3"
    assert results[-1]["is_error"] and results[-1]["tool_use_id"] == "call-4"  # pairs stay whole in storage
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert job.status == JobStatus.FAILED
        assert job.error == "stopped: the agent called read_document with the same input 4 times"
    assert notices_of(database, job_id) == [stopped_notice("repeating", "en", tool="read_document", times=4)]


def test_the_step_limit_of_a_job_ends_it_with_a_notice(database: Database) -> None:
    job_id = main_job(database, max_steps=2)
    model = Looping()
    run_to_end(job_id, services(database, model, [], max_identical_tool_calls=100))
    assert model.calls == 2
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert (job.status, job.step, job.error) == (
            JobStatus.FAILED,
            2,
            "stopped after 2 steps, the limit of this job",
        )
    assert notices_of(database, job_id) == [stopped_notice("steps", "en", steps=2)]


def test_near_the_input_token_limit_the_agent_is_told_and_answers_from_what_it_has(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    texts = {f"{n}.txt": f"Text number {n}. " * 300 for n in range(6)}
    job_id = new_job(database, texts, budget=20_000, max_input_tokens=20_000)
    run_to_end(job_id, services(database, provider, []))
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert job.status == JobStatus.INCOMPLETE
        assert job.error == "answered early: its limit of input tokens was nearly spent"
        assert (job.final_answer or "").startswith("REPORT: ") and " of 6 documents" in (job.final_answer or "")
        assert job.total_input_tokens <= 20_000


@pytest.mark.usefixtures("allow_reproductions")
def test_the_input_token_limit_stops_a_job_before_the_request_that_would_pass_it(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    texts = {f"{n}.txt": f"Text number {n}. " * 300 for n in range(6)}
    job_id = new_job(database, texts, budget=20_000, max_input_tokens=20_000, wind_down=False)
    run_to_end(job_id, services(database, provider, []))
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert job.status == JobStatus.FAILED
        assert job.error == "stopped before exceeding 20,000 input tokens, the limit of this job"
        assert job.total_input_tokens <= 20_000
        assert job.step >= 2  # it did work until the next request would have passed the limit


def test_the_default_limits_come_from_the_settings(database: Database) -> None:
    with database.session() as session:
        job = session.get_one(Job, new_job(database, {"a.txt": "Alpha."}))
        assert (job.max_steps, job.max_input_tokens) == (1_000, 50_000_000)
        assert job.lease_until is not None and job.lease_until > now()  # the reconciler's deadline


def test_a_main_job_whose_subagent_needed_a_new_chat_ends_incomplete_and_says_which(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    texts = {f"{n}.txt": f"Text number {n}." for n in range(12)}  # two groups: two subagents
    job_id = main_job(database, texts)
    steps = services(database, provider, [])
    outcomes = run_to_end(job_id, steps, until=("waiting",))  # it delegated two groups
    with database.session() as session:
        children = list(session.scalars(select(Job).where(Job.parent_id == job_id).order_by(Job.id)))
        assert len(children) == 2
        children[0].status, children[0].error = JobStatus.NEEDS_NEW_CHAT, "prompt is too long"
        first, second = children[0].id, children[1].id
    run_to_end(second, steps)
    outcomes = run_to_end(job_id, steps)

    assert outcomes[-1].action == "finished"
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert job.status == JobStatus.INCOMPLETE
        assert job.final_answer  # the answer it gave is kept
        why = f"subagent {first} (it grew too long for the model)"
        assert job.error == f"1 of its subagents did not finish: {why}"
    assert notices_of(database, job_id) == [stopped_notice("incomplete", "en", parts=why)]
