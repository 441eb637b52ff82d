"""``python -m bench.storage`` scaled down (a sixth of the jobs, documents a sixth as long: about the same ratio of a
job's own messages to the documents), as docs/benchmarks/storage.md quotes the full run: every goal is met. The
messages of ended jobs are judged at rest, once the retention sweep has packed them (models/packing.py); as rows,
the fleet's documents' jobs store more than the documents (each job's own conversation), which the report shows
beside it."""

from __future__ import annotations

import pytest

from bench import storage

pytestmark = pytest.mark.bench


def test_the_storage_benchmark_meets_its_goals_scaled_down() -> None:
    report, goals = storage.run(scale=6)
    assert "| long documents (16,000 characters) | by reference | 5/5 |" in report
    assert [g.text for g in goals if not g.met] == [], report
