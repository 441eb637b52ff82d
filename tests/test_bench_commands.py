"""The benchmarks the README quotes that have no scaled-down test of their own run here as the README shows
them: each prints its tables, the worker benchmark's steps all ran to their end (none left for the
reconciler), and the estimator meets the default profile's goals."""

from __future__ import annotations

import logging

import pytest

from bench import estimator, worker_overhead


def test_the_worker_overhead_benchmark_times_every_size(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="worker.runner")
    worker_overhead.main()
    out = capsys.readouterr().out
    for stored in ("| 10 |", "| 100 |", "| 1,000 |"):
        assert stored in out
    assert not [r for r in caplog.records if "not queued" in r.getMessage()]


def test_the_estimator_benchmark_judges_its_goals(capsys: pytest.CaptureFixture[str]) -> None:
    estimator.main()
    out = capsys.readouterr().out
    assert "## Goals" in out and "estimate_tokens('claude') ≥ 20× tiktoken encode on mixed text" in out
    assert "agent tool output" in out
    # The default profile's goals are met, not only printed (the others' are issue 19's).
    goals = [cells(line) for line in out.split("## Goals", 1)[1].splitlines() if line.startswith("| ")][1:]
    default = [goal for goal in goals if goal[0].startswith(("claude:", "estimate_tokens('claude')"))]
    assert default and all(verdict == "met" for _, verdict, _ in default), default


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]
