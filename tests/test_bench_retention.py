"""The retention benchmark's scaled run (``python -m bench.retention``): a real sweep process killed with SIGKILL
mid-way leaves no half-purged job, the next sweep purges every due history and keeps the held and recent ones
whole, and the API's latency is measured beside a baseline in the same run (judged at full size only: the scaled
sweep is over too soon for a p99)."""

from __future__ import annotations

import pytest

from bench import retention

pytestmark = [pytest.mark.bench, pytest.mark.worker]


def test_a_killed_sweep_leaves_no_half_purged_job_and_the_next_one_finishes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = retention.main([])
    out = capsys.readouterr().out
    latency, killed, finished = retention.goals(result)

    assert "## The API's latency, without and during the sweep (same run)" in out
    assert killed.met, killed.measured
    assert finished.met, finished.measured
    assert latency.met is not False, latency.measured
    assert len(result.quiet) > 0 and len(result.sweeping) > 0 and result.errors == 0
    assert 0 < result.killed_after < result.size.families
