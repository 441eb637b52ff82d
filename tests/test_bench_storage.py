"""``python -m bench.storage`` scaled down (a sixth of the jobs, documents a sixth as long: about the same ratio of a
job's own messages to the documents), as docs/benchmarks/storage.md quotes the full run: every goal is met but
one, which the fleet's documents cannot meet (the page says why): with pages stored by reference, what is left
per job is its own conversation (its instruction, the agent's notes and calls, about 4.5 kB of rows), which for
thirty jobs is more than four chapters of 24,000 characters. The test fails on any other goal NOT MET, and if
that one is ever met, so that the page is corrected."""

from __future__ import annotations

import pytest

from bench import storage

UNMEETABLE_HERE = [
    "the fleet's documents (4,000 characters): 5 jobs reading the same 4 documents: stored message bytes <= 1.1x "
    "the documents' own stored bytes"
]

pytestmark = pytest.mark.bench


def test_the_storage_benchmark_meets_its_goals_scaled_down() -> None:
    report, goals = storage.run(scale=6)
    assert "| long documents (16,000 characters) | by reference | 5/5 |" in report
    assert [g.text for g in goals if not g.met] == UNMEETABLE_HERE, report
