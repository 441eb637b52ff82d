"""The Celery application: Redis broker, one task per step, late acks, one task at a time per worker process."""

from __future__ import annotations

from celery import Celery

from models.settings import get_settings

STEP_QUEUE = "plimsoll-steps"


def make_celery(broker_url: str) -> Celery:
    app = Celery("plimsoll", broker=broker_url, include=["worker.tasks"])
    app.conf.update(
        task_default_queue=STEP_QUEUE,
        task_acks_late=True,  # a step lost with its worker is delivered again; steps are idempotent
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,  # a long step must not hold other jobs' steps back
        task_ignore_result=True,  # progress lives in the database, not in a result backend
        worker_send_task_events=True,  # Flower
        task_send_sent_event=True,
        task_track_started=True,
        broker_connection_retry_on_startup=True,
        # One step is one model call; far below this, so a step is never delivered twice while it runs.
        broker_transport_options={"visibility_timeout": 3_600},
        worker_hijack_root_logger=False,
    )
    return app


app = make_celery(get_settings().broker_url)
