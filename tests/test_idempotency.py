"""Idempotency-Key on the real app and the test PostgreSQL: a retry answers what the first request answered, another
request under the key is refused, keys are the tenant's own, expire, are not kept for our failures, and hold
under many concurrent requests through real uvicorn servers, several processes of them; the client's own retries
never double a job."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.exc import TimeoutError as PoolTimeout
from typer.testing import CliRunner

from api import idempotency
from api.client import PlimsollClient
from cli.main import app as cli
from models.db import Database
from models.idempotency import ABANDONED_AFTER, CLEANED_PER_CLAIM, answer_key
from models.tables import IdempotencyKey, Job, now
from testbed.stack import REDIS_URL, environment, free_port
from tests.support import wait_until
from tests.support_api import Api, Caller, new_tenant, serve_api
from tests.support_cli import serving, tenant_of

ROOT = Path(__file__).resolve().parent.parent
DAY = timedelta(hours=24)


@pytest.fixture(scope="module")
def api(database: Database) -> Iterator[Api]:
    with serve_api(database) as served:
        yield served


def jobs_of(database: Database, tenant_id: int) -> int:
    with database.session() as session:
        return session.scalar(select(func.count()).select_from(Job).where(Job.tenant_id == tenant_id)) or 0


def post_job(caller: Caller, key: str, document_id: int, instruction: str = "Summarise it.") -> Any:
    body = {"instruction": instruction, "document_ids": [document_id]}
    return caller.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})


def test_a_retry_answers_what_the_first_request_answered(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("a.txt", "Some text.")
    key = str(uuid.uuid4())
    first = post_job(caller, key, document)
    # The same request re-encoded (keys in another order, other spacing) is the same request.
    again = caller.post(
        "/v1/jobs",
        content=f'{{"document_ids": [{document}],   "instruction": "Summarise it."}}',
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert jobs_of(api.database, caller.tenant_id) == 1
    assert api.enqueued.count(first.json()["id"]) == 1
    # Without a key, every request is a new one.
    assert post_job(caller, str(uuid.uuid4()), document).json()["id"] != first.json()["id"]
    assert caller.job([document])["id"] != first.json()["id"]


def test_every_post_that_creates_or_changes_something_replays(api: Api) -> None:
    caller = api.tenant()
    upload = {"files": [("files", ("b.txt", b"Text of b.", "text/plain"))]}
    first = caller.post("/v1/documents", headers={"Idempotency-Key": "upload-1"}, **upload)
    # httpx draws another multipart boundary for the retry: the same files are the same request.
    again = caller.post("/v1/documents", headers={"Idempotency-Key": "upload-1"}, **upload)
    assert first.status_code == again.status_code == 201 and again.content == first.content
    assert again.json()["reused"] == []  # the first answer, not "stored already"
    job = caller.job([first.json()["documents"][0]["id"]])
    cancel = [caller.post(f"/v1/jobs/{job['id']}/cancel", headers={"Idempotency-Key": "cancel-1"}) for _ in "ab"]
    assert [r.status_code for r in cancel] == [200, 200] and cancel[0].content == cancel[1].content
    # A kept refusal: the job has ended, so cancelling it again under a new key is a 409, and its retry too.
    refused = [caller.post(f"/v1/jobs/{job['id']}/cancel", headers={"Idempotency-Key": "cancel-2"}) for _ in "ab"]
    assert [r.status_code for r in refused] == [409, 409] and refused[1].headers["Idempotent-Replayed"] == "true"
    missing = [caller.post("/v1/notices/999999/read", headers={"Idempotency-Key": "read-1"}) for _ in "ab"]
    assert [r.status_code for r in missing] == [404, 404] and missing[1].headers["Idempotent-Replayed"] == "true"
    body = {"instruction": "Go on."}
    carry = [caller.post(f"/v1/jobs/{job['id']}/continue", json=body, headers={"Idempotency-Key": "go"}) for _ in "ab"]
    assert [r.status_code for r in carry] == [201, 201] and carry[0].content == carry[1].content
    assert jobs_of(api.database, caller.tenant_id) == 2
    openapi = caller.get("/openapi.json").json()
    with_key = {
        (method.upper(), path)
        for path, methods in openapi["paths"].items()
        for method, operation in methods.items()
        if any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in operation.get("parameters", []))
    }
    assert with_key == {
        ("POST", "/v1/documents"),
        ("POST", "/v1/jobs"),
        ("POST", "/v1/jobs/{job_id}/cancel"),
        ("POST", "/v1/jobs/{job_id}/continue"),
        ("POST", "/v1/jobs/{job_id}/hold"),
        ("POST", "/v1/jobs/{job_id}/release"),
        ("POST", "/v1/notices/{notice_id}/read"),
        ("POST", "/v1/webhooks"),
        ("POST", "/v1/webhooks/deliveries/{delivery_id}/redeliver"),
    }


def test_the_same_key_with_another_request_is_refused(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("c.txt", "Text of c.")
    assert post_job(caller, "k-1", document).status_code == 201
    other = post_job(caller, "k-1", document, instruction="Something else.")
    assert other.status_code == 422
    assert "Idempotency-Key was used with another request" in other.json()["detail"]
    elsewhere = caller.post(f"/v1/jobs/{document}/cancel", headers={"Idempotency-Key": "k-1"})
    assert elsewhere.status_code == 422
    for bad in ("", "a" * 256, "with space", "ключ"):
        refused = caller.client.post(
            "/v1/jobs",
            json={"instruction": "x", "document_ids": [document]},
            headers={b"X-API-Key": caller.key.encode(), b"Idempotency-Key": bad.encode()},
        )
        assert refused.status_code == 422 and "Idempotency-Key (header)" in refused.json()["detail"], bad
    assert jobs_of(api.database, caller.tenant_id) == 1


def test_a_key_is_the_tenant_own(api: Api) -> None:
    first, second = api.tenant(), api.tenant()
    answers = [post_job(c, "shared-key", c.document("d.txt", "Text of d.")) for c in (first, second)]
    assert [a.status_code for a in answers] == [201, 201]
    assert answers[0].json()["id"] != answers[1].json()["id"]
    assert "Idempotent-Replayed" not in answers[1].headers
    assert jobs_of(api.database, first.tenant_id) == jobs_of(api.database, second.tenant_id) == 1


def test_a_key_expires_after_a_day_by_default(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("e.txt", "Text of e.")
    first = post_job(caller, "day-key", document)
    backdate(api.database, caller.tenant_id, "day-key", DAY - timedelta(minutes=1))
    assert post_job(caller, "day-key", document).content == first.content  # within the day
    backdate(api.database, caller.tenant_id, "day-key", DAY + timedelta(minutes=1))
    later = post_job(caller, "day-key", document)
    assert later.status_code == 201 and later.json()["id"] != first.json()["id"]
    assert jobs_of(api.database, caller.tenant_id) == 2


def test_a_key_expires_after_the_setting(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("f.txt", "Text of f.")
    with environment({"PLIMSOLL_IDEMPOTENCY_KEY_SECONDS": "60"}):
        first = post_job(caller, "minute-key", document)
        assert post_job(caller, "minute-key", document).content == first.content
        backdate(api.database, caller.tenant_id, "minute-key", timedelta(seconds=61))
        assert post_job(caller, "minute-key", document).json()["id"] != first.json()["id"]


def test_expired_keys_are_cleaned_a_bounded_number_at_a_time(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("g.txt", "Text of g.")
    old = now() - DAY - timedelta(hours=1)
    with api.database.session() as session:
        session.execute(text("DELETE FROM idempotency_keys WHERE created_at < :at"), {"at": now() - DAY})
        session.add_all(
            IdempotencyKey(tenant_id=caller.tenant_id, key=f"old-{n}", fingerprint="0" * 64, created_at=old)
            for n in range(CLEANED_PER_CLAIM + 50)
        )
    post_job(caller, "fresh", document)
    assert expired_keys(api.database) == 50
    post_job(caller, "fresh-2", document)
    assert expired_keys(api.database) == 0


def test_a_key_left_without_an_answer_is_taken_over_after_ten_minutes(api: Api) -> None:
    """An API process that died mid-request left its key claimed: after ABANDONED_AFTER a retry runs."""
    caller = api.tenant()
    document = caller.document("m.txt", "Text of m.")
    with api.database.session() as session:
        claimed = now() - ABANDONED_AFTER + timedelta(minutes=1)
        session.add(IdempotencyKey(tenant_id=caller.tenant_id, key="orphan", fingerprint="0" * 64, created_at=claimed))
    assert post_job(caller, "orphan", document).status_code == 422  # still held: by another request, so far
    backdate(api.database, caller.tenant_id, "orphan", ABANDONED_AFTER + timedelta(minutes=1))
    taken = post_job(caller, "orphan", document)
    assert taken.status_code == 201 and post_job(caller, "orphan", document).content == taken.content
    assert jobs_of(api.database, caller.tenant_id) == 1


def test_a_request_that_failed_on_our_side_is_not_kept(database: Database) -> None:
    """A 500 (here the database refusing the job's insert) frees the key: the retry runs the request again."""
    with serving(database) as served:
        key = served_key(database)
        tenant_id = tenant_of(database, key)
        with httpx.Client(base_url=served.url, headers={"X-API-Key": key}) as client:
            stored = client.post("/v1/documents", json={"name": "h.txt", "content": "Text of h."}).json()
            body = {"instruction": "Summarise it.", "document_ids": [stored["documents"][0]["id"]]}
            with refusing_jobs(database, tenant_id):
                failed = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "after-500"})
            assert failed.status_code == 500
            retried = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "after-500"})
    assert retried.status_code == 201 and "Idempotent-Replayed" not in retried.headers
    assert jobs_of(database, tenant_id) == 1


