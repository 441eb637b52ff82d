"""Retention: a tenant's ended jobs lose their histories so many days after they ended, unless held.

A job's *history* is what grows with its steps and holds the person's and the model's words: its messages, its
steps' per-request records and its summaries, and those of its subagents, which go with their main job. What stays
is small and is what the person reads afterwards: the job's row (status, instruction, answer, error, usage and
so its cost), its notices, the documents it was given, and the names of the documents its history showed it read.

The policy is the tenant's own days (``plimsoll tenant limits --retention-days``) or else
``PLIMSOLL_RETENTION_DAYS``; 0 keeps histories for ever. A sweep (Celery beat, worker/tasks.py) purges whole main
jobs with their subagents, a batch of them per transaction: a sweep killed at any moment leaves every job either
whole or purged, never half."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Select, delete, false, func, or_, select
from sqlalchemy.orm import Session

from models.db import Database
from models.errors import Conflict, HistoryPurged
from models.history import distinct_read, read_calls_by_job
from models.limits import Limit, limits_of
from models.packing import FAMILIES_PER_BATCH, Packed, pack_families, packable_families
from models.settings import Settings
from models.statuses import UNFINISHED
from models.tables import Job, JobKind, Message, PackedHistory, Step, Summary, Tenant, now

CANDIDATES = 25  # due main jobs looked at per batch, oldest ended first: a batch takes at most these


def require_history(job: Job) -> None:
    """Refuse (410) to read or hold a history that was purged."""
    if job.history_purged_at is not None:
        raise HistoryPurged(
            f"job {job.id}'s history (its messages, steps and summaries) was purged on "
            f"{job.history_purged_at:%Y-%m-%d %H:%M} UTC under its tenant's retention policy; its answer, notices "
            f"and usage are kept (GET /v1/jobs/{job.id})"
        )


def set_hold(job: Job, *, held: bool) -> None:
    """Hold a main job's history (its subagents' with it) whatever the policy, or release it to the policy."""
    if job.kind != JobKind.MAIN:
        raise Conflict(f"job {job.id} is a subagent: its history goes with its main job's; hold job {job.parent_id}")
    if held:
        require_history(job)
    job.held = held


@dataclass(frozen=True)
class Policy:
    tenant_id: int
    tenant: str
    days: Limit  # 0: kept for ever

    def cutoff(self, at: datetime) -> datetime | None:
        """Jobs that ended before this lose their histories (None: none do)."""
        return at - timedelta(days=self.days.value) if self.days.value else None


def policies(session: Session, settings: Settings) -> list[Policy]:
    tenants = session.scalars(select(Tenant).order_by(Tenant.id))
    return [Policy(t.id, t.name, limits_of(t, settings).retention_days) for t in tenants]


def due_query(policy: Policy, at: datetime) -> Select[int] | None:
    """The tenant's main jobs whose histories go at a sweep at ``at``, oldest ended first (None: the policy
    keeps them all)."""
    cutoff = policy.cutoff(at)
    if cutoff is None:
        return None
    return (
        select(Job.id)
        .where(
            Job.tenant_id == policy.tenant_id,
            Job.parent_id.is_(None),
            Job.history_purged_at.is_(None),
            Job.held.is_(false()),
            Job.status.not_in(UNFINISHED),
            Job.finished_at < cutoff,
        )
        .order_by(Job.finished_at, Job.id)
    )


def in_families(main_ids: Iterable[int] | Select[int]) -> ColumnElement[bool]:
    """Jobs that are one of these main jobs or their subagents."""
    # Not correlated: the subquery reads the jobs table too, whatever the query it sits in
    ids = main_ids.order_by(None).correlate(None) if isinstance(main_ids, Select) else list(main_ids)
    return or_(Job.id.in_(ids), Job.parent_id.in_(ids))


@dataclass
class Purged:
    jobs: int = 0  # main jobs; their subagents went with them
    messages: int = 0

    def add(self, other: Purged) -> None:
        self.jobs += other.jobs
        self.messages += other.messages


def purge(session: Session, main_ids: Sequence[int], *, at: datetime | None = None) -> Purged:
    """Purge the histories of these main jobs and their subagents, in the caller's transaction. A job held, already
    purged or not ended meanwhile is left out, and so is one whose row another transaction has locked (a hold being
    set, another sweep): the next sweep looks again."""
    query = (
        select(Job)
        .where(
            Job.id.in_(list(main_ids)),
            Job.parent_id.is_(None),
            Job.history_purged_at.is_(None),
            Job.held.is_(false()),
            Job.status.not_in(UNFINISHED),
        )
        .order_by(Job.id)
        .with_for_update(key_share=True, skip_locked=True)
    )
    mains = list(session.scalars(query.execution_options(populate_existing=True)))
    if not mains:
        return Purged()
    ids = [job.id for job in mains]
    children = list(
        session.scalars(select(Job).where(Job.parent_id.in_(ids)).order_by(Job.id).with_for_update(key_share=True))
    )
    family = [*ids, *(child.id for child in children)]
    calls = read_calls_by_job(session, job_ids=family)
    at = at or now()
    for job in [*mains, *children]:
        # What the job view showed: a main job's reads include its subagents' (api/views.py)
        kin = {job.id} | {child.id for child in children if child.parent_id == job.id}
        names = [d.name for d in job.documents]
        job.purged_documents_read = distinct_read((call for who, call in calls if who in kin), names)
        job.history_purged_at = at
    messages = session.execute(delete(Message).where(Message.job_id.in_(family)))
    packs = delete(PackedHistory).where(PackedHistory.job_id.in_(family)).returning(PackedHistory.count)
    packed = sum(count for (count,) in session.execute(packs))
    session.execute(delete(Step).where(Step.job_id.in_(family)))
    session.execute(delete(Summary).where(Summary.job_id.in_(family)))
    session.flush()
    return Purged(len(mains), int(messages.rowcount) + packed)  # type: ignore[attr-defined]


def next_batch(session: Session, policies: Sequence[Policy], *, at: datetime, messages: int) -> list[int]:
    """Main jobs due at ``at``, oldest ended first, whose histories (their subagents' included) add up to about
    ``messages`` messages; a job with more goes alone."""
    candidates: list[int] = []
    for policy in policies:
        query = due_query(policy, at)
        if query is not None:
            candidates += session.scalars(query.limit(CANDIDATES - len(candidates)))
        if len(candidates) >= CANDIDATES:
            break
    if not candidates:
        return []
    mains = select(Job.id, func.coalesce(Job.parent_id, Job.id)).where(in_families(candidates))
    family = {job_id: main for job_id, main in session.execute(mains)}
    counted = select(Message.job_id, func.count()).where(Message.job_id.in_(list(family))).group_by(Message.job_id)
    packed = select(PackedHistory.job_id, PackedHistory.count).where(PackedHistory.job_id.in_(list(family)))
    counts: dict[int, int] = {}
    for job_id, count in [*session.execute(counted), *session.execute(packed)]:
        counts[family[job_id]] = counts.get(family[job_id], 0) + count
    batch: list[int] = []
    total = 0
    for job_id in candidates:
        size = counts.get(job_id, 0)
        if batch and total + size > messages:
            break
        batch.append(job_id)
        total += size
    return batch


@dataclass
class Sweep:
    purged: Purged = field(default_factory=Purged)
    batches: int = 0
    finished: bool = False  # nothing was left due; False: stopped by its time limit, the next sweep goes on


def sweep(
    database: Database,
    settings: Settings,
    *,
    at: datetime | None = None,
    seconds: float | None = None,
    after_batch: Callable[[Sweep], None] | None = None,
) -> Sweep:
    """Purge every history due at ``at`` (now), one transaction per batch of whole jobs, resting between
    batches (``pause_after``) so that the service's own queries keep their pace; stop after ``seconds`` (the
    sweep interval)."""
    at = at or now()
    stop = time.monotonic() + (settings.retention_sweep_every_seconds if seconds is None else seconds)
    done = Sweep()
    while time.monotonic() < stop:
        started = time.monotonic()
        with database.session() as session:
            batch = next_batch(session, policies(session, settings), at=at, messages=settings.retention_batch_messages)
            purged = purge(session, batch) if batch else Purged()
        if not purged.jobs:
            done.finished = not batch
            break
        done.purged.add(purged)
        done.batches += 1
        if after_batch is not None:
            after_batch(done)
        time.sleep(pause_after(time.monotonic() - started, settings))
    return done


def pack_ended(database: Database, settings: Settings, *, seconds: float) -> int:
    """Pack every family ended so far (models/packing.py), a batch per transaction, for at most ``seconds``; how
    many messages were packed. Packing is never urgent: after each batch it rests twice as long as a purge would,
    so that it takes at most half the purge's share of the database and of the machine's cores."""
    stop = time.monotonic() + seconds
    total = 0
    while time.monotonic() < stop:
        started = time.monotonic()
        with database.session() as session:
            batch = packable_families(session, ended_before=now(), limit=FAMILIES_PER_BATCH)
            done = pack_families(session, batch) if batch else Packed()
        if not done.families:  # none left, or only families another transaction holds: the next sweep
            break
        total += done.messages
        time.sleep(2 * pause_after(time.monotonic() - started, settings))
    return total


def pause_after(batch_seconds: float, settings: Settings) -> float:
    """The rest after a batch that took ``batch_seconds``: proportional to it, as pt-archiver's --sleep-coef, so
    that the sweep yields more of the database the busier the database is, and never under the minimum pause."""
    return max(settings.retention_pause_seconds, settings.retention_pause_ratio * batch_seconds)


@dataclass(frozen=True)
class Held:
    """What a tenant's policy keeps and what goes at the next sweep."""

    tenant: str
    days: int  # 0: kept for ever
    where: str
    jobs: int  # main jobs whose histories are kept (held ones included)
    held: int
    purged: int  # main jobs whose histories went
    messages: int
    bytes: int  # as stored (compressed, on PostgreSQL)
    due_jobs: int
    due_messages: int
    due_bytes: int


