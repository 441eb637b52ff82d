"""``python -m bench.events --scaled``: clients following running jobs' event streams on the API under uvicorn in a
process of its own, forced disconnects resumed with Last-Event-ID, the job's view at step 10 and 1,000, and
concurrent POSTs under idempotency keys; every default goal met. The full run: bench/results/events.md."""

from __future__ import annotations

import pytest

from bench import events

pytestmark = pytest.mark.bench  # a benchmark's run: `make check` leaves it out


def test_the_event_streams_meet_their_goals_with_the_default_settings() -> None:
    result = events.run(events.SCALED)
    report = events.render(events.SCALED, result)
    print(report)
    assert "NOT MET" not in report
    assert all(goal.met for goal in events.goals(result, events.SCALED))
    assert result.follow.latencies and result.resumes.disconnects == events.SCALED.disconnects
    assert result.polling.percentile(0.5) > result.follow.percentile(0.5)  # the baseline it improves on
