"""The OpenAI Chat Completions wire format: reading and checking requests, writing replies and errors.

Requests become the same conversation shape the Anthropic route uses: system and developer messages form the
system prompt, ``tool_calls`` become tool_use blocks, and each ``tool`` message becomes a user message holding
one tool_result. A function definition is counted as the Anthropic-shaped tool it corresponds to.
"""

from __future__ import annotations

import json
from typing import Any

from emulator.conversation import Block, Conversation, Message, RequestError

_ROLES = ("system", "developer", "user", "assistant", "tool")


def error_body(message: str, *, kind: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def context_length_message(*, limit: int, tokens: int, max_tokens: int | None) -> str:
    if max_tokens is None or tokens > limit:
        return (
            f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{tokens} tokens. Please reduce the length of the messages."
        )
    return (
        f"This model's maximum context length is {limit} tokens. However, you requested {tokens + max_tokens} "
        f"tokens ({tokens} in the messages, {max_tokens} in the completion). Please reduce the length of the "
        "messages or completion."
    )


def parse_request(body: object) -> Conversation:
    """The conversation in a ``/v1/chat/completions`` body, checked as the real API checks it."""
    if not isinstance(body, dict):
        raise RequestError("We could not parse the JSON body of your request.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("you must provide a model parameter")
    if body.get("stream"):
        raise RequestError("The emulator does not stream on the OpenAI route; send stream=false.", param="stream")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise RequestError("Missing required parameter: 'messages'.", param="messages")
    if not raw_messages:
        raise RequestError("[] is too short - 'messages'", param="messages")
    system: list[Block] = []
    messages: list[Message] = []
    for index, raw in enumerate(raw_messages):
        role = _role(raw, index)
        if role in ("system", "developer"):
            text = _joined_text(raw.get("content"), f"messages.[{index}].content")
            if text:
                system.append({"type": "text", "text": text})
        elif role == "user":
            messages.append({"role": "user", "content": _text_blocks(raw.get("content"), index)})
        elif role == "assistant":
            messages.append({"role": "assistant", "content": _assistant_blocks(raw, index)})
        else:
            messages.append({"role": "user", "content": [_tool_result(raw, index)]})
    _check_tool_responses(raw_messages)
    return Conversation(
        model=model,
        system=system,
        tools=_tools(body.get("tools")),
        messages=messages,
        max_tokens=_max_tokens(body),
    )


def completion_body(
    *,
    completion_id: str,
    created: int,
    model: str,
    text: str,
    tool_calls: list[dict[str, Any]],
    finish_reason: str,
    prompt_tokens: int,
    cached_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "system_fingerprint": "fp_emulator",
    }


def _role(raw: object, index: int) -> str:
    if not isinstance(raw, dict):
        raise RequestError(f"Invalid type for 'messages[{index}]': expected an object.", param=f"messages[{index}]")
    role = raw.get("role")
    if role not in _ROLES:
        raise RequestError(
            f"Invalid value: '{role}'. Supported values are: {', '.join(repr(r) for r in _ROLES)}.",
            param=f"messages[{index}].role",
        )
    return str(role)


def _text_parts(content: object, param: str) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise RequestError(f"Invalid type for '{param}': expected a string or an array.", param=param)
    texts = []
    for position, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise RequestError(
                f"Invalid content part at '{param}[{position}]': the emulator accepts only text parts.",
                param=f"{param}[{position}]",
            )
        texts.append(part["text"])
    return texts


def _joined_text(content: object, param: str) -> str:
    return "\n".join(_text_parts(content, param))


def _text_blocks(content: object, index: int) -> list[Block]:
    return [{"type": "text", "text": text} for text in _text_parts(content, f"messages[{index}].content")]


def _assistant_blocks(raw: dict[str, Any], index: int) -> list[Block]:
    content = raw.get("content")
    tool_calls = raw.get("tool_calls") or []
    blocks = [] if content is None else _text_blocks(content, index)
    if not isinstance(tool_calls, list):
        raise RequestError("Invalid type for 'tool_calls': expected an array.", param=f"messages[{index}].tool_calls")
    for position, call in enumerate(tool_calls):
        blocks.append(_tool_use(call, f"messages[{index}].tool_calls[{position}]"))
    if not blocks:
        raise RequestError(
            "Invalid value for 'content': expected a string, got null.", param=f"messages.[{index}].content"
        )
    return blocks


def _tool_use(call: object, param: str) -> Block:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not isinstance(function, dict):
        raise RequestError(f"Invalid value for '{param}': expected an id and a function.", param=param)
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise RequestError(f"Invalid value for '{param}.function': expected a name and arguments.", param=param)
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise RequestError(f"Invalid '{param}.function.arguments': expected a JSON object.", param=param)
    return {"type": "tool_use", "id": call["id"], "name": name, "input": parsed}


def _tool_result(raw: dict[str, Any], index: int) -> Block:
    call_id = raw.get("tool_call_id")
    if not isinstance(call_id, str):
        raise RequestError(
            "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.",
            param=f"messages.[{index}].tool_call_id",
        )
    content = raw.get("content")
    param = f"messages[{index}].content"
    if isinstance(content, list):
        return {"type": "tool_result", "tool_use_id": call_id, "content": _text_blocks(content, index)}
    return {"type": "tool_result", "tool_use_id": call_id, "content": _joined_text(content, param)}


def _check_tool_responses(raw_messages: list[Any]) -> None:
    """Each assistant message with tool_calls must be answered by tool messages right after it, and a tool
    message must answer such a call."""
    pending: list[str] = []
    open_calls: set[str] = set()
    asked_at = 0
    for index, raw in enumerate(raw_messages):
        role = raw["role"]
        if role == "tool":
            if raw["tool_call_id"] not in open_calls:
                raise RequestError(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'.",
                    param=f"messages.[{index}].role",
                )
            pending = [call_id for call_id in pending if call_id != raw["tool_call_id"]]
            continue
        _raise_if_unanswered(pending, asked_at)
        open_calls = set()
        if role == "assistant" and raw.get("tool_calls"):
            pending = [call["id"] for call in raw["tool_calls"]]
            open_calls = set(pending)
            asked_at = index
    _raise_if_unanswered(pending, asked_at)


def _raise_if_unanswered(pending: list[str], asked_at: int) -> None:
    if pending:
        raise RequestError(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
            param=f"messages.[{asked_at}].role",
        )


def _tools(raw: object) -> list[Block]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RequestError("Invalid type for 'tools': expected an array.", param="tools")
    tools = []
    for index, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(item, dict) or item.get("type") != "function" or not isinstance(function, dict):
            raise RequestError(
                f"Invalid value for 'tools[{index}]': expected a function tool.", param=f"tools[{index}]"
            )
        if not isinstance(function.get("name"), str):
            raise RequestError(
                f"Missing required parameter: 'tools[{index}].function.name'.", param=f"tools[{index}].function.name"
            )
        tool: Block = {"name": function["name"]}
        if isinstance(function.get("description"), str):
            tool["description"] = function["description"]
        tool["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
        tools.append(tool)
    return tools


def _max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RequestError(
                f"Invalid '{name}': integer below minimum value. Expected a value >= 1, but got {value!r} instead.",
                param=name,
            )
        return value
    return None
