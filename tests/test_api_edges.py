"""The API at its edges: integers out of range, text PostgreSQL cannot store, and bodies over the upload limit
are all refused with a 4xx that says why, never a 500. The body limit is checked on a real server, over a socket."""

from __future__ import annotations

import json
import logging
import select
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.constants import MAX_ID
from api.deps import current_tenant
from api.uploads import FRAMING_BYTES, MAX_BYTES_PER_CHAR, body_limit
from models.db import Database
from testbed.stack import api_server
from tests.support_api import Api, new_tenant, serve_api

HUGE = 99999999999999999999  # more than any bigint


@pytest.fixture
def api(database: Database) -> Iterator[Api]:
    with serve_api(database) as api:
        yield api


OUT_OF_RANGE: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("GET", f"/v1/jobs/{HUGE}", None, "job_id (path)"),
    ("GET", f"/v1/jobs/{HUGE}/messages", None, "job_id (path)"),
    ("GET", f"/v1/jobs/{HUGE}/steps", None, "job_id (path)"),
    ("POST", f"/v1/jobs/{HUGE}/cancel", None, "job_id (path)"),
    ("GET", "/v1/jobs/0", None, "job_id (path)"),
    ("GET", "/v1/jobs/-1", None, "job_id (path)"),
    ("GET", f"/v1/documents/{HUGE}", None, "document_id (path)"),
    ("POST", f"/v1/notices/{HUGE}/read", None, "notice_id (path)"),
    ("GET", f"/v1/jobs?offset={HUGE}", None, "offset (query)"),
    ("GET", f"/v1/jobs/1/messages?offset={MAX_ID + 1}", None, "offset (query)"),
    ("GET", f"/v1/documents?offset={HUGE}", None, "offset (query)"),
    ("GET", "/v1/documents?offset=-1", None, "offset (query)"),
    ("GET", f"/v1/notices?offset={HUGE}", None, "offset (query)"),
    ("GET", f"/v1/notices?limit={HUGE}", None, "limit (query)"),
    ("GET", f"/v1/notices?job_id={HUGE}", None, "job_id (query)"),
    ("POST", "/v1/jobs", {"instruction": "Read.", "document_ids": [HUGE]}, "document_ids.0"),
    ("POST", "/v1/jobs", {"instruction": "Read.", "document_ids": [0]}, "document_ids.0"),
    ("POST", "/v1/jobs", {"instruction": "Read.", "budget": HUGE}, "budget"),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"), OUT_OF_RANGE, ids=[f"{m} {p} {b or ''}" for m, p, b, _ in OUT_OF_RANGE]
)
def test_an_integer_out_of_range_is_a_422_naming_the_field(
    api: Api, method: str, path: str, body: dict[str, Any] | None, field: str
) -> None:
    caller = api.tenant()
    response = caller.client.request(method, path, json=body, headers=caller.headers)
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(f"{field}: Input should be")


def test_the_largest_id_is_in_range_and_simply_not_found(api: Api) -> None:
    caller = api.tenant()
    for path in (f"/v1/jobs/{MAX_ID}", f"/v1/documents/{MAX_ID}", f"/v1/jobs?offset={MAX_ID}"):
        response = caller.get(path)
        assert response.status_code in (200, 404), response.text
    assert caller.post("/v1/jobs", json={"instruction": "Read.", "document_ids": [MAX_ID]}).status_code == 404


