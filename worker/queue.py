"""Enqueueing a job's next step, through Celery or the in-process worker (``PLIMSOLL_QUEUE``)."""

from __future__ import annotations

from models.settings import get_settings
from worker.inprocess import InProcessWorker

_in_process: InProcessWorker | None = None


def use_in_process(worker: InProcessWorker | None) -> None:
    """Route steps to ``worker`` (the embedded default), or back to Celery with None."""
    global _in_process
    _in_process = worker


def enqueue_step(job_id: int, delay: float | None = None) -> None:
    if _in_process is not None:
        _in_process.submit(job_id, delay)
        return
    if get_settings().queue == "inprocess":
        raise RuntimeError("PLIMSOLL_QUEUE=inprocess, but no in-process worker runs in this process")
    from worker.tasks import enqueue_with_celery  # imported late: it connects the Celery app

    enqueue_with_celery(job_id, delay)
