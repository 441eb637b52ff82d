"""Celery tasks of webhooks: thin wrappers over worker/webhooks.py. Importing this module (every worker does, as
the app's ``include``) makes this process announce the deliveries its transactions write to the broker."""

from __future__ import annotations

import logging

from models.db import get_database
from models.settings import get_settings
from models.webhooks import set_announcer
from worker.celery_app import app
from worker.names import WEBHOOK_DELIVER_TASK, WEBHOOK_SWEEP_TASK
from worker.outages import is_outage
from worker.webhooks import deliver, sweep

logger = logging.getLogger(__name__)

PRIORITY = 0  # taken before any step (worker/fairness.py): a delivery is one short request


def send_delivery(delivery_id: int, delay: float | None = None, *, manual: bool = False) -> None:
    """Queue one attempt at delivery ``delivery_id`` after ``delay`` seconds."""
    deliver_webhook_task.apply_async(
        (delivery_id,),
        {"manual": manual} if manual else None,
        countdown=delay,
        priority=PRIORITY,
        argsrepr=f"webhook delivery {delivery_id}",
    )


def announce(delivery_ids: list[int]) -> None:
    for delivery_id in delivery_ids:
        send_delivery(delivery_id)


set_announcer(announce)


# acks_late (the app's default): a worker killed mid-send gets the message delivered again; the claim in the
# database keeps two attempts from running at once, and the sweep covers a message that is lost altogether.
@app.task(name=WEBHOOK_DELIVER_TASK, ignore_result=True)  # type: ignore[untyped-decorator]  # Celery is untyped
def deliver_webhook_task(delivery_id: int, manual: bool = False) -> str:
    try:
        return deliver(get_database(), delivery_id, get_settings(), send_delivery, manual=manual)
    except Exception as error:
        if not is_outage(error):
            raise
        logger.warning("webhook delivery %s: the database is unavailable; the sweep sends it later", delivery_id)
        return "database unavailable"


@app.task(name=WEBHOOK_SWEEP_TASK, ignore_result=True, send_events=False)  # type: ignore[untyped-decorator]
def sweep_webhooks_task() -> int:
    """Run by Celery beat in place (worker/scheduler.py); the task is there to run a sweep by hand."""
    return sweep_now()


def sweep_now() -> int:
    """Queue every due delivery the sweep finds; how many."""
    try:
        due = sweep(get_database())
    except Exception as error:
        if not is_outage(error):
            raise
        logger.warning("webhooks sweep: the database is unavailable; trying again at the next beat")
        return 0
    announce(due)
    return len(due)
