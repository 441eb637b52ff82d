"""Celery tasks: thin wrappers that take ids and call plain functions."""

from __future__ import annotations

import logging
import time
from functools import cache
from typing import Any

import redis
from celery import Task
from celery.exceptions import Ignore
from celery.signals import worker_init, worker_process_init
from celery.utils.saferepr import saferepr
from sqlalchemy import select

from models.retention import pack_ended, sweep
from models.settings import get_settings
from models.tables import Job, JobStatus, Tenant
from worker.backoff import JITTER, backoff_delay
from worker.broker_view import Step, queued_steps
from worker.celery_app import app, recovery_queue
from worker.errors import JobFailed
from worker.fairness import priority_of, tenant_load
from worker.lease import QueuedSteps, reconcile
from worker.metrics import REQUEUED, STEP_PHASES, STEPS
from worker.names import RECONCILE_TASK, RETENTION_TASK, STEP_TASK
from worker.outages import (
    DatabaseUnavailable,
    first_report_of_outage,
    gives_up_on_outage,
    is_outage,
    outage_over,
)
from worker.sentry import init_sentry
from worker.services import make_services, shared_redis
from worker.step import Services, fail_after_internal_error, run_step
from worker.tenant_cap import start_parked

logger = logging.getLogger(__name__)


def enqueue_with_celery(job_id: int, step: int | None = None, delay: float | None = None) -> None:
    # plimsoll_queued_at: the metrics tell how long the oldest step in the queue has waited (metrics_server.py).
    sent = {"plimsoll_queued_at": time.time() + (delay or 0.0)}
    priority, whose = _routing(job_id, priorities=get_settings().broker_url.startswith(("redis://", "rediss://")))
    run_step_task.apply_async(
        (job_id, step), countdown=delay, argsrepr=shown_args(job_id, step, whose), headers=sent, priority=priority
    )


def _routing(job_id: int, *, priorities: bool) -> tuple[int | None, str]:
    """The step's broker priority by its tenant's load (worker/fairness.py; None, the default, without Redis
    priorities), and whose job it is (for Flower), read in one query; (None, "") when the database cannot say."""
    try:
        with _services().database.session() as session:
            found = session.execute(
                select(Job.parent_id, Tenant.name, Job.emulator, tenant_load(Job.tenant_id))
                .join(Tenant, Tenant.id == Job.tenant_id)
                .where(Job.id == job_id)
            ).one_or_none()
    except Exception as error:
        logger.warning("job %s: its step goes with the default priority (%s)", job_id, type(error).__name__)
        return None, ""
    if found is None:
        return (priority_of(0) if priorities else None), ""
    parent, tenant, emulator, load = found
    # A tenant's name is the operator's word (``plimsoll tenant create NAME``), not a person's text; ", on the
    # emulator" where the bundled emulator answers the job (models/endpoints.py).
    whose = f"subagent of job {parent}, tenant {tenant}" if parent else f"tenant {tenant}"
    return (priority_of(load) if priorities else None), whose + (", on the emulator" if emulator else "")


def recover_with_celery(job_id: int, step: int) -> None:
    """Queue a step the reconciler took back from a delivery that is gone on the step queue's recovery queue."""
    queue = recovery_queue(app.conf.task_default_queue)
    whose = _routing(job_id, priorities=False)[1]
    run_step_task.apply_async((job_id, step), queue=queue, argsrepr=shown_args(job_id, step, whose))


def shown_args(job_id: int, step: int | None, whose: str = "") -> str:
    """Flower's arguments column: the job and the step that runs, numbered as the API numbers steps (the task's
    ``step`` is how many the job had done: a job at step 0 runs its step 1), then whose job it is."""
    shown = f"job {job_id}, step {step + 1}" if step is not None else f"job {job_id}, its next step"
    return f"{shown} ({whose})" if whose else shown


@cache
def _services() -> Services:
    return make_services(enqueue_with_celery)


def forget_services() -> None:
    """Build the tasks' services anew from the settings at the next task (tests change them between runs)."""
    _services.cache_clear()
    _shared_redis.cache_clear()


@cache
def _shared_redis() -> redis.Redis | None:
    return shared_redis(get_settings())


@worker_init.connect  # type: ignore[untyped-decorator]  # the worker's own process (solo and thread pools)
@worker_process_init.connect  # type: ignore[untyped-decorator]  # each child process of the prefork pool
def _start_sentry(**_: Any) -> None:
    settings = get_settings()
    init_sentry(settings.sentry_dsn, environment=settings.sentry_environment)


OWN_STATES = (JobStatus.NEEDS_NEW_CHAT, JobStatus.INCOMPLETE)
"""The ends of a job its last step shows in Flower as a state of their own: the plimsoll line at work, or
subagents that did not finish, are not failures of the service, nor plain successes."""


