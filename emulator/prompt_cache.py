"""Prompt caches: Anthropic's explicit breakpoints, and OpenAI's automatic prefix caching.

Anthropic (as published): the cached prefix runs in the order tools, system, messages. Entries are written only at
blocks marked with ``cache_control`` (at most 4 per request). A breakpoint reads the longest existing entry found at
its own block or at one of the blocks before it, looking back at most ``lookback`` blocks in all. An entry lives for
its TTL (5 minutes unless the breakpoint says ``"ttl": "1h"``), refreshed each time it is read; an entry at one of
the request's breakpoints inside the prefix it reads counts as read too (refreshing only the entry hit, a breakpoint
kept on a stable prefix would expire five minutes after it was written although every request reads through it, and
placing one where content changes at a different rate, as Anthropic's guide advises, would be useless). A prefix
shorter than the minimum cacheable length is never written. Usage: ``read`` tokens come from the cache, ``written``
tokens are those between the read point and the last breakpoint written, and the rest of the request is uncached
input.

The same model prices the benchmarks' requests (``bench.cache_model``), on units that carry a token count instead
of token ids (:class:`CacheUnit`).

OpenAI: any prefix of at least ``minimum`` tokens is cached automatically, in steps of 128 tokens; a request
reads the longest such prefix that an earlier request (same model) also had.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Protocol

from emulator.counting import Unit

ONE_HOUR_SECONDS = 3600.0
OPENAI_CACHE_STEP = 128


class CacheUnit(Protocol):
    """What the Anthropic cache needs of a unit of the prompt (a block, in the order tools, system, messages)."""

    @property
    def key(self) -> bytes:
        """Its content, for the prefix's key."""

    @property
    def token_count(self) -> int: ...

    @property
    def cache_control(self) -> dict[str, Any] | None: ...


@dataclass
class _Entry:
    expires_at: float
    ttl: float


@dataclass(frozen=True)
class AnthropicCacheUsage:
    read: int = 0
    written_5m: int = 0
    written_1h: int = 0

    @property
    def written(self) -> int:
        return self.written_5m + self.written_1h


@dataclass(frozen=True)
class _Write:
    position: int
    ttl: float
    one_hour: bool


class AnthropicPromptCache:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, bytes], _Entry] = {}

    def clear(self) -> None:
        self._entries.clear()

    def apply(
        self,
        *,
        model: str,
        units: Sequence[CacheUnit],
        now: float,
        ttl_seconds: float,
        min_tokens: int,
        lookback: int,
    ) -> AnthropicCacheUsage:
        """Look the request up and write its new entries; return what was read and written."""
        self._drop_expired(now)
        breakpoints = [index for index, unit in enumerate(units) if unit.cache_control is not None]
        if not breakpoints:
            return AnthropicCacheUsage()
        keys = _chained_keys(model, units, breakpoints, lookback)
        ends = _prefix_token_ends(units)

        hit = self._longest_hit(keys, breakpoints, lookback, now)
        read = ends[hit] if hit is not None else 0
        if hit is not None:  # what the request reads is used: its entries at this request's breakpoints live on
            for position in {hit, *breakpoints}:
                entry = self._entries.get(keys[position]) if position <= hit else None
                if entry is not None:
                    entry.expires_at = now + entry.ttl

        writes = []
        for position in breakpoints:
            if (hit is None or position > hit) and ends[position] >= min_tokens:
                one_hour = _asks_for_one_hour(units[position])
                writes.append(_Write(position, ONE_HOUR_SECONDS if one_hour else ttl_seconds, one_hour))
        written_5m = written_1h = 0
        start = read
        for write in writes:
            self._entries[keys[write.position]] = _Entry(expires_at=now + write.ttl, ttl=write.ttl)
            segment = ends[write.position] - start
            if write.one_hour:
                written_1h += segment
            else:
                written_5m += segment
            start = ends[write.position]
        return AnthropicCacheUsage(read=read, written_5m=written_5m, written_1h=written_1h)

    def readable(self, *, model: str, units: Sequence[CacheUnit], now: float, lookback: int) -> int:
        """The tokens the request would read from the cache, changing nothing (for rate limits, which count
        the request before it is served)."""
        breakpoints = [index for index, unit in enumerate(units) if unit.cache_control is not None]
        live = {key for key, entry in self._entries.items() if entry.expires_at > now}
        keys = _chained_keys(model, units, breakpoints, lookback)
        hit = self._longest_hit(keys, breakpoints, lookback, now, among=live) if breakpoints else None
        return _prefix_token_ends(units)[hit] if hit is not None else 0

    def _longest_hit(
        self,
        keys: Mapping[int, tuple[str, bytes]],
        breakpoints: list[int],
        lookback: int,
        now: float,
        among: set[tuple[str, bytes]] | None = None,
    ) -> int | None:
        entries = self._entries if among is None else among
        best: int | None = None
        for position in breakpoints:
            for candidate in range(position, max(-1, position - lookback), -1):
                if keys[candidate] in entries:
                    if best is None or candidate > best:
                        best = candidate
                    break
        return best

    def _drop_expired(self, now: float) -> None:
        for key in [key for key, entry in self._entries.items() if entry.expires_at <= now]:
            del self._entries[key]


