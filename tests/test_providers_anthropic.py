"""The Anthropic adapter, through the official SDK against the emulator."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from emulator import EmulatorServer
from plimsoll.notices import CLEARED_RESULT_NOTE
from tests.fixtures_emulator import DOCUMENT_TOOLS, play_documents
from worker.errors import AuthFailure, TooLong, Transient
from worker.providers import AnthropicProvider, make_provider
from worker.providers.base import Timeouts
from worker.providers.cache_breakpoints import EPHEMERAL, with_cache_breakpoints

LONG_SYSTEM = " ".join(f"Rule {n}: read every document to the end before you write about it." for n in range(100))


def documents(count: int) -> dict[str, str]:
    return {f"doc{n:02d}.txt": f"Document {n}. " + "lorem ipsum dolor sit amet " * 60 for n in range(1, count + 1)}


def instruction(names: dict[str, str]) -> str:
    return "Check " + ", ".join(f"`{name}`" for name in names) + "."


def test_a_tool_round(emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider) -> None:
    docs = documents(1)
    messages: list[dict[str, Any]] = [{"role": "user", "content": instruction(docs)}]
    first = anthropic_provider.send(
        model="m", system="Be careful.", messages=messages, tools=DOCUMENT_TOOLS, max_tokens=300
    )
    assert first.stop_reason == "tool_use"
    assert first.model == "m"
    (call,) = first.content
    assert call["type"] == "tool_use" and call["id"].startswith("toolu_")
    assert (call["name"], call["input"]) == ("read_document", {"name": "doc01.txt"})
    messages += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": docs["doc01.txt"]}]},
    ]
    second = anthropic_provider.send(
        model="m", system="Be careful.", messages=messages, tools=DOCUMENT_TOOLS, max_tokens=300
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0]["text"].startswith("REPORT: 1 documents\nNOTE doc01.txt: ")
    log = emulator_reset.stats()["log"]
    assert [first.usage.total_input, second.usage.total_input] == [entry["input_tokens"] for entry in log]
    assert [first.usage.output_tokens, second.usage.output_tokens] == [entry["output_tokens"] for entry in log]


def test_the_second_identical_prefix_is_read_from_the_cache(anthropic_provider: AnthropicProvider) -> None:
    request: dict[str, Any] = {"model": "m", "system": LONG_SYSTEM, "tools": DOCUMENT_TOOLS, "max_tokens": 100}
    first = anthropic_provider.send(messages=[{"role": "user", "content": "Check `a.txt`."}], **request)
    assert first.usage.cache_read_tokens == 0
    assert first.usage.cache_write_tokens > 1024
    second = anthropic_provider.send(messages=[{"role": "user", "content": "Check `b.txt`."}], **request)
    # Tools and system are shared; the differing message is not.
    assert second.usage.cache_read_tokens > 1024
    assert second.usage.cache_read_tokens < second.usage.total_input
    assert second.usage.total_input == first.usage.total_input


def clear_in_batches(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Like Plimsoll: when more than five results are whole, clear the oldest four."""
    results = [
        (m, b)
        for m, message in enumerate(messages)
        if isinstance(message["content"], list)
        for b, block in enumerate(message["content"])
        if block["type"] == "tool_result"
    ]
    cleared = 4 * max(0, (len(results) - 2) // 4)
    shaped = copy.deepcopy(messages)
    for m, b in results[:cleared]:
        shaped[m]["content"][b]["content"] = CLEARED_RESULT_NOTE
    return shaped


def test_each_step_reads_what_the_previous_step_wrote(
    emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider
) -> None:
    docs = documents(14)
    job = play_documents(anthropic_provider, docs, instruction(docs), system=LONG_SYSTEM, shape=clear_in_batches)
    assert job.final_text.startswith("REPORT: 14 documents")
    usages = [reply.usage for reply in job.replies]
    tools_and_system = usages[0].cache_write_tokens
    batches = [4 * max(0, (step - 2) // 4) for step in range(len(usages))]  # results cleared before each step
    for step in range(1, len(usages)):
        previous, usage = usages[step - 1], usages[step]
        if batches[step] == batches[step - 1]:
            # Breakpoint 4: the previous request's whole prefix is read back.
            assert usage.cache_read_tokens == previous.cache_read_tokens + previous.cache_write_tokens
        else:
            # A new batch was cleared: breakpoint 3 (the old end of the cleared region) or, for the first
            # batch, the system prompt is still read.
            assert usage.cache_read_tokens >= tools_and_system
        assert usage.input_tokens < 50  # only what follows the last breakpoint is uncached
    assert batches[-1] >= 8
    assert emulator_reset.stats()["cache_read_tokens_total"] == sum(usage.cache_read_tokens for usage in usages)


def test_the_callers_messages_are_left_alone(anthropic_provider: AnthropicProvider) -> None:
    tools = copy.deepcopy(DOCUMENT_TOOLS)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Check `a.txt`."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_document", "input": {"name": "a.txt"}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": CLEARED_RESULT_NOTE,
                    "cache_control": EPHEMERAL,
                }
            ],
        },
    ]
    before = (copy.deepcopy(messages), copy.deepcopy(tools))
    anthropic_provider.send(model="m", system="s", messages=messages, tools=tools, max_tokens=50)
    assert (messages, tools) == before


