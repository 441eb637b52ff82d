"""The Anthropic Messages wire format: reading requests (their shape checked by ``emulator.anthropic_request``) and
the rules across fields, writing replies and errors."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from emulator.anthropic_request import (
    OTHER_BLOCKS,
    CountTokensRequest,
    MessageIn,
    MessagesRequest,
    TextBlock,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
    first_problem,
)
from emulator.conversation import Block, Conversation, Message, RequestError

MAX_CACHE_BREAKPOINTS = 4

_BLOCK_TYPES = {"user": ("text", "tool_result"), "assistant": ("text", "tool_use")}


def error_body(kind: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


def prompt_too_long_message(tokens: int, limit: int) -> str:
    return f"prompt is too long: {tokens} tokens > {limit} maximum"


def context_exceeded_message(tokens: int, max_tokens: int, limit: int) -> str:
    return (
        f"input length and `max_tokens` exceed context limit: {tokens} + {max_tokens} > {limit}, "
        "decrease input length or `max_tokens` and try again"
    )


def parse_request(body: object, *, count_only: bool = False) -> Conversation:
    """The conversation in a ``/v1/messages`` (or ``count_tokens``) body, checked as the real API checks it."""
    shape = CountTokensRequest if count_only else MessagesRequest
    try:
        request = shape.model_validate(body)
    except ValidationError as error:
        raise RequestError(first_problem(error)) from None
    if not request.messages:
        raise RequestError("messages: at least one message is required")
    messages = [_message(message, f"messages.{index}") for index, message in enumerate(request.messages)]
    _check_tool_pairing(messages)
    conversation = Conversation(
        model=request.model,
        system=_system(request.system),
        tools=[_tool(tool) for tool in request.tools or []],
        messages=messages,
        max_tokens=request.max_tokens if isinstance(request, MessagesRequest) else None,
    )
    if len(conversation.tool_names) != len(conversation.tools):
        raise RequestError("tools: Tool names must be unique.")
    _check_breakpoint_count(conversation)
    return conversation


def message_body(
    *, message_id: str, model: str, content: list[Block], stop_reason: str, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def usage_body(*, uncached: int, output: int, read: int, written_5m: int, written_1h: int) -> dict[str, Any]:
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": written_5m + written_1h,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": written_5m, "ephemeral_1h_input_tokens": written_1h},
        "output_tokens": output,
        "service_tier": "standard",
    }


def _message(message: MessageIn, path: str) -> Message:
    if not message.content:
        raise RequestError(
            f"{path}: all messages must have non-empty content except for the optional final assistant message"
        )
    allowed = _BLOCK_TYPES[message.role]
    blocks = []
    for index, block in enumerate(message.content):
        if block.type not in allowed:
            supported = " or ".join(f"'{name}'" for name in allowed)
            raise RequestError(f"{path}.content.{index}.type: Input should be {supported}{OTHER_BLOCKS}")
        blocks.append(_block(block))
    return {"role": message.role, "content": blocks}


def _block(block: TextBlock | ToolUseBlock | ToolResultBlock) -> Block:
    """The block as the counter and the cache read it: the fields the emulator uses, in the order they were
    always written."""
    if isinstance(block, TextBlock):
        made: Block = {"type": "text", "text": _text(block)}
    elif isinstance(block, ToolUseBlock):
        made = {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    else:
        made = {"type": "tool_result", "tool_use_id": block.tool_use_id}
        if block.content is not None:
            made["content"] = block.content if isinstance(block.content, str) else [_block(b) for b in block.content]
        if block.is_error is not None:
            made["is_error"] = block.is_error
    return _with_cache_control(made, block)


def _text(block: TextBlock) -> str:
    if not block.text:
        raise RequestError("messages: text content blocks must be non-empty")
    return block.text


def _with_cache_control(made: Block, block: TextBlock | ToolUseBlock | ToolResultBlock | Tool) -> Block:
    if block.cache_control is None:
        return made
    return {**made, "cache_control": block.cache_control.model_dump(exclude_unset=True)}


def _system(system: str | list[TextBlock] | None) -> list[Block]:
    if not system:
        return []
    if isinstance(system, str):
        return [{"type": "text", "text": system}]
    return [_block(block) for block in system]


def _tool(tool: Tool) -> Block:
    made: Block = {"name": tool.name}
    if tool.description is not None:
        made["description"] = tool.description
    made["input_schema"] = tool.input_schema
    return _with_cache_control(made, tool)


def _check_tool_pairing(messages: list[Message]) -> None:
    """Every tool_use needs its tool_result in the very next message, and every tool_result its tool_use in
    the message just before."""
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            asked = [block["id"] for block in message["content"] if block["type"] == "tool_use"]
            following = messages[index + 1]["content"] if index + 1 < len(messages) else []
            answered = {block["tool_use_id"] for block in following if block["type"] == "tool_result"}
            missing = [tool_use_id for tool_use_id in asked if tool_use_id not in answered]
            if missing:
                raise RequestError(
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                    "`tool_result` block in the next message."
                )
            continue
        previous = messages[index - 1]["content"] if index > 0 else []
        asked_before = {block["id"] for block in previous if block["type"] == "tool_use"}
        for position, block in enumerate(message["content"]):
            if block["type"] == "tool_result" and block["tool_use_id"] not in asked_before:
                raise RequestError(
                    f"messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block['tool_use_id']}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )


def _check_breakpoint_count(conversation: Conversation) -> None:
    blocks = [*conversation.tools, *conversation.system]
    blocks += [block for message in conversation.messages for block in message["content"]]
    found = sum(1 for block in blocks if "cache_control" in block)
    if found > MAX_CACHE_BREAKPOINTS:
        raise RequestError(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."
        )