@dataclass
class OpenAIPrefixCache:
    _entries: dict[tuple[str, bytes], float] = field(default_factory=dict)

    def clear(self) -> None:
        self._entries.clear()

    def apply(self, *, model: str, units: Sequence[Unit], now: float, ttl_seconds: float, minimum: int) -> int:
        """The number of leading tokens read from the cache; every step of this prompt is (re)written."""
        for key in [key for key, expires_at in self._entries.items() if expires_at <= now]:
            del self._entries[key]
        boundary_keys = _token_boundary_keys(model, units, minimum)
        cached = 0
        for boundary, key in boundary_keys:
            if key in self._entries:
                cached = boundary
            self._entries[key] = now + ttl_seconds
        return cached


def _chained_keys(
    model: str, units: Sequence[CacheUnit], breakpoints: Sequence[int], lookback: int
) -> dict[int, tuple[str, bytes]]:
    """For each unit a breakpoint may read or write at (itself and the ``lookback`` units up to it), a key naming
    the whole prefix that ends with it."""
    wanted = {i for position in breakpoints for i in range(max(0, position - lookback + 1), position + 1)}
    wanted.update(breakpoints)
    keys = {}
    running = hashlib.sha256()
    for index, unit in enumerate(units):
        running.update(unit.key)
        if index in wanted:
            keys[index] = (model, running.copy().digest())
    return keys


def _prefix_token_ends(units: Sequence[CacheUnit]) -> list[int]:
    return list(accumulate(unit.token_count for unit in units))


def _asks_for_one_hour(unit: CacheUnit) -> bool:
    return unit.cache_control is not None and unit.cache_control.get("ttl") == "1h"


def _token_boundary_keys(model: str, units: Sequence[Unit], minimum: int) -> list[tuple[int, tuple[str, bytes]]]:
    """A key for the prefix ending at each cacheable token boundary (``minimum``, then every 128 tokens).

    A boundary inside a unit is keyed by the whole units before it plus the unit's leading token ids, so two
    prompts share a key exactly when they share that prefix.
    """
    first = max(minimum, OPENAI_CACHE_STEP)
    keys: list[tuple[int, tuple[str, bytes]]] = []
    whole_units = hashlib.sha256()
    position = 0
    next_boundary = first
    for unit in units:
        end = position + len(unit.tokens)
        partial = whole_units.copy()
        taken = 0
        while next_boundary <= end:
            upto = next_boundary - position
            partial.update(array("q", unit.tokens[taken:upto]).tobytes())
            taken = upto
            keys.append((next_boundary, (model, partial.copy().digest())))
            next_boundary += OPENAI_CACHE_STEP
        whole_units.update(unit.key)
        position = end
    return keys
