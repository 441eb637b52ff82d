"""Who may see what: API keys, tenant isolation, and the notices a tenant reads."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from models.db import Database
from models.history import append_messages
from models.tables import ApiKey, Job, Notice, Step
from models.tenants import hash_key
from tests.support_api import Api, Caller, read, result, serve_api, step_row

MISSING_KEY = "no API key: send it in the X-API-Key header or as 'Authorization: Bearer <key>'"


@pytest.fixture
def api(database: Database) -> Iterator[Api]:
    with serve_api(database) as api:
        yield api


def add_notice(database: Database, caller: Caller, job_id: int, text: str) -> int:
    with database.session() as session:
        notice = Notice(tenant_id=caller.tenant_id, job_id=job_id, text=text)
        session.add(notice)
        session.flush()
        return notice.id


# Keys


def test_a_request_without_a_key_is_401_with_a_hint(api: Api) -> None:
    response = api.client.get("/v1/jobs")
    assert response.status_code == 401
    assert response.json() == {"detail": MISSING_KEY}
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({"X-API-Key": "pls_not-a-key"}, "unknown or revoked API key"),
        ({"Authorization": "Bearer pls_not-a-key"}, "unknown or revoked API key"),
        ({"X-API-Key": ""}, MISSING_KEY),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, MISSING_KEY),
    ],
    ids=["unknown-header", "unknown-bearer", "empty", "basic-auth"],
)
def test_an_unknown_or_empty_key_is_401(api: Api, headers: dict[str, str], detail: str) -> None:
    response = api.client.get("/v1/documents", headers=headers)
    assert (response.status_code, response.json()) == (401, {"detail": detail})


def test_either_header_carries_the_key(api: Api) -> None:
    caller = api.tenant()
    caller.document("a.txt", "A.")
    by_header = api.client.get("/v1/documents", headers={"X-API-Key": caller.key})
    by_bearer = api.client.get("/v1/documents", headers={"Authorization": f"Bearer {caller.key}"})
    assert by_header.status_code == by_bearer.status_code == 200
    assert by_header.json() == by_bearer.json()
    assert by_header.json()["total"] == 1


def test_a_revoked_key_is_401_and_only_its_hash_is_stored(api: Api) -> None:
    caller = api.tenant()
    with api.database.session() as session:
        key = session.scalars(select(ApiKey).where(ApiKey.tenant_id == caller.tenant_id)).one()
        assert key.key_hash == hash_key(caller.key) != caller.key
        key.revoked_at = datetime.now(UTC)

    response = caller.get("/v1/jobs")

    assert (response.status_code, response.json()["detail"]) == (401, "unknown or revoked API key")


def test_health_needs_no_key(api: Api) -> None:
    assert api.client.get("/healthz").status_code == 200


# Isolation


def test_a_tenant_never_sees_another_tenants_documents_jobs_messages_or_notices(api: Api) -> None:
    owner, other = api.tenant(), api.tenant()
    secret = "The launch code is 0000."
    document = owner.document("secret.txt", secret)
    job_id = owner.job([document], "Keep this secret.")["id"]
    with api.database.session() as session:
        append_messages(session, session.get_one(Job, job_id), [read("t1", "secret.txt"), result("t1")], step=1)
        session.add(step_row(job_id, 1, stage="full"))
    notice = add_notice(api.database, owner, job_id, "Owner's notice.")

    answers = [
        other.get(f"/v1/documents/{document}"),
        other.get(f"/v1/jobs/{job_id}"),
        other.get(f"/v1/jobs/{job_id}/messages"),
        other.get(f"/v1/jobs/{job_id}/steps"),
        other.post(f"/v1/jobs/{job_id}/cancel"),
        other.post(f"/v1/notices/{notice}/read"),
        other.post("/v1/jobs", json={"instruction": "Leak it.", "document_ids": [document]}),
    ]

    assert [a.status_code for a in answers] == [404] * len(answers)
    assert [a.json()["detail"] for a in answers] == [
        f"no document with id {document}",
        *[f"no job with id {job_id}"] * 4,
        f"no notice with id {notice}",
        f"no document with id {document}",
    ]
    for path in ("/v1/documents", "/v1/jobs", "/v1/notices?unread=false", "/v1/notices?unread=true"):
        assert other.get(path).json() == {"items": [], "total": 0, "offset": 0, "limit": 100, "next_offset": None}
    assert all(secret not in a.text and "Keep this secret" not in a.text for a in answers)
    # Nothing the other tenant tried changed the owner's objects.
    assert owner.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
    assert owner.get("/v1/notices", params={"unread": True}).json()["total"] == 1
    with api.database.session() as session:
        assert session.scalars(select(Job).where(Job.tenant_id == other.tenant_id)).all() == []
        assert len(session.scalars(select(Step).where(Step.job_id == job_id)).all()) == 1


# Notices


def test_notices_are_listed_newest_first_and_marked_read_once(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("a.txt", "A.")
    first_job, second_job = caller.job([document])["id"], caller.job([document])["id"]
    older = add_notice(api.database, caller, first_job, "This conversation is too long for the model.")
    newer = add_notice(api.database, caller, second_job, "Second notice.")

    unread = caller.get("/v1/notices", params={"unread": True}).json()
    assert [n["id"] for n in unread["items"]] == [newer, older]
    assert unread["items"][1] | {"created_at": None} == {
        "id": older,
        "job_id": first_job,
        "emulator": True,  # the suite's emulator answers every job
        "text": "This conversation is too long for the model.",
        "created_at": None,
        "read_at": None,
    }

    marked = caller.post(f"/v1/notices/{older}/read")
    assert marked.status_code == 200
    read_at = marked.json()["read_at"]
    assert read_at is not None
    assert caller.post(f"/v1/notices/{older}/read").json()["read_at"] == read_at  # the first reading counts

    assert [n["id"] for n in caller.get("/v1/notices", params={"unread": True}).json()["items"]] == [newer]
    everything = caller.get("/v1/notices").json()["items"]
    assert [(n["id"], n["read_at"]) for n in everything] == [(newer, None), (older, read_at)]
    of_first_job = caller.get("/v1/notices", params={"job_id": first_job}).json()["items"]
    assert [n["id"] for n in of_first_job] == [older]


def test_an_unknown_notice_is_not_found(api: Api) -> None:
    response = api.tenant().post("/v1/notices/987654321/read")
    assert (response.status_code, response.json()) == (404, {"detail": "no notice with id 987654321"})
