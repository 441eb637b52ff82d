"""Every job ends, on the real stack with the default settings: PostgreSQL, a Celery worker on Redis, the
Anthropic SDK and the emulator. Provider faults are retried up to the configured limit however they are
delivered; past it the job fails with one alert; a step whose message was lost is queued again by the reconciler
(the task Celery beat sends); a main job whose subagents did not finish says so."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.history import all_messages
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus, Notice, now
from tests.support_worker import events_after_the_commit, submit, wait_for

pytestmark = pytest.mark.usefixtures("celery_worker")


def test_the_settings_under_test_are_the_defaults(worker_environment: dict[str, str]) -> None:
    assert not [name for name in worker_environment if name.startswith("PLIMSOLL_MAX_")]
    assert Settings().max_transient_retries == 6


def test_four_transient_faults_in_a_row_are_retried_with_the_default_limit(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    emulator_reset.configure(faults={"script": ["429", "529", "500", "429"], "retry_after_seconds": 0})
    job_id = submit(database, {"a.txt": "Some text."}, kind=JobKind.SUBAGENT, budget=20_000)
    job = wait_for(database, job_id, timeout=120)

    assert job.status == JobStatus.SUCCEEDED, job.error
    assert (job.retries, job.attempts) == (2, 0)  # the 529 and the 500; each 429 was a wait, not a retry


def test_transient_faults_past_the_default_limit_fail_the_job_with_one_alert(
    database: Database, emulator_reset: EmulatorServer, sentry_events: list[dict[str, Any]]
) -> None:
    emulator_reset.configure(faults={"script": ["529"] * 7, "retry_after_seconds": 0})
    job_id = submit(database, {"a.txt": "Some text."}, kind=JobKind.SUBAGENT, budget=20_000)
    job = wait_for(database, job_id, timeout=240)  # six backoffs of at most 1, 2, 4, 8, 16 and 32 seconds

    assert job.status == JobStatus.FAILED
    assert job.error is not None and job.error.startswith("the request failed 7 times in a row; the last time:")
    assert emulator_reset.stats()["requests"] == 7
    assert events_after_the_commit(sentry_events) == 1


def test_a_step_whose_message_was_lost_is_queued_again_by_the_reconciler(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    from worker.tasks import reconcile_task

    texts = {c.name: c.text for c in chapters(3, chars=2_000, languages=("en",))}
    job_id = submit(database, texts, kind=JobKind.SUBAGENT, budget=20_000, enqueue=False)  # as if Redis lost it
    with database.session() as session:
        job = session.get_one(Job, job_id)
        assert job.lease_until is not None
        job.lease_until = now() - timedelta(seconds=1)  # its deadline passed with nobody having claimed it
    reconcile_task.delay()  # what Celery beat sends every few seconds
    job = wait_for(database, job_id, timeout=60)
    assert job.status == JobStatus.SUCCEEDED, job.error


def test_subagents_near_the_steps_their_main_job_shares_with_them_answer_early_and_leave_it_its_report(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    # The same job with the default wind-down: the subagents are told at once how few steps the three of them
    # have left, answer from what they have, and the main job still has the step for its report.
    texts = {c.name: c.text for c in chapters(20, chars=2_000, languages=("en",))}
    job_id = submit(database, texts, budget=30_000, max_steps=4)
    job = wait_for(database, job_id, timeout=120)

    with database.session() as session:
        children = list(session.scalars(select(Job).where(Job.parent_id == job_id)))
    assert job.status == JobStatus.INCOMPLETE and job.final_answer, job.error
    assert len(children) == 2 and {c.status for c in children} == {JobStatus.INCOMPLETE}
    assert all(c.final_answer for c in children)
    assert sum(c.step for c in children) + job.step <= 4
    with database.session() as session:  # their answers so far reach the main job, marked as partial
        results = [
            block["content"]
            for message in all_messages(session, job_id)
            for block in message.content
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
    partial = [text for text in results if isinstance(text, str) and "its answer so far" in text]
    assert len(partial) == 2 and all((c.final_answer or "-") in " ".join(partial) for c in children)


def test_a_main_job_whose_subagents_did_not_finish_ends_incomplete_with_a_notice(
    database: Database, emulator_reset: EmulatorServer, allow_reproductions: None
) -> None:
    # The step limit set on the main job holds for it and its subagents together, a subagent leaving one step for
    # the main job's report: four steps do not read ten chapters (the emulator's agent hands out groups of ten),
    # while the main job needs two (delegate, then report). Without the wind-down (a reproduction), the subagents
    # are cut off at the limit rather than told to answer early.
    texts = {c.name: c.text for c in chapters(20, chars=2_000, languages=("en",))}
    job_id = submit(database, texts, budget=30_000, max_steps=4, wind_down=False)
    job = wait_for(database, job_id, timeout=120)

    assert job.status == JobStatus.INCOMPLETE, job.error
    assert job.final_answer
    with database.session() as session:
        children = list(session.scalars(select(Job).where(Job.parent_id == job_id)))
        notices = list(session.scalars(select(Notice.text).where(Notice.job_id == job_id)))
    assert len(children) == 2 and {c.status for c in children} == {JobStatus.FAILED}
    assert len(notices) == 1
    why = "it stopped before it finished: stopped after 3 steps, the limit this job shares with its main job"
    assert all(f"subagent {c.id} ({why}" in notices[0] for c in children)
    assert sum(c.step for c in children) + job.step == 4  # two steps of the main job, two of its subagents
