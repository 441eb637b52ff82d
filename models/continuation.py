"""Starting a new chat from a finished job: the same tenant and documents, and a hand-over of what the old job
was asked, produced and left to do (plimsoll.handover), never its whole history."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.catalogue import UnknownModel, model_spec
from models.errors import Conflict, InvalidInput
from models.history import documents_read
from models.jobs import children_of, create_job, job_of, opening_message
from models.options import JobOptions
from models.packing import stored_rows
from models.settings import get_settings
from models.tables import Job, JobKind
from plimsoll.handover import handover

HANDOVER_SHARE = 4  # the hand-over takes at most a quarter of the new job's budget


@dataclass(frozen=True)
class Continued:
    job: Job
    warnings: list[str]  # e.g. documents of the old job that no longer exist, which the new one goes on without


def continue_job(
    session: Session,
    *,
    tenant_id: int,
    job_id: int,
    instruction: str,
    options: JobOptions | None = None,
) -> Continued:
    """A queued job that continues job ``job_id`` with ``instruction`` as its next step. It runs with the old
    job's options but those given in ``options``; its budget is the old one's at most what the model takes, and
    its strategy is the one given (Plimsoll's by default, also after a job that reproduced an old failure). It
    reads the old job's documents that still exist, and warns of those that do not; with none left, or its
    history purged (models/retention.py), it is refused (Conflict)."""
    given = options or JobOptions()
    old = job_of(session, tenant_id=tenant_id, job_id=job_id)
    if old.kind != JobKind.MAIN:
        raise Conflict(f"job {job_id} is a subagent; continue its main job {old.parent_id} instead")
    if not old.status.finished:
        raise Conflict(f"job {job_id} is still {old.status}; cancel it or wait for it to end first")
    if old.history_purged_at is not None:
        raise Conflict(
            f"job {job_id}'s history was purged under its tenant's retention policy, and a hand-over is written from "
            "it: submit a new job over its documents, with its answer (GET /v1/jobs/ID) in the instruction"
        )
    already = continuation_of(session, job_id)
    if already is not None:
        raise Conflict(f"job {job_id} was already continued as job {already.id}")
    settings = get_settings()
    name = given.model or old.model
    try:
        spec = model_spec(name, settings.models)
    except UnknownModel as error:
        raise InvalidInput(str(error)) from None
    new_budget = given.budget or min(old.budget, spec.max_budget)
    names = [d.name for d in old.documents]
    gone = deleted_documents(session, old)
    if gone and not names:
        raise Conflict(
            f"none of job {job_id}'s documents exists any more (deleted: {', '.join(gone)}): upload them again "
            "and submit a new job"
        )
    children = children_of(session, old.id)
    read = set(documents_read(session, job_ids=[old.id, *(c.id for c in children)], names=names))
    written = handover(
        job_id=old.id,
        instruction=old.instruction,
        produced=produced_by(session, old, children),
        unread=[n for n in names if n not in read],
        next_step=instruction,
        max_tokens=new_budget // HANDOVER_SHARE,
        max_chars=settings.max_instruction_chars,
        profile=spec.profile,
        status=old.status,
    )
    new = create_job(
        session,
        tenant_id=tenant_id,
        instruction=written.text,
        document_ids=[d.document_id for d in old.documents],
        options=JobOptions.of(old).model_copy(
            update=given.chosen() | {"model": name, "budget": new_budget, "strategy": given.strategy}
        ),
    )
    new.continued_from_id = old.id
    warnings = [f"document {name} of job {job_id} no longer exists: the new job goes on without it" for name in gone]
    return Continued(new, warnings)


def deleted_documents(session: Session, job: Job) -> list[str]:
    """The names of the job's documents that were deleted since it was created (a deleted document leaves its
    jobs), as its opening message listed them; a message that lists them in no way ours does tells none."""
    opening = next((row.content for row in stored_rows(session, [job.id], seqs=[0])), None)
    text = opening if isinstance(opening, str) else ""
    listing = text[len(job.instruction.strip()) :].removeprefix("\n\n")
    found = re.fullmatch(r"Documents \((\d+)\): `(.*)`", listing, re.DOTALL)
    if found is None:
        return []
    listed = found[2].split("`, `")
    if len(listed) != int(found[1]) or opening_message(job.instruction, listed)["content"] != text:
        return []  # a name with "`, `" in it: the listing cannot be split by names
    kept = {d.name for d in job.documents}
    return [name for name in listed if name not in kept]


def continuation_of(session: Session, job_id: int) -> Job | None:
    return session.scalar(select(Job).where(Job.continued_from_id == job_id))


def produced_by(session: Session, job: Job, children: list[Job]) -> list[str]:
    """What the job wrote, oldest first: the text of its replies (its notes and its answer so far) and its
    subagents' reports."""
    replies = sorted(stored_rows(session, [job.id], role="assistant"), key=lambda row: row.seq)
    texts = [_text(row.content) for row in replies]
    reports = [f"Report of subagent {c.id}:\n{c.final_answer}" for c in children if c.final_answer]
    return [t for t in [*texts, *reports] if t]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text")
