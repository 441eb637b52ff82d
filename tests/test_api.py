"""The HTTP API against the real PostgreSQL: documents, jobs, their history and steps, cancelling (the helpers
shared with the other ``test_api_*`` modules are in ``tests/support_api.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from models.db import Database
from models.history import append_messages
from models.jobs import create_job
from models.settings import get_settings
from models.tables import Job, JobKind, JobStatus, Message, now
from plimsoll import estimate_tokens
from tests.support_api import Api, read, result, serve_api, step_row, stored_documents
from worker.lease import reconcile

# Fixtures


@pytest.fixture
def api(database: Database) -> Iterator[Api]:
    with serve_api(database) as api:
        yield api


@pytest.fixture
def small_documents(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Documents of at most 40 characters, for the time of one test."""
    monkeypatch.setenv("PLIMSOLL_MAX_DOCUMENT_CHARS", "40")
    get_settings.cache_clear()
    yield get_settings().max_document_chars
    get_settings.cache_clear()  # the next call reads the environment again, without the limit


# Documents


def test_a_json_document_is_stored_and_listed_without_its_content(api: Api) -> None:
    caller = api.tenant()
    content = "Глава первая. Всё началось с письма.\n"

    response = caller.post("/v1/documents", json={"name": "chapter-01.txt", "content": content})

    assert response.status_code == 201
    [answer] = response.json()["documents"]
    assert answer["name"] == "chapter-01.txt"
    assert answer["chars"] == len(content)
    assert answer["token_estimate"] == estimate_tokens(content)
    [stored] = stored_documents(api.database, caller.tenant_id)
    assert (stored.id, stored.content) == (answer["id"], content)
    listing = caller.get("/v1/documents").json()
    assert listing["total"] == 1
    assert listing["items"] == [answer]
    assert caller.get(f"/v1/documents/{answer['id']}").json() == answer


def test_uploaded_files_are_decoded_as_utf8_with_the_bom_dropped(api: Api) -> None:
    caller = api.tenant()
    russian = "Первая строка\r\nвторая строка\n"
    japanese = "第一章 吾輩は猫である。"

    response = caller.post(
        "/v1/documents",
        files=[
            ("files", ("ru.txt", b"\xef\xbb\xbf" + russian.encode(), "text/plain")),
            ("files", ("dir/ja.txt", japanese.encode(), "text/plain")),
        ],
    )

    assert response.status_code == 201, response.text
    answered = response.json()["documents"]
    assert [(d["name"], d["chars"]) for d in answered] == [("ru.txt", len(russian)), ("ja.txt", len(japanese))]
    stored = {d.name: d.content for d in stored_documents(api.database, caller.tenant_id)}
    assert stored == {"ru.txt": russian, "ja.txt": japanese}


def test_invalid_utf8_is_refused_naming_the_file_and_byte_and_nothing_is_stored(api: Api) -> None:
    caller = api.tenant()
    latin1 = "Café crème".encode("latin-1")  # é is 0xe9, at byte 3

    response = caller.post(
        "/v1/documents",
        files=[("files", ("good.txt", b"fine text", "text/plain")), ("files", ("menu.txt", latin1, "text/plain"))],
    )

    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "'menu.txt' is not valid UTF-8" in detail
    assert "byte 0xe9 at offset 3" in detail
    assert stored_documents(api.database, caller.tenant_id) == []  # not even good.txt


def test_the_byte_offset_counts_the_bom(api: Api) -> None:
    response = api.tenant().post("/v1/documents", files={"files": ("x.txt", b"\xef\xbb\xbfab\xff", "text/plain")})
    assert response.status_code == 422
    assert "byte 0xff at offset 5" in response.json()["detail"]


