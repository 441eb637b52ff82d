"""Sentry reports our bugs, never too-long rejections, never transient faults by itself, and never the user's
text: tested with real SDK clients, the emulator, the worker, and a capturing transport."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from emulator import EmulatorServer
from models.db import Database
from models.documents import add_document
from models.history import append_messages
from models.jobs import create_job
from models.tables import Job, JobStatus
from models.tenants import create_tenant
from tests.fixtures_emulator import DOCUMENT_TOOLS, TEST_API_KEY
from tests.support import sentry_off, wait_until
from worker.errors import AuthFailure, InvalidRequest, TooLong, classify
from worker.providers import AnthropicProvider, OpenAIProvider
from worker.queue import enqueue_step
from worker.sentry import init_sentry

logger = logging.getLogger(__name__)

# User text, distinctive enough that finding it anywhere in an event can only mean it leaked.
SYSTEM_MARKER = "SYSTEM-PROMPT-MARKER-q7Zx"
INSTRUCTION_MARKER = "INSTRUCTION-MARKER-w2Kv"
DOCUMENT_MARKER = "DOCUMENT-BODY-MARKER-p9Lm"
NAME_MARKER = "DOCNAME-MARKER-h4Tr.txt"
MARKERS = (SYSTEM_MARKER, INSTRUCTION_MARKER, DOCUMENT_MARKER, NAME_MARKER)
DEFAULT_INTEGRATIONS = {"argv", "atexit", "dedupe", "excepthook", "logging", "modules", "stdlib", "threading"}

LONG: list[dict[str, Any]] = [
    {"role": "user", "content": "This request has far more tokens than the tiny limit allows. " * 5}
]


class CapturingTransport(Transport):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(dict(event))


@pytest.fixture
def transport() -> Iterator[CapturingTransport]:
    capturing = CapturingTransport()
    assert init_sentry(None, environment="test", transport=capturing)
    yield capturing
    sentry_off()


def test_without_a_dsn_or_transport_sentry_stays_off() -> None:
    assert init_sentry(None) is False
    assert init_sentry("") is False


def test_a_transport_must_be_a_transport() -> None:
    with pytest.raises(TypeError):
        init_sentry(None, transport=object())


def test_a_too_long_rejection_produces_no_event(
    emulator_reset: EmulatorServer,
    anthropic_provider: AnthropicProvider,
    openai_provider: OpenAIProvider,
    transport: CapturingTransport,
) -> None:
    emulator_reset.configure(limit=20)
    for provider in (anthropic_provider, openai_provider):
        with pytest.raises(TooLong) as too_long:
            provider.send(model="m", system="", messages=LONG, tools=[], max_tokens=5)
        sentry_sdk.capture_exception(too_long.value)
    # The raw SDK error is recognised too, should anything report it unclassified.
    client = anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as raw:
        client.messages.create(model="m", max_tokens=5, messages=LONG)  # type: ignore[arg-type]
    sentry_sdk.capture_exception(raw.value)
    assert emulator_reset.stats()["rejections"] == {"too_long": 3}
    assert transport.events == []


def test_an_invalid_request_produces_one_event(
    anthropic_provider: AnthropicProvider, transport: CapturingTransport
) -> None:
    unanswered_call: list[dict[str, Any]] = [
        {"role": "user", "content": "Read `a.txt`."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_document", "input": {}}]},
    ]
    with pytest.raises(InvalidRequest) as invalid:
        anthropic_provider.send(model="m", system="", messages=unanswered_call, tools=[], max_tokens=5)
    sentry_sdk.capture_exception(invalid.value)
    assert len(transport.events) == 1
    event = transport.events[0]
    assert event["environment"] == "test"
    assert event["exception"]["values"][-1]["type"] == "InvalidRequest"
    assert "tool_result" in event["exception"]["values"][-1]["value"]


def leaks(events: list[dict[str, Any]]) -> list[str]:
    text = json.dumps(events, default=str)
    return [marker for marker in MARKERS if marker in text]


def frames_of(event: dict[str, Any]) -> list[dict[str, Any]]:
    return [frame for value in event["exception"]["values"] for frame in value["stacktrace"]["frames"]]


def read_and_answer(provider: AnthropicProvider, system: str, instruction: str, name: str, body: str) -> Any:
    """A step's request with the user's text in its locals and in the SDK's frames below it."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "read_document", "input": {"name": name}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": instruction},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": body}]},
    ]
    try:
        return provider.send(model="m", system=system, messages=messages, tools=DOCUMENT_TOOLS, max_tokens=50)
    except AuthFailure as failure:
        raise RuntimeError(f"the step over {name} failed: {body[:40]}") from failure


