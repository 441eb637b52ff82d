"""Celery tasks: thin wrappers that take ids and call plain functions."""

from __future__ import annotations

from functools import cache
from typing import Any

from celery import Task
from celery.signals import worker_init, worker_process_init

from models.settings import get_settings
from worker.celery_app import app
from worker.runner import Services, run_step
from worker.sentry import init_sentry
from worker.services import make_services


def enqueue_with_celery(job_id: int, delay: float | None = None) -> None:
    run_step_task.apply_async((job_id,), countdown=delay)


@cache
def _services() -> Services:
    return make_services(enqueue_with_celery)


@worker_init.connect  # type: ignore[untyped-decorator]  # the worker's own process (solo and thread pools)
@worker_process_init.connect  # type: ignore[untyped-decorator]  # each child process of the prefork pool
def _start_sentry(**_: Any) -> None:
    settings = get_settings()
    init_sentry(settings.sentry_dsn, environment=settings.sentry_environment)


@app.task(bind=True, name="plimsoll.run_step")  # type: ignore[untyped-decorator]
def run_step_task(self: Task, job_id: int) -> dict[str, Any]:
    """One step of job ``job_id``. Its result (job, step, stage, tokens) is what Flower shows."""
    outcome = run_step(job_id, _services(), attempt=self.request.retries + 1)
    if outcome.action == "retry":
        raise self.retry(countdown=outcome.retry_in, max_retries=None)
    return outcome.summary()