def test_messages_passed_through_unmarked_are_shared_and_those_marked_are_copies() -> None:
    # A request of 4,000 messages is not copied at every step: only the messages that carry a breakpoint are.
    call = {"type": "tool_use", "id": "toolu_1", "name": "read_document", "input": {"name": "a.txt"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Alpha."}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Check a.txt."}]},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    before = copy.deepcopy(messages)
    for breakpoints in ((), (0,)):
        _, marked, _ = with_cache_breakpoints(system="s", messages=messages, tools=[], breakpoints=breakpoints)
        assert messages == before
        assert marked[1] is messages[1] and marked[2] is not messages[2]
        assert marked[2]["content"][0]["cache_control"] == EPHEMERAL
    assert marked[0] is not messages[0] and marked[0]["content"][0]["cache_control"] == EPHEMERAL


def test_breakpoints_sit_on_the_tools_system_cleared_region_and_last_block() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    for n in range(4):
        messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"t{n}", "name": "read", "input": {}, "cache_control": EPHEMERAL}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{n}", "content": CLEARED_RESULT_NOTE if n < 2 else "text"}
                ],
            },
        ]
    system, marked, tools = with_cache_breakpoints(system="Rules.", messages=messages, tools=DOCUMENT_TOOLS)
    assert system == [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}]
    assert [("cache_control" in tool) for tool in tools] == [False, True]
    marked_blocks = [
        (m, b)
        for m, message in enumerate(marked)
        for b, block in enumerate(message["content"])
        if "cache_control" in block
    ]
    assert marked_blocks == [(4, 0), (8, 0)]  # the second cleared result, the last block
    assert marked[0]["content"] == [{"type": "text", "text": "Go."}]


def test_no_cleared_region_and_a_string_last_message() -> None:
    system, marked, tools = with_cache_breakpoints(system="", messages=[{"role": "user", "content": "Hi."}], tools=[])
    assert (system, tools) == ([], [])
    assert marked == [{"role": "user", "content": [{"type": "text", "text": "Hi.", "cache_control": EPHEMERAL}]}]


def test_stopping_at_the_context_window_is_too_long(
    emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider
) -> None:
    docs = documents(1)
    messages: list[dict[str, Any]] = [{"role": "user", "content": instruction(docs)}]
    probe = anthropic_provider.send(model="m", system="", messages=messages, tools=DOCUMENT_TOOLS, max_tokens=100)
    emulator_reset.configure(limit=probe.usage.total_input + 2, stop_at_context_window=True)
    with pytest.raises(TooLong, match="model_context_window_exceeded"):
        anthropic_provider.send(model="m", system="", messages=messages, tools=DOCUMENT_TOOLS, max_tokens=100)


def test_rejections_become_typed_errors(emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider) -> None:
    hello = [{"role": "user", "content": "Hello there, how are you today?"}]
    emulator_reset.configure(faults={"script": ["429", "529", "500", "drop"], "retry_after_seconds": 2.5})
    errors = []
    for _ in range(4):
        with pytest.raises(Transient) as caught:
            anthropic_provider.send(model="m", system="", messages=hello, tools=[], max_tokens=5)
        errors.append(caught.value)
    assert [(error.status, error.retry_after) for error in errors] == [
        (429, 2.5),
        (529, None),
        (500, None),
        (None, None),
    ]
    assert all(error.provider == "anthropic" for error in errors)

    emulator_reset.configure(limit=5)
    with pytest.raises(TooLong) as too_long:
        anthropic_provider.send(model="m", system="", messages=hello, tools=[], max_tokens=5)
    assert too_long.value.status == 400 and "prompt is too long" in too_long.value.message

    emulator_reset.configure(api_key="another")
    with pytest.raises(AuthFailure):
        anthropic_provider.send(model="m", system="", messages=hello, tools=[], max_tokens=5)


def test_make_provider(emulator_reset: EmulatorServer) -> None:
    provider = make_provider("anthropic", api_key="k", base_url=emulator_reset.base_url, timeouts=Timeouts(idle=5))
    reply = provider.send(model="m", system="", messages=[{"role": "user", "content": "Hi"}], tools=[], max_tokens=50)
    assert reply.stop_reason == "end_turn"
    with pytest.raises(ValueError, match="unknown provider 'gemini'"):
        make_provider("gemini", api_key="k")
