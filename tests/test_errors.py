"""Every provider failure is sorted into TooLong, Transient, InvalidRequest or AuthFailure."""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest

from emulator import EmulatorServer
from testbed.stack import free_port
from worker.errors import (
    AuthFailure,
    InvalidRequest,
    ProviderError,
    RateLimited,
    TooLong,
    Transient,
    classify,
    classify_payload,
    retry_after_seconds,
)


@dataclass(frozen=True)
class Payload:
    name: str
    status: int | None
    body: dict[str, Any] | str
    expected: type[ProviderError]
    headers: dict[str, str] = field(default_factory=dict)
    retry_after: float | None = None


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


OPENAI_TOO_LONG = {
    "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 173172 "
    "tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded",
}
RESPONSES_TOO_LONG = {
    "code": "context_length_exceeded",
    "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
}

PAYLOADS = [
    # --- too long: every real payload from the issue ---
    Payload(
        "anthropic prompt too long",
        400,
        anthropic_error("invalid_request_error", "prompt is too long: 208656 tokens > 200000 maximum"),
        TooLong,
    ),
    Payload(
        "anthropic input + max_tokens",
        400,
        anthropic_error(
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648, decrease input length or "
            "`max_tokens` and try again",
        ),
        TooLong,
    ),
    Payload(
        "anthropic 413",
        413,
        anthropic_error("request_too_large", "Request exceeds the maximum allowed number of bytes."),
        TooLong,
    ),
    Payload("openai chat", 400, {"error": OPENAI_TOO_LONG}, TooLong),
    Payload("openai chat, as the SDK keeps it", 400, OPENAI_TOO_LONG, TooLong),
    Payload("openai responses", 400, {"error": {**RESPONSES_TOO_LONG, "type": "invalid_request_error"}}, TooLong),
    Payload(
        "openai responses, streamed response.failed",
        None,
        {"type": "response.failed", "response": {"id": "resp_1", "status": "failed", "error": RESPONSES_TOO_LONG}},
        TooLong,
    ),
    Payload(
        "gemini",
        400,
        {
            "error": {
                "code": 400,
                "message": "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
                "status": "INVALID_ARGUMENT",
            }
        },
        TooLong,
    ),
    Payload(
        "bedrock input too long",
        400,
        {"message": "Input is too long for requested model."},
        TooLong,
        headers={"x-amzn-ErrorType": "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"},
    ),
    Payload(
        "bedrock wrapped anthropic",
        400,
        {
            "Error": {
                "Code": "ValidationException",
                "Message": "The model returned the following errors: "
                "prompt is too long: 200049 tokens > 200000 maximum",
            }
        },
        TooLong,
    ),
    Payload(
        "vllm",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 32768 tokens. However, you requested 41648 tokens "
            "(37552 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        TooLong,
    ),
    # --- transient ---
    Payload("408", 408, "Request Timeout", Transient),
    Payload("409", 409, anthropic_error("conflict_error", "conflict"), Transient),
    Payload(
        "anthropic 429",
        429,
        anthropic_error("rate_limit_error", "rate limited"),
        RateLimited,
        headers={"retry-after": "7"},
        retry_after=7.0,
    ),
    Payload(
        "openai 429 with milliseconds",
        429,
        {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
        RateLimited,
        headers={"Retry-After-Ms": "1500", "retry-after": "2"},
        retry_after=1.5,
    ),
    Payload("anthropic 500", 500, anthropic_error("api_error", "Internal server error"), Transient),
    Payload("502 text", 502, "<html>Bad Gateway</html>", Transient),
    Payload("openai 503", 503, {"error": {"message": "The server is overloaded", "type": "server_error"}}, Transient),
    Payload("anthropic 529", 529, anthropic_error("overloaded_error", "Overloaded"), Transient),
    Payload("anthropic overloaded inside a stream", None, anthropic_error("overloaded_error", "Overloaded"), Transient),
    Payload(
        "gemini 429", 429, {"error": {"code": 429, "message": "Quota", "status": "RESOURCE_EXHAUSTED"}}, RateLimited
    ),
    Payload("bedrock throttling", 429, {"message": "Too many requests"}, RateLimited),
    Payload(
        "anthropic rate limit inside a stream", None, anthropic_error("rate_limit_error", "slow down"), RateLimited
    ),
    # --- invalid requests: our bugs ---
    Payload(
        "anthropic unpaired tool_use",
        400,
        anthropic_error("invalid_request_error", "messages.1: `tool_use` ids were found without `tool_result` blocks"),
        InvalidRequest,
    ),
    Payload(
        "anthropic max_tokens above the model's output cap is not a context overflow",
        400,
        anthropic_error(
            "invalid_request_error",
            "max_tokens: 300000 > 64000, which is the maximum allowed number of output tokens for claude-x",
        ),
        InvalidRequest,
    ),
    Payload(
        "openai bad param",
        400,
        {"error": {"message": "Invalid 'messages[1]'", "type": "invalid_request_error"}},
        InvalidRequest,
    ),
    Payload("anthropic 404", 404, anthropic_error("not_found_error", "model: claude-x"), InvalidRequest),
    Payload("422", 422, {"detail": "unprocessable"}, InvalidRequest),
    Payload(
        "gemini generic 400",
        400,
        {"error": {"code": 400, "message": "Invalid JSON payload received.", "status": "INVALID_ARGUMENT"}},
        InvalidRequest,
    ),
    Payload("bedrock generic validation", 400, {"message": "Malformed input request"}, InvalidRequest),
    Payload("invalid request inside a stream", None, anthropic_error("invalid_request_error", "bad"), InvalidRequest),
    # --- authentication and permission ---
    Payload("anthropic 401", 401, anthropic_error("authentication_error", "invalid x-api-key"), AuthFailure),
    Payload("anthropic 403", 403, anthropic_error("permission_error", "not allowed"), AuthFailure),
    Payload("openai 401", 401, {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}}, AuthFailure),
    Payload(
        "gemini 403", 403, {"error": {"code": 403, "message": "denied", "status": "PERMISSION_DENIED"}}, AuthFailure
    ),
    Payload("auth error inside a stream", None, anthropic_error("authentication_error", "expired"), AuthFailure),
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=[payload.name for payload in PAYLOADS])
def test_every_payload_is_classified(payload: Payload) -> None:
    error = classify_payload(payload.status, payload.body, "some-provider", payload.headers)
    assert type(error) is payload.expected
    assert (error.status, error.provider) == (payload.status, "some-provider")
    assert error.message
    if isinstance(error, Transient):
        assert error.retry_after == payload.retry_after


