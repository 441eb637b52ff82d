"""Token estimates of canonical (Anthropic-shaped) messages, and their outlines.

An :class:`Outline` is what the fitter needs to know about a stored message without its content: role, estimate,
the tool calls it makes, the tool results it carries (with their own estimates) and whether it carries text.
The worker stores one beside every message, so a request can be planned without loading message bodies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from plimsoll.estimate import Profile, count_tokens
from plimsoll.profiles import get_profile

Message = Mapping[str, Any]

MESSAGE_OVERHEAD = 4  # role and turn framing of one message
BLOCK_OVERHEAD = 3  # framing of one content block (type, ids)
IMAGE_TOKENS = 1_600  # Anthropic's cost of an image of about 1.15 megapixels, the largest sent unscaled


class InvalidConversation(ValueError):
    """The messages are not a well-formed canonical conversation."""


@dataclass(frozen=True, slots=True)
class Result:
    """One tool result inside a user message."""

    tool_use_id: str
    tokens: int  # estimate of the result's content alone
    is_error: bool | None = None


@dataclass(frozen=True, slots=True)
class Outline:
    role: str
    tokens: int
    tool_uses: tuple[str, ...] = ()
    results: tuple[Result, ...] = ()
    has_text: bool = False  # carries something besides tool results (a user turn starts here)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "tokens": self.tokens}
        if self.tool_uses:
            data["tool_uses"] = list(self.tool_uses)
        if self.results:
            data["results"] = [[r.tool_use_id, r.tokens, r.is_error] for r in self.results]
        if self.has_text:
            data["has_text"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outline:
        return cls(
            role=data["role"],
            tokens=int(data["tokens"]),
            tool_uses=tuple(data.get("tool_uses", ())),
            results=tuple(Result(i, int(t), e) for i, t, e in data.get("results", ())),
            has_text=bool(data.get("has_text", False)),
        )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _result_text(content: Any) -> str:
    """The text of a tool result's content (a string or a list of blocks), images left out."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b.get("text", "") if b.get("type") == "text" else "" if b.get("type") == "image" else _json(b)
            for b in content
        )
    raise InvalidConversation("tool_result content must be a string or a list of blocks")


def _images(content: Any) -> int:
    return sum(1 for b in content if b.get("type") == "image") if isinstance(content, list) else 0


def _block_tokens(block: Mapping[str, Any], profile: Profile) -> int:
    """Estimated tokens of a block's content, without its framing."""
    kind = block["type"]
    if kind == "text":
        return count_tokens(block.get("text", ""), profile)
    if kind == "tool_use":
        return count_tokens(str(block.get("name", "")), profile) + count_tokens(_json(block.get("input")), profile)
    if kind == "tool_result":
        content = block.get("content")
        return count_tokens(_result_text(content), profile) + IMAGE_TOKENS * _images(content)
    if kind == "image":
        return IMAGE_TOKENS
    return count_tokens(_json(block), profile)


def block_size(block: Mapping[str, Any]) -> int:
    """A block's size in characters, to share a given message estimate among its blocks."""
    kind = block["type"]
    if kind == "text":
        return len(block.get("text", ""))
    if kind == "tool_result":
        return len(_result_text(block.get("content")))
    return len(_json(block))


def share_out(total: int, sizes: list[int]) -> list[int]:
    whole = sum(sizes) or 1
    return [total * size // whole for size in sizes]


def outline(message: Message, profile: str | Profile = "claude", estimate: int | None = None) -> Outline:
    """The outline of ``message``. With ``estimate`` given nothing is re-estimated: the message's content tokens
    are shared among its blocks in proportion to their sizes."""
    profile = get_profile(profile)
    role = message.get("role") if isinstance(message, Mapping) else None
    if role not in ("user", "assistant"):
        raise InvalidConversation(f"a message needs role 'user' or 'assistant', got {role!r}")
    content = message.get("content")
    if isinstance(content, str):
        tokens = MESSAGE_OVERHEAD + BLOCK_OVERHEAD + count_tokens(content, profile) if estimate is None else estimate
        return Outline(role, tokens, has_text=True)
    if not isinstance(content, list) or not all(isinstance(b, Mapping) and "type" in b for b in content):
        raise InvalidConversation("message content must be a string or a list of blocks with a 'type'")
    if estimate is None:
        block_tokens = [_block_tokens(b, profile) for b in content]
        tokens = MESSAGE_OVERHEAD + BLOCK_OVERHEAD * len(content) + sum(block_tokens)
    else:
        tokens = estimate
        shared = max(0, estimate - MESSAGE_OVERHEAD - BLOCK_OVERHEAD * len(content))
        block_tokens = [shared] if len(content) == 1 else share_out(shared, [block_size(b) for b in content])
    tool_uses: list[str] = []
    results: list[Result] = []
    has_text = False
    for block, block_estimate in zip(content, block_tokens, strict=True):
        kind = block["type"]
        if kind == "tool_result":
            results.append(Result(_id(block, "tool_use_id"), block_estimate, block.get("is_error")))
        else:
            has_text = True
            if kind == "tool_use":
                tool_uses.append(_id(block, "id"))
    return Outline(role, tokens, tuple(tool_uses), tuple(results), has_text)


def _id(block: Mapping[str, Any], key: str) -> str:
    value = block.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidConversation(f"a {block['type']} block needs a non-empty string {key!r}")
    return value


def estimate_message(message: Message, profile: str | Profile = "claude") -> int:
    """Estimated tokens of one message: its content blocks plus their framing."""
    return outline(message, profile).tokens
