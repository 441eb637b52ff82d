"""Reads the API needs beyond ``models``: pages of a tenant's objects, and what a job has read so far.
Every function is scoped to a tenant or to a job already checked to be the tenant's."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TypeVar

from sqlalchemy import Select, Text, cast, func, select
from sqlalchemy.orm import Session

from models.errors import NotFound
from models.packing import StoredRow, stored_rows
from models.tables import Document, Job, JobStatus, Message, Notice, Step

Row = TypeVar("Row")


def page_of(session: Session, query: Select[Row], *, offset: int, limit: int) -> tuple[list[Row], int]:
    """One page of ``query``'s rows and the number of rows in all."""
    total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
    return list(session.scalars(query.offset(offset).limit(limit))), total


def documents_query(*, tenant_id: int) -> Select[Document]:
    return select(Document).where(Document.tenant_id == tenant_id).order_by(Document.id.desc())


def document_of(session: Session, *, tenant_id: int, document_id: int) -> Document:
    document = session.get(Document, document_id)
    if document is None or document.tenant_id != tenant_id:
        raise NotFound(f"no document with id {document_id}")
    return document


def jobs_query(*, tenant_id: int, kind: str | None = None, status: JobStatus | None = None) -> Select[Job]:
    query = select(Job).where(Job.tenant_id == tenant_id).order_by(Job.id.desc())
    if kind is not None:
        query = query.where(Job.kind == kind)
    return query if status is None else query.where(Job.status == status)


def locked_job_of(session: Session, *, tenant_id: int, job_id: int) -> Job:
    """The tenant's job, its row locked until the transaction ends, its attributes read afresh.

    The lock is FOR NO KEY UPDATE (``key_share``), what PostgreSQL's own UPDATE of a non-key column takes: a worker
    that stores a row referring to this job (a subagent finishing) is not held up by it, so it cannot deadlock
    with this transaction waiting for that worker's subagent."""
    query = select(Job).where(Job.id == job_id, Job.tenant_id == tenant_id).with_for_update(key_share=True)
    job = session.scalars(query.execution_options(populate_existing=True)).one_or_none()
    if job is None:
        raise NotFound(f"no job with id {job_id}")
    return job


def messages_page(
    session: Session, *, job_id: int, offset: int, limit: int, max_bytes: int
) -> tuple[list[StoredRow], int]:
    """A page of the job's messages: at most ``limit``, and no more than ``max_bytes`` of content (but at least one
    message), its sizes read before any body; with the number of messages in all. An ended job's history may be
    packed (models/packing.py), or packed while the page is read: then the page is read from its pack."""
    content = cast(Message.content, Text)
    size = func.octet_length(content) if session.get_bind().dialect.name == "postgresql" else func.length(content)
    ordered = select(Message.seq, size).where(Message.job_id == job_id).order_by(Message.seq)
    seqs = _within(session.execute(ordered.offset(offset).limit(limit)).all(), max_bytes)
    total = session.scalar(select(func.count()).where(Message.job_id == job_id)) or 0
    rows = stored_rows(session, [job_id], seqs=seqs) if seqs else []
    if total and len(rows) == len(seqs):
        return sorted(rows, key=lambda row: row.seq), total
    packed = sorted(stored_rows(session, [job_id]), key=lambda row: row.seq)
    window = packed[offset : offset + limit]
    sizes = [(row.seq, len(json.dumps(row.content, ensure_ascii=False).encode())) for row in window]
    chosen = set(_within(sizes, max_bytes))
    return [row for row in window if row.seq in chosen], len(packed)


def _within(sizes: Iterable[tuple[int, int | None]], max_bytes: int) -> list[int]:
    """The first seqs whose sizes add up to ``max_bytes`` or less (at least one)."""
    seqs: list[int] = []
    used = 0
    for seq, length in sizes:
        if seqs and used + (length or 0) > max_bytes:
            break
        seqs.append(seq)
        used += length or 0
    return seqs


def steps_query(*, job_id: int) -> Select[Step]:
    return select(Step).where(Step.job_id == job_id).order_by(Step.step)


def notices_query(*, tenant_id: int, unread_only: bool = False, job_id: int | None = None) -> Select[Notice]:
    query = select(Notice).where(Notice.tenant_id == tenant_id).order_by(Notice.id.desc())
    if unread_only:
        query = query.where(Notice.read_at.is_(None))
    return query if job_id is None else query.where(Notice.job_id == job_id)


def notice_of(session: Session, *, tenant_id: int, notice_id: int) -> Notice:
    notice = session.get(Notice, notice_id)
    if notice is None or notice.tenant_id != tenant_id:
        raise NotFound(f"no notice with id {notice_id}")
    return notice
