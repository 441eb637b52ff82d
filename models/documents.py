"""Documents a tenant uploads for its jobs to read."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.errors import InvalidInput, NotFound
from models.settings import get_settings
from models.tables import Document
from plimsoll import estimate_tokens

MAX_NAME_CHARS = 255


def check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"a document name must have 1 to {MAX_NAME_CHARS} characters")
    if any(ch in name for ch in "`\n\r\t\x00"):
        raise InvalidInput("a document name may not contain backticks, tabs, line breaks or NUL")
    return name


def add_document(session: Session, *, tenant_id: int, name: str, content: str) -> Document:
    limit = get_settings().max_document_chars
    if not content.strip():
        raise InvalidInput(f"document {name!r} is empty")
    if len(content) > limit:
        raise InvalidInput(f"document {name!r} has {len(content):,} characters; the limit is {limit:,}")
    if "\x00" in content:
        raise InvalidInput(f"document {name!r} contains NUL characters")
    document = Document(
        tenant_id=tenant_id,
        name=check_name(name),
        content=content,
        chars=len(content),
        token_estimate=estimate_tokens(content),
    )
    session.add(document)
    session.flush()
    return document


def documents_of(session: Session, *, tenant_id: int, ids: Sequence[int]) -> list[Document]:
    """The tenant's documents with these ids, in the order asked; NotFound names any that are missing."""
    found = {
        d.id: d for d in session.scalars(select(Document).where(Document.tenant_id == tenant_id, Document.id.in_(ids)))
    }
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotFound(f"no document with id {', '.join(map(str, missing))}")
    return [found[i] for i in ids]