@pytest.mark.parametrize(
    ("upload", "message"),
    [
        ({"json": {"name": "blank.txt", "content": "  \n "}}, "document 'blank.txt' is empty"),
        ({"files": {"files": ("empty.txt", b"", "text/plain")}}, "document 'empty.txt' is empty"),
        ({"json": {"name": "a`b", "content": "text"}}, "may not contain backticks"),
        ({"json": {"name": "a.txt"}}, "content: Field required"),
        ({"json": {"name": "a.txt", "content": "x", "tags": []}}, "tags: Extra inputs are not permitted"),
        ({"content": b'{"name": "a", "content": "\\ud800"}', "headers": {"content-type": "application/json"}}, "JSON"),
        ({"files": {"notes": ("a.txt", b"text", "text/plain")}}, "unexpected form field 'notes'"),
        ({"data": {"files": "no file"}, "files": {"other": ("a.txt", b"x")}}, "a file part has no filename"),
        (
            {"files": [("files", ("same.txt", b"one", "text/plain")), ("files", ("same.txt", b"two", "text/plain"))]},
            "two files in the upload are named 'same.txt'",
        ),
    ],
    ids=[
        "blank",
        "empty-file",
        "bad-name",
        "no-content",
        "unknown-field",
        "lone-surrogate",
        "wrong-part",
        "part-without-filename",
        "duplicate-names",
    ],
)
def test_bad_documents_are_refused_with_a_clear_message(api: Api, upload: dict[str, Any], message: str) -> None:
    caller = api.tenant()
    response = caller.post("/v1/documents", **upload)
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]
    assert stored_documents(api.database, caller.tenant_id) == []


def test_an_oversize_document_is_refused_naming_the_limit(api: Api, small_documents: int) -> None:
    caller = api.tenant()
    response = caller.post("/v1/documents", files={"files": ("long.txt", b"x" * (small_documents + 1), "text/plain")})
    assert response.status_code == 422
    assert response.json()["detail"] == f"document 'long.txt' has {small_documents + 1} characters; the limit is 40"
    # The limit counts characters, not bytes: 40 two-byte Cyrillic letters fit.
    assert caller.post("/v1/documents", json={"name": "ok.txt", "content": "ж" * small_documents}).status_code == 201


