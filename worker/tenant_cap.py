"""A cap on each tenant's running jobs: a job over it waits queued (not failed) and starts when one of the
tenant's running jobs ends.

The cap is ``PLIMSOLL_MAX_RUNNING_JOBS_PER_TENANT`` unless the tenant has its own (``tenants.max_running_jobs``,
set with ``plimsoll tenant cap``); 0 means no cap. It counts the tenant's main jobs (a subagent is part of its main
job, so it is neither counted nor held back). The count is taken with the tenant's row locked, so two workers
starting two of its jobs at once cannot both take the last place. A job over the cap keeps ``queued`` and a
deadline; the end of one of the tenant's jobs queues the oldest waiting ones at once (``waiting_jobs``), and the
reconciler tries again at the deadline should that enqueue be lost or a job be cancelled through the API.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.settings import Settings
from models.tables import Job, JobStatus, Tenant


def running_cap(tenant: Tenant | None, settings: Settings) -> int:
    """The most main jobs the tenant may run at once (0: no cap)."""
    if tenant is not None and tenant.max_running_jobs is not None:
        return tenant.max_running_jobs
    return settings.max_running_jobs_per_tenant


def _running(session: Session, tenant_id: int) -> int:
    query = select(func.count()).where(
        Job.tenant_id == tenant_id, Job.parent_id.is_(None), Job.status == JobStatus.RUNNING
    )
    return int(session.scalar(query) or 0)


def over_cap(session: Session, job: Job, settings: Settings) -> bool:
    """Whether the queued ``job`` must wait for one of its tenant's running jobs to end. Locks the tenant's row
    until the transaction ends, so that the job's start is counted before another worker counts."""
    if job.parent_id is not None:
        return False
    # FOR NO KEY UPDATE: jobs being created for the tenant meanwhile (which take a key share) are not held up.
    tenant = session.get(Tenant, job.tenant_id, with_for_update={"key_share": True})
    cap = running_cap(tenant, settings)
    return cap > 0 and _running(session, job.tenant_id) >= cap


def waiting_jobs(session: Session, tenant_id: int, settings: Settings) -> list[int]:
    """The tenant's oldest queued main jobs that fit under its cap now, to be queued when a running one ends."""
    cap = running_cap(session.get(Tenant, tenant_id), settings)
    if cap <= 0:
        return []
    free = cap - _running(session, tenant_id)
    if free <= 0:
        return []
    query = (
        select(Job.id)
        .where(
            Job.tenant_id == tenant_id,
            Job.parent_id.is_(None),
            Job.status == JobStatus.QUEUED,
            Job.lease_owner.is_(None),
        )
        .order_by(Job.id)
        .limit(free)
    )
    return list(session.scalars(query))
