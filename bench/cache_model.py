"""Anthropic's prompt cache as ``bench.cost_frontier`` prices it: the emulator's model
(:class:`emulator.prompt_cache.AnthropicPromptCache`, where the rules are written down), fed messages with token
counts instead of token ids (the benchmark sends hundreds of thousands of tokens per request).

Each message is as many units as it has blocks, its tokens on the last one, which carries the breakpoint when
the message is one: the lookback counts blocks, and entries sit only at the ends of messages, as the policies
place them. At most the last :data:`MAX_BREAKPOINTS` breakpoints count (the API refuses more). Price, in
uncached input tokens: ``models.prices`` (read 0.1x, write 1.25x with the 5-minute TTL or 2x with the 1-hour
TTL, the rest 1x).

A message's key is the hash of its role and blocks; an entry's key chains the keys of every message up to it, so
a request hits exactly where its prefix equals an earlier request's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from emulator.prompt_cache import AnthropicPromptCache
from models.prices import CachePrices

MODEL = "bench"  # the emulator's cache keys entries by model too
MIN_TOKENS = 1_024  # Claude Sonnet and Opus; Haiku caches from 2,048
LOOKBACK = 20
MAX_BREAKPOINTS = 4


@dataclass(frozen=True)
class Usage:
    read: int
    written: int
    uncached: int

    def cost(self, pricing: CachePrices) -> float:
        return pricing.cost(uncached=self.uncached, written=self.written, read=self.read)


def _block_key(block: Mapping[str, Any]) -> int:
    kind = block["type"]
    if kind == "tool_result":
        content = block["content"]
        text = content if isinstance(content, str) else repr(content)
        return hash((kind, block["tool_use_id"], text, block.get("is_error")))
    if kind == "tool_use":
        return hash((kind, block["id"], block["name"], repr(block["input"])))
    return hash((kind, repr(sorted(block.items()))))


def message_key(message: Mapping[str, Any]) -> int:
    content = message["content"]
    if isinstance(content, str):
        return hash((message["role"], content))
    return hash((message["role"], *(_block_key(b) for b in content)))


def blocks_of(message: Mapping[str, Any]) -> int:
    content = message["content"]
    return 1 if isinstance(content, str) else max(1, len(content))


@dataclass(frozen=True)
class _Counted:
    """A unit of the emulator's cache with a token count instead of token ids."""

    key: bytes
    token_count: int
    cache_control: dict[str, Any] | None


EPHEMERAL = {"type": "ephemeral"}


class AnthropicCache:
    def __init__(self, pricing: CachePrices) -> None:
        self.pricing = pricing
        self._cache = AnthropicPromptCache()
        self._units: dict[tuple[int, int, int, bool], list[_Counted]] = {}  # a message's units, made once

    def send(
        self, keys: Sequence[int], tokens: Sequence[int], blocks: Sequence[int], breakpoints: Sequence[int], now: float
    ) -> Usage:
        """One request: per message its key, tokens and blocks; ``breakpoints``: indices of the messages whose last
        block carries ``cache_control``."""
        marks = set(sorted(set(breakpoints))[-MAX_BREAKPOINTS:])
        units_of = self._units_of
        units = [
            unit
            for index, message in enumerate(zip(keys, tokens, blocks, strict=True))
            for unit in units_of(*message, marked=index in marks)
        ]
        cached = self._cache.apply(
            model=MODEL,
            units=units,
            now=now,
            ttl_seconds=self.pricing.ttl_seconds,
            min_tokens=MIN_TOKENS,
            lookback=LOOKBACK,
        )
        return Usage(read=cached.read, written=cached.written, uncached=sum(tokens) - cached.read - cached.written)

    def _units_of(self, key: int, count: int, block_count: int, *, marked: bool) -> list[_Counted]:
        known = self._units.get((key, count, block_count, marked))
        if known is None:
            known = [_Counted(f"{key}:{block}".encode(), 0, None) for block in range(block_count - 1)]
            known.append(_Counted(f"{key}".encode(), count, EPHEMERAL if marked else None))
            self._units[(key, count, block_count, marked)] = known
        return known
