"""The OpenAI adapter, through the official SDK against the emulator, and its lossless message conversion."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emulator import EmulatorServer
from tests.fixtures_emulator import DOCUMENT_TOOLS
from worker.errors import TooLong, Transient
from worker.providers import OpenAIProvider, Usage, make_provider
from worker.providers.base import Timeouts
from worker.providers.openai_format import (
    ERROR_MARK,
    ESCAPE_MARK,
    UNPARSED_ARGUMENTS,
    from_openai_messages,
    from_openai_tools,
    to_openai_messages,
    to_openai_tools,
    tool_use_block,
)

LONG_SYSTEM = " ".join(f"Rule {n}: read every document to the end before you write about it." for n in range(100))
DOCUMENT = "Document one. " + "lorem ipsum dolor sit amet " * 40


def test_a_tool_round(emulator_reset: EmulatorServer, openai_provider: OpenAIProvider) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Check `one.txt`."}]
    first = openai_provider.send(
        model="gpt-x", system="Be careful.", messages=messages, tools=DOCUMENT_TOOLS, max_tokens=300
    )
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    assert call["type"] == "tool_use" and call["id"].startswith("call_")
    assert (call["name"], call["input"]) == ("read_document", {"name": "one.txt"})
    messages += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": DOCUMENT}]},
    ]
    second = openai_provider.send(
        model="gpt-x", system="Be careful.", messages=messages, tools=DOCUMENT_TOOLS, max_tokens=300
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0]["text"].startswith("REPORT: 1 documents\nNOTE one.txt: 1094 chars")
    log = emulator_reset.stats()["log"]
    assert [first.usage.total_input, second.usage.total_input] == [entry["input_tokens"] for entry in log]
    assert [first.usage.output_tokens, second.usage.output_tokens] == [entry["output_tokens"] for entry in log]


def test_cached_tokens_are_split_out_of_prompt_tokens(
    emulator_reset: EmulatorServer, openai_provider: OpenAIProvider
) -> None:
    request: dict[str, Any] = {"model": "gpt-x", "system": LONG_SYSTEM, "tools": DOCUMENT_TOOLS, "max_tokens": 100}
    first = openai_provider.send(messages=[{"role": "user", "content": "Check `a.txt`."}], **request)
    second = openai_provider.send(messages=[{"role": "user", "content": "Check `b.txt`."}], **request)
    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens >= 1024 and second.usage.cache_read_tokens % 128 == 0
    assert second.usage.input_tokens == second.usage.total_input - second.usage.cache_read_tokens
    assert second.usage.total_input == emulator_reset.stats()["log"][-1]["input_tokens"]  # prompt_tokens


def test_rejections_become_typed_errors(emulator_reset: EmulatorServer, openai_provider: OpenAIProvider) -> None:
    hello = [{"role": "user", "content": "Hello there, how are you today?"}]
    emulator_reset.configure(faults={"script": ["429", "529", "500", "drop"], "retry_after_seconds": 1.25})
    errors = []
    for _ in range(4):
        with pytest.raises(Transient) as caught:
            openai_provider.send(model="gpt-x", system="", messages=hello, tools=[], max_tokens=5)
        errors.append(caught.value)
    assert [(error.status, error.retry_after) for error in errors] == [
        (429, 1.25),
        (503, None),
        (500, None),
        (None, None),
    ]

    emulator_reset.configure(limit=10)
    with pytest.raises(TooLong) as too_long:
        openai_provider.send(model="gpt-x", system="", messages=hello, tools=[], max_tokens=5)
    assert too_long.value.provider == "openai" and "maximum context length is 10 tokens" in too_long.value.message


def test_make_provider_and_usage_totals(emulator_reset: EmulatorServer) -> None:
    provider = make_provider("openai", api_key="k", base_url=emulator_reset.openai_base_url, timeouts=Timeouts(idle=5))
    reply = provider.send(
        model="gpt-x", system="", messages=[{"role": "user", "content": "Hi"}], tools=[], max_tokens=50
    )
    assert reply.stop_reason == "end_turn" and reply.usage.total_input > 0
    assert Usage(input_tokens=3, output_tokens=9, cache_write_tokens=5, cache_read_tokens=7).total_input == 15


# --- the conversion, both ways ---

texts = st.text(min_size=1, max_size=30)
marked_texts = st.one_of(
    texts,
    st.sampled_from([ERROR_MARK, ESCAPE_MARK]),
    st.builds(lambda mark, rest: f"{mark} {rest}", st.sampled_from([ERROR_MARK, ESCAPE_MARK]), st.text(max_size=10)),
)
text_blocks = st.lists(st.builds(lambda text: {"type": "text", "text": text}, marked_texts), min_size=1, max_size=3)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
tool_inputs = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]]]:
    """An alternating conversation: user turns, tool rounds (parallel calls allowed), text answers."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(st.one_of(texts, text_blocks))}]
    for round_number in range(draw(st.integers(0, 4))):
        texts_before = draw(st.one_of(st.just([]), text_blocks))
        calls = [
            {
                "type": "tool_use",
                "id": f"call_{round_number}_{n}",
                "name": draw(st.sampled_from(["read", "list"])),
                "input": draw(tool_inputs),
            }
            for n in range(draw(st.integers(1, 3)))
        ]
        messages.append({"role": "assistant", "content": texts_before + calls})
        results = []
        for call in calls:
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": call["id"],
                "content": draw(st.one_of(marked_texts, st.just(""), text_blocks, st.just([]))),
            }
            if draw(st.booleans()):
                result["is_error"] = True
            results.append(result)
        follow_up = draw(st.one_of(st.just([]), text_blocks))
        messages.append({"role": "user", "content": results + follow_up})
    if draw(st.booleans()):
        messages.append({"role": "assistant", "content": draw(st.one_of(texts, text_blocks))})
        messages.append({"role": "user", "content": draw(st.one_of(texts, text_blocks))})
    return draw(st.one_of(st.just(""), texts)), messages


