"""The embedded default: the API alone, on SQLite, its steps run by a worker in its own process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from emulator import EmulatorServer
from models.db import get_database
from models.migrate import upgrade
from models.tenants import create_tenant
from testbed.stack import environment
from tests.support import wait_until
from worker.queue import stop_local_worker


def test_with_the_in_process_queue_the_api_alone_runs_jobs_to_the_end(
    tmp_path: Path, emulator_reset: EmulatorServer
) -> None:
    url = f"sqlite:///{tmp_path / 'plimsoll.sqlite3'}"
    upgrade(url)
    settings = {
        "PLIMSOLL_DATABASE_URL": url,
        "PLIMSOLL_QUEUE": "inprocess",
        "PLIMSOLL_EMULATOR_URL": emulator_reset.base_url,
    }
    with environment(settings):
        try:
            with get_database().session() as session:
                _, key = create_tenant(session, name="local")
            with TestClient(create_app()) as client:
                headers = {"X-API-Key": key}
                document = client.post(
                    "/v1/documents", json={"name": "a.txt", "content": "Some text."}, headers=headers
                )
                job = client.post(
                    "/v1/jobs",
                    json={"instruction": "Read it.", "document_ids": [document.json()["documents"][0]["id"]]},
                    headers=headers,
                ).json()

                def ended() -> Any:
                    view = client.get(f"/v1/jobs/{job['id']}", headers=headers).json()
                    return view if view["status"] not in ("queued", "running") else None

                view = wait_until(ended, 30, f"job {job['id']} ended")
        finally:
            stop_local_worker()
            get_database().dispose()
    assert view["status"] == "succeeded"
    assert view["final_answer"].startswith("REPORT: 1 documents")
