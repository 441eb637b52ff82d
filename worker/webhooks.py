"""Sending the webhooks' outbox (models/webhooks.py). Plain functions over the database; worker/webhook_tasks.py
runs them as Celery tasks.

A delivery is claimed before it is sent: its ``next_attempt_at`` moves past the attempt's whole time, so the sweep
leaves it alone while it is in flight and takes it up again if the worker dies mid-send (an outbox row is the
truth; a lost message only delays it). A receiver that is down is probed by one delivery at a time, its endpoint
waiting 1, 2, 4, ... seconds between probes (at most ``webhook_retry_max_interval_seconds``); the first attempt
it answers sends everything that waited for it at once. A delivery is given up when its retry time (24 hours by
default) runs out. Every attempt is stored with its outcome; logs carry ids and status codes, never a payload.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session
from standardwebhooks.webhooks import Webhook

from models.db import Database
from models.settings import Settings
from models.tables import Event, WebhookAttempt, WebhookDelivery, WebhookEndpoint, now
from models.webhooks import DeliveryStatus, Outcome, payload
from worker.webhook_http import Answer, post

logger = logging.getLogger(__name__)

Send = Callable[[int, float | None], None]
"""Queues delivery ``id`` to be sent after ``delay`` seconds (None: now)."""

CLAIM_MARGIN_SECONDS = 30.0  # beyond the attempt's own timeout, before the sweep takes a claimed delivery back
SWEEP_BATCH = 1_000


@dataclass(frozen=True)
class Claimed:
    delivery_id: int
    webhook_id: str
    url: str
    secret: str
    body: str
    manual: bool


def backoff_seconds(failures: int, settings: Settings) -> float:
    """How long an endpoint that failed ``failures`` times in a row waits before its next probe: 1, 2, 4, ... s."""
    return float(min(settings.webhook_retry_max_interval_seconds, 2.0 ** max(0, failures - 1)))


def deliver(database: Database, delivery_id: int, settings: Settings, send: Send, *, manual: bool = False) -> str:
    """One attempt at delivery ``delivery_id`` if it is due (and its endpoint not waiting out a failure); what
    happened, in a word, for the task's result."""
    claimed = _claim(database, delivery_id, settings, manual=manual)
    if isinstance(claimed, str):
        return claimed
    started, began = now(), time.monotonic()
    answer = post(
        claimed.url,
        claimed.body.encode(),
        signed_headers(claimed, started),
        timeout=settings.webhook_timeout_seconds,
        allow_private=settings.webhooks_allow_private,
    )
    duration_ms = round((time.monotonic() - began) * 1000)
    logger.info(
        "webhook delivery %s: %s%s",
        delivery_id,
        answer.outcome,
        f" ({answer.status_code})" if answer.status_code else "",
    )
    again = _record(database, claimed, answer, started, duration_ms, settings)
    for other, delay in again:
        send(other, delay)
    return answer.outcome.value


