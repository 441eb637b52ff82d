"""What budget a job would need, measured from its own history: named in the notices of a job whose budget could
not hold its work (worker/step/endings.py), so that the person can submit it again with one that does.

A request must carry the fixed parts (the system prompt, the tool schemas, the first message), the agent's notes
(what it wrote itself, which clearing never removes and a summary keeps), and the newest tool results whole. The
notes are measured as far as the job got and scaled to all its documents: the notes written, over the share of
the started documents' characters their results held, per document started, times the documents. A tool result
is at most a quarter of the budget (worker/tools.py's pages), so the fixed parts and the notes may take at most
the other three quarters; the largest result seen must fit beside them too. A quarter more covers what the
measure misses (the reply's own tool calls, estimates that run under the model's counts), and the figure is
rounded up to a multiple of ``ROUNDED_TO``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.history import all_messages
from models.tables import Document, Job, JobDocument
from plimsoll import estimate_tokens
from worker.tools import PAGE_SHARE

MARGIN = 1.25
ROUNDED_TO = 500


def budget_needed(session: Session, job: Job, *, overhead: int, factor: float) -> int:
    """The budget (the model's tokens, ``factor`` being the job's calibration) that holds what the job needs,
    given ``overhead``, the estimate of its system prompt and tool schemas."""
    messages = all_messages(session, job.id)
    notes: set[str] = set()
    results: set[str] = set()
    started: set[str] = set()
    largest_result = 0
    for message in messages[1:]:
        blocks: list[Any] = message.content if isinstance(message.content, list) else []
        if message.role == "assistant":
            notes.update(b["text"] for b in blocks if b.get("type") == "text" and b["text"].strip())
            started.update(
                str(b["input"].get("name"))
                for b in blocks
                if b.get("type") == "tool_use" and b.get("name") == "read_document"
            )
        elif any(b.get("type") == "tool_result" for b in blocks):
            largest_result = max(largest_result, message.token_estimate)
            results.update(_text(b.get("content")) for b in blocks if b.get("type") == "tool_result")
    written = sum(estimate_tokens(note, job.profile) for note in notes)
    sizes = dict(_sizes(session, job.id))
    started_chars = sum(sizes.get(name, 0) for name in started)
    read_share = min(1.0, sum(map(len, results)) / started_chars) if started_chars else 1.0
    all_notes = math.ceil(written / max(read_share, 0.01) * max(len(sizes), 1) / max(len(started), 1))
    kept = overhead + messages[0].token_estimate + all_notes
    needed = max(kept * PAGE_SHARE / (PAGE_SHARE - 1), kept + largest_result) * MARGIN * factor
    return max(ROUNDED_TO, math.ceil(needed / ROUNDED_TO) * ROUNDED_TO)


def _sizes(session: Session, job_id: int) -> Sequence[tuple[str, int]]:
    """The job's documents: their names and sizes in characters."""
    query = select(JobDocument.name, Document.chars).join(Document, Document.id == JobDocument.document_id)
    return [(name, chars) for name, chars in session.execute(query.where(JobDocument.job_id == job_id))]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return str(content or "")