def test_other_media_types_and_empty_multipart_are_refused(api: Api) -> None:
    caller = api.tenant()
    plain = caller.post("/v1/documents", content=b"text", headers={"content-type": "text/plain"})
    assert plain.status_code == 415
    assert "multipart/form-data" in plain.json()["detail"]
    boundary = "b0undary"
    empty = caller.post(
        "/v1/documents",
        content=f"--{boundary}--\r\n".encode(),
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert empty.status_code == 422
    assert empty.json()["detail"] == "no files in the upload: send them as multipart parts named 'files'"
    cut = caller.post(
        "/v1/documents",
        content=f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="a"\r\n\r\ntext'.encode(),
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert cut.status_code == 422
    assert "closing boundary is missing" in cut.json()["detail"]


def test_a_body_over_the_limit_is_refused_before_it_is_parsed(api: Api) -> None:
    caller = api.tenant()
    body = b"x" * (64 * 1024 * 1024 + 1)
    response = caller.post("/v1/documents", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "can be uploaded in several requests" in response.json()["detail"]


# Jobs


def test_a_job_is_created_committed_then_enqueued_once(database: Database) -> None:
    committed_when_enqueued: list[tuple[int, bool]] = []

    def enqueue(job_id: int) -> None:
        with database.session() as session:  # another connection: it sees committed rows only
            committed_when_enqueued.append((job_id, session.get(Job, job_id) is not None))

    with serve_api(database, enqueue) as api:
        caller = api.tenant()
        ids = [caller.document("a.txt", "Alpha."), caller.document("b.txt", "Beta.")]
        job = caller.job(ids, "Compare the two documents.", budget=50_000, locale="cs-CZ")
        read_back = caller.get(f"/v1/jobs/{job['id']}").json()
        history = caller.get(f"/v1/jobs/{job['id']}/messages").json()

    assert committed_when_enqueued == [(job["id"], True)]
    assert job["status"] == "queued"
    assert job["kind"] == "main"
    assert (job["model"], job["budget"], job["hard_limit"]) == ("plimsoll-emulator", 50_000, 1_000_000)
    assert job["locale"] == "cs-CZ"
    assert job["progress"] == {"steps_done": 0, "documents_total": 2, "documents_read": [], "reading": None}
    assert job["usage"]["cache_read_share"] is None
    assert job["last_request"] is None
    assert read_back == job
    assert history["total"] == 1
    assert history["items"][0]["content"] == "Compare the two documents.\n\nDocuments (2): `a.txt`, `b.txt`"


def test_a_job_whose_first_step_cannot_be_queued_stays_queued_for_the_reconciler(database: Database) -> None:
    def enqueue(_job_id: int) -> None:
        raise ConnectionError("redis is down")

    with serve_api(database, enqueue) as api:
        caller = api.tenant()
        response = caller.post("/v1/jobs", json={"instruction": "Go.", "document_ids": [caller.document("a", "A.")]})
    assert response.status_code == 201
    job_id = response.json()["id"]
    assert response.json()["status"] == "queued"
    with database.session() as session:  # its deadline passes with nobody having claimed it
        session.get_one(Job, job_id).lease_until = now() - timedelta(seconds=1)
    queued: list[tuple[int, int]] = []
    assert job_id in reconcile(database, lease_seconds=30, enqueue=lambda job, step: queued.append((job, step)))
    assert (job_id, 0) in queued


def test_the_job_view_reports_progress_usage_last_request_and_children(api: Api) -> None:
    caller = api.tenant()
    ids = [caller.document(name, f"Text of {name}.") for name in ("a.txt", "b.txt", "c.txt")]
    job_id = caller.job(ids)["id"]
    with api.database.session() as session:
        job = session.get_one(Job, job_id)
        append_messages(
            session, job, [read("t1", "a.txt"), result("t1"), read("t2", "outside.txt"), result("t2")], step=1
        )
        child = create_job(
            session,
            tenant_id=caller.tenant_id,
            instruction="Check b.",
            document_ids=ids,
            kind=JobKind.SUBAGENT,
            parent=job,
        )
        append_messages(session, child, [read("t3", "b.txt"), result("t3"), read("t4", "a.txt"), result("t4")], step=1)
        session.add_all([step_row(job_id, 1, stage="full", cleared=[]), step_row(job_id, 2, stage="clear")])
        job.step, job.status, job.retries = 2, JobStatus.RUNNING, 1
        job.input_tokens, job.output_tokens, job.cache_read_tokens, job.cache_write_tokens = 100, 40, 300, 100

    view = caller.get(f"/v1/jobs/{job_id}").json()

    assert view["status"] == "running"
    assert view["progress"]["documents_read"] == ["a.txt", "b.txt"]
    assert view["progress"]["reading"] == {  # the subagent's newest read
        "document": "a.txt", "document_number": 1, "page": 1, "pages": None, "characters_from": 0,
        "characters": len("Text of a.txt."),
    }  # fmt: skip
    assert view["progress"]["steps_done"] == 2 and view["progress"]["documents_total"] == 3
    assert view["usage"] == {
        "input_tokens": 100,
        "output_tokens": 40,
        "cache_read_tokens": 300,
        "cache_write_tokens": 100,
        "cost_vs_uncached": (100 + 1.25 * 100 + 0.1 * 300) / 500,
        "cache_read_share": 0.6,
    }
    assert view["retries"] == 1
    last = view["last_request"]
    assert (last["step"], last["stage"], last["cleared"], last["dropped"]) == (2, "clear", 2, 1)
    assert (last["estimated_tokens"], last["reported_input_tokens"], last["calibration_factor"]) == (900, 950, 1.05)
    assert last["messages_sent"] == 7
    assert view["children"] == [{"id": child.id, "status": "queued", "error": None, "steps_done": 0}]
    steps = caller.get(f"/v1/jobs/{job_id}/steps").json()
    assert [(s["step"], s["stage"], s["cleared"]) for s in steps["items"]] == [
        (1, "full", []),
        (2, "clear", ["t0", "t1"]),
    ]


def test_the_history_endpoint_pages_through_every_stored_message(api: Api) -> None:
    caller = api.tenant()
    job_id = caller.job([caller.document("a.txt", "A.")])["id"]
    with api.database.session() as session:
        job = session.get_one(Job, job_id)
        for n in range(6):
            append_messages(session, job, [read(f"t{n}", "a.txt"), result(f"t{n}")], step=n + 1)
        stored = [(m.seq, m.role, m.content, m.token_estimate, m.step) for m in session.scalars(messages_of(job_id))]

    pages = [caller.get(f"/v1/jobs/{job_id}/messages", params={"offset": o, "limit": 5}).json() for o in (0, 5, 10)]

    assert [p["total"] for p in pages] == [13, 13, 13]
    answered = [(m["seq"], m["role"], m["content"], m["token_estimate"], m["step"]) for p in pages for m in p["items"]]
    assert answered == stored
    assert len(answered) == 13
    assert all(m[3] > 0 for m in answered)
    too_many = caller.get(f"/v1/jobs/{job_id}/messages", params={"limit": 5000})
    assert too_many.status_code == 422
    assert "limit (query): Input should be less than or equal to 1000" in too_many.json()["detail"]


def test_jobs_are_listed_newest_first_in_pages_and_by_kind(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("a.txt", "A.")
    ids = [caller.job([document], f"Task {n}.")["id"] for n in range(3)]
    with api.database.session() as session:
        parent = session.get_one(Job, ids[0])
        child = create_job(
            session, tenant_id=caller.tenant_id, instruction="Sub.", kind=JobKind.SUBAGENT, parent=parent
        )

    first = caller.get("/v1/jobs", params={"limit": 2}).json()
    second = caller.get("/v1/jobs", params={"offset": 2, "limit": 2}).json()
    mains = caller.get("/v1/jobs", params={"kind": "main"}).json()

    assert [j["id"] for j in first["items"] + second["items"]] == [child.id, *reversed(ids)]
    assert first["total"] == 4
    assert [j["id"] for j in mains["items"]] == list(reversed(ids))
    assert first["items"][1]["instruction_excerpt"] == "Task 2."
    assert caller.get("/v1/jobs", params={"kind": "robot"}).status_code == 422


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"instruction": "   "}, 422, "the instruction is empty"),
        ({"budget": 2_000_000}, 422, "the budget must be between 1,000 and 984,000 tokens for plimsoll-emulator"),
        ({"budget": 10}, 422, "the budget must be between 1,000"),
        ({"model": "gpt-9"}, 422, "unknown model 'gpt-9'; known: "),
        ({"strategy": "magic"}, 422, "unknown strategy 'magic'"),
        ({"document_ids": [987_654_321]}, 404, "no document with id 987654321"),
        ({"locale": "english please"}, 422, "locale: String should match pattern"),
        ({"budget": "lots"}, 422, "budget: Input should be a valid integer"),
        ({"instructions": "typo"}, 422, "instructions: Extra inputs are not permitted"),
    ],
    ids=[
        "empty-instruction",
        "budget-over-limit",
        "budget-too-small",
        "unknown-model",
        "unknown-strategy",
        "unknown-document",
        "bad-locale",
        "budget-not-int",
        "unknown-field",
    ],
)
def test_bad_jobs_are_refused_with_a_clear_message(api: Api, fields: dict[str, Any], status: int, message: str) -> None:
    caller = api.tenant()
    body = {"instruction": "Read it.", "document_ids": [caller.document("a.txt", "A.")]} | fields

    response = caller.post("/v1/jobs", json=body)

    assert response.status_code == status, response.text
    assert message in response.json()["detail"]
    assert caller.get("/v1/jobs").json()["total"] == 0
    assert api.enqueued == []