def test_a_rate_or_quota_refusal_is_not_kept(api: Api) -> None:
    caller = api.tenant()
    document = caller.document("i.txt", "Text of i.")
    with environment({"PLIMSOLL_MAX_QUEUED_JOBS_PER_TENANT": "1"}):
        assert post_job(caller, "q-1", document).status_code == 201
        assert post_job(caller, "q-2", document).status_code == 429
        with api.database.session() as session:
            session.execute(update(Job).where(Job.tenant_id == caller.tenant_id).values(status="cancelled"))
        assert post_job(caller, "q-2", document).status_code == 201


def test_concurrent_requests_with_one_key_create_one_job(database: Database) -> None:
    """150 requests over 10 keys, the first 50 at once and the rest as those are answered, through one uvicorn
    server in this process and two API processes of their own: 10 jobs, and every request answered its key's job."""
    with serving(database) as served, api_processes(database, 2) as urls, contextlib.ExitStack() as closing:
        key = served_key(database)
        with httpx.Client(base_url=served.url, headers={"X-API-Key": key}) as setup:
            uploaded = setup.post("/v1/documents", json={"name": "j.txt", "content": "Text of j."}).json()
        document = uploaded["documents"][0]["id"]
        # A client per server, each able to hold all 50 requests open at once: a client per request spent most
        # of the test's time building a TLS context for each request, never used over plain HTTP.
        limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
        clients = [
            closing.enter_context(httpx.Client(base_url=url, limits=limits, timeout=120)) for url in (served.url, *urls)
        ]
        together = threading.Barrier(50)

        def post(n: int) -> tuple[str, int, int | None]:
            idempotency_key = f"burst-{n % 10}"
            body = {"instruction": f"Job {n % 10}.", "document_ids": [document]}
            headers = {"X-API-Key": key, "Idempotency-Key": idempotency_key}
            if n < 50:
                together.wait()
            answer = clients[n % 3].post("/v1/jobs", json=body, headers=headers)
            return idempotency_key, answer.status_code, answer.json().get("id")

        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(post, range(150)))
    assert Counter(code for _, code, _ in answers) == {201: 150}
    jobs_per_key = {k: {job for each, _, job in answers if each == k} for k, _, _ in answers}
    assert len(jobs_per_key) == 10 and all(len(jobs) == 1 for jobs in jobs_per_key.values()), jobs_per_key
    assert jobs_of(database, tenant_of(database, key)) == 10


