"""Managing what a tenant has, through the HTTP API on the real PostgreSQL: documents de-duplicated by content
hash and deleted, jobs filtered by status, and a job checked before anything is stored."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from alembic import command
from sqlalchemy import func, select, text

from models.db import Database, make_engine
from models.documents import delete_document, store_document
from models.errors import NotFound
from models.jobs import COMPACTION, create_job
from models.migrate import alembic_config
from models.settings import get_settings
from models.tables import Document, Job, JobDocument, JobStatus
from tests.support_api import Api, serve_api, stored_documents


@pytest.fixture
def api(database: Database) -> Iterator[Api]:
    with serve_api(database) as api:
        yield api


def set_status(database: Database, job_id: int, status: JobStatus) -> None:
    with database.session() as session:
        session.get_one(Job, job_id).status = status


# Documents: the same text twice is one document


def test_the_same_name_and_text_uploaded_again_is_the_stored_document(api: Api) -> None:
    caller = api.tenant()
    content = "Kapitola 1. Dopis přišel ráno.\n"
    first = caller.post("/v1/documents", json={"name": "ch01.txt", "content": content}).json()
    again = caller.post("/v1/documents", files=[("files", ("ch01.txt", content.encode(), "text/plain"))]).json()
    renamed = caller.post("/v1/documents", json={"name": "copy.txt", "content": content}).json()

    assert first["reused"] == []
    assert again["documents"] == first["documents"]
    assert again["reused"] == [first["documents"][0]["id"]]
    assert renamed["reused"] == []  # a job knows a document by its name: another name is another document
    stored = stored_documents(api.database, caller.tenant_id)
    assert sorted(d.name for d in stored) == ["ch01.txt", "copy.txt"]
    assert {d.content_sha256 for d in stored} == {hashlib.sha256(content.encode()).hexdigest()}


def test_de_duplication_is_per_tenant(api: Api) -> None:
    ours, theirs = api.tenant(), api.tenant()

    mine = ours.document("a.txt", "Alpha.")
    other = theirs.post("/v1/documents", json={"name": "a.txt", "content": "Alpha."}).json()

    assert other["reused"] == [] and other["documents"][0]["id"] != mine
    assert len(stored_documents(api.database, theirs.tenant_id)) == 1


# Documents: deleting


def test_a_document_is_deleted_unless_an_unfinished_job_uses_it(api: Api) -> None:
    caller = api.tenant()
    used = caller.document("used.txt", "Used by a job.")
    free = caller.document("free.txt", "Used by nobody.")
    job = caller.job([used])

    refused = caller.client.delete(f"/v1/documents/{used}", headers=caller.headers)
    deleted = caller.client.delete(f"/v1/documents/{free}", headers=caller.headers)
    set_status(api.database, job["id"], JobStatus.SUCCEEDED)
    after_the_job = caller.client.delete(f"/v1/documents/{used}", headers=caller.headers)

    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"document {used} is used by unfinished job {job['id']}: cancel the job or wait until it finishes"
    )
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert after_the_job.status_code == 204
    assert stored_documents(api.database, caller.tenant_id) == []
    assert caller.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded"  # the finished job stays
    with api.database.session() as session:
        assert session.scalar(select(func.count()).where(JobDocument.job_id == job["id"])) == 0


def test_deleting_another_tenants_or_an_unknown_document_is_not_found(api: Api) -> None:
    owner, stranger = api.tenant(), api.tenant()
    document = owner.document("a.txt", "Alpha.")

    foreign = stranger.client.delete(f"/v1/documents/{document}", headers=stranger.headers)
    unknown = owner.client.delete("/v1/documents/987654321", headers=owner.headers)
    bad = owner.client.delete("/v1/documents/0", headers=owner.headers)

    assert (foreign.status_code, foreign.json()["detail"]) == (404, f"no document with id {document}")
    assert unknown.status_code == 404
    assert bad.status_code == 422
    assert [d.id for d in stored_documents(api.database, owner.tenant_id)] == [document]


# Jobs: the status filter


def test_jobs_are_filtered_by_status(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("a.txt", "Alpha.")
    done, queued, incomplete = (caller.job([document])["id"] for _ in range(3))
    set_status(api.database, done, JobStatus.SUCCEEDED)
    set_status(api.database, incomplete, JobStatus.INCOMPLETE)

    def ids(status: str) -> list[int]:
        page = caller.get("/v1/jobs", params={"status": status}).json()
        return [job["id"] for job in page["items"]]

    assert ids("succeeded") == [done]
    assert ids("queued") == [queued]
    assert ids("incomplete") == [incomplete]
    assert ids("failed") == []
    wrong = caller.get("/v1/jobs", params={"status": "finished"})
    assert wrong.status_code == 422
    assert "status" in wrong.json()["detail"]


# Jobs: checked, nothing stored


def test_a_job_is_checked_without_being_stored_or_queued(api: Api) -> None:
    caller = api.tenant()
    settings = get_settings()

    checked = caller.post("/v1/jobs/check", json={"instruction": "Read everything.", "budget": 50_000})

    assert checked.status_code == 200, checked.text
    assert checked.json() == {
        "model": settings.default_model,
        "endpoint": urlsplit(settings.emulator_url or "").netloc,  # the suite's emulator answers it
        "emulator": True,
        "budget": 50_000,
        "hard_limit": checked.json()["hard_limit"],
        "max_steps": settings.max_steps_per_job,
        "max_input_tokens": settings.max_input_tokens_per_job,
        "max_cost_usd": float(settings.max_cost_usd_per_job),
        "compaction": COMPACTION,
        "warnings": [],
        "max_document_chars": settings.max_document_chars,
    }
    assert checked.json()["hard_limit"] > 50_000
    assert caller.get("/v1/jobs").json()["total"] == 0
    assert api.enqueued == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"budget": 5_000_000}, "the budget must be between 1,000 and"),
        ({"strategy": "magic"}, "unknown strategy 'magic'"),
        ({"instruction": "  "}, "the instruction is empty"),
        ({"document_ids": [987654321]}, "no document with id 987654321"),
        ({"max_input_tokens": 1_000, "budget": 50_000}, "max_input_tokens must be at least the budget"),
    ],
)
def test_a_job_the_api_would_refuse_is_refused_by_the_check_with_the_same_words(
    api: Api, fields: dict[str, object], message: str
) -> None:
    caller = api.tenant()
    body = {"instruction": "Read.", "document_ids": [caller.document("a.txt", "Alpha.")], **fields}

    checked = caller.post("/v1/jobs/check", json=body)
    submitted = caller.post("/v1/jobs", json=body)

    assert checked.status_code == submitted.status_code
    assert 400 <= checked.status_code < 500
    assert message in checked.json()["detail"]
    assert checked.json()["detail"] == submitted.json()["detail"]


# The migration hashes the documents stored before it


def test_the_migration_hashes_the_documents_stored_before_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    command.upgrade(alembic_config(url), "0003")
    engine = make_engine(url)
    texts = ["Žluťoučký kůň úpěl ďábelské ódy.", "Second."]
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO tenants (id, name, created_at) VALUES (1, 'old', CURRENT_TIMESTAMP)"))
        for number, content in enumerate(texts, start=1):
            connection.execute(
                text(
                    "INSERT INTO documents (id, tenant_id, name, content, chars, token_estimate, created_at) "
                    "VALUES (:id, 1, :name, :content, 1, 1, CURRENT_TIMESTAMP)"
                ),
                {"id": number, "name": f"{number}.txt", "content": content},
            )
    engine.dispose()

    command.upgrade(alembic_config(url), "head")

    database = Database(url)
    try:
        with database.session() as session:
            hashes = list(session.scalars(select(Document.content_sha256).order_by(Document.id)))
            stored = store_document(session, tenant_id=1, name="1.txt", content=texts[0])
    finally:
        database.dispose()
    assert hashes == [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    assert (stored.document.id, stored.reused) == (1, True)


def test_a_delete_racing_a_job_being_created_waits_and_sees_the_job(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("a.txt", "Alpha.")
    answers: list[int] = []

    def delete() -> None:
        answers.append(caller.client.delete(f"/v1/documents/{document}", headers=caller.headers).status_code)

    with api.database.session() as session:  # the job's transaction, not yet committed when the delete comes
        job = create_job(session, tenant_id=caller.tenant_id, instruction="Read.", document_ids=[document])
        deleting = threading.Thread(target=delete)
        deleting.start()
        deleting.join(0.5)
        assert deleting.is_alive(), "the delete did not wait for the job's transaction"
    deleting.join(10)

    assert answers == [409]
    assert [d.id for d in stored_documents(api.database, caller.tenant_id)] == [document]
    assert caller.get(f"/v1/jobs/{job.id}").json()["status"] == "queued"


def test_a_job_racing_a_delete_waits_and_finds_the_document_gone(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("a.txt", "Alpha.")
    outcome: list[BaseException | int] = []

    def create() -> None:
        try:
            with api.database.session() as session:
                outcome.append(create_job(session, tenant_id=caller.tenant_id, instruction="Read.",
                                          document_ids=[document]).id)  # fmt: skip
        except BaseException as error:
            outcome.append(error)

    with api.database.session() as session:  # the delete's transaction, not yet committed when the job comes
        delete_document(session, tenant_id=caller.tenant_id, document_id=document)
        creating = threading.Thread(target=create)
        creating.start()
        creating.join(0.5)
        assert creating.is_alive(), "the job did not wait for the delete's transaction"
    creating.join(10)

    [error] = outcome
    assert isinstance(error, NotFound), repr(error)  # a 404 naming the document, not a database error
    assert str(error) == f"no document with id {document}"


def test_checking_a_job_uses_up_no_job_id(api: Api) -> None:
    caller = api.tenant()
    job = {"instruction": "Read.", "document_ids": [caller.document("a.txt", "Alpha.")]}
    first = caller.post("/v1/jobs", json=job).json()["id"]
    for _ in range(3):
        assert caller.post("/v1/jobs/check", json=job).status_code == 200
    assert caller.post("/v1/jobs", json=job).json()["id"] == first + 1
