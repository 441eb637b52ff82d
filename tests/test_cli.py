"""The CLI's API commands through typer's runner, talking HTTP to a real uvicorn server on a free port."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from typer.testing import CliRunner, Result

from api.client import PlimsollClient
from cli.main import app as cli
from models.db import Database
from models.tables import ApiKey, Document, Job, JobStatus, Notice, Tenant
from models.tenants import hash_key
from testbed.stack import free_port
from tests.support import wait_until
from tests.support_api import new_tenant, step_row
from tests.support_cli import Served, finish_later, serving, set_job, tenant_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def served(database: Database) -> Iterator[Served]:
    with serving(database) as state:
        yield state


@pytest.fixture
def served_fresh(served: Served) -> Iterator[Served]:
    served.on_enqueue = None
    yield served
    served.on_enqueue = None


@pytest.fixture
def key(database: Database) -> str:
    return new_tenant(database)[1]


def run(served: Served, key: str, *args: str | Path) -> Result:
    options = ["--api-url", served.url, "--api-key", key]
    return CliRunner().invoke(cli, [*map(str, args), *options])


def create_job_over(served: Served, key: str, tmp_path: Path) -> int:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    with PlimsollClient(served.url, key) as client:
        [document] = client.upload_files([tmp_path / "a.txt"])
        return client.create_job("Read a.txt.", [document.id]).id


# submit


def test_submit_uploads_the_files_creates_the_job_and_prints_its_id(
    served_fresh: Served, key: str, tmp_path: Path
) -> None:
    russian = "Глава 1. Начало.\nПисьмо пришло утром.\n"
    (tmp_path / "ch01.txt").write_bytes(b"\xef\xbb\xbf" + russian.encode())
    (tmp_path / "notes.md").write_text("# Notes\nCheck the dates.\n", encoding="utf-8")

    outcome = run(
        served_fresh, key, "submit", tmp_path / "ch01.txt", tmp_path / "notes.md", "-i", "Check the chapter.",
        "--budget", "50000",
    )  # fmt: skip

    assert outcome.exit_code == 0, outcome.output
    job_id = int(outcome.stdout.strip())
    assert served_fresh.enqueued[-1] == job_id
    assert f"Job {job_id} queued: 2 documents, plimsoll-emulator, budget 50,000 tokens." in outcome.stderr
    with served_fresh.database.session() as session:
        job = session.get_one(Job, job_id)
        assert (job.tenant_id, job.instruction, job.budget) == (
            tenant_of(served_fresh.database, key),
            "Check the chapter.",
            50_000,
        )
        assert [d.name for d in job.documents] == ["ch01.txt", "notes.md"]
        assert session.get_one(Document, job.documents[0].document_id).content == russian


def test_submit_takes_the_url_and_key_from_the_environment(served_fresh: Served, key: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    environment = {"PLIMSOLL_API_URL": served_fresh.url, "PLIMSOLL_API_KEY": key}

    outcome = CliRunner().invoke(cli, ["submit", str(tmp_path / "a.txt"), "-i", "Read it."], env=environment)

    assert outcome.exit_code == 0, outcome.output
    assert served_fresh.enqueued[-1] == int(outcome.stdout)


def test_submit_refuses_a_file_that_is_not_utf8_and_stores_nothing(
    served_fresh: Served, key: str, tmp_path: Path
) -> None:
    (tmp_path / "good.txt").write_text("Fine.", encoding="utf-8")
    (tmp_path / "old.txt").write_bytes("Grüße".encode("cp1252"))
    enqueued_before = len(served_fresh.enqueued)

    outcome = run(served_fresh, key, "submit", tmp_path / "good.txt", tmp_path / "old.txt", "-i", "Read.")

    assert outcome.exit_code == 1
    assert "'old.txt' is not valid UTF-8: byte 0xfc at offset 2" in outcome.stderr
    assert "(HTTP 422)" in outcome.stderr
    assert outcome.stdout == ""
    assert len(served_fresh.enqueued) == enqueued_before
    with served_fresh.database.session() as session:
        tenant_id = tenant_of(served_fresh.database, key)
        assert session.scalars(select(Document).where(Document.tenant_id == tenant_id)).all() == []


def test_submit_explains_a_refused_job(served_fresh: Served, key: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    outcome = run(served_fresh, key, "submit", tmp_path / "a.txt", "-i", "Read.", "--budget", "5000000")
    assert outcome.exit_code == 1
    assert "the budget must be between 1,000 and 984,000 tokens for plimsoll-emulator" in outcome.stderr


def test_submit_with_a_bad_key_or_no_server_says_so(served_fresh: Served, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    refused = run(served_fresh, "pls_wrong", "submit", tmp_path / "a.txt", "-i", "Read.")
    nobody = Served("http://127.0.0.1:9", served_fresh.database)  # the discard port: nothing listens
    unreachable = run(nobody, "pls_wrong", "submit", tmp_path / "a.txt", "-i", "Read.")

    assert refused.exit_code == 1
    assert "unknown or revoked API key (HTTP 401)" in refused.stderr
    assert unreachable.exit_code == 1
    assert "no answer from the Plimsoll API at http://127.0.0.1:9" in unreachable.stderr


def test_submit_wait_follows_the_job_to_its_answer(served_fresh: Served, key: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    served_fresh.on_enqueue = finish_later(served_fresh.database, status=JobStatus.SUCCEEDED, answer="All [fine].")

    outcome = run(served_fresh, key, "submit", tmp_path / "a.txt", "-i", "Read.", "--wait", "--interval", "0.05")

    assert outcome.exit_code == 0, outcome.output
    job_id, answer = outcome.stdout.splitlines()
    assert int(job_id) == served_fresh.enqueued[-1]
    assert answer == "All [fine]."  # printed as it is, not as rich markup


# watch


def test_watch_shows_progress_and_ends_with_the_final_answer(served_fresh: Served, key: str, tmp_path: Path) -> None:
    job_id = create_job_over(served_fresh, key, tmp_path)

    def work() -> None:  # the job's pace, which watch must follow live, is the scenario under test
        time.sleep(0.2)  # queued for a moment
        with served_fresh.database.session() as session:
            session.add(step_row(job_id, 1, stage="clear"))
        set_job(
            served_fresh.database, job_id, status=JobStatus.RUNNING, step=1, input_tokens=100, cache_read_tokens=300
        )
        time.sleep(0.3)  # running for a moment
        set_job(served_fresh.database, job_id, status=JobStatus.SUCCEEDED, final_answer="Line one.\nLine two.")

    worker = threading.Thread(target=work)
    worker.start()
    outcome = run(served_fresh, key, "watch", str(job_id), "--interval", "0.05")
    worker.join()

    assert outcome.exit_code == 0, outcome.output
    assert outcome.stdout == "Line one.\nLine two.\n"
    panel = outcome.stderr
    assert f"Job {job_id} · plimsoll-emulator (limit 1,000,000 tokens)" in panel
    assert "succeeded" in panel
    assert "950 of 400,000 budget tokens · step 1 · stage clear" in panel
    assert re.search(r"Steps done +1 ", panel)  # as `steps` lists them: step 1 is done
    assert "2 tool results, 1 old messages left out" in panel
    assert "75% of input tokens" in panel
    assert "Documents read  0 of 1" in panel


def test_watch_ends_with_the_notice_when_the_job_needs_a_new_chat(
    served_fresh: Served, key: str, tmp_path: Path
) -> None:
    job_id = create_job_over(served_fresh, key, tmp_path)
    notice = "This conversation is too long for the model to process at once. Start a new chat for the next step."
    set_job(served_fresh.database, job_id, status=JobStatus.NEEDS_NEW_CHAT)
    with served_fresh.database.session() as session:
        session.add(Notice(tenant_id=tenant_of(served_fresh.database, key), job_id=job_id, text=notice))

    outcome = run(served_fresh, key, "watch", str(job_id), "--interval", "0.05")

    assert outcome.exit_code == 1
    assert outcome.stdout == notice + "\n"


def test_watch_reports_a_failure_and_an_unknown_job(served_fresh: Served, key: str, tmp_path: Path) -> None:
    job_id = create_job_over(served_fresh, key, tmp_path)
    set_job(served_fresh.database, job_id, status=JobStatus.FAILED, error="the provider refused the request")

    failed = run(served_fresh, key, "watch", str(job_id))
    unknown = run(served_fresh, key, "watch", "987654321")

    assert failed.exit_code == 1
    assert f"Job {job_id} failed: the provider refused the request" in failed.stderr
    assert unknown.exit_code == 1
    assert "no job with id 987654321 (HTTP 404)" in unknown.stderr


# notices


def test_notices_shows_unread_ones_and_marks_them_read_on_request(
    served_fresh: Served, key: str, tmp_path: Path
) -> None:
    job_id = create_job_over(served_fresh, key, tmp_path)
    tenant_id = tenant_of(served_fresh.database, key)
    with served_fresh.database.session() as session:
        session.add(Notice(tenant_id=tenant_id, job_id=job_id, text="First [notice] text."))
        session.flush()
        session.add(Notice(tenant_id=tenant_id, job_id=job_id, text="Second notice text."))

    listed = run(served_fresh, key, "notices", "--mark-read")
    after = run(served_fresh, key, "notices")
    everything = run(served_fresh, key, "notices", "--all")

    assert listed.exit_code == after.exit_code == everything.exit_code == 0
    lines = listed.stdout.splitlines()
    assert lines[1::3] == ["Second notice text.", "First [notice] text."]
    assert all(f"job {job_id}" in line and line.endswith("· read") for line in lines[0::3])  # as it is now
    assert after.stdout == ""
    assert "No unread notices." in after.stderr
    assert everything.stdout.splitlines()[1::3] == ["Second notice text.", "First [notice] text."]
    assert all(line.endswith("· read") for line in everything.stdout.splitlines()[0::3])


# tenant create


def test_tenant_create_prints_a_working_key_once_and_stores_only_its_hash(
    served_fresh: Served, database_url: str
) -> None:
    name = f"acme-{uuid.uuid4().hex[:8]}"

    created = CliRunner().invoke(cli, ["tenant", "create", name, "--database-url", database_url])
    again = CliRunner().invoke(cli, ["tenant", "create", name, "--database-url", database_url])

    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert key.startswith("pls_")
    assert f"Tenant '{name}' created" in created.stderr
    with PlimsollClient(served_fresh.url, key) as client:
        assert client.jobs().total == 0
    with served_fresh.database.session() as session:
        tenant = session.scalars(select(Tenant).where(Tenant.name == name)).one()
        [stored] = session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant.id)).all()
        assert stored.key_hash == hash_key(key)
    assert again.exit_code == 1
    assert f"a tenant named '{name}' exists already" in again.stderr


def test_tenant_create_on_a_database_that_does_not_answer_says_so() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:9/none?connect_timeout=2"
    outcome = CliRunner().invoke(cli, ["tenant", "create", "acme", "--database-url", url])
    assert outcome.exit_code == 1
    assert "the database refused: OperationalError" in outcome.stderr


# api


def test_the_api_command_serves_the_app(database_url: str) -> None:
    port = free_port()
    command = [sys.executable, "-m", "cli", "api", "--port", str(port)]
    environment = os.environ | {"PLIMSOLL_DATABASE_URL": database_url}
    server = subprocess.Popen(command, cwd=ROOT, env=environment, stderr=subprocess.PIPE)
    try:
        health = wait_for(f"http://127.0.0.1:{port}/healthz", server)
        assert (health.status_code, health.json()) == (200, {"status": "ok", "database": "ok"})
    finally:
        server.terminate()
        server.wait(10)


def wait_for(url: str, server: subprocess.Popen[bytes]) -> httpx.Response:
    def answer() -> httpx.Response:
        assert server.poll() is None, server.stderr.read().decode() if server.stderr else "the server stopped"
        return httpx.get(url, timeout=2)

    return wait_until(answer, 60, "the API answered", ignoring=(httpx.TransportError,))
