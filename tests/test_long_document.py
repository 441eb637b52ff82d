"""One document several times bigger than the job's budget, through the embedded stack (SQLite, the in-process
worker, the emulator counting with a real tokenizer): read once, page by page, noted, and the job ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from demo.chapters import chapters
from demo.run import notes_matching, run_demo
from models.db import Database
from models.history import all_messages
from models.jobs import steps_of
from models.tables import Job, JobStatus
from worker.tools import PAGE_SHARE, page_length


def page_starts(text: str, budget: int, profile: str) -> list[int]:
    """Where Plimsoll's read_document starts each page of ``text`` under ``budget``."""
    starts, offset = [], 0
    while offset < len(text):
        starts.append(offset)
        offset += page_length(text[offset:], budget // PAGE_SHARE, profile)
    return starts


def test_a_document_several_times_the_budget_is_read_once_in_pages(tmp_path: Path) -> None:
    budget, chars = 20_000, 250_000
    report = run_demo(tmp_path, count=1, chars=chars, budget=budget)
    (chapter,) = chapters(1, chars=chars)

    assert report.status == JobStatus.SUCCEEDED
    assert report.total_tokens > 4 * budget
    assert report.cleared_at_most > 0  # older pages were cleared before the last was read
    database = Database(f"sqlite:///{tmp_path / 'demo.sqlite3'}")
    try:
        with database.session() as session:
            job = session.scalars(select(Job)).one()
            reads = _read_calls(all_messages(session, job.id))
            steps = len(steps_of(session, job.id))
            answer, profile = job.final_answer or "", job.profile
    finally:
        database.dispose()

    pages = page_starts(chapter.text, budget, profile)
    assert len(pages) > 4
    assert reads == [{"name": chapter.name, **({"offset": start} if start else {})} for start in pages]
    assert steps <= len(pages) + 5  # list the documents, one step per page, the report
    assert notes_matching(answer, {chapter.name: chapter.text}) == {chapter.name}
    last = chapter.text[-1]
    assert notes_matching(answer, {chapter.name: chapter.text[:-1] + ("y" if last == "x" else "x")}) == set()


def _read_calls(messages: list[Any]) -> list[dict[str, Any]]:
    return [
        block["input"]
        for message in messages
        if message.role == "assistant" and isinstance(message.content, list)
        for block in message.content
        if block["type"] == "tool_use" and block["name"] == "read_document"
    ]