def test_a_job_over_documents_with_the_same_name_or_one_listed_twice_is_refused(api: Api) -> None:
    caller = api.tenant()
    first, second = caller.document("notes.txt", "Old notes."), caller.document("notes.txt", "New notes.")

    same_name = caller.post("/v1/jobs", json={"instruction": "Go.", "document_ids": [first, second]})
    twice = caller.post("/v1/jobs", json={"instruction": "Go.", "document_ids": [first, first]})

    assert (same_name.status_code, same_name.json()["detail"]) == (422, "two documents of the job have the same name")
    assert (twice.status_code, twice.json()["detail"]) == (422, "a document is listed twice")
    assert api.enqueued == []


def test_an_unknown_job_is_not_found(api: Api) -> None:
    caller = api.tenant()
    for path in ("/v1/jobs/987654321", "/v1/jobs/987654321/messages", "/v1/jobs/987654321/steps"):
        response = caller.get(path)
        assert (response.status_code, response.json()) == (404, {"detail": "no job with id 987654321"})
    assert caller.post("/v1/jobs/987654321/cancel").status_code == 404


# Cancelling


def test_cancelling_a_queued_job_cancels_its_unfinished_subagents(api: Api) -> None:
    caller = api.tenant()
    job_id = caller.job([caller.document("a.txt", "A.")])["id"]
    with api.database.session() as session:
        job = session.get_one(Job, job_id)
        running = create_job(session, tenant_id=caller.tenant_id, instruction="1", kind=JobKind.SUBAGENT, parent=job)
        done = create_job(session, tenant_id=caller.tenant_id, instruction="2", kind=JobKind.SUBAGENT, parent=job)
        running.status, done.status = JobStatus.RUNNING, JobStatus.SUCCEEDED

    response = caller.post(f"/v1/jobs/{job_id}/cancel")

    assert response.status_code == 200
    view = response.json()
    assert view["status"] == "cancelled"
    assert view["finished_at"] is not None
    children = [(child["id"], child["status"]) for child in view["children"]]
    assert children == [(running.id, "cancelled"), (done.id, "succeeded")]


