"""The watch panel: each subagent's progress on a line of its own, and an estimate of the time left at the pace
of the documents read so far."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console

from api.schemas import JobView
from cli.watch import job_panel, time_left

STARTED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def job(status: str = "running", read: int = 3, total: int = 12, **fields: Any) -> JobView:
    view = {
        "id": 7, "kind": "main", "parent_id": None, "status": status, "instruction": "Read.", "model": "m",
        "provider": "anthropic", "budget": 1000, "hard_limit": 2000, "locale": "en", "strategy": "plimsoll",
        "safety_net": True, "retries": 0, "last_request": None, "final_answer": None, "error": None,
        "progress": {"steps_done": 5, "documents_total": total, "documents_read": [f"{n}.txt" for n in range(read)]},
        "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0,
                  "cache_read_share": None},
        "limits": {"max_steps": 1000, "max_input_tokens": 50_000_000, "max_cost_usd": 250, "wind_down": True},
        "created_at": STARTED, "updated_at": STARTED, "started_at": STARTED, "finished_at": None, "children": [],
    }  # fmt: skip
    return JobView.model_validate({**view, **fields})


def test_time_left_follows_the_pace_of_the_documents_read() -> None:
    assert time_left(job(read=3, total=12), STARTED + timedelta(minutes=6)) == timedelta(minutes=18)
    assert time_left(job(read=0), STARTED + timedelta(minutes=6)) is None  # no pace yet
    assert time_left(job(read=12), STARTED + timedelta(minutes=6)) is None
    assert time_left(job(status="failed"), STARTED + timedelta(minutes=6)) is None


def test_the_panel_shows_every_subagent_and_why_one_did_not_finish() -> None:
    children = [
        {"id": 8, "status": "succeeded", "error": None, "steps_done": 12},
        {"id": 9, "status": "needs_new_chat", "error": "prompt is too long", "steps_done": 4},
    ]
    console = Console(record=True, width=120)
    console.print(job_panel(job(children=children)))
    text = console.export_text()
    assert "subagent 8" in text and "succeeded · 12 steps" in text
    assert "subagent 9" in text and "needs_new_chat · 4 steps · prompt is too long" in text
    assert "Time left" in text


def test_the_panel_shows_the_page_of_a_long_document_being_read() -> None:
    reading = {"document": "long.txt", "document_number": 3, "page": 87, "pages": 208, "characters_from": 1_740_000,
               "characters": 4_160_000}  # fmt: skip
    progress = {"steps_done": 90, "documents_total": 5, "documents_read": ["a.txt", "b.txt", "long.txt"]}
    console = Console(record=True, width=120)
    console.print(job_panel(job(progress={**progress, "reading": reading})))
    text = console.export_text()
    assert "Reading" in text and "doc 3 of 5 (long.txt), page 87 of about 208" in text


def test_the_cache_line_says_what_the_ratio_means_not_that_the_job_cost_more() -> None:
    def cache_line(ratio: float) -> str:
        usage = {"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 700, "cache_write_tokens": 200,
                 "cache_read_share": 0.7, "cost_vs_uncached": ratio}  # fmt: skip
        console = Console(record=True, width=160)
        console.print(job_panel(job(usage=usage)))
        return next(line for line in console.export_text().splitlines() if "Cache reads" in line)

    assert "70% of input tokens · input 69% cheaper than uncached" in cache_line(0.31)
    assert "cache writes so far cost 19% more than they saved" in cache_line(1.19)
    assert "x uncached" not in cache_line(1.19)
