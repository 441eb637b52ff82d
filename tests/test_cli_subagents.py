"""A person's journey through the CLI with a job that hands work to subagents, on the real stack (uvicorn,
PostgreSQL, a Celery worker, the emulator, whose agent delegates groups of ten documents): submit --wait, watch,
watch --json, steps, messages, jobs --subagents and cancel all end without a traceback."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from api.client import PlimsollClient
from cli.main import app as cli
from demo.chapters import chapters
from models.db import Database
from models.tenants import create_tenant
from testbed.stack import api_server
from tests.support import wait_until

pytestmark = pytest.mark.usefixtures("celery_worker", "emulator_reset")

DOCUMENTS = 60  # six subagents of ten documents each


@pytest.fixture(scope="module")
def stack(database: Database, database_url: str) -> Iterator[tuple[str, str]]:
    with database.session() as session:
        _, key = create_tenant(session, name=f"journey-{uuid.uuid4().hex[:8]}")
    with api_server(database_url) as url:
        yield url, key


def run(stack: tuple[str, str], *args: str | Path) -> Result:
    url, key = stack
    polling = ["--interval", "0.2"] if args[0] in ("watch", "submit") else []
    outcome = CliRunner().invoke(cli, [*map(str, args), "--api-url", url, "--api-key", key, *polling])
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.exception
    assert "Traceback" not in outcome.output
    return outcome


def files(folder: Path, tag: str) -> list[Path]:
    paths = []
    for chapter in chapters(DOCUMENTS, chars=400, languages=("en",)):
        paths.append(folder / f"{tag}-{chapter.name}")
        paths[-1].write_text(chapter.text, encoding="utf-8")
    return paths


def test_a_job_with_subagents_through_every_command(stack: tuple[str, str], tmp_path: Path) -> None:
    submitted = run(stack, "submit", *files(tmp_path, "journey"), "-i", "Check every chapter.", "--wait")
    assert submitted.exit_code == 0, submitted.output
    job_id = int(submitted.stdout.split("\n", 1)[0])
    assert "NOTE" in submitted.stdout  # the final answer

    watched = run(stack, "watch", str(job_id))
    assert watched.exit_code == 0, watched.output
    assert "subagent" in watched.stderr and "succeeded" in watched.stderr

    as_json = run(stack, "watch", str(job_id), "--json")
    assert as_json.exit_code == 0, as_json.output
    job = json.loads(as_json.stdout)
    assert len(job["children"]) == DOCUMENTS // 10
    assert all(child["status"] == "succeeded" and child["steps_done"] > 10 for child in job["children"])
    assert len(job["progress"]["documents_read"]) == DOCUMENTS

    for command in ("steps", "messages"):
        listed = run(stack, command, str(job_id))
        assert listed.exit_code == 0 and listed.stdout, listed.output
        assert run(stack, command, str(job["children"][0]["id"]), "--json").exit_code == 0

    subagents = run(stack, "jobs", "--subagents", "--json")
    assert {child["id"] for child in job["children"]} <= {j["id"] for j in json.loads(subagents.stdout)["items"]}


def test_cancelling_a_job_with_subagents_says_it_was_cancelled(stack: tuple[str, str], tmp_path: Path) -> None:
    submitted = run(stack, "submit", *files(tmp_path, "cancel"), "-i", "Check every chapter.")
    assert submitted.exit_code == 0, submitted.output
    job_id = int(submitted.stdout)
    url, key = stack
    with PlimsollClient(url, key) as client:
        wait_until(lambda: client.job(job_id).children, 60, "a subagent started", every=0.05)

    cancelled = run(stack, "cancel", str(job_id), "--json")
    assert cancelled.exit_code == 0, cancelled.output
    job = json.loads(cancelled.stdout)
    assert job["status"] == "cancelled" and job["children"]
    assert all(child["status"] in ("cancelled", "succeeded") for child in job["children"])

    watched = run(stack, "watch", str(job_id))
    assert watched.exit_code == 1 and f"Job {job_id} was cancelled." in watched.stderr
    again = run(stack, "cancel", str(job_id))
    assert again.exit_code == 1 and "Traceback" not in again.output
