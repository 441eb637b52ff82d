"""The emulator's prompt caches follow the published rules: Anthropic's breakpoints and OpenAI's prefixes."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from emulator import EmulatorServer, load_encoding
from emulator.counting import BLOCK_OVERHEAD, MESSAGE_OVERHEAD, REQUEST_OVERHEAD

ENCODING = load_encoding("cl100k")
EPHEMERAL = {"type": "ephemeral"}
# About 1,500 tokens: above the 1,024-token minimum.
LONG_SYSTEM = " ".join(f"Rule {n}: read every document to the end before you write about it." for n in range(100))
SYSTEM_UNIT = len(ENCODING.encode(LONG_SYSTEM)) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD


@pytest.fixture
def client(emulator_reset: EmulatorServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="k", base_url=emulator_reset.base_url, max_retries=0, timeout=30)


def send(client: anthropic.Anthropic, **request: Any) -> anthropic.types.Usage:
    request.setdefault("messages", [{"role": "user", "content": "Hello."}])
    usage: anthropic.types.Usage = client.messages.create(
        model=request.pop("model", "m"), max_tokens=50, **request
    ).usage
    return usage


def cached_system(text: str = LONG_SYSTEM, **control: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {**EPHEMERAL, **control}}]


def total(usage: anthropic.types.Usage) -> int:
    return usage.input_tokens + (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)


def test_the_second_identical_prefix_reads_what_the_first_wrote(client: anthropic.Anthropic) -> None:
    first = send(client, system=cached_system())
    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens) == (SYSTEM_UNIT, 0)
    second = send(client, system=cached_system(), messages=[{"role": "user", "content": "Something else."}])
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (0, SYSTEM_UNIT)
    # The three parts add up to the whole request.
    assert (
        total(second)
        == client.messages.count_tokens(
            model="m", system=LONG_SYSTEM, messages=[{"role": "user", "content": "Something else."}]
        ).input_tokens
    )
    assert second.input_tokens == len(ENCODING.encode("Something else.")) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD + 3


def test_a_prefix_under_the_minimum_is_not_cached(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    short = cached_system("Be brief.")
    assert send(client, system=short).cache_creation_input_tokens == 0
    assert send(client, system=short).cache_read_input_tokens == 0
    emulator_reset.configure(min_cacheable_tokens=5)
    assert send(client, system=short).cache_creation_input_tokens == len(ENCODING.encode("Be brief.")) + 4


def test_any_change_before_the_breakpoint_misses(client: anthropic.Anthropic) -> None:
    send(client, system=cached_system())
    assert send(client, system=cached_system(LONG_SYSTEM + " One more rule.")).cache_read_input_tokens == 0
    assert send(client, system=cached_system(), model="other-model").cache_read_input_tokens == 0


def test_entries_expire_after_five_minutes_unless_read(
    emulator_reset: EmulatorServer, client: anthropic.Anthropic
) -> None:
    send(client, system=cached_system())
    emulator_reset.advance_clock(299)
    assert send(client, system=cached_system()).cache_read_input_tokens == SYSTEM_UNIT  # read: TTL refreshed
    emulator_reset.advance_clock(299)
    assert send(client, system=cached_system()).cache_read_input_tokens == SYSTEM_UNIT
    emulator_reset.advance_clock(301)
    expired = send(client, system=cached_system())
    assert (expired.cache_read_input_tokens, expired.cache_creation_input_tokens) == (0, SYSTEM_UNIT)


def test_the_ttl_is_configurable(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    emulator_reset.configure(cache_ttl_seconds=0.2)
    send(client, system=cached_system())
    assert send(client, system=cached_system()).cache_read_input_tokens == SYSTEM_UNIT
    emulator_reset.advance_clock(0.3)
    assert send(client, system=cached_system()).cache_read_input_tokens == 0


def test_one_hour_entries_outlive_five_minutes(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    written = send(client, system=cached_system(ttl="1h"))
    assert written.cache_creation is not None
    assert written.cache_creation.ephemeral_1h_input_tokens == SYSTEM_UNIT
    assert written.cache_creation.ephemeral_5m_input_tokens == 0
    emulator_reset.advance_clock(3000)
    assert send(client, system=cached_system(ttl="1h")).cache_read_input_tokens == SYSTEM_UNIT


def test_a_stable_breakpoint_read_through_lives_on(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    """The system prompt's entry is never the longest hit while the conversation grows, yet every request reads
    through it at one of its breakpoints: it stays alive, and is what a request that changed its messages reads."""
    turns: list[dict[str, Any]] = []
    for turn in range(3):  # a turn every 4 minutes: 8 minutes after it was written, the system entry is still there
        turns.append({"role": "user", "content": [{"type": "text", "text": f"Turn {turn}. " + LONG_SYSTEM}]})
        marked = [*turns[:-1], {**turns[-1], "content": [{**turns[-1]["content"][0], "cache_control": EPHEMERAL}]}]
        usage = send(client, system=cached_system(), messages=marked)
        read = usage.cache_read_input_tokens or 0
        assert read > SYSTEM_UNIT if turn else read == 0  # from the second turn on: the previous turn's entry
        emulator_reset.advance_clock(240)
    changed = send(client, system=cached_system(), messages=[{"role": "user", "content": "Something else."}])
    assert changed.cache_read_input_tokens == SYSTEM_UNIT


def _blocks(count: int, marked: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": f"Block number {n}."} for n in range(count)]
    blocks[marked] = {**blocks[marked], "cache_control": EPHEMERAL}
    return blocks


def _prefix_through_block(index: int) -> int:
    blocks = sum(len(ENCODING.encode(f"Block number {n}.")) + BLOCK_OVERHEAD for n in range(index + 1))
    return len(ENCODING.encode(LONG_SYSTEM)) + MESSAGE_OVERHEAD + BLOCK_OVERHEAD + MESSAGE_OVERHEAD + blocks


@pytest.mark.parametrize(("distance", "hit"), [(0, True), (19, True), (20, False)])
def test_a_breakpoint_looks_back_twenty_blocks(client: anthropic.Anthropic, distance: int, hit: bool) -> None:
    # The system prompt (uncached) makes the prefix long enough; the entry is written at block 3.
    send(client, system=LONG_SYSTEM, messages=[{"role": "user", "content": _blocks(40, 3)}])
    later = send(client, system=LONG_SYSTEM, messages=[{"role": "user", "content": _blocks(40, 3 + distance)}])
    assert later.cache_read_input_tokens == (_prefix_through_block(3) if hit else 0)
    assert later.cache_creation_input_tokens == (
        _prefix_through_block(3 + distance) - (_prefix_through_block(3) if hit else 0)
    )


def test_writes_cover_up_to_the_last_breakpoint(client: anthropic.Anthropic) -> None:
    tools: list[Any] = [{"name": "read_document", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}]
    messages: list[Any] = [{"role": "user", "content": _blocks(6, 4)}]
    usage = send(client, tools=tools, system=cached_system(), messages=messages)
    # The tool schema alone is under the minimum, so only the later breakpoints are written.
    assert usage.cache_read_input_tokens == 0
    full = client.messages.count_tokens(model="m", tools=tools, system=LONG_SYSTEM, messages=messages).input_tokens
    after_last = sum(len(ENCODING.encode(f"Block number {n}.")) + BLOCK_OVERHEAD for n in (5,)) + REQUEST_OVERHEAD
    assert usage.cache_creation_input_tokens == full - after_last
    assert usage.input_tokens == after_last


def test_the_openai_route_caches_prefixes_in_128_token_steps(emulator_reset: EmulatorServer) -> None:
    client = openai.OpenAI(api_key="k", base_url=emulator_reset.openai_base_url, max_retries=0)
    messages = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "Hello."}]
    first = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    second = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens_details is not None and second.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    prompt = second.usage.prompt_tokens
    cacheable = prompt - REQUEST_OVERHEAD  # the closing framing of the request is never part of a prefix
    assert second.usage.prompt_tokens_details.cached_tokens == cacheable - (cacheable - 1024) % 128

    short = [{"role": "user", "content": "Hi."}]
    client.chat.completions.create(model="m", messages=short)  # type: ignore[arg-type]
    again = client.chat.completions.create(model="m", messages=short)  # type: ignore[arg-type]
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == 0


def test_reset_forgets_the_cache(emulator_reset: EmulatorServer, client: anthropic.Anthropic) -> None:
    send(client, system=cached_system())
    emulator_reset.reset()
    assert send(client, system=cached_system()).cache_read_input_tokens == 0
    stats = emulator_reset.stats()
    assert stats["cache_write_tokens_total"] == SYSTEM_UNIT
    assert stats["requests"] == 1
