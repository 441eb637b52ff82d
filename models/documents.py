"""Documents a tenant uploads for its jobs to read."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.errors import Conflict, InvalidInput, NotFound
from models.limits import check_storage_quota, lock_quotas, tenant_limits
from models.pages import keep_pages_of
from models.settings import get_settings
from models.statuses import UNFINISHED
from models.tables import Document, Job, JobDocument
from plimsoll import estimate_tokens

MAX_NAME_CHARS = 255


def check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"a document name must have 1 to {MAX_NAME_CHARS} characters")
    if any(ch in name for ch in "`\n\r\t\x00"):
        raise InvalidInput("a document name may not contain backticks, tabs, line breaks or NUL")
    return name


@dataclass(frozen=True)
class Stored:
    document: Document
    reused: bool  # the same text under the same name was stored already: that document is answered


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def add_document(session: Session, *, tenant_id: int, name: str, content: str) -> Document:
    return store_document(session, tenant_id=tenant_id, name=name, content=content).document


def store_document(session: Session, *, tenant_id: int, name: str, content: str) -> Stored:
    """The tenant's document with this name and text: the one stored already, or a new one."""
    settings = get_settings()
    limit = settings.max_document_chars
    if not content.strip():
        raise InvalidInput(f"document {name!r} is empty")
    if len(content) > limit:
        raise InvalidInput(f"document {name!r} has {len(content):,} characters; the limit is {limit:,}")
    if "\x00" in content:
        raise InvalidInput(f"document {name!r} contains NUL characters")
    name = check_name(name)
    digest = content_hash(content)
    same = select(Document).where(
        Document.tenant_id == tenant_id, Document.content_sha256 == digest, Document.name == name
    )
    existing = session.scalars(same.order_by(Document.id).limit(1)).first()
    if existing is not None:
        return Stored(existing, reused=True)
    size = len(content.encode("utf-8"))
    lock_quotas(session, tenant_id)
    check_storage_quota(session, tenant_id, size, tenant_limits(session, tenant_id, settings))
    document = Document(
        tenant_id=tenant_id,
        name=name,
        content=content,
        chars=len(content),
        bytes=size,
        token_estimate=estimate_tokens(content),
        content_sha256=digest,
    )
    session.add(document)
    session.flush()
    return Stored(document, reused=False)


def delete_document(session: Session, *, tenant_id: int, document_id: int) -> None:
    """Delete the tenant's document; Conflict while a queued or running job may still read it. Finished jobs
    keep their stored conversation, which holds what they read: the pages of it they stored by reference are
    kept as the tenant's bodies, in this transaction."""
    query = select(Document).where(Document.id == document_id, Document.tenant_id == tenant_id).with_for_update()
    document = session.scalars(query).one_or_none()
    if document is None:
        raise NotFound(f"no document with id {document_id}")
    users = (
        select(Job.id)
        .join(JobDocument, JobDocument.job_id == Job.id)
        .where(JobDocument.document_id == document_id, Job.status.in_(UNFINISHED))
    )
    unfinished = list(session.scalars(users.order_by(Job.id)))
    if unfinished:
        raise Conflict(
            f"document {document_id} is used by unfinished job {', '.join(map(str, unfinished))}: "
            "cancel the job or wait until it finishes"
        )
    keep_pages_of(session, document)
    session.delete(document)
    session.flush()


def documents_of(session: Session, *, tenant_id: int, ids: Sequence[int]) -> list[Document]:
    """The tenant's documents with these ids, in the order asked; NotFound names any that are missing.

    Key-share locked until the transaction ends: a job being created over them and ``delete_document`` wait for
    each other, so the job either finds a document gone (404) or the delete sees the job (409)."""
    query = select(Document).where(Document.tenant_id == tenant_id, Document.id.in_(ids))
    found = {d.id: d for d in session.scalars(query.with_for_update(read=True, key_share=True))}
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotFound(f"no document with id {', '.join(map(str, missing))}")
    return [found[i] for i in ids]
