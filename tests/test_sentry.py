"""Sentry reports our bugs, never too-long rejections: tested with a real SDK client and a capturing transport."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from emulator import EmulatorServer
from worker.errors import InvalidRequest, TooLong
from worker.providers import AnthropicProvider, OpenAIProvider
from worker.sentry import init_sentry

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
    sentry_sdk.init()  # back to a client that sends nothing


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
