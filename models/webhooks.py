"""Webhooks' stored side: a tenant's endpoints, and the outbox. ``models.events.record`` calls ``write_outbox`` in the
event's own transaction, so a delivery row exists exactly when its event does, one per matching endpoint, with a
``webhook-id`` fixed once for that event and endpoint. Once the transaction commits, the deliveries it wrote are
announced to whoever sends them (the worker registers its Celery queue with ``set_announcer``); an announcement
lost, or a process without an announcer, only delays them until the sweep (worker/webhooks.py)."""

from __future__ import annotations

import base64
import contextlib
import enum
import secrets
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy import event as orm_event
from sqlalchemy.orm import Session

from models.events import EventType
from models.settings import get_settings
from models.statuses import JobStatus
from models.tables import Event, WebhookDelivery, WebhookEndpoint, now
from models.webhook_addresses import check_url

NEEDS_NEW_CHAT = "job.needs_new_chat"  # a job.ended event whose status is needs_new_chat, for who wants only those
EVENT_TYPES = (*(kind.value for kind in EventType), NEEDS_NEW_CHAT)
SECRET_PREFIX = "whsec_"
MAX_ENDPOINTS_PER_TENANT = 50


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"  # to be sent (again) at next_attempt_at
    DELIVERED = "delivered"  # the receiver answered 2xx
    REFUSED = "refused"  # the receiver answered a 4xx that retrying cannot change
    FAILED = "failed"  # given up: still not delivered when its retry time ran out
    CANCELLED = "cancelled"  # its endpoint was removed before it was sent


class Outcome(enum.StrEnum):
    DELIVERED = "delivered"
    REFUSED = "refused"
    DOWN = "down"  # 5xx, 408, 429, a timeout, no connection, or an address refused at the send: retried


class EndpointError(ValueError):
    """A registration that cannot be accepted, with the reason a person can act on."""


Announcer = Callable[[list[int]], None]
_announcer: Announcer | None = None
_PENDING_KEY = "plimsoll_webhook_deliveries"


def set_announcer(announcer: Announcer | None) -> None:
    """Who is told the ids of deliveries written by a transaction once it commits (None: nobody; the sweep finds
    them)."""
    global _announcer
    _announcer = announcer


def new_secret() -> str:
    """A signing secret as Standard Webhooks writes them: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def webhook_id(event_id: int, endpoint_id: int) -> str:
    """The ``webhook-id`` of an event for an endpoint: the same at every attempt and every redelivery."""
    return f"msg_{event_id}_{endpoint_id}"


def add_endpoint(session: Session, *, tenant_id: int, url: str, event_types: Iterable[str]) -> WebhookEndpoint:
    """A new endpoint of the tenant for ``event_types`` (committed by the caller); EndpointError if the URL may not be
    called or a type is unknown."""
    types = list(dict.fromkeys(event_types))
    unknown = [kind for kind in types if kind not in EVENT_TYPES]
    if not types or unknown:
        raise EndpointError(f"unknown event types {unknown}; choose from {', '.join(EVENT_TYPES)}")
    try:
        check_url(url, allow_private=get_settings().webhooks_allow_private)
    except ValueError as refused:
        raise EndpointError(str(refused)) from None
    if len(endpoints_of(session, tenant_id)) >= MAX_ENDPOINTS_PER_TENANT:
        raise EndpointError(f"a tenant may have at most {MAX_ENDPOINTS_PER_TENANT} webhook endpoints")
    endpoint = WebhookEndpoint(tenant_id=tenant_id, url=url, event_types=types, secret=new_secret())
    session.add(endpoint)
    session.flush()
    return endpoint


_ENDPOINTS = (
    select(WebhookEndpoint)
    .where(WebhookEndpoint.tenant_id == bindparam("tenant_id"), WebhookEndpoint.removed_at.is_(None))
    .order_by(WebhookEndpoint.id)
)


def endpoints_of(session: Session, tenant_id: int) -> list[WebhookEndpoint]:
    """The tenant's endpoints that are not removed, oldest first."""
    return list(session.scalars(_ENDPOINTS, {"tenant_id": tenant_id}))


def payload_type(event: Event, subscribed: list[Any]) -> str | None:
    """The type an endpoint subscribed to ``subscribed`` receives ``event`` as, or None if it does not want it."""
    if event.type in subscribed:
        return event.type
    if event.type == EventType.ENDED and NEEDS_NEW_CHAT in subscribed:
        return NEEDS_NEW_CHAT if event.data.get("status") == JobStatus.NEEDS_NEW_CHAT else None
    return None


def payload(delivery: WebhookDelivery, event: Event) -> dict[str, Any]:
    """What is sent, in Standard Webhooks' shape: the same at every attempt (the event is never changed)."""
    data = {"job_id": event.job_id, "event_id": event.id} | event.data
    return {"type": delivery.type, "timestamp": event.created_at.isoformat(), "data": data}


def write_outbox(session: Session, event: Event) -> list[WebhookDelivery]:
    """A pending delivery of ``event`` for each of its tenant's endpoints that wants it, in the caller's
    transaction; their ids are announced after its commit."""
    deliveries: list[WebhookDelivery] = []
    when = now()
    give_up_at = when + timedelta(seconds=get_settings().webhook_retry_seconds)
    for endpoint in endpoints_of(session, event.tenant_id):
        kind = payload_type(event, endpoint.event_types)
        if kind is None:
            continue
        deliveries.append(
            WebhookDelivery(
                tenant_id=event.tenant_id,
                endpoint_id=endpoint.id,
                event_id=event.id,
                job_id=event.job_id,
                webhook_id=webhook_id(event.id, endpoint.id),
                type=kind,
                status=DeliveryStatus.PENDING,
                next_attempt_at=when,
                give_up_at=give_up_at,
                created_at=when,
            )
        )
    if deliveries:
        session.add_all(deliveries)
        session.flush()
        _announce_after_commit(session, [delivery.id for delivery in deliveries])
    return deliveries


def reopen(session: Session, delivery: WebhookDelivery) -> None:
    """Make ``delivery`` pending and due now, with a fresh retry time, whatever became of it, to be sent again by
    hand (it keeps its ``webhook-id``)."""
    when = now()
    delivery.status = DeliveryStatus.PENDING
    delivery.next_attempt_at = when
    delivery.give_up_at = when + timedelta(seconds=get_settings().webhook_retry_seconds)


def _announce_after_commit(session: Session, ids: list[int]) -> None:
    if not orm_event.contains(session, "after_commit", _announce):  # listening for the session's whole life
        orm_event.listen(session, "after_commit", _announce)
        orm_event.listen(session, "after_rollback", _forget)
    session.info.setdefault(_PENDING_KEY, []).extend(ids)


def _announce(session: Session) -> None:
    ids = session.info.pop(_PENDING_KEY, [])
    if ids and _announcer is not None:
        # The transaction is committed: what cannot be announced now (the broker down), the sweep sends later.
        with contextlib.suppress(Exception):
            _announcer(ids)


def _forget(session: Session) -> None:
    session.info.pop(_PENDING_KEY, None)
