"""Steps as plain functions (no broker): idempotency under redelivery, cancelling, what a step records."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.engine import make_url

from emulator import EmulatorServer
from models.db import Database
from models.history import all_messages
from models.jobs import steps_of
from models.tables import Job, JobStatus, now
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_worker import Held, in_thread, new_job, run_to_end, services
from tests.tcp_proxy import CuttableProxy
from worker.lease import MAX_BACKOFF, reconcile
from worker.providers import AnthropicProvider
from worker.step import run_step


def test_a_step_delivered_twice_at_once_is_stored_once(database: Database, emulator_reset: EmulatorServer) -> None:
    texts = {"a.txt": "Alpha text.", "b.txt": "Beta text."}
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    once = new_job(database, texts)
    run_to_end(once, services(database, provider, []))

    twice = new_job(database, texts)
    held = Held(provider)
    delivery, outcomes = in_thread(lambda: run_step(twice, services(database, held, [])))
    assert held.sending.wait(30)
    # The same step delivered again while the first delivery waits for the model: it does not call the model.
    assert run_step(twice, services(database, held, []), step=0).action == "skipped"
    held.gate.set()
    delivery.join()
    assert [o.action for o in outcomes] == ["continued"] and held.calls == 1
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


def test_a_delivery_for_a_step_already_done_does_nothing(database: Database, emulator_reset: EmulatorServer) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    job_id = new_job(database, {"a.txt": "Alpha.", "b.txt": "Beta."})
    steps = services(database, provider, [])
    assert run_step(job_id, steps, step=0).action == "continued"
    assert run_step(job_id, steps, step=0).action == "skipped"  # a late duplicate of the first step
    assert emulator_reset.stats()["requests"] == 1
    assert run_step(job_id, steps, step=1).action == "continued"


def test_when_a_lease_lapses_a_second_delivery_runs_the_step_and_only_the_first_reply_is_stored(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    job_id = new_job(database, {"a.txt": "Alpha.", "b.txt": "Beta."})
    held = Held(provider)
    stuck, stuck_outcomes = in_thread(lambda: run_step(job_id, services(database, held, [])))
    assert held.sending.wait(30)
    with database.session() as session:  # the first delivery looks dead: its lease ran out
        session.get_one(Job, job_id).lease_until = now() - timedelta(seconds=1)
    assert job_id in reconcile(database, lease_seconds=30, enqueue=lambda job_id, step: None)
    assert run_step(job_id, services(database, provider, []), step=0).action == "continued"
    held.gate.set()
    stuck.join()
    assert [o.action for o in stuck_outcomes] == ["skipped"]  # it came back with a reply: discarded, not stored
    with database.session() as session:
        assert [m.seq for m in all_messages(session, job_id)] == [0, 1, 2]
        assert [s.step for s in steps_of(session, job_id)] == [1]


def test_the_reconciler_sends_jobs_a_gone_delivery_held_to_the_recovery_queue(database: Database) -> None:
    held_id = new_job(database, {"a.txt": "Alpha."})
    late_id = new_job(database, {"b.txt": "Beta."})
    with database.session() as session:  # one claimed by a delivery that died; one whose step message was lost
        held, late = session.get_one(Job, held_id), session.get_one(Job, late_id)
        held.lease_owner, held.lease_until = "gone", now() - timedelta(seconds=1)
        late.lease_owner, late.lease_until = None, now() - timedelta(seconds=1)
    queued: list[int] = []
    recovered: list[int] = []
    taken = reconcile(
        database,
        lease_seconds=30,
        enqueue=lambda job_id, step: queued.append(job_id),
        recover=lambda job_id, step: recovered.append(job_id),
    )
    assert {held_id, late_id} <= set(taken)  # (other tests' jobs of this database may be taken too)
    assert (held_id in recovered, held_id in queued, late_id in queued, late_id in recovered) == (
        True,
        False,
        True,
        False,
    )


def as_utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def test_a_step_nobody_claims_is_queued_again_at_doubling_deadlines_until_a_delivery_claims_it(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    """A step message only waiting behind a backlog longer than a lease is not queued again at every lease."""
    job_id = new_job(database, {"a.txt": "Alpha."})
    gaps = []
    for _ in range(MAX_BACKOFF + 2):
        with database.session() as session:  # the deadline has passed, and no delivery has claimed the step
            session.get_one(Job, job_id).lease_until = now() - timedelta(seconds=1)
        assert job_id in reconcile(database, lease_seconds=30, enqueue=lambda job_id, step: None)
        with database.session() as session:
            until = session.get_one(Job, job_id).lease_until
            assert until is not None
            gaps.append(round((as_utc(until) - now()).total_seconds() / 30))
    assert gaps == [2**n for n in range(MAX_BACKOFF)] + [2**MAX_BACKOFF] * 2
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    with database.session() as session:  # its message arrives at last: it is claimed, and the count starts over
        session.get_one(Job, job_id).lease_until = now() - timedelta(seconds=1)
    assert run_step(job_id, services(database, provider, []), step=0).action == "continued"
    with database.session() as session:
        assert session.get_one(Job, job_id).requeues == 0


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


def test_a_reply_paid_for_is_stored_after_the_database_comes_back(
    database_url: str, emulator_reset: EmulatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The database goes away while the model answers (every connection cut, new ones refused, for 4 s): the
    step keeps the reply and stores it once the database is back; the model is called once."""
    caplog.set_level(logging.WARNING, logger="worker.outages")  # a Celery worker of another test may set ERROR
    url = make_url(database_url)
    with CuttableProxy((url.host or "127.0.0.1", url.port or 5432)) as proxy:
        through_proxy = Database(url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False))
        provider = Held(AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url))
        job_id = new_job(through_proxy, {"a.txt": "Alpha.", "b.txt": "Beta."})
        step, outcomes = in_thread(lambda: run_step(job_id, services(through_proxy, provider, [])))
        assert provider.sending.wait(30)
        proxy.cut()
        provider.gate.set()
        time.sleep(4)  # under test: an outage of 4 s, which the step must outlast holding the reply
        proxy.restore()
        step.join(timeout=120)
        through_proxy.dispose()
    assert [o.action for o in outcomes] == ["continued"]
    assert provider.calls == 1
    assert any("storing a step waits" in r.getMessage() for r in caplog.records)  # the outage did hit the store
    with Database(database_url).session() as session:
        assert [m.seq for m in all_messages(session, job_id)] == [0, 1, 2]
        assert [s.step for s in steps_of(session, job_id)] == [1]
