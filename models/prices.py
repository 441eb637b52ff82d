"""What input tokens cost with a prompt cache, relative to an uncached input token (Anthropic's published
multipliers): the one price table that the API's cost (``models.usage``), the demo and every benchmark read.
Prices in dollars are ``models.pricing``'s; what an operator may set of them is ``PriceOverride``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field


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


USD_PER_MTOK = Field(default=None, ge=0, le=1_000_000, description="USD per million tokens")


class PriceOverride(BaseModel):
    """A model's prices as the operator sets them (PLIMSOLL_PRICES), in USD per million tokens; a field left out
    keeps the published price."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Decimal | None = USD_PER_MTOK
    output: Decimal | None = USD_PER_MTOK
    cache_write_5m: Decimal | None = USD_PER_MTOK
    cache_write_1h: Decimal | None = USD_PER_MTOK
    cache_read: Decimal | None = USD_PER_MTOK
    since: date | None = None  # when these prices took effect (shown with them)
