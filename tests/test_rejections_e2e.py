"""A rejection is a measurement, on the real stack (PostgreSQL, a Celery worker, the emulator): when the model's
tokenizer starts counting 30 % more than the profile expects, the first request over the window is planned
again once with the size the rejection states, and the job finishes; later jobs of the model start calibrated.
A budget too small for the first message gets its own notice."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from sqlalchemy import select

from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.jobs import steps_of
from models.ledger import ChargeKind
from models.tables import Charge, JobKind, JobStatus, Notice
from plimsoll.notices import stopped_notice
from tests.support import wait_until
from tests.support_worker import submit, wait_for

pytestmark = pytest.mark.usefixtures("celery_worker")

BUDGET = 10_000
OUTPUT = 16_000  # the emulator model's output limit: the window must hold it beside the input


def stage_one_reached(database: Database, job_id: int, timeout: float = 60) -> None:

    def cleared() -> bool:
        with database.session() as session:
            return any(s.stage == "cleared_results" for s in steps_of(session, job_id))

    wait_until(cleared, timeout, "the job had to clear results")


def test_a_rejection_stating_the_size_is_planned_again_once_and_the_job_finishes(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    emulator_reset.configure(limit=BUDGET + OUTPUT)
    # Many small results: once results are being cleared, clearing four at a time keeps every request within
    # about a tenth of the budget, so the first request after the change is over the window whenever it comes.
    texts = {c.name: c.text for c in chapters(50, chars=1_200, languages=("en",))}
    job_id = submit(database, texts, kind=JobKind.SUBAGENT, budget=BUDGET)
    stage_one_reached(database, job_id)
    # The provider moves the model to a tokenizer that counts 30 % more: requests planned at the budget with
    # what the calibrator knew are now over the window.
    emulator_reset.configure(count_scale=1.3)
    job = wait_for(database, job_id, timeout=120)

    assert job.status == JobStatus.SUCCEEDED, job.error
    with database.session() as session:
        steps = steps_of(session, job_id)
    replanned = [s for s in steps if s.rejected_tokens is not None]
    assert len(replanned) == 1
    [step] = replanned
    assert step.rejected_tokens is not None and step.rejected_tokens > BUDGET  # the first attempt really was over ...
    assert step.reported_input_tokens is not None and step.reported_input_tokens <= BUDGET  # ... the second is not
    assert step.estimated_tokens < (step.rejected_estimate or 0)  # a new, smaller request, not a retry
    # One step sent two requests, every other step one: counted in this job's own ledger, since the session's
    # emulator also counts any request an earlier test's job still sends meanwhile (CI saw one: 55 for 53 steps).
    with database.session() as session:
        kinds = Counter(session.scalars(select(Charge.kind).where(Charge.job_id == job_id)))
    assert kinds.total() == len(steps) + 1 and kinds[ChargeKind.REFUSED] == kinds[ChargeKind.REPLAN] == 1, kinds
    assert sum(emulator_reset.stats()["rejections"].values()) == 1

    # The next job of the model starts from what this one learned: no rejection at all.
    second = submit(database, texts, kind=JobKind.SUBAGENT, budget=BUDGET)
    job = wait_for(database, second, timeout=120)
    assert job.status == JobStatus.SUCCEEDED, job.error
    with database.session() as session:
        assert all(s.rejected_tokens is None for s in steps_of(session, second))
    assert sum(emulator_reset.stats()["rejections"].values()) == 1


def test_a_budget_too_small_for_the_first_message_gets_its_own_notice(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    job_id = submit(database, {"a.txt": "Alpha."}, budget=1_000, instruction="Read every line of it carefully. " * 400)
    job = wait_for(database, job_id, timeout=60)

    assert job.status == JobStatus.FAILED
    named = re.fullmatch(
        r"the budget of 1,000 tokens is too small for the job's first message with its notes and one round of "
        r"tool results "
        r"\(([\d,]+) would hold them\)",
        job.error or "",
    )
    assert named, job.error
    needed = int(named[1].replace(",", ""))
    assert emulator_reset.stats()["requests"] == 0  # nothing that could not fit was sent
    with database.session() as session:
        notices = list(session.scalars(select(Notice.text).where(Notice.job_id == job_id)))
        records = steps_of(session, job_id)
        assert [(s.stage, s.messages_sent) for s in records] == [("does_not_fit", 0)]
    assert needed > records[0].estimated_tokens  # the first message it could not send fits the named budget
    assert notices == [stopped_notice("budget", "en", budget=1_000, needed=needed)]