@pytest.mark.parametrize(
    ("raw_body", "message"),
    [
        (
            '{"instruction": "Read\\u0000 it."}',
            "instruction: contains a NUL character (U+0000) at offset 4",
        ),
        ('{"instruction": "Read \\ud800 it."}', "instruction: contains a lone surrogate at offset 5"),
        ('{"instruction": "Read.", "model": "m\\u0000"}', "model: contains a NUL character"),
    ],
    ids=["nul", "lone-surrogate", "nul-in-model"],
)
def test_text_the_database_cannot_store_is_a_422(api: Api, raw_body: str, message: str) -> None:
    caller = api.tenant()
    response = caller.post("/v1/jobs", content=raw_body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(message)


def test_documents_the_database_cannot_store_are_a_422(api: Api) -> None:
    caller = api.tenant()
    json_type = {"content-type": "application/json"}
    refusals = [
        (b'{"name": "a.txt", "content": "x\\u0000y"}', json_type, "content: contains a NUL character"),
        (b'{"name": "a.txt", "content": "x\\ud800y"}', json_type, "expected JSON"),
        (b'{"name": "a\\u0000.txt", "content": "x"}', json_type, "name: contains a NUL character"),
    ]
    boundary = "edge"
    multipart = f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="a.txt"\r\n\r\nx\x00y'
    multipart_type = {"content-type": f"multipart/form-data; boundary={boundary}"}
    refusals.append(((multipart + f"\r\n--{boundary}--\r\n").encode(), multipart_type, "contains NUL characters"))
    for body, headers, refusal in refusals:
        refused = caller.post("/v1/documents", content=body, headers=headers)
        assert refused.status_code == 422, refused.text
        assert refusal in refused.json()["detail"]


MALFORMED_BODIES: dict[str, tuple[bytes, str]] = {
    "NaN": (b'{"instruction": "Read.", "budget": NaN, "name": "a.txt", "content": NaN}', ""),
    "Infinity": (b'{"instruction": "Read.", "max_steps": Infinity, "name": "a.txt", "content": -Infinity}', ""),
    "1e999999": (b'{"instruction": "Read.", "budget": 1e999999, "name": "a.txt", "content": 1e999999}', ""),
    "not UTF-8": (
        b'{"instruction": "Read \xff.", "name": "a\xff.txt", "content": "x"}',
        "the body is not UTF-8: byte 0xff",
    ),
    "nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
}
JSON_ROUTES = ["/v1/jobs", "/v1/jobs/check", "/v1/documents", f"/v1/jobs/{MAX_ID}/continue"]


@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize("kind", MALFORMED_BODIES)
def test_a_malformed_json_body_is_a_422_that_says_why(api: Api, path: str, kind: str) -> None:
    body, reason = MALFORMED_BODIES[kind]
    caller = api.tenant()
    response = caller.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert reason in response.json()["detail"]


def test_an_unexpected_error_is_a_500_whose_log_line_quotes_no_user_text(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    marker = "USER-TEXT-MARKER-k3Jq"

    def failing_lookup() -> None:  # a database error that quotes the value it was given, in its message
        with database.session() as session:
            session.execute(text("SELECT CAST(:value AS integer)"), {"value": f"{marker} chapter one"})

    app = create_app(database=database, enqueue=lambda _job_id: None)
    app.dependency_overrides[current_tenant] = failing_lookup
    caplog.set_level(logging.ERROR, logger="api.errors")
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/v1/jobs")

    assert response.status_code == 500
    assert response.json() == {"detail": "internal error; it has been logged"}
    [record] = [r for r in caplog.records if r.name == "api.errors"]
    assert "sqlalchemy.exc.DataError" in record.getMessage()
    assert "raised while handling psycopg.errors.InvalidTextRepresentation" in record.getMessage()
    assert "in failing_lookup" in record.getMessage()  # where it was raised
    assert marker not in caplog.text and "chapter one" not in caplog.text, "no message, no source line"


# The upload limit


@pytest.fixture
def small_documents(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    from models.settings import get_settings

    monkeypatch.setenv("PLIMSOLL_MAX_DOCUMENT_CHARS", "1000")
    get_settings.cache_clear()
    yield get_settings().max_document_chars
    get_settings.cache_clear()


def test_the_body_limit_follows_the_document_limit(small_documents: int) -> None:
    assert body_limit() == MAX_BYTES_PER_CHAR * small_documents + FRAMING_BYTES


def test_a_body_at_the_limit_is_read_and_one_byte_more_is_413(api: Api, small_documents: int) -> None:
    caller = api.tenant()
    content = "ж" * small_documents  # the longest document, in a script JSON encoders escape by default
    document = json.dumps({"name": "a.txt", "content": content}).encode()  # ensure_ascii: 6 bytes a character
    padded = document + b" " * (body_limit() - len(document))
    json_type = {"content-type": "application/json"}

    assert caller.post("/v1/documents", content=padded, headers=json_type).status_code == 201
    over = caller.post("/v1/documents", content=padded + b" ", headers=json_type)
    assert over.status_code == 413
    assert f"larger than {body_limit():,} bytes" in over.json()["detail"]
    assert f"a document may have at most {small_documents:,} characters" in over.json()["detail"]


def test_a_job_body_over_the_limit_is_413_not_read_and_parsed(api: Api, small_documents: int) -> None:
    caller = api.tenant()
    body = json.dumps({"instruction": "Read it. " * body_limit()})
    response = caller.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert f"larger than {body_limit():,} bytes" in response.json()["detail"]


@pytest.fixture
def served(database_url: str, database: Database, small_documents: int) -> Iterator[tuple[str, int, str]]:
    _, key = new_tenant(database)
    with api_server(database_url) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port), key


def raw_request(host: str, port: int, head: str, chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """Send ``head`` and then ``chunks`` until the server answers, closes or stops reading; the answer and the
    body bytes sent."""
    sent = 0
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(head.encode())
        for chunk in chunks:
            answered, _, _ = select.select([connection], [], [], 0)
            if answered:
                break
            connection.settimeout(2)
            try:
                connection.sendall(chunk)
            except OSError:  # closed, or not read for 2 s: the server will not take the rest
                break
            sent += len(chunk)
        connection.settimeout(10)
        answer = b""
        while b"\r\n\r\n" not in answer:
            more = connection.recv(65536)
            if not more:
                break
            answer += more
    return answer, sent


BODY_ROUTES = ["/v1/documents", "/v1/jobs"]


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_a_declared_length_over_the_limit_is_refused_before_any_byte_is_read(
    served: tuple[str, int, str], path: str
) -> None:
    host, port, key = served
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nX-API-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {100 * body_limit()}\r\n\r\n"
    )
    answer, sent = raw_request(host, port, head, iter([]))  # no body at all: reading it would hang
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent == 0


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_a_chunked_body_is_cut_off_at_the_limit(served: tuple[str, int, str], path: str) -> None:
    host, port, key = served
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nX-API-Key: {key}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"x" * 16384
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    total = 64 * 1024 * 1024  # far more than the limit and than what the sockets buffer
    answer, sent = raw_request(host, port, head, iter([chunk] * (total // len(chunk))))
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < total


def test_a_job_body_sent_as_a_form_is_told_to_be_json(api: Api) -> None:
    caller = api.tenant()
    body = '{"instruction": "Read.", "document_ids": [1]}'
    # curl -d without -H 'Content-Type: application/json' sends a form, which FastAPI does not read as JSON.
    for sent in ("application/x-www-form-urlencoded", "text/plain; charset=utf-8"):
        came = f"it came as {sent.split(';')[0]}"
        for path in ("/v1/jobs", "/v1/jobs/check", f"/v1/jobs/{MAX_ID}/continue"):
            refused = caller.post(path, content=body, headers={"content-type": sent})
            assert refused.status_code == 422, refused.text
            detail = refused.json()["detail"]
            assert detail == f"the body must be a JSON object, sent with Content-Type: application/json; {came}"


def test_a_json_body_that_is_not_an_object_says_what_it_is(api: Api) -> None:
    caller = api.tenant()
    for body, kind in [("[1, 2]", "array"), ('"Read."', "string"), ("7", "number")]:
        refused = caller.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == f"the body must be a JSON object; it is a JSON {kind}"


def test_a_job_without_documents_is_refused_but_may_be_checked_before_the_upload(api: Api) -> None:
    caller = api.tenant()
    for body in ({"instruction": "Read."}, {"instruction": "Read.", "document_ids": []}):
        refused = caller.post("/v1/jobs", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == (
            "document_ids: a job needs at least one document: upload them first (POST /v1/documents) and list their ids"
        )
        assert caller.post("/v1/jobs/check", json=body).status_code == 200  # what `plimsoll submit` does first
    assert caller.get("/v1/jobs").json()["total"] == 0 and api.enqueued == []
