"""Broad excepts log where an error was raised, never what it said: a message may quote a prompt or a document."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from models.db import Database
from models.tables import Job, now
from tests.support_worker import new_job
from worker.lease import reconcile
from worker.tracebacks import scrubbed_traceback

SECRET = "chapter-01.txt: the user's own words"


def _lookup(documents: dict[str, str]) -> str:
    return documents[SECRET]


def _read() -> str:
    try:
        return _lookup({})
    except KeyError as error:
        raise RuntimeError(f"could not read {SECRET}") from error


def test_the_traceback_names_types_files_lines_and_functions_but_no_message() -> None:
    with pytest.raises(RuntimeError) as raised:
        _read()
    text = scrubbed_traceback(raised.value)
    assert text.startswith("builtins.RuntimeError\n  test_tracebacks.py:")
    assert "in _read" in text and "raised while handling builtins.KeyError" in text and "in _lookup" in text
    assert SECRET not in text and "chapter-01" not in text


def test_the_reconciler_logs_a_failed_enqueue_with_a_scrubbed_traceback(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = new_job(database, {"a.txt": "Alpha."})
    with database.session() as session:
        session.get_one(Job, job_id).lease_until = now() - timedelta(seconds=1)

    def enqueue(job: int, step: int) -> None:
        _lookup({})

    caplog.set_level(logging.WARNING, logger="worker.lease")
    assert job_id in reconcile(database, lease_seconds=30, enqueue=enqueue)
    [line] = [r.getMessage() for r in caplog.records if f"job {job_id}:" in r.getMessage()]
    assert "could not queue step 0 again (KeyError)" in line and "in _lookup" in line
    assert SECRET not in line
