"""The agent's tools: listing and reading the job's documents (from the database, never the file system) and,
for a main job, delegating bounded tasks to subagents."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session

from models.pages import PageResult
from models.tables import Document, Job, JobDocument, JobKind
from plimsoll import estimate_tokens

LIST_DOCUMENTS = {
    "name": "list_documents",
    "description": "List the documents of this task: their names, sizes in characters and estimated tokens.",
    "input_schema": {"type": "object", "properties": {}},
}
READ_DOCUMENT = {
    "name": "read_document",
    "description": (
        "Read a document of this task by name. Long documents come in pages: the result says which characters "
        "it holds; pass `offset` to read on."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "the document's name, as list_documents gives it"},
            "offset": {"type": "integer", "minimum": 0, "description": "the first character to read (default 0)"},
        },
        "required": ["name"],
    },
}
DELEGATE = {
    "name": "delegate",
    "description": (
        "Hand a bounded task to a subagent that can read the same documents. Name the documents it should read "
        "in backticks. The result is the subagent's final report."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"task": {"type": "string", "description": "what the subagent should do"}},
        "required": ["task"],
    },
}
PAGE_SHARE = 4  # a page of a document is at most a quarter of the job's budget: the newest result stays whole


def tools_for(job: Job) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = [LIST_DOCUMENTS, READ_DOCUMENT]
    return [*tools, DELEGATE] if job.kind == JobKind.MAIN else tools


@dataclass(frozen=True)
class Delegation:
    tool_use_id: str
    task: str


def result(tool_use_id: str, content: str, *, error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if error:
        block["is_error"] = True
    return block


def run_tool(session: Session, job: Job, call: Mapping[str, Any]) -> dict[str, Any] | Delegation:
    """The result block of one tool call, or the delegation it asks for. Bad input is an error result the
    agent can read, never an exception."""
    name, arguments, tool_use_id = call.get("name"), call.get("input") or {}, call["id"]
    if name == "list_documents":
        rows = session.execute(_job_documents(job, Document.chars, Document.token_estimate))
        listing = [{"name": name, "chars": chars, "tokens": tokens} for name, chars, tokens in rows]
        return result(tool_use_id, json.dumps(listing, ensure_ascii=False))
    if name == "read_document":
        return _read(session, job, tool_use_id, arguments)
    if name == "delegate" and job.kind == JobKind.MAIN:
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            return result(tool_use_id, "delegate needs a non-empty `task`.", error=True)
        return Delegation(tool_use_id, task)
    return result(tool_use_id, f"There is no tool named {name!r} here.", error=True)


def _job_documents(job: Job, *columns: Any) -> Select[Any]:
    """The job's documents by the names it knows them by, in order, with ``columns`` of each."""
    return (
        select(JobDocument.name, *columns)
        .join(Document, Document.id == JobDocument.document_id)
        .where(JobDocument.job_id == job.id)
        .order_by(JobDocument.position)
    )


_DOCUMENT_NAMED = (  # the columns a page needs, no Document object; the step's job row is not flushed first
    select(Document.id, Document.chars, Document.content)
    .join(JobDocument)
    .where(JobDocument.job_id == bindparam("job_id"), JobDocument.name == bindparam("name"))
    .execution_options(autoflush=False)
)


def _read(session: Session, job: Job, tool_use_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    name, offset = arguments.get("name"), arguments.get("offset", 0)
    if not isinstance(name, str):
        return result(tool_use_id, "read_document needs a document `name`.", error=True)
    document = session.execute(_DOCUMENT_NAMED, {"job_id": job.id, "name": name}).one_or_none()
    if document is None:
        known = ", ".join(session.scalars(_job_documents(job))) or "none"
        return result(tool_use_id, f"No document named {name!r} in this task. Documents: {known}.", error=True)
    if not isinstance(offset, int) or not 0 <= offset <= document.chars:
        return result(tool_use_id, f"`offset` must be between 0 and {document.chars}.", error=True)
    text = document.content
    end = offset + page_length(text[offset:], job.budget // PAGE_SHARE, job.profile)
    after = (
        ""
        if offset == 0 and end == document.chars
        else f"\n\n[{name}: characters {offset:,} to {end:,} of {document.chars:,}."
        + (f" Call read_document with offset={end} to read on.]" if end < document.chars else "]")
    )
    return PageResult(tool_use_id, document_id=document.id, text=text, start=offset, end=end, after=after)


def page_length(text: str, max_tokens: int, profile: str) -> int:
    """The longest prefix of ``text`` (in characters) whose estimate is within ``max_tokens``."""
    if estimate_tokens(text, profile) <= max_tokens:
        return len(text)
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(text[:middle], profile) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return max(low, 1)
