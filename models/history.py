"""Writing and reading a job's conversation. Messages are appended, never changed; each is stored with its token
estimate and outline, computed once, so that planning a request needs no message bodies. The estimate is the
tokenizer's exact count where the model's tokenizer is on this machine (``models/counting.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.counting import counting_profile
from models.settings import get_settings
from models.tables import Job, Message, Summary
from plimsoll import Outline, outline


def append_messages(session: Session, job: Job, messages: Sequence[dict[str, Any]], *, step: int) -> list[Message]:
    """Store ``messages`` after the job's last one. The (job, seq) key makes a second writer of the same
    messages fail instead of storing them twice."""
    next_seq = session.scalar(select(func.coalesce(func.max(Message.seq) + 1, 0)).where(Message.job_id == job.id))
    rows = []
    counting = counting_profile(job, get_settings())
    for offset, message in enumerate(messages):
        shape = outline(message, counting)
        rows.append(
            Message(
                job_id=job.id,
                seq=int(next_seq or 0) + offset,
                step=step,
                role=message["role"],
                content=message["content"],
                token_estimate=shape.tokens,
                outline=shape.to_dict(),
            )
        )
    session.add_all(rows)
    session.flush()
    return rows


def message_index(session: Session, job_id: int) -> list[Outline]:
    """Every stored message's outline, in order: what planning a request needs, without the bodies."""
    rows = session.execute(select(Message.outline).where(Message.job_id == job_id).order_by(Message.seq))
    return [Outline.from_dict(data) for (data,) in rows]


def message_bodies(session: Session, job_id: int, seqs: Iterable[int]) -> dict[int, dict[str, Any]]:
    wanted = sorted(set(seqs))
    if not wanted:
        return {}
    rows = session.execute(
        select(Message.seq, Message.role, Message.content).where(Message.job_id == job_id, Message.seq.in_(wanted))
    )
    return {seq: {"role": role, "content": content} for seq, role, content in rows}


def all_messages(session: Session, job_id: int) -> list[Message]:
    return list(session.scalars(select(Message).where(Message.job_id == job_id).order_by(Message.seq)))


def summaries_of(session: Session, job_id: int) -> list[Summary]:
    """The job's summaries (compaction), oldest first: each covers stored messages it never changed."""
    return list(session.scalars(select(Summary).where(Summary.job_id == job_id).order_by(Summary.step)))


READ_DOCUMENT = "read_document"


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
    query = select(Message.job_id, Message.content).where(
        Message.job_id.in_(list(job_ids)), Message.role == "assistant"
    )
    rows = session.execute(query.order_by(Message.id))
    return [(job_id, call) for job_id, content in rows for call in _read_document_calls(content)]


def _read_document_calls(content: Any) -> Iterable[tuple[str, int]]:
    if not isinstance(content, list):
        return
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") == READ_DOCUMENT:
            arguments = block.get("input")
            if isinstance(arguments, dict) and isinstance(arguments.get("name"), str):
                offset = arguments.get("offset")
                yield arguments["name"], offset if isinstance(offset, int) and offset > 0 else 0
