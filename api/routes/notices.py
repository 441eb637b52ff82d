"""The notices people read: for instance that a conversation grew too long for the model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from api.deps import SessionDep, TenantDep
from api.errors import ERROR_RESPONSES
from api.idempotency import KeyDep
from api.queries import notice_of, notices_query, page_of
from api.routes.pagination import WindowDep, page
from api.schemas import Id, NoticeView, Page
from models.tables import now

router = APIRouter(prefix="/v1/notices", tags=["notices"], responses=ERROR_RESPONSES)


@router.get("")
def list_notices(
    tenant: TenantDep,
    session: SessionDep,
    window: WindowDep,
    unread: Annotated[bool, Query(description="only notices not yet marked read")] = False,
    job_id: Annotated[Id | None, Query(description="only the notices of this job")] = None,
) -> Page[NoticeView]:
    """The tenant's notices, newest first."""
    query = notices_query(tenant_id=tenant.id, unread_only=unread, job_id=job_id)
    rows, total = page_of(session, query, offset=window.offset, limit=window.limit)
    return page([NoticeView.model_validate(n) for n in rows], total, window)


@router.post("/{notice_id}/read", response_model=NoticeView)
def mark_notice_read(notice_id: Id, tenant: TenantDep, session: SessionDep, key: KeyDep) -> Response:
    """Mark a notice read. Marking it again keeps the time it was first read."""
    notice = notice_of(session, tenant_id=tenant.id, notice_id=notice_id)
    if notice.read_at is None:
        notice.read_at = now()
    return key.commit(session, NoticeView.model_validate(notice))
