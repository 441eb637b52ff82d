"""The ledger: what each request cost as its provider billed it (``Charge``), by kind, and what jobs and tenants
have spent. A request billed once is one charge, whatever Celery redelivers; a request billed twice is two, the
second of them waste."""

from __future__ import annotations

import enum
from decimal import Decimal

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


def record_charge(
    session: Session,
    job: Job,
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
