"""Creating jobs, following them, reading their history, cancelling them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.budgets import check_budgets
from api.deps import Enqueue, EnqueueDep, SessionDep, TenantDep
from api.errors import ERROR_RESPONSES
from api.idempotency import HeldKey, KeyDep
from api.queries import jobs_query, locked_job_of, messages_page, page_of, steps_query
from api.routes.pagination import WindowDep, page
from api.schemas import (
    ErrorBody,
    Id,
    JobCheck,
    JobIn,
    JobSummary,
    JobView,
    MessageView,
    Page,
    StepView,
    SummaryView,
)
from api.views import job_summary, job_view, model_warnings
from models.endpoints import host_of
from models.errors import Conflict, InvalidInput
from models.history import summaries_of
from models.jobs import create_job, end_job, job_of
from models.ledger import spent_by_jobs
from models.pages import expanded
from models.retention import require_history, set_hold
from models.settings import get_settings
from models.tables import Job, JobKind, JobStatus, now
from worker.tenant_cap import take_place
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)

NO_DOCUMENTS = (
    "document_ids: a job needs at least one document: upload them first (POST /v1/documents) and list their ids"
)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobView)
def submit_job(job_in: JobIn, tenant: TenantDep, session: SessionDep, enqueue: EnqueueDep, key: KeyDep) -> Response:
    """Create a job over the tenant's documents and queue its first step."""
    if not job_in.document_ids:  # a job over nothing would "succeed" with an empty report
        raise InvalidInput(NO_DOCUMENTS)
    job = _job_of(session, tenant.id, job_in)
    return start_job(session, job, enqueue, key, lambda: job_view(session, job))


def start_job(session: Session, job: Job, enqueue: Enqueue, key: HeldKey, answer: Callable[[], BaseModel]) -> Response:
    """Commit the new job with its answer, then queue its first step (a worker that picks it up at once must find
    the job). If the broker cannot be reached, the job keeps its deadline and the reconciler queues it when it is
    back. If its tenant's running jobs fill its cap, the job is parked instead: no step of it waits in the broker
    until one of them ends and gives it the place (worker/tenant_cap.py)."""
    placed = take_place(session, job.id, get_settings())
    response = key.commit(session, answer(), status.HTTP_201_CREATED)
    if placed:
        _enqueue_first_step(job.id, enqueue)
    return response


def _enqueue_first_step(job_id: int, enqueue: Enqueue) -> None:
    try:
        enqueue(job_id)
    except Exception as error:
        logger.warning(
            "job %s: first step not queued (%s); the reconciler will\n%s",
            job_id,
            type(error).__name__,
            scrubbed_traceback(error),
        )


def _job_of(session: Session, tenant_id: int, job_in: JobIn, *, check_only: bool = False) -> Job:
    job = create_job(
        session,
        tenant_id=tenant_id,
        instruction=job_in.instruction,
        document_ids=job_in.document_ids,
        options=job_in.options(),
        check_only=check_only,
    )
    check_budgets(session, job)
    return job


@router.post("/check")
def check_job(job_in: JobIn, tenant: TenantDep, session: SessionDep) -> JobCheck:
    """Everything ``POST /v1/jobs`` checks, with nothing stored or queued: a client can check a job before it
    uploads the documents (send ``document_ids`` empty then) and learn the defaults it would get."""
    job = _job_of(session, tenant.id, job_in, check_only=True)  # nothing inserted: no job id is used up
    check = JobCheck(
        model=job.model,
        endpoint=host_of(job.endpoint) if job.endpoint else None,
        emulator=job.emulator,
        budget=job.budget,
        hard_limit=job.hard_limit,
        max_steps=job.max_steps,
        max_input_tokens=job.max_input_tokens,
        max_cost_usd=float(job.max_cost_usd),
        compaction=job.compaction,
        warnings=model_warnings(job.model),
        max_document_chars=get_settings().max_document_chars,
    )
    session.rollback()
    return check


@router.get("")
def list_jobs(
    tenant: TenantDep,
    session: SessionDep,
    window: WindowDep,
    kind: Annotated[JobKind | None, Query(description="only main jobs or only subagents")] = None,
    job_status: Annotated[JobStatus | None, Query(alias="status", description="only jobs in this status")] = None,
) -> Page[JobSummary]:
    """The tenant's jobs, newest first."""
    query = jobs_query(tenant_id=tenant.id, kind=kind, status=job_status)
    rows, total = page_of(session, query, offset=window.offset, limit=window.limit)
    costs = spent_by_jobs(session, rows)
    return page([job_summary(job, float(costs[job.id])) for job in rows], total, window)


