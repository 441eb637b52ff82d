"""Subagents: the ones a reply delegates to, the results their parent waits for, and how the parent ends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.history import message_bodies
from models.jobs import children_of, create_job, end_job
from models.options import JobOptions
from models.settings import Settings
from models.tables import Job, JobKind, JobStatus
from plimsoll.handover import how_it_ended
from plimsoll.notices import stopped_notice
from worker.step.records import notify
from worker.step.results import Wake
from worker.tools import Delegation, result, run_tool


def within_caps(session: Session, job: Job, delegations: Sequence[Delegation], settings: Settings) -> int:
    """How many of a reply's delegations may start subagents: at most ``max_subagents_per_call`` of them, and
    no more than the main job has left of ``max_subagents_per_job``. The first ones start."""
    if not delegations:  # most replies: no need to count the subagents
        return 0
    started = session.scalar(select(func.count()).where(Job.parent_id == job.id)) or 0
    left = settings.max_subagents_per_job - started
    return max(0, min(len(delegations), settings.max_subagents_per_call, left))


def over_the_cap(tool_use_id: str, settings: Settings) -> dict[str, Any]:
    """The result of a delegate call that started no subagent: the agent reads why, and goes on."""
    text = (
        f"Not started: a job may start at most {settings.max_subagents_per_call} subagents in one reply and "
        f"{settings.max_subagents_per_job} in all. Do this part yourself, or delegate it later if the job has "
        "subagents left."
    )
    return result(tool_use_id, text, error=True)


def start_subagent(session: Session, job: Job, delegation: Delegation) -> Job:
    return create_job(
        session,
        tenant_id=job.tenant_id,
        instruction=delegation.task,
        document_ids=[d.document_id for d in job.documents],
        options=JobOptions.of(job),  # the limits set on a main job hold for each of its parts too
        kind=JobKind.SUBAGENT,
        parent=job,
        parent_tool_use_id=delegation.tool_use_id,
    )


def delegate_results(
    session: Session, job: Job, calls: Sequence[str], seq: int, settings: Settings
) -> dict[str, Any] | None:
    """The results message answering a message of delegate calls, or None while a subagent still works."""
    children = {child.parent_tool_use_id: child for child in children_of(session, job.id)}
    blocks = []
    for call in calls:
        child = children.get(call)
        if child is None:  # a tool that ran beside a delegation, run again now, or a delegation over the caps
            ran = run_tool(session, job, _stored_call(session, job, seq, call))
            blocks.append(over_the_cap(call, settings) if isinstance(ran, Delegation) else ran)
            continue
        status = child.status
        if not status.finished:
            return None
        if status == JobStatus.SUCCEEDED:
            blocks.append(result(call, child.final_answer or "(the subagent gave no answer)"))
        elif status == JobStatus.INCOMPLETE and child.final_answer:  # wound down: what it found is worth having
            partial = f"The subagent stopped before it finished ({why_unfinished(child)}); its answer so far:\n\n"
            blocks.append(result(call, partial + child.final_answer))
        else:
            blocks.append(result(call, f"The subagent did not finish: {why_unfinished(child)}.", error=True))
    return {"role": "user", "content": [b for b in blocks if isinstance(b, dict)]}


def _stored_call(session: Session, job: Job, seq: int, tool_use_id: str) -> dict[str, Any]:
    content = message_bodies(session, job.id, [seq])[seq]["content"]
    return next(b for b in content if b.get("type") == "tool_use" and b["id"] == tool_use_id)


def finish_with_parts(session: Session, job: Job) -> None:
    """A job that answered succeeded, unless some of its subagents did not finish: then it is incomplete,
    and the person is told which parts are missing and why."""
    missing = [c for c in children_of(session, job.id) if c.status != JobStatus.SUCCEEDED]
    if not missing:
        end_job(session, job, JobStatus.SUCCEEDED)
        return
    parts = "; ".join(f"subagent {c.id} ({why_unfinished(c)})" for c in missing)
    notify(session, job, stopped_notice("incomplete", job.locale, parts=parts))
    end_job(session, job, JobStatus.INCOMPLETE, error=f"{len(missing)} of its subagents did not finish: {parts}")


def why_unfinished(job: Job) -> str:
    """How a subagent ended, for its main job's agent; a failure's reason follows (most often our own words: a
    limit reached, retries used up)."""
    reason = f": {job.error}" if job.status == JobStatus.FAILED and job.error else ""
    return f"it {how_it_ended(job.status)}{reason}"


def wake_parent(session: Session, job: Job) -> list[Wake]:
    """A finished subagent wakes its parent at the step the parent waits in."""
    parent = session.get(Job, job.parent_id) if job.parent_id is not None else None
    return [] if parent is None else [(parent.id, parent.step, None)]