def test_the_message_is_the_providers_own() -> None:
    error = classify_payload(400, PAYLOADS[0].body, "anthropic")
    assert error.message == "prompt is too long: 208656 tokens > 200000 maximum"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, None),
        ({}, None),
        ({"retry-after": "12"}, 12.0),
        ({"Retry-After": "0.5"}, 0.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
        ({"retry-after": "-4"}, None),
        ({"retry-after": "whenever"}, None),
    ],
)
def test_retry_after_headers(headers: dict[str, str] | None, expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_retry_after_as_an_http_date() -> None:
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    seconds = retry_after_seconds({"retry-after": in_a_minute})
    assert seconds is not None and 55 <= seconds <= 61
    assert retry_after_seconds({"retry-after": email.utils.formatdate(time.time() - 60, usegmt=True)}) == 0.0


# --- real exceptions, raised by the SDKs and httpx against the emulator or a closed port ---


def test_sdk_status_errors_are_classified_from_their_payload(emulator_reset: EmulatorServer) -> None:
    emulator_reset.configure(limit=5, faults={"script": ["429"], "retry_after_seconds": 4})
    client = anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "A sentence that is longer than five tokens, surely."}]
    with pytest.raises(anthropic.RateLimitError) as rate_limited:
        client.messages.create(model="m", max_tokens=1, messages=messages)
    transient = classify(rate_limited.value, "anthropic")
    assert isinstance(transient, Transient) and (transient.status, transient.retry_after) == (429, 4.0)
    with pytest.raises(anthropic.BadRequestError) as too_long:
        client.messages.create(model="m", max_tokens=1, messages=messages)
    assert isinstance(classify(too_long.value, "anthropic"), TooLong)

    openai_client = openai.OpenAI(api_key="k", base_url=emulator_reset.openai_base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError) as openai_too_long:
        openai_client.chat.completions.create(model="m", messages=messages)
    assert isinstance(classify(openai_too_long.value, "openai"), TooLong)


def test_sdk_timeouts_and_refused_connections_are_transient(emulator_reset: EmulatorServer) -> None:
    slow = anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0, timeout=0.1)
    with pytest.raises(anthropic.APITimeoutError) as timed_out:
        slow.messages.create(
            model="m",
            max_tokens=5,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-emulator-latency": "1"},
        )
    error = classify(timed_out.value, "anthropic")
    assert isinstance(error, Transient) and error.message.startswith("timeout")

    closed_port = free_port()
    nowhere = openai.OpenAI(api_key="k", base_url=f"http://127.0.0.1:{closed_port}/v1", max_retries=0)
    with pytest.raises(openai.APIConnectionError) as refused:
        nowhere.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert isinstance(classify(refused.value, "openai"), Transient)
    with pytest.raises(httpx.ConnectError) as refused_httpx:
        httpx.get(f"http://127.0.0.1:{closed_port}/")
    assert isinstance(classify(refused_httpx.value, "custom"), Transient)


def test_httpx_status_errors_are_classified_from_the_response(emulator_reset: EmulatorServer) -> None:
    emulator_reset.configure(limit=5)
    response = httpx.post(
        f"{emulator_reset.base_url}/v1/messages",
        json={
            "model": "m",
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "far more than five tokens here"}],
        },
        headers={"anthropic-version": "2023-06-01"},
    )
    with pytest.raises(httpx.HTTPStatusError) as failed:
        response.raise_for_status()
    error = classify(failed.value, "anthropic-over-httpx")
    assert isinstance(error, TooLong) and error.status == 400


def test_classified_errors_pass_through_and_unknown_ones_are_our_bugs() -> None:
    already = Transient("busy", status=503, provider="p", retry_after=2.0)
    assert classify(already, "p") is already
    bug = classify(KeyError("choices"), "openai")
    assert type(bug) is InvalidRequest and "KeyError" in bug.message


MEASURED = {
    "anthropic prompt too long": (208_656, 200_000),
    "anthropic input + max_tokens": (189_136, 204_648),
    "anthropic 413": (None, None),
    "openai chat": (173_172, 128_000),
    "openai chat, as the SDK keeps it": (173_172, 128_000),
    "openai responses": (None, None),
    "openai responses, streamed response.failed": (None, None),
    "gemini": (1_200_293, 1_048_576),
    "bedrock input too long": (None, None),
    "bedrock wrapped anthropic": (200_049, 200_000),
    "vllm": (37_552, 32_768),
}


@pytest.mark.parametrize("payload", [p for p in PAYLOADS if p.expected is TooLong], ids=lambda p: p.name)
def test_a_too_long_rejection_carries_the_size_it_states(payload: Payload) -> None:
    error = classify_payload(payload.status, payload.body, "some-provider", payload.headers)
    assert isinstance(error, TooLong)
    assert (error.tokens, error.limit) == MEASURED[payload.name]
