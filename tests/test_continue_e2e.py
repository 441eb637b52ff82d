"""Starting a new chat works, on the real stack (the HTTP API, PostgreSQL, a Celery worker, the emulator): a job
that reproduces the write-up's first failure (the legacy strategy) is rejected as too long and gets the notice,
which names where to go on; continuing it starts a new job, linked both ways, whose instruction hands over what
the old one was asked and produced, sized to a quarter of its budget; that job finishes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from demo.chapters import chapters
from emulator import EmulatorServer
from models.db import Database
from models.tenants import create_tenant
from plimsoll import estimate_tokens
from plimsoll.notices import new_chat_notice
from tests.support_worker import wait_for

pytestmark = pytest.mark.usefixtures("celery_worker", "allow_reproductions")


@pytest.fixture
def client(database: Database) -> Iterator[TestClient]:
    with database.session() as session:
        _, key = create_tenant(session, name=f"continue-{uuid.uuid4().hex[:8]}")
    with TestClient(create_app(database=database), headers={"X-API-Key": key}) as client:
        yield client


def rejected_legacy_job(client: TestClient, database: Database, emulator: EmulatorServer) -> int:
    """A job of the legacy strategy (it cuts only at user messages) that the model rejects as too long."""
    emulator.configure(limit=40_000)
    texts = {c.name: c.text for c in chapters(8, chars=12_000, languages=("ru",))}
    ids = [
        client.post("/v1/documents", json={"name": n, "content": t}).json()["documents"][0]["id"]
        for n, t in texts.items()
    ]
    created = client.post(
        "/v1/jobs",
        json={
            "instruction": "Note one fact of each chapter.",
            "document_ids": ids,
            "budget": 20_000,
            "strategy": "legacy",
        },
    )
    assert created.status_code == 201, created.text
    old: int = created.json()["id"]
    assert wait_for(database, old).status == "needs_new_chat"
    return old


def test_a_job_that_needed_a_new_chat_is_continued_and_the_new_job_finishes(
    database: Database, emulator_reset: EmulatorServer, client: TestClient
) -> None:
    old = rejected_legacy_job(client, database, emulator_reset)
    [notice] = client.get("/v1/notices", params={"job_id": old}).json()["items"]
    assert notice["text"] == new_chat_notice(old)
    assert f"plimsoll continue {old}" in notice["text"] and f"POST /v1/jobs/{old}/continue" in notice["text"]

    continued = client.post(f"/v1/jobs/{old}/continue", json={"instruction": "Note one fact of each chapter left."})
    assert continued.status_code == 201, continued.text
    new = continued.json()
    assert new["continued_from"] == old and new["strategy"] == "plimsoll"
    assert client.get(f"/v1/jobs/{old}").json()["continued_by"] == new["id"]
    handed_over = client.get(f"/v1/jobs/{new['id']}/messages").json()["items"][0]["content"]
    assert f"This continues job {old}" in handed_over and "Note one fact of each chapter left." in handed_over
    assert "NOTE 01-ru.txt" in handed_over  # what the old job produced
    rejection = client.get(f"/v1/jobs/{old}").json()["error"]
    assert rejection and rejection not in handed_over  # the provider's words never reach the new chat
    assert estimate_tokens(handed_over, "cl100k") <= new["budget"] // 4 + 200  # plus the documents' list
    job = wait_for(database, new["id"])
    assert job.status == "succeeded", job.error

    again = client.post(f"/v1/jobs/{old}/continue", json={"instruction": "Once more."})
    assert again.status_code == 409 and f"already continued as job {new['id']}" in again.json()["detail"]


def test_only_a_finished_main_job_can_be_continued(database: Database, client: TestClient) -> None:
    document = client.post("/v1/documents", json={"name": "a.txt", "content": "Alpha."}).json()["documents"][0]["id"]
    job = client.post("/v1/jobs", json={"instruction": "Go.", "document_ids": [document]}).json()["id"]
    client.post(f"/v1/jobs/{job}/cancel")
    assert client.post(f"/v1/jobs/{job}/continue", json={"instruction": ""}).status_code == 422
    assert client.post(f"/v1/jobs/{job}/continue", json={"instruction": "Go on.", "model": "nope"}).status_code == 422
    assert client.post("/v1/jobs/99999999/continue", json={"instruction": "Go on."}).status_code == 404


def test_plimsoll_continue_on_the_command_line_waits_for_the_new_job(
    database: Database, database_url: str, emulator_reset: EmulatorServer, client: TestClient
) -> None:
    from typer.testing import CliRunner

    from cli.main import app
    from testbed.stack import api_server

    old = rejected_legacy_job(client, database, emulator_reset)
    key = client.headers["X-API-Key"]
    with api_server(database_url) as url:
        done = CliRunner().invoke(
            app, ["continue", str(old), "-i", "Note the chapters left.", "--wait", "--api-url", url, "--api-key", key]
        )
    assert done.exit_code == 0, done.output
    assert f"continues job {old} in a new chat" in done.stderr
    new = int(done.stdout.split()[0])
    assert client.get(f"/v1/jobs/{new}").json()["status"] == "succeeded"


def test_continue_warns_of_deleted_documents_and_refuses_when_none_is_left(
    database: Database, database_url: str, client: TestClient
) -> None:
    from typer.testing import CliRunner

    from cli.main import app
    from testbed.stack import api_server

    def document(name: str) -> int:
        stored = client.post("/v1/documents", json={"name": name, "content": f"The text of {name}."})
        return int(stored.json()["documents"][0]["id"])

    def finished_job(ids: list[int]) -> int:
        job: int = client.post("/v1/jobs", json={"instruction": "Note each.", "document_ids": ids}).json()["id"]
        assert wait_for(database, job).status == "succeeded"
        return job

    first, second, third = document("a.txt"), document("b.txt"), document("c.txt")
    old = finished_job([first, second])
    assert client.delete(f"/v1/documents/{first}").status_code == 204
    key = client.headers["X-API-Key"]
    with api_server(database_url) as url:
        done = CliRunner().invoke(app, ["continue", str(old), "-i", "Check again.", "--api-url", url, "--api-key", key])
    assert done.exit_code == 0, done.output
    warning = f"document a.txt of job {old} no longer exists: the new job goes on without it"
    assert f"Warning: {warning}" in " ".join(done.stderr.split()) and warning not in done.stdout
    new = client.get(f"/v1/jobs/{int(done.stdout.split()[0])}").json()
    assert new["progress"]["documents_total"] == 1, new
    assert wait_for(database, new["id"]).status == "succeeded"

    lonely = finished_job([third])
    assert client.delete(f"/v1/documents/{third}").status_code == 204
    refused = client.post(f"/v1/jobs/{lonely}/continue", json={"instruction": "Check again."})
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"] == (
        f"none of job {lonely}'s documents exists any more (deleted: c.txt): upload them again and submit a new job"
    )
