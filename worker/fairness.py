"""Fair shares at the broker: a step of a tenant with few jobs is taken before steps of a tenant with many.

Celery's Redis transport keeps one list per priority and its workers always take from the first non-empty one
(kombu's ``priority_steps``; 0 is taken first). A step is sent with the priority of its tenant's load: the number
of the tenant's unfinished main jobs (queued or running), less one, at most 9. So the 2nd to 30th jobs of a
tenant's burst, and every later step of them, queue behind the single job of another tenant instead of in front
of it; between tenants of the same load the queue is first in, first out. Nothing is starved for long: a job has
at most one step queued, so the steps of lighter tenants that go first are few. The admission line
(worker/admission.py) shares the provider's limit
between tenants the same way, and the cap on running jobs (worker/tenant_cap.py) bounds how many steps a burst
puts in the queue at all. With RabbitMQ (whose priorities count the other way and need a queue declared for
them), every step keeps the default priority: first in, first out.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, ScalarSelect, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased

from models.tables import Job, JobStatus

LOWEST = 9
PRIORITY_STEPS = list(range(LOWEST + 1))  # kombu: one Redis list per priority, taken in this order


def tenant_load(tenant_id: ColumnElement[int] | InstrumentedAttribute[int]) -> ScalarSelect[int]:
    """The number of the tenant's unfinished main jobs, as a subquery (correlated when ``tenant_id`` is a column
    of the outer query's jobs: the inner jobs are an alias of their own)."""
    other = aliased(Job)
    unfinished = select(func.count()).where(
        other.tenant_id == tenant_id,
        other.parent_id.is_(None),
        other.status.in_((JobStatus.QUEUED, JobStatus.RUNNING)),
    )
    return unfinished.scalar_subquery()


def priority_of(load: int | None) -> int:
    """The broker priority of a step of a tenant with ``load`` unfinished main jobs: less one, at most 9."""
    return min(LOWEST, max(0, int(load or 0) - 1))


def step_priority(session: Session, job_id: int) -> int:
    """The broker priority of a step of ``job_id``: its tenant's unfinished main jobs, less one, at most 9."""
    tenant = select(Job.tenant_id).where(Job.id == job_id).scalar_subquery()
    return priority_of(session.scalar(select(tenant_load(tenant))))


def priority_lists(queue: str) -> list[str]:
    """The Redis lists of a queue, first taken first (kombu names them ``<queue>:<priority>`` but for 0)."""
    return [queue if priority == 0 else f"{queue}:{priority}" for priority in PRIORITY_STEPS]
