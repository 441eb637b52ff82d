"""A step that fails its job is a FAILURE in Flower: the step task raises JobFailed once the step has committed.
Celery does not retry it and Sentry does not report it; the job's end, its notice and its step are stored."""

from __future__ import annotations

import pickle
import uuid
from typing import Any

from sqlalchemy import select

from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.options import JobOptions
from models.tables import Job, JobStatus, Notice
from models.tenants import create_tenant
from worker.errors import JobFailed
from worker.sentry import before_send


def test_sentry_drops_job_failed_and_keeps_other_errors() -> None:
    failed = JobFailed(7, 3, "as_is", "stopped after 3 steps, the limit of this job")
    assert str(failed) == "job 7 failed at step 3 (stage as_is): stopped after 3 steps, the limit of this job"
    assert repr(pickle.loads(pickle.dumps(failed))) == repr(failed)  # Celery pickles it out of a pool process
    assert before_send({"level": "error"}, {"exc_info": (JobFailed, failed, None)}) is None
    other = RuntimeError("boom")
    assert before_send({"level": "error"}, {"exc_info": (RuntimeError, other, None)}) is not None


def test_the_step_that_fails_its_job_raises_job_failed_after_it_committed(
    database: Database, worker_environment: dict[str, str], sentry_events: list[dict[str, Any]]
) -> None:
    from worker.tasks import run_step_task

    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"failed-{uuid.uuid4().hex[:8]}")
        document = add_document(session, tenant_id=tenant.id, name="a.txt", content="Some text.")
        job = create_job(
            session,
            tenant_id=tenant.id,
            instruction="Read a.txt.",
            document_ids=[document.id],
            options=JobOptions(max_steps=1),
        )
        job.step = 1  # its one step is done: the next runs into the limit and fails the job
        job_id = job.id

    result = run_step_task.apply(args=(job_id, 1))  # runs the task here, as a worker would, with its signals

    assert result.state == "FAILURE"
    assert isinstance(result.result, JobFailed)
    assert str(result.result) == f"job {job_id} failed at step 1: stopped after 1 step, the limit of this job"
    assert result.result.__cause__ is None and result.result.__context__ is None  # raised after, not within, the step
    with database.session() as session:
        stored = session.get_one(Job, job_id)
        notices = list(session.scalars(select(Notice).where(Notice.job_id == job_id)))
        assert (stored.status, stored.step, stored.retries) == (JobStatus.FAILED, 1, 0)
    assert len(notices) == 1
    assert sentry_events == []

    again = run_step_task.apply(args=(job_id, 1))  # a late duplicate delivery finds the job ended: no new failure
    assert again.state == "SUCCESS"
    assert again.result["action"] == "skipped"


def test_a_step_that_raises_a_defect_fails_its_job_with_one_event_and_no_text_of_it(
    database: Database, worker_environment: dict[str, str], sentry_events: list[dict[str, Any]]
) -> None:
    """Delivered again, a step that raises what nothing expects would raise again at every deadline: the job
    fails at once, naming the error's type, and Sentry gets that one event, without the job's text."""
    from worker.tasks import run_step_task

    marker = f"PROVIDER-{uuid.uuid4().hex[:8]}"  # a job whose provider no adapter serves: the step raises
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"defect-{uuid.uuid4().hex[:8]}")
        job = create_job(session, tenant_id=tenant.id, instruction="Say hi.")
        job.provider = marker
        job_id = job.id

    result = run_step_task.apply(args=(job_id, 0))

    assert result.state == "FAILURE" and isinstance(result.result, JobFailed)
    with database.session() as session:
        stored = session.get_one(Job, job_id)
        assert stored.status == JobStatus.FAILED
        assert stored.error == "an internal error (ValueError) stopped the job at step 1; it was reported"
    assert [event["exception"]["values"][-1]["type"] for event in sentry_events] == ["ValueError"]
    assert marker not in repr(sentry_events)
    assert run_step_task.apply(args=(job_id, 0)).result["action"] == "skipped"  # delivered again: nothing more
