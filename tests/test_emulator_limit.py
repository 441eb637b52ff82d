"""Over the limit, the emulator answers exactly as the real APIs do, with the real numbers."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from emulator import EmulatorServer

LONG_TEXT = "All work and no play makes Jack a dull boy. " * 200


@pytest.fixture
def client(emulator_reset: EmulatorServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0, timeout=30)


def _tokens_of(client: anthropic.Anthropic, text: str) -> int:
    return client.messages.count_tokens(model="m", messages=[{"role": "user", "content": text}]).input_tokens


def test_a_prompt_over_the_limit_gets_anthropics_400(
    emulator_reset: EmulatorServer, client: anthropic.Anthropic
) -> None:
    tokens = _tokens_of(client, LONG_TEXT)
    limit = tokens - 1
    emulator_reset.configure(limit=limit)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": LONG_TEXT}])
    assert caught.value.status_code == 400
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"] == {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {tokens} tokens > {limit} maximum",
    }
    stats = emulator_reset.stats()
    assert stats["rejections"] == {"too_long": 1}
    assert stats["log"][-1]["input_tokens"] == tokens


def test_input_plus_max_tokens_over_the_limit_gets_the_other_400(
    emulator_reset: EmulatorServer, client: anthropic.Anthropic
) -> None:
    tokens = _tokens_of(client, LONG_TEXT)
    limit = tokens + 50
    emulator_reset.configure(limit=limit)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="m", max_tokens=51, messages=[{"role": "user", "content": LONG_TEXT}])
    assert caught.value.body["error"]["message"] == (  # type: ignore[index]
        f"input length and `max_tokens` exceed context limit: {tokens} + 51 > {limit}, "
        "decrease input length or `max_tokens` and try again"
    )
    # Exactly at the limit is allowed.
    reply = client.messages.create(model="m", max_tokens=50, messages=[{"role": "user", "content": LONG_TEXT}])
    assert reply.usage.input_tokens == tokens
    assert emulator_reset.stats()["rejections"] == {"too_long_with_max_tokens": 1}


def test_newer_models_stop_at_the_window_instead(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    tokens = _tokens_of(client, LONG_TEXT)
    emulator_reset.configure(limit=tokens + 1, stop_at_context_window=True)
    reply = client.messages.create(model="m", max_tokens=100, messages=[{"role": "user", "content": LONG_TEXT}])
    assert reply.stop_reason == "model_context_window_exceeded"
    assert reply.usage.output_tokens == 1


def test_the_openai_route_answers_context_length_exceeded(emulator_reset: EmulatorServer) -> None:
    anthropic_client = anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0)
    client = openai.OpenAI(api_key="k", base_url=emulator_reset.openai_base_url, max_retries=0)
    tokens = _tokens_of(anthropic_client, LONG_TEXT)  # the same conversation costs the same on both routes
    emulator_reset.configure(limit=tokens - 10)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": LONG_TEXT}])
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.message.endswith(
        f"This model's maximum context length is {tokens - 10} tokens. However, your messages resulted in "
        f"{tokens} tokens. Please reduce the length of the messages."
    )

    emulator_reset.configure(limit=tokens + 10)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": LONG_TEXT}], max_completion_tokens=20
        )
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.message.endswith(
        f"This model's maximum context length is {tokens + 10} tokens. However, you requested {tokens + 20} "
        f"tokens ({tokens} in the messages, 20 in the completion). Please reduce the length of the messages or "
        "completion."
    )


def test_raw_error_bodies_have_the_real_shapes(emulator_reset: EmulatorServer) -> None:
    emulator_reset.configure(limit=10)
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    request = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": LONG_TEXT}]}
    anthropic_answer = httpx.post(f"{emulator_reset.base_url}/v1/messages", json=request, headers=headers)
    assert anthropic_answer.status_code == 400
    assert set(anthropic_answer.json()) == {"type", "error", "request_id"}
    assert anthropic_answer.headers["request-id"] == anthropic_answer.json()["request_id"]

    openai_answer = httpx.post(
        f"{emulator_reset.openai_base_url}/chat/completions",
        json={"model": "m", "messages": request["messages"]},
        headers={"authorization": "Bearer k"},
    )
    assert openai_answer.status_code == 400
    error = openai_answer.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        "messages",
        "context_length_exceeded",
    )
