"""The OpenAI Chat Completions wire format: reading requests (their shape checked by ``emulator.openai_request``)
and the rules across fields, writing replies and errors.

Requests become the same conversation shape the Anthropic route uses: system and developer messages form the
system prompt, ``tool_calls`` become tool_use blocks, and each ``tool`` message becomes a user message holding
one tool_result. A function definition is counted as the Anthropic-shaped tool it corresponds to.
"""

from __future__ import annotations

from typing import Any

from emulator.conversation import Block, Conversation, Message, RequestError
from emulator.openai_request import (
    AnyMessage,
    AssistantMessage,
    Content,
    FunctionDefinition,
    SystemMessage,
    ToolMessage,
    UserMessage,
    checked_request,
)


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
    request = checked_request(body)
    if request.stream:
        raise RequestError("The emulator does not stream on the OpenAI route; send stream=false.", param="stream")
    system: list[Block] = []
    messages: list[Message] = []
    for index, message in enumerate(request.messages):
        if isinstance(message, SystemMessage):
            if text := "\n".join(_texts(message.content)):
                system.append({"type": "text", "text": text})
        elif isinstance(message, UserMessage):
            messages.append({"role": "user", "content": _text_blocks(message.content)})
        elif isinstance(message, AssistantMessage):
            messages.append({"role": "assistant", "content": _assistant_blocks(message, index)})
        else:
            messages.append({"role": "user", "content": [_tool_result(message)]})
    _check_tool_responses(request.messages)
    return Conversation(
        model=request.model,
        system=system,
        tools=[_tool(tool.function) for tool in request.tools or []],
        messages=messages,
        max_tokens=request.max_completion_tokens or request.max_tokens,
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


def _texts(content: Content) -> list[str]:
    return [content] if isinstance(content, str) else [part.text for part in content]


def _text_blocks(content: Content) -> list[Block]:
    return [{"type": "text", "text": text} for text in _texts(content)]


def _assistant_blocks(message: AssistantMessage, index: int) -> list[Block]:
    blocks = [] if message.content is None else _text_blocks(message.content)
    for call in message.tool_calls or []:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.function.name, "input": call.function.arguments})
    if not blocks:
        raise RequestError(
            "Invalid value for 'content': expected a string, got null.", param=f"messages.[{index}].content"
        )
    return blocks


def _tool_result(message: ToolMessage) -> Block:
    content = message.content
    kept = "\n".join(_texts(content)) if isinstance(content, str) else _text_blocks(content)
    return {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": kept}


def _check_tool_responses(messages: list[AnyMessage]) -> None:
    """Each assistant message with tool_calls must be answered by tool messages right after it, and a tool
    message must answer such a call."""
    pending: list[str] = []
    open_calls: set[str] = set()
    asked_at = 0
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in open_calls:
                raise RequestError(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'.",
                    param=f"messages.[{index}].role",
                )
            pending = [call_id for call_id in pending if call_id != message.tool_call_id]
            continue
        _raise_if_unanswered(pending, asked_at)
        open_calls = set()
        if isinstance(message, AssistantMessage) and message.tool_calls:
            pending = [call.id for call in message.tool_calls]
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


def _tool(function: FunctionDefinition) -> Block:
    """A function definition as the Anthropic-shaped tool it corresponds to."""
    tool: Block = {"name": function.name}
    if function.description is not None:
        tool["description"] = function.description
    tool["input_schema"] = function.parameters or {"type": "object", "properties": {}}
    return tool
