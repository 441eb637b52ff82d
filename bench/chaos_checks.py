"""What the chaos harness checks once the run is over, per job, from the database alone: its final state, its
messages numbered 0..n-1 once each, its step records 1..n, unique tool_use ids, every delegate call answered by a
subagent job, and for a succeeded main job, a note in its answer for every document, carrying the document's
sha256."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from demo.run import notes_matching
from models.db import Database
from models.statuses import UNFINISHED, JobStatus
from models.tables import Job, Message, Notice, Step


@dataclass(frozen=True)
class Submitted:
    job_id: int
    texts: dict[str, str]
    too_long: bool  # meant to end needs_new_chat: its documents outgrow the emulator's limit


@dataclass
class Checks:
    jobs_by_state: Counter[str] = field(default_factory=Counter)  # every job, subagents included
    main_by_state: Counter[str] = field(default_factory=Counter)
    subagents: int = 0
    stuck: list[int] = field(default_factory=list)  # not ended
    lost: list[int] = field(default_factory=list)  # submitted or delegated, but no such job in the database
    messages: int = 0
    messages_missing: int = 0  # holes in seq 0..n-1
    messages_duplicated: int = 0  # a seq or a tool_use id stored twice
    step_records: int = 0
    steps_missing: int = 0  # holes in step 1..n
    notes_wrong: list[int] = field(default_factory=list)  # succeeded main jobs whose notes miss a document
    unexpected_end: list[int] = field(default_factory=list)  # not meant to fail, yet not succeeded
    too_long_jobs: int = 0
    too_long_ok: int = 0  # ended needs_new_chat with exactly one notice
    retries: int = 0
    problems: list[str] = field(default_factory=list)  # one line per job that broke a rule, no user text

    @property
    def ended(self) -> int:
        return sum(n for state, n in self.jobs_by_state.items() if state not in UNFINISHED)


def unfinished_jobs(database: Database, ids: list[int] | None = None) -> int:
    query = select(func.count()).select_from(Job).where(Job.status.in_(UNFINISHED))
    if ids is not None:
        query = query.where(Job.id.in_(ids))
    with database.session() as session:
        return int(session.scalar(query) or 0)


def check_jobs(database: Database, submitted: Iterable[Submitted]) -> Checks:
    wanted = {s.job_id: s for s in submitted}
    checks = Checks()
    with database.session() as session:
        jobs = {job.id: job for job in session.scalars(select(Job))}
        seqs = _grouped(session.execute(select(Message.job_id, Message.seq)))
        steps = _grouped(session.execute(select(Step.job_id, Step.step)))
        notices = Counter(session.scalars(select(Notice.job_id)))
        assistant = session.execute(select(Message.job_id, Message.content).where(Message.role == "assistant"))
        tool_uses: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for job_id, content in assistant:
            tool_uses[job_id] += list(_tool_uses(content))
    answered = {(job.parent_id, job.parent_tool_use_id) for job in jobs.values() if job.parent_id is not None}

    checks.lost += [job_id for job_id in wanted if job_id not in jobs]
    for job in jobs.values():
        _check_one(checks, job, seqs.get(job.id, []), steps.get(job.id, []), tool_uses.get(job.id, []))
        checks.lost += [
            job.id for call, name in tool_uses.get(job.id, []) if name == "delegate" and (job.id, call) not in answered
        ]
        if job.id in wanted:
            _check_outcome(checks, job, wanted[job.id], notices[job.id])
    return checks


def _check_one(checks: Checks, job: Job, seqs: list[int], steps: list[int], calls: list[tuple[str, str]]) -> None:
    checks.jobs_by_state[job.status] += 1
    if job.parent_id is None:
        checks.main_by_state[job.status] += 1
    else:
        checks.subagents += 1
    checks.retries += job.retries
    if job.status in UNFINISHED:
        checks.stuck.append(job.id)
        checks.problems.append(f"job {job.id} ({job.kind}): stuck {job.status} after step {job.step}")
    checks.messages += len(seqs)
    checks.step_records += len(steps)
    missing = (max(seqs) + 1 - len(set(seqs))) if seqs else 1  # every job has its opening message, seq 0
    duplicated = len(seqs) - len(set(seqs)) + len(calls) - len({call for call, _ in calls})
    steps_missing = (max(steps) - len(set(steps))) if steps else 0
    checks.messages_missing += missing
    checks.messages_duplicated += duplicated
    checks.steps_missing += steps_missing + (len(steps) - len(set(steps)))
    if missing or duplicated or steps_missing:
        checks.problems.append(
            f"job {job.id}: {missing} message(s) missing, {duplicated} duplicated, {steps_missing} step(s) missing"
        )


def _check_outcome(checks: Checks, job: Job, submitted: Submitted, notices: int) -> None:
    if submitted.too_long:
        checks.too_long_jobs += 1
        if job.status == JobStatus.NEEDS_NEW_CHAT and notices == 1:
            checks.too_long_ok += 1
        else:
            checks.problems.append(f"job {job.id} (too long): {job.status}, {notices} notice(s)")
        return
    if job.status.finished and job.status != JobStatus.SUCCEEDED:
        checks.unexpected_end.append(job.id)
        checks.problems.append(f"job {job.id}: ended {job.status}")
    succeeded = job.status == JobStatus.SUCCEEDED
    if succeeded and notes_matching(job.final_answer or "", submitted.texts) != set(submitted.texts):
        checks.notes_wrong.append(job.id)
        checks.problems.append(f"job {job.id}: succeeded, but its notes do not match its documents")


def _grouped(rows: Iterable[Any]) -> Mapping[int, list[int]]:
    grouped: dict[int, list[int]] = defaultdict(list)
    for job_id, number in rows:
        grouped[job_id].append(number)
    return grouped


def _tool_uses(content: Any) -> Iterable[tuple[str, str]]:
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                yield str(block.get("id")), str(block.get("name"))
