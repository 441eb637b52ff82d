"""The benchmarks the documentation quotes that have no scaled-down test of their own run here as the pages show
them (docs/benchmarks/): each prints its tables, the worker benchmark's steps all ran to their end (none left for the
reconciler), and the estimator meets the default profile's goals."""

from __future__ import annotations

import logging

import pytest

from bench import estimator, worker_overhead
from estimate_fit.trajectories import trajectory_conversations

# The tool-output set is drawn once per process (estimate_fit.tool_output caches it): its users share one xdist worker.
pytestmark = [pytest.mark.xdist_group("tool_output"), pytest.mark.bench]


# Measured and reported NOT MET (bench/results/worker_overhead.md): at 25 messages a step takes about 16 ms of our
# code against the baseline's two reads, 2.28× in the full run; the writes any durable step makes take 77 % of what
# the goal allows there. 1,000 messages meets it with room (0.50×).
WORKER_OVERHEAD_NOT_MET = (  # issue 39
    "time in our code per step ≤ 1.5× PostgreSQL alone for the same rows, at 25 messages",
)


@pytest.mark.serial  # times our code against PostgreSQL alone: the parallel pass's load would move it
def test_the_worker_overhead_benchmark_meets_its_goals_at_two_sizes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="worker.step")
    report, goals = worker_overhead.run(sizes=(25, 1_000), steps=3)
    for stored in ("| 25 |", "| 1,000 |"):
        assert stored in report
    assert "## Goals" in report and "PostgreSQL alone" in report and "a step's writes alone" in report
    assert not [r for r in caplog.records if "not queued" in r.getMessage()]
    unmet = [g.text for g in goals if not g.met]
    assert [text for text in unmet if not text.startswith(WORKER_OVERHEAD_NOT_MET)] == []
    if unmet:  # reported as xfailed, never as passed: issue 39 stays open until they are met
        pytest.xfail(f"NOT MET: {'; '.join(unmet)}")


# Measured and reported (docs/benchmarks/estimates.md): on the 39 held-out real agent runs the median run sits over
# 1.15 under cl100k (its fallback estimate: OpenAI's models count exactly by default). claude, the default, meets it.
KNOWN_SHORTFALL = (
    "cl100k: median conversation ≤ 1.15 (real agent runs, held out)",
    # fitted before the files written through tool calls were (tests/test_tool_output.py: KNOWN_LOW_WRITTEN)
    "cl100k: every file written through a tool call ≥ 500 tokens ≥ 0.9 (held out)",
    # Measured and reported (docs/benchmarks/estimates.md): languages whose words the tokenizers split finely (Māori,
    # Welsh, Basque; Mongolian and Kazakh in Cyrillic) are counted under by every profile; no fit has held the
    # catalogs' languages at their real count (the ASCII refit holds the Latin-script ones at their estimate before).
    *(f"{p}: every language of this machine's message catalogs never under" for p in estimator.FITTED),
)


def test_the_estimator_benchmark_judges_its_goals(capsys: pytest.CaptureFixture[str]) -> None:
    estimator.main()
    out = capsys.readouterr().out
    assert "## Goals" in out and "estimate_tokens('claude') ≥ 20× tiktoken encode on mixed text" in out
    assert "agent tool output" in out and "Real agent runs, held out" in out and "ms per MB" in out
    assert "## Files written through tool calls" in out and "Python, written by a tool call" in out
    assert "each language's messages in this machine's catalogs" in out
    runs = out.split("Each held-out run, whole", 1)[1].split("\n## ", 1)[0]
    assert all(f"| {run.name} |" in runs for run in trajectory_conversations(held_out=True))
    assert "| Latin | cl100k |" in out or "Skipped: no message catalogs" in out
    goals = out.split("## Goals", 1)[1]
    for goal in (
        "(held out)",
        "(real agent runs, held out)",
        "cl100k exact: ratio 1.00 on every message",
        "o200k exact: ratio 1.00 on every message",
    ):
        assert goal in goals
    not_met = [
        line for line in goals.splitlines() if "| NOT MET |" in line and not any(g in line for g in KNOWN_SHORTFALL)
    ]
    assert not_met == []
