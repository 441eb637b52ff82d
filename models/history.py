"""Writing and reading a job's conversation. Messages are appended, never changed; each is stored with its token
estimate and outline, computed once, so that planning a request needs no message bodies. The estimate is the
tokenizer's exact count where the model's tokenizer is on this machine (``models/counting.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, bindparam, func, insert, select
from sqlalchemy.orm import Session

from models.counting import counting_profile
from models.packing import from_packs, stored_rows
from models.pages import expanded, stored_content
from models.reads import fold_reads, read_document_calls
from models.settings import get_settings
from models.tables import Job, Message, Summary
from plimsoll import Outline, outline

# The statements a step runs are built once: building one costs about 0.1 ms, more than PostgreSQL takes to run it.
# Those of a step's store do not flush the job's row first: it is written once, with the step's record.
_NEXT_SEQ = (
    select(func.coalesce(func.max(Message.seq) + 1, 0))
    .where(Message.job_id == bindparam("job_id"))
    .execution_options(autoflush=False)
)
_INSERT = (
    insert(Message)
    .returning(Message.id, sort_by_parameter_order=True)
    .execution_options(autoflush=False, dml_strategy="raw")
)
_OUTLINES_FROM = (
    select(Message.seq, Message.id, Message.outline)
    .where(Message.job_id == bindparam("job_id"), Message.seq >= bindparam("seq"))
    .order_by(Message.seq)
)


def append_messages(session: Session, job: Job, messages: Sequence[dict[str, Any]], *, step: int) -> None:
    """Store ``messages`` after the job's last one. The (job, seq) key makes a second writer of the same
    messages fail instead of storing them twice. Pages of documents are stored by reference (models/pages.py)
    unless the settings say otherwise; the estimate and the outline are of the text."""
    next_seq = int(session.scalar(_NEXT_SEQ, {"job_id": job.id}) or 0)
    settings = get_settings()
    counting = counting_profile(job, settings)
    rows = []
    for offset, message in enumerate(messages):
        shape = outline(message, counting)
        content = message["content"]
        rows.append(
            {
                "job_id": job.id,
                "seq": next_seq + offset,
                "step": step,
                "role": message["role"],
                "content": stored_content(content) if settings.pages_by_reference else content,
                "token_estimate": shape.tokens,
                "outline": shape.to_dict(),
            }
        )
    ids = session.scalars(_INSERT, rows).all() if rows else []
    fold_reads(session, job, list(zip(ids, messages, strict=True)))


def message_index(session: Session, job_id: int) -> list[Outline]:
    """Every stored message's outline, in order: what planning a request needs, without the bodies."""
    rows = session.execute(select(Message.outline).where(Message.job_id == job_id).order_by(Message.seq))
    return [Outline.from_dict(data) for (data,) in rows]


def outlines_from(session: Session, job_id: int, seq: int) -> list[tuple[int, int, Outline]]:
    """(seq, row id, outline) of the job's stored messages from ``seq`` on, in order."""
    rows = session.execute(_OUTLINES_FROM, {"job_id": job_id, "seq": seq})
    return [(at, row, Outline.from_dict(data)) for at, row, data in rows]


def message_bodies(session: Session, job_id: int, seqs: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The messages at ``seqs`` as they were sent: role and content."""
    wanted = sorted(set(seqs))
    if not wanted:
        return {}
    rows = list(session.execute(_BODIES, {"job_id": job_id, "seqs": wanted}))
    contents = _as_sent(session, rows)
    return {row.seq: {"role": row.role, "content": content} for row, content in zip(rows, contents, strict=True)}


@dataclass(frozen=True)
class StoredMessage:
    seq: int
    role: str
    content: Any  # as it was sent
    token_estimate: int


def all_messages(session: Session, job_id: int) -> list[StoredMessage]:
    """Every message of the job, in order, as it was sent (whether its history is in rows or packed)."""
    rows = sorted(stored_rows(session, [job_id]), key=lambda row: row.seq)
    tenant_id = session.scalar(select(Job.tenant_id).where(Job.id == job_id))
    contents = expanded(session, tenant_id, [row.content for row in rows]) if rows and tenant_id else []
    return [
        StoredMessage(row.seq, row.role, content, row.token_estimate)
        for row, content in zip(rows, contents, strict=True)
    ]


_BODIES = (  # with the job's tenant: a page reference is read within its tenant
    select(Message.seq, Message.role, Message.content, Job.tenant_id)
    .join(Job, Job.id == Message.job_id)
    .where(Message.job_id == bindparam("job_id"), Message.seq.in_(bindparam("seqs", expanding=True)))
)


def _as_sent(session: Session, rows: Sequence[Row[Any]]) -> list[Any]:
    """The rows' stored contents with every page reference replaced by its text."""
    contents = [row.content for row in rows]
    return expanded(session, rows[0].tenant_id, contents) if rows else contents


def summaries_of(session: Session, job_id: int) -> list[Summary]:
    """The job's summaries (compaction), oldest first: each covers stored messages it never changed."""
    return list(session.scalars(select(Summary).where(Summary.job_id == job_id).order_by(Summary.step)))


def documents_read(session: Session, *, job_ids: Iterable[int], names: Iterable[str]) -> list[str]:
    """The distinct ``names`` that ``read_document`` calls of these jobs asked for, in the order first asked."""
    return distinct_read(read_calls(session, job_ids=job_ids), names)


def distinct_read(calls: Iterable[tuple[str, int]], names: Iterable[str]) -> list[str]:
    allowed = set(names)
    return list(dict.fromkeys(name for name, _ in calls if name in allowed))


def read_calls(session: Session, *, job_ids: Iterable[int]) -> list[tuple[str, int]]:
    """(document name, offset) of every ``read_document`` call of these jobs, in the order asked."""
    return [call for _job_id, call in read_calls_by_job(session, job_ids=job_ids)]


def read_calls_by_job(session: Session, *, job_ids: Iterable[int]) -> list[tuple[int, tuple[str, int]]]:
    """Each ``read_document`` call of these jobs, in the order asked, with the job that made it. Only assistant
    messages are loaded: they are small, the documents' texts sit in the user messages."""
    ids = list(job_ids)
    query = select(Message.id, Message.job_id, Message.content).where(
        Message.job_id.in_(ids), Message.role == "assistant"
    )
    rows = [(row.id, row.job_id, row.content) for row in session.execute(query)]
    in_rows = {job_id for _, job_id, _ in rows}
    packed = from_packs(session, [job_id for job_id in ids if job_id not in in_rows], role="assistant")
    rows += [(row.id, row.job_id, row.content) for row in packed]
    return [(job_id, call) for _, job_id, content in sorted(rows) for call in read_document_calls(content)]
