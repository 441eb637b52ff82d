"""The Anthropic Messages wire format: reading and checking requests, writing replies and errors."""

from __future__ import annotations

import re
from typing import Any

from emulator.conversation import Block, Conversation, Message, RequestError

MAX_CACHE_BREAKPOINTS = 4

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
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
    if not isinstance(body, dict):
        raise RequestError("request body: Input should be a valid dictionary")
    model = _required(body, "model", str, "a valid string")
    max_tokens = None
    if not count_only:
        max_tokens = _required(body, "max_tokens", int, "a valid integer")
        if max_tokens < 1:
            raise RequestError("max_tokens: Input should be greater than or equal to 1")
    raw_messages = _required(body, "messages", list, "a valid list")
    if not raw_messages:
        raise RequestError("messages: at least one message is required")
    messages = [_message(raw, f"messages.{index}") for index, raw in enumerate(raw_messages)]
    _check_tool_pairing(messages)
    conversation = Conversation(
        model=model,
        system=_system(body.get("system")),
        tools=_tools(body.get("tools")),
        messages=messages,
        max_tokens=max_tokens,
    )
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


def _required(body: dict[str, Any], name: str, kind: type, description: str) -> Any:
    if name not in body:
        raise RequestError(f"{name}: Field required")
    value = body[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RequestError(f"{name}: Input should be {description}")
    return value


def _message(raw: object, path: str) -> Message:
    if not isinstance(raw, dict):
        raise RequestError(f"{path}: Input should be a valid dictionary")
    role = raw.get("role")
    if role not in _BLOCK_TYPES:
        raise RequestError(f"{path}.role: Input should be 'user' or 'assistant'")
    content = raw.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise RequestError(f"{path}.content: Input should be a valid string or a valid list")
    if not content:
        raise RequestError(
            f"{path}: all messages must have non-empty content except for the optional final assistant message"
        )
    blocks = [_block(block, f"{path}.content.{index}", _BLOCK_TYPES[role]) for index, block in enumerate(content)]
    return {"role": role, "content": blocks}


def _block(raw: object, path: str, allowed: tuple[str, ...]) -> Block:
    if not isinstance(raw, dict):
        raise RequestError(f"{path}: Input should be a valid dictionary")
    kind = raw.get("type")
    if kind not in allowed:
        supported = " or ".join(f"'{name}'" for name in allowed)
        raise RequestError(f"{path}.type: Input should be {supported} (the emulator supports no other blocks here)")
    if kind == "text":
        block: Block = {"type": "text", "text": _text(raw, path)}
    elif kind == "tool_use":
        block = {
            "type": "tool_use",
            "id": _string(raw, "id", path),
            "name": _string(raw, "name", path),
            "input": _object(raw, "input", path),
        }
    else:
        block = {"type": "tool_result", "tool_use_id": _string(raw, "tool_use_id", path)}
        if "content" in raw:
            block["content"] = _tool_result_content(raw["content"], f"{path}.content")
        if "is_error" in raw:
            if not isinstance(raw["is_error"], bool):
                raise RequestError(f"{path}.is_error: Input should be a valid boolean")
            block["is_error"] = raw["is_error"]
    return _with_cache_control(block, raw, path)


def _text(raw: dict[str, Any], path: str) -> str:
    text = _string(raw, "text", path)
    if not text:
        raise RequestError("messages: text content blocks must be non-empty")
    return text


def _string(raw: dict[str, Any], name: str, path: str) -> str:
    if name not in raw:
        raise RequestError(f"{path}.{name}: Field required")
    value = raw[name]
    if not isinstance(value, str):
        raise RequestError(f"{path}.{name}: Input should be a valid string")
    return value


def _object(raw: dict[str, Any], name: str, path: str) -> dict[str, Any]:
    if name not in raw:
        raise RequestError(f"{path}.{name}: Field required")
    value = raw[name]
    if not isinstance(value, dict):
        raise RequestError(f"{path}.{name}: Input should be a valid dictionary")
    return value


def _tool_result_content(raw: object, path: str) -> str | list[Block]:
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, list):
        raise RequestError(f"{path}: Input should be a valid string or a valid list")
    return [_block(item, f"{path}.{index}", ("text",)) for index, item in enumerate(raw)]


def _with_cache_control(block: Block, raw: dict[str, Any], path: str) -> Block:
    control = raw.get("cache_control")
    if control is None:
        return block
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise RequestError(f"{path}.cache_control.type: Input should be 'ephemeral'")
    if control.get("ttl", "5m") not in ("5m", "1h"):
        raise RequestError(f"{path}.cache_control.ttl: Input should be '5m' or '1h'")
    return {**block, "cache_control": dict(control)}


def _system(raw: object) -> list[Block]:
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        return [{"type": "text", "text": raw}]
    if not isinstance(raw, list):
        raise RequestError("system: Input should be a valid string or a valid list")
    return [_block(item, f"system.{index}", ("text",)) for index, item in enumerate(raw)]


def _tools(raw: object) -> list[Block]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RequestError("tools: Input should be a valid list")
    tools = []
    for index, item in enumerate(raw):
        path = f"tools.{index}"
        if not isinstance(item, dict):
            raise RequestError(f"{path}: Input should be a valid dictionary")
        if item.get("type", "custom") != "custom":
            raise RequestError(f"{path}.type: the emulator supports only custom (client) tools")
        name = _string(item, "name", path)
        if not _TOOL_NAME.match(name):
            raise RequestError(f"{path}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        tool: Block = {"name": name}
        if "description" in item:
            tool["description"] = _string(item, "description", path)
        tool["input_schema"] = _object(item, "input_schema", path)
        tools.append(_with_cache_control(tool, item, path))
    if len({tool["name"] for tool in tools}) != len(tools):
        raise RequestError("tools: Tool names must be unique.")
    return tools


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
