"""Compaction in the worker: the request a step sends, over the job's latest summary, or a summary request when
a compaction is due (``plimsoll.compaction`` decides; this module loads and stores).

A summary request is a step of its own: it is sent, retried and recorded like any other (stage
``compaction``), and its reply is stored as a :class:`~models.tables.Summary` beside the history, which is never
changed. The next step plans over the new summary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property, partial
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from models.tables import Job, Step, Strategy, now
from models.tables import Summary as SummaryRow
from plimsoll import Outline, Plan, bodies_needed, build_request, request_from
from plimsoll.compaction import (
    STAGE_1,
    Compaction,
    Previous,
    Summary,
    appended,
    plan_compaction,
    stored_index,
    summary_text,
    summary_tokens,
    view,
    view_history,
    with_instruction,
)
from plimsoll.history import History
from plimsoll.profiles import get_profile
from worker.providers.base import Reply
from worker.stored_history import Built, HistoryCache

# The summarize-everything baseline asks a separate summarizer, as LangChain's middleware does: no tools, its
# own system prompt, so its requests share no prefix with the agent's.
SUMMARIZER_SYSTEM = "You summarize conversations of an agent at work, exactly and without inventing anything."
Planner = Callable[[list[Outline], History], tuple[Plan, tuple[int, ...]]]


@dataclass(frozen=True)
class Stored:
    """What a step plans over: the job's stored outlines and the delegate results it carries (``every``, both),
    their History, where the stored bodies are read, and the job's previous step."""

    every: list[Outline]
    history: History
    carried: Sequence[dict[str, Any]]
    histories: HistoryCache
    previous: Step | None


@dataclass(frozen=True)
class Composed:
    """What a step sends: the plan, its request and breakpoints; for a summary request, also what it covers and
    what differs from an ordinary request."""

    plan: Plan
    request: list[dict[str, Any]]
    breakpoints: tuple[int, ...]
    compaction: Compaction | None = None
    system: str | None = None  # None: the job's
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None


_LATEST_SUMMARY = (
    select(SummaryRow).where(SummaryRow.job_id == bindparam("job_id")).order_by(SummaryRow.step.desc()).limit(1)
)


def latest_summary(session: Session, job_id: int) -> SummaryRow | None:
    return session.scalar(_LATEST_SUMMARY, {"job_id": job_id})


def compose(
    session: Session,
    job: Job,
    stored: Stored,
    planner: Planner,
    *,
    budget: int,
    overhead: int,
    cache_ttl_seconds: float,
) -> Composed:
    """The step's request: over the view of the latest summary, or the summary request a due compaction needs.
    Raises :class:`~plimsoll.DoesNotFit` as planning does."""
    every, carried, last = stored.every, stored.carried, stored.previous
    row = latest_summary(session, job.id)
    summary = Summary(row.last_seq + 1, row.token_estimate) if row else None
    shown = view(every, summary)
    chosen, breakpoints = planner(shown, view_history(every, stored.history, summary))
    due = None
    refused = last is not None and last.stage == "compaction" and last.reported_input_tokens is None
    if job.strategy == Strategy.PLIMSOLL and not refused:  # after a summary request refused as too long: not now
        due = plan_compaction(
            every,
            budget,
            profile=get_profile(job.profile),
            overhead=overhead,
            summary=summary,
            current=chosen,
            previous=_previous(last, row),
            policy=job.compaction,  # type: ignore[arg-type]  # checked when the job was created
            cached=Lazily(partial(_cached, session, job.id, row, cache_ttl_seconds)),
            max_output=job.max_output_tokens,
            history=stored.history,
        )
    kept = len(every) - len(carried)

    def bodies(plan: Plan, outlines: list[Outline], start: int = 0) -> dict[int, Any]:
        needed = bodies_needed(plan, outlines, start=start)
        seqs = [stored_index(i, summary) for i in needed]
        loaded = stored.histories.bodies(session, job.id, [s for s in seqs if s < kept])
        found = {i: loaded[s] if s < kept else carried[s - kept] for i, s in zip(needed, seqs, strict=True)}
        if row is not None and 0 in found:
            found[0] = _with_summary(found[0], row)
        return found

    if due is None:
        return Composed(chosen, _request(stored, job.id, chosen, shown, bodies, row), breakpoints)
    prefix = shown[: due.sent]
    request = with_instruction(build_request(due.request, prefix, bodies(due.request, prefix)), due)
    if due.replayed:
        return Composed(due.request, request, (), due, max_tokens=due.allowance)
    return Composed(due.request, request, (), due, SUMMARIZER_SYSTEM, [], max_tokens=due.allowance)


