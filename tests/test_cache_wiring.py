"""The worker feeds the cache-economic policy what it knows (what the previous request cleared, how long ago it
was sent, the cache's lifetime) and puts the Anthropic adapter's cache marks where the policy expects the
prefix to stay; through the real stack the job reads most of its input from the cache and never exceeds four
marks (the emulator, like Anthropic, refuses more)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from demo.run import run_demo
from models.tables import Step
from worker.providers.cache_breakpoints import with_cache_breakpoints
from worker.step.plan import cache_view

SENT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def step(cleared: list[str], reported: int | None = 1_000) -> Step:
    return Step(cleared=cleared, reported_input_tokens=reported, created_at=SENT)


def test_the_cache_view_comes_from_the_previous_request() -> None:
    warm = cache_view(step(["t1", "t2"]), ttl_seconds=300, at=SENT + timedelta(seconds=20))
    assert (warm.previous_cleared, warm.idle_seconds, warm.cold) == (("t1", "t2"), 20.0, False)
    assert cache_view(step([]), ttl_seconds=300, at=SENT + timedelta(minutes=7)).cold  # past the lifetime
    assert cache_view(None, ttl_seconds=300, at=SENT).cold  # the job's first request
    assert cache_view(step([], reported=None), ttl_seconds=300, at=SENT).cold  # nothing came back


def test_the_planned_breakpoints_are_marked_and_four_marks_are_never_exceeded() -> None:
    messages = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"m{n}"}]}
        for n in range(7)
    ]
    system, marked, tools = with_cache_breakpoints(
        system="S", messages=messages, tools=[{"name": "t", "input_schema": {}}], breakpoints=(1, 3, 5)
    )
    marks = [i for i, m in enumerate(marked) if any("cache_control" in b for b in m["content"])]
    assert marks == [3, 5, 6]  # the two newest planned ends, and the last message
    assert "cache_control" in system[0] and not any("cache_control" in t for t in tools)
    assert all("cache_control" not in b for m in messages for b in m["content"])  # the caller's dicts untouched


def test_through_the_stack_most_input_is_read_from_the_cache(tmp_path: Path) -> None:
    report = run_demo(tmp_path, count=16, chars=12_000, budget=40_000)
    assert report.status == "succeeded" and report.chapters_read == 16
    assert report.stage_reached == "cleared_results"
    assert report.max_request <= 40_000
    assert report.cache_read_share >= 0.6, report
