"""Events made to happen for the webhooks' tests."""

from __future__ import annotations

from typing import Any

from models.db import Database
from models.events import EventType, record
from models.jobs import create_job


def happen(database: Database, tenant_id: int, kind: EventType, data: dict[str, Any]) -> tuple[int, int]:
    """A job of the tenant, and an event of it recorded in the job's own transaction: (job, event)."""
    with database.session() as session:
        job = create_job(session, tenant_id=tenant_id, instruction="Read.")
        session.flush()
        event = record(session, job, kind, data)
        return job.id, event.id
