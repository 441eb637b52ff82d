"""A tenant's main job with a subagent, charged over two months in the ledger, beside another tenant's: what the
tests of the ledger's views read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from models.db import Database
from models.documents import add_document
from models.jobs import create_job
from models.ledger import ChargeKind, record_charge
from models.pricing import prices_of
from models.settings import Settings
from models.tables import Job, JobKind
from models.tenants import create_tenant

Family = tuple[int, str, int, int, dict[str, Decimal]]  # tenant, its key, main job, subagent, USD by part

TODAY = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
EARLIER = TODAY - timedelta(days=40)  # another month


def charge(database: Database, job_id: int, kind: ChargeKind, tokens: int, at: datetime) -> Decimal:
    settings = Settings()
    with database.session() as session:
        job = session.get_one(Job, job_id)
        made = record_charge(
            session,
            job,
            step=job.step,
            kind=kind,
            prices=prices_of(job.model, settings),
            uncached=0 if kind == ChargeKind.REFUSED else tokens,
            written=0,
            read=0 if kind == ChargeKind.REFUSED else tokens * 3,
            output=0 if kind == ChargeKind.REFUSED else tokens // 10,
            cache_ttl_seconds=settings.cache_ttl_seconds,
        )
        made.created_at = at
        session.flush()
        return made.total_usd


@pytest.fixture
def family(database: Database) -> Iterator[Family]:
    """A tenant's main job with one subagent, charged over two months; another tenant's job charged too."""
    spent: dict[str, Decimal] = {}
    with database.session() as session:
        tenant, key = create_tenant(session, name=f"ledger-{uuid.uuid4().hex[:8]}")
        other, _ = create_tenant(session, name=f"other-{uuid.uuid4().hex[:8]}")
        ids = []
        for owner in (tenant, other):
            document = add_document(session, tenant_id=owner.id, name="a.txt", content="Alpha.")
            ids.append(create_job(session, tenant_id=owner.id, instruction="Read.", document_ids=[document.id]).id)
        main = session.get_one(Job, ids[0])
        sub = create_job(
            session,
            tenant_id=tenant.id,
            instruction="Read a.txt.",
            document_ids=[main.documents[0].document_id],
            kind=JobKind.SUBAGENT,
            parent=main,
        ).id
        tenant_id = tenant.id
    spent["main"] = charge(database, ids[0], ChargeKind.STEP, 2_000, TODAY) + charge(
        database, ids[0], ChargeKind.COMPACTION, 1_000, TODAY
    )
    spent["earlier"] = charge(database, ids[0], ChargeKind.STEP, 500, EARLIER)
    spent["sub"] = charge(database, sub, ChargeKind.STEP, 3_000, TODAY) + charge(
        database, sub, ChargeKind.WASTED, 3_000, TODAY
    )
    spent["refused"] = charge(database, sub, ChargeKind.REFUSED, 0, TODAY)
    spent["other"] = charge(database, ids[1], ChargeKind.STEP, 9_000, TODAY)
    yield tenant_id, key, ids[0], sub, spent
