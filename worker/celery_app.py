"""The Celery application: one task per step, late acks, one task at a time per worker process, and the
reconciler run by Celery beat itself (worker/scheduler.py). The broker is Redis by default; RabbitMQ
(amqp://...) works by configuration alone."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import celeryd_after_setup

from models.settings import Settings, get_settings
from worker.fairness import PRIORITY_STEPS
from worker.names import RECONCILE_TASK, RETENTION_TASK, STEP_QUEUE, WEBHOOK_SWEEP_TASK

RECOVERY_SUFFIX = ".recovery"


def recovery_queue(step_queue: str) -> str:
    """The queue of steps the reconciler took back from deliveries that are gone (a worker killed, a call past its
    deadline). Every worker of ``step_queue`` serves it in turn with ``step_queue`` (the broker takes from the two
    in rotation), so a job that already waited its turn once is not put behind the whole backlog again."""
    return step_queue + RECOVERY_SUFFIX


def make_celery(settings: Settings) -> Celery:
    app = Celery("plimsoll", broker=settings.broker_url, include=["worker.tasks", "worker.webhook_tasks"])
    app.conf.update(
        task_default_queue=settings.step_queue or STEP_QUEUE,
        task_acks_late=True,  # a step lost with its worker child is delivered again; steps are exactly-once
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,  # a long step must not hold other jobs' steps back
        task_ignore_result=True,  # progress lives in the database, not in a result backend
        worker_send_task_events=True,  # Flower
        # No task-sent events: beat sends the reconciler every few seconds, and each would be a row of Flower's
        # task list, which is for the jobs' steps (they show from the moment a worker receives them).
        task_send_sent_event=False,
        task_track_started=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # a worker waits out a broker restart instead of exiting
        # A step in flight when the broker connection drops finishes and stores its reply; its message may be
        # delivered again, and that delivery finds the step done.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        # Redis only: a message taken by a worker that died is handed out again after this long. The reconciler
        # recovers the job long before (lease + reconcile interval), so this only needs to outlast a slow step.
        # Redis: one list per priority, taken in order, so a tenant running few jobs goes first (worker/fairness.py).
        broker_transport_options={
            "visibility_timeout": 2 * settings.request_timeout_seconds + 600,
            "priority_steps": PRIORITY_STEPS,
            "sep": ":",
        },
        # Beat runs the reconciler itself, on one machine at a time (worker/scheduler.py): no step backlog can
        # hold it up and no round expires unrun.
        beat_scheduler="worker.scheduler:ReconcilingScheduler",
        # and sends a retention sweep, which a worker runs like a step: it may wait behind them.
        beat_schedule={
            "plimsoll-reconcile": {"task": RECONCILE_TASK, "schedule": settings.reconcile_every_seconds},
            "plimsoll-retention": {"task": RETENTION_TASK, "schedule": settings.retention_sweep_every_seconds},
            "plimsoll-webhooks": {"task": WEBHOOK_SWEEP_TASK, "schedule": settings.webhook_sweep_seconds},
        },
        worker_hijack_root_logger=False,
    )
    return app


app = make_celery(get_settings())


@celeryd_after_setup.connect  # type: ignore[untyped-decorator]  # Celery is untyped
def _serve_recovery_queues(instance: Any, **_: Any) -> None:
    """A worker started for a step queue (``-Q`` or the default) also serves that queue's recovery queue."""
    queues = instance.app.amqp.queues
    for name in list(queues.consume_from):
        if not name.endswith(RECOVERY_SUFFIX):
            queues.select_add(recovery_queue(name))
