"""The operator's limits on what a tenant asks for: a job's ceilings of steps and input tokens (its defaults too),
the options only the operator may allow, the tenant's quotas of queued jobs and stored bytes, and how long its
ended jobs keep their histories (models/retention.py).

Each limit is the setting's unless the tenant has its own (``plimsoll tenant limits``); a refusal names the limit
and where it is set, so the person knows whom to ask."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from models.errors import InvalidInput
from models.options import JobOptions
from models.settings import Settings
from models.statuses import Strategy
from models.tables import Document, Job, JobStatus, Tenant

QUOTA_LOCK = 0x504C4D  # the advisory locks' namespace: one lock per tenant while its quotas are counted


class OverQuota(Exception):
    """The tenant has used up a quota: nothing was stored (the API answers 429)."""


@dataclass(frozen=True)
class Limit:
    value: int
    where: str  # where it is set: a setting's variable, or the tenant's own command


@dataclass(frozen=True)
class Money:
    value: Decimal  # USD (0: no budget, where that is allowed)
    where: str


@dataclass(frozen=True)
class TenantLimits:
    max_steps: Limit
    max_input_tokens: Limit
    max_queued_jobs: Limit  # 0: none
    max_document_bytes: Limit  # 0: none
    max_cost_usd_per_job: Money
    daily_usd: Money  # 0: none
    monthly_usd: Money  # 0: none
    retention_days: Limit  # 0: histories kept for ever


def tenant_limits(session: Session, tenant_id: int, settings: Settings) -> TenantLimits:
    return limits_of(session.get(Tenant, tenant_id), settings)


def limits_of(tenant: Tenant | None, settings: Settings) -> TenantLimits:
    def where(own: object, setting: str, option: str) -> str:
        if own is not None:
            return f"the operator's limit for this tenant: plimsoll tenant limits --{option}"
        return f"the operator's setting PLIMSOLL_{setting.upper()}"

    def limit(own: int | None, setting: str, option: str) -> Limit:
        return Limit(getattr(settings, setting) if own is None else own, where(own, setting, option))

    def money(own: Decimal | None, setting: str, option: str) -> Money:
        return Money(Decimal(getattr(settings, setting) if own is None else own), where(own, setting, option))

    own = tenant or Tenant()
    return TenantLimits(
        limit(own.max_steps_per_job, "max_steps_per_job", "max-steps"),
        limit(own.max_input_tokens_per_job, "max_input_tokens_per_job", "max-input-tokens"),
        limit(own.max_queued_jobs, "max_queued_jobs_per_tenant", "max-queued-jobs"),
        limit(own.max_document_bytes, "max_document_bytes_per_tenant", "max-document-bytes"),
        money(own.max_cost_usd_per_job, "max_cost_usd_per_job", "max-cost-usd"),
        money(own.daily_usd, "daily_usd_per_tenant", "daily-usd"),
        money(own.monthly_usd, "monthly_usd_per_tenant", "monthly-usd"),
        limit(own.retention_days, "retention_days", "retention-days"),
    )


@dataclass(frozen=True)
class JobLimits:
    max_steps: int
    max_input_tokens: int
    max_cost_usd: Decimal


def job_limits(options: JobOptions, limits: TenantLimits) -> JobLimits:
    """The limits of a new job: those asked for, at most the ceilings; the ceilings if not."""
    for asked, ceiling, name in (
        (options.max_steps, limits.max_steps, "max_steps"),
        (options.max_input_tokens, limits.max_input_tokens, "max_input_tokens"),
    ):
        if asked is not None and asked > ceiling.value:
            raise InvalidInput(
                f"{name} {asked:,} is over the ceiling of {ceiling.value:,} ({ceiling.where}); ask for at most that"
            )
    money = limits.max_cost_usd_per_job
    if options.max_cost_usd is not None and options.max_cost_usd > money.value:
        raise InvalidInput(
            f"max_cost_usd {options.max_cost_usd} is over the ceiling of {money.value} USD ({money.where}); ask "
            "for at most that"
        )
    return JobLimits(
        limits.max_steps.value if options.max_steps is None else options.max_steps,
        limits.max_input_tokens.value if options.max_input_tokens is None else options.max_input_tokens,
        money.value if options.max_cost_usd is None else options.max_cost_usd,
    )


def check_reproduction(strategy: Strategy, options: JobOptions, settings: Settings) -> None:
    """The strategies that reproduce old failures, and a job without the safety net, are the operator's to allow."""
    if settings.allow_reproductions:
        return
    asked = [f"strategy={strategy}"] if strategy != Strategy.PLIMSOLL else []
    asked += [] if options.safety_net else ["safety_net=false"]
    asked += [] if options.wind_down else ["wind_down=false"]
    if asked:
        raise InvalidInput(
            f"{' and '.join(asked)} reproduce old failures, for benchmarks: this service does not allow them "
            "(the operator's setting PLIMSOLL_ALLOW_REPRODUCTIONS)"
        )


def lock_quotas(session: Session, tenant_id: int) -> None:
    """Until the transaction ends, no other one counts the tenant's quotas: two requests cannot both take the
    last place. (SQLite writes one transaction at a time anyway.)"""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(:space, :key)"), {"space": QUOTA_LOCK, "key": tenant_id % 2**31}
        )


def check_queued_quota(session: Session, tenant_id: int, limits: TenantLimits) -> None:
    quota = limits.max_queued_jobs
    if quota.value == 0:
        return
    queued = session.scalar(
        select(func.count()).where(Job.tenant_id == tenant_id, Job.parent_id.is_(None), Job.status == JobStatus.QUEUED)
    )
    if (queued or 0) >= quota.value:
        raise OverQuota(
            f"this tenant has {queued:,} jobs queued, its quota of {quota.value:,} ({quota.where}): submit more once "
            "some have started, or cancel some"
        )


def check_storage_quota(session: Session, tenant_id: int, adding: int, limits: TenantLimits) -> None:
    """``adding`` more bytes of documents fit in the tenant's storage quota."""
    quota = limits.max_document_bytes
    if quota.value == 0:
        return
    total = select(func.coalesce(func.sum(Document.bytes), 0)).where(Document.tenant_id == tenant_id)
    stored = int(session.scalar(total) or 0)
    if stored + adding > quota.value:
        raise OverQuota(
            f"this tenant's documents take {stored:,} bytes; {adding:,} more would pass its quota of "
            f"{quota.value:,} bytes ({quota.where}): delete documents it no longer needs (DELETE /v1/documents/ID, "
            "plimsoll documents delete)"
        )
