"""The emulator counts input tokens with tiktoken, plus the framing documented in ``emulator.counting``."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from emulator import EmulatorServer, load_encoding
from emulator.counting import BLOCK_OVERHEAD, MESSAGE_OVERHEAD, REQUEST_OVERHEAD

ENCODING = load_encoding("cl100k")
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. " * 20,
    "敏捷的棕色狐狸跳过了懒狗。" * 30,
    "def f(x):\n    return {'a': [1, 2, 3]}\n" * 10,
]
TOOL: Any = {
    "name": "read_document",
    "description": "Read one document.",
    "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
}


def tokens(text: str) -> int:
    return len(ENCODING.encode(text, disallowed_special=()))


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.fixture
def client(emulator_reset: EmulatorServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0, timeout=30)


def count(client: anthropic.Anthropic, **request: Any) -> int:
    return client.messages.count_tokens(model="m", **request).input_tokens


@pytest.mark.parametrize("text", TEXTS)
def test_a_message_costs_its_tiktoken_count_plus_framing(client: anthropic.Anthropic, text: str) -> None:
    counted = count(client, messages=[{"role": "user", "content": text}])
    assert counted == tokens(text) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD + REQUEST_OVERHEAD


@pytest.mark.parametrize("text", TEXTS)
def test_adding_text_adds_exactly_its_tiktoken_count(client: anthropic.Anthropic, text: str) -> None:
    base = [{"type": "text", "text": "Start."}]
    without = count(client, messages=[{"role": "user", "content": base}])
    with_text = count(client, messages=[{"role": "user", "content": [*base, {"type": "text", "text": text}]}])
    assert with_text - without == tokens(text) + BLOCK_OVERHEAD


def test_a_whole_request_costs_the_documented_sum(client: anthropic.Anthropic) -> None:
    system = "You read documents carefully."
    messages = [
        {"role": "user", "content": "Check `a.txt`."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_document", "input": {"name": "a.txt"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": TEXTS[1]}]},
                {"type": "text", "text": TEXTS[2]},
            ],
        },
    ]
    expected = (
        tokens(compact(TOOL)) + BLOCK_OVERHEAD
        + tokens(system) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD
        + tokens("Check `a.txt`.") + MESSAGE_OVERHEAD + BLOCK_OVERHEAD
        + tokens("Reading it.") + MESSAGE_OVERHEAD + BLOCK_OVERHEAD
        + tokens("read_document") + tokens(compact({"name": "a.txt"})) + BLOCK_OVERHEAD
        + tokens(TEXTS[1]) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD
        + tokens(TEXTS[2]) + BLOCK_OVERHEAD
        + REQUEST_OVERHEAD
    )  # fmt: skip
    assert count(client, system=system, tools=[TOOL], messages=messages) == expected


def test_count_tokens_equals_what_the_messages_route_charges(client: anthropic.Anthropic) -> None:
    request: dict[str, Any] = {"system": "Be brief.", "messages": [{"role": "user", "content": TEXTS[3]}]}
    message = client.messages.create(model="m", max_tokens=100, **request)
    usage = message.usage
    charged = usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    assert charged == count(client, **request)


def test_output_tokens_are_the_tiktoken_count_of_what_was_written(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="m",
        max_tokens=100,
        tools=[TOOL],
        messages=[{"role": "user", "content": "Read `x.txt`."}],
    )
    (call,) = message.content
    assert call.type == "tool_use"
    assert message.usage.output_tokens == tokens(call.name) + tokens(compact(call.input))


def test_the_openai_route_counts_the_same_conversation_the_same_way(emulator_reset: EmulatorServer) -> None:
    client = openai.OpenAI(api_key="k", base_url=emulator_reset.openai_base_url, max_retries=0)
    system, text = "You read documents.", TEXTS[1]
    completion = client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": text}],
        tools=[{"type": "function", "function": {"name": TOOL["name"], "description": TOOL["description"],
                                                  "parameters": TOOL["input_schema"]}}],
    )  # fmt: skip
    assert completion.usage is not None
    expected = (
        tokens(compact(TOOL)) + BLOCK_OVERHEAD
        + tokens(system) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD
        + tokens(text) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD
        + REQUEST_OVERHEAD
    )  # fmt: skip
    assert completion.usage.prompt_tokens == expected
    anthropic_client = anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0)
    same = count(anthropic_client, system=system, tools=[TOOL], messages=[{"role": "user", "content": text}])
    assert same == expected


def test_the_o200k_vocabulary_gives_its_own_counts(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    text = TEXTS[2]
    emulator_reset.configure(tokenizer="o200k")
    o200k = load_encoding("o200k")
    assert count(client, messages=[{"role": "user", "content": text}]) == (
        len(o200k.encode(text)) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD + REQUEST_OVERHEAD
    )
    assert len(o200k.encode(text)) != tokens(text)
