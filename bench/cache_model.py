"""Anthropic's prompt cache as ``bench.cost_frontier`` prices it: one model of the published rules.

The same rules as the emulator's :class:`emulator.prompt_cache.AnthropicPromptCache`, on messages with token
counts instead of token ids (the benchmark sends hundreds of thousands of tokens per request):

- entries are written only at breakpoints (blocks marked ``cache_control``, at most 4 per request), when the
  prefix up to them is at least :data:`MIN_TOKENS` long;
- a breakpoint reads the longest entry found at its own block or at one of the ``LOOKBACK`` blocks before it;
- an entry lives for the TTL from its last write or read; an entry at one of the request's breakpoints inside
  the prefix it reads counts as read (the emulator refreshes only the entry hit: with it, a breakpoint kept on a
  stable prefix would expire after five minutes even though every request reads through it, and placing one
  where content changes at a different rate, as Anthropic's guide advises, would be useless);
- price, in uncached input tokens: ``models.prices`` (read 0.1x, write 1.25x with the 5-minute TTL or 2x with
  the 1-hour TTL, the rest 1x).

A message's key is the hash of its role and blocks; an entry's key chains the keys of every message up to it, so
a request hits exactly where its prefix equals an earlier request's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from models.prices import CachePrices

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


class AnthropicCache:
    def __init__(self, pricing: CachePrices) -> None:
        self.pricing = pricing
        self._entries: dict[int, float] = {}  # chained prefix key -> expiry

    def send(
        self, keys: Sequence[int], tokens: Sequence[int], blocks: Sequence[int], breakpoints: Sequence[int], now: float
    ) -> Usage:
        """One request: per message its key, tokens and blocks; ``breakpoints``: indices of the messages whose last
        block carries ``cache_control``."""
        self._entries = {k: t for k, t in self._entries.items() if t > now}
        chained, ends, block_ends = [], [], []
        running, total, block_total = 0, 0, 0
        for key, count, block_count in zip(keys, tokens, blocks, strict=True):
            running = hash((running, key))
            total += count
            block_total += block_count
            chained.append(running)
            ends.append(total)
            block_ends.append(block_total)
        marks = sorted(set(breakpoints))[-MAX_BREAKPOINTS:]
        hit = None
        for mark in marks:
            candidate = mark
            while candidate >= 0 and block_ends[mark] - block_ends[candidate] < LOOKBACK:
                if chained[candidate] in self._entries:
                    hit = candidate if hit is None else max(hit, candidate)
                    break
                candidate -= 1
        read = ends[hit] if hit is not None else 0
        ttl = self.pricing.ttl_seconds
        if hit is not None:  # what the request reads is used: its entries at this request's breakpoints live on
            for mark in [*marks, hit]:
                if mark <= hit and chained[mark] in self._entries:
                    self._entries[chained[mark]] = now + ttl
        written_to = read
        for mark in marks:
            if (hit is None or mark > hit) and ends[mark] >= MIN_TOKENS:
                self._entries[chained[mark]] = now + ttl
                written_to = ends[mark]
        return Usage(read=read, written=written_to - read, uncached=total - written_to)
