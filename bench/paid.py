"""What a benchmark's run was billed, from the ledger: in all, and the paid replies that were thrown away
(``wasted``: a step run twice, a reply lost in a database outage), so that each report says how much paid work
its faults cost."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import func, select

from models.db import Database
from models.ledger import ChargeKind
from models.tables import Charge


@dataclass(frozen=True)
class Paid:
    total_usd: Decimal
    wasted_usd: Decimal
    requests: int
    wasted_requests: int

    def __str__(self) -> str:
        share = self.wasted_usd / self.total_usd if self.total_usd else Decimal(0)
        return (
            f"{self.total_usd:.4f} USD for {self.requests:,} requests; thrown away {self.wasted_usd:.4f} USD "
            f"({share:.1%}) in {self.wasted_requests:,} replies"
        )


def paid(database: Database, main_jobs: Collection[int] | None = None) -> Paid:
    """The charges of ``main_jobs`` (and their subagents), or of every job in the database."""
    query = select(Charge.kind, func.coalesce(func.sum(Charge.total_usd), 0), func.count()).group_by(Charge.kind)
    if main_jobs is not None:
        query = query.where(Charge.main_job_id.in_(main_jobs))
    with database.session() as session:
        rows = [(kind, Decimal(total), int(n)) for kind, total, n in session.execute(query)]
    billed = [(kind, total, n) for kind, total, n in rows if kind != ChargeKind.REFUSED]
    wasted = [(total, n) for kind, total, n in billed if kind == ChargeKind.WASTED]
    return Paid(
        total_usd=sum((total for _, total, _ in billed), Decimal(0)),
        wasted_usd=sum((total for total, _ in wasted), Decimal(0)),
        requests=sum(n for _, _, n in billed),
        wasted_requests=sum(n for _, n in wasted),
    )