def test_cancelling_a_running_job_works_and_a_finished_one_is_a_conflict(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("a.txt", "A.")
    running, succeeded = caller.job([document])["id"], caller.job([document])["id"]
    with api.database.session() as session:
        session.get_one(Job, running).status = JobStatus.RUNNING
        session.get_one(Job, succeeded).status = JobStatus.SUCCEEDED

    assert caller.post(f"/v1/jobs/{running}/cancel").json()["status"] == "cancelled"
    again = caller.post(f"/v1/jobs/{running}/cancel")
    finished = caller.post(f"/v1/jobs/{succeeded}/cancel")

    assert again.status_code == 409
    assert again.json()["detail"] == (
        f"job {running} has finished already (cancelled); only a queued or running job can be cancelled"
    )
    assert finished.status_code == 409
    assert f"job {succeeded} has finished already (succeeded)" in finished.json()["detail"]
    assert caller.get(f"/v1/jobs/{succeeded}").json()["status"] == "succeeded"


# Service


def test_health_docs_and_openapi(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok", "database": "ok"}
    assert "swagger-ui" in api.client.get("/docs").text
    paths = api.client.get("/openapi.json").json()["paths"]
    assert {"/v1/documents", "/v1/jobs", "/v1/jobs/{job_id}/messages", "/v1/notices/{notice_id}/read"} <= set(paths)
    upload = paths["/v1/documents"]["post"]["requestBody"]["content"]
    assert set(upload) == {"application/json", "multipart/form-data"}


def test_a_request_the_database_cannot_serve_gets_503_with_retry_after_not_500() -> None:
    unreachable = Database("postgresql+psycopg://postgres@127.0.0.1:1/nothing?connect_timeout=2")
    with TestClient(create_app(database=unreachable)) as client:  # handled in the app: nothing raised to the server
        response = client.get("/v1/jobs", headers={"X-API-Key": "pls_unknown"})
    assert response.status_code == 503 and response.headers["Retry-After"] == "2"
    assert "try again" in response.json()["detail"]


def test_health_answers_503_when_the_database_does_not() -> None:
    unreachable = Database("postgresql+psycopg://postgres@127.0.0.1:1/nothing?connect_timeout=2")
    with TestClient(create_app(database=unreachable)) as client:
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "database": "OperationalError"}


# Rows written the way the worker writes them


def test_the_job_view_says_which_page_of_a_long_document_is_read(api: Api) -> None:
    caller = api.tenant()
    ids = [caller.document("short.txt", "Short."), caller.document("long.txt", "x" * 10_000)]
    job_id = caller.job(ids)["id"]
    with api.database.session() as session:
        job = session.get_one(Job, job_id)
        pages = [paged(f"t{n}", "long.txt", offset) for n, offset in enumerate((0, 2_000, 4_000))]
        append_messages(session, job, [m for page in pages for m in (page, result(page["content"][1]["id"]))], step=1)
        job.step, job.status = 3, JobStatus.RUNNING

    reading = caller.get(f"/v1/jobs/{job_id}").json()["progress"]["reading"]

    assert reading == {
        "document": "long.txt", "document_number": 2, "page": 3, "pages": 5, "characters_from": 4_000,
        "characters": 10_000,
    }  # fmt: skip
    with api.database.session() as session:
        session.get_one(Job, job_id).status = JobStatus.SUCCEEDED
    assert caller.get(f"/v1/jobs/{job_id}").json()["progress"]["reading"] is None  # only while it runs


def paged(tool_use_id: str, name: str, offset: int) -> dict[str, Any]:
    call = {"type": "tool_use", "id": tool_use_id, "name": "read_document", "input": {"name": name, "offset": offset}}
    return {"role": "assistant", "content": [{"type": "text", "text": f"Reading {name}."}, call]}


def messages_of(job_id: int) -> Any:
    return select(Message).where(Message.job_id == job_id).order_by(Message.seq)
