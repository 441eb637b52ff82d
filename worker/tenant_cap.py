"""A cap on each tenant's running jobs: a job over it waits (queued, not failed) and starts when one of the
tenant's running jobs ends.

The cap is ``PLIMSOLL_MAX_RUNNING_JOBS_PER_TENANT`` unless the tenant has its own (``tenants.max_running_jobs``,
set with ``plimsoll tenant cap``); 0 means no cap. It counts the tenant's main jobs (a subagent is part of its main
job, so it is neither counted nor held back).

A job waiting for its place holds no message in the broker and no deadline: it is *parked* (queued, no lease
owner, no deadline), so nothing delivers it again and again while it waits. A new job takes a place when its first
step is queued (``take_place``: the tenant's running jobs and the queued ones holding a place, counted with the
tenant's row locked) or parks. The end of one of the tenant's jobs gives the place to the oldest parked ones
(``unpark``), and so does every reconciler round (worker/lease.py), should that end's enqueue be lost or a job be
cancelled through the API. A step claimed over the cap all the same (a job queued before this rule, or by hand)
parks too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from models.db import Database
from models.settings import Settings
from models.tables import Job, JobStatus, Tenant, now

logger = logging.getLogger(__name__)


def running_cap(tenant: Tenant | None, settings: Settings) -> int:
    """The most main jobs the tenant may run at once (0: no cap)."""
    if tenant is not None and tenant.max_running_jobs is not None:
        return tenant.max_running_jobs
    return settings.max_running_jobs_per_tenant


def parked() -> ColumnElement[bool]:
    """Jobs waiting for a place under their tenant's cap: queued main jobs with no lease owner and no deadline."""
    return and_(
        Job.status == JobStatus.QUEUED,
        Job.parent_id.is_(None),
        Job.lease_owner.is_(None),
        Job.lease_until.is_(None),
    )


def park(job: Job) -> None:
    job.lease_owner, job.lease_until = None, None


def _locked_cap(session: Session, tenant_id: int, settings: Settings) -> int:
    # FOR NO KEY UPDATE: jobs being created for the tenant meanwhile (which take a key share) are not held up.
    return running_cap(session.get(Tenant, tenant_id, with_for_update={"key_share": True}), settings)


def _running(session: Session, tenant_id: int) -> int:
    query = select(func.count()).where(
        Job.tenant_id == tenant_id, Job.parent_id.is_(None), Job.status == JobStatus.RUNNING
    )
    return int(session.scalar(query) or 0)


def _holding_places(session: Session, tenant_id: int, *, before: int | None = None) -> int:
    """The tenant's main jobs running, or queued and not parked (their first step is on its way); of the queued,
    only those created ``before`` the given job, if one is given (the newer ones wait for their own decision)."""
    queued = and_(Job.status == JobStatus.QUEUED, Job.lease_until.is_not(None))
    if before is not None:
        queued = and_(queued, Job.id < before)
    holding = or_(Job.status == JobStatus.RUNNING, queued)
    query = select(func.count()).where(Job.tenant_id == tenant_id, Job.parent_id.is_(None), holding)
    return int(session.scalar(query) or 0)


def take_place(session: Session, job_id: int, settings: Settings) -> bool:
    """Whether the new job ``job_id`` may have its first step queued now; if not, it is parked. Locks the tenant's
    row until the transaction ends, so that two jobs cannot both take the last place; jobs created at the same
    moment and decided out of order may start one beyond the cap, which the check at the claim (``over_cap``)
    parks again."""
    job = session.get(Job, job_id)
    if job is None or job.parent_id is not None or job.status != JobStatus.QUEUED or job.lease_owner is not None:
        return True  # not a main job waiting to start: nothing to decide here
    cap = _locked_cap(session, job.tenant_id, settings)
    if cap <= 0 or _holding_places(session, job.tenant_id, before=job.id) < cap:
        return True
    park(job)
    return False


def over_cap(session: Session, job: Job, settings: Settings) -> bool:
    """Whether the queued ``job`` must wait for one of its tenant's running jobs to end. Locks the tenant's row
    until the transaction ends, so that the job's start is counted before another worker counts."""
    if job.parent_id is not None:
        return False
    cap = _locked_cap(session, job.tenant_id, settings)
    return cap > 0 and _running(session, job.tenant_id) >= cap


def unpark(session: Session, tenant_id: int, settings: Settings) -> list[int]:
    """Give the places free under the tenant's cap to its oldest parked jobs, each with a deadline from now on as
    a newly queued job has; their ids, whose first steps are to be queued once the transaction commits."""
    cap = _locked_cap(session, tenant_id, settings)
    free = cap - _holding_places(session, tenant_id) if cap > 0 else None
    if free is not None and free <= 0:
        return []
    query = select(Job).where(Job.tenant_id == tenant_id, parked()).order_by(Job.id).limit(free)
    jobs = list(session.scalars(query))
    for job in jobs:
        job.lease_until = now() + timedelta(seconds=settings.lease_seconds)
    return [job.id for job in jobs]


def start_parked(database: Database, settings: Settings, enqueue: Callable[[int, int], None]) -> list[int]:
    """Give every tenant's free places to its parked jobs and queue their first steps; the jobs started. Run by
    every reconciler round: a job that ended without waking them (cancelled through the API, an enqueue lost),
    or a cap raised."""
    with database.session() as session:
        tenants = list(session.scalars(select(Job.tenant_id).where(parked()).distinct()))
    started: list[int] = []
    for tenant_id in tenants:
        with database.session() as session:
            started += unpark(session, tenant_id, settings)
    for job_id in started:
        try:
            enqueue(job_id, 0)
        except Exception as error:  # they have a deadline now: the reconciler queues them when it passes
            logger.warning("job %s: its first step not queued (%s)", job_id, type(error).__name__)
    return started
