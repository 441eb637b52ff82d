"""What a tenant has spent, from the ledger: in all, by day, by month, by model and by main job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import SessionDep, TenantDep
from api.errors import ERROR_RESPONSES
from api.schemas import Day, UsageJob, UsageModel, UsagePeriod, UsageReport
from api.views import split
from models.errors import InvalidInput
from models.ledger import usage_report

router = APIRouter(prefix="/v1/usage", tags=["usage"], responses=ERROR_RESPONSES)

MAX_DAYS = 366


@router.get("")
def get_usage(
    tenant: TenantDep,
    session: SessionDep,
    first: Annotated[Day | None, Query(alias="from", description="the first day (UTC); default: the month's")] = None,
    last: Annotated[Day | None, Query(alias="to", description="the last day (UTC), counted; default: today")] = None,
) -> UsageReport:
    """USD the tenant's requests were billed, split as billed and by kind (wasted: paid replies not used), from
    ``from`` through ``to``: in all, per day, per month, per model and per main job (its subagents included)."""
    today = datetime.now(UTC).date()
    last = last or today
    first = first or last.replace(day=1)
    if first > last:
        raise InvalidInput(f"from ({first}) is after to ({last})")
    if last - first >= timedelta(days=MAX_DAYS):
        raise InvalidInput(f"from {first} to {last} is more than {MAX_DAYS} days: ask for a shorter range")
    report = usage_report(session, tenant.id, first, last)
    return UsageReport(
        **split(report.total).model_dump(),
        first_day=first,
        last_day=last,
        days=[UsagePeriod(period=f"{day}", **split(spent).model_dump()) for day, spent in report.days.items()],
        months=[UsagePeriod(period=month, **split(spent).model_dump()) for month, spent in report.months.items()],
        models=[UsageModel(model=model, **split(spent).model_dump()) for model, spent in sorted(report.models.items())],
        jobs=[UsageJob(job_id=job_id, **split(spent).model_dump()) for job_id, spent in sorted(report.jobs.items())],
    )
