"""Faults on demand: scripted, by rate (seeded), or by header; and added latency."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import pytest

from emulator import EmulatorServer, FaultConfig
from emulator.faults import FaultInjector

HELLO: list[Any] = [{"role": "user", "content": "Hello."}]


@pytest.fixture
def client(emulator_reset: EmulatorServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0, timeout=30)


def draws(faults: FaultConfig, count: int) -> list[str | None]:
    injector = FaultInjector(faults)
    return [injector.next_fault() for _ in range(count)]


def test_the_script_comes_first_then_the_seeded_rate() -> None:
    faults = FaultConfig(rate=0.5, kinds=("429", "500"), script=("529", "none", "drop"), seed=7)
    sequence = draws(faults, 200)
    assert sequence[:3] == ["529", None, "drop"]
    assert sequence == draws(faults, 200)  # same seed, same faults
    assert sequence != draws(FaultConfig(rate=0.5, kinds=("429", "500"), script=faults.script, seed=8), 200)
    rated = sequence[3:]
    assert set(rated) == {None, "429", "500"}
    assert 60 < sum(fault is not None for fault in rated) < 140


def test_scripted_faults_answer_in_the_real_shapes(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    emulator_reset.configure(faults={"script": ["429", "529", "500"], "retry_after_seconds": 3})
    with pytest.raises(anthropic.RateLimitError) as rate_limited:
        client.messages.create(model="m", max_tokens=20, messages=HELLO)
    assert rate_limited.value.response.headers["retry-after"] == "3"
    assert rate_limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        client.messages.create(model="m", max_tokens=20, messages=HELLO)
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}  # type: ignore[index]
    with pytest.raises(anthropic.InternalServerError) as failed:
        client.messages.create(model="m", max_tokens=20, messages=HELLO)
    assert (failed.value.status_code, failed.value.body["error"]["type"]) == (500, "api_error")  # type: ignore[index]
    assert client.messages.create(model="m", max_tokens=20, messages=HELLO).content  # the script is used up
    assert emulator_reset.stats()["rejections"] == {"rate_limit": 1, "overloaded": 1, "api_error": 1}


def test_a_dropped_connection_is_a_connection_error(
    emulator_reset: EmulatorServer, client: anthropic.Anthropic
) -> None:
    emulator_reset.configure(faults={"script": ["drop"]})
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.create(model="m", max_tokens=20, messages=HELLO)
    assert emulator_reset.stats()["rejections"] == {"dropped": 1}


def test_a_header_fault_applies_to_its_request_only(
    emulator_reset: EmulatorServer, client: anthropic.Anthropic
) -> None:
    emulator_reset.configure(faults={"script": ["429"]})
    served = client.messages.create(
        model="m", max_tokens=20, messages=HELLO, extra_headers={"x-emulator-fault": "none"}
    )
    assert served.content
    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(model="m", max_tokens=20, messages=HELLO, extra_headers={"x-emulator-fault": "529"})
    with pytest.raises(anthropic.RateLimitError):  # the script was left for the next plain request
        client.messages.create(model="m", max_tokens=20, messages=HELLO)


def test_a_rate_of_one_fails_every_request(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    emulator_reset.configure(faults={"rate": 1.0, "kinds": ["500"]})
    for _ in range(3):
        with pytest.raises(anthropic.InternalServerError):
            client.messages.create(model="m", max_tokens=20, messages=HELLO)
    assert emulator_reset.stats()["rejections"] == {"api_error": 3}


def test_latency_is_added(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    emulator_reset.configure(latency_seconds=0.3)
    started = time.monotonic()
    client.messages.create(model="m", max_tokens=20, messages=HELLO)
    assert time.monotonic() - started >= 0.3
    emulator_reset.configure(latency_seconds=0.0)
    started = time.monotonic()
    client.messages.create(model="m", max_tokens=20, messages=HELLO, extra_headers={"x-emulator-latency": "0.2"})
    assert time.monotonic() - started >= 0.2


def test_an_unknown_header_fault_is_a_clear_error(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="x-emulator-fault must be one of"):
        client.messages.create(model="m", max_tokens=20, messages=HELLO, extra_headers={"x-emulator-fault": "404"})
