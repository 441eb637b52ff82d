"""LangChain's context editing (``ClearToolUsesEdit``) as a strategy, with the conversions it needs.

Canonical (Anthropic-shaped) messages become LangChain messages and back: a user message of tool results becomes
one ``ToolMessage`` per result, and consecutive ``ToolMessage`` s become one user message again. Text results and
plain-text messages round-trip unchanged, so an unchanged message compares equal after the trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware.context_editing import ClearToolUsesEdit
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from bench.strategies import Request
from plimsoll.messages import Message

DEFAULT_TRIGGER = 100_000  # ClearToolUsesEdit's defaults
DEFAULT_KEEP = 3


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b["text"] for b in content if b["type"] == "text")


def to_langchain(messages: Sequence[Message]) -> list[AnyMessage]:
    converted: list[AnyMessage] = []
    for message in messages:
        content = message["content"]
        if message["role"] == "assistant":
            calls = [b for b in content if b["type"] == "tool_use"] if isinstance(content, list) else []
            tool_calls = [{"name": b["name"], "args": b["input"], "id": b["id"], "type": "tool_call"} for b in calls]
            converted.append(AIMessage(content=_text(content), tool_calls=tool_calls))
        elif isinstance(content, str):
            converted.append(HumanMessage(content=content))
        else:
            converted.extend(
                ToolMessage(content=_text(b["content"]), tool_call_id=b["tool_use_id"])
                for b in content
                if b["type"] == "tool_result"
            )
            text = [b for b in content if b["type"] == "text"]
            if text:
                converted.append(HumanMessage(content=_text(text)))
    return converted


def from_langchain(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    converted: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            block = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.text}
            if converted and converted[-1]["role"] == "user" and isinstance(converted[-1]["content"], list):
                converted[-1]["content"].append(block)
            else:
                converted.append({"role": "user", "content": [block]})
        elif isinstance(message, AIMessage):
            text = [{"type": "text", "text": message.text}] if message.text else []
            calls = [
                {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]} for c in message.tool_calls
            ]
            converted.append({"role": "assistant", "content": [*text, *calls]})
        elif converted and isinstance(converted[-1]["content"], list) and converted[-1]["role"] == "user":
            # text that followed results in one user message goes back into it
            converted[-1]["content"].append({"type": "text", "text": message.text})
        else:
            converted.append({"role": "user", "content": message.text})
    return converted


@dataclass(frozen=True)
class LangChainClearToolUses:
    """``ClearToolUsesEdit`` as ``ContextEditingMiddleware`` applies it to every model call: on the whole history,
    counted by ``count_tokens_approximately``; once over ``trigger`` it clears every result but the ``keep``
    newest (clearing at least ``clear_at_least`` tokens' worth)."""

    trigger: int = DEFAULT_TRIGGER
    keep: int = DEFAULT_KEEP
    clear_at_least: int = 0  # ClearToolUsesEdit's default

    @property
    def name(self) -> str:
        at_least = f", clear_at_least {self.clear_at_least:,}" if self.clear_at_least else ""
        return f"ClearToolUsesEdit (trigger {self.trigger:,}, keep {self.keep}{at_least})"

    def request(self, history: Sequence[Message], estimates: Sequence[int], idle_seconds: float = 0.0) -> Request:
        messages = to_langchain(history)
        edit = ClearToolUsesEdit(trigger=self.trigger, keep=self.keep, clear_at_least=self.clear_at_least)
        edit.apply(messages, count_tokens=count_tokens_approximately)
        return Request(from_langchain(messages))