def test_the_client_retries_a_lost_answer_under_the_same_key(database: Database, tmp_path: Path) -> None:
    """plimsoll submit: the API commits the job but its answer never reaches the command (the connection drops);
    the command sends the request again under the same key and gets that job, not a second one."""
    with serving(database) as served, answer_lost_once(served.url, b"POST /v1/jobs HTTP/1.1") as proxy:
        key = served_key(database)
        (tmp_path / "k.txt").write_text("Text of k.", encoding="utf-8")
        outcome = CliRunner().invoke(
            cli, ["submit", str(tmp_path / "k.txt"), "-i", "Read it.", "--api-url", proxy.url, "--api-key", key]
        )
        assert outcome.exit_code == 0, outcome.output
        assert proxy.dropped == 1
        assert jobs_of(database, tenant_of(database, key)) == 1
        assert served.enqueued.count(int(outcome.stdout.strip())) == 1


def test_the_client_sends_a_fresh_key_for_each_job(database: Database) -> None:
    with serving(database) as served:
        key = served_key(database)
        with PlimsollClient(served.url, key) as client:
            document = client.add_document("l.txt", "Text of l.")
            first = client.create_job("Read it.", [document.id])
            second = client.create_job("Read it.", [document.id])
            assert first.id != second.id
            again = client.create_job("Read it.", [document.id])
            assert again.id not in (first.id, second.id)


# Helpers


def backdate(database: Database, tenant_id: int, key: str, age: timedelta) -> None:
    with database.session() as session:
        session.execute(
            update(IdempotencyKey)
            .where(IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key)
            .values(created_at=now() - age)
        )


def expired_keys(database: Database) -> int:
    with database.session() as session:
        older = IdempotencyKey.created_at < now() - DAY
        return session.scalar(select(func.count()).select_from(IdempotencyKey).where(older)) or 0


