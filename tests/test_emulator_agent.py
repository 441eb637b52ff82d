"""The emulator's deterministic agent, driven to the end of document tasks through the adapters."""

from __future__ import annotations

import copy
import hashlib
import random
from typing import Any

import anthropic
import pytest

from emulator import EmulatorServer
from emulator.sha256 import RunningSha256
from plimsoll.notices import AGENT_SAFETY_NET, CLEARED_RESULT_NOTE
from tests.fixtures_emulator import DELEGATE_TOOL, DOCUMENT_TOOLS, play_documents
from tests.support_emulator import expected_note
from worker.errors import TooLong
from worker.providers import AnthropicProvider, OpenAIProvider

MIXED_TEXT = "Река и мельница. 河 磨坊 村子. The river mill, the village road. "
WORDS = ["river", "stone", "lantern", "copper", "meadow", "harbor", "violet", "ember", "thistle", "quarry", "falcon"]


def make_documents(count: int, words: int = 220) -> dict[str, str]:
    rng = random.Random(count)
    return {
        f"doc{n:02d}.txt": f"Document {n}.\n" + " ".join(rng.choice(WORDS) for _ in range(words))
        for n in range(1, count + 1)
    }


def expected_report(documents: dict[str, str]) -> str:
    notes = [expected_note(name, text) for name, text in documents.items()]
    return "\n".join([f"REPORT: {len(documents)} documents", *notes])


def naming(documents: dict[str, str]) -> str:
    return "Check " + ", ".join(f"`{name}`" for name in documents) + " and write a note on each."


def keep_last_results(keep: int) -> Any:
    """A shaper that replaces all but the newest ``keep`` tool results with Plimsoll's cleared note."""

    def shape(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        positions = [
            (m, b)
            for m, message in enumerate(messages)
            if isinstance(message["content"], list)
            for b, block in enumerate(message["content"])
            if block["type"] == "tool_result"
        ]
        shaped = [dict(message) for message in messages]
        for m, b in positions[: max(0, len(positions) - keep)]:
            content = list(shaped[m]["content"])
            content[b] = {**content[b], "content": CLEARED_RESULT_NOTE}
            shaped[m]["content"] = content
        return shaped

    return shape


def read_calls(messages: list[dict[str, Any]]) -> list[str]:
    return [
        block["input"]["name"]
        for message in messages
        if message["role"] == "assistant"
        for block in message["content"]
        if block["type"] == "tool_use" and block["name"] == "read_document"
    ]


def test_forty_documents_finish_when_every_request_fits(
    emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider
) -> None:
    documents = make_documents(40)
    emulator_reset.configure(limit=10_000)
    # The final report of 40 notes is about 1,300 tokens: room for it is part of fitting.
    job = play_documents(anthropic_provider, documents, naming(documents), shape=keep_last_results(2), max_tokens=2048)
    assert job.final_text == expected_report(documents)
    assert job.replies[-1].stop_reason == "end_turn"
    assert read_calls(job.messages) == list(documents)  # each read once, in order
    stats = emulator_reset.stats()
    assert stats["rejections"] == {}
    assert stats["requests"] == 41
    assert stats["input_tokens_max"] + 2048 <= 10_000


def test_forty_documents_are_rejected_when_requests_do_not_fit(
    emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider
) -> None:
    documents = make_documents(40)
    emulator_reset.configure(limit=10_000)
    with pytest.raises(TooLong):
        play_documents(anthropic_provider, documents, naming(documents), max_tokens=2048)
    stats = emulator_reset.stats()
    assert sum(stats["rejections"].values()) == 1
    assert set(stats["rejections"]) <= {"too_long", "too_long_with_max_tokens"}
    assert stats["requests"] < 41


def read_inputs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        block["input"]
        for message in messages
        if message["role"] == "assistant"
        for block in message["content"]
        if block["type"] == "tool_use" and block["name"] == "read_document"
    ]


