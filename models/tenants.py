"""Tenants and their API keys. A key is shown once when created; only its sha256 is stored."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from models.errors import InvalidInput, NotFound
from models.integers import MAX_ID, MAX_INPUT_TOKENS, MAX_INT, MAX_STEPS, MIN_INPUT_TOKENS
from models.tables import ApiKey, Tenant, now

KEY_PREFIX = "pls_"
MAX_RETENTION_DAYS = 36_500  # a hundred years: a date the database can still add to now
# The operator's limits a tenant may have of its own (each None: the setting's; models/limits.py): the least and the
# most each may be.
LIMITS = {
    "max_steps_per_job": (1, MAX_STEPS),
    "max_input_tokens_per_job": (MIN_INPUT_TOKENS, MAX_INPUT_TOKENS),
    "max_queued_jobs": (0, MAX_INT),  # 0: none
    "max_document_bytes": (0, MAX_ID),  # 0: none
    "retention_days": (0, MAX_RETENTION_DAYS),  # 0: kept for ever
}
# Its money limits, in USD: a job's ceiling (and default), and its budgets per UTC day and month (0: none).
MONEY_LIMITS = {
    "max_cost_usd_per_job": (Decimal("0.000001"), Decimal(10**9)),
    "daily_usd": (Decimal(0), Decimal(10**9)),
    "monthly_usd": (Decimal(0), Decimal(10**9)),
}


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_tenant(session: Session, *, name: str) -> tuple[Tenant, str]:
    """A new tenant and its first API key (the key itself: it cannot be recovered later)."""
    name = name.strip()
    if not name:
        raise InvalidInput("a tenant needs a name")
    if session.scalar(select(Tenant).where(Tenant.name == name)) is not None:
        raise InvalidInput(f"a tenant named {name!r} exists already")
    tenant = Tenant(name=name)
    session.add(tenant)
    session.flush()
    return tenant, issue_key(session, tenant_id=tenant.id)


def issue_key(session: Session, *, tenant_id: int, label: str = "") -> str:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(tenant_id=tenant_id, key_hash=hash_key(key), label=label))
    session.flush()
    return key


def tenant_for_key(session: Session, key: str) -> Tenant | None:
    api_key = session.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None)))
    return None if api_key is None else session.get(Tenant, api_key.tenant_id)


@dataclass(frozen=True)
class TenantRow:
    id: int
    name: str
    created_at: datetime
    active_keys: int
    revoked_keys: int
    max_running_jobs: int | None  # its own cap on running jobs (None: the setting's)
    # its own limits (None: the setting's; models/limits.py)
    max_steps_per_job: int | None
    max_input_tokens_per_job: int | None
    max_queued_jobs: int | None
    max_document_bytes: int | None
    retention_days: int | None


def tenants(session: Session) -> list[TenantRow]:
    """Every tenant with how many of its keys work and how many are revoked, in the order created."""
    active = func.count(ApiKey.id).filter(ApiKey.revoked_at.is_(None))
    revoked = func.count(ApiKey.id).filter(ApiKey.revoked_at.is_not(None))
    query = (
        select(
            Tenant.id,
            Tenant.name,
            Tenant.created_at,
            active,
            revoked,
            Tenant.max_running_jobs,
            *(getattr(Tenant, name) for name in LIMITS),
        )
        .outerjoin(ApiKey, ApiKey.tenant_id == Tenant.id)
        .group_by(Tenant.id)
        .order_by(Tenant.id)
    )
    return [TenantRow(*row) for row in session.execute(query)]


def tenant_named(session: Session, name: str) -> Tenant:
    tenant = session.scalar(select(Tenant).where(Tenant.name == name.strip()))
    if tenant is None:
        raise NotFound(f"no tenant named {name!r}")
    return tenant


def revoke_keys(session: Session, *, tenant_id: int) -> int:
    """Revoke every working key of the tenant (its requests answer 401 from now on); how many were revoked."""
    revoked = session.execute(
        update(ApiKey).where(ApiKey.tenant_id == tenant_id, ApiKey.revoked_at.is_(None)).values(revoked_at=now())
    )
    return int(revoked.rowcount)  # type: ignore[attr-defined]


def rotate_key(session: Session, *, tenant_id: int, keep_old: bool = False) -> str:
    """A new key for the tenant; the old ones are revoked unless ``keep_old`` (to switch clients over first)."""
    if not keep_old:
        revoke_keys(session, tenant_id=tenant_id)
    return issue_key(session, tenant_id=tenant_id, label="rotated")


def set_running_cap(session: Session, *, tenant_id: int, cap: int | None) -> None:
    """The most main jobs the tenant may run at once (0: no cap; None: the setting's,
    PLIMSOLL_MAX_RUNNING_JOBS_PER_TENANT); jobs beyond it wait queued."""
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
        raise InvalidInput(f"a tenant's cap on running jobs is a whole number of 0 or more (0: no cap), not {cap!r}")
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise NotFound(f"no tenant {tenant_id}")
    tenant.max_running_jobs = cap


def set_limits(session: Session, *, tenant_id: int, limits: dict[str, int | Decimal | None]) -> None:
    """The tenant's own limits, by name (``LIMITS``, ``MONEY_LIMITS``; None: back to the setting's); those not
    named are kept."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise NotFound(f"no tenant {tenant_id}")
    for name, value in limits.items():
        bounds = LIMITS.get(name) or MONEY_LIMITS.get(name)
        if bounds is None:
            raise InvalidInput(f"unknown limit {name!r}; known: {', '.join([*LIMITS, *MONEY_LIMITS])}")
        least, most = bounds
        if value is not None and not least <= value <= most:
            raise InvalidInput(f"{name} must be between {least:,} and {most:,}, not {value:,}")
        setattr(tenant, name, value)
