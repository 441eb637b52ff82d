"""The OpenAI adapter, on the official SDK (Chat Completions with tool calls)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
import openai
from openai.types.chat import ChatCompletion

from worker.errors import classify
from worker.providers.base import Reply, Timeouts, Usage, checked_reply
from worker.providers.openai_format import to_openai_messages, to_openai_tools, tool_use_block
from worker.rate_limits import Budget, stated_limits

PROVIDER = "openai"

_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class OpenAIProvider:
    def __init__(
        self, api_key: str, base_url: str | None = None, timeout: float = 120.0, *, timeouts: Timeouts | None = None
    ) -> None:
        self._timeouts = timeouts or Timeouts(idle=timeout)
        # Retries belong to the worker, which knows whether a failure is worth one.
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0)

    def send(
        self,
        *,
        model: str,
        system: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        max_tokens: int,
        breakpoints: Sequence[int] = (),  # OpenAI caches every prefix by itself: nothing to mark
    ) -> Reply:
        request: dict[str, Any] = {
            "model": model,
            "messages": to_openai_messages(system, messages),
            "max_completion_tokens": max_tokens,
        }
        if tools:
            request["tools"] = to_openai_tools(tools)
        try:
            # Not streamed: the whole reply comes at once, so the call waits up to its deadline for it.
            request["timeout"] = httpx2.Timeout(self._timeouts.deadline(max_tokens), connect=self._timeouts.connect)
            raw = self._client.chat.completions.with_raw_response.create(**request)
            completion = raw.parse()
        except openai.APIError as exc:
            raise classify(exc, PROVIDER) from exc
        return checked_reply(_reply(completion, stated_limits(raw.headers), raw.headers.get("x-request-id")), PROVIDER)


def _reply(completion: ChatCompletion, limits: Mapping[str, Budget], request_id: str | None) -> Reply:
    choice = completion.choices[0]
    message = choice.message
    content: list[dict[str, Any]] = []
    text = message.content or message.refusal
    if text:
        content.append({"type": "text", "text": text})
    for call in message.tool_calls or []:
        if call.type == "function":
            content.append(tool_use_block(call.id, call.function.name, call.function.arguments))
    return Reply(
        content=content,
        stop_reason=_STOP_REASONS.get(choice.finish_reason, choice.finish_reason),
        usage=_usage(completion),
        model=completion.model,
        limits=limits,
        request_id=request_id,
    )


def _usage(completion: ChatCompletion) -> Usage:
    """OpenAI's prompt_tokens include the cached ones; split them so ``total_input`` equals prompt_tokens."""
    usage = completion.usage
    if usage is None:
        return Usage(input_tokens=0, output_tokens=0)
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details else 0
    written = (details.cache_write_tokens or 0) if details else 0
    return Usage(
        input_tokens=usage.prompt_tokens - cached - written,
        output_tokens=usage.completion_tokens,
        cache_write_tokens=written,
        cache_read_tokens=cached,
    )