def clear_first_read_of(name: str, *, once_read: int = 1) -> Any:
    """A shaper that clears the result of the first read of document ``name``, from the request on in which
    ``name`` has been read ``once_read`` times."""

    def shape(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        reads = [
            block["id"]
            for message in messages
            if message["role"] == "assistant"
            for block in message["content"]
            if block["type"] == "tool_use" and block["input"].get("name") == name
        ]
        shaped = copy.deepcopy(messages)
        for message in shaped:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if len(reads) >= once_read and block.get("tool_use_id") == reads[0]:
                    block["content"] = CLEARED_RESULT_NOTE
        return shaped

    return shape


def test_a_cleared_document_is_read_again(anthropic_provider: AnthropicProvider) -> None:
    documents = make_documents(4)
    job = play_documents(anthropic_provider, documents, naming(documents), shape=clear_first_read_of("doc02.txt"))
    assert read_calls(job.messages) == ["doc01.txt", "doc02.txt", "doc02.txt", "doc03.txt", "doc04.txt"]
    assert job.final_text == expected_report(documents)


def test_documents_handed_out_in_pages_are_read_to_the_end(anthropic_provider: AnthropicProvider) -> None:
    documents = make_documents(3, words=400)  # about 2,600 characters each
    job = play_documents(anthropic_provider, documents, naming(documents), page_chars=1000)
    calls = read_inputs(job.messages)
    assert calls[:3] == [
        {"name": "doc01.txt"},
        {"name": "doc01.txt", "offset": 1000},
        {"name": "doc01.txt", "offset": 2000},
    ]
    assert len(calls) == 9
    assert job.final_text == expected_report(documents)


def test_a_noted_page_is_not_read_again_once_cleared(anthropic_provider: AnthropicProvider) -> None:
    documents = make_documents(1, words=400)
    job = play_documents(
        anthropic_provider,
        documents,
        naming(documents),
        page_chars=1000,
        shape=clear_first_read_of("doc01.txt", once_read=3),
    )
    offsets = [call.get("offset", 0) for call in read_inputs(job.messages)]
    assert offsets == [0, 1000, 2000]
    assert job.final_text == expected_report(documents)


def test_a_page_cleared_before_it_was_noted_is_read_again(anthropic_provider: AnthropicProvider) -> None:
    documents = make_documents(1, words=400)
    job = play_documents(
        anthropic_provider, documents, naming(documents), page_chars=1000, shape=clear_first_read_of("doc01.txt")
    )
    offsets = [call.get("offset", 0) for call in read_inputs(job.messages)]
    assert offsets == [0, 0, 1000, 2000]
    assert job.final_text == expected_report(documents)


def test_documents_bigger_than_what_stays_visible_are_read_once_page_by_page(
    anthropic_provider: AnthropicProvider,
) -> None:
    documents = {**make_documents(2, words=900), "mixed.txt": MIXED_TEXT * 40}
    page_chars = 700
    # Only the newest result stays whole: no two pages of a document are ever visible together.
    job = play_documents(
        anthropic_provider, documents, naming(documents), page_chars=page_chars, shape=keep_last_results(1)
    )
    expected_reads = [
        {"name": name, **({"offset": offset} if offset else {})}
        for name, text in documents.items()
        for offset in range(0, len(text), page_chars)
    ]
    assert len(expected_reads) > 3 * len(documents)
    assert read_inputs(job.messages) == expected_reads  # every page once, in order
    assert job.final_text == expected_report(documents)
    assert job.replies[-1].stop_reason == "end_turn"
    assert len(job.replies) == len(expected_reads) + 1


@pytest.mark.parametrize("page_chars", [1, 2, 3, 5, 8, 13])
def test_tiny_pages_give_the_same_note(anthropic_provider: AnthropicProvider, page_chars: int) -> None:
    documents = {"tiny.txt": "  Two  words\n\n and\tthen Ünïcode 河 磨坊 and a long tail of words after them."}
    job = play_documents(
        anthropic_provider, documents, naming(documents), page_chars=page_chars, shape=keep_last_results(1)
    )
    assert job.final_text == expected_report(documents)


def test_the_running_sha256_is_sha256_wherever_it_stops() -> None:
    rng = random.Random(7)
    for length in (0, 1, 55, 56, 63, 64, 65, 127, 128, 129, 1000):
        data = rng.randbytes(length)
        cut = rng.randrange(length + 1)
        resumed = RunningSha256.load(RunningSha256().update(data[:cut]).dump()).update(data[cut:])
        assert resumed.hexdigest() == hashlib.sha256(data).hexdigest()
    with pytest.raises(ValueError):
        RunningSha256.load("0" * 64 + ".3.ab")  # 3 bytes read, but 1 left unfinished


def test_without_named_documents_it_lists_them_first(anthropic_provider: AnthropicProvider) -> None:
    documents = make_documents(3)
    job = play_documents(anthropic_provider, documents, "Read every document and report on each.")
    first_call = job.replies[0].content[-1]
    assert (first_call["name"], first_call["input"]) == ("list_documents", {})
    assert job.final_text == expected_report(documents)


def test_an_unreadable_document_is_noted_as_such(anthropic_provider: AnthropicProvider) -> None:
    documents = make_documents(2)
    instruction = "Check `doc01.txt`, `missing.txt`, `doc02.txt`."
    job = play_documents(anthropic_provider, documents, instruction)
    lines = job.final_text.splitlines()
    assert lines[0] == "REPORT: 3 documents"
    error = "no such document: 'missing.txt'"
    assert lines[2] == f'NOTE missing.txt: unreadable, error "{error[:30]}"'
    assert [lines[1], lines[3]] == [expected_note(name, text) for name, text in documents.items()]


def test_many_documents_are_delegated_in_parallel_groups(anthropic_provider: AnthropicProvider) -> None:
    documents = make_documents(25)
    job = play_documents(anthropic_provider, documents, naming(documents), tools=[*DOCUMENT_TOOLS, DELEGATE_TOOL])
    delegated = [block for block in job.replies[0].content if block["type"] == "tool_use"]
    assert [block["name"] for block in delegated] == ["delegate"] * 3
    names = list(documents)
    for block, group in zip(delegated, (names[:10], names[10:20], names[20:]), strict=True):
        assert all(f"`{name}`" in block["input"]["task"] for name in group)
    assert len({block["id"] for block in delegated}) == 3
    assert job.final_text == expected_report(documents)


def test_the_anxious_agent_stops_early_without_the_safety_net(
    emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider
) -> None:
    documents = make_documents(10)
    emulator_reset.configure(anxious=True)
    system = "You review documents. Your context budget is 4,000 tokens."
    job = play_documents(anthropic_provider, documents, naming(documents), system=system)
    first_line = job.final_text.splitlines()[0]
    read = len(read_calls(job.messages))
    assert 0 < read < 10
    assert first_line == f"I have read {read} of 10 documents and I am stopping here to save space in the context."
    assert job.replies[-1].stop_reason == "end_turn"


def test_the_anxious_agent_continues_with_the_safety_net(
    emulator_reset: EmulatorServer, anthropic_provider: AnthropicProvider
) -> None:
    documents = make_documents(10)
    emulator_reset.configure(anxious=True)
    system = f"You review documents. Your context budget is 4,000 tokens.\n\n{AGENT_SAFETY_NET}"
    job = play_documents(anthropic_provider, documents, naming(documents), system=system)
    assert job.final_text == expected_report(documents)


def test_the_anxious_header_and_the_missing_budget(emulator_reset: EmulatorServer) -> None:
    client = anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0)
    documents = make_documents(3)
    request: dict[str, Any] = {
        "model": "m",
        "max_tokens": 200,
        "tools": DOCUMENT_TOOLS,
        "messages": [{"role": "user", "content": naming(documents) + " " + "padding " * 300}],
    }
    anxious = {"x-emulator-anxious": "1"}
    stopped = client.messages.create(system="Context budget: 1000 tokens.", extra_headers=anxious, **request)
    assert stopped.stop_reason == "end_turn"
    assert stopped.content[0].type == "text" and "stopping here to save space" in stopped.content[0].text
    calm = client.messages.create(system="No budget is stated here.", extra_headers=anxious, **request)
    assert calm.stop_reason == "tool_use"
    not_anxious = client.messages.create(system="Context budget: 1000 tokens.", **request)
    assert not_anxious.stop_reason == "tool_use"


