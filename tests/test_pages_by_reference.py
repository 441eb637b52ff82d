"""Pages of documents stored by reference (models/pages.py): the same job run through the real step code against
the emulator, once storing pages inline (PLIMSOLL_PAGES_BY_REFERENCE=false, how every message was stored before)
and once by reference (the default). What the model is sent, what the API and the command line show and what a
hand-over says are the same bytes; deleting the documents keeps the text the history needs, once per tenant and
never in another tenant's reach; the same works on the embedded SQLite database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from typer.testing import CliRunner

from api.app import create_app
from cli.main import app as cli
from emulator import EmulatorServer
from models.continuation import continue_job
from models.db import Database
from models.documents import delete_document
from models.history import all_messages, message_bodies
from models.migrate import upgrade
from models.pages import PageMissing, expanded, has_references
from models.tables import Body, Job, Message
from testbed.stack import environment
from tests.support_cli import serving
from tests.support_pages import CREATED_AT, TEXTS, Ran, api_messages, run_job


@pytest.fixture(scope="module")
def inline_and_by_reference(database: Database, emulator: EmulatorServer) -> Iterator[tuple[Ran, Ran]]:
    with environment({"PLIMSOLL_PAGES_BY_REFERENCE": "false"}):
        inline = run_job(database, emulator)
    yield inline, run_job(database, emulator)


def stored_contents(database: Database, job_id: int) -> list[Any]:
    with database.session() as session:
        return list(session.scalars(select(Message.content).where(Message.job_id == job_id).order_by(Message.seq)))


def stored_bytes(database: Database, job_id: int) -> int:
    with database.session() as session:
        size = select(func.sum(func.pg_column_size(Message.content))).where(Message.job_id == job_id)
        return int(session.scalar(size) or 0)


def test_pages_are_stored_by_reference_and_take_a_fraction_of_the_inline_bytes(
    database: Database, inline_and_by_reference: tuple[Ran, Ran]
) -> None:
    inline, by_reference = inline_and_by_reference
    assert not any(map(has_references, stored_contents(database, inline.job_id)))
    referring = [c for c in stored_contents(database, by_reference.job_id) if has_references(c)]
    assert len(referring) >= 2 * len(TEXTS)  # several pages of each document
    assert stored_bytes(database, by_reference.job_id) < stored_bytes(database, inline.job_id) / 2


def test_the_model_is_sent_the_same_requests(inline_and_by_reference: tuple[Ran, Ran]) -> None:
    inline, by_reference = inline_and_by_reference
    assert len(inline.requests) > 2 * len(TEXTS)
    assert by_reference.requests == inline.requests


def test_the_api_the_command_line_and_the_hand_over_show_the_same_text(
    database: Database, inline_and_by_reference: tuple[Ran, Ran]
) -> None:
    both = inline, by_reference = inline_and_by_reference
    assert api_messages(database, by_reference) == api_messages(database, inline)
    with serving(database) as served:
        for flags in ([], ["--json"]):
            printed = [
                CliRunner().invoke(
                    cli,
                    [
                        "messages",
                        str(ran.job_id),
                        "--limit",
                        "500",
                        *flags,
                        "--api-url",
                        served.url,
                        "--api-key",
                        ran.key,
                    ],
                )
                for ran in (inline, by_reference)
            ]
            assert [p.exit_code for p in printed] == [0, 0], printed[0].output
            assert CREATED_AT.sub("", printed[1].output) == CREATED_AT.sub("", printed[0].output)
    with database.session() as session:
        new = [
            continue_job(session, tenant_id=ran.tenant_id, job_id=ran.job_id, instruction="Go on.").job for ran in both
        ]
        session.flush()
        # The hand-over names the job it continues; the rest is the same text.
        handovers = [job.instruction.replace(f"job {ran.job_id}", "job ID") for job, ran in zip(new, both, strict=True)]
        assert f"job {by_reference.job_id}" in new[1].instruction
        assert handovers[1] == handovers[0]
        openings = [
            all_messages(session, job.id)[0].content.replace(f"job {ran.job_id}", "job ID")
            for job, ran in zip(new, both, strict=True)
        ]
        assert openings[1] == openings[0]


def test_a_history_stored_inline_goes_on_by_reference_and_reads_the_same(
    database: Database, emulator: EmulatorServer, inline_and_by_reference: tuple[Ran, Ran]
) -> None:
    inline, _ = inline_and_by_reference
    mixed = run_job(database, emulator, inline_steps=3)
    contents = stored_contents(database, mixed.job_id)
    results = [c for c in contents if isinstance(c, list) and c[0].get("type") == "tool_result"]
    assert 0 < sum(map(has_references, results)) < len(results)  # old rows and new ones
    assert mixed.requests == inline.requests
    assert api_messages(database, mixed) == api_messages(database, inline)


def test_deleting_the_documents_keeps_what_the_history_needs_once_per_tenant(
    database: Database, emulator: EmulatorServer, inline_and_by_reference: tuple[Ran, Ran]
) -> None:
    inline, _ = inline_and_by_reference
    mine = run_job(database, emulator)
    again = run_job(database, emulator, tenant=(mine.tenant_id, mine.key))  # the same documents read again
    other = run_job(database, emulator)  # another tenant, documents with the same texts
    before = api_messages(database, mine)
    with database.session() as session:
        seqs = range(len(all_messages(session, mine.job_id)))
        bodies_before = message_bodies(session, mine.job_id, seqs)
    with TestClient(create_app(database=database), headers={"X-API-Key": mine.key}) as client:
        for document_id in {*mine.document_ids, *again.document_ids}:
            assert client.delete(f"/v1/documents/{document_id}").status_code == 204
    assert api_messages(database, mine) == before == api_messages(database, inline)
    assert api_messages(database, again) == before
    with database.session() as session:
        assert message_bodies(session, mine.job_id, seqs) == bodies_before
        pages = {
            (block["content"]["document_id"], block["content"]["start"], block["content"]["end"])
            for content in stored_contents(database, mine.job_id)
            if has_references(content)
            for block in content
        }
        kept = session.scalars(select(Body).where(Body.tenant_id == mine.tenant_id)).all()
        assert len(kept) == len(pages)  # two jobs read the same pages: each page's text is kept once
        assert session.scalar(select(func.count()).select_from(Body).where(Body.tenant_id == other.tenant_id)) == 0
        # References are read only within their tenant: not from another's bodies, nor from its documents.
        with pytest.raises(PageMissing):
            expanded(session, other.tenant_id, stored_contents(database, mine.job_id))
        with pytest.raises(PageMissing):
            expanded(session, inline.tenant_id, stored_contents(database, other.job_id))


def test_pages_by_reference_on_the_embedded_sqlite_database(tmp_path: Path, emulator: EmulatorServer) -> None:
    url = f"sqlite:///{tmp_path / 'plimsoll.sqlite3'}"
    upgrade(url)
    database = Database(url)
    try:
        ran = run_job(database, emulator)
        with database.session() as session:
            seqs = range(len(all_messages(session, ran.job_id)))
            before = message_bodies(session, ran.job_id, seqs)
            assert any(has_references(content) for content in stored_contents(database, ran.job_id))
        with database.session() as session:
            for document_id in ran.document_ids:
                delete_document(session, tenant_id=ran.tenant_id, document_id=document_id)
        with database.session() as session:
            assert message_bodies(session, ran.job_id, seqs) == before
            assert session.get(Job, ran.job_id) is not None
    finally:
        database.dispose()
