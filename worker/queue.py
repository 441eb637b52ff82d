"""Enqueueing a job's step: through Celery, or (``PLIMSOLL_QUEUE=inprocess``) to a worker inside this process,
started on first use, so that `plimsoll api` alone is a whole service on SQLite."""

from __future__ import annotations

import threading

from models.settings import get_settings
from worker.inprocess import InProcessWorker
from worker.sentry import start_sentry
from worker.services import make_services

_local: InProcessWorker | None = None
_lock = threading.Lock()


def enqueue_step(job_id: int, step: int | None = None, delay: float | None = None) -> None:
    """Queue step ``step`` of job ``job_id`` (None: whichever is current when it runs)."""
    if get_settings().queue == "inprocess":
        local_worker().submit(job_id, step, delay)
        return
    from worker.tasks import enqueue_with_celery  # imported late: it connects the Celery app

    enqueue_with_celery(job_id, step, delay)


def local_worker() -> InProcessWorker:
    global _local
    with _lock:
        if _local is None:
            start_sentry()  # the embedded worker reports as the Celery worker does
            _local = InProcessWorker(make_services)
        return _local


def stop_local_worker() -> None:
    global _local
    with _lock:
        if _local is not None:
            _local.stop()
            _local = None