def _request(
    stored: Stored,
    job_id: int,
    chosen: Plan,
    shown: list[Outline],
    bodies: Callable[[Plan, list[Outline], int], dict[int, Any]],
    row: SummaryRow | None,
) -> list[dict[str, Any]]:
    """The step's request. Where this process built the job's previous request under the same plan and summary,
    it begins with what that one built from stored messages (they are the same: the index checked them), and only
    the messages after them are built: under batched clearing most steps plan as the one before, and a long job's
    request of thousands of messages is not built anew at each."""
    upto = len(shown) - len(stored.carried)  # the stored messages in the view; the carried results follow
    key = (row.id if row is not None else None, chosen.keep_from, chosen.note, chosen.cleared)
    before = stored.histories.built(job_id, key)
    if before is not None and chosen.keep_from <= before.upto <= upto:
        start = before.upto
        request = [*before.messages, *request_from(chosen, shown, bodies(chosen, shown, start), start=start)]
    else:
        request = build_request(chosen, shown, bodies(chosen, shown, 0))
    if chosen.keep_from <= upto:
        stored.histories.keep_built(job_id, Built(key, request[: len(request) - len(stored.carried)], upto))
    return request


def _previous(step: Step | None, row: SummaryRow | None) -> Previous | None:
    """The previous request, if a summary request may replay it: answered, at stage 1, over the same summary."""
    if step is None or step.reported_input_tokens is None or step.stage not in STAGE_1:
        return None
    if row is not None and step.step <= row.step:
        return None
    return Previous(step.messages_sent, tuple(step.cleared))


class Lazily(Iterable[Previous]):
    """The cached requests, read when first looked at: only a compaction that is due looks, and each of them
    carries every result its request cleared (thousands in a long job)."""

    def __init__(self, load: Callable[[], list[Previous]]) -> None:
        self._load = load

    @cached_property
    def _loaded(self) -> list[Previous]:
        return self._load()

    def __iter__(self) -> Iterator[Previous]:
        return iter(self._loaded)


def _cached(session: Session, job_id: int, row: SummaryRow | None, ttl_seconds: float) -> list[Previous]:
    """The requests over the latest summary whose prefix the provider still caches: answered at stage 1 within
    the cache's lifetime (each ended with a breakpoint on its last block, and that entry is not read again, so
    it lives from when it was written)."""
    since = now() - timedelta(seconds=ttl_seconds)
    query = select(Step).where(
        Step.job_id == job_id,
        Step.step > (row.step if row is not None else 0),
        Step.stage.in_(STAGE_1),
        Step.reported_input_tokens.is_not(None),
        Step.created_at > since,  # not every step of a long job, each with what it cleared
    )
    return [
        Previous(step.messages_sent, tuple(step.cleared))
        for step in session.scalars(query)
        if _aware(step.created_at) > since
    ]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _with_summary(first: dict[str, Any], row: SummaryRow) -> dict[str, Any]:
    return appended(first, summary_text(row.content, row.last_seq + 1))


def store_summary(session: Session, job: Job, compaction: Compaction, reply: Reply, *, step: int) -> SummaryRow:
    """The reply to a summary request, stored as the job's newest summary (tool calls in it are ignored)."""
    text = "\n".join(b["text"] for b in reply.content if b.get("type") == "text").strip()
    usage = reply.usage
    row = SummaryRow(
        job_id=job.id,
        step=step,
        first_seq=1,
        last_seq=compaction.end - 1,
        content=text,
        token_estimate=summary_tokens(text, compaction.end, get_profile(job.profile)),
        replayed=compaction.replayed,
        input_tokens=usage.input_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
    )
    session.add(row)
    return row