def retention_report(session: Session, settings: Settings, *, at: datetime | None = None) -> list[Held]:
    at = at or now()
    rows = []
    for policy in policies(session, settings):
        mains = select(func.count(Job.id)).where(Job.tenant_id == policy.tenant_id, Job.parent_id.is_(None))
        kept = session.scalar(mains.where(Job.history_purged_at.is_(None))) or 0
        held = session.scalar(mains.where(Job.history_purged_at.is_(None), Job.held)) or 0
        purged = session.scalar(mains.where(Job.history_purged_at.is_not(None))) or 0
        messages, size = _messages(session, Job.tenant_id == policy.tenant_id)
        due = due_query(policy, at)
        due_jobs = (session.scalar(select(func.count()).select_from(due.subquery())) or 0) if due is not None else 0
        due_messages, due_size = _messages(session, in_families(due)) if due is not None else (0, 0)
        row = Held(
            policy.tenant, policy.days.value, policy.days.where, kept, held, purged, messages, size,
            due_jobs, due_messages, due_size,
        )  # fmt: skip
        rows.append(row)
    return rows


def _messages(session: Session, jobs: ColumnElement[bool]) -> tuple[int, int]:
    """How many messages the jobs have, and their bytes as stored."""
    stored = func.pg_column_size if session.get_bind().dialect.name == "postgresql" else func.length
    count, size = session.execute(
        select(func.count(Message.id), func.coalesce(func.sum(stored(Message.content)), 0))
        .join(Job, Job.id == Message.job_id)
        .where(jobs)
    ).one()
    packed, packed_size = session.execute(
        select(
            func.coalesce(func.sum(PackedHistory.count), 0),
            func.coalesce(func.sum(stored(PackedHistory.messages)), 0),
        )
        .join(Job, Job.id == PackedHistory.job_id)
        .where(jobs)
    ).one()
    return int(count) + int(packed), int(size) + int(packed_size)
