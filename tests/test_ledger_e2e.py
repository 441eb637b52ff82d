"""The ledger against the emulator's own billing log, through a real Celery worker: a main job with subagents, a
job that compacts, and a step run twice (its lease lapsed mid-call and the reconciler handed it to another
delivery). Every request the emulator billed is one charge under its request id, with its usage, and the ledger
equals the billing log priced at the same prices; the duplicate is there, as waste."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select, update

from bench.budgets_report import billed_usd
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.history import all_messages
from models.ledger import ChargeKind
from models.settings import Settings
from models.tables import Charge, Job, JobStatus, now
from tests.support import wait_until
from tests.support_worker import quiet_fleet, submit, wait_for
from worker.lease import reconcile
from worker.queue import enqueue_step

LONG_OUTPUT = "Read every document and write a summary of each document in your own message; then report."
LATENCY = 1.5  # seconds per request while the duplicate is made: long enough to catch a step mid-call


def counted(model: str, kind: str) -> float:
    """plimsoll_cost_usd_total{model, kind} as the workers in this process count it."""
    return REGISTRY.get_sample_value("plimsoll_cost_usd_total", {"model": model, "kind": kind}) or 0.0


def run_twice_mid_call(database: Database, emulator: EmulatorServer, job_id: int) -> int:
    """Catch the job's step while its request waits at the emulator, let its lease lapse, and let the reconciler
    hand the step to another delivery, which sends the same request again; the step it was at."""
    emulator.configure(latency_seconds=LATENCY)

    def mid_call() -> int | None:
        with database.session() as session:
            job = session.get_one(Job, job_id)
            return job.step if job.lease_owner is not None and job.step >= 2 else None

    step = wait_until(mid_call, 60, "a step of the job mid-call", every=0.05)
    billed = len(emulator.billing())
    with database.session() as session:  # the deadline passes while the call is still out
        session.execute(update(Job).where(Job.id == job_id).values(lease_until=now() - timedelta(seconds=1)))
    settings = Settings()
    assert reconcile(database, lease_seconds=settings.lease_seconds, enqueue=enqueue_step, recover=enqueue_step)
    wait_until(lambda: len(emulator.billing()) >= billed + 2 or None, 30, "both deliveries answered", every=0.1)
    emulator.configure(latency_seconds=0.0)
    return step


def test_the_ledger_equals_the_emulators_billing_log_with_subagents_a_compaction_and_a_duplicate(
    database: Database, emulator_reset: EmulatorServer, celery_worker: Any
) -> None:
    quiet_fleet(database, emulator_reset)  # the billing log holds this test's requests only
    settings = Settings()
    counted_before = {kind: counted(settings.default_model, kind) for kind in ChargeKind}
    compacting = submit(
        database, {c.name: c.text for c in chapters(10, chars=1_600)}, instruction=LONG_OUTPUT, budget=9_000
    )
    delegating = submit(database, {c.name: c.text for c in chapters(12, chars=1_200)}, budget=30_000)
    twice = run_twice_mid_call(database, emulator_reset, compacting)
    for job_id in (compacting, delegating):
        assert wait_for(database, job_id, timeout=240).status == JobStatus.SUCCEEDED

    billing = emulator_reset.billing()
    with database.session() as session:
        charges = list(session.scalars(select(Charge).where(Charge.main_job_id.in_([compacting, delegating]))))
        subagents = list(session.scalars(select(Job.id).where(Job.parent_id == delegating)))
        # A request of a job an earlier test left, answered after quiet_fleet's reset, is charged to that job.
        others = set(
            session.scalars(
                select(Charge.request_id).where(
                    Charge.request_id.in_([entry["request_id"] for entry in billing]),
                    Charge.main_job_id.not_in([compacting, delegating]),
                )
            )
        )
    billing = [entry for entry in billing if entry["request_id"] not in others]
    paid = {c.request_id: c for c in charges if c.kind != ChargeKind.REFUSED}
    # Every billed request is one charge, under the id the emulator answered it with, with its usage.
    assert len(paid) == len([c for c in charges if c.kind != ChargeKind.REFUSED]) == len(billing)
    assert set(paid) == {entry["request_id"] for entry in billing}
    for entry in billing:
        charge = paid[entry["request_id"]]
        tokens = (charge.uncached_tokens, charge.cache_write_tokens, charge.cache_read_tokens, charge.output_tokens)
        assert tokens == (
            entry["uncached_tokens"],
            entry["cache_write_tokens"],
            entry["cache_read_tokens"],
            entry["output_tokens"],
        )
        assert charge.total_usd == billed_usd(entry, settings)  # each at the prices it stores
    ledger = sum((c.total_usd for c in charges), Decimal(0))
    log = sum((billed_usd(entry, settings) for entry in billing), Decimal(0))
    assert log > 0 and abs(ledger - log) <= log / 1000  # the goal: within 0.1 % (here: equal)

    kinds = Counter((c.main_job_id, c.kind) for c in charges)
    assert kinds[compacting, ChargeKind.COMPACTION] >= 1
    wasted = [c for c in charges if c.kind == ChargeKind.WASTED]
    assert [(c.job_id, c.step) for c in wasted] == [(compacting, twice)]  # the step run twice: paid twice
    assert len({c.delivery for c in charges if c.job_id == compacting and c.step == twice}) == 2
    assert wasted[0].total_usd > 0
    # The workers' counter (they run in this process) counted each request once, with the kind it ended with.
    for kind in ChargeKind:
        spent = sum((c.total_usd for c in charges if c.kind == kind), Decimal(0))
        assert counted(settings.default_model, kind) - counted_before[kind] == pytest.approx(float(spent), abs=1e-9)
    assert len(subagents) == 2 and {c.job_id for c in charges if c.main_job_id == delegating} == {
        delegating,
        *subagents,
    }


def test_the_default_caps_on_subagents_answer_the_calls_over_them_and_a_429_is_a_refused_charge_of_nothing(
    database: Database, emulator_reset: EmulatorServer, celery_worker: Any
) -> None:
    settings = Settings()
    assert (settings.max_subagents_per_call, settings.max_subagents_per_job) == (10, 20)
    emulator_reset.configure(delegate_group=1, faults={"script": ["429"], "retry_after_seconds": 0.2})
    texts = {c.name: c.text for c in chapters(settings.max_subagents_per_call + 2, chars=600)}
    job_id = submit(database, texts, budget=30_000)
    job = wait_for(database, job_id, timeout=240)

    assert job.status == JobStatus.SUCCEEDED, job.error
    with database.session() as session:
        children = list(session.scalars(select(Job).where(Job.parent_id == job_id)))
        charges = list(session.scalars(select(Charge).where(Charge.main_job_id == job_id)))
        results = [
            block
            for message in all_messages(session, job_id)
            if message.role == "user" and isinstance(message.content, list)
            for block in message.content
            if block.get("type") == "tool_result"
        ]
    assert len(children) == settings.max_subagents_per_call
    not_started = [b for b in results if b.get("is_error") and "Not started" in str(b["content"])]
    assert len(not_started) == 2  # the calls over the cap, answered: the agent went on and reported
    refused = [c for c in charges if c.kind == ChargeKind.REFUSED]
    assert len(refused) == 1 and refused[0].total_usd == 0 and refused[0].job_id == job_id
    assert len([c for c in charges if c.kind != ChargeKind.REFUSED]) == len(emulator_reset.billing())
