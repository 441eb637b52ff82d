"""Steps as plain functions (no broker): idempotency under redelivery, cancelling, what a step records."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.history import all_messages
from models.jobs import create_job, steps_of
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus
from models.tenants import create_tenant
from tests.fixtures_emulator import TEST_API_KEY
from worker.providers import AnthropicProvider
from worker.providers.base import Provider, Reply
from worker.runner import Outcome, Services, run_step


def new_job(database: Database, texts: dict[str, str], **job: Any) -> int:
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"steps-{uuid.uuid4().hex[:8]}")
        ids = [add_document(session, tenant_id=tenant.id, name=n, content=t).id for n, t in texts.items()]
        return create_job(
            session, tenant_id=tenant.id, instruction="Read them all.", document_ids=ids, kind=JobKind.SUBAGENT, **job
        ).id


def services(database: Database, provider: Provider, woken: list[int]) -> Services:
    return Services(
        database=database,
        settings=Settings(database_url=database.url),
        provider_for=lambda job: provider,
        enqueue=lambda job_id, delay: woken.append(job_id),
        report=lambda error: None,
    )


class BothSend:
    """The real provider, but a request waits until a second one is being sent too: two deliveries of one
    step racing each other to the model, as after a worker was thought lost and its step redelivered."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.barrier = threading.Barrier(2, timeout=30)

    def send(self, **request: Any) -> Reply:
        self.barrier.wait()
        return self.provider.send(**request)


def run_to_end(job_id: int, steps: Services) -> list[Outcome]:
    outcomes = []
    for _ in range(50):
        outcomes.append(run_step(job_id, steps))
        if outcomes[-1].action in ("finished", "skipped"):
            return outcomes
    raise AssertionError("the job did not finish")


def test_a_step_delivered_twice_at_once_is_stored_once(database: Database, emulator_reset: EmulatorServer) -> None:
    texts = {"a.txt": "Alpha text.", "b.txt": "Beta text."}
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    once = new_job(database, texts)
    run_to_end(once, services(database, provider, []))

    twice = new_job(database, texts)
    racing = services(database, BothSend(provider), [])
    outcomes: list[Outcome] = []
    threads = [threading.Thread(target=lambda: outcomes.append(run_step(twice, racing))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(o.action for o in outcomes) == ["continued", "skipped"]
    run_to_end(twice, services(database, provider, []))

    with database.session() as session:
        first = [(m.seq, m.role, m.content, m.token_estimate) for m in all_messages(session, once)]
        second = [(m.seq, m.role, m.content, m.token_estimate) for m in all_messages(session, twice)]
        assert [s.step for s in steps_of(session, twice)] == [1, 2, 3]
    assert second == first


def test_a_step_after_the_job_finished_changes_nothing(database: Database, emulator_reset: EmulatorServer) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    job_id = new_job(database, {"a.txt": "Alpha."})
    woken: list[int] = []
    run_to_end(job_id, services(database, provider, woken))
    with database.session() as session:
        before = len(all_messages(session, job_id))
    assert run_step(job_id, services(database, provider, woken)).action == "skipped"
    with database.session() as session:
        assert len(all_messages(session, job_id)) == before
    assert woken == [job_id]  # each step woke the next one; the last woke nobody (no parent)


def test_a_cancelled_job_takes_no_further_step(database: Database, emulator_reset: EmulatorServer) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    job_id = new_job(database, {"a.txt": "Alpha.", "b.txt": "Beta."})
    steps = services(database, provider, [])
    assert run_step(job_id, steps).action == "continued"
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.status = JobStatus.CANCELLED
    assert run_step(job_id, steps).action == "skipped"
    assert emulator_reset.stats()["requests"] == 1


def test_each_step_records_what_it_sent_and_the_calibration_follows_the_reported_counts(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    job_id = new_job(database, {"a.txt": "Пример текста. " * 200, "b.txt": "示例文本。" * 300}, budget=20_000)
    run_to_end(job_id, services(database, provider, []))
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.SUCCEEDED
        steps = steps_of(session, job_id)
        assert [s.stage for s in steps] == ["as_is"] * 3
        for step in steps:
            assert step.reported_input_tokens is not None
            assert step.estimated_tokens >= step.reported_input_tokens  # the cl100k profile overestimates
            assert step.messages_sent == 2 * step.step - 1
        assert job.calibration["observations"] == 3
        assert job.input_tokens + job.cache_read_tokens + job.cache_write_tokens == sum(
            s.reported_input_tokens or 0 for s in steps
        )


def test_an_answer_cut_off_at_the_output_limit_is_asked_to_go_on_a_bounded_number_of_times(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    job_id = new_job(database, {f"{n}.txt": f"Text number {n}." for n in range(6)})
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.max_output_tokens = 150  # a turn (a call and a note) fits; the report of six notes does not
    outcomes = run_to_end(job_id, services(database, provider, []))
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        stops = [s.stop_reason for s in steps_of(session, job_id)]
    # list the documents and read six, then the report: cut off, asked to go on three times, and the fourth
    # cut-off part taken as the end of the answer (the emulator's agent starts its report again each time).
    assert stops[-4:] == ["max_tokens"] * 4
    assert set(stops[:-4]) == {"tool_use"}
    assert outcomes[-1].action == "finished" and job.status == JobStatus.SUCCEEDED
    assert job.final_answer is not None and job.final_answer.startswith("REPORT")
