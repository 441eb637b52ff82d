"""A provider that cannot be reached is a plain notice: DNS failures, refused connections, TLS and proxy errors
are an Unreachable that names the host; the step is retried like any transient fault, and after the retry limit
the job ends failed with one Sentry event, an error naming the host and a notice, in the person's language,
naming the host and the setting to check. The job's count of steps agrees with its step records."""

from __future__ import annotations

import contextlib
import os
import random
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from models.db import Database
from models.settings import Settings
from models.tables import Job, JobKind
from plimsoll.notices import LANGUAGES, stopped_notice
from testbed.stack import api_server, environment, free_port, listening_socket
from tests.support_api import new_tenant
from tests.support_worker import events_after_the_commit
from worker.errors import Transient, Unreachable, classify
from worker.routing import endpoint_setting, route

ROOT = Path(__file__).resolve().parent.parent
HELLO = [{"role": "user", "content": "hi"}]
NOWHERE = "nonexistent.invalid"  # RFC 6761: never resolves


def anthropic_failure(base_url: str) -> BaseException:
    client = anthropic.Anthropic(api_key="k", base_url=base_url, max_retries=0)
    with pytest.raises(anthropic.APIConnectionError) as failed:
        client.messages.create(model="m", max_tokens=5, messages=HELLO)  # type: ignore[arg-type]
    return failed.value


