"""Canonical (Anthropic-shaped) messages to OpenAI Chat Completions messages and back, losing nothing.

- The system prompt becomes a leading ``system`` message.
- An assistant message's text blocks become its ``content`` (a string stays a string, a list of blocks a list
  of text parts) and its tool_use blocks its ``tool_calls``. OpenAI keeps text before tool calls, so an
  assistant message that has text after a tool_use comes back with the text first.
- A user message's tool_result blocks become ``tool`` messages, in order, and its other blocks one ``user``
  message after them (OpenAI wants the tool answers right after the calls).
- OpenAI has no ``is_error``: an error result is marked by a leading ``[tool error]`` (a prefix on string
  content, a first text part on list content). A result that is not an error but happens to start with a
  marker gets ``[tool output]`` in front, so decoding is exact. ``is_error: false`` comes back as no
  ``is_error`` at all (the same meaning).
"""

from __future__ import annotations

import json
from typing import Any

Block = dict[str, Any]
Message = dict[str, Any]

ERROR_MARK = "[tool error]"
ESCAPE_MARK = "[tool output]"
_ERROR_PREFIX = ERROR_MARK + " "
_ESCAPE_PREFIX = ESCAPE_MARK + " "

# Arguments that are not a JSON object are kept under this key, so the tool can answer with an error the
# model sees, instead of the step failing.
UNPARSED_ARGUMENTS = "_unparsed_arguments"


def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    converted: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message["role"] == "assistant":
            converted.append(_assistant_to_openai(message["content"]))
        else:
            converted.extend(_user_to_openai(message["content"]))
    return converted


def from_openai_messages(messages: list[dict[str, Any]]) -> tuple[str, list[Message]]:
    """The inverse of ``to_openai_messages``: the system prompt and the canonical messages."""
    system_parts: list[str] = []
    canonical: list[Message] = []
    pending_results: list[Block] = []
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            system_parts.append(message["content"])
            continue
        if role == "tool":
            pending_results.append(_tool_result_from_openai(message))
            continue
        if role == "user" and isinstance(message["content"], list) and pending_results:
            canonical.append({"role": "user", "content": [*pending_results, *_blocks(message["content"])]})
            pending_results = []
            continue
        if pending_results:
            canonical.append({"role": "user", "content": pending_results})
            pending_results = []
        if role == "assistant":
            canonical.append({"role": "assistant", "content": _assistant_from_openai(message)})
        else:
            content = message["content"]
            canonical.append({"role": "user", "content": content if isinstance(content, str) else _blocks(content)})
    if pending_results:
        canonical.append({"role": "user", "content": pending_results})
    return "\n".join(system_parts), canonical


def to_openai_tools(tools: list[Block]) -> list[dict[str, Any]]:
    converted = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool["name"]}
        if "description" in tool:
            function["description"] = tool["description"]
        function["parameters"] = tool["input_schema"]
        converted.append({"type": "function", "function": function})
    return converted


def from_openai_tools(tools: list[dict[str, Any]]) -> list[Block]:
    converted = []
    for tool in tools:
        function = tool["function"]
        canonical: Block = {"name": function["name"]}
        if "description" in function:
            canonical["description"] = function["description"]
        canonical["input_schema"] = function["parameters"]
        converted.append(canonical)
    return converted


def tool_use_block(call_id: str, name: str, arguments: str) -> Block:
    """A canonical tool_use from an OpenAI tool call."""
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        parsed = None
    tool_input = parsed if isinstance(parsed, dict) else {UNPARSED_ARGUMENTS: arguments}
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def _assistant_to_openai(content: str | list[Block]) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts = [block for block in content if block["type"] == "text"]
    calls = [block for block in content if block["type"] == "tool_use"]
    if len(texts) + len(calls) != len(content):
        kinds = sorted({block["type"] for block in content} - {"text", "tool_use"})
        raise ValueError(f"an assistant message for OpenAI can hold only text and tool_use blocks, not {kinds}")
    converted: dict[str, Any] = {"role": "assistant", "content": _parts(texts) if texts else None}
    if calls:
        converted["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["input"], ensure_ascii=False)},
            }
            for call in calls
        ]
    return converted


def _assistant_from_openai(message: dict[str, Any]) -> str | list[Block]:
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if isinstance(content, str) and not calls:
        return content
    blocks = [] if content is None else _blocks(content) if isinstance(content, list) else [_text(content)]
    for call in calls:
        blocks.append(tool_use_block(call["id"], call["function"]["name"], call["function"]["arguments"]))
    return blocks


def _user_to_openai(content: str | list[Block]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results = [block for block in content if block["type"] == "tool_result"]
    others = [block for block in content if block["type"] != "tool_result"]
    converted = [_tool_result_to_openai(block) for block in results]
    if others or not results:
        converted.append({"role": "user", "content": _parts(others)})
    return converted


def _tool_result_to_openai(block: Block) -> dict[str, Any]:
    is_error = bool(block.get("is_error"))
    content = block.get("content", "")
    if isinstance(content, str):
        if is_error:
            marked = _ERROR_PREFIX + content
        elif content.startswith((_ERROR_PREFIX, _ESCAPE_PREFIX)):
            marked = _ESCAPE_PREFIX + content
        else:
            marked = content
        return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": marked}
    parts = _parts(content)
    if is_error:
        parts = [_part(ERROR_MARK), *parts]
    elif parts and parts[0]["text"] in (ERROR_MARK, ESCAPE_MARK):
        parts = [_part(ESCAPE_MARK), *parts]
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": parts}


def _tool_result_from_openai(message: dict[str, Any]) -> Block:
    content = message["content"]
    is_error = False
    if isinstance(content, str):
        if content.startswith(_ESCAPE_PREFIX):
            content = content[len(_ESCAPE_PREFIX) :]
        elif content.startswith(_ERROR_PREFIX):
            content, is_error = content[len(_ERROR_PREFIX) :], True
        decoded: str | list[Block] = content
    else:
        parts = list(content)
        if parts and parts[0]["text"] == ESCAPE_MARK:
            parts = parts[1:]
        elif parts and parts[0]["text"] == ERROR_MARK:
            parts, is_error = parts[1:], True
        decoded = _blocks(parts)
    block: Block = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": decoded}
    if is_error:
        block["is_error"] = True
    return block


def _parts(blocks: list[Block]) -> list[dict[str, Any]]:
    for block in blocks:
        if block["type"] != "text":
            raise ValueError(f"OpenAI messages here can hold only text, not {block['type']!r} blocks")
    return [_part(block["text"]) for block in blocks]


def _part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _text(text: str) -> Block:
    return {"type": "text", "text": text}


def _blocks(parts: list[dict[str, Any]]) -> list[Block]:
    return [_text(part["text"]) for part in parts]
