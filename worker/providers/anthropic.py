"""The Anthropic adapter, on the official SDK."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import anthropic
import httpx2

from worker.errors import Transient, classify
from worker.providers.base import Reply, Timeouts, Usage, checked_reply
from worker.providers.cache_breakpoints import with_cache_breakpoints
from worker.rate_limits import Budget, stated_limits

PROVIDER = "anthropic"


class AnthropicProvider:
    def __init__(
        self, api_key: str, base_url: str | None = None, timeout: float = 120.0, *, timeouts: Timeouts | None = None
    ) -> None:
        """``timeout``: seconds a call may go without a byte (or all of ``timeouts``)."""
        self._timeouts = timeouts or Timeouts(idle=timeout)
        # Retries belong to the worker, which knows whether a failure is worth one.
        self._client = anthropic.Anthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=httpx2.Timeout(self._timeouts.idle, connect=self._timeouts.connect),
            max_retries=0,
        )

    def send(
        self,
        *,
        model: str,
        system: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        max_tokens: int,
        breakpoints: Sequence[int] = (),
    ) -> Reply:
        system_blocks, marked_messages, marked_tools = with_cache_breakpoints(
            system=system, messages=messages, tools=tools, breakpoints=breakpoints
        )
        request: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": marked_messages}
        if system_blocks:
            request["system"] = system_blocks
        if marked_tools:
            request["tools"] = marked_tools
        # Streamed, so that a long generation keeps bytes coming and only a hang trips the idle timeout.
        seconds = self._timeouts.deadline(max_tokens)
        deadline = time.monotonic() + seconds
        try:
            with self._client.messages.stream(**request) as stream:
                for _ in stream:
                    if time.monotonic() > deadline:
                        raise Transient(f"timeout: the call passed its deadline of {seconds:.0f} s", provider=PROVIDER)
                message = stream.get_final_message()
                headers = stream.response.headers
        except (anthropic.APIError, httpx2.TransportError) as exc:  # a stream cut short raises the transport's
            raise classify(exc, PROVIDER) from exc
        return checked_reply(_reply(message, stated_limits(headers), headers.get("request-id")), PROVIDER)

    def model_limits(self, model: str) -> tuple[int, int] | None:
        """(context window, output limit) as the Models API gives them, or None where it does not say."""
        try:
            info = self._client.models.retrieve(model)
        except anthropic.APIError as exc:
            raise classify(exc, PROVIDER) from exc
        if info.max_input_tokens is None or info.max_tokens is None:
            return None
        return info.max_input_tokens, info.max_tokens


def _reply(message: anthropic.types.Message, limits: Mapping[str, Budget], request_id: str | None) -> Reply:
    usage = message.usage
    return Reply(
        content=[_block(block) for block in message.content],
        stop_reason=message.stop_reason or "end_turn",
        usage=Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_write_tokens=usage.cache_creation_input_tokens or 0,
            cache_read_tokens=usage.cache_read_input_tokens or 0,
        ),
        model=message.model,
        limits=limits,
        request_id=request_id,
    )


def _block(block: anthropic.types.ContentBlock) -> dict[str, Any]:
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    # Other blocks (thinking, server tools) go back to the API as they came.
    dumped: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return dumped
