"""Prometheus metrics: counted in every worker process (multiprocess-safe), served only with the password."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from models.db import Database
from models.settings import Settings
from testbed.stack import REDIS_URL
from worker.metrics import STEPS, count_usage
from worker.metrics_server import metrics_server, registry
from worker.providers.base import Usage

REPOSITORY = Path(__file__).resolve().parent.parent


@pytest.fixture
def served(database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("PLIMSOLL_METRICS_PASSWORD", "s3cret")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    settings = Settings(database_url=database.url, broker_url=REDIS_URL)
    server = metrics_server("127.0.0.1", 0, settings=settings, database=database)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()
    server.server_close()


def test_the_metrics_need_the_password(served: str) -> None:
    assert httpx.get(served).status_code == 401
    assert httpx.get(served, auth=("metrics", "wrong")).status_code == 401
    STEPS.labels("continued").inc()
    count_usage(Usage(input_tokens=10, output_tokens=5, cache_write_tokens=2, cache_read_tokens=3))
    answer = httpx.get(served, auth=("metrics", "s3cret"))
    assert answer.status_code == 200
    names = {family.name for family in text_string_to_metric_families(answer.text)}
    assert {"plimsoll_steps", "plimsoll_tokens", "plimsoll_rate_limited", "plimsoll_admission_wait_seconds",
            "plimsoll_reconciler_requeued", "plimsoll_jobs", "plimsoll_queue_depth", "plimsoll_queue_oldest_seconds",
            "plimsoll_tenant_waiting_steps", "plimsoll_tenant_oldest_waiting_seconds"} <= names  # fmt: skip


def test_without_a_password_nothing_is_served(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLIMSOLL_METRICS_PASSWORD", raising=False)
    with pytest.raises(SystemExit, match="PLIMSOLL_METRICS_PASSWORD"):
        metrics_server("127.0.0.1", 0, settings=Settings(database_url=database.url), database=database)


def test_counts_of_every_worker_process_add_up(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(REPOSITORY)}
    count = "from worker.metrics import STEPS; STEPS.labels('continued').inc(3)"
    for _ in range(2):  # two pool processes
        subprocess.run([sys.executable, "-c", count], env=environment, check=True, timeout=60)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    collected = registry(Settings(database_url=database.url, broker_url=REDIS_URL), database)
    assert collected.get_sample_value("plimsoll_steps_total", {"outcome": "continued"}) == 6.0