@given(conversations())
def test_canonical_to_openai_and_back_loses_nothing(conversation: tuple[str, list[dict[str, Any]]]) -> None:
    system, messages = conversation
    original = copy.deepcopy(messages)
    converted = to_openai_messages(system, messages)
    assert messages == original  # the input is not changed
    assert from_openai_messages(converted) == (system, messages)


def test_error_results_and_multi_block_content_on_the_wire() -> None:
    two_blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Go."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "call_1", "name": "read", "input": {"n": 1}},
                {"type": "tool_use", "id": "call_2", "name": "read", "input": {"n": 2}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "no such file", "is_error": True},
                {"type": "tool_result", "tool_use_id": "call_2", "content": two_blocks},
                {"type": "text", "text": "Also this."},
            ],
        },
    ]
    assert to_openai_messages("Rules.", messages) == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "Go."},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Reading."}],
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"n": 1}'}},
                {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": '{"n": 2}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "[tool error] no such file"},
        {"role": "tool", "tool_call_id": "call_2", "content": two_blocks},
        {"role": "user", "content": [{"type": "text", "text": "Also this."}]},
    ]


def test_is_error_false_comes_back_as_no_flag() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "ok", "is_error": False}]},
    ]
    _, back = from_openai_messages(to_openai_messages("", messages))
    assert back[1]["content"] == [{"type": "tool_result", "tool_use_id": "c", "content": "ok"}]


def test_tools_convert_both_ways() -> None:
    converted = to_openai_tools(DOCUMENT_TOOLS)
    assert converted[1] == {
        "type": "function",
        "function": {
            "name": "read_document",
            "description": "Read one document in full.",
            "parameters": DOCUMENT_TOOLS[1]["input_schema"],
        },
    }
    assert from_openai_tools(converted) == DOCUMENT_TOOLS


def test_arguments_that_are_not_a_json_object_are_kept_for_the_tool_to_refuse() -> None:
    assert tool_use_block("call_1", "read", '{"name": "a"}')["input"] == {"name": "a"}
    assert tool_use_block("call_1", "read", '{"name": ')["input"] == {UNPARSED_ARGUMENTS: '{"name": '}
    assert tool_use_block("call_1", "read", "[1]")["input"] == {UNPARSED_ARGUMENTS: "[1]"}


def test_blocks_openai_cannot_carry_are_refused() -> None:
    thinking = [{"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}]}]
    with pytest.raises(ValueError, match="thinking"):
        to_openai_messages("", thinking)
