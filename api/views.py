"""Building the answers that gather more than one row."""

from __future__ import annotations

import math

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from api.schemas import (
    ChildJob,
    CostSplit,
    JobCost,
    JobCostLine,
    JobSummary,
    JobView,
    LastRequest,
    Limits,
    Progress,
    Reading,
    Usage,
)
from models.catalogue import CATALOGUE, lifecycle_warning
from models.continuation import continuation_of
from models.endpoints import host_of
from models.events import latest_event_id
from models.history import read_calls
from models.jobs import children_of
from models.ledger import Spent, job_spending
from models.reads import Reads, merged_reads, reads_from_calls
from models.tables import Document, Job, Step
from models.usage import cost_vs_uncached

EXCERPT_CHARS = 120


def job_view(session: Session, job: Job) -> JobView:
    children = children_of(session, job.id)
    names = [document.name for document in job.documents]
    step = last_request_of(session, job.id)
    # Subagents read the job's documents on its behalf: their reads count as the job's progress. Kept as steps
    # commit; a job from before that reads its messages, unless they were purged, which left the names behind.
    reads = merged_reads([job, *children])
    if reads is None and job.history_purged_at:
        reads = Reads(job.purged_documents_read or [], None, 0)
    elif reads is None:
        reads = reads_from_calls(read_calls(session, job_ids=[job.id, *(c.id for c in children)]), names)
    return JobView(
        id=job.id,
        kind=job.kind,
        parent_id=job.parent_id,
        status=job.status,
        instruction=job.instruction,
        model=job.model,
        provider=job.provider,
        endpoint=host_of(job.endpoint) if job.endpoint else None,
        emulator=job.emulator,
        budget=job.budget,
        hard_limit=job.hard_limit,
        locale=job.locale,
        strategy=job.strategy,
        safety_net=job.safety_net,
        compaction=job.compaction,
        progress=Progress(
            steps_done=job.step,
            documents_total=len(names),
            documents_read=reads.documents,
            reading=None if job.status.finished else reading(session, job, reads),
        ),
        usage=usage_of(job),
        cost=job_cost(session, job),
        retries=job.retries,
        limits=Limits.model_validate(job),
        last_request=step,
        final_answer=job.final_answer,
        error=job.error,
        created_at=job.created_at,
        updated_at=job.updated_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        children=[child_job(child) for child in children],
        warnings=model_warnings(job.model),
        continued_from=job.continued_from_id,
        continued_by=continuation.id if (continuation := continuation_of(session, job.id)) else None,
        last_event_id=latest_event_id(session, job.id),
        held=job.held,
        history_purged_at=job.history_purged_at,
    )


def reading(session: Session, job: Job, reads: Reads) -> Reading | None:
    """The document read last and the page: pages read of it so far, and about how many it has (its length over
    the mean page read so far; pages are a quarter of the budget in tokens, so their lengths vary a little)."""
    known = {d.name: d for d in job.documents}
    if reads.last is None or reads.last[0] not in known:
        return None
    name, offset = reads.last
    entry = known[name]
    characters = session.scalar(select(Document.chars).where(Document.id == entry.document_id)) or 0
    page = reads.pages_of_last
    pages = math.ceil(characters / (offset / (page - 1))) if offset and page > 1 else None
    return Reading(
        document=name, document_number=entry.position + 1, page=page, pages=pages, characters_from=offset,
        characters=characters,
    )  # fmt: skip


def child_job(child: Job) -> ChildJob:
    return ChildJob(id=child.id, status=child.status, error=child.error, steps_done=child.step)


def model_warnings(model: str) -> list[str]:
    spec = CATALOGUE.get(model)
    warning = lifecycle_warning(spec) if spec is not None else None
    return [warning] if warning else []


def usage_of(job: Job) -> Usage:
    total_input = job.total_input_tokens
    return Usage(
        input_tokens=job.input_tokens,
        output_tokens=job.output_tokens,
        cache_read_tokens=job.cache_read_tokens,
        cache_write_tokens=job.cache_write_tokens,
        cache_read_share=job.cache_read_tokens / total_input if total_input else None,
        cost_vs_uncached=cost_vs_uncached(job) if total_input else None,
    )


def job_cost(session: Session, job: Job) -> JobCost:
    total, lines = job_spending(session, job)
    return JobCost(
        **split(total).model_dump(),
        jobs=[
            JobCostLine(job_id=job_id, kind="main" if job_id == job.id else "subagent", **split(spent).model_dump())
            for job_id, spent in lines.items()
        ],
    )


def split(spent: Spent) -> CostSplit:
    return CostSplit(
        total_usd=float(spent.total),
        uncached_input_usd=float(spent.uncached),
        cache_write_usd=float(spent.cache_write),
        cache_read_usd=float(spent.cache_read),
        output_usd=float(spent.output),
        requests=spent.requests,
        by_kind={kind: float(usd) for kind, usd in sorted(spent.by_kind.items())},
    )


def last_request_of(session: Session, job_id: int) -> LastRequest | None:
    """The job's last request, as its last step recorded it. The results it cleared are counted by the database:
    a long job's list of them would otherwise be read at every view, its cost growing with the job's steps."""
    length = func.jsonb_array_length if session.get_bind().dialect.name == "postgresql" else func.json_array_length
    query = select(Step, length(Step.cleared)).options(defer(Step.cleared)).where(Step.job_id == job_id)
    found = session.execute(query.order_by(Step.step.desc()).limit(1)).first()
    if found is None:
        return None
    step, cleared = found
    return LastRequest(
        step=step.step,
        stage=step.stage,
        planning_budget=step.planning_budget,
        calibration_factor=step.calibration_factor,
        estimated_tokens=step.estimated_tokens,
        reported_input_tokens=step.reported_input_tokens,
        messages_sent=step.messages_sent,
        cleared=int(cleared or 0),
        dropped=step.dropped,
        stop_reason=step.stop_reason,
        created_at=step.created_at,
    )


def job_summary(job: Job, cost_usd: float | None = None) -> JobSummary:
    first_line = job.instruction.strip().split("\n", 1)[0]
    excerpt = first_line if len(first_line) <= EXCERPT_CHARS else first_line[: EXCERPT_CHARS - 1] + "…"
    return JobSummary(
        id=job.id,
        kind=job.kind,
        parent_id=job.parent_id,
        status=job.status,
        model=job.model,
        endpoint=host_of(job.endpoint) if job.endpoint else None,
        emulator=job.emulator,
        steps_done=job.step,
        cost_usd=cost_usd,
        instruction_excerpt=excerpt,
        created_at=job.created_at,
        finished_at=job.finished_at,
    )
