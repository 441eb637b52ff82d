"""The ledger: what each request cost as its provider billed it (``Charge``), by kind, and what jobs and tenants
have spent. A request billed once is one charge, whatever Celery redelivers; a request billed twice is two, the
second of them waste."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.costs import cost_of
from models.pricing import Prices
from models.tables import Charge, Job


class ChargeKind(enum.StrEnum):
    STEP = "step"  # a step's request whose reply the job used
    COMPACTION = "compaction"  # a request that wrote a summary of the history
    REPLAN = "replan"  # a request sent again, planned anew, after the provider rejected it as too long
    WASTED = "wasted"  # a reply paid for and not used: a step run twice, a reply lost in an outage
    REFUSED = "refused"  # a 429 or a refusal: billed nothing


class Payer(Protocol):
    """What a charge takes from its job: a ``Job``, or a row of these columns."""

    @property
    def id(self) -> int: ...
    @property
    def tenant_id(self) -> int: ...
    @property
    def parent_id(self) -> int | None: ...
    @property
    def model(self) -> str: ...


def record_charge(
    session: Session,
    job: Payer,
    *,
    step: int,
    kind: ChargeKind,
    prices: Prices,
    uncached: int,
    written: int,
    read: int,
    output: int,
    cache_ttl_seconds: float,
    delivery: str | None = None,
    request_id: str | None = None,
) -> Charge:
    cost = cost_of(
        prices, uncached=uncached, written=written, read=read, output=output, cache_ttl_seconds=cache_ttl_seconds
    )
    rates = prices.rates_for(uncached + written + read)
    charge = Charge(
        tenant_id=job.tenant_id,
        job_id=job.id,
        main_job_id=job.parent_id if job.parent_id is not None else job.id,
        step=step,
        kind=kind.value,
        model=job.model,
        prices={
            "priced_as": prices.priced_as,
            "source": prices.source,
            "usd_per_mtok": {name: str(value) for name, value in vars(rates).items()},
        },
        uncached_tokens=uncached,
        cache_write_tokens=written,
        cache_read_tokens=read,
        output_tokens=output,
        uncached_usd=cost.uncached,
        cache_write_usd=cost.cache_write,
        cache_read_usd=cost.cache_read,
        output_usd=cost.output,
        total_usd=cost.total,
        delivery=delivery,
        request_id=request_id,
    )
    session.add(charge)
    return charge


def spent_by_main_job(session: Session, main_job_id: int) -> Decimal:
    """USD a main job and its subagents have been billed, waste included."""
    total = session.scalar(select(func.sum(Charge.total_usd)).where(Charge.main_job_id == main_job_id))
    return Decimal(total or 0)


def spent_by_jobs(session: Session, jobs: Iterable[Job]) -> dict[int, Decimal]:
    """USD each job cost: a main job with its subagents, a subagent its own requests."""
    jobs = list(jobs)
    mains = [j.id for j in jobs if j.parent_id is None]
    parts = [j.id for j in jobs if j.parent_id is not None]
    spent: dict[int, Decimal] = {j.id: Decimal(0) for j in jobs}
    for column, ids in ((Charge.main_job_id, mains), (Charge.job_id, parts)):
        if ids:
            rows = session.execute(select(column, func.sum(Charge.total_usd)).where(column.in_(ids)).group_by(column))
            spent.update({job_id: Decimal(total) for job_id, total in rows})
    return spent


@dataclass
class Spent:
    """USD billed, split as a provider bills it and by kind, over some charges."""

    uncached: Decimal = Decimal(0)
    cache_write: Decimal = Decimal(0)
    cache_read: Decimal = Decimal(0)
    output: Decimal = Decimal(0)
    requests: int = 0
    by_kind: dict[str, Decimal] = field(default_factory=dict)

    @property
    def total(self) -> Decimal:
        return self.uncached + self.cache_write + self.cache_read + self.output

    def add(self, charge: Charge) -> None:
        self.uncached += charge.uncached_usd
        self.cache_write += charge.cache_write_usd
        self.cache_read += charge.cache_read_usd
        self.output += charge.output_usd
        self.requests += charge.kind != ChargeKind.REFUSED
        self.by_kind[charge.kind] = self.by_kind.get(charge.kind, Decimal(0)) + charge.total_usd


def job_spending(session: Session, job: Job) -> tuple[Spent, dict[int, Spent]]:
    """What a job cost: a main job with its subagents, and each one's own line (the main job's first); a
    subagent, its own requests only (and no lines)."""
    if job.parent_id is not None:
        return _spent(session.scalars(select(Charge).where(Charge.job_id == job.id))), {}
    total, lines = Spent(), {job.id: Spent()}
    for charge in session.scalars(select(Charge).where(Charge.main_job_id == job.id).order_by(Charge.id)):
        total.add(charge)
        lines.setdefault(charge.job_id, Spent()).add(charge)
    return total, lines


@dataclass
class UsageReport:
    """A tenant's spending over a range of days (UTC), in all, by day, by month, by model and by main job."""

    total: Spent = field(default_factory=Spent)
    days: dict[date, Spent] = field(default_factory=dict)
    months: dict[str, Spent] = field(default_factory=dict)  # "2026-12"
    models: dict[str, Spent] = field(default_factory=dict)
    jobs: dict[int, Spent] = field(default_factory=dict)  # by main job


def usage_report(session: Session, tenant_id: int, first: date, last: date) -> UsageReport:
    """The tenant's charges from day ``first`` through day ``last`` (UTC), gathered."""
    start = datetime.combine(first, time(), UTC)
    end = datetime.combine(last + timedelta(days=1), time(), UTC)
    charges = session.scalars(
        select(Charge)
        .where(Charge.tenant_id == tenant_id, Charge.created_at >= start, Charge.created_at < end)
        .order_by(Charge.created_at, Charge.id)
    )
    report = UsageReport()
    for charge in charges:
        at = charge.created_at if charge.created_at.tzinfo else charge.created_at.replace(tzinfo=UTC)  # SQLite
        day = at.astimezone(UTC).date()
        for spent in (
            report.total,
            report.days.setdefault(day, Spent()),
            report.months.setdefault(f"{day:%Y-%m}", Spent()),
            report.models.setdefault(charge.model, Spent()),
            report.jobs.setdefault(charge.main_job_id, Spent()),
        ):
            spent.add(charge)
    return report


def _spent(charges: Iterable[Charge]) -> Spent:
    spent = Spent()
    for charge in charges:
        spent.add(charge)
    return spent