def test_the_openai_route_plays_the_same_agent(emulator_reset: EmulatorServer, openai_provider: OpenAIProvider) -> None:
    documents = make_documents(6)
    job = play_documents(openai_provider, documents, naming(documents), shape=keep_last_results(2))
    assert job.final_text == expected_report(documents)
    assert all(block["id"].startswith("call_") for reply in job.replies for block in reply.content[1:])
    assert emulator_reset.stats()["requests_by_route"] == {"chat_completions": 7}


def test_output_is_cut_at_max_tokens(anthropic_provider: AnthropicProvider) -> None:
    documents = make_documents(1)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": naming(documents) + " Also `doc02.txt`."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_x", "name": "read_document", "input": {"name": "doc01.txt"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": documents["doc01.txt"]}],
        },
    ]
    reply = anthropic_provider.send(model="m", system="", messages=messages, tools=DOCUMENT_TOOLS, max_tokens=5)
    assert reply.stop_reason == "max_tokens"
    assert reply.usage.output_tokens == 5
    assert [block["type"] for block in reply.content] == ["text"]
    assert expected_note("doc01.txt", documents["doc01.txt"]).startswith(reply.content[0]["text"])


def test_the_same_request_gets_the_same_ids(emulator_reset: EmulatorServer) -> None:
    client = anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0)
    request: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "tools": DOCUMENT_TOOLS,
        "messages": [{"role": "user", "content": "Check `a.txt`."}],
    }
    first, second = client.messages.create(**request), client.messages.create(**request)
    assert first.id == second.id and first.id.startswith("msg_01")
    assert first.content[0].type == "tool_use" and second.content[0].type == "tool_use"
    assert first.content[0].id == second.content[0].id and first.content[0].id.startswith("toolu_01")


def test_without_document_tools_it_just_answers(anthropic_provider: AnthropicProvider) -> None:
    reply = anthropic_provider.send(
        model="m", system="", messages=[{"role": "user", "content": "Hello there"}], tools=[], max_tokens=100
    )
    assert reply.stop_reason == "end_turn"
    assert reply.content == [
        {"type": "text", "text": "I have no tool to read documents. Your message has 11 characters."}
    ]
