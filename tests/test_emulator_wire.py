"""Malformed requests, keys and headers get the providers' real answers."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from emulator import EmulatorServer

ANTHROPIC_HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
TOOL_USE = {"type": "tool_use", "id": "toolu_01", "name": "read_document", "input": {"name": "a"}}


def post_messages(server: EmulatorServer, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/messages", json=body, headers=headers or ANTHROPIC_HEADERS)


def anthropic_error(response: httpx.Response) -> tuple[int, str, str]:
    body = response.json()
    assert body["type"] == "error"
    return response.status_code, body["error"]["type"], body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, "model: Field required"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens: Field required"),
        ({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "greater than or equal to 1"),
        ({"model": "m", "max_tokens": 5, "messages": []}, "messages: at least one message is required"),
        ({"model": "m", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": ""}]}, "must be non-empty"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
            "messages.0.content.0.type",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": [TOOL_USE]}],
            },
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}
                ],
            },
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": f"part {n}", "cache_control": {"type": "ephemeral"}}
                            for n in range(5)
                        ],
                    }
                ],
            },
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        ("not an object", "Input should be a valid dictionary"),
    ],
)
def test_malformed_anthropic_requests_get_invalid_request_errors(
    emulator_reset: EmulatorServer, body: object, message: str
) -> None:
    status, kind, text = anthropic_error(post_messages(emulator_reset, body))
    assert (status, kind) == (400, "invalid_request_error")
    assert message in text
    assert emulator_reset.stats()["rejections"] == {"invalid_request": 1}


def test_a_body_that_is_not_json_is_refused(emulator_reset: EmulatorServer) -> None:
    response = httpx.post(f"{emulator_reset.base_url}/v1/messages", content=b"{nope", headers=ANTHROPIC_HEADERS)
    assert anthropic_error(response)[:2] == (400, "invalid_request_error")


def test_the_version_header_is_required(emulator_reset: EmulatorServer) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    response = post_messages(emulator_reset, body, headers={"x-api-key": "k"})
    assert anthropic_error(response) == (400, "invalid_request_error", "anthropic-version: header is required")


def test_a_wrong_key_gets_authentication_errors_on_both_routes(emulator_reset: EmulatorServer) -> None:
    emulator_reset.configure(api_key="right")
    wrong = anthropic.Anthropic(api_key="wrong", base_url=emulator_reset.base_url, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        wrong.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
        "request_id": caught.value.request_id,
    }
    wrong_openai = openai.OpenAI(api_key="wrong", base_url=emulator_reset.openai_base_url, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught_openai:
        wrong_openai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught_openai.value.code == "invalid_api_key"

    right = anthropic.Anthropic(api_key="right", base_url=emulator_reset.base_url, max_retries=0)
    assert right.messages.create(model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]).content
    assert emulator_reset.stats()["rejections"] == {"authentication": 2}


def _chat(server: EmulatorServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.openai_base_url}/chat/completions", json=body, headers={"authorization": "Bearer k"})


@pytest.mark.parametrize(
    ("messages", "message", "param"),
    [
        ([], "[] is too short - 'messages'", "messages"),
        (
            [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
            ],
            "The following tool_call_ids did not have response messages: call_1",
            "messages.[1].role",
        ),
        (
            [{"role": "user", "content": "go"}, {"role": "tool", "tool_call_id": "call_1", "content": "x"}],
            "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
            "messages.[1].role",
        ),
        (
            [{"role": "bot", "content": "go"}],
            "Invalid value: 'bot'. Supported values are: 'system'",
            "messages[0].role",
        ),
        ([{"role": "user", "content": 5}], "Invalid type for 'messages[0].content'", "messages[0].content"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "Invalid value: 'image_url'. Supported values are: 'text'.",
            "messages[0].content[0].type",
        ),
    ],
)
def test_malformed_openai_requests_get_invalid_request_errors(
    emulator_reset: EmulatorServer, messages: list[dict[str, Any]], message: str, param: str
) -> None:
    response = _chat(emulator_reset, {"model": "m", "messages": messages})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert message in error["message"]
    assert error["param"] == param


def test_the_openai_sdk_reads_a_malformed_request_error(emulator_reset: EmulatorServer) -> None:
    client = openai.OpenAI(api_key="k", base_url=emulator_reset.openai_base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=0)
    assert caught.value.param == "max_completion_tokens"
    assert caught.value.type == "invalid_request_error"
    assert "integer below minimum value. Expected a value >= 1, but got 0 instead." in caught.value.message


def test_unknown_settings_are_refused_by_the_admin_api(emulator_reset: EmulatorServer) -> None:
    with pytest.raises(ValueError, match="unknown setting"):
        emulator_reset.configure(colour="blue")
    with pytest.raises(ValueError, match=r"faults\.rate"):
        emulator_reset.configure(faults={"rate": 2})
    with pytest.raises(ValueError, match="limit: Input should be a valid integer, not str"):
        emulator_reset.configure(limit="big")


def test_streaming_gives_the_same_message(emulator_reset: EmulatorServer) -> None:
    client = anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0)
    tool = {"name": "read_document", "input_schema": {"type": "object"}}
    request: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "tools": [tool],
        "messages": [{"role": "user", "content": "Note `a.txt`."}],
    }
    plain = client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    assert streamed.content == plain.content
    assert streamed.stop_reason == plain.stop_reason == "tool_use"
    assert streamed.usage.output_tokens == plain.usage.output_tokens
