"""What input tokens cost with a prompt cache, relative to an uncached input token (Anthropic's published
multipliers): the one price table that the API's cost (``models.usage``), the demo and every benchmark read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CachePrices:
    name: str
    ttl_seconds: float  # how long an entry lives after its last write or read
    write: float  # a token written to the cache
    read: float = 0.1  # a token read from it

    def cost(self, *, uncached: float, written: float, read: float) -> float:
        """In uncached input tokens."""
        return uncached + self.write * written + self.read * read


FIVE_MINUTES = CachePrices("5-minute TTL", 300.0, write=1.25)
ONE_HOUR = CachePrices("1-hour TTL", 3_600.0, write=2.0)