@contextmanager
def refusing_jobs(database: Database, tenant_id: int) -> Iterator[None]:
    """PostgreSQL refuses every new job of the tenant, as a database failing under the API would."""
    name = f"refuse_jobs_{tenant_id}"
    with database.session() as session:
        session.execute(
            text(
                f"CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$ "
                f"LANGUAGE plpgsql; CREATE TRIGGER {name} BEFORE INSERT ON jobs FOR EACH ROW "
                f"WHEN (NEW.tenant_id = {tenant_id}) EXECUTE FUNCTION {name}()"
            )
        )
    try:
        yield
    finally:
        with database.session() as session:
            session.execute(text(f"DROP TRIGGER {name} ON jobs; DROP FUNCTION {name}()"))


def served_key(database: Database) -> str:
    return new_tenant(database)[1]


@contextmanager
def api_processes(database: Database, count: int) -> Iterator[list[str]]:
    """``count`` API processes (uvicorn api.app:app) on the database, their steps queued on a queue no worker
    reads."""
    environment_of = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PLIMSOLL_DATABASE_URL": database.url,
        "PLIMSOLL_BROKER_URL": REDIS_URL,
        "PLIMSOLL_STEP_QUEUE": f"idempotency-{uuid.uuid4().hex[:8]}",
    }
    ports = [free_port() for _ in range(count)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "api.app:app", "--port", str(port), "--log-level", "warning"],
            env=environment_of,
            cwd=ROOT,
        )
        for port in ports
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        for url in urls:
            wait_until(partial(answers, f"{url}/healthz"), 60, f"the API at {url}")
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


class LosingProxy:
    """A TCP proxy in front of the API that, the first time a request starts with ``marker``, lets the API answer
    it and then drops the connection instead of passing the answer on."""

    def __init__(self, target: str, marker: bytes) -> None:
        url = httpx.URL(target)
        self.target = (url.host, url.port or 80)
        self.marker = marker
        self.dropped = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.relay, args=(client,), daemon=True).start()

    def relay(self, client: socket.socket) -> None:
        armed = threading.Event()
        with client, socket.create_connection(self.target) as server:

            def upstream() -> None:
                with contextlib.suppress(OSError):
                    while data := client.recv(1 << 16):
                        if self.dropped == 0 and data.startswith(self.marker):
                            armed.set()
                        server.sendall(data)

            threading.Thread(target=upstream, daemon=True).start()
            with contextlib.suppress(OSError):
                while data := server.recv(1 << 16):
                    if armed.is_set():  # the API has answered: the answer is lost on the way
                        self.dropped += 1
                        client.shutdown(socket.SHUT_RDWR)  # close() alone would not wake upstream's recv
                        return
                    client.sendall(data)


@contextmanager
def answer_lost_once(target: str, marker: bytes) -> Iterator[LosingProxy]:
    proxy = LosingProxy(target, marker)
    try:
        yield proxy
    finally:
        proxy.listener.close()


def test_a_change_and_its_answer_commit_together(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen in bench.events: under pool exhaustion, answers kept after the route's commit (by the middleware, on a
    # connection of their own) were lost, or a 503 raised after the commit freed the key, and a retry created its
    # job again. Now nothing after the commit is needed: here the middleware never keeps anything, as if the API
    # process had died right after the route.
    never_kept: list[int] = []
    monkeypatch.setattr(idempotency, "_keep", lambda hold, code, *_: never_kept.append(code))
    caller = api.tenant()
    document = caller.document("a.txt", "Some text.")
    key = str(uuid.uuid4())
    first = post_job(caller, key, document)
    again = post_job(caller, key, document)
    assert first.status_code == again.status_code == 201 and never_kept == []
    assert again.headers["Idempotent-Replayed"] == "true" and again.content == first.content
    assert jobs_of(api.database, caller.tenant_id) == 1


def test_a_refusal_the_database_was_too_busy_to_keep_is_kept_once_it_can(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refusal changed nothing, so the middleware keeps it after the route, trying again while the pool is busy:
    # a key left without its answer would answer every retry 409 until it counted as abandoned (ten minutes).
    caller = api.tenant()
    failures = [PoolTimeout("QueuePool limit reached")]

    def busy_once(*args: Any, **kwargs: Any) -> None:
        if failures:
            raise failures.pop()
        answer_key(*args, **kwargs)

    monkeypatch.setattr(idempotency, "answer_key", busy_once)
    key = str(uuid.uuid4())
    body = {"instruction": "Summarise it.", "document_ids": []}
    first = caller.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
    again = caller.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 422 and not failures
    assert again.headers["Idempotent-Replayed"] == "true" and again.content == first.content
