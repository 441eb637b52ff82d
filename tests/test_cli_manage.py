"""The person's and the operator's commands beyond submit and watch, through typer's runner against the real API
under uvicorn and the test PostgreSQL: jobs, cancel, steps, messages, documents, tenant list/revoke/rotate-key,
submit's job options, checks and clean-up, --json everywhere, and the exit codes docs/api-cli.md documents."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from sqlalchemy import select
from typer.testing import CliRunner, Result

from api.client import ApiError, PlimsollClient
from cli.jobs import SHOWN_CHARS, over_the_limit
from cli.main import app as cli
from models.db import Database
from models.history import append_messages
from models.jobs import create_job
from models.settings import get_settings
from models.statuses import Compaction, Strategy
from models.tables import Document, Job, JobKind, JobStatus, Notice, Summary
from plimsoll.compaction import POLICIES
from tests.help_pages import PAGE_END
from tests.support import wait_until
from tests.support_api import new_tenant, read, result, step_row
from tests.support_cli import Served, finish_later, parse, serving, set_job, tenant_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server(database: Database) -> Iterator[Served]:
    with serving(database) as state:
        yield state


@pytest.fixture
def served(server: Served) -> Iterator[Served]:
    server.on_enqueue = None
    yield server
    server.on_enqueue = None


@pytest.fixture
def key(database: Database) -> str:
    return new_tenant(database)[1]


def run(served: Served, key: str, *args: str | Path) -> Result:
    return run_at(served.url, key, *args)


def run_at(url: str, key: str, *args: str | Path) -> Result:
    return CliRunner().invoke(cli, [*map(str, args), "--api-url", url, "--api-key", key])


def operator(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def upload(served: Served, key: str, name: str = "a.txt", content: str = "Alpha.") -> int:
    with PlimsollClient(served.url, key) as client:
        return client.add_document(name, content).id


def new_job(served: Served, key: str, *, instruction: str = "Read a.txt.", document: int | None = None) -> int:
    with PlimsollClient(served.url, key) as client:
        return client.create_job(instruction, [document or upload(served, key)]).id


def documents_of(database: Database, key: str) -> list[Document]:
    with database.session() as session:
        query = select(Document).where(Document.tenant_id == tenant_of(database, key)).order_by(Document.id)
        return list(session.scalars(query))


# jobs


def test_jobs_lists_the_main_jobs_newest_first_filtered_by_status(served: Served, key: str) -> None:
    document = upload(served, key)
    older = new_job(served, key, instruction="Check the chapters.\nEvery one of them.", document=document)
    newer = new_job(served, key, instruction="Summarise.", document=document)
    set_job(served.database, older, status=JobStatus.INCOMPLETE)
    with served.database.session() as session:
        parent = session.get_one(Job, newer)
        create_job(session, tenant_id=parent.tenant_id, instruction="A part.", document_ids=[document],
                   kind=JobKind.SUBAGENT, parent=parent)  # fmt: skip

    listed = run(served, key, "jobs")
    incomplete = run(served, key, "jobs", "--status", "incomplete", "--json")
    everything = run(served, key, "jobs", "--subagents", "--json")
    paged = run(served, key, "jobs", "--limit", "1")

    assert listed.exit_code == 0, listed.output
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [(row[0], row[1]) for row in rows] == [(str(newer), "queued"), (str(older), "incomplete")]
    assert listed.stdout.splitlines()[2].rstrip().endswith("Check the chapters.")  # the instruction's first line
    assert [job["id"] for job in json.loads(incomplete.stdout)["items"]] == [older]
    assert [job["kind"] for job in json.loads(everything.stdout)["items"]] == ["subagent", "main", "main"]
    assert paged.stdout.count("queued") == 1
    assert "1–1 of 2; the next page: --offset 1" in paged.stderr


def test_jobs_refuses_an_unknown_status_as_a_usage_error(served: Served, key: str) -> None:
    outcome = run(served, key, "jobs", "--status", "finished")
    assert outcome.exit_code == 2
    assert "'finished' is not one of" in outcome.stderr


def test_jobs_of_a_new_tenant_says_there_are_none(served: Served, key: str) -> None:
    outcome = run(served, key, "jobs")
    assert (outcome.exit_code, outcome.stdout, outcome.stderr.strip()) == (0, "", "No jobs.")


# cancel


def test_cancel_cancels_a_queued_job_once(served: Served, key: str) -> None:
    job = new_job(served, key)

    cancelled = run(served, key, "cancel", str(job))
    again = run(served, key, "cancel", str(job), "--json")

    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stderr.strip() == f"Job {job} cancelled."
    assert again.exit_code == 1
    assert f"job {job} has finished already (cancelled)" in again.stderr
    assert "(HTTP 409)" in again.stderr
    assert again.stdout == ""


def test_cancel_json_prints_the_cancelled_job(served: Served, key: str) -> None:
    job = new_job(served, key)
    outcome = run(served, key, "cancel", str(job), "--json")
    assert outcome.exit_code == 0
    assert (json.loads(outcome.stdout)["id"], json.loads(outcome.stdout)["status"]) == (job, "cancelled")


# steps and messages


def test_steps_shows_what_each_step_sent(served: Served, key: str) -> None:
    job = new_job(served, key)
    with served.database.session() as session:
        session.add_all([step_row(job, 1, stage="full", cleared=[]), step_row(job, 2, stage="clear")])

    table = run(served, key, "steps", str(job))
    as_json = run(served, key, "steps", str(job), "--json", "--offset", "1")
    none = run(served, key, "steps", str(new_job(served, key)))

    assert table.exit_code == 0, table.output
    rows = [line.split() for line in table.stdout.splitlines()[1:]]
    assert rows == [
        ["1", "full", "900", "950", "38,000", "0", "1", "tool_use"],
        ["2", "clear", "900", "950", "38,000", "2", "1", "tool_use"],
    ]
    page = json.loads(as_json.stdout)
    assert (page["total"], [s["step"] for s in page["items"]], page["items"][0]["cleared"]) == (2, [2], ["t0", "t1"])
    assert none.exit_code == 0 and "has no steps yet" in none.stderr


def test_messages_pages_through_the_conversation_and_shortens_long_blocks(served: Served, key: str) -> None:
    job = new_job(served, key)
    long_text = "x" * (SHOWN_CHARS + 500)
    with served.database.session() as session:
        stored = session.get_one(Job, job)
        long_result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": long_text}]}
        append_messages(session, stored, [read("t1", "a.txt"), long_result, read("t2", "b.txt"), result("t2")], step=1)

    first = run(served, key, "messages", str(job), "--limit", "2")
    second = run(served, key, "messages", str(job), "--offset", "2", "--limit", "2")
    whole = run(served, key, "messages", str(job), "--offset", "2", "--limit", "1", "--json")

    assert first.exit_code == second.exit_code == whole.exit_code == 0
    assert first.stdout.splitlines()[:2] == ["#0 · step 0 · user", "Read a.txt."]
    assert "#1 · step 1 · assistant" in first.stdout
    assert '[tool_use t1] read_document({"name": "a.txt"})' in first.stdout
    # Numbered as the messages are (#0, the instruction, is --offset 0), not from 1.
    assert "#0–#1 of #0–#4; the next page: --offset 2" in first.stderr
    assert second.stdout.splitlines()[0] == "#2 · step 1 · user"
    assert "#2–#3 of #0–#4; the next page: --offset 4" in second.stderr
    assert f"[tool_result t1] {'x' * SHOWN_CHARS}… (500 more characters; --json shows all)" in second.stdout
    [message] = json.loads(whole.stdout)["items"]
    assert message["content"][0]["content"] == long_text


def test_messages_shows_a_compactions_summary_then_the_originals_it_covers(served: Served, key: str) -> None:
    job = new_job(served, key)
    with served.database.session() as session:
        stored = session.get_one(Job, job)
        append_messages(session, stored, [read("t1", "a.txt"), result("t1"), read("t2", "b.txt"), result("t2")], step=1)
        session.add_all([step_row(job, 1, stage="cleared_results"), step_row(job, 2, stage="compaction")])
        summary = 'NOTE a.txt: 6 chars, sha256 0123456789ab, starts "Alpha."'
        session.add(Summary(job_id=job, step=2, first_seq=1, last_seq=2, content=summary, token_estimate=30))

    shown = run(served, key, "messages", str(job), "--summary", "2")
    first = run(served, key, "messages", str(job), "--summary", "2", "--limit", "1")
    next_page = run(served, key, "messages", str(job), "--summary", "2", "--limit", "1", "--offset", "1")
    steps = run(served, key, "steps", str(job))
    none = run(served, key, "messages", str(job), "--summary", "1")

    assert shown.exit_code == steps.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[:2] == ["summary of #1–#2 · step 2", summary]
    assert "#1 · step 1 · assistant" in lines and "#2 · step 1 · user" in lines
    assert "#3 · step 1 · assistant" not in lines  # only the originals it covers
    assert "compaction of 1–2" in steps.stdout
    assert "next page" not in shown.stderr  # all it covers is shown
    assert "#1 · step 1 · assistant" in first.stdout and "#2 · step 1 · user" not in first.stdout
    assert "#1 of #1–#2; the next page: --summary 2 --offset 1" in first.stderr  # the page after it, as it said
    assert "#2 · step 1 · user" in next_page.stdout and "next page" not in next_page.stderr
    assert none.exit_code == 1 and "Step 1 of job" in none.stderr and "wrote no summary" in none.stderr


def test_steps_and_messages_of_another_tenants_job_are_not_found(served: Served, key: str) -> None:
    job = new_job(served, key)
    stranger = new_tenant(served.database)[1]
    for command in ("steps", "messages", "watch", "cancel"):
        outcome = run(served, stranger, command, str(job))
        assert outcome.exit_code == 1, command
        assert f"no job with id {job} (HTTP 404)" in outcome.stderr


# submit: the job's options, its check, and what a refusal leaves behind


def test_submit_passes_every_job_option(served: Served, key: str, tmp_path: Path, allow_reproductions: None) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")

    outcome = run(
        served, key, "submit", tmp_path / "a.txt", "-i", "Read.", "--locale", "cs", "--strategy", "legacy",
        "--no-safety-net", "--compaction", "off", "--budget", "20000", "--model", "plimsoll-emulator",
        "--max-steps", "7", "--max-input-tokens", "90000", "--json",
    )  # fmt: skip

    assert outcome.exit_code == 0, outcome.output
    view = json.loads(outcome.stdout)
    assert view["id"] == served.enqueued[-1]
    with served.database.session() as session:
        job = session.get_one(Job, view["id"])
        stored = (job.locale, job.strategy, job.safety_net, job.budget, job.model, job.max_steps, job.max_input_tokens)
        assert job.compaction == "off"
    assert stored == ("cs", "legacy", False, 20_000, "plimsoll-emulator", 7, 90_000)


def test_submit_checks_the_job_before_uploading_anything(served: Served, key: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")

    refused = run(served, key, "submit", tmp_path / "a.txt", "-i", "Read.", "--max-input-tokens", "1000")
    bad_locale = run(served, key, "submit", tmp_path / "a.txt", "-i", "Read.", "--locale", "not a locale")

    assert refused.exit_code == 1
    assert "max_input_tokens must be at least the budget" in refused.stderr and "(HTTP 422)" in refused.stderr
    assert bad_locale.exit_code == 2
    assert "--locale: String should match pattern" in bad_locale.stderr
    assert documents_of(served.database, key) == []


def test_the_api_key_is_not_marked_required_but_its_absence_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLIMSOLL_API_KEY", raising=False)
    helped = operator("jobs", "--help")
    assert "PLIMSOLL_API_KEY" in helped.stdout and "required" not in helped.stdout
    refused = operator("jobs", "--api-url", "http://127.0.0.1:9")
    assert refused.exit_code == 1 and "no API key: set PLIMSOLL_API_KEY, or pass --api-key" in refused.stderr


def test_a_refused_option_is_named_as_it_is_typed(served: Served, key: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    refused = run(served, key, "submit", tmp_path / "a.txt", "-i", "Read.", "--max-steps", "0")
    assert refused.exit_code == 2 and "--max-steps: Input should be greater than or equal to 1" in refused.stderr


def test_submit_refuses_a_file_over_the_document_limit_before_sending_it(
    served: Served, key: str, tmp_path: Path
) -> None:
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as file:
        file.truncate(50_000_000)  # 50 MB, never read: its size says it is over the limit
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")

    refused = run(served, key, "submit", tmp_path / "a.txt", huge, "-i", "Read.")

    assert refused.exit_code == 1
    assert "has 50,000,000 bytes, so more than 12,499,999 characters" in refused.stderr
    assert "the limit is 2,000,000 characters per document" in refused.stderr
    assert documents_of(served.database, key) == []


def test_samples_writes_chapters_that_submit_takes(served: Served, key: str, tmp_path: Path) -> None:
    folder = tmp_path / "chapters"
    written = operator("samples", str(folder), "--json")
    assert written.exit_code == 0, written.output
    paths = [Path(p) for p in json.loads(written.stdout)]
    assert [p.name for p in paths] == sorted(p.name for p in folder.glob("*.txt")) and len(paths) == 6
    assert all(1_000 < len(p.read_text(encoding="utf-8")) < 10_000 for p in paths)
    submitted = run(served, key, "submit", *paths, "-i", "Check every chapter.")
    assert submitted.exit_code == 0, submitted.output


def test_a_file_near_the_limit_is_counted_in_characters(tmp_path: Path) -> None:
    cyrillic = tmp_path / "ru.txt"
    cyrillic.write_text("ж" * 1_500, encoding="utf-8")  # 3,000 bytes, 1,500 characters
    assert over_the_limit(cyrillic, 1_500) is None
    assert over_the_limit(cyrillic, 1_499) == f"{str(cyrillic)!r} has 1,500 characters; " + (
        "the limit is 1,499 characters per document: split it into parts of at most that"
    )


@pytest.fixture
def two_documents_per_job(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PLIMSOLL_MAX_DOCUMENTS_PER_JOB", "2")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def test_a_job_refused_after_the_upload_takes_back_only_the_new_documents(
    served: Served, key: str, tmp_path: Path, two_documents_per_job: None
) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text(f"The text of {name}.", encoding="utf-8")
    kept = upload(served, key, "a.txt", "The text of a.txt.")  # stored before: it must survive the refusal
    enqueued = len(served.enqueued)

    outcome = run(served, key, "submit", *(tmp_path / n for n in ("a.txt", "b.txt", "c.txt")), "-i", "Read.")

    assert outcome.exit_code == 1
    assert "a job may read at most 2 documents (HTTP 422)" in outcome.stderr
    assert [d.id for d in documents_of(served.database, key)] == [kept]
    assert len(served.enqueued) == enqueued


def test_submit_again_reuses_the_stored_documents(served: Served, key: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    first = run(served, key, "submit", tmp_path / "a.txt", "-i", "Read.")
    second = run(served, key, "submit", tmp_path / "a.txt", "-i", "Read again.")

    assert first.exit_code == second.exit_code == 0
    assert "queued: 1 document, " in first.stderr and "stored already" not in first.stderr
    assert "queued: 1 document (1 stored already), " in second.stderr
    assert len(documents_of(served.database, key)) == 1


@pytest.mark.parametrize(
    ("status", "code"), [(JobStatus.SUCCEEDED, 0), (JobStatus.FAILED, 1), (JobStatus.INCOMPLETE, 1)]
)
def test_submit_wait_json_prints_the_finished_job_and_exits_by_its_status(
    served: Served, key: str, tmp_path: Path, status: JobStatus, code: int
) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    served.on_enqueue = finish_later(served.database, status=status, answer="Done.")

    outcome = run(served, key, "submit", tmp_path / "a.txt", "-i", "Read.", "--wait", "--json", "--interval", "0.05")

    assert outcome.exit_code == code, outcome.output
    view = json.loads(outcome.stdout)
    assert (view["status"], view["final_answer"]) == (status.value, "Done.")


def test_watch_json_prints_the_job_when_it_needs_a_new_chat(served: Served, key: str) -> None:
    job = new_job(served, key)
    set_job(served.database, job, status=JobStatus.NEEDS_NEW_CHAT)
    outcome = run(served, key, "watch", str(job), "--json")
    assert outcome.exit_code == 1
    assert json.loads(outcome.stdout)["status"] == "needs_new_chat"


# documents


def test_documents_lists_and_deletes(served: Served, key: str) -> None:
    used = upload(served, key, "used.txt", "Used by a job.")
    spare = upload(served, key, "spare.txt", "Used by nobody.")
    job = new_job(served, key, document=used)

    listed = run(served, key, "documents")
    as_json = run(served, key, "documents", "list", "--json")
    deleted = run(served, key, "documents", "delete", str(spare))
    refused = run(served, key, "documents", "delete", str(used))
    set_job(served.database, job, status=JobStatus.SUCCEEDED)
    deleted_json = run(served, key, "documents", "delete", str(used), "--json")
    empty = run(served, key, "documents")

    assert listed.exit_code == 0, listed.output
    assert [line.split()[:3] for line in listed.stdout.splitlines()[1:]] == [
        [str(spare), "spare.txt", "15"],
        [str(used), "used.txt", "14"],
    ]
    assert [d["name"] for d in json.loads(as_json.stdout)["items"]] == ["spare.txt", "used.txt"]
    assert (deleted.exit_code, deleted.stderr.strip()) == (0, f"Document {spare} deleted.")
    assert refused.exit_code == 1
    assert f"is used by unfinished job {job}" in refused.stderr and "(HTTP 409)" in refused.stderr
    assert (deleted_json.exit_code, json.loads(deleted_json.stdout)) == (0, {"deleted": used})
    assert (empty.exit_code, empty.stderr.strip()) == (0, "No documents.")


def test_documents_usage_errors_exit_2(served: Served, key: str) -> None:
    no_id = run(served, key, "documents", "delete")
    unknown = run(served, key, "documents", "remove", "1")
    assert no_id.exit_code == unknown.exit_code == 2
    assert "delete needs the document's id" in no_id.stderr


# notices --json


def test_notices_json(served: Served, key: str) -> None:
    job = new_job(served, key)
    with served.database.session() as session:
        session.add(Notice(tenant_id=tenant_of(served.database, key), job_id=job, text="Read me."))
    outcome = run(served, key, "notices", "--json")
    assert outcome.exit_code == 0
    assert [(n["job_id"], n["text"], n["read_at"]) for n in json.loads(outcome.stdout)] == [(job, "Read me.", None)]


# tenant: the operator's commands, on the database


def test_tenant_list_revoke_and_rotate_key(served: Served, database_url: str) -> None:
    name = f"acme-{uuid.uuid4().hex[:8]}"
    first = json.loads(operator("tenant", "create", name, "--json", "--database-url", database_url).stdout)["api_key"]

    kept = operator("tenant", "rotate-key", name, "--keep-old", "--database-url", database_url)
    second = kept.stdout.strip()
    assert kept.exit_code == 0 and "The old keys still work." in kept.stderr
    assert works(served, first) and works(served, second)

    rotated = operator("tenant", "rotate-key", name, "--json", "--database-url", database_url)
    third = json.loads(rotated.stdout)["api_key"]
    listed = json.loads(operator("tenant", "list", "--json", "--database-url", database_url).stdout)
    table = operator("tenant", "list", "--database-url", database_url)

    assert works(served, third)
    assert not works(served, first) and not works(served, second)
    [row] = [row for row in listed if row["name"] == name]
    assert (row["active_keys"], row["revoked_keys"]) == (1, 2)
    listing = table.stdout.splitlines()
    own_limits = ["default"] * 6  # its cap on running jobs, steps, input tokens, queued jobs, bytes, retention
    assert any(line.split()[1:2] == [name] and line.split()[-8:] == ["1", "2", *own_limits] for line in listing)

    revoked = operator("tenant", "revoke", name, "--database-url", database_url)

    assert (revoked.exit_code, revoked.stderr.strip()) == (0, f"1 key of tenant '{name}' revoked.")
    with pytest.raises(ApiError, match=r"unknown or revoked API key"):
        PlimsollClient(served.url, third).jobs()


def test_tenant_commands_on_an_unknown_tenant_say_so(database_url: str) -> None:
    for command in ("revoke", "rotate-key"):
        outcome = operator("tenant", command, "nobody-at-all", "--database-url", database_url)
        assert outcome.exit_code == 1
        assert "no tenant named 'nobody-at-all'" in outcome.stderr


def works(served: Served, key: str) -> bool:
    try:
        with PlimsollClient(served.url, key) as client:
            client.jobs()
    except ApiError:
        return False
    return True


# The CLI's page (docs/api-cli.md): every command it shows exists, parses, and is run by a test (test_cli*.py, and
# test_continue_e2e.py for continue)


def documented_commands() -> list[list[str]]:
    page = (ROOT / "docs" / "api-cli.md").read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", page, flags=re.S):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command.startswith("plimsoll "):
                lines.append(shlex.split(command)[1:])
    return lines


def test_every_command_on_the_cli_page_parses_and_is_tested(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLIMSOLL_API_KEY", "pls_the_page_exports_it")  # as the page's export line does
    commands = documented_commands()
    modules = [*sorted((ROOT / "tests").glob("test_cli*.py")), ROOT / "tests" / "test_continue_e2e.py"]
    tested = "".join(path.read_text(encoding="utf-8") for path in modules)
    group: Any = typer.main.get_command(cli)
    assert len(commands) >= len(group.commands)
    for argv in commands:
        parse(group, argv)
        name = " ".join(argv[:2]) if argv[0] == "tenant" else argv[0]
        quoted = [f'"{part}"' for part in name.split()]
        assert ", ".join(quoted) in tested, f"no test runs `plimsoll {name}`"
    documented = {argv[0] for argv in commands}
    assert documented == set(group.commands), "a command is missing from docs/api-cli.md, or the page names one more"


# The house: the command line uses the other packages; none of them imports it


def test_no_other_package_imports_the_command_line() -> None:
    importers = []
    for package in ("plimsoll", "models", "worker", "api", "emulator", "migrations"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                if any(name == "cli" or name.startswith("cli.") for name in names):
                    importers.append(str(path.relative_to(ROOT)))
    assert importers == []
    assert (ROOT / "cli" / "main.py").is_file()


@pytest.mark.parametrize(
    "args",
    [
        ("steps", "0"),
        ("messages", str(2**63)),
        ("messages", "1", "--limit", "0"),
        ("jobs", "--limit", str(10**6)),
        ("documents", "delete", "-1"),
        ("cancel", "twelve"),
    ],
)
def test_out_of_range_ids_and_pages_are_usage_errors_before_any_request(args: tuple[str, ...]) -> None:
    outcome = run_at("http://127.0.0.1:9", "pls_unused", *args)  # nothing listens there: no request is made
    assert outcome.exit_code == 2, outcome.output
    assert "Invalid value" in outcome.stderr or "No such option" in outcome.stderr


# Usage errors, help and Ctrl-C: as the README says (exit code 2 for an unknown value; 130 and a line for Ctrl-C)


@pytest.mark.parametrize(("option", "value"), [("--strategy", "magic"), ("--compaction", "magic")])
def test_an_unknown_strategy_or_compaction_is_a_usage_error(
    served: Served, key: str, tmp_path: Path, option: str, value: str
) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    refused = run(served, key, "submit", tmp_path / "a.txt", "-i", "Read.", option, value)
    assert refused.exit_code == 2, refused.output
    assert f"Invalid value for '{option}'" in refused.stderr and f"'{value}' is not one of" in refused.stderr
    assert documents_of(served.database, key) == []  # nothing sent


def test_the_command_takes_every_strategy_and_compaction_of_the_api(
    served: Served, key: str, tmp_path: Path, allow_reproductions: None
) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    assert set(Compaction) == set(POLICIES)  # the engine's, every one
    helped = operator("submit", "--help")
    for option, values in (("--strategy", list(Strategy)), ("--compaction", list(POLICIES))):
        for value in values:
            assert value in helped.stdout
            taken = run(served, key, "submit", tmp_path / "a.txt", "-i", "Read.", option, value, "--json")
            assert taken.exit_code == 0, taken.output
            assert json.loads(taken.stdout)[option.removeprefix("--")] == value


def test_every_commands_help_is_whole_at_80_columns() -> None:
    commands = list(every_command(typer.main.get_command(cli)))
    # One process renders every page as `python -m cli <words> --help` would, on a pipe at 80 columns.
    helped = subprocess.run(
        [sys.executable, "-m", "tests.help_pages", json.dumps([path for path, _ in commands])],
        env={**os.environ, "COLUMNS": "80"}, cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    pages = helped.stdout.split(PAGE_END)
    assert len(pages) == len(commands) + 1 and pages[-1] == "", helped.stdout
    for (path, command), shown in zip(commands, pages[:-1], strict=True):
        assert f"Usage: plimsoll {' '.join(path)}" in shown, shown
        assert max(map(len, shown.splitlines())) <= 80 and "…" not in shown, shown
        names = [name for option in command.params for name in [*option.opts, *option.secondary_opts]]
        envvars = [option.envvar for option in command.params if isinstance(option.envvar, str)]
        assert all(name in shown for name in [*names, *envvars]), shown  # none cut short


def every_command(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each command of the command line (Typer's own Click, vendored) with the words that run it."""
    subcommands = getattr(group, "commands", None)
    if subcommands is None:
        yield path, group
        return
    for name, command in subcommands.items():
        yield from every_command(command, (*path, name))


