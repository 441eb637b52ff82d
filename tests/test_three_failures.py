"""The three published failures, scaled down, through the real stack: the API, PostgreSQL, Redis, a Celery worker,
the Anthropic SDK and the emulator (``bench/three_failures.py`` at full scale writes the report)."""

from __future__ import annotations

from typing import Any

from bench.three_failures import Scale, Stack, run
from emulator import EmulatorServer
from models.db import Database
from models.statuses import Strategy
from models.tenants import create_tenant
from testbed.stack import api_server

# The write-up's figures divided by 20 (limit 50,000, budget 20,000, chapters of ~2,200 tokens), 2 subagents.
SCALE = Scale(factor=20, subagents=2, chapters_per_subagent=24, anxious_chapters=40)


def test_legacy_subagents_outgrow_the_model_and_plimsoll_ones_finish_and_the_safety_net_keeps_the_agent_going(
    database: Database, database_url: str, emulator_reset: EmulatorServer, celery_worker: Any, allow_reproductions: None
) -> None:
    with database.session() as session:
        _, key = create_tenant(session, name="three-failures-test")
    with api_server(database_url) as api_url:
        results, anxious = run(
            Stack(database, api_url, emulator_reset, key),
            SCALE,
            configurations=(Strategy.LEGACY, Strategy.PLIMSOLL),
            report=False,
        )
    legacy, plimsoll = results

    assert [s.rejected for s in legacy.subagents] == [True, True]
    assert all(max(s.requests) > SCALE.budget for s in legacy.subagents)

    assert [s.status for s in plimsoll.subagents] == ["succeeded", "succeeded"]
    assert [s.noted for s in plimsoll.subagents] == [SCALE.chapters_per_subagent] * 2  # every chapter, really read
    assert max(plimsoll.requests()) <= SCALE.budget < SCALE.limit

    without, with_net = anxious
    assert not without.safety_net and without.read < SCALE.anxious_chapters
    assert "save space" in without.ended
    assert with_net.safety_net and with_net.read == SCALE.anxious_chapters
    assert with_net.ended.startswith("REPORT: 40 documents")
