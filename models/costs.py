"""What a request costs in USD at given ``Prices``: its reported usage split four ways, and the worst case a
request can cost before it is sent (every planned input token uncached, every allowed output token written).

Money is ``Decimal`` throughout: a ledger that adds floats drifts from what the provider billed."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from models.pricing import Prices, Rates

MILLION = Decimal(1_000_000)
FIVE_MINUTES_SECONDS = 300.0


@dataclass(frozen=True)
class Cost:
    """USD, split as a provider bills a request."""

    uncached: Decimal = Decimal(0)
    cache_write: Decimal = Decimal(0)
    cache_read: Decimal = Decimal(0)
    output: Decimal = Decimal(0)

    @property
    def total(self) -> Decimal:
        return self.uncached + self.cache_write + self.cache_read + self.output

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.uncached + other.uncached,
            self.cache_write + other.cache_write,
            self.cache_read + other.cache_read,
            self.output + other.output,
        )


ZERO = Cost()


def cost_of(
    prices: Prices, *, uncached: int, written: int, read: int, output: int, cache_ttl_seconds: float = 300.0
) -> Cost:
    """A request's cost from its reported usage; its input size (all three kinds) picks the price tier, and cache
    writes pay the 1-hour rate when entries live longer than 5 minutes."""
    rates = prices.rates_for(uncached + written + read)
    return Cost(
        uncached=_usd(uncached, rates.input),
        cache_write=_usd(written, _write_rate(rates, cache_ttl_seconds)),
        cache_read=_usd(read, rates.cache_read),
        output=_usd(output, rates.output),
    )


def worst_case(
    prices: Prices, *, input_tokens: int, max_output_tokens: int, cache_ttl_seconds: float = 300.0
) -> Decimal:
    """The most a request can cost: its ``max_tokens`` at the output price, and its planned input at the dearest
    input price. That is the uncached price for a provider without a cache, but a cache write costs more (1.25x
    for 5 minutes on Anthropic), and a request may write all its input, so the larger of the two is taken."""
    rates = prices.rates_for(input_tokens)
    write_rate = _write_rate(rates, cache_ttl_seconds)
    return _usd(input_tokens, max(rates.input, write_rate)) + _usd(max_output_tokens, rates.output)


def _write_rate(rates: Rates, cache_ttl_seconds: float) -> Decimal:
    return rates.cache_write_1h if cache_ttl_seconds > FIVE_MINUTES_SECONDS else rates.cache_write_5m


def _usd(tokens: int, per_million: Decimal) -> Decimal:
    return Decimal(tokens) * per_million / MILLION