def signed_headers(claimed: Claimed, at: datetime) -> dict[str, str]:
    """Standard Webhooks' headers: the delivery's fixed id, the time of this attempt, and their signature."""
    signature = Webhook(claimed.secret).sign(claimed.webhook_id, at, claimed.body)
    return {
        "content-type": "application/json",
        "user-agent": "Plimsoll-Webhooks/1",
        "webhook-id": claimed.webhook_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


def _claim(database: Database, delivery_id: int, settings: Settings, *, manual: bool) -> Claimed | str:
    hold = timedelta(seconds=settings.webhook_timeout_seconds + CLAIM_MARGIN_SECONDS)
    with database.session() as session:
        delivery = session.get(WebhookDelivery, delivery_id, with_for_update=True)
        if delivery is None or delivery.status != DeliveryStatus.PENDING:
            return "not pending"
        when = now()
        if delivery.next_attempt_at is None or delivery.next_attempt_at > when:
            return "not due"
        endpoint = session.get(WebhookEndpoint, delivery.endpoint_id, with_for_update=True)
        assert endpoint is not None  # a foreign key
        if endpoint.removed_at is not None:
            _finish(delivery, DeliveryStatus.CANCELLED)
            return "endpoint removed"
        if delivery.give_up_at <= when:
            _finish(delivery, DeliveryStatus.FAILED)
            return "given up"
        if endpoint.failures and not manual:
            if endpoint.retry_at is not None and endpoint.retry_at > when:
                return "endpoint waiting"
            endpoint.retry_at = when + hold  # this delivery is the endpoint's one probe
        delivery.next_attempt_at = when + hold
        event = session.get(Event, delivery.event_id)
        assert event is not None  # a foreign key
        body = json.dumps(payload(delivery, event), ensure_ascii=False, separators=(",", ":"))
        return Claimed(delivery.id, delivery.webhook_id, endpoint.url, endpoint.secret, body, manual)


def _finish(delivery: WebhookDelivery, status: DeliveryStatus) -> None:
    delivery.status = status
    delivery.next_attempt_at = None


def _record(
    database: Database, claimed: Claimed, answer: Answer, started: datetime, duration_ms: int, settings: Settings
) -> list[tuple[int, float | None]]:
    """Store the attempt and its consequences; the deliveries to send next, with their delays."""
    with database.session() as session:
        delivery = session.get(WebhookDelivery, claimed.delivery_id, with_for_update=True)
        assert delivery is not None  # deliveries are never deleted but with their tenant
        endpoint = session.get(WebhookEndpoint, delivery.endpoint_id, with_for_update=True)
        assert endpoint is not None
        session.add(
            WebhookAttempt(
                delivery_id=delivery.id,
                outcome=answer.outcome,
                status_code=answer.status_code,
                error=answer.error,
                manual=claimed.manual,
                started_at=started,
                duration_ms=duration_ms,
            )
        )
        delivery.attempts += 1
        if answer.outcome == Outcome.DOWN:
            return _down(delivery, endpoint, settings)
        if answer.outcome == Outcome.DELIVERED:
            _finish(delivery, DeliveryStatus.DELIVERED)
            delivery.delivered_at = now()
        else:
            _finish(delivery, DeliveryStatus.REFUSED)
        return _answered(session, endpoint)


def _down(delivery: WebhookDelivery, endpoint: WebhookEndpoint, settings: Settings) -> list[tuple[int, float | None]]:
    endpoint.failures += 1
    delay = backoff_seconds(endpoint.failures, settings)
    endpoint.retry_at = now() + timedelta(seconds=delay)
    if delivery.give_up_at <= endpoint.retry_at:
        _finish(delivery, DeliveryStatus.FAILED)
        return []
    delivery.next_attempt_at = endpoint.retry_at
    return [(delivery.id, delay)]


def _answered(session: Session, endpoint: WebhookEndpoint) -> list[tuple[int, float | None]]:
    """The receiver answers: if it had been failing, everything that waited for it is due now."""
    was_down = endpoint.failures > 0
    endpoint.failures, endpoint.retry_at = 0, None
    if not was_down:
        return []
    waiting = session.scalars(
        update(WebhookDelivery)
        .where(WebhookDelivery.endpoint_id == endpoint.id, WebhookDelivery.status == DeliveryStatus.PENDING)
        .values(next_attempt_at=now())
        .returning(WebhookDelivery.id)
    ).all()
    return [(delivery_id, None) for delivery_id in sorted(waiting)]


def sweep(database: Database) -> list[int]:
    """The deliveries due now whose message may have been lost: every due one of a healthy endpoint, the oldest due
    one of an endpoint that is down and may be probed again. Those past their retry time are given up here."""
    when = now()
    with database.session() as session:
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.status == DeliveryStatus.PENDING, WebhookDelivery.give_up_at <= when)
            .values(status=DeliveryStatus.FAILED, next_attempt_at=None)
        )
        healthy = session.scalars(
            select(WebhookDelivery.id)
            .join(WebhookEndpoint, WebhookEndpoint.id == WebhookDelivery.endpoint_id)
            .where(
                WebhookDelivery.status == DeliveryStatus.PENDING,
                WebhookDelivery.next_attempt_at <= when,
                WebhookEndpoint.failures == 0,
            )
            .order_by(WebhookDelivery.id)
            .limit(SWEEP_BATCH)
        ).all()
        probes = session.scalars(
            select(func.min(WebhookDelivery.id))
            .join(WebhookEndpoint, WebhookEndpoint.id == WebhookDelivery.endpoint_id)
            .where(
                WebhookDelivery.status == DeliveryStatus.PENDING,
                WebhookDelivery.next_attempt_at <= when,
                WebhookEndpoint.failures > 0,
                (WebhookEndpoint.retry_at.is_(None)) | (WebhookEndpoint.retry_at <= when),
            )
            .group_by(WebhookDelivery.endpoint_id)
        ).all()
    return [*healthy, *probes]