def test_a_refused_connection_an_unknown_name_and_a_failed_handshake_name_the_host() -> None:
    port = free_port()
    refused = classify(anthropic_failure(f"http://127.0.0.1:{port}"), "anthropic")
    assert isinstance(refused, Unreachable) and isinstance(refused, Transient)  # retried as any transient fault
    assert (refused.host, refused.message) == (
        f"127.0.0.1:{port}",
        f"cannot reach 127.0.0.1:{port}: the connection was refused",
    )

    unknown = classify(anthropic_failure(f"https://{NOWHERE}"), "anthropic")
    assert isinstance(unknown, Unreachable)
    assert unknown.message == f"cannot reach {NOWHERE}: its name does not resolve (DNS)"

    with answering(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n") as plain:
        handshake = classify(anthropic_failure(f"https://{plain}"), "anthropic")  # TLS to a server that is not
        assert isinstance(handshake, Unreachable) and handshake.host == plain
        assert handshake.message == f"cannot reach {plain}: the TLS handshake failed"
        with pytest.raises(httpx.ProxyError) as proxied:  # a proxy that refuses to connect onwards
            httpx.get(f"https://{NOWHERE}/", proxy=f"http://{plain}")
        assert classify(proxied.value, "custom").message == f"cannot reach {NOWHERE}: the proxy failed"

    openai_client = openai.OpenAI(api_key="k", base_url=f"http://{NOWHERE}:8080/v1", max_retries=0)
    with pytest.raises(openai.APIConnectionError) as failed:
        openai_client.chat.completions.create(model="m", messages=HELLO)  # type: ignore[arg-type]
    assert classify(failed.value, "openai").message == f"cannot reach {NOWHERE}:8080: its name does not resolve (DNS)"


@contextmanager
def answering(reply: bytes) -> Iterator[str]:
    """A local server that answers every connection with ``reply`` and closes it; yields its host:port."""
    listener = listening_socket()

    def serve() -> None:
        with contextlib.suppress(OSError):  # the listener closed: the test is over
            while True:
                connection, _ = listener.accept()
                with connection:
                    connection.recv(65536)
                    connection.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_a_dropped_connection_is_not_unreachable() -> None:
    dropped = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    assert type(classify(dropped, "anthropic")) is Transient


def test_the_unreachable_notice_names_the_host_and_the_setting_in_every_language() -> None:
    error = Unreachable(
        "cannot reach api.example:443: the connection was refused", provider="anthropic", host="api.example:443"
    )
    retried = route(error, attempt=6, max_attempts=7, rng=random.Random(1))
    assert retried.retry and retried.notice is None and not retried.report_to_sentry
    for language in LANGUAGES:
        last = route(error, attempt=7, max_attempts=7, locale=language, setting="ANTHROPIC_BASE_URL")
        assert (last.retry, last.job_status, last.report_to_sentry) == (False, "failed", True)
        assert last.notice == stopped_notice(
            "unreachable", language, host="api.example:443", setting="ANTHROPIC_BASE_URL"
        )
        assert "api.example:443" in last.notice and "ANTHROPIC_BASE_URL" in last.notice
    plain = route(Transient("overloaded", provider="anthropic"), attempt=7, max_attempts=7)
    assert plain.notice is None  # a fault on the provider's side: nothing for the person to check


def test_the_setting_to_check_follows_the_endpoint_the_job_recorded() -> None:
    def job(model: str, provider: str, *, emulator: bool) -> Job:
        return Job(model=model, provider=provider, kind=JobKind.MAIN, emulator=emulator)

    assert endpoint_setting(job("plimsoll-emulator", "anthropic", emulator=True)) == "PLIMSOLL_EMULATOR_URL"
    assert endpoint_setting(job("plimsoll-emulator-openai", "openai", emulator=True)) == "PLIMSOLL_EMULATOR_URL"
    assert endpoint_setting(job("claude-sonnet-5-5", "anthropic", emulator=True)) == "PLIMSOLL_EMULATOR_URL"
    assert (
        endpoint_setting(job("claude-sonnet-5-5", "anthropic", emulator=False))
        == "ANTHROPIC_BASE_URL (or PLIMSOLL_ANTHROPIC_BASE_URL)"
    )
    assert endpoint_setting(job("gpt-5.5", "openai", emulator=False)) == "OPENAI_BASE_URL (or PLIMSOLL_OPENAI_BASE_URL)"


@pytest.mark.usefixtures("celery_worker")
def test_jobs_whose_provider_cannot_be_reached_fail_with_a_notice_naming_the_host(
    database: Database, database_url: str, sentry_events: list[dict[str, Any]]
) -> None:
    """The real stack with the default retry settings: the API under uvicorn, a Celery worker, PostgreSQL.
    Anthropic's base URL points at a closed local port, OpenAI's at a name that never resolves, the bundled
    emulator's at another closed port."""
    defaults = Settings()
    assert defaults.max_transient_retries == 6  # the default: 7 tries, full-jitter backoff from 1 s (about 30 s)
    closed, no_emulator = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    unreachable = {
        "PLIMSOLL_ANTHROPIC_BASE_URL": f"http://{closed}",
        "PLIMSOLL_OPENAI_BASE_URL": f"https://{NOWHERE}/v1",
        "PLIMSOLL_EMULATOR_URL": f"http://{no_emulator}",
        "PLIMSOLL_REAL_MODELS_ON_EMULATOR": "false",  # the suite's opt-in: real models go to their base URLs here
    }
    _, key = new_tenant(database)
    with (
        environment(unreachable),
        api_server(database_url) as url,
        httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=30) as api,
    ):
        document = api.post("/v1/documents", json={"name": "a.txt", "content": "Alpha."}).json()
        ids = [document["documents"][0]["id"]]
        jobs = {
            model: api.post(
                "/v1/jobs", json={"instruction": "Read it.", "document_ids": ids, "model": model, "locale": locale}
            ).json()["id"]
            for model, locale in (("claude-sonnet-5-5", "en"), ("gpt-5.5", "cs"), ("plimsoll-emulator", "en"))
        }
        started = time.monotonic()
        ended = {model: wait_ended(api, job_id) for model, job_id in jobs.items()}
        took = time.monotonic() - started
        notices = {
            model: [n["text"] for n in api.get("/v1/notices", params={"job_id": job_id}).json()["items"]]
            for model, job_id in jobs.items()
        }
        steps = {model: api.get(f"/v1/jobs/{job_id}/steps").json()["items"] for model, job_id in jobs.items()}
        panel = watch(url, key, jobs["claude-sonnet-5-5"])

    tries = defaults.max_transient_retries + 1
    assert ended["claude-sonnet-5-5"]["error"] == (
        f"the request failed {tries} times in a row; the last time: cannot reach {closed}: the connection was refused"
    )
    assert ended["gpt-5.5"]["error"] == (
        f"the request failed {tries} times in a row; the last time: cannot reach {NOWHERE}: "
        "its name does not resolve (DNS)"
    )
    assert notices == {
        "claude-sonnet-5-5": [
            stopped_notice(
                "unreachable", "en", host=closed, setting="ANTHROPIC_BASE_URL (or PLIMSOLL_ANTHROPIC_BASE_URL)"
            )
        ],
        "gpt-5.5": [
            stopped_notice("unreachable", "cs", host=NOWHERE, setting="OPENAI_BASE_URL (or PLIMSOLL_OPENAI_BASE_URL)")
        ],
        "plimsoll-emulator": [stopped_notice("unreachable", "en", host=no_emulator, setting="PLIMSOLL_EMULATOR_URL")],
    }
    for model, job in ended.items():  # the panel, the API and the step records count the failed step alike
        assert job["status"] == "failed" and job["retries"] == tries - 1, job
        assert [s["step"] for s in steps[model]] == [1] and job["progress"]["steps_done"] == 1, (job, steps[model])
    assert re.search(r"Steps done +1\b", panel), panel
    assert events_after_the_commit(sentry_events) == 3  # one per job
    assert took < 120, took


def wait_ended(api: httpx.Client, job_id: int, timeout: float = 150.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = api.get(f"/v1/jobs/{job_id}").json()
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not end within {timeout:.0f} s")


def watch(url: str, key: str, job_id: int) -> str:
    environment = {**os.environ, "PLIMSOLL_API_URL": url, "PLIMSOLL_API_KEY": key, "COLUMNS": "100"}
    shown = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "plimsoll"), "watch", str(job_id)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return shown.stdout + shown.stderr
