"""The stored side of idempotency keys: a tenant's key is claimed by the first request that sends it, answered
once that request has its answer, or released when it failed on our side (api/idempotency.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Insert, and_, delete, or_, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from models.tables import IdempotencyKey, now

ABANDONED_AFTER = timedelta(minutes=10)
"""A key still without an answer after this long belongs to a request whose API process died: it is taken over."""

CLEANED_PER_CLAIM = 100
"""Expired keys deleted by each claim at most: the table stays bounded without any claim paying for a backlog."""


def claim_key(
    session: Session, *, tenant_id: int, key: str, fingerprint: str, kept_for: timedelta
) -> IdempotencyKey | None:
    """None if the caller now holds the key (it was free, expired, or abandoned); else the key as another request
    left it: answered (``status_code`` set) or still in progress. Commits: the claim is seen by every API process
    at once, and a concurrent claim of the same key waits only for this short transaction."""
    at = now()
    _forget_expired(session, before=at - kept_for)
    found = (tenant_id, key)
    session.execute(
        delete(IdempotencyKey).where(
            tuple_(IdempotencyKey.tenant_id, IdempotencyKey.key) == found,
            or_(
                IdempotencyKey.created_at < at - kept_for,
                and_(IdempotencyKey.status_code.is_(None), IdempotencyKey.created_at < at - ABANDONED_AFTER),
            ),
        )
    )
    row = {"tenant_id": tenant_id, "key": key, "fingerprint": fingerprint, "created_at": at}
    claimed = session.execute(_insert_if_absent(session, row).returning(IdempotencyKey.key)).first()
    existing = None if claimed else session.get(IdempotencyKey, found)
    session.commit()
    return existing


def answer_key(
    session: Session, *, tenant_id: int, key: str, status_code: int, content_type: str | None, body: bytes
) -> None:
    """Keep the answer of the request that holds the key, for its retries, in the caller's transaction (with the
    change it answers, where there is one). An answer kept already stays."""
    session.execute(
        update(IdempotencyKey)
        .where(IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key, IdempotencyKey.status_code.is_(None))
        .values(status_code=status_code, content_type=content_type, body=body)
    )


def release_key(session: Session, *, tenant_id: int, key: str) -> None:
    """Free the key of a request that failed on our side: its retry runs again."""
    session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key, IdempotencyKey.status_code.is_(None)
        )
    )
    session.commit()


def _forget_expired(session: Session, *, before: datetime) -> None:
    oldest = (
        select(IdempotencyKey.tenant_id, IdempotencyKey.key)
        .where(IdempotencyKey.created_at < before)
        .order_by(IdempotencyKey.created_at)
        .limit(CLEANED_PER_CLAIM)
        .with_for_update(skip_locked=True)  # claims cleaning at once take different rows, never wait on each other
    )
    session.execute(
        delete(IdempotencyKey).where(
            tuple_(IdempotencyKey.tenant_id, IdempotencyKey.key).in_(oldest), IdempotencyKey.created_at < before
        )
    )


def _insert_if_absent(session: Session, row: dict[str, object]) -> Insert:
    """INSERT ... ON CONFLICT DO NOTHING, which both PostgreSQL and SQLite speak: of two concurrent claims of one
    key, exactly one inserts; the other waits for it to commit and inserts nothing."""
    conflict = ["tenant_id", "key"]
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(IdempotencyKey).values(row).on_conflict_do_nothing(index_elements=conflict)
    return sqlite.insert(IdempotencyKey).values(row).on_conflict_do_nothing(index_elements=conflict)
