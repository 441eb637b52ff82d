"""One model request, whatever wire format it came in: the shape the counter, the cache and the agent read.

Messages are in the Anthropic shape with ``content`` always a list of blocks (a string is one text block),
so a request costs the same and reads the same on both routes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Block = dict[str, Any]
Message = dict[str, Any]


class RequestError(ValueError):
    """The request is malformed; the message is what the client is told in the provider's 400 shape.
    ``param`` names the offending parameter where the wire format reports one (OpenAI does)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class Conversation:
    model: str
    system: list[Block]
    """Text blocks (each may carry ``cache_control``)."""
    tools: list[Block]
    """Anthropic-shaped tool definitions: ``name``, optional ``description``, ``input_schema``."""
    messages: list[Message]
    max_tokens: int | None

    @property
    def system_text(self) -> str:
        return "\n".join(block["text"] for block in self.system)

    @property
    def tool_names(self) -> set[str]:
        return {tool["name"] for tool in self.tools}


def tool_result_texts(block: Block) -> list[str]:
    """The texts a tool_result carries: its string content, or the text of each of its text blocks."""
    content = block.get("content")
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    return [item["text"] for item in content]


def message_text(message: Message) -> str:
    """The text blocks of a message, joined by newlines."""
    return "\n".join(block["text"] for block in message["content"] if block["type"] == "text")
