"""Where the Anthropic adapter puts its (at most four) ``cache_control`` breakpoints, and why.

Anthropic caches the prefix ending at a marked block (tools, then system, then messages) and, on a later
request, finds it only by looking back from a marked block at most ~20 blocks. So each breakpoint sits on a
block where a later request will have the very same prefix, and near where that request will look.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plimsoll.notices import CLEARED_RESULT_NOTE

Block = dict[str, Any]
Message = dict[str, Any]

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}


def with_cache_breakpoints(
    *, system: str, messages: list[Message], tools: list[Block], breakpoints: Sequence[int] = ()
) -> tuple[list[Block], list[Message], list[Block]]:
    """The system prompt as blocks, the messages and the tools, with breakpoints placed; the caller's
    dicts are never changed (any ``cache_control`` they carry is left out of the copies). ``breakpoints``
    (message indices, from Plimsoll's cache-economic plan) replace the placement below (3)."""
    if breakpoints:
        return _planned(system=system, messages=messages, tools=tools, breakpoints=breakpoints)
    marked_tools = [_without_cache_control(tool) for tool in tools]
    if marked_tools:
        # (1) The tool schemas are identical on every step of a job: cache them on their own, so they are
        # reused even when the system prompt differs between jobs that share the tools.
        marked_tools[-1] = {**marked_tools[-1], "cache_control": dict(EPHEMERAL)}

    # (2) The system prompt is identical on every step of a job.
    system_blocks = [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}] if system else []

    marked_messages = [_message_without_cache_control(message) for message in messages]
    if marked_messages and marked_messages[-1]["content"]:
        last = (len(marked_messages) - 1, len(marked_messages[-1]["content"]) - 1)
        cleared = _last_cleared_result(marked_messages)
        if cleared is not None and cleared != last:
            # (3) The end of the already-cleared region. It changes only when Plimsoll clears a new batch
            # of four results, so between batches every step reads up to here; when a batch is cleared,
            # the new end lies a few tool rounds (well within the ~20-block lookback) after the old one,
            # so the new entry is written on top of a read of the old.
            _mark(marked_messages, *cleared)
        # (4) The last block of the request. The next step sends this request again plus one tool round
        # (two or three blocks), so its own last-block breakpoint finds this entry in its lookback and
        # reads everything up to here.
        _mark(marked_messages, *last)
    return system_blocks, marked_messages, marked_tools


def _planned(
    *, system: str, messages: list[Message], tools: list[Block], breakpoints: Sequence[int]
) -> tuple[list[Block], list[Message], list[Block]]:
    """The system prompt (with the tools before it, one prefix that never changes within a job), the ends of
    the prefixes the plan keeps (at most two, the newest), and the last block: four marks at most."""
    system_blocks = [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}] if system else []
    marked_messages = [_message_without_cache_control(message) for message in messages]
    last = len(marked_messages) - 1
    kept = sorted({i for i in breakpoints if 0 <= i < last and marked_messages[i]["content"]})[-2:]
    for index in [*kept, last] if marked_messages and marked_messages[last]["content"] else kept:
        _mark(marked_messages, index, len(marked_messages[index]["content"]) - 1)
    return system_blocks, marked_messages, [_without_cache_control(tool) for tool in tools]


def _message_without_cache_control(message: Message) -> Message:
    """The message with its content as blocks, none marked; the message itself if it is so already (it is never
    changed: :func:`_mark` copies what it marks). A request of 4,000 messages is not copied at every step."""
    content = message["content"]
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    if not any("cache_control" in block for block in content):
        return message
    return {**message, "content": [_without_cache_control(block) for block in content]}


def _without_cache_control(block: Block) -> Block:
    return {name: value for name, value in block.items() if name != "cache_control"}


def _last_cleared_result(messages: list[Message]) -> tuple[int, int] | None:
    found = None
    for message_index, message in enumerate(messages):
        for block_index, block in enumerate(message["content"]):
            if block.get("type") == "tool_result" and _is_cleared_note(block.get("content")):
                found = (message_index, block_index)
    return found


def _is_cleared_note(content: object) -> bool:
    if isinstance(content, str):
        return content == CLEARED_RESULT_NOTE
    return (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and content[0].get("text") == CLEARED_RESULT_NOTE
    )


def _mark(messages: list[Message], message_index: int, block_index: int) -> None:
    """Mark one block of ``messages`` (a list of our own): its message, its content and the block are copies."""
    message = messages[message_index]
    content = list(message["content"])
    content[block_index] = {**content[block_index], "cache_control": dict(EPHEMERAL)}
    messages[message_index] = {**message, "content": content}