# max_retries=None: Celery itself never gives up on a step (its default of 3 would end the task and leave the job
# running). The limits are Plimsoll's: per step in the database for provider faults, and per delivery below for
# database outages. throws: JobFailed is an expected end, logged by Celery without a traceback, skipped by Sentry.
@app.task(bind=True, name=STEP_TASK, max_retries=None, throws=(JobFailed,))  # type: ignore[untyped-decorator]
def run_step_task(
    self: Task, job_id: int, step: int | None = None, outage_since: float | None = None
) -> dict[str, Any]:
    """Step ``step`` of job ``job_id``. Its result (job, step, status, stage, tokens) is what Flower shows; a
    step that failed its job raises JobFailed once it has committed, so that Flower lists it as a FAILURE, and one
    that left its job needing a new chat (or incomplete) is listed in a state named so.
    ``outage_since``: when this delivery first met the database outage it is retrying through (wall clock)."""
    began = time.monotonic()
    try:
        with STEP_PHASES.labels("task").time():
            outcome = run_step(job_id, _services(), step=step)
    except DatabaseUnavailable as outage:
        tries = self.request.retries + 1
        since = outage_since if outage_since is not None else time.time()
        if gives_up_on_outage(tries, time.time() - since, get_settings()):
            # One Sentry event per outage (the first delivery to give up), not per delivery; the job keeps its
            # deadline and the reconciler resumes it once the database is back.
            if first_report_of_outage(_shared_redis()):
                raise
            logger.warning("job %s: step %s given up while the database is unavailable (reported once)", job_id, step)
            return {"job_id": job_id, "step": step, "status": "database unavailable"}
        countdown = backoff_delay(tries, None, JITTER)
        kwargs = {**(self.request.kwargs or {}), "outage_since": since}
        raise self.retry(exc=outage, countdown=countdown, kwargs=kwargs) from None
    except Exception as error:
        if is_outage(error):
            raise
        outcome = fail_after_internal_error(job_id, step, error, _services())
    STEPS.labels(outcome.action).inc()
    if outcome.action == "finished" and outcome.status == JobStatus.FAILED:
        raise JobFailed(outcome.job_id, outcome.step, outcome.stage, _why_failed(outcome.job_id))
    if outcome.action == "finished" and outcome.status in OWN_STATES:
        # Neither a SUCCESS nor a FAILURE: Flower shows a task-* event it does not know as a state of its own
        # (NEEDS_NEW_CHAT, INCOMPLETE), with the result it carries; Ignore keeps Celery from sending task-succeeded,
        # which would override it.
        self.send_event(f"task-{outcome.status}", result=saferepr(outcome.summary()), runtime=time.monotonic() - began)
        raise Ignore()
    return outcome.summary()


def _why_failed(job_id: int) -> str | None:
    with _services().database.session() as session:
        job = session.get(Job, job_id)
        return job.error if job is not None else None


# send_events=False: every few seconds a run would flood Flower's task list, which is for jobs' steps.
@app.task(name=RECONCILE_TASK, ignore_result=True, send_events=False)  # type: ignore[untyped-decorator]
def reconcile_task() -> int:
    """Queue again every unfinished job whose deadline has passed. Celery beat runs this in place
    (worker/scheduler.py); the task is there to run a round by hand."""
    return reconcile_now()


def _broker_view(grace: float) -> QueuedSteps | None:
    """What the broker holds of this service's step queue and its recovery queue (Redis only); a step a worker
    took counts for ``grace`` seconds (one lease) after it was due."""
    url = str(app.conf.broker_url)
    if not url.startswith(("redis://", "rediss://")):
        return None
    queue = app.conf.task_default_queue

    def view() -> set[Step] | None:
        with redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0) as client:
            return queued_steps(client, [queue, recovery_queue(queue)], grace=grace)

    return view


def reconcile_now() -> int:
    """One reconciler round: every unfinished job past its deadline queued again; how many."""
    services = _services()
    try:
        recovered: list[int] = []

        def recover(job_id: int, step: int) -> None:
            recover_with_celery(job_id, step)
            recovered.append(job_id)

        queued = reconcile(
            services.database,
            lease_seconds=services.settings.lease_seconds,
            enqueue=enqueue_with_celery,
            recover=recover,
            queued=_broker_view(services.settings.lease_seconds),
        )
        outage_over(_shared_redis())
        REQUEUED.labels("held").inc(len(recovered))
        REQUEUED.labels("unheld").inc(len(queued) - len(recovered))
        queued += start_parked(services.database, services.settings, enqueue_with_celery)
    except Exception as error:
        if not is_outage(error):
            raise
        logger.warning("reconciler: the database is unavailable; trying again at the next beat")
        return 0
    return len(queued)


@app.task(name=RETENTION_TASK, ignore_result=True, send_events=False)  # type: ignore[untyped-decorator]
def retention_task() -> int:
    """One retention sweep (models/retention.py), sent by Celery beat every PLIMSOLL_RETENTION_SWEEP_EVERY_SECONDS
    and lasting at most that long; the next one goes on where it stopped. How many jobs' histories it purged."""
    services = _services()
    began = time.monotonic()
    done = sweep(services.database, services.settings)
    if done.purged.jobs:
        logger.info("retention: %d jobs' histories purged (%d messages)", done.purged.jobs, done.purged.messages)
    if services.settings.pack_histories:
        left = services.settings.retention_sweep_every_seconds - (time.monotonic() - began)
        packed = pack_ended(services.database, services.settings, seconds=left)
        if packed:
            logger.info("retention: %d messages of ended jobs packed", packed)
    return done.purged.jobs
