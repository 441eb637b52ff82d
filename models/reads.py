"""What a job's ``read_document`` calls read, kept on the job as its messages are stored (``Job.reads``), so that
showing its progress reads no history. A subagent keeps its own; its main job's view merges them
(``merged_reads``), ordering by the ids of the messages that asked, as reading every message did."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from models.tables import Job, JobDocument

READ_DOCUMENT = "read_document"


@dataclass(frozen=True)
class Reads:
    documents: list[str]  # the job's documents read, in the order first asked
    last: tuple[str, int] | None  # the document asked for last (any name) and the offset asked
    pages_of_last: int  # distinct offsets asked of that document


_DOCUMENTS_NAMED = (  # during a step's store: the job's row is not flushed first (models/history.py)
    select(JobDocument.name)
    .where(JobDocument.job_id == bindparam("job_id"), JobDocument.name.in_(bindparam("names", expanding=True)))
    .execution_options(autoflush=False)
)


def fold_reads(session: Session, job: Job, stored: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
    """Add the read calls of the messages just ``stored`` (each with its row id) to ``job.reads``. Only the job's
    documents are kept, each with its distinct offsets: what is kept grows with the pages read, never with the
    steps."""
    if job.reads is None:
        return
    calls = [
        (name, offset, message_id)
        for message_id, message in stored
        if message["role"] == "assistant"
        for name, offset in read_document_calls(message["content"])
    ]
    if not calls:
        return
    # Only the names called are looked up: a job may have many documents, and a step reads one or two.
    called = {name for name, _, _ in calls}
    names = set(session.scalars(_DOCUMENTS_NAMED, {"job_id": job.id, "names": sorted(called)}))
    first: dict[str, int] = dict(job.reads.get("first", {}))
    offsets: dict[str, list[int]] = {k: list(v) for k, v in job.reads.get("offsets", {}).items()}
    last = job.reads.get("last")
    for name, offset, message_id in calls:
        last = [name, offset, message_id]
        if name in names:
            first.setdefault(name, message_id)
            if offset not in offsets.setdefault(name, []):
                offsets[name].append(offset)
    job.reads = {"first": first, "offsets": offsets, "last": last}  # a new object: the change is seen


def merged_reads(jobs: Iterable[Job]) -> Reads | None:
    """The reads of a main job and its subagents together; None if one of them has none kept (from before)."""
    first: dict[str, int] = {}
    offsets: dict[str, set[int]] = {}
    last: list[Any] | None = None
    for job in jobs:
        if job.reads is None:
            return None
        for name, at in job.reads.get("first", {}).items():
            first[name] = min(at, first.get(name, at))
        for name, seen in job.reads.get("offsets", {}).items():
            offsets.setdefault(name, set()).update(seen)
        mine = job.reads.get("last")
        if mine is not None and (last is None or mine[2] > last[2]):
            last = mine
    if last is None:
        return Reads(sorted(first, key=first.__getitem__), None, 0)
    return Reads(sorted(first, key=first.__getitem__), (last[0], last[1]), len(offsets.get(last[0], ())))


def reads_from_calls(calls: Sequence[tuple[str, int]], names: Iterable[str]) -> Reads:
    """The same from every read call, in the order asked (a job from before reads were kept)."""
    allowed = set(names)
    documents = list(dict.fromkeys(name for name, _ in calls if name in allowed))
    if not calls:
        return Reads(documents, None, 0)
    name, offset = calls[-1]
    return Reads(documents, (name, offset), len({at for each, at in calls if each == name}))


def read_document_calls(content: Any) -> Iterable[tuple[str, int]]:
    if not isinstance(content, list):
        return
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") == READ_DOCUMENT:
            arguments = block.get("input")
            if isinstance(arguments, dict) and isinstance(arguments.get("name"), str):
                offset = arguments.get("offset")
                yield arguments["name"], offset if isinstance(offset, int) and offset > 0 else 0
