"""Packing: an ended family's messages, one row each while its jobs ran, kept as one compressed row per job.

A running job appends a row per message and plans from their outlines (models/history.py). Once a main job and its
subagents have all ended, nothing is appended to their histories or planned from them again, and each message
row costs its own header, keys and outline: for a job of a few short steps that is most of what it stores. The
retention sweep (worker/tasks.py) packs such families: each job's messages, every column, in the order they were
stored, become one zlib-compressed JSON row of ``packed_histories``, in one transaction per batch of families,
so a sweep killed at any moment leaves every job's messages whole, either in rows or packed. Readers take either
(``stored_rows``): the API, the CLI, the hand-over and the retention report see the same messages as before."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, select, update
from sqlalchemy.orm import Session, aliased

from models.statuses import UNFINISHED
from models.tables import Job, Message, PackedHistory, now

FAMILIES_PER_BATCH = 5  # ended main jobs packed, with their subagents, per transaction


@dataclass(frozen=True)
class StoredRow:
    """One stored message, every column, as a row of ``messages`` or out of a packed history."""

    id: int
    seq: int
    step: int
    role: str
    content: Any
    token_estimate: int
    outline: dict[str, Any]
    created_at: datetime
    job_id: int


COLUMNS = (
    Message.id,
    Message.seq,
    Message.step,
    Message.role,
    Message.content,
    Message.token_estimate,
    Message.outline,
    Message.created_at,
    Message.job_id,
)


def stored_rows(
    session: Session, job_ids: Iterable[int], *, role: str | None = None, seqs: Sequence[int] | None = None
) -> list[StoredRow]:
    """Every stored message of these jobs (of ``role``, at ``seqs``, if given), in the order they were stored,
    whether in rows or packed. Rows are read first: a job packed between the two reads is found in its pack, and
    one whose rows were read is not read again from a pack committed meanwhile."""
    ids = list(job_ids)
    query = select(*COLUMNS).where(Message.job_id.in_(ids))
    if role is not None:
        query = query.where(Message.role == role)
    if seqs is not None:
        query = query.where(Message.seq.in_(list(seqs)))
    rows = [StoredRow(*row) for row in session.execute(query)]
    in_rows = {row.job_id for row in rows}
    rows += from_packs(session, [job_id for job_id in ids if job_id not in in_rows], role=role, seqs=seqs)
    return sorted(rows, key=lambda row: row.id)


def from_packs(
    session: Session, job_ids: Sequence[int], *, role: str | None = None, seqs: Sequence[int] | None = None
) -> list[StoredRow]:
    """The messages (of ``role``, at ``seqs``, if given) of those of these jobs whose histories are packed."""
    if not job_ids:
        return []
    wanted = None if seqs is None else set(seqs)
    packs = select(PackedHistory.job_id, PackedHistory.messages).where(PackedHistory.job_id.in_(list(job_ids)))
    return [
        row
        for job_id, data in session.execute(packs)
        for row in unpacked(job_id, data)
        if (role is None or row.role == role) and (wanted is None or row.seq in wanted)
    ]


def packed(rows: Sequence[StoredRow]) -> bytes:
    """``rows`` (one job's, in order) as a packed history: JSON of each row's columns but the job, compressed."""
    values = [
        [r.id, r.seq, r.step, r.role, r.content, r.token_estimate, r.outline, r.created_at.isoformat()] for r in rows
    ]
    return zlib.compress(json.dumps(values, ensure_ascii=False, separators=(",", ":")).encode())


def unpacked(job_id: int, data: bytes) -> list[StoredRow]:
    rows = []
    for id_, seq, step, role, content, tokens, outline, created_at in json.loads(zlib.decompress(data)):
        rows.append(
            StoredRow(id_, seq, step, role, content, tokens, outline, datetime.fromisoformat(created_at), job_id)
        )
    return rows


def packable_families(session: Session, *, ended_before: datetime, limit: int) -> list[int]:
    """Main jobs ended before ``ended_before``, their subagents too, whose messages are still rows, oldest ended
    first (the index ``ix_jobs_packable`` holds only such main jobs)."""
    subagent = aliased(Job)
    query = (
        select(Job.id)
        .where(
            Job.parent_id.is_(None),
            Job.history_packed_at.is_(None),
            Job.history_purged_at.is_(None),
            Job.finished_at < ended_before,
            Job.status.not_in(UNFINISHED),
            ~exists().where(subagent.parent_id == Job.id, subagent.status.in_(UNFINISHED)),
        )
        .order_by(Job.finished_at, Job.id)
        .limit(limit)
    )
    return list(session.scalars(query))


@dataclass(frozen=True)
class Packed:
    families: int = 0
    messages: int = 0


def pack_families(session: Session, main_ids: Sequence[int]) -> Packed:
    """Pack the messages of these main jobs and their subagents, in the caller's transaction. A family with a job
    not ended, or whose main job another transaction has locked (a purge, a hold), is left for the next sweep."""
    query = (
        select(Job.id)
        .where(
            Job.id.in_(list(main_ids)),
            Job.parent_id.is_(None),
            Job.history_packed_at.is_(None),
            Job.history_purged_at.is_(None),
            Job.status.not_in(UNFINISHED),
        )
        .with_for_update(key_share=True, skip_locked=True)
    )
    mains = list(session.scalars(query))
    running = select(Job.parent_id).where(Job.parent_id.in_(mains), Job.status.in_(UNFINISHED))
    mains = sorted(set(mains) - set(session.scalars(running)))
    if not mains:
        return Packed()
    family = [*mains, *session.scalars(select(Job.id).where(Job.parent_id.in_(mains)))]
    by_job: dict[int, list[StoredRow]] = {}
    for row in session.execute(select(*COLUMNS).where(Message.job_id.in_(family)).order_by(Message.id)):
        by_job.setdefault(row.job_id, []).append(StoredRow(*row))
    session.add_all(
        PackedHistory(job_id=job_id, messages=packed(rows), count=len(rows)) for job_id, rows in by_job.items()
    )
    session.execute(delete(Message).where(Message.job_id.in_(list(by_job))))
    session.execute(update(Job).where(Job.id.in_(family)).values(history_packed_at=now()))
    session.flush()
    return Packed(len(mains), sum(len(rows) for rows in by_job.values()))