@router.get("/{job_id}")
def get_job(job_id: Id, tenant: TenantDep, session: SessionDep) -> JobView:
    """Status, progress, token usage, the last request, and the answer once there is one."""
    return job_view(session, job_of(session, tenant_id=tenant.id, job_id=job_id))


GONE: dict[int | str, dict[str, Any]] = {
    410: {"model": ErrorBody, "description": "the job's history was purged under the tenant's retention policy"}
}


@router.get("/{job_id}/messages", responses=GONE)
def list_messages(job_id: Id, tenant: TenantDep, session: SessionDep, window: WindowDep) -> Page[MessageView]:
    """The job's whole stored conversation in order, including everything a request left out or cleared. A page
    holds at most `limit` messages and PLIMSOLL_MAX_PAGE_BYTES of their content (at least one message):
    `next_offset` says where the next page starts."""
    job = job_of(session, tenant_id=tenant.id, job_id=job_id)
    require_history(job)
    rows, total = messages_page(
        session, job_id=job.id, offset=window.offset, limit=window.limit, max_bytes=get_settings().max_page_bytes
    )
    contents = expanded(session, tenant.id, [m.content for m in rows])  # pages of documents, stored by reference
    views = [
        MessageView.model_validate(m).model_copy(update={"content": c}) for m, c in zip(rows, contents, strict=True)
    ]
    return page(views, total, window)


@router.get("/{job_id}/steps", responses=GONE)
def list_steps(job_id: Id, tenant: TenantDep, session: SessionDep, window: WindowDep) -> Page[StepView]:
    """What each step sent: the fitting stage, tokens estimated and reported, results cleared, messages dropped."""
    job = job_of(session, tenant_id=tenant.id, job_id=job_id)
    require_history(job)
    rows, total = page_of(session, steps_query(job_id=job.id), offset=window.offset, limit=window.limit)
    summaries = {s.step: SummaryView.model_validate(s) for s in summaries_of(session, job.id)}
    return page(
        [
            StepView.model_validate(s).model_copy(update={"summary": summaries.get(s.step), "emulator": job.emulator})
            for s in rows
        ],
        total,
        window,
    )


@router.post(
    "/{job_id}/cancel",
    response_model=JobView,
    responses={409: {"model": ErrorBody, "description": "the job has finished already"}},
)
def cancel_job(job_id: Id, tenant: TenantDep, session: SessionDep, key: KeyDep) -> Response:
    """Cancel a queued or running job and its unfinished subagents. The step in flight, if any, completes, and
    no further step runs."""
    # Locked, so that a step finishing at this moment is not overwritten as cancelled, nor the reverse.
    job = locked_job_of(session, tenant_id=tenant.id, job_id=job_id)
    if job.status.finished:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job {job.id} has finished already ({job.status}); only a queued or running job can be cancelled",
        )
    cancelled_at = now()
    children = select(Job).where(Job.parent_id == job.id).order_by(Job.id).with_for_update(key_share=True)
    for each in [*session.scalars(children), job]:  # the main job's ended event last: it ends its stream
        if not each.status.finished:
            end_job(session, each, JobStatus.CANCELLED, at=cancelled_at)
    return key.commit(session, job_view(session, job))


@router.post(
    "/{job_id}/hold",
    response_model=JobView,
    responses={**GONE, 409: {"model": ErrorBody, "description": "the job is a subagent: hold its main job"}},
)
def hold_job(job_id: Id, tenant: TenantDep, session: SessionDep, key: KeyDep) -> Response:
    """Keep the job's history (its subagents' with it) whatever the tenant's retention policy, until released."""
    return _set_hold(session, key, tenant.id, job_id, held=True)


@router.post(
    "/{job_id}/release",
    response_model=JobView,
    responses={409: {"model": ErrorBody, "description": "the job is a subagent: release its main job"}},
)
def release_job(job_id: Id, tenant: TenantDep, session: SessionDep, key: KeyDep) -> Response:
    """Give the job's history back to the tenant's retention policy: purged at the next sweep once it is due."""
    return _set_hold(session, key, tenant.id, job_id, held=False)


def _set_hold(session: Session, key: HeldKey, tenant_id: int, job_id: int, *, held: bool) -> Response:
    # Locked, so that a sweep purging the job at this moment either finishes first (410) or sees the hold.
    job = locked_job_of(session, tenant_id=tenant_id, job_id=job_id)
    try:
        set_hold(job, held=held)
    except Conflict as conflict:
        raise HTTPException(status.HTTP_409_CONFLICT, str(conflict)) from None
    return key.commit(session, job_view(session, job))
