"""A tenant's webhook endpoints, and the deliveries of its events to them, with every attempt."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status
from sqlalchemy import Select, select, update
from sqlalchemy.orm import Session

from api.deps import SessionDep, TenantDep
from api.errors import ERROR_RESPONSES
from api.idempotency import KeyDep
from api.queries import page_of
from api.routes.pagination import WindowDep, page
from api.schemas import (
    Id,
    Page,
    WebhookAttemptView,
    WebhookCreated,
    WebhookDeliveryView,
    WebhookIn,
    WebhookList,
    WebhookView,
)
from models.errors import NotFound
from models.tables import WebhookAttempt, WebhookDelivery, WebhookEndpoint, now
from models.webhooks import DeliveryStatus, EndpointError, add_endpoint, endpoints_of, reopen

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], responses=ERROR_RESPONSES)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=WebhookCreated)
def create_webhook(webhook: WebhookIn, tenant: TenantDep, session: SessionDep, key: KeyDep) -> Response:
    """Register an endpoint for event types. Its signing secret is in this answer only."""
    try:
        endpoint = add_endpoint(session, tenant_id=tenant.id, url=webhook.url, event_types=webhook.events)
    except EndpointError as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error)) from None
    session.flush()
    return key.commit(session, WebhookCreated.model_validate(endpoint), status.HTTP_201_CREATED)


@router.get("")
def list_webhooks(tenant: TenantDep, session: SessionDep) -> WebhookList:
    """The tenant's endpoints, oldest first (without their secrets)."""
    return WebhookList(items=[WebhookView.model_validate(e) for e in endpoints_of(session, tenant.id)])


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def remove_webhook(webhook_id: Id, tenant: TenantDep, session: SessionDep) -> Response:
    """Remove an endpoint: nothing more is sent to it; its deliveries stay listed."""
    endpoint = session.get(WebhookEndpoint, webhook_id)
    if endpoint is None or endpoint.tenant_id != tenant.id or endpoint.removed_at is not None:
        raise NotFound(f"no webhook endpoint with id {webhook_id}")
    endpoint.removed_at = now()
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.endpoint_id == endpoint.id, WebhookDelivery.status == DeliveryStatus.PENDING)
        .values(status=DeliveryStatus.CANCELLED, next_attempt_at=None)
    )
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/deliveries")
def list_deliveries(
    tenant: TenantDep,
    session: SessionDep,
    window: WindowDep,
    endpoint_id: Annotated[Id | None, Query(description="only the deliveries to this endpoint")] = None,
    job_id: Annotated[Id | None, Query(description="only the deliveries of this job's events")] = None,
) -> Page[WebhookDeliveryView]:
    """The tenant's deliveries, newest first, each with every attempt and its answer."""
    query: Select[WebhookDelivery] = select(WebhookDelivery).where(WebhookDelivery.tenant_id == tenant.id)
    if endpoint_id is not None:
        query = query.where(WebhookDelivery.endpoint_id == endpoint_id)
    if job_id is not None:
        query = query.where(WebhookDelivery.job_id == job_id)
    rows, total = page_of(session, query.order_by(WebhookDelivery.id.desc()), offset=window.offset, limit=window.limit)
    return page(views_of(session, rows), total, window)


@router.post(
    "/deliveries/{delivery_id}/redeliver", status_code=status.HTTP_202_ACCEPTED, response_model=WebhookDeliveryView
)
def redeliver(delivery_id: Id, tenant: TenantDep, session: SessionDep, key: KeyDep) -> Response:
    """Send a delivery again now, with the same webhook-id, whatever became of it (its retry time starts anew)."""
    delivery = session.get(WebhookDelivery, delivery_id, with_for_update=True)
    if delivery is None or delivery.tenant_id != tenant.id:
        raise NotFound(f"no webhook delivery with id {delivery_id}")
    endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
    if endpoint is None or endpoint.removed_at is not None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"webhook endpoint {delivery.endpoint_id} was removed")
    reopen(session, delivery)
    answer = key.commit(session, views_of(session, [delivery])[0], status.HTTP_202_ACCEPTED)
    from worker.webhook_tasks import send_delivery  # imported when first needed: it loads Celery

    send_delivery(delivery.id, manual=True)
    return answer


def views_of(session: Session, rows: list[WebhookDelivery]) -> list[WebhookDeliveryView]:
    """The deliveries as the API shows them, each with its attempts (the row's ``attempts`` is only their count)."""
    attempts: dict[int, list[WebhookAttemptView]] = {row.id: [] for row in rows}
    for attempt in session.scalars(
        select(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(attempts)).order_by(WebhookAttempt.id)
    ):
        attempts[attempt.delivery_id].append(WebhookAttemptView.model_validate(attempt))
    shown = [name for name in WebhookDeliveryView.model_fields if name != "attempts"]
    return [
        WebhookDeliveryView.model_validate(
            {name: getattr(row, name) for name in shown} | {"attempts": attempts[row.id]}
        )
        for row in rows
    ]
