"""Tool results that are pages of stored documents, stored by reference.

A ``read_document`` result is a range of a document's text (and, for a page of a long one, a line after it saying
which characters it holds). Stored inline, every job that reads a document stores its text again; stored by
reference, a message keeps the document's id, the range, the page's sha256 and the line after it, and every
reader (the step's request, the API, the hand-over) gets the text back exactly as it was sent.

The text comes from the document itself. Before a document that kept histories refer to is deleted, each range
they refer to is copied into ``bodies``, a content-addressed table of texts per tenant (never shared between
tenants), in the deleting transaction; a reference whose document is gone is read from there.

In the stored message the block's ``content`` holds the reference, an object (a block's content is otherwise a
string or a list of blocks), in the key's place: the block's keys keep their order, so the text read back is the
block as it was sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import TextClause, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from models.packing import stored_rows
from models.tables import Body, Document, JobDocument

SELECTS_PER_QUERY = 200  # ranges read in one UNION ALL


@dataclass(frozen=True)
class Page:
    """Characters ``start`` to ``end`` of a document, whose UTF-8 text hashes to ``sha256``."""

    document_id: int
    start: int
    end: int
    sha256: str


class PageResult(dict[str, Any]):
    """A ``tool_result`` block whose text is a page of a stored document followed by ``after``: sent and shown as
    any block is, and stored (``stored_content``) as a reference to the page."""

    def __init__(self, tool_use_id: str, *, document_id: int, text: str, start: int, end: int, after: str) -> None:
        super().__init__(type="tool_result", tool_use_id=tool_use_id, content=text[start:end] + after)
        self.page = Page(document_id, start, end, text_hash(text[start:end]))
        self.after = after


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stored_content(content: Any) -> Any:
    """A message's content as it is stored: each page result replaced by its reference."""
    if not isinstance(content, list) or not any(isinstance(block, PageResult) for block in content):
        return content
    return [_reference(block) if isinstance(block, PageResult) else block for block in content]


def _reference(block: PageResult) -> dict[str, Any]:
    page = block.page
    reference = {"document_id": page.document_id, "start": page.start, "end": page.end, "sha256": page.sha256}
    return {**block, "content": {**reference, "after": block.after}}


def references_in(content: Any) -> Iterator[Page]:
    """The pages a stored message's content refers to."""
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("content"), dict):
                yield _page(block["content"])


def has_references(content: Any) -> bool:
    return next(references_in(content), None) is not None


def _page(reference: Mapping[str, Any]) -> Page:
    return Page(reference["document_id"], reference["start"], reference["end"], reference["sha256"])


def expanded(session: Session, tenant_id: int, contents: Sequence[Any]) -> list[Any]:
    """Stored contents of the tenant's messages as they were sent: every page reference replaced by its text."""
    pages = {page for content in contents for page in references_in(content)}
    if not pages:
        return list(contents)
    texts = page_texts(session, tenant_id, pages)
    return [_expand(content, texts) for content in contents]


def _expand(content: Any, texts: Mapping[Page, str]) -> Any:
    if not has_references(content):
        return content
    return [
        {**block, "content": texts[_page(block["content"])] + block["content"]["after"]}
        if isinstance(block, dict) and isinstance(block.get("content"), dict)
        else block
        for block in content
    ]


class PageMissing(LookupError):
    """A stored page's text is neither in its document nor in the tenant's bodies: the history is damaged."""


def page_texts(session: Session, tenant_id: int, pages: Iterable[Page]) -> dict[Page, str]:
    """Each page's text: from its document while the tenant has it and its range still hashes the same, else from
    the tenant's bodies."""
    wanted = sorted(set(pages), key=lambda p: (p.document_id, p.start, p.end, p.sha256))
    found: dict[Page, str] = {}
    for first in range(0, len(wanted), SELECTS_PER_QUERY):
        chunk = wanted[first : first + SELECTS_PER_QUERY]
        parameters: dict[str, int] = {"tenant": tenant_id}
        for index, page in enumerate(chunk):  # SQL counts characters from 1
            parameters |= {
                f"d{index}": page.document_id,
                f"s{index}": page.start + 1,
                f"n{index}": page.end - page.start,
            }
        for index, page_text in session.execute(_ranges(len(chunk)), parameters):
            if page_text is not None and text_hash(page_text) == chunk[index].sha256:
                found[chunk[index]] = page_text
    left = [page for page in wanted if page not in found]
    if left:
        hashes = {page.sha256 for page in left}
        query = select(Body.sha256, Body.text).where(Body.tenant_id == tenant_id, Body.sha256.in_(hashes))
        bodies: dict[str, str] = {sha: body for sha, body in session.execute(query)}
        for page in left:
            if page.sha256 not in bodies:
                raise PageMissing(f"page {page.start}-{page.end} of document {page.document_id} is not stored")
            found[page] = bodies[page.sha256]
    return found


@cache
def _ranges(count: int) -> TextClause:
    """One query for ``count`` ranges of the tenant's documents, each row its index and its text. Written as SQL
    (PostgreSQL's and SQLite's ``substr`` alike): building it from SQLAlchemy expressions took milliseconds a step."""
    selects = (
        f"SELECT {i}, substr(content, :s{i}, :n{i}) FROM documents WHERE id = :d{i} AND tenant_id = :tenant"
        for i in range(count)
    )
    return text(" UNION ALL ".join(selects))


def keep_pages_of(session: Session, document: Document) -> int:
    """Copy every range of ``document`` that stored messages refer to into the tenant's bodies (each text once),
    before the document is deleted in the same transaction; how many ranges were referred to. Only the jobs that
    may read the document (``job_documents``) can refer to it."""
    readers = session.scalars(select(JobDocument.job_id).where(JobDocument.document_id == document.id))
    contents = (row.content for row in stored_rows(session, readers, role="user"))
    pages = {page for content in contents for page in references_in(content) if page.document_id == document.id}
    texts = {page.sha256: document.content[page.start : page.end] for page in pages}
    if any(text_hash(text) != sha for sha, text in texts.items()):
        raise PageMissing(f"document {document.id} no longer holds the text its readers stored")
    rows = [{"tenant_id": document.tenant_id, "sha256": sha, "text": text} for sha, text in texts.items()]
    if rows:
        insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
        session.execute(insert(Body).on_conflict_do_nothing(), rows)
    return len(pages)