@pytest.mark.parametrize("command", ["submit", "watch"])
def test_ctrl_c_while_waiting_stops_the_watching_with_130_and_says_the_job_goes_on(
    served: Served, key: str, tmp_path: Path, command: str
) -> None:
    (tmp_path / "a.txt").write_text("Alpha.", encoding="utf-8")
    args = ["submit", "a.txt", "-i", "Read.", "--wait"] if command == "submit" else ["watch", str(new_job(served, key))]
    env = {**os.environ, "PLIMSOLL_API_URL": served.url, "PLIMSOLL_API_KEY": key, "PYTHONFAULTHANDLER": "1"}
    # Files, not pipes: a process this test process forks meanwhile (a Celery pool replacing a child) would hold
    # a pipe's end open, and reading it to its end would wait for that process, not for the command.
    with (tmp_path / "out").open("w") as stdout, (tmp_path / "err").open("w") as stderr:
        command_line = [sys.executable, "-m", "cli", *args]
        # An ignored SIGINT is inherited, and under xdist this process was seen ignoring it (the command then never
        # heard the Ctrl-C): started as from a terminal, with Python's own handler.
        inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            waiting = subprocess.Popen(command_line, cwd=tmp_path, env=env, stdout=stdout, stderr=stderr)
        finally:
            signal.signal(signal.SIGINT, inherited)
        try:
            # Watching: the job is queued (nothing runs it) and the command holds a connection to the API.
            wait_until(lambda: queued_jobs(served, key) > 0 and connected(waiting), 60, "the command, watching")
            time.sleep(0.5)
        finally:
            waiting.send_signal(signal.SIGINT)
            try:
                waiting.wait(timeout=30)
            except subprocess.TimeoutExpired:  # PYTHONFAULTHANDLER: an abort writes the stacks of its threads
                waiting.send_signal(signal.SIGABRT)
                waiting.wait(timeout=10)
                raise AssertionError(f"Ctrl-C did not stop it:\n{(tmp_path / 'err').read_text()[-4000:]}") from None
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    job = max(j.id for j in jobs_of(served.database, key))
    assert waiting.returncode == 130, err
    assert f"Stopped watching; job {job} goes on." in err
    assert "Traceback" not in err and "Aborted" not in err
    if command == "submit":
        assert out.splitlines()[0] == str(job)  # its id was printed before the watching began


def connected(process: subprocess.Popen[bytes]) -> bool:
    """Whether the process holds a socket open (Linux): the command's client, once it has asked the API."""
    assert process.poll() is None, f"the command ended ({process.returncode}) before it was watching"
    for each in Path(f"/proc/{process.pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(each).startswith("socket:"):
                return True
    return False


def queued_jobs(served: Served, key: str) -> int:
    return sum(1 for job in jobs_of(served.database, key) if job.status == JobStatus.QUEUED)


def jobs_of(database: Database, key: str) -> list[Job]:
    with database.session() as session:
        return list(session.scalars(select(Job).where(Job.tenant_id == tenant_of(database, key))))


def test_the_sample_chapters_written_in_the_checkout_stay_out_of_git() -> None:
    # The README has people run `plimsoll samples chapters` in the checkout.
    ignored = subprocess.run(["git", "check-ignore", "--quiet", "chapters/01-ru.txt"], cwd=ROOT, check=False)
    assert ignored.returncode == 0
