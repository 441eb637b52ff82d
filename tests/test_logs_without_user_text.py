"""Log lines carry no user text (instructions, documents, model output, a statement's values), as Sentry's events
already do not: where an error was raised and its kind, never what it said nor the source lines around it. (The
API's unhandled errors: tests/test_api_edges.py.)"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from models.db import Database
from worker import scheduler, tasks
from worker.names import RECONCILE_TASK

SECRET = "the person's confidential chapter text"


def test_the_health_check_logs_the_databases_failure_by_kind_only(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = Database("postgresql+psycopg://someone:a-password@127.0.0.1:9/secret_name?connect_timeout=2")
    app = create_app(database=unreachable, enqueue=lambda *_: None)
    with TestClient(app) as client, caplog.at_level(logging.WARNING):
        answer = client.get("/healthz")
    assert answer.status_code == 503
    assert "OperationalError" in caplog.text
    assert "secret_name" not in caplog.text and "127.0.0.1" not in caplog.text


def test_a_failed_reconciler_round_is_logged_by_kind_and_place_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failing() -> int:
        raise ValueError(SECRET)

    monkeypatch.setattr(tasks, "reconcile_now", failing)
    beat = SimpleNamespace(scheduler_lock=SimpleNamespace(held=lambda: True))
    entry = SimpleNamespace(task=RECONCILE_TASK)
    with caplog.at_level(logging.ERROR):
        scheduler.ReconcilingScheduler.apply_entry(cast(Any, beat), entry)
    assert "a reconciler round failed" in caplog.text and "builtins.ValueError" in caplog.text
    assert SECRET not in caplog.text
