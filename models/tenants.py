"""Tenants and their API keys. A key is shown once when created; only its sha256 is stored."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.errors import InvalidInput
from models.tables import ApiKey, Tenant

KEY_PREFIX = "pls_"


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
