"""Input-token counting with a real tokenizer, unit by unit in prefix order (tools, system, messages).

A *unit* is what Anthropic's prompt cache calls a block: one tool definition, one system text block, or one
content block of a message. Its tokens are the tokenizer's tokens of its text plus fixed framing:

- every unit: ``BLOCK_OVERHEAD`` tokens (the block's delimiters);
- the first unit of every message, and of the system prompt: ``MESSAGE_OVERHEAD`` more (the role header);
- every request: ``REQUEST_OVERHEAD`` tokens at the end (priming the assistant's reply), not in any unit.

With a ``scale`` other than 1, a unit's text counts ``round(n * scale)`` tokens for the tokenizer's ``n``: a model
whose tokenizer counts more (or fewer) tokens than the one Plimsoll's profile was fitted to.

The text of a unit: a tool definition is its compact JSON (``name``, ``description``, ``input_schema`` in that
order, without ``cache_control``); a text block is its text; a tool_use is its name followed by its input as
compact JSON; a tool_result is each of its texts. JSON is written with ``separators=(",", ":")`` and
``ensure_ascii=False``. Framing tokens are represented by negative ids so a unit's token list stays a real
sequence the prefix cache can hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import tiktoken

from emulator.conversation import Block, Conversation, tool_result_texts

BLOCK_OVERHEAD = 1
MESSAGE_OVERHEAD = 3
REQUEST_OVERHEAD = 3

_BLOCK_FRAME = -1
_ROLE_FRAME = {"system": -2, "user": -3, "assistant": -4}
_HEADER_FILL = -5
_SCALE_FILL = -6


@dataclass(frozen=True)
class Unit:
    key: bytes
    """What identifies the unit's content for the prefix cache: its JSON without ``cache_control``."""
    tokens: tuple[int, ...]
    cache_control: dict[str, Any] | None

    @property
    def token_count(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Counted:
    units: list[Unit]
    total: int


def compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class TokenCounter:
    """Counts a conversation with one encoding; remembers recent texts, because an agent sends the same
    documents again on every step."""

    def __init__(self, encoding: tiktoken.Encoding, *, memory: int = 4096, scale: float = 1.0) -> None:
        self.encoding = encoding
        self.scale = scale
        self._encode = lru_cache(maxsize=memory)(self._encode_uncached)

    def encode(self, text: str) -> tuple[int, ...]:
        return self._encode(text)

    def count_text(self, text: str) -> int:
        return len(self._encode(text))

    def count(self, conversation: Conversation) -> Counted:
        units = [self._tool_unit(tool) for tool in conversation.tools]
        for index, block in enumerate(conversation.system):
            units.append(self._unit("system", block, first=index == 0, texts=[block["text"]]))
        for message in conversation.messages:
            for index, block in enumerate(message["content"]):
                units.append(self._unit(message["role"], block, first=index == 0, texts=unit_texts(block)))
        return Counted(units=units, total=sum(len(unit.tokens) for unit in units) + REQUEST_OVERHEAD)

    def _encode_uncached(self, text: str) -> tuple[int, ...]:
        # Text that happens to spell a special token is ordinary text to a real API.
        return tuple(self.encoding.encode(text, disallowed_special=()))

    def _tool_unit(self, tool: Block) -> Unit:
        definition = {name: tool[name] for name in ("name", "description", "input_schema") if name in tool}
        return self._unit("tools", tool, first=False, texts=[compact_json(definition)])

    def _unit(self, role: str, block: Block, *, first: bool, texts: list[str]) -> Unit:
        frame = [_BLOCK_FRAME] * BLOCK_OVERHEAD
        if first:
            frame = [_ROLE_FRAME[role]] + [_HEADER_FILL] * (MESSAGE_OVERHEAD - 1) + frame
        text_tokens = tuple(token for text in texts for token in self._encode(text))
        scaled = (_SCALE_FILL,) * (round(len(text_tokens) * self.scale) - len(text_tokens))
        tokens = tuple(frame) + text_tokens + scaled
        content = {name: value for name, value in block.items() if name != "cache_control"}
        key = compact_json([role, first, content]).encode()
        return Unit(key=hashlib.sha256(key).digest(), tokens=tokens, cache_control=block.get("cache_control"))


def unit_texts(block: Block) -> list[str]:
    """The texts a content block is counted on."""
    kind = block["type"]
    if kind == "text":
        return [block["text"]]
    if kind == "tool_use":
        return [block["name"], compact_json(block["input"])]
    if kind == "tool_result":
        return tool_result_texts(block)
    raise ValueError(f"cannot count a block of type {kind!r}")