def test_an_event_raised_amid_user_text_carries_none_of_it(
    emulator_reset: EmulatorServer, transport: CapturingTransport
) -> None:
    emulator_reset.configure(api_key="a-key-the-caller-does-not-have")
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url, timeout=30.0)
    system, instruction = f"You check documents. {SYSTEM_MARKER}", f"Check the notes. {INSTRUCTION_MARKER}"
    name, body = NAME_MARKER, f"{DOCUMENT_MARKER} The first chapter begins with a letter."
    logger.error("reading %s failed: %s", name, body)  # a log line: a breadcrumb at most, never an event
    try:
        read_and_answer(provider, system, instruction, name, body)
    except RuntimeError as error:
        sentry_sdk.capture_exception(error)

    assert emulator_reset.stats()["rejections"] == {"authentication": 1}
    [event] = transport.events
    values = event["exception"]["values"]
    assert [v["type"] for v in values] == ["AuthenticationError", "AuthFailure", "RuntimeError"]
    assert "invalid x-api-key" in values[1]["value"]  # the provider's words about our request stay
    frames = frames_of(event)
    assert any(f["function"] == "read_and_answer" for f in frames)
    assert all("vars" not in f and "context_line" not in f for f in frames)
    assert leaks(transport.events) == []


def test_an_unexpected_error_quoted_in_our_own_error_is_removed_from_it(transport: CapturingTransport) -> None:
    documents = {"a.txt": "Some text."}
    try:
        try:
            documents[NAME_MARKER]
        except KeyError as missing:
            raise classify(missing, provider="anthropic") from missing
    except InvalidRequest as error:
        assert NAME_MARKER in str(error)
        sentry_sdk.capture_exception(error)

    [event] = transport.events
    assert [v["type"] for v in event["exception"]["values"]] == ["KeyError", "InvalidRequest"]
    assert event["exception"]["values"][-1]["value"].startswith("KeyError: (message removed")
    assert leaks(transport.events) == []


def test_failed_sdk_calls_report_nothing_by_themselves(
    emulator_reset: EmulatorServer, transport: CapturingTransport
) -> None:
    """The SDK's Anthropic and OpenAI integrations are off: a retried fault is not an event."""
    anthropic_client = anthropic.Anthropic(api_key=TEST_API_KEY, base_url=emulator_reset.base_url, max_retries=0)
    openai_client = openai.OpenAI(api_key=TEST_API_KEY, base_url=emulator_reset.openai_base_url, max_retries=0)
    hello: list[dict[str, Any]] = [{"role": "user", "content": f"Hello. {INSTRUCTION_MARKER}"}]
    emulator_reset.configure(faults={"script": ["500", "429", "529", "500", "429"]})
    for _ in range(3):
        with pytest.raises(anthropic.APIStatusError):
            anthropic_client.messages.create(model="m", max_tokens=5, messages=hello)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(openai.APIStatusError):
            openai_client.chat.completions.create(model="m", max_tokens=5, messages=hello)  # type: ignore[arg-type]
    emulator_reset.configure(api_key="another-key")
    with pytest.raises(anthropic.AuthenticationError):
        anthropic_client.messages.create(model="m", max_tokens=5, messages=hello)  # type: ignore[arg-type]

    # None of the SDK's auto-enabling integrations is on (here langchain's would otherwise switch the Anthropic and
    # OpenAI ones off, hiding them): only the defaults, Celery's, and logging as breadcrumbs.
    assert set(sentry_sdk.get_client().integrations) <= DEFAULT_INTEGRATIONS | {"celery"}
    assert emulator_reset.stats()["rejections"] == {
        "api_error": 2,
        "rate_limit": 2,
        "overloaded": 1,
        "authentication": 1,
    }
    assert transport.events == []


@pytest.mark.usefixtures("celery_worker")
def test_the_worker_reports_one_event_without_the_jobs_text(
    database: Database, emulator_reset: EmulatorServer, sentry_events: list[dict[str, Any]]
) -> None:
    """A job that has read a document fails on a wrong key: the worker's one event carries none of its text."""
    with database.session() as session:
        tenant, _ = create_tenant(session, name=f"tenant-{uuid.uuid4().hex[:8]}")
        document = add_document(session, tenant_id=tenant.id, name=NAME_MARKER, content=f"{DOCUMENT_MARKER} Text.")
        job = create_job(
            session, tenant_id=tenant.id, instruction=f"Check it. {INSTRUCTION_MARKER}", document_ids=[document.id]
        )
        call = {"type": "tool_use", "id": "toolu_1", "name": "read_document", "input": {"name": NAME_MARKER}}
        read = {"type": "tool_result", "tool_use_id": "toolu_1", "content": document.content}
        append_messages(
            session, job, [{"role": "assistant", "content": [call]}, {"role": "user", "content": [read]}], step=1
        )
        job.step = 1
        job_id = job.id
    emulator_reset.configure(api_key="a-key-the-worker-does-not-have")
    enqueue_step(job_id)
    wait_until(lambda: JobStatus(job_status(database, job_id)).finished, 60, "the job ended", every=0.2)
    status = job_status(database, job_id)

    assert status == JobStatus.FAILED
    assert emulator_reset.stats()["rejections"] == {"authentication": 1}
    [event] = sentry_events
    assert event["exception"]["values"][-1]["type"] == "AuthFailure"
    assert frames_of(event)
    assert leaks(sentry_events) == []


def job_status(database: Database, job_id: int) -> str:
    with database.session() as session:
        return session.get_one(Job, job_id).status
