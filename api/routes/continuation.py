"""Starting a new chat from a job that ended: the next step, with a hand-over of the old job."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status

from api.budgets import check_budgets
from api.deps import EnqueueDep, SessionDep, TenantDep
from api.errors import ERROR_RESPONSES
from api.idempotency import KeyDep
from api.routes.jobs import start_job
from api.schemas import ContinueIn, ErrorBody, Id, JobView
from api.views import job_view
from models.continuation import continue_job
from models.errors import Conflict

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)


@router.post(
    "/{job_id}/continue",
    status_code=status.HTTP_201_CREATED,
    response_model=JobView,
    responses={
        409: {
            "model": ErrorBody,
            "description": "the job has not ended, is a subagent, was continued, its history was purged, or none of "
            "its documents is left",
        }
    },
)
def continue_in_a_new_chat(
    job_id: Id, next_step: ContinueIn, tenant: TenantDep, session: SessionDep, enqueue: EnqueueDep, key: KeyDep
) -> Response:
    """A new job over the same documents, starting from a hand-over of this one (what it was asked, what it
    produced, what it left to do) and the next step. The two jobs link to each other. Documents of the old job
    that were deleted are named in ``warnings``; with none left, the continuation is refused (409)."""
    try:
        continued = continue_job(
            session,
            tenant_id=tenant.id,
            job_id=job_id,
            instruction=next_step.instruction,
            options=next_step.options(),
        )
    except Conflict as conflict:
        raise HTTPException(status.HTTP_409_CONFLICT, str(conflict)) from None
    check_budgets(session, continued.job)

    def answer() -> JobView:
        view = job_view(session, continued.job)
        return view.model_copy(update={"warnings": [*continued.warnings, *view.warnings]})

    return start_job(session, continued.job, enqueue, key, answer)
